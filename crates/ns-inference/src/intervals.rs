//! Profile-likelihood (MINOS-like) intervals: where the profiled twice_nll rises by `delta`
//! (1 for a 68% interval) on either side of the minimum.

use ns_compute::PreparedData;
use ns_core::{Error, Result};

use crate::fit::{FitConfig, Fitter};
use crate::limits::brent;

#[derive(Clone, Debug)]
pub struct ProfileInterval {
    pub parameter: String,
    pub bestfit: f64,
    /// Lower and upper ends; `None` where the rise is not reached before the bound.
    pub lower: Option<f64>,
    pub upper: Option<f64>,
    /// Asymmetric errors (negative and positive), relative to the best fit.
    pub error_down: Option<f64>,
    pub error_up: Option<f64>,
}

pub fn profile_interval(
    fitter: &Fitter,
    index: usize,
    data: &PreparedData,
    config: &FitConfig,
    delta: f64,
) -> Result<ProfileInterval> {
    let model = fitter.model();
    if config.fixed[index] {
        return Err(Error::InvalidInput(format!(
            "'{}' is fixed: it has no interval",
            model.parameter_names()[index]
        )));
    }
    let best = fitter.fit(
        data,
        &FitConfig {
            uncertainties: true,
            ..config.clone()
        },
    )?;
    let theta_hat = best.parameters[index];
    let sigma = best
        .uncertainties
        .as_ref()
        .map(|u| u[index])
        .filter(|s| s.is_finite() && *s > 0.0)
        .unwrap_or(1.0);
    let start = FitConfig {
        init: best.parameters.clone(),
        uncertainties: false,
        ..config.clone()
    };
    let start = fitter.with_scale(data, &start)?;
    let rise = |value: f64| -> Result<f64> {
        Ok(fitter.fit(data, &start.with_fixed(index, value))?.twice_nll - best.twice_nll - delta)
    };
    let (lo_bound, hi_bound) = config.bounds[index];
    let end = |direction: f64| -> Result<Option<f64>> {
        let bound = if direction > 0.0 { hi_bound } else { lo_bound };
        let mut step = sigma * delta.sqrt();
        let mut inner = theta_hat;
        for _ in 0..40 {
            let outer = theta_hat + direction * step;
            let clamped = if direction > 0.0 {
                outer.min(bound)
            } else {
                outer.max(bound)
            };
            if rise(clamped)? >= 0.0 {
                return brent(&rise, inner, clamped, 1e-8).map(Some);
            }
            if clamped == bound {
                return Ok(None);
            }
            inner = clamped;
            step *= 2.0;
        }
        Ok(None)
    };
    let (lower, upper) = (end(-1.0)?, end(1.0)?);
    Ok(ProfileInterval {
        parameter: model.parameter_names()[index].clone(),
        bestfit: theta_hat,
        lower,
        upper,
        error_down: lower.map(|l| l - theta_hat),
        error_up: upper.map(|u| u - theta_hat),
    })
}
