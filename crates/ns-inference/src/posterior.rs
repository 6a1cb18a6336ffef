//! Bayesian posteriors of a likelihood by NUTS (`nuts.rs`): chains in parallel over the free
//! parameters, each mapped to the real line (a bounded parameter through a logistic map, a
//! half-bounded one through an exponential, with the map's log-Jacobian in the density), so that
//! the priors are flat within each free parameter's bounds — the POI's, a normfactor's — while
//! the likelihood's constraint terms are the priors of the constrained nuisance parameters (as
//! Combine's and RooStats' Bayesian calculators take them). Each chain starts at the best fit,
//! moved by a small random step. The summary: per parameter its mean, standard deviation,
//! quantiles, R̂ and effective sample sizes; for the POI the credible upper limit and central
//! interval at a level.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};

use ns_compute::rng::ToyStream;
use ns_compute::{PreparedData, Resident};
use ns_core::{Error, Result};
use rayon::prelude::*;

use crate::fit::{FitConfig, Fitter};
use crate::mcmc_diagnostics::{ChainDiagnostics, diagnostics, quantile_error};
use crate::nuts::{ChainRun, LogDensity, NutsOptions, run_chain};
use crate::stats::quantile_of_sorted;

/// The random streams of posterior chains (stream ids apart from the toys').
const CHAIN_STREAM: u32 = 16;

/// Most chains one posterior runs.
pub const MAX_CHAINS: usize = 1024;
/// Most warmup or kept iterations per chain.
pub const MAX_ITERATIONS: usize = 1_000_000;
/// Most numbers (chains × draws × free parameters) a posterior holds.
pub const MAX_DRAWN_VALUES: usize = 50_000_000;
/// The quantiles every parameter's summary gives (the ±1σ and ±2σ points and the median).
pub const SUMMARY_QUANTILES: [f64; 5] = [0.025, 0.16, 0.5, 0.84, 0.975];
/// R̂ above which chains are said to disagree (Vehtari et al. 2021).
const R_HAT_LIMIT: f64 = 1.01;

/// The prior of the POI (the other free parameters' are flat within their bounds, the
/// constrained ones' their constraint terms).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PoiPrior {
    /// Flat within the POI's bounds.
    #[default]
    Flat,
    /// ∝ 1/√μ within the POI's bounds (Combine's `--prior "1/sqrt(r)"`); the bounds must lie at
    /// or above 0.
    InverseSqrt,
}

impl PoiPrior {
    pub fn name(self) -> &'static str {
        match self {
            PoiPrior::Flat => "flat",
            PoiPrior::InverseSqrt => "inverse_sqrt",
        }
    }
}

/// What a posterior run is asked.
#[derive(Clone, Copy, Debug)]
pub struct PosteriorSpec {
    pub chains: usize,
    pub warmup: usize,
    pub draws: usize,
    pub seed: u64,
    /// Credibility of the POI's upper limit and central interval.
    pub cl: f64,
    pub target_accept: f64,
    pub max_tree_depth: usize,
    pub prior: PoiPrior,
}

