//! Nuisance-parameter ranking with cabinetry's conventions: the shift of the POI when each
//! parameter is fixed at its best fit ± its post-fit (and, for constrained ones, pre-fit)
//! uncertainty and everything else is refitted.

use crate::fit::{FitConfig, FitJob, FitResult, Fitter};
use ns_compute::PreparedData;
use ns_core::{Error, Result};
use rayon::prelude::*;
use std::ops::Range;
use std::sync::Arc;

/// One parameter's entry in the ranking.
#[derive(Clone, Debug)]
pub struct RankingEntry {
    pub name: String,
    pub index: usize,
    pub bestfit: f64,
    pub uncertainty: f64,
    /// (θ̂ − θ₀)/σ₀ for constrained parameters, θ₀ the constraint's centre (1 for a shapesys γ).
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
    pub poi_index: usize,
    pub nominal: FitResult,
    /// Sorted by the larger of |Δμ̂| post-fit up/down, largest first.
    pub entries: Vec<RankingEntry>,
    /// Refits that did not converge, by parameter and direction.
    pub failed_refits: Vec<String>,
}

/// Rank every free non-POI parameter; refits start from the nominal best fit and run as one
/// batch. On a GPU the split is hybrid: the nominal fit and its Hessian on the CPU in f64 (one
/// fit, where a device has nothing to batch), the refits on the device.
pub fn ranking(
    fitter: &Fitter,
    data: &PreparedData,
    config: &FitConfig,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<Ranking> {
    ranking_batch(fitter, &[(data, config)], progress)?
        .pop()
        .expect("one ranking per request")
}

/// The ranking of the parameters `share` of the [`ranked`] ones (a shard's share): the nominal
/// fit and the refits of those parameters only, each the same bits as in the whole ranking.
/// Whole rankings are the shards' entries concatenated, ordered by [`impact_order`].
pub fn ranking_share(
    fitter: &Fitter,
    data: &PreparedData,
    config: &FitConfig,
    share: Range<usize>,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<Ranking> {
    rankings(fitter, &[(data, config)], Some(share), progress)?
        .pop()
        .expect("one ranking per request")
}

/// How many parameters a ranking of `model` under `config` ranks: every free one but the POI.
pub fn ranked(model: &dyn ns_compute::Likelihood, config: &FitConfig) -> Result<usize> {
    let poi = config.poi(model)?;
    Ok(targets(model, poi, config).len())
}

/// The sort key of a ranking entry: the larger of |Δμ̂| post-fit up/down (one NaN for all, so that
/// the order never depends on a NaN's payload bits).
pub fn impact_key(up: f64, down: f64) -> f64 {
    let key = up.abs().max(down.abs());
    if key.is_nan() { f64::NAN } else { key }
}

/// The order of (key, parameter index) pairs in a ranking: largest key first (a failed refit's
/// NaN first), ties in parameter order.
pub fn impact_order(a: (f64, usize), b: (f64, usize)) -> std::cmp::Ordering {
    b.0.total_cmp(&a.0).then(a.1.cmp(&b.1))
}

/// A ranking whose nominal fit is done: the refits it needs.
struct RankingPlan {
    request: usize,
    poi: usize,
    nominal: FitResult,
    sigmas: Vec<f64>,
    targets: Vec<(usize, Option<f64>, Option<f64>)>,
    jobs: Vec<FitJob>,
    refit_values: Vec<(usize, f64)>,
}

/// Rankings of one model for several (dataset, configuration) requests, their refits fitted as
/// one batch (on a GPU, one device batch instead of one per ranking). Each ranking is the same
/// bits as [`ranking`] gives it alone. A request without a meaningful answer gets its own error;
/// an interrupt or a device failure fails the call. `progress` receives the refits done over all
/// rankings.
pub fn ranking_batch(
    fitter: &Fitter,
    requests: &[(&PreparedData, &FitConfig)],
    progress: &(dyn Fn(usize) + Sync),
) -> Result<Vec<Result<Ranking>>> {
    rankings(fitter, requests, None, progress)
}

/// [`ranking_batch`] of every ranked parameter, or of the `share` of them.
fn rankings(
    fitter: &Fitter,
    requests: &[(&PreparedData, &FitConfig)],
    share: Option<Range<usize>>,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<Vec<Result<Ranking>>> {
    let host;
    let nominal_fitter = if fitter.batches_on_device() {
        host = Fitter::new(fitter.model()).with_interrupt(fitter.interrupt().clone());
        &host
    } else {
        fitter
    };
    let planned: Vec<Result<RankingPlan>> = requests
        .par_iter()
        .enumerate()
        .map(|(i, &(data, config))| plan(nominal_fitter, i, data, config, share.clone()))
        .collect();
    // An interrupt during a nominal fit stops every ranking.
    fitter.check_interrupt()?;
    let mut results: Vec<Option<Result<Ranking>>> = requests.iter().map(|_| None).collect();
    let mut plans = Vec::new();
    for (i, p) in planned.into_iter().enumerate() {
        match p {
            Ok(p) => plans.push(p),
            Err(e) => results[i] = Some(Err(e)),
        }
    }
    let datasets: Vec<PreparedData> = plans
        .iter()
        .map(|p| requests[p.request].0.clone())
        .collect();
    let jobs: Vec<FitJob> = plans
        .iter()
        .enumerate()
        .flat_map(|(d, p)| {
            p.jobs.iter().map(move |job| FitJob {
                data: d,
                config: job.config.clone(),
            })
        })
        .collect();
    let mut refits = fitter.fit_batch(&datasets, &jobs, progress)?.into_iter();
    for p in plans {
        let own: Vec<Result<FitResult>> = refits.by_ref().take(p.jobs.len()).collect();
        let request = p.request;
        results[request] = Some(Ok(conclude(fitter.model(), p, own)));
    }
    Ok(results
        .into_iter()
        .map(|r| r.expect("every request has its ranking"))
        .collect())
}

/// A ranking's nominal fit with uncertainties and its refit jobs.
fn plan(
    fitter: &Fitter,
    request: usize,
    data: &PreparedData,
    config: &FitConfig,
    share: Option<Range<usize>>,
) -> Result<RankingPlan> {
    let model = fitter.model();
    let poi = crate::checks::free_poi(fitter, config)?;
    let nominal = fitter.fit(
        data,
        &FitConfig {
            uncertainties: true,
            ..config.clone()
        },
    )?;
    crate::checks::started(fitter, &nominal, data)?;
    let sigmas = nominal.uncertainties.clone().ok_or_else(|| {
        Error::InvalidModel(format!(
            "no uncertainties at the best fit ({}): the ranking needs them to shift each parameter",
            nominal
                .warning
                .clone()
                .unwrap_or_else(|| nominal.termination.describe().to_string())
        ))
    })?;
    let start = FitConfig {
        init: nominal.parameters.clone(),
        uncertainties: false,
        ..config.clone()
    };
    let start = fitter.with_scale(data, &start)?;
    let mut targets = targets(model, poi, config);
    if let Some(share) = share {
        if share.start > share.end || share.end > targets.len() {
            return Err(Error::InvalidInput(format!(
                "ranked parameters {}..{} of {}",
                share.start,
                share.end,
                targets.len()
            )));
        }
        targets = targets[share].to_vec();
    }
    let (jobs, refit_values) = refit_jobs(&targets, &nominal.parameters, &sigmas, &start, config);
    Ok(RankingPlan {
        request,
        poi,
        nominal,
        sigmas,
        targets,
        jobs,
        refit_values,
    })
}

/// The ranking from its refits: impacts sorted by size, failed refits named.
fn conclude(
    model: &dyn ns_compute::Likelihood,
    plan: RankingPlan,
    refits: Vec<Result<FitResult>>,
) -> Ranking {
    let RankingPlan {
        poi,
        nominal,
        sigmas,
        targets,
        refit_values,
        ..
    } = plan;
    let mu_hat = nominal.parameters[poi];
    let mut failures = Vec::new();
    let mut impacts = refits
        .into_iter()
        .zip(&refit_values)
        .map(|(result, &(index, value))| match result {
            Ok(fit) => {
                if !fit.converged {
                    failures.push(format!(
                        "{} at {value}: {}",
                        model.parameter_names()[index],
                        fit.termination.describe()
                    ));
                }
                fit.parameters[poi] - mu_hat
            }
            Err(e) => {
                failures.push(format!(
                    "{} at {value}: {e}",
                    model.parameter_names()[index]
                ));
                f64::NAN
            }
        });
    let mut entries: Vec<RankingEntry> = targets
        .iter()
        .map(|&(index, prefit, center)| {
            let theta = nominal.parameters[index];
            let sigma = sigmas[index];
            let mut next = || impacts.next().unwrap_or(f64::NAN);
            let (post_up, post_down) = (next(), next());
            let (pre_up, pre_down) = match prefit {
                Some(_) => (Some(next()), Some(next())),
                None => (None, None),
            };
            RankingEntry {
                name: model.parameter_names()[index].clone(),
                index,
                bestfit: theta,
                uncertainty: sigma,
                pull: prefit.zip(center).map(|(w, c)| (theta - c) / w),
                constraint: prefit.map(|w| sigma / w),
                impact_prefit_up: pre_up,
                impact_prefit_down: pre_down,
                impact_postfit_up: post_up,
                impact_postfit_down: post_down,
            }
        })
        .collect();
    drop(impacts);
    let key = |e: &RankingEntry| {
        (
            impact_key(e.impact_postfit_up, e.impact_postfit_down),
            e.index,
        )
    };
    entries.sort_by(|a, b| impact_order(key(a), key(b)));
    Ranking {
        poi: model.parameter_names()[poi].clone(),
        poi_index: poi,
        nominal,
        entries,
        failed_refits: failures,
    }
}

/// The parameters ranked: every free one but the POI, as (index, prefit width and centre where
/// constrained).
fn targets(
    model: &dyn ns_compute::Likelihood,
    poi: usize,
    config: &FitConfig,
) -> Vec<(usize, Option<f64>, Option<f64>)> {
    (0..model.n_params())
        .filter(|&index| index != poi && !config.fixed[index])
        .map(|index| {
            let constraint = model.constraint(index);
            (
                index,
                constraint.map(|(_, width)| width),
                constraint.map(|(center, _)| center),
            )
        })
        .collect()
}

/// Every refit of every target (±1σ postfit, then ±prefit width where constrained) as one batch
/// of jobs — parallel on the CPU, lockstep on a device — with the (parameter, value) each fixes.
fn refit_jobs(
    targets: &[(usize, Option<f64>, Option<f64>)],
    bestfit: &[f64],
    sigmas: &[f64],
    start: &FitConfig,
    config: &FitConfig,
) -> (Vec<FitJob>, Vec<(usize, f64)>) {
    let mut jobs = Vec::new();
    let mut refit_values = Vec::new();
    for &(index, prefit, _) in targets {
        let theta = bestfit[index];
        let sigma = sigmas[index];
        let mut shifts = vec![sigma, -sigma];
        if let Some(w) = prefit {
            shifts.extend([w, -w]);
        }
        for shift in shifts {
            let (lo, hi) = config.bounds[index];
            let value = (theta + shift).clamp(lo, hi);
            refit_values.push((index, value));
            jobs.push(FitJob {
                data: 0,
                config: Arc::new(start.with_fixed(index, value)),
            });
        }
    }
    (jobs, refit_values)
}
