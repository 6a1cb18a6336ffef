//! Nuisance-parameter ranking with cabinetry's conventions: the shift of the POI when each
//! parameter is fixed at its best fit ± its post-fit (and, for constrained ones, pre-fit)
//! uncertainty and everything else is refitted.

use ns_compute::PreparedData;
use ns_core::{Error, Result};
use rayon::prelude::*;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::fit::{FitConfig, FitResult, Fitter};

/// One parameter's entry in the ranking.
#[derive(Clone, Debug)]
pub struct RankingEntry {
    pub name: String,
    pub index: usize,
    pub bestfit: f64,
    pub uncertainty: f64,
    /// (θ̂ − θ₀)/σ₀ for constrained parameters.
    pub pull: Option<f64>,
    /// σ̂/σ₀ for constrained parameters.
    pub constraint: Option<f64>,
    /// Δμ̂ with the parameter fixed at θ̂ ± σ₀ (constrained parameters only).
    pub impact_prefit_up: Option<f64>,
    pub impact_prefit_down: Option<f64>,
    /// Δμ̂ with the parameter fixed at θ̂ ± σ̂.
    pub impact_postfit_up: f64,
    pub impact_postfit_down: f64,
}

#[derive(Clone, Debug)]
pub struct Ranking {
    pub poi: String,
    pub nominal: FitResult,
    /// Sorted by the larger of |Δμ̂| post-fit up/down, largest first.
    pub entries: Vec<RankingEntry>,
    /// Refits that did not converge, by parameter and direction.
    pub failed_refits: Vec<String>,
}

/// Rank every free non-POI parameter; refits start from the nominal best fit and run in parallel.
pub fn ranking(
    fitter: &Fitter,
    data: &PreparedData,
    config: &FitConfig,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<Ranking> {
    let model = fitter.model();
    let poi = model.poi()?;
    let nominal = fitter.fit(
        data,
        &FitConfig {
            uncertainties: true,
            ..config.clone()
        },
    )?;
    let sigmas = nominal.uncertainties.clone().ok_or_else(|| {
        Error::InvalidModel(format!(
            "no uncertainties at the best fit: {}",
            nominal.warning.clone().unwrap_or_default()
        ))
    })?;
    let start = FitConfig {
        init: nominal.parameters.clone(),
        uncertainties: false,
        ..config.clone()
    };
    let start = fitter.with_scale(data, &start)?;
    let mu_hat = nominal.parameters[poi];

    // (parameter, prefit width if constrained)
    let mut targets = Vec::new();
    for set in &model.parameter_sets {
        for i in 0..set.n_parameters {
            let index = set.offset + i;
            if index != poi && !config.fixed[index] {
                targets.push((index, set.prefit_width(i), set.auxdata.get(i).copied()));
            }
        }
    }
    let done = AtomicUsize::new(0);
    let refit = |index: usize, value: f64| -> (Option<f64>, Option<String>) {
        let (lo, hi) = config.bounds[index];
        let value = value.clamp(lo, hi);
        let result = fitter.fit(data, &start.with_fixed(index, value));
        progress(done.fetch_add(1, Ordering::Relaxed) + 1);
        match result {
            Ok(fit) if fit.converged => (Some(fit.parameters[poi] - mu_hat), None),
            Ok(fit) => (
                Some(fit.parameters[poi] - mu_hat),
                Some(format!(
                    "{} at {value}: {}",
                    model.par_names[index],
                    fit.termination.describe()
                )),
            ),
            Err(e) => (
                None,
                Some(format!("{} at {value}: {e}", model.par_names[index])),
            ),
        }
    };
    let rows: Vec<(RankingEntry, Vec<String>)> = targets
        .par_iter()
        .map(|&(index, prefit, center)| {
            let theta = nominal.parameters[index];
            let sigma = sigmas[index];
            let mut failures = Vec::new();
            let mut impact = |value: f64| {
                let (delta, failure) = refit(index, value);
                failures.extend(failure);
                delta.unwrap_or(f64::NAN)
            };
            let (post_up, post_down) = (impact(theta + sigma), impact(theta - sigma));
            let (pre_up, pre_down) = match prefit {
                Some(w) => (Some(impact(theta + w)), Some(impact(theta - w))),
                None => (None, None),
            };
            let entry = RankingEntry {
                name: model.par_names[index].clone(),
                index,
                bestfit: theta,
                uncertainty: sigma,
                pull: prefit.zip(center).map(|(w, c)| (theta - c) / w),
                constraint: prefit.map(|w| sigma / w),
                impact_prefit_up: pre_up,
                impact_prefit_down: pre_down,
                impact_postfit_up: post_up,
                impact_postfit_down: post_down,
            };
            (entry, failures)
        })
        .collect();
    let mut failed_refits = Vec::new();
    let mut entries = Vec::with_capacity(rows.len());
    for (entry, failures) in rows {
        entries.push(entry);
        failed_refits.extend(failures);
    }
    let key = |e: &RankingEntry| e.impact_postfit_up.abs().max(e.impact_postfit_down.abs());
    entries.sort_by(|a, b| key(b).total_cmp(&key(a)).then(a.index.cmp(&b.index)));
    Ok(Ranking {
        poi: model.par_names[poi].clone(),
        nominal,
        entries,
        failed_refits,
    })
}