impl PosteriorSpec {
    /// Refuse what has no meaningful answer, or would hold memory out of proportion.
    pub fn check(&self, n_free: usize) -> Result<()> {
        let bad = |what: String| Err(Error::InvalidInput(what));
        if !(1..=MAX_CHAINS).contains(&self.chains) {
            return bad(format!(
                "chains = {}: give from 1 to {MAX_CHAINS} chains",
                self.chains
            ));
        }
        if self.draws == 0 || self.draws > MAX_ITERATIONS || self.warmup > MAX_ITERATIONS {
            return bad(format!(
                "warmup = {}, draws = {}: give from 1 to {MAX_ITERATIONS} draws and at most \
                 {MAX_ITERATIONS} warmup iterations per chain",
                self.warmup, self.draws
            ));
        }
        if !(self.cl > 0.0 && self.cl < 1.0) {
            return bad(format!(
                "cl = {}: a credibility lies strictly between 0 and 1 (0.95 for a 95% upper limit)",
                self.cl
            ));
        }
        if !(self.target_accept > 0.0 && self.target_accept < 1.0) {
            return bad(format!(
                "target_accept = {}: the step size adapts toward an acceptance strictly between \
                 0 and 1 (0.8 by default; raise it toward 0.95 where chains diverge)",
                self.target_accept
            ));
        }
        if !(1..=15).contains(&self.max_tree_depth) {
            return bad(format!(
                "max_tree_depth = {}: give from 1 to 15 (2^depth leapfrog steps per draw)",
                self.max_tree_depth
            ));
        }
        let values = self
            .chains
            .saturating_mul(self.draws)
            .saturating_mul(n_free.max(1));
        if values > MAX_DRAWN_VALUES {
            return bad(format!(
                "{} chains × {} draws × {n_free} free parameters = {values} values: a posterior \
                 holds at most {MAX_DRAWN_VALUES}; use fewer chains or draws",
                self.chains, self.draws
            ));
        }
        Ok(())
    }
}

/// One free parameter's posterior.
#[derive(Clone, Debug)]
pub struct ParameterSummary {
    pub name: String,
    pub mean: f64,
    pub sd: f64,
    /// At [`SUMMARY_QUANTILES`].
    pub quantiles: [f64; 5],
    pub diagnostics: ChainDiagnostics,
}

/// What one chain's sampler did after warmup.
#[derive(Clone, Debug)]
pub struct ChainReport {
    pub divergences: usize,
    pub max_depth_hits: usize,
    pub step_size: f64,
    pub mean_tree_depth: f64,
    pub mean_accept: f64,
}

/// A posterior: every free parameter's summary, the POI's credible upper limit and interval,
/// the draws (model space, `[chain][draw][free parameter]`) and what each chain's sampler did.
#[derive(Clone, Debug)]
pub struct Posterior {
    pub spec: PosteriorSpec,
    pub poi: String,
    pub upper_limit: f64,
    /// The upper limit's Monte-Carlo standard error.
    pub upper_limit_error: f64,
    pub central_interval: (f64, f64),
    /// The free parameters, in model order.
    pub names: Vec<String>,
    pub parameters: Vec<ParameterSummary>,
    pub draws: Vec<Vec<Vec<f64>>>,
    pub chains: Vec<ChainReport>,
    /// What qualifies the result (divergences, chains that disagree, parameters the likelihood
    /// leaves to their prior), in words.
    pub warnings: Vec<String>,
}

/// How one free parameter maps from the real line into its bounds.
#[derive(Clone, Copy, Debug)]
enum Map {
    Identity,
    /// θ = lo + eᵘ
    Above(f64),
    /// θ = hi − eᵘ
    Below(f64),
    /// θ = lo + (hi − lo)·σ(u)
    Between(f64, f64),
}

impl Map {
    fn of((lo, hi): (f64, f64)) -> Map {
        match (lo.is_finite(), hi.is_finite()) {
            (true, true) => Map::Between(lo, hi),
            (true, false) => Map::Above(lo),
            (false, true) => Map::Below(hi),
            (false, false) => Map::Identity,
        }
    }

    /// θ(u), dθ/du and d log|dθ/du| / du.
    fn forward(self, u: f64) -> (f64, f64, f64) {
        match self {
            Map::Identity => (u, 1.0, 0.0),
            Map::Above(lo) => (lo + u.exp(), u.exp(), 1.0),
            Map::Below(hi) => (hi - u.exp(), -u.exp(), 1.0),
            Map::Between(lo, hi) => {
                let s = logistic(u);
                (lo + (hi - lo) * s, (hi - lo) * s * (1.0 - s), 1.0 - 2.0 * s)
            }
        }
    }

