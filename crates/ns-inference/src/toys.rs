//! Toy-based hypothesis tests with pyhf's `ToyCalculator` semantics.
//!
//! Toys are generated at the conditional MLEs of the observed data — μ = μ_test for the
//! signal-plus-background ensemble, μ = 0 for background only (μ = 1 and μ = 0 for q0) — with
//! main bins ~ Poisson(ν), Gaussian auxiliary data ~ Normal(θ, σ) and Poisson auxiliary data ~
//! Poisson(γτ). Toy `i` of hypothesis `h` with seed `s` is the same dataset whatever the thread
//! count, and on the CPU or a CUDA device (the GPU samples with the CPU's generator, bit for bit).
//! Per-toy test statistics below 1e-9 are set to 0 (as is the observed one): pyhf only clips
//! negatives, which lets p-values flip on rounding noise.
//!
//! Both ensembles are fitted as one batch — a free and a fixed-μ fit per toy — through
//! [`Fitter::fit_batch`]: in parallel on the CPU, in lockstep on a GPU. Several tests of one
//! model (other μ, seeds, data) can share those batches ([`hypotest_toys_batch`]), with the same
//! results as alone.

use ns_compute::rng::ToyStream;
use ns_compute::{PreparedData, SampledToys};
use ns_core::Result;
use ns_core::optim::{REPEATED_END_ATOL, Termination};
use rayon::prelude::*;
use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;

use crate::checks;
use crate::fit::{FitConfig, FitJob, FitResult, Fitter, STIFF_SCALE_CEILING, UNBOUNDED_BELOW};
use crate::hypotest::{ClsValues, TestStatistic, statistic_from_fits};

/// Most toys per hypothesis: their test statistics alone take 1.6 GB.
pub const MAX_TOYS: usize = 100_000_000;
/// Toys per hypothesis generated and fitted at a time: memory stays bounded whatever `n_toys`.
const TOY_CHUNK: usize = 8192;
/// Most values (bins + auxdata over all toys) that `fit_toys` returns: 2 GB.
const MAX_RETURNED_TOY_VALUES: usize = 250_000_000;

/// Most toys per hypothesis whose fits may fail before a toy result is refused: failed fits are
/// not random (they gather in the tails), so a p-value from the rest is biased by an unknown
/// amount. Below this the result stands, with a warning naming the count.
pub const MAX_FAILED_TOY_FRACTION: f64 = 0.01;

/// Test statistics below this are rounding noise around zero.
pub const TESTSTAT_ZERO: f64 = 1e-9;

/// Stream numbers of the two ensembles.
const SIGNAL_STREAM: u32 = 0;
const BACKGROUND_STREAM: u32 = 1;

/// Generate toy `index` of `stream` at parameters `params`: main and auxiliary data.
pub fn generate_toy(
    fitter: &Fitter,
    params: &[f64],
    seed: u64,
    stream: u32,
    index: u32,
) -> Result<PreparedData> {
    let mut toys =
        fitter
            .model()
            .sample_toys(fitter.host(), &[(params, stream)], seed, index, 1)?;
    toys.host
        .pop()
        .ok_or_else(|| ns_core::Error::Computation("no toy was sampled".into()))
}

/// One ensemble of toy test statistics.
#[derive(Clone, Debug, Default)]
pub struct ToyEnsemble {
    /// Test statistics of the toys whose fits converged, in toy order.
    pub teststats: Vec<f64>,
    pub n_failed: usize,
    /// Why fits failed, with counts.
    pub failures: BTreeMap<String, usize>,
}

/// Result of a toy-based hypothesis test.
#[derive(Clone, Debug)]
pub struct ToyHypotest {
    pub mu: f64,
    pub test_statistic: TestStatistic,
    pub teststat_obs: f64,
    /// Expected values: percentiles −2σ…+2σ of the p-values over the background-only toys.
    pub cls: ClsValues,
    pub n_toys: usize,
    pub seed: u64,
    pub signal: ToyEnsemble,
    pub background: ToyEnsemble,
    /// Said when some toy fits failed (their toys are left out of the p-values).
    pub warning: Option<String>,
}

/// The failures of one ensemble in words: "3 of 1000 signal-plus-background toys (...)".
fn failures_in_words(name: &str, ensemble: &ToyEnsemble, n_toys: usize) -> String {
    let reasons: Vec<String> = ensemble
        .failures
        .iter()
        .map(|(reason, count)| format!("{count}× {reason}"))
        .collect();
    format!(
        "{} of {n_toys} {name} toys ({})",
        ensemble.n_failed,
        reasons.join("; ")
    )
}

fn clip(t: f64) -> f64 {
    if t < TESTSTAT_ZERO { 0.0 } else { t }
}

/// Toy datasets `first..first + n_toys` of each `(generating parameters, stream)` ensemble,
/// ensemble after ensemble, sampled by the fitter's backend (on a device, they stay there for
/// the fits). On every backend toy `i` of stream `s` is the same dataset.
fn generate_ensembles(
    fitter: &Fitter,
    ensembles: &[(&[f64], u32)],
    first: u32,
    n_toys: usize,
    seed: u64,
) -> Result<SampledToys> {
    fitter
        .model()
        .sample_toys(fitter.backend(), ensembles, seed, first, n_toys)
}

