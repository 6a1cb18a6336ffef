//! Profile-likelihood scans over any parameter: every point fitted from the configured start and
//! from the unconditional fit.

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

/// Fix `parameter` at each value in turn and fit the rest. Each point is fitted twice, from the
/// configured start and from the unconditional fit, keeping the deeper minimum: HistFactory
/// likelihoods with histosys can have several minima, and one start alone can land in the wrong
/// one. Every point depends on its own fits only — all of them run as one batch (every core, or
/// one device submission) — so a scan split into shards of its values gives the same points.
pub fn profile_scan(
    fitter: &Fitter,
    parameter: usize,
    values: &[f64],
    data: &PreparedData,
    config: &FitConfig,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<ProfileScan> {
    let points: Vec<Vec<f64>> = values.iter().map(|&v| vec![v]).collect();
    let (fits, free_fit) = profile_points(fitter, &[parameter], &points, data, config, progress)?;
    let twice_nll: Vec<f64> = fits.iter().map(|f| f.twice_nll).collect();
    Ok(ProfileScan {
        parameter: fitter.model().parameter_names()[parameter].clone(),
        values: values.to_vec(),
        delta_twice_nll: twice_nll.iter().map(|t| t - free_fit.twice_nll).collect(),
        twice_nll,
        fits,
        free_fit,
    })
}

/// The profile fits at `points` (each a value per parameter of `parameters`, fixed there), with
/// the unconditional fit: as [`profile_scan`] fits each point, all in one batch.
pub fn profile_points(
    fitter: &Fitter,
    parameters: &[usize],
    points: &[Vec<f64>],
    data: &PreparedData,
    config: &FitConfig,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<(Vec<FitResult>, FitResult)> {
    check_scanned(fitter, config, parameters)?;
    if points.is_empty() {
        return Err(ns_core::Error::InvalidInput(
            "a profile scan needs at least one value".into(),
        ));
    }
    for point in points {
        for (&p, &v) in parameters.iter().zip(point) {
            checks::value_in_bounds(fitter, config, p, v, "the scan value")?;
        }
    }
    let config = &fitter.with_scale(data, config)?;
    let free_fit = fitter.fit(data, config)?;
    checks::started(fitter, &free_fit, data)?;
    let from_free_fit = config.starting_at(&free_fit.parameters);
    let fixed_at = |start: &FitConfig, point: &[f64]| {
        parameters
            .iter()
            .zip(point)
            .fold(start.clone(), |c, (&p, &v)| c.with_fixed(p, v))
    };
    // Point k's cold fit is job 2k, its warm fit job 2k + 1.
    let jobs: Vec<FitJob> = points
        .iter()
        .flat_map(|point| {
            [config, &from_free_fit].map(|start| FitJob {
                data: 0,
                config: Arc::new(fixed_at(start, point)),
            })
        })
        .collect();
    let all = fitter.fit_batch(std::slice::from_ref(data), &jobs, &|k| progress(k / 2))?;
    let mut fits = Vec::with_capacity(points.len());
    let mut pairs = all.into_iter();
    while let (Some(cold), Some(warm)) = (pairs.next(), pairs.next()) {
        let (cold, warm) = (cold?, warm?);
        // The deeper minimum; a fit whose twice_nll is NaN is the worst.
        fits.push(
            if warm.twice_nll.is_nan() || cold.twice_nll < warm.twice_nll {
                cold
            } else {
                warm
            },
        );
    }
    Ok((fits, free_fit))
}

/// Refuse scanned parameters that are fixed or named twice, naming them.
pub fn check_scanned(fitter: &Fitter, config: &FitConfig, parameters: &[usize]) -> Result<()> {
    let names = fitter.model().parameter_names();
    for (k, &p) in parameters.iter().enumerate() {
        if config.fixed[p] {
            return Err(ns_core::Error::InvalidInput(format!(
                "'{}' is fixed (in the measurement or by the call's fixed parameters): a profile \
                 scan needs it free",
                names[p]
            )));
        }
        if parameters[..k].contains(&p) {
            return Err(ns_core::Error::InvalidInput(format!(
                "'{}' is named twice: a scan's parameters are distinct",
                names[p]
            )));
        }
    }
    Ok(())
}