    /// log|dθ/du|.
    fn log_jacobian(self, u: f64) -> f64 {
        match self {
            Map::Identity => 0.0,
            Map::Above(_) | Map::Below(_) => u,
            // log σ(u) + log(1 − σ(u)) = −|u| − 2 log(1 + e^−|u|), stable for large |u|.
            Map::Between(lo, hi) => (hi - lo).ln() - u.abs() - 2.0 * (-u.abs()).exp().ln_1p(),
        }
    }

    /// u(θ), θ kept a little inside its bounds (a best fit on a bound has no finite u).
    fn inverse(self, theta: f64) -> f64 {
        match self {
            Map::Identity => theta,
            Map::Above(lo) => (theta - lo).max(1e-8).ln(),
            Map::Below(hi) => (hi - theta).max(1e-8).ln(),
            Map::Between(lo, hi) => {
                let s = ((theta - lo) / (hi - lo)).clamp(1e-6, 1.0 - 1e-6);
                (s / (1.0 - s)).ln()
            }
        }
    }
}

fn logistic(u: f64) -> f64 {
    if u >= 0.0 {
        1.0 / (1.0 + (-u).exp())
    } else {
        let e = u.exp();
        e / (1.0 + e)
    }
}

/// The posterior density over the free parameters' real lines: −twice_nll/2 plus the maps'
/// log-Jacobians.
struct Target<'a> {
    fitter: &'a Fitter<'a>,
    data: &'a PreparedData,
    /// The full parameter vector with the fixed parameters' values.
    base: Vec<f64>,
    free: Vec<usize>,
    maps: Vec<Map>,
    /// Where the backend batches (a device): every chain's evaluations gathered into one.
    gathered: Option<Gathered<'a>>,
    /// The POI's place among the free parameters, and its prior.
    poi: usize,
    prior: PoiPrior,
}

/// The density as chain `chain` evaluates it.
struct ChainTarget<'a> {
    target: &'a Target<'a>,
    chain: usize,
}

/// Evaluations of many chains' densities gathered into one backend batch (a device runs one
/// launch for every chain's point): each chain's thread hands its point in and waits; the
/// calling thread ([`serve`](Self::serve)), which opened the device, evaluates every waiting
/// point at once when all running chains wait, and wakes them. Device calls stay on that one
/// thread. A row's value depends on its own point only, so a chain's draws do not depend on the
/// others.
struct Gathered<'a> {
    fitter: &'a Fitter<'a>,
    data: &'a PreparedData,
    /// `data` on the device, uploaded once.
    resident: Resident,
    state: Mutex<Gathering>,
    /// Wakes the serving thread (a point handed in, a chain gone).
    to_server: Condvar,
    /// Wakes the chains (a batch evaluated).
    to_chains: Condvar,
}

#[derive(Default)]
struct Gathering {
    running: usize,
    /// (chain, full parameter point) waiting for the next batch.
    waiting: Vec<(usize, Vec<f64>)>,
    /// The last batch's results (twice_nll and its gradient, or why not), by chain.
    done: HashMap<usize, Result<(f64, Vec<f64>)>>,
}

