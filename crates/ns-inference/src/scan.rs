//! Profile-likelihood scans over any parameter, warm-started from point to point.

use ns_compute::PreparedData;
use ns_core::Result;
use std::sync::Arc;

use crate::checks;
use crate::fit::{FitConfig, FitJob, FitResult, Fitter};

#[derive(Clone, Debug)]
pub struct ProfileScan {
    pub parameter: String,
    pub values: Vec<f64>,
    pub twice_nll: Vec<f64>,
    /// twice_nll minus that of the unconditional fit (t_μ, unclipped).
    pub delta_twice_nll: Vec<f64>,
    pub fits: Vec<FitResult>,
    pub free_fit: FitResult,
}

/// Fix `parameter` at each value in turn and fit the rest. Each point is fitted warm-started from
/// the previous point and also from the configured start, keeping the deeper minimum: HistFactory
/// likelihoods with histosys can have several minima, and a warm start alone can follow the
/// wrong one across the scan.
pub fn profile_scan(
    fitter: &Fitter,
    parameter: usize,
    values: &[f64],
    data: &PreparedData,
    config: &FitConfig,
    progress: &mut dyn FnMut(usize),
) -> Result<ProfileScan> {
    let name = &fitter.model().par_names[parameter];
    if config.fixed[parameter] {
        return Err(ns_core::Error::InvalidInput(format!(
            "'{name}' is fixed (in the measurement or by --fix): a profile scan needs it free"
        )));
    }
    if values.is_empty() {
        return Err(ns_core::Error::InvalidInput(
            "a profile scan needs at least one value".into(),
        ));
    }
    for &v in values {
        checks::value_in_bounds(fitter, config, parameter, v, "the scan value")?;
    }
    let config = &fitter.with_scale(data, config)?;
    let free_fit = fitter.fit(data, config)?;
    checks::started(fitter, &free_fit, data)?;
    // The cold-started fits are independent: one batch (parallel on the CPU, lockstep on a GPU).
    let cold_jobs: Vec<FitJob> = values
        .iter()
        .map(|&v| FitJob {
            data: 0,
            config: Arc::new(config.with_fixed(parameter, v)),
        })
        .collect();
    let cold_fits = fitter.fit_batch(std::slice::from_ref(data), &cold_jobs, &|_| {})?;
    let mut start = config.clone();
    let mut fits = Vec::with_capacity(values.len());
    for ((k, &v), cold) in values.iter().enumerate().zip(cold_fits) {
        let warm = fitter.fit(data, &start.with_fixed(parameter, v))?;
        let cold = cold?;
        let fit = if cold.twice_nll < warm.twice_nll {
            cold
        } else {
            warm
        };
        start.init = fit.parameters.clone();
        fits.push(fit);
        progress(k + 1);
    }
    let twice_nll: Vec<f64> = fits.iter().map(|f| f.twice_nll).collect();
    Ok(ProfileScan {
        parameter: fitter.model().par_names[parameter].clone(),
        values: values.to_vec(),
        delta_twice_nll: twice_nll.iter().map(|t| t - free_fit.twice_nll).collect(),
        twice_nll,
        fits,
        free_fit,
    })
}
