//! Goodness of fit against the saturated model.

use ns_compute::PreparedData;
use ns_core::Result;
use statrs::distribution::{ChiSquared, ContinuousCDF};

use crate::fit::{FitConfig, FitResult, Fitter};

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

/// −2 ln λ of the best fit against the likelihood's saturated model (HistFactory: Poisson(n | n)
/// in every bin and every constraint at its maximum; ndof the main bins minus the free
/// unconstrained parameters, cabinetry's definition).
pub fn goodness_of_fit(
    fitter: &Fitter,
    data: &PreparedData,
    config: &FitConfig,
) -> Result<GoodnessOfFit> {
    let model = fitter.model();
    let fit = fitter.fit(data, config)?;
    crate::checks::started(fitter, &fit, data)?;
    let saturated = model.saturated(data, &config.fixed)?;
    let (twice_nll_saturated, ndof) = (saturated.twice_nll, saturated.ndof);
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