impl Gathered<'_> {
    fn evaluate(&self, chain: usize, theta: Vec<f64>) -> Result<(f64, Vec<f64>)> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.waiting.push((chain, theta));
        self.to_server.notify_one();
        loop {
            if let Some(result) = state.done.remove(&chain) {
                return result;
            }
            state = self
                .to_chains
                .wait(state)
                .unwrap_or_else(|p| p.into_inner());
        }
    }

    /// A chain is done: the others no longer wait for it.
    fn leave(&self) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.running -= 1;
        self.to_server.notify_one();
    }

    /// Evaluate the chains' batches until every chain is done.
    fn serve(&self) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        while state.running > 0 {
            if !state.waiting.is_empty() && state.waiting.len() == state.running {
                self.run_batch(&mut state);
            } else {
                state = self
                    .to_server
                    .wait(state)
                    .unwrap_or_else(|p| p.into_inner());
            }
        }
    }

    fn run_batch(&self, state: &mut Gathering) {
        let waiting = std::mem::take(&mut state.waiting);
        let n = waiting.first().map_or(0, |(_, p)| p.len());
        let points: Vec<f64> = waiting
            .iter()
            .flat_map(|(_, p)| p.iter().copied())
            .collect();
        let (mut f, mut grad) = (vec![0.0; waiting.len()], vec![0.0; points.len()]);
        // A panic inside the batch must still answer every waiting chain, or they wait forever.
        let evaluated = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.fitter
                .twice_nll_rows(&points, self.data, Some(&self.resident), &mut f, &mut grad)
        }))
        .unwrap_or_else(|_| {
            Err(Error::Computation(
                "the device batch of the posterior's chains panicked".into(),
            ))
        });
        match evaluated {
            Ok(()) => {
                for (k, (chain, _)) in waiting.iter().enumerate() {
                    state
                        .done
                        .insert(*chain, Ok((f[k], grad[k * n..(k + 1) * n].to_vec())));
                }
            }
            Err(e) => {
                let message = e.to_string();
                for (chain, _) in &waiting {
                    let again = match &e {
                        Error::Interrupted => Error::Interrupted,
                        _ => Error::Computation(message.clone()),
                    };
                    state.done.insert(*chain, Err(again));
                }
            }
        }
        self.to_chains.notify_all();
    }
}

/// Leaves the gathering when its chain ends, however it ends.
struct Member<'a, 'b>(&'a Gathered<'b>);

impl Drop for Member<'_, '_> {
    fn drop(&mut self) {
        self.0.leave();
    }
}

impl Target<'_> {
    fn point(&self, u: &[f64]) -> Vec<f64> {
        let mut theta = self.base.clone();
        for ((&i, map), &u) in self.free.iter().zip(&self.maps).zip(u) {
            theta[i] = map.forward(u).0;
        }
        theta
    }
}

impl LogDensity for ChainTarget<'_> {
    fn dim(&self) -> usize {
        self.target.free.len()
    }

    fn log_density(&self, u: &[f64], grad: &mut [f64]) -> Result<f64> {
        let target = self.target;
        target.fitter.check_interrupt()?;
        let theta = target.point(u);
        let (twice_nll, full) = match &target.gathered {
            Some(gathered) => gathered.evaluate(self.chain, theta)?,
            None => {
                let mut full = vec![0.0; theta.len()];
                match target
                    .fitter
                    .twice_nll_and_gradient(&theta, target.data, &mut full)
                {
                    Ok(v) => (v, full),
                    Err(Error::Interrupted) => return Err(Error::Interrupted),
                    // Where the likelihood cannot be evaluated the density vanishes: a
                    // divergence.
                    Err(_) => return Ok(f64::NEG_INFINITY),
                }
            }
        };
        let mut logp = -0.5 * twice_nll;
        for (k, ((&i, map), &u)) in target.free.iter().zip(&target.maps).zip(u).enumerate() {
            let (_, dtheta, dlogj) = map.forward(u);
            grad[k] = -0.5 * full[i] * dtheta + dlogj;
            logp += map.log_jacobian(u);
        }
        if target.prior == PoiPrior::InverseSqrt {
            // log prior −½ ln μ; μ > 0 inside bounds at or above 0 (0 itself only by underflow,
            // where the density is not finite: a divergence).
            let k = target.poi;
            let (mu, dmu, _) = target.maps[k].forward(u[k]);
            logp -= 0.5 * mu.ln();
            grad[k] -= 0.5 / mu * dmu;
        }
        Ok(logp)
    }
}

/// The chains of a posterior before their summary (what a shard of one computes): the free
/// parameters' names and bounds (the flat priors' ranges) and each chain's draws (model space,
/// `[chain][draw][free parameter]`) and sampler.
#[derive(Clone, Debug)]
pub struct PosteriorChains {
    pub poi: String,
    pub names: Vec<String>,
    pub bounds: Vec<(f64, f64)>,
    pub draws: Vec<Vec<Vec<f64>>>,
    pub chains: Vec<ChainReport>,
}