/// Fit `jobs` against sampled toys: on the backend's copy where it sampled them itself.
fn fit_sampled(
    fitter: &Fitter,
    toys: &SampledToys,
    jobs: &[FitJob],
    progress: &(dyn Fn(usize) + Sync),
) -> Result<Vec<Result<FitResult>>> {
    match &toys.resident {
        Some(resident) => fitter.fit_batch_on(resident, &toys.host, jobs, progress),
        None => fitter.fit_batch(&toys.host, jobs, progress),
    }
}

/// Per-toy outcome: the two fits behind a test statistic.
#[derive(Clone, Debug)]
pub struct ToyFitPair {
    pub free_fit: FitResult,
    pub fixed_fit: FitResult,
}

/// The toys of one hypothesis test within a batch of sampled toys: its signal-plus-background
/// then its background-only toys, `count` of each.
struct ToySegment<'a> {
    stat: TestStatistic,
    mu: f64,
    config: &'a FitConfig,
    /// The observed data's fit at μ: where a failed fixed-μ fit restarts.
    at_mu: &'a [f64],
    /// Generating parameters of the two ensembles.
    generating: [&'a [f64]; 2],
    count: usize,
}

/// Most rounds in which toy fits that stalled go on from where they stopped (each a batch of
/// the fits still short that the last round lowered). A fit along a wall of the published
/// sleptons likelihood closes about half its gap to the minimum per round (0.59, 0.26, 0.12, …
/// units of twice_nll) and is certified in the twelfth.
const CONTINUATION_ROUNDS: usize = 30;

/// Starts at random around the restart point for toy fits that fail after their restart and
/// continuation ([`perturbed_start`]).
const PERTURBED_STARTS: usize = 3;

/// The key of the perturbed starts' stream (FNV-1a's offset basis).
const PERTURBED_SEED: u64 = 0xcbf2_9ce4_8422_2325;

/// Largest lowering of twice_nll by empty bins expecting negative counts that a converged toy
/// fit may owe. A stationary point of pyhf's likelihood can sit slightly past λ = 0 and owe 1–4
/// (toys of the 3ℓ on-shell, EWK and sbottom likelihoods, an empty bin at −0.003 to −2 events);
/// fits that ran to the box's edge owe 10² to 10¹⁹ (the off-shell, staus and high-mass
/// likelihoods). None of 2000 toys per published likelihood owes between 10 and 10².
const BOX_HELD_GAIN: f64 = 10.0;

