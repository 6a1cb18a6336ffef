//! Goodness of fit against the saturated model.

use ns_compute::PreparedData;
use ns_core::Result;
use statrs::distribution::{ChiSquared, ContinuousCDF};

use crate::fit::{FitConfig, FitResult, Fitter};
use ns_core::Constraint;

#[derive(Clone, Debug)]
pub struct GoodnessOfFit {
    /// twice_nll(best fit) − twice_nll(saturated) = −2 ln λ.
    pub minus_two_log_lambda: f64,
    pub ndof: usize,
    /// χ² survival probability of −2 ln λ with `ndof` degrees of freedom.
    pub p_value: f64,
    pub twice_nll_bestfit: f64,
    pub twice_nll_saturated: f64,
    pub fit: FitResult,
}

/// The saturated model has Poisson(n | n) in every bin and every constraint term at its
/// maximum (θ = aux for Gaussian, γτ = aux for Poisson); ndof is the number of main bins minus
/// the number of free unconstrained parameters (cabinetry's definition).
pub fn goodness_of_fit(
    fitter: &Fitter,
    data: &PreparedData,
    config: &FitConfig,
) -> Result<GoodnessOfFit> {
    let model = fitter.model();
    let fit = fitter.fit(data, config)?;
    crate::checks::started(fitter, &fit, data)?;
    // The saturated NLL is the data-only constant itself: every Poisson deviance is zero at
    // λ = n and every Gaussian pull at θ = aux.
    let twice_nll_saturated = 2.0 * data.constant;
    let unconstrained_free = model
        .parameter_sets
        .iter()
        .filter(|s| s.constraint == Constraint::None)
        .map(|s| {
            (0..s.n_parameters)
                .filter(|&i| !config.fixed[s.offset + i])
                .count()
        })
        .sum::<usize>();
    let ndof = model.compiled.n_main.saturating_sub(unconstrained_free);
    let minus_two_log_lambda = fit.twice_nll - twice_nll_saturated;
    let p_value = if ndof == 0 {
        f64::NAN
    } else {
        ChiSquared::new(ndof as f64)
            .map(|d| d.sf(minus_two_log_lambda.max(0.0)))
            .unwrap_or(f64::NAN)
    };
    Ok(GoodnessOfFit {
        minus_two_log_lambda,
        ndof,
        p_value,
        twice_nll_bestfit: fit.twice_nll,
        twice_nll_saturated,
        fit,
    })
}
