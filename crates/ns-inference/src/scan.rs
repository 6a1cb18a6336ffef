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

/// Fix `parameter` at each value in turn and fit the rest. Each point is fitted from the
/// configured start and warm-started, keeping the deeper minimum: HistFactory likelihoods with
/// histosys can have several minima, and a warm start alone can follow the wrong one across the
/// scan. On the CPU the warm start is the previous point (one fit after another); on a device,
/// where one fit at a time is latency-bound, it is the unconditional fit, so that every fit of
/// the scan runs in one batch.
pub fn profile_scan(
    fitter: &Fitter,
    parameter: usize,
    values: &[f64],
    data: &PreparedData,
    config: &FitConfig,
    progress: &mut dyn FnMut(usize),
) -> Result<ProfileScan> {
    let name = &fitter.model().parameter_names()[parameter];
    if config.fixed[parameter] {
        return Err(ns_core::Error::InvalidInput(format!(
            "'{name}' is fixed (in the measurement or by the call's fixed parameters): a profile scan \
             needs it free"
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
    let deeper = |cold: FitResult, warm: FitResult| {
        if cold.twice_nll < warm.twice_nll {
            cold
        } else {
            warm
        }
    };
    let mut fits = Vec::with_capacity(values.len());
    if fitter.batches_on_device() {
        let from_free_fit = config.starting_at(&free_fit.parameters);
        let warm_jobs = values.iter().map(|&v| FitJob {
            data: 0,
            config: Arc::new(from_free_fit.with_fixed(parameter, v)),
        });
        let jobs: Vec<FitJob> = cold_jobs.iter().cloned().chain(warm_jobs).collect();
        let mut all = fitter.fit_batch(std::slice::from_ref(data), &jobs, &|_| {})?;
        let warm_fits = all.split_off(values.len());
        for (k, (cold, warm)) in all.into_iter().zip(warm_fits).enumerate() {
            fits.push(deeper(cold?, warm?));
            progress(k + 1);
        }
    } else {
        let cold_fits = fitter.fit_batch(std::slice::from_ref(data), &cold_jobs, &|_| {})?;
        let mut start = config.clone();
        for ((k, &v), cold) in values.iter().enumerate().zip(cold_fits) {
            let warm = fitter.fit(data, &start.with_fixed(parameter, v))?;
            let fit = deeper(cold?, warm);
            start = start.starting_at(&fit.parameters);
            fits.push(fit);
            progress(k + 1);
        }
    }
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