/// Fit every toy twice (free, and with the POI fixed at its segment's μ), all toys of all
/// segments in one batch, from each segment's starting point as pyhf does.
///
/// A fit that does not converge is fitted again, in a second batch, from the observed data's fit
/// of its own hypothesis: a free fit from its ensemble's generating parameters (the point the
/// toy fluctuates around), a fixed-μ fit from the fit at μ (`at_mu`). From pyhf's suggested init,
/// fits of background-only toys of a cross-section measurement (the published tt̄ ℓ+jets
/// likelihood) wander for thousands of iterations; from there they converge. Fits still short
/// then go on from their own end points (up to [`CONTINUATION_ROUNDS`]), scaled by the curvature
/// there. Fits that converge the first time are untouched, and every backend restarts the same
/// fits from the same points.
/// A fit's result depends on its own job only, so a segment fitted beside others gets the same
/// bits as alone. Returns the fit pairs in dataset order.
fn fit_toy_pairs(
    fitter: &Fitter,
    segments: &[ToySegment],
    toys: &SampledToys,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<Vec<Result<ToyFitPair>>> {
    let fixed_mu = |s: &ToySegment| {
        if s.stat == TestStatistic::Q0 {
            0.0
        } else {
            s.mu
        }
    };
    let n_toys: usize = segments.iter().map(|s| 2 * s.count).sum();
    if n_toys != toys.host.len() {
        return Err(ns_core::Error::Computation(format!(
            "{} toy datasets for segments of {n_toys} toys",
            toys.host.len()
        )));
    }
    // Per toy: its segment's two shared configurations; fit 2t is toy t's free fit, 2t + 1 its
    // fixed-μ fit.
    let mut jobs = Vec::with_capacity(2 * n_toys);
    for s in segments {
        let free = Arc::new(s.config.clone());
        let poi = s.config.poi(fitter.model())?;
        let fixed = Arc::new(s.config.with_fixed(poi, fixed_mu(s)));
        for _ in 0..2 * s.count {
            let data = jobs.len() / 2;
            jobs.push(FitJob {
                data,
                config: free.clone(),
            });
            jobs.push(FitJob {
                data,
                config: fixed.clone(),
            });
        }
    }
    // Two fits per toy: report toys, not fits.
    let per_toy = |fits: usize| progress(fits / 2);
    let mut results = fit_sampled(fitter, toys, &jobs, &per_toy)?;

    let failed: Vec<usize> = (0..results.len())
        .filter(|&j| !matches!(&results[j], Ok(fit) if fit.converged))
        .collect();
    if !failed.is_empty() {
        // A restart scales its variables by the curvature where it starts, not where the
        // observed data's free fit ended (the shared scale of the first attempt).
        let restart_at = |config: &FitConfig, point: &[f64]| FitConfig {
            scale: None,
            ..config.starting_at(point)
        };
        // Per toy: its free fit's restart (one per ensemble) and its fixed fit's (one per
        // segment).
        let (mut restart_free, mut restart_fixed) = (Vec::new(), Vec::new());
        for s in segments {
            let poi = s.config.poi(fitter.model())?;
            let fixed = Arc::new(restart_at(s.config, s.at_mu).with_fixed(poi, fixed_mu(s)));
            for generating in s.generating {
                let free = Arc::new(restart_at(s.config, generating));
                restart_free.extend(std::iter::repeat_n(free, s.count));
                restart_fixed.extend(std::iter::repeat_n(fixed.clone(), s.count));
            }
        }
        let restarts: Vec<FitJob> = failed
            .iter()
            .map(|&j| FitJob {
                data: j / 2,
                config: if j % 2 == 0 {
                    restart_free[j / 2].clone()
                } else {
                    restart_fixed[j / 2].clone()
                },
            })
            .collect();
        // Per fit: where its attempts from independent starts stopped short (not its
        // continuations, which start where an attempt stopped).
        let mut ends: Vec<Vec<f64>> = vec![Vec::new(); results.len()];
        for &j in &failed {
            record_end(&mut ends[j], &results[j]);
        }
        let again = fit_sampled(fitter, toys, &restarts, &|_| {})?;
        for (&j, fit) in failed.iter().zip(again) {
            record_end(&mut ends[j], &fit);
            if improves(&fit, &results[j]) {
                results[j] = fit;
            }
        }
        // Fits still short go on from where they stopped, scaled by the curvature there up to
        // `STIFF_SCALE_CEILING`: a toy whose minimum lies against a steep wall of the likelihood
        // (a yield that plunges within 10⁻⁹ of a parameter, the published sleptons likelihood)
        // shows that curvature only close to it, and L-BFGS-B stalls on the scaling of its
        // start. Each round starts from the last end point; a fit's rounds depend on its own
        // results only, and a fit that a round did not lower stops (another round from the same
        // point would end where this one did).
        let mut lowered = vec![true; results.len()];
        for _ in 0..CONTINUATION_ROUNDS {
            // The fits still short, and the jobs that continue them from their end points.
            let short: Vec<usize> = (0..results.len())
                .filter(|&j| {
                    lowered[j]
                        && matches!(&results[j], Ok(f) if !f.converged && f.twice_nll.is_finite())
                })
                .collect();
            if short.is_empty() {
                break;
            }
            let continued = short
                .par_iter()
                .map(|&j| {
                    let end = &results[j].as_ref().expect("short fits are Ok").parameters;
                    let config = fitter.with_scale_up_to(
                        &toys.host[j / 2],
                        &jobs[j].config.starting_at(end),
                        STIFF_SCALE_CEILING,
                    )?;
                    Ok(FitJob {
                        data: j / 2,
                        config: Arc::new(config),
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            let again = fit_sampled(fitter, toys, &continued, &|_| {})?;
            for (&j, fit) in short.iter().zip(again) {
                lowered[j] = matches!((&fit, &results[j]), (Ok(f), Ok(before))
                    if f.converged || f.twice_nll < before.twice_nll);
                if lowered[j] {
                    results[j] = fit;
                }
            }
        }
        // Fits that still fail start again from their restart point moved at random, by about
        // half a standard deviation of each free parameter (a published likelihood's toy whose
        // fits stall on kinks from one start converges from another).
        for attempt in 0..PERTURBED_STARTS {
            accept_repeated_ends(&mut results, &ends);
            let failing: Vec<usize> = (0..results.len())
                .filter(|&j| !matches!(&results[j], Ok(fit) if fit.converged))
                .collect();
            if failing.is_empty() {
                break;
            }
            let moved = failing
                .par_iter()
                .map(|&j| {
                    let restart = if j % 2 == 0 {
                        &restart_free[j / 2]
                    } else {
                        &restart_fixed[j / 2]
                    };
                    let start = perturbed_start(fitter, &toys.host[j / 2], restart, attempt)?;
                    Ok(FitJob {
                        data: j / 2,
                        config: Arc::new(start),
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            let again = fit_sampled(fitter, toys, &moved, &|_| {})?;
            for (&j, fit) in failing.iter().zip(again) {
                record_end(&mut ends[j], &fit);
                if improves(&fit, &results[j]) {
                    results[j] = fit;
                }
            }
        }
        accept_repeated_ends(&mut results, &ends);
    }
    // A fit that owes more than `BOX_HELD_GAIN` of twice_nll to empty bins expecting negative
    // counts was stopped by the parameter box, not by the data: its test statistic
    // measures the box (10¹⁰ on the published off-shell likelihood, at a different point of
    // the box's edge on each device). It counts as failed, for that reason.
    results.par_iter_mut().enumerate().for_each(|(j, result)| {
        if let Ok(fit) = result
            && fit.converged
            && warned_unbounded(fit)
            && fitter
                .model()
                .negative_empty_bins(&fit.parameters, &toys.host[j / 2])
                .is_some_and(|negative| negative.gain > BOX_HELD_GAIN)
        {
            fit.converged = false;
        }
    });
    let mut pairs = Vec::with_capacity(n_toys);
    let mut it = results.into_iter();
    while let (Some(free), Some(fixed)) = (it.next(), it.next()) {
        pairs.push(free.and_then(|free_fit| {
            fixed.map(|fixed_fit| ToyFitPair {
                free_fit,
                fixed_fit,
            })
        }));
    }
    Ok(pairs)
}

/// Whether a second attempt at a failed fit replaces the first: it converged, or ended lower.
fn improves(again: &Result<FitResult>, before: &Result<FitResult>) -> bool {
    match (again, before) {
        (Ok(f), _) if f.converged => true,
        (Ok(f), Ok(before)) => f.twice_nll < before.twice_nll,
        (Ok(f), Err(_)) => f.twice_nll.is_finite(),
        (Err(_), _) => false,
    }
}

/// Records where an attempt at a fit stopped short of convergence.
fn record_end(ends: &mut Vec<f64>, attempt: &Result<FitResult>) {
    if let Ok(fit) = attempt
        && !fit.converged
        && fit.twice_nll.is_finite()
    {
        ends.push(fit.twice_nll);
    }
}

/// A fit that stopped short where at least two of its attempts from independent starts stopped
/// too (within [`REPEATED_END_ATOL`] of twice_nll) has found its minimum: on a published
/// likelihood whose toys' minima lie on kinks (ROOT's clipping) every descent can stall short of
/// the gradient test at the same point, where a device's optimizer may already call it converged.
fn accept_repeated_ends(results: &mut [Result<FitResult>], ends: &[Vec<f64>]) {
    for (result, ends) in results.iter_mut().zip(ends) {
        if let Ok(fit) = result
            && !fit.converged
            && ends
                .iter()
                .filter(|&&end| (end - fit.twice_nll).abs() <= REPEATED_END_ATOL)
                .count()
                >= 2
        {
            fit.converged = true;
            fit.termination = Termination::ConvergedRepeated;
        }
    }
}

/// `restart` with each free parameter moved from its start by σ·z/2, z standard normal and σ
/// the inverse square root of twice_nll's curvature there, kept inside the box. The draws come
/// from a stream keyed by the dataset and the configuration's start, not by the fit's place in
/// its batch: a toy gets the same starts alone or beside others, on every device.
fn perturbed_start(
    fitter: &Fitter,
    data: &PreparedData,
    restart: &FitConfig,
    attempt: usize,
) -> Result<FitConfig> {
    let free: Vec<usize> = (0..restart.init.len())
        .filter(|&i| !restart.fixed[i])
        .collect();
    let scale = fitter.curvature_scale(
        &restart.init,
        &free,
        &restart.bounds,
        data,
        STIFF_SCALE_CEILING,
    )?;
    let key = data
        .main
        .iter()
        .chain(&data.aux)
        .chain(&restart.init)
        .fold(PERTURBED_SEED, |h, v| {
            (h ^ v.to_bits()).wrapping_mul(0x0000_0100_0000_01b3)
        });
    let mut rng = ToyStream::new(key, attempt as u32, 0);
    let mut point = restart.init.clone();
    for (&i, s) in free.iter().zip(&scale) {
        point[i] += 0.5 * rng.normal() / s;
    }
    Ok(FitConfig {
        scale: None,
        ..restart.starting_at(&point)
    })
}

/// Whether the fit ended where the likelihood is unbounded below (`Fitter::complete` warned).
fn warned_unbounded(fit: &FitResult) -> bool {
    fit.warning
        .as_deref()
        .is_some_and(|w| w.contains(UNBOUNDED_BELOW))
}

/// Add the test statistics of fitted toys to an ensemble: failed fits are counted by reason.
fn extend_ensemble(
    ensemble: &mut ToyEnsemble,
    stat: TestStatistic,
    mu: f64,
    poi: usize,
    pairs: &[Result<ToyFitPair>],
) {
    for pair in pairs {
        let outcome = match pair {
            Ok(p) if p.free_fit.converged && p.fixed_fit.converged => Ok(clip(
                statistic_from_fits(stat, mu, poi, &p.fixed_fit, &p.free_fit),
            )),
            Ok(p) => {
                let failed = if p.free_fit.converged {
                    &p.fixed_fit
                } else {
                    &p.free_fit
                };
                // A fit that ran into a region where the likelihood has no minimum says so.
                Err(if warned_unbounded(failed) {
                    UNBOUNDED_BELOW
                } else {
                    failed.termination.describe()
                }
                .to_string())
            }
            Err(e) => Err(e.to_string()),
        };
        match outcome {
            Ok(t) => ensemble.teststats.push(t),
            Err(reason) => {
                ensemble.n_failed += 1;
                *ensemble.failures.entry(reason).or_insert(0) += 1;
            }
        }
    }
}

/// Toy datasets drawn at `params` and fitted (free fit only), all in one batch: pyhf's
/// toy-fitting loop. On a device backend the toys are sampled and fitted there.
pub fn fit_toys(
    fitter: &Fitter,
    params: &[f64],
    n_toys: usize,
    seed: u64,
    config: &FitConfig,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<(Vec<PreparedData>, Vec<Result<FitResult>>)> {
    // Every dataset is returned: refuse ensembles whose data alone would not fit in memory.
    let values = n_toys.saturating_mul(fitter.model().dataset_size());
    if values > MAX_RETURNED_TOY_VALUES {
        return Err(ns_core::Error::InvalidInput(format!(
            "{n_toys} toys of {} values each would take {:.1} GB to return; draw fewer (hypotest_toys \
             streams any number of toys in bounded memory)",
            values / n_toys.max(1),
            values as f64 * 8e-9
        )));
    }
    let toys = generate_ensembles(fitter, &[(params, SIGNAL_STREAM)], 0, n_toys, seed)?;
    let shared = Arc::new(config.clone());
    let jobs: Vec<FitJob> = (0..toys.host.len())
        .map(|t| FitJob {
            data: t,
            config: shared.clone(),
        })
        .collect();
    let results = fit_sampled(fitter, &toys, &jobs, progress)?;
    Ok((toys.host, results))
}

fn sorted(values: &[f64]) -> Vec<f64> {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    v
}

/// Fraction of `sorted` values at least `t`: pyhf's `EmpiricalDistribution.pvalue`, by binary
/// search.
fn tail_fraction(sorted: &[f64], t: f64) -> f64 {
    (sorted.len() - sorted.partition_point(|&x| x < t)) as f64 / sorted.len() as f64
}

/// numpy's `percentile(..., interpolation="linear")` of unsorted values at `q` in [0, 100].
fn percentile(values: &[f64], q: f64) -> f64 {
    crate::stats::quantile(values, q / 100.0)
}

/// Toy-based CLs at `mu` (pyhf's `hypotest(..., calctype="toybased")`). `progress` receives
/// the toys done, of `2 · n_toys`.
#[allow(clippy::too_many_arguments)]
pub fn hypotest_toys(
    fitter: &Fitter,
    mu: f64,
    data: &PreparedData,
    config: &FitConfig,
    stat: TestStatistic,
    n_toys: usize,
    seed: u64,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<ToyHypotest> {
    let test = ToyTest {
        mu,
        data,
        config,
        stat,
        n_toys,
        seed,
        toys: 0..n_toys,
    };
    hypotest_toys_batch(fitter, &[test], progress)?
        .pop()
        .expect("one result per test")
}

/// One toy-based hypothesis test of a batch ([`hypotest_toys_batch`]).
#[derive(Clone)]
pub struct ToyTest<'a> {
    pub mu: f64,
    pub data: &'a PreparedData,
    pub config: &'a FitConfig,
    pub stat: TestStatistic,
    pub n_toys: usize,
    pub seed: u64,
    /// The toys computed: all (`0..n_toys`), or a shard's share of them.
    pub toys: Range<usize>,
}

/// What the toys of a test give before its p-values: the observed statistic and the two
/// ensembles over the toys computed. Ensembles of consecutive toy ranges, concatenated, are the
/// ensembles of their union ([`ToyHypotest::from_ensembles`] makes the result).
#[derive(Clone, Debug)]
pub struct ToyEnsembles {
    pub observed: f64,
    pub signal: ToyEnsemble,
    pub background: ToyEnsemble,
}

/// A test whose baseline fits are done: what its toys need, and their statistics so far.
struct ToyPlan {
    test: usize,
    mu: f64,
    stat: TestStatistic,
    toys: Range<usize>,
    seed: u64,
    /// The configuration with the optimizer's variable scale at the observed data.
    config: FitConfig,
    observed: f64,
    signal_pars: Vec<f64>,
    background_pars: Vec<f64>,
    signal: ToyEnsemble,
    background: ToyEnsemble,
}

/// Several toy-based hypothesis tests of one model — other μ, seeds, toy counts, data or fixed
/// parameters — fitted together: their baseline fits as one batch, then, chunk by chunk, the toys
/// of every test as one batch (on a GPU, one device batch instead of one per test). Each test's
/// result is the same bits as [`hypotest_toys`] gives it alone. A test without a meaningful
/// answer gets its own error; an interrupt or a device failure fails the call. `progress`
/// receives the toys done over all tests, of `Σ 2 · n_toys`. Memory holds one chunk of toys of
/// every test at once: batch as many tests as fit.
pub fn hypotest_toys_batch(
    fitter: &Fitter,
    tests: &[ToyTest],
    progress: &(dyn Fn(usize) + Sync),
) -> Result<Vec<Result<ToyHypotest>>> {
    Ok(toy_ensembles_batch(fitter, tests, progress)?
        .into_iter()
        .zip(tests)
        .map(|(ensembles, t)| {
            ToyHypotest::from_ensembles(t.mu, t.stat, t.n_toys, t.seed, ensembles?)
        })
        .collect())
}

/// The ensembles of several toy tests over their `toys` ranges, fitted as [`hypotest_toys_batch`]
/// fits them; `progress` receives the toys done, of `Σ 2 · toys.len()`. Toy `i` of a test gives
/// the same statistic whatever range it is computed in, so shards of a test computed apart
/// concatenate to the ensembles computed at once.
pub fn toy_ensembles_batch(
    fitter: &Fitter,
    tests: &[ToyTest],
    progress: &(dyn Fn(usize) + Sync),
) -> Result<Vec<Result<ToyEnsembles>>> {
    let mut results: Vec<Option<Result<ToyEnsembles>>> = tests.iter().map(|_| None).collect();
    let mut plans = baseline_plans(fitter, tests, &mut results)?;
    // Chunk by chunk: memory is bounded by the chunk, plus one f64 per toy for its statistic.
    let mut done = 0;
    for offset in (0..).step_by(TOY_CHUNK) {
        let active: Vec<usize> = (0..plans.len())
            .filter(|&p| plans[p].toys.len() > offset)
            .collect();
        if active.is_empty() {
            break;
        }
        let mut sampled = Vec::with_capacity(active.len());
        let mut segments = Vec::with_capacity(active.len());
        for &p in &active {
            let plan = &plans[p];
            let count = TOY_CHUNK.min(plan.toys.len() - offset);
            sampled.push(generate_ensembles(
                fitter,
                &[
                    (&plan.signal_pars, SIGNAL_STREAM),
                    (&plan.background_pars, BACKGROUND_STREAM),
                ],
                (plan.toys.start + offset) as u32,
                count,
                plan.seed,
            )?);
            segments.push(ToySegment {
                stat: plan.stat,
                mu: plan.mu,
                config: &plan.config,
                at_mu: &plan.signal_pars,
                generating: [&plan.signal_pars, &plan.background_pars],
                count,
            });
        }
        let toys = concatenated(sampled);
        let pairs = fit_toy_pairs(fitter, &segments, &toys, &|k| progress(done + k))?;
        done += toys.host.len();
        let counts: Vec<usize> = segments.iter().map(|s| s.count).collect();
        let mut rest = pairs.as_slice();
        for (&p, count) in active.iter().zip(counts) {
            let plan = &mut plans[p];
            let poi = plan.config.poi(fitter.model())?;
            let (signal, tail) = rest.split_at(count);
            let (background, tail) = tail.split_at(count);
            rest = tail;
            extend_ensemble(&mut plan.signal, plan.stat, plan.mu, poi, signal);
            extend_ensemble(&mut plan.background, plan.stat, plan.mu, poi, background);
        }
    }
    for plan in plans {
        results[plan.test] = Some(Ok(ToyEnsembles {
            observed: plan.observed,
            signal: plan.signal,
            background: plan.background,
        }));
    }
    Ok(results
        .into_iter()
        .map(|r| r.expect("every test has its result"))
        .collect())
}

/// The tests' checks and baseline fits (three each, all in one batch): a plan per test that
/// passes, its error in `results` for one that does not.
fn baseline_plans(
    fitter: &Fitter,
    tests: &[ToyTest],
    results: &mut [Option<Result<ToyEnsembles>>],
) -> Result<Vec<ToyPlan>> {
    // Each test's variable scale is host work (curvature probes): in parallel.
    let checks: Vec<Result<_>> = tests.par_iter().map(|t| check_test(fitter, t)).collect();
    let mut checked = Vec::with_capacity(tests.len());
    for (i, check) in checks.into_iter().enumerate() {
        match check {
            Ok(c) => checked.push((i, c)),
            Err(e) => results[i] = Some(Err(e)),
        }
    }
    let datasets: Vec<PreparedData> = checked
        .iter()
        .map(|(i, _)| tests[*i].data.clone())
        .collect();
    let jobs: Vec<FitJob> = checked
        .iter()
        .enumerate()
        .flat_map(|(d, (_, (poi, config, signal_mu, background_mu)))| {
            [
                config.clone(),
                config.with_fixed(*poi, *signal_mu),
                config.with_fixed(*poi, *background_mu),
            ]
            .map(|c| FitJob {
                data: d,
                config: Arc::new(c),
            })
        })
        .collect();
    let mut fits = fitter.fit_batch(&datasets, &jobs, &|_| {})?.into_iter();
    let mut plans = Vec::with_capacity(checked.len());
    for ((i, (poi, config, _, _)), data) in checked.into_iter().zip(&datasets) {
        let test = &tests[i];
        let three = [(); 3].map(|_| fits.next().expect("three baseline fits per test"));
        let plan = three
            .into_iter()
            .collect::<Result<Vec<FitResult>>>()
            .and_then(|three| {
                for fit in &three {
                    checks::started(fitter, fit, data)?;
                }
                let [free_fit, signal_fit, background_fit] =
                    <[FitResult; 3]>::try_from(three).expect("three fits");
                Ok(ToyPlan {
                    test: i,
                    mu: test.mu,
                    stat: test.stat,
                    toys: test.toys.clone(),
                    seed: test.seed,
                    observed: clip(statistic_from_fits(
                        test.stat,
                        test.mu,
                        poi,
                        &signal_fit,
                        &free_fit,
                    )),
                    config,
                    signal_pars: signal_fit.parameters,
                    background_pars: background_fit.parameters,
                    signal: ToyEnsemble::default(),
                    background: ToyEnsemble::default(),
                })
            });
        match plan {
            Ok(plan) => plans.push(plan),
            Err(e) => results[i] = Some(Err(e)),
        }
    }
    Ok(plans)
}

/// A test's preconditions: the POI's index, the configuration with its variable scale, and the
/// POI values of the signal and background hypotheses.
fn check_test(fitter: &Fitter, test: &ToyTest) -> Result<(usize, FitConfig, f64, f64)> {
    let n_toys = test.n_toys;
    check_n_toys(n_toys)?;
    if test.toys.end > n_toys || test.toys.start > test.toys.end {
        return Err(ns_core::Error::InvalidInput(format!(
            "toys {}..{} of a test of {n_toys} toys: the range must lie within 0..{n_toys}",
            test.toys.start, test.toys.end
        )));
    }
    let config = test.config;
    let poi = checks::free_poi(fitter, config)?;
    let signal_mu = if test.stat == TestStatistic::Q0 {
        0.0
    } else {
        test.mu
    };
    let background_mu = if test.stat == TestStatistic::Q0 {
        1.0
    } else {
        0.0
    };
    checks::value_in_bounds(fitter, config, poi, signal_mu, "mu")?;
    checks::value_in_bounds(
        fitter,
        config,
        poi,
        background_mu,
        "the background-only POI value",
    )?;
    let scaled = fitter.with_scale(test.data, config)?;
    Ok((poi, scaled, signal_mu, background_mu))
}

/// Refuse a number of toys per hypothesis outside 1..=[`MAX_TOYS`].
pub fn check_n_toys(n_toys: usize) -> Result<()> {
    if n_toys == 0 || n_toys > MAX_TOYS {
        return Err(ns_core::Error::InvalidInput(format!(
            "n_toys = {n_toys}: the number of toys per hypothesis must be between 1 and {MAX_TOYS}"
        )));
    }
    Ok(())
}

/// Toys sampled test by test, as one set: the backend's resident copy kept where there is one
/// set (the fits read it in place); several are fitted from their host copies, the same values.
fn concatenated(mut parts: Vec<SampledToys>) -> SampledToys {
    if parts.len() == 1 {
        return parts.pop().expect("one part");
    }
    SampledToys {
        host: parts.into_iter().flat_map(|p| p.host).collect(),
        resident: None,
    }
}

impl ToyHypotest {
    /// The result of a test from the ensembles of all its `n_toys` toys: refused where too many
    /// toy fits failed.
    pub fn from_ensembles(
        mu: f64,
        stat: TestStatistic,
        n_toys: usize,
        seed: u64,
        ensembles: ToyEnsembles,
    ) -> Result<ToyHypotest> {
        let ToyEnsembles {
            observed,
            signal,
            background,
        } = ensembles;
        let counted = |e: &ToyEnsemble| e.teststats.len() + e.n_failed;
        if counted(&signal) != n_toys || counted(&background) != n_toys {
            return Err(ns_core::Error::Computation(format!(
                "ensembles of {} and {} toys for a test of {n_toys}",
                counted(&signal),
                counted(&background)
            )));
        }
        let failed: Vec<String> = [
            ("signal-plus-background", &signal),
            ("background-only", &background),
        ]
        .into_iter()
        .filter(|(_, e)| e.n_failed > 0)
        .map(|(name, e)| failures_in_words(name, e, n_toys))
        .collect();
        let worst = signal.n_failed.max(background.n_failed) as f64 / n_toys as f64;
        if worst > MAX_FAILED_TOY_FRACTION
            || signal.teststats.is_empty()
            || background.teststats.is_empty()
        {
            let unbounded = [&signal, &background]
                .iter()
                .any(|e| e.failures.keys().any(|r| r.starts_with(UNBOUNDED_BELOW)));
            let remedy = if unbounded {
                "; a likelihood unbounded below because a sample's yield turns negative has a \
                 minimum with each sample's yield clipped at zero, as ROOT clips it (the model's \
                 clip_negative_yields setting)"
            } else {
                ""
            };
            return Err(ns_core::Error::Computation(format!(
                "toy fits failed: {}; more than {}% of an ensemble, so the p-values would be \
                 biased (the failed toys are not a random subset): no result{remedy}",
                failed.join(", "),
                MAX_FAILED_TOY_FRACTION * 100.0
            )));
        }
        let warning = (!failed.is_empty()).then(|| {
            format!(
                "toy fits failed and their toys are left out of the p-values: {}",
                failed.join(", ")
            )
        });
        let cls = cls_from_ensembles(observed, &signal.teststats, &background.teststats);
        Ok(ToyHypotest {
            mu,
            test_statistic: stat,
            teststat_obs: observed,
            cls,
            n_toys,
            seed,
            signal,
            background,
            warning,
        })
    }
}

/// The percentiles of the expected values: n_σ = 2, 1, 0, −1, −2 of a normal distribution, in
/// pyhf's order (ascending CLs).
const BAND_PERCENTILES: [f64; 5] = [2.27501319, 15.86552539, 50.0, 84.13447461, 97.72498681];

/// CLsb and CLb at a statistic `t`, from the two ensembles' sorted statistics.
fn tail_pvalues(signal_sorted: &[f64], background_sorted: &[f64], t: f64) -> (f64, f64) {
    (
        tail_fraction(signal_sorted, t),
        tail_fraction(background_sorted, t),
    )
}

/// (CLsb, CLb, CLs) at each background-only toy's statistic: the values whose percentiles are the
/// expected band.
fn pvalues_per_background_toy(
    signal_sorted: &[f64],
    background_sorted: &[f64],
    background: &[f64],
) -> Vec<(f64, f64, f64)> {
    background
        .iter()
        .map(|&t| {
            let (clsb, clb) = tail_pvalues(signal_sorted, background_sorted, t);
            (clsb, clb, clsb / clb)
        })
        .collect()
}

/// CLs, CLsb and CLb at the observed statistic, and their expected bands (percentiles −2σ…+2σ
/// over the background-only toys), from the two ensembles' statistics.
fn cls_from_ensembles(observed: f64, signal: &[f64], background: &[f64]) -> ClsValues {
    // p-values by binary search in the sorted statistics: O(n log n) for the whole band.
    let (signal_sorted, background_sorted) = (sorted(signal), sorted(background));
    let (clsb_obs, clb_obs) = tail_pvalues(&signal_sorted, &background_sorted, observed);
    let per_toy = pvalues_per_background_toy(&signal_sorted, &background_sorted, background);
    let band = |pick: fn(&(f64, f64, f64)) -> f64| {
        let values: Vec<f64> = per_toy.iter().map(pick).collect();
        BAND_PERCENTILES.map(|q| percentile(&values, q))
    };
    ClsValues {
        cls_obs: clsb_obs / clb_obs,
        clsb_obs,
        clb_obs,
        cls_exp: band(|p| p.2),
        clsb_exp: band(|p| p.0),
        clb_exp: band(|p| p.1),
    }
}

impl ToyHypotest {
    /// Monte-Carlo standard errors of CLs observed and expected (−2σ…+2σ, as `cls.cls_exp`).
    /// Observed: the binomial errors of CLsb and CLb (each at least one toy's worth, so a tail
    /// without toys is not exact), propagated to their ratio. Expected: the binomial error of
    /// CLsb at the band's statistic, and the spread of the percentile over its rank's binomial
    /// error (±√(N q (1 − q)) toys).
    pub fn cls_errors(&self) -> [f64; 6] {
        let (signal, background) = (&self.signal.teststats, &self.background.teststats);
        let (signal_sorted, background_sorted) = (sorted(signal), sorted(background));
        let (n_signal, n_background) = (signal.len() as f64, background.len() as f64);
        // A tail fraction is known to one toy's worth at best: p(1 − p) is floored at its value
        // for p = 1/(n + 1), which stays positive for a single toy.
        let binomial = |p: f64, n: f64| {
            let one_toy = 1.0 / (n + 1.0);
            ((p * (1.0 - p)).max(one_toy * (1.0 - one_toy)) / n).sqrt()
        };
        let c = &self.cls;
        let observed = {
            let (e_sb, e_b) = (
                binomial(c.clsb_obs, n_signal),
                binomial(c.clb_obs, n_background),
            );
            (e_sb / c.clb_obs).hypot(c.clsb_obs * e_b / (c.clb_obs * c.clb_obs))
        };
        let per_toy: Vec<f64> =
            pvalues_per_background_toy(&signal_sorted, &background_sorted, background)
                .into_iter()
                .map(|p| p.2)
                .collect();
        let mut errors = [observed, 0.0, 0.0, 0.0, 0.0, 0.0];
        for (k, q) in BAND_PERCENTILES.into_iter().enumerate() {
            let rank = 100.0 * (q / 100.0 * (1.0 - q / 100.0) / n_background).sqrt();
            let spread = (percentile(&per_toy, (q + rank).min(100.0))
                - percentile(&per_toy, (q - rank).max(0.0)))
            .abs()
                / 2.0;
            let signal_tail = binomial(c.clsb_exp[k], n_signal) / c.clb_exp[k];
            errors[k + 1] = spread.hypot(signal_tail);
        }
        errors
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 100 toys of which `failed` failed for `reason`, the rest at q = 1.
    fn ensemble(failed: usize, reason: &str) -> ToyEnsemble {
        ToyEnsemble {
            teststats: vec![1.0; 100 - failed],
            n_failed: failed,
            failures: BTreeMap::from([(reason.to_string(), failed)]),
        }
    }

    #[test]
    fn a_refusal_for_unbounded_toys_names_roots_clipping() {
        let refusal = |reason: &str| {
            let ensembles = ToyEnsembles {
                observed: 1.0,
                signal: ensemble(5, reason),
                background: ToyEnsemble {
                    teststats: vec![1.0; 100],
                    ..Default::default()
                },
            };
            ToyHypotest::from_ensembles(1.0, TestStatistic::QTilde, 100, 1, ensembles)
                .unwrap_err()
                .to_string()
        };
        let unbounded = refusal(&format!("{UNBOUNDED_BELOW}: main bin 3"));
        assert!(
            unbounded.contains("5 of 100 signal-plus-background toys"),
            "{unbounded}"
        );
        assert!(
            unbounded.contains("clip_negative_yields setting"),
            "{unbounded}"
        );
        let stalled = refusal("line search could not decrease the objective further");
        assert!(stalled.ends_with("no result"), "{stalled}");
    }

    #[test]
    fn percentile_matches_numpy_linear() {
        let v = [3.0, 1.0, 2.0, 4.0];
        assert_eq!(percentile(&v, 50.0), 2.5);
        assert_eq!(percentile(&v, 0.0), 1.0);
        assert_eq!(percentile(&v, 100.0), 4.0);
        assert!((percentile(&v, 2.27501319) - 1.0682503957).abs() < 1e-9);
    }
}
