//! Preconditions of the inference verbs: a request without a meaningful answer is an error that
//! says why, never a plausible number (a pinned POI, a μ outside its bounds, a likelihood that is
//! undefined where the fit starts).

use ns_compute::PreparedData;
use ns_core::error::short_number;
use ns_core::{Error, Result};

use crate::fit::{FitConfig, FitResult, Fitter};
use crate::optimizer::Termination;

/// The POI's index, if it can be varied: not fixed and with a range to vary in (pyhf raises
/// `InvalidModel` / `FailedMinimization` for a pinned POI).
pub fn free_poi(fitter: &Fitter, config: &FitConfig) -> Result<usize> {
    let model = fitter.model();
    let poi = config.poi(model)?;
    let name = &model.parameter_names()[poi];
    if config.fixed[poi] {
        return Err(Error::InvalidModel(format!(
            "the POI '{name}' is fixed (by {} or by the call's fixed parameters): a \
             hypothesis test, limit, scan or ranking needs it free",
            model.origin()
        )));
    }
    let (lo, hi) = config.bounds[poi];
    if !(lo < hi) {
        return Err(Error::InvalidModel(format!(
            "the POI '{name}' has bounds [{lo}, {hi}] ({}): it needs a range to vary in",
            model.origin()
        )));
    }
    Ok(poi)
}

/// A value `what` (e.g. "mu") for parameter `index`: finite and inside its bounds.
pub fn value_in_bounds(
    fitter: &Fitter,
    config: &FitConfig,
    index: usize,
    value: f64,
    what: &str,
) -> Result<()> {
    let (lo, hi) = config.bounds[index];
    if !(value.is_finite() && lo <= value && value <= hi) {
        return Err(Error::InvalidInput(format!(
            "{what} = {} is outside the bounds of '{}', [{}, {}]",
            short_number(value),
            fitter.model().parameter_names()[index],
            short_number(lo),
            short_number(hi)
        )));
    }
    Ok(())
}

/// The POI value `asimov_mu` at which Asimov data are generated (0, or 1 for q0) inside the POI's
/// bounds: a POI whose range excludes it (a lumi or a γ chosen as POI) cannot be tested.
pub fn asimov_poi_in_bounds(fitter: &Fitter, config: &FitConfig, asimov_mu: f64) -> Result<()> {
    let poi = free_poi(fitter, config)?;
    let hypothesis = if asimov_mu == 0.0 {
        "the POI value of the background-only hypothesis behind the Asimov data"
    } else {
        "the POI value of the signal hypothesis behind the Asimov data"
    };
    value_in_bounds(fitter, config, poi, asimov_mu, hypothesis)
}

/// An error if `fit` never started because the likelihood is undefined at its starting point,
/// naming the first bin (channel and bin index) or constraint where it is.
pub fn started(fitter: &Fitter, fit: &FitResult, data: &PreparedData) -> Result<()> {
    if fit.termination != Termination::NonFiniteStart {
        return Ok(());
    }
    let model = fitter.model();
    // Defined in f64 but not on an f32 backend: f32's range, not the model, is the problem.
    if fitter.backend().precision() != ns_compute::Precision::F64
        && fitter
            .twice_nll_on_host(&fit.parameters, data)
            .is_ok_and(f64::is_finite)
    {
        return Err(Error::Computation(format!(
            "the likelihood overflows f32 on the {} backend where the fit starts (it is finite in \
             f64: counts, yields or their terms pass f32's range of about 3.4e38, or its \
             resolution); run it on the cpu or cuda device (f64)",
            fitter.device().name()
        )));
    }
    let place = model
        .where_undefined(&fit.parameters, data)
        .unwrap_or_else(|| "a term of the likelihood is not finite".to_string());
    Err(Error::InvalidModel(format!(
        "the likelihood is undefined where the fit starts ({place}); check the model's yields \
         and the starting parameters"
    )))
}