/// The posterior of the model under `config` (its bounds are the flat priors' ranges, its fixed
/// parameters stay fixed) on `data`. `progress` receives the iterations done over all chains.
pub fn posterior(
    fitter: &Fitter,
    data: &PreparedData,
    config: &FitConfig,
    spec: &PosteriorSpec,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<Posterior> {
    let chains = posterior_chains(fitter, data, config, spec, 0..spec.chains, progress)?;
    Posterior::of_chains(spec, chains)
}

/// Chains `share` of the posterior [`posterior`] computes: chain `c` is the same draws whichever
/// share runs it (its random stream is `c`'s, its start the best fit's).
pub fn posterior_chains(
    fitter: &Fitter,
    data: &PreparedData,
    config: &FitConfig,
    spec: &PosteriorSpec,
    share: std::ops::Range<usize>,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<PosteriorChains> {
    let model = fitter.model();
    let poi = crate::checks::free_poi(fitter, config)?;
    let free: Vec<usize> = (0..model.n_params())
        .filter(|&i| !config.fixed[i])
        .collect();
    spec.check(free.len())?;
    let (low, _) = config.bounds[poi];
    if spec.prior == PoiPrior::InverseSqrt && !(low >= 0.0) {
        return Err(Error::InvalidInput(format!(
            "the prior 1/sqrt({0}) needs the bounds of '{0}' at or above 0, not from {low} \
             (bound it from 0)",
            model.parameter_names()[poi]
        )));
    }
    if share.end > spec.chains || share.start > share.end {
        return Err(Error::InvalidInput(format!(
            "chains {}..{} of a posterior of {} chains",
            share.start, share.end, spec.chains
        )));
    }
    let best = fitter.fit_global(data, config)?;
    crate::checks::started(fitter, &best, data)?;
    let maps: Vec<Map> = free.iter().map(|&i| Map::of(config.bounds[i])).collect();
    let target = Target {
        fitter,
        data,
        base: best.parameters.clone(),
        free: free.clone(),
        maps: maps.clone(),
        poi: free
            .iter()
            .position(|&i| i == poi)
            .expect("the POI is free"),
        prior: spec.prior,
        gathered: match fitter.batches_on_device() {
            true => Some(Gathered {
                fitter,
                data,
                resident: fitter.upload_for_rows(data)?,
                state: Mutex::new(Gathering {
                    running: share.len(),
                    ..Gathering::default()
                }),
                to_server: Condvar::new(),
                to_chains: Condvar::new(),
            }),
            false => None,
        },
    };
    let centre: Vec<f64> = free
        .iter()
        .zip(&maps)
        .map(|(&i, map)| map.inverse(best.parameters[i]))
        .collect();
    let options = NutsOptions {
        warmup: spec.warmup,
        draws: spec.draws,
        max_depth: spec.max_tree_depth,
        target_accept: spec.target_accept,
    };
    let done = AtomicUsize::new(0);
    let chain = |c: usize| {
        let mut rng = ToyStream::new(spec.seed, CHAIN_STREAM, c as u32);
        let _member = target.gathered.as_ref().map(Member);
        let density = ChainTarget {
            target: &target,
            chain: c,
        };
        // Chains start apart, so that R̂ can tell whether they meet: a random step from the
        // best fit, halved while the posterior is not finite there (a step can drive a yield
        // negative), down to the best fit itself.
        let step: Vec<f64> = centre.iter().map(|_| 0.6 * (rng.uniform() - 0.5)).collect();
        let mut grad = vec![0.0; centre.len()];
        let mut scale = 1.0;
        let mut start: Vec<f64>;
        loop {
            start = centre
                .iter()
                .zip(&step)
                .map(|(u, s)| u + scale * s)
                .collect();
            if scale == 0.0 || density.log_density(&start, &mut grad)?.is_finite() {
                break;
            }
            scale = if scale > 1e-3 { scale / 2.0 } else { 0.0 };
        }
        run_chain(&density, &start, &options, &mut rng, &|_| {
            progress(done.fetch_add(1, Ordering::Relaxed) + 1);
            fitter.check_interrupt()
        })
    };
    let runs: Vec<ChainRun> = if target.gathered.is_some() {
        // Every chain on a thread of its own: each waits for the others' points at every
        // evaluation, which a pool of fewer threads would deadlock; this thread serves the
        // device.
        std::thread::scope(|scope| {
            let handles: Vec<_> = share
                .clone()
                .map(|c| {
                    let spawned = std::thread::Builder::new().spawn_scoped(scope, move || chain(c));
                    spawned.map_err(|e| {
                        // The others must not wait for a chain that never starts.
                        if let Some(g) = &target.gathered {
                            g.leave();
                        }
                        Error::Computation(format!(
                            "chain {c} of the posterior could not start its thread: {e}"
                        ))
                    })
                })
                .collect();
            // This thread evaluates the chains' batches until the last chain is done.
            if let Some(g) = &target.gathered {
                g.serve();
            }
            handles
                .into_iter()
                .map(|h| {
                    h?.join().unwrap_or_else(|_| {
                        Err(Error::Computation(
                            "a posterior chain's thread panicked".into(),
                        ))
                    })
                })
                .collect::<Result<_>>()
        })?
    } else {
        share
            .clone()
            .into_par_iter()
            .map(chain)
            .collect::<Result<_>>()?
    };
    let draws: Vec<Vec<Vec<f64>>> = runs
        .iter()
        .map(|run| {
            run.draws
                .iter()
                .map(|u| {
                    u.iter()
                        .zip(&maps)
                        .map(|(&u, map)| map.forward(u).0)
                        .collect()
                })
                .collect()
        })
        .collect();
    Ok(PosteriorChains {
        poi: model.parameter_names()[poi].clone(),
        names: free
            .iter()
            .map(|&i| model.parameter_names()[i].clone())
            .collect(),
        bounds: free.iter().map(|&i| config.bounds[i]).collect(),
        draws,
        chains: runs
            .iter()
            .map(|r| ChainReport {
                divergences: r.divergences,
                max_depth_hits: r.max_depth_hits,
                step_size: r.step_size,
                mean_tree_depth: r.mean_tree_depth,
                mean_accept: r.mean_accept,
            })
            .collect(),
    })
}

impl Posterior {
    /// The posterior of `chains` (all of `spec`'s, in chain order): every parameter's summary,
    /// the POI's credible upper limit and interval, the warnings.
    pub fn of_chains(spec: &PosteriorSpec, chains: PosteriorChains) -> Result<Posterior> {
        let PosteriorChains {
            poi,
            names,
            bounds,
            draws,
            chains,
        } = chains;
        let k_poi = names.iter().position(|n| *n == poi).ok_or_else(|| {
            Error::InvalidInput(format!(
                "the POI '{poi}' is not among the sampled parameters"
            ))
        })?;
        if draws.len() != spec.chains
            || chains.len() != spec.chains
            || draws
                .iter()
                .any(|c| c.len() != spec.draws || c.iter().any(|d| d.len() != names.len()))
        {
            return Err(Error::InvalidInput(format!(
                "a posterior of {} chains × {} draws of {} parameters was given other draws",
                spec.chains,
                spec.draws,
                names.len()
            )));
        }
        let parameters: Vec<ParameterSummary> = (0..names.len())
            .into_par_iter()
            .map(|k| summary(&names[k], &draws, k))
            .collect();
        let poi_chains: Vec<Vec<f64>> = draws
            .iter()
            .map(|c| c.iter().map(|d| d[k_poi]).collect())
            .collect();
        let mut sorted: Vec<f64> = poi_chains.iter().flatten().copied().collect();
        sorted.sort_by(f64::total_cmp);
        let tail = (1.0 - spec.cl) / 2.0;
        let mut result = Posterior {
            spec: *spec,
            poi,
            upper_limit: quantile_of_sorted(&sorted, spec.cl),
            upper_limit_error: quantile_error(&poi_chains, spec.cl),
            central_interval: (
                quantile_of_sorted(&sorted, tail),
                quantile_of_sorted(&sorted, 1.0 - tail),
            ),
            names,
            parameters,
            draws,
            chains,
            warnings: Vec::new(),
        };
        result.warnings = warnings(&result, &bounds);
        Ok(result)
    }
}

/// The summary of free parameter `k` over every chain's draws.
fn summary(name: &str, draws: &[Vec<Vec<f64>>], k: usize) -> ParameterSummary {
    let chains: Vec<Vec<f64>> = draws
        .iter()
        .map(|c| c.iter().map(|d| d[k]).collect())
        .collect();
    let mut all: Vec<f64> = chains.iter().flatten().copied().collect();
    let n = all.len() as f64;
    let mean = all.iter().sum::<f64>() / n;
    let sd = (all.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / (n - 1.0).max(1.0)).sqrt();
    all.sort_by(f64::total_cmp);
    ParameterSummary {
        name: name.to_string(),
        mean,
        sd,
        quantiles: SUMMARY_QUANTILES.map(|p| quantile_of_sorted(&all, p)),
        diagnostics: diagnostics(&chains),
    }
}

/// What qualifies a posterior: divergent transitions, chains that disagree (R̂), and free
/// parameters whose posterior fills their bounds (the likelihood leaves them to their flat
/// prior, whose range then decides the answer).
fn warnings(p: &Posterior, bounds: &[(f64, f64)]) -> Vec<String> {
    let mut out = Vec::new();
    let divergences: usize = p.chains.iter().map(|c| c.divergences).sum();
    if divergences > 0 {
        out.push(format!(
            "{divergences} of {} draws followed a divergent trajectory: the posterior has \
             regions the step size does not resolve, and the draws may miss them (raise \
             target_accept toward 0.95)",
            p.spec.chains * p.spec.draws
        ));
    }
    if let Some(worst) = p
        .parameters
        .iter()
        .filter(|s| !s.diagnostics.r_hat.is_nan())
        .max_by(|a, b| a.diagnostics.r_hat.total_cmp(&b.diagnostics.r_hat))
        && worst.diagnostics.r_hat > R_HAT_LIMIT
    {
        out.push(format!(
            "R̂ of '{}' is {:.3} (above {R_HAT_LIMIT}): the chains have not met; run more \
             warmup and draws",
            worst.name, worst.diagnostics.r_hat
        ));
    }
    let filling: Vec<String> = p
        .parameters
        .iter()
        .zip(bounds)
        .filter(|&(s, &(lo, hi))| {
            let width = hi - lo;
            width.is_finite()
                && s.quantiles[0] < lo + 0.05 * width
                && s.quantiles[4] > hi - 0.05 * width
        })
        .map(|(s, (lo, hi))| format!("'{}' [{lo}, {hi}]", s.name))
        .collect();
    if let Some(k) = p.names.iter().position(|n| *n == p.poi) {
        let (lo, hi) = bounds[k];
        if hi.is_finite() && p.upper_limit > hi - 0.05 * (hi - lo) {
            out.push(format!(
                "the upper limit on '{}', {:.4}, lies within 5% of its upper bound {hi}: the \
                 prior's range decides it (widen the POI's bounds)",
                p.poi, p.upper_limit
            ));
        }
    }
    if !filling.is_empty() {
        out.push(format!(
            "the posterior of {} fills its bounds: the likelihood does not constrain it (a flat \
             direction), so its flat prior's range decides the answer",
            filling.join(", ")
        ));
    }
    out
}
