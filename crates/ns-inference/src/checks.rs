//! Preconditions of the inference verbs: a request without a meaningful answer is an error that
//! says why, never a plausible number (a pinned POI, a μ outside its bounds, a likelihood that is
//! undefined where the fit starts).

use ns_compute::{CpuEvaluator, PreparedData, Scratch};
use ns_core::{Error, Result};

use crate::fit::{FitConfig, FitResult, Fitter};
use crate::optimizer::Termination;

/// The POI's index, if it can be varied: not fixed and with a range to vary in (pyhf raises
/// `InvalidModel` / `FailedMinimization` for a pinned POI).
pub fn free_poi(fitter: &Fitter, config: &FitConfig) -> Result<usize> {
    let model = fitter.model();
    let poi = model.poi()?;
    let name = &model.par_names[poi];
    if config.fixed[poi] {
        return Err(Error::InvalidModel(format!(
            "the POI '{name}' is fixed (\"fixed\": true in measurement '{}', or --fix): a \
             hypothesis test, limit, scan or ranking needs it free",
            model.measurement
        )));
    }
    let (lo, hi) = config.bounds[poi];
    if !(lo < hi) {
        return Err(Error::InvalidModel(format!(
            "the POI '{name}' has bounds [{lo}, {hi}] (measurement '{}'): it needs a range to vary in",
            model.measurement
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
            "{what} = {value} is outside the bounds of '{}', [{lo}, {hi}]",
            fitter.model().par_names[index]
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
    let compiled = &model.compiled;
    // Defined in f64 but not on an f32 backend: f32's range, not the model, is the problem.
    if fitter.backend().precision() != ns_compute::Precision::F64
        && fitter
            .twice_nll(&fit.parameters, data)
            .is_ok_and(f64::is_finite)
    {
        return Err(Error::Computation(format!(
            "the likelihood overflows f32 on the {} backend where the fit starts (it is finite in \
             f64: counts, yields or their terms pass f32's range of about 3.4e38, or its \
             resolution); run it with --gpu cpu or cuda (f64)",
            fitter.device().name()
        )));
    }
    let expected = CpuEvaluator::new(compiled)
        .expected_data(&fit.parameters, &mut Scratch::new(compiled))
        .map(|(main, _)| main)
        .unwrap_or_default();
    let undefined = expected.iter().zip(&data.main).position(|(&lambda, &n)| {
        !(lambda <= ns_compute::MAX_COUNT) || lambda < 0.0 || (lambda == 0.0 && n > 0.0)
    });
    let place = match undefined {
        Some(bin) => {
            let channel = model
                .channels
                .iter()
                .find(|c| (c.bin_start..c.bin_start + c.n_bins).contains(&bin));
            match channel {
                Some(c) => format!(
                    "channel '{}' bin {} expects {} events and observes {}",
                    c.name,
                    bin - c.bin_start,
                    count(expected[bin]),
                    count(data.main[bin])
                ),
                None => format!("main bin {bin} expects {}", count(expected[bin])),
            }
        }
        None => "a constraint term is not finite".to_string(),
    };
    Err(Error::InvalidModel(format!(
        "the likelihood is undefined where the fit starts ({place}); check the model's yields \
         and the starting parameters"
    )))
}

/// A count for a message: plain where short, in exponent form where huge or tiny, and said to
/// overflow where it passes what the likelihood's arithmetic holds.
fn count(v: f64) -> String {
    if v.is_infinite() || v > ns_compute::MAX_COUNT {
        format!(
            "{v:e} (beyond f64's range for a likelihood: at most {:e})",
            ns_compute::MAX_COUNT
        )
    } else if v != 0.0 && !(1e-3..1e6).contains(&v.abs()) {
        format!("{v:e}")
    } else {
        format!("{v}")
    }
}
