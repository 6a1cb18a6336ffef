//! The likelihood as a differentiable function of signal yields: what analysis optimisation
//! (neos, INFERNO-style training) needs. A neural network produces the yields of one or more
//! samples ("external" samples, named by channel and sample); they replace those samples' nominal
//! yields, and the session returns the NLL or a profiled test statistic with its exact gradient
//! with respect to the yields.
//!
//! - NLL: ∂NLL/∂s from the reverse pass ([`CpuEvaluator::nominal_gradient`]), ∂NLL/∂θ as usual.
//! - Profiled q0, qμ, q̃μ: both fits run (warm-started from the previous call), and by the
//!   envelope theorem dq/ds = 2(∂NLL/∂s at the conditional fit − ∂NLL/∂s at the free fit): the
//!   fitted parameters move with s, but the NLL is stationary in them (or held at a bound whose
//!   position does not depend on s). Where q is clipped to 0 (μ̂ on the other side of the tested
//!   value) q and its gradient are 0.
//! - On Asimov data the data move with s as well: the expected main data at the Asimov
//!   parameters, so dq/ds gains Σ_b ∂q/∂n_b · ∂n_b/∂s with ∂q/∂n_b = 2(ln λ̂_b − ln λ̂̂_b).
//!
//! External samples keep their histosys templates (hi/lo data) fixed, so the deltas move with the
//! yields. A staterror on an external sample follows pyhf: its relative width is
//! √(Σδ²)/Σν₀ over the samples it covers in the bin, with the absolute uncertainties δ fixed, so
//! the width moves with the yields too (and ∂NLL/∂s has its term). A shapesys on an external sample
//! is refused: its τ and auxiliary data would move with the yields.

use std::sync::Mutex;

use ns_compute::{CpuEvaluator, PreparedData, Scratch};
use ns_core::{Error, HistFactoryModel, Result};
use rayon::prelude::*;

use crate::checks;
use crate::fit::{FitConfig, FitResult, Fitter};
use crate::hypotest::{TestStatistic, statistic_from_fits};

/// One external sample: its compiled block and where its bins sit in the signal vector; the
/// histosys templates of the block, per bin and term (hi, lo).
#[derive(Clone, Debug)]
struct ExternalBlock {
    block: usize,
    offset: usize,
    n_bins: usize,
    templates: Vec<(f64, f64)>,
}

/// A staterror parameter that covers external yields: its Gaussian constraint, √(Σδ²) of its
/// bin, the nominal yield of the samples it covers that are not external, and the signal indices
/// it covers.
#[derive(Clone, Debug)]
struct StatErrorLink {
    constraint: usize,
    absolute: f64,
    fixed_nominal: f64,
    members: Vec<usize>,
}

/// NLL with its gradients.
#[derive(Clone, Debug)]
pub struct NllGradient {
    pub nll: f64,
    /// ∂NLL/∂s over the signal vector.
    pub d_signal: Vec<f64>,
    /// ∂NLL/∂θ over the parameters.
    pub d_pars: Vec<f64>,
}

/// A profiled test statistic with its gradient with respect to the signal yields.
#[derive(Clone, Debug)]
pub struct ProfiledStatistic {
    pub q: f64,
    pub d_signal: Vec<f64>,
    pub free_fit: FitResult,
    pub fixed_fit: FitResult,
}

/// The data a profiled statistic is computed on.
#[derive(Clone, Debug)]
pub enum StatisticData<'a> {
    /// Fixed data (e.g. the observed data).
    Fixed(&'a PreparedData),
    /// The expected data (main and auxiliary) of the model with the current signal at
    /// `parameters` (e.g. the suggested init with the POI at 1: the nominal Asimov dataset of
    /// the expected discovery significance); they move with the signal.
    Asimov { parameters: &'a [f64] },
}

/// The best-fit parameters of the last free and conditional fits of one statistic.
type WarmStart = (Option<Vec<f64>>, Option<Vec<f64>>);

/// What a warm start belongs to: the statistic, the tested μ (bits) and whether on Asimov data.
type WarmKey = (u8, u64, bool);

fn warm_key(stat: TestStatistic, mu: f64, data: &StatisticData) -> WarmKey {
    (
        stat as u8,
        mu.to_bits(),
        matches!(data, StatisticData::Asimov { .. }),
    )
}

/// A model whose external samples' yields are inputs.
pub struct DifferentiableSession {
    model: HistFactoryModel,
    external: Vec<ExternalBlock>,
    staterror: Vec<StatErrorLink>,
    n_signal: usize,
    /// Best-fit parameters of the last free and conditional fits of each statistic: the next
    /// call of the same statistic starts there.
    warm: Mutex<std::collections::HashMap<WarmKey, WarmStart>>,
    /// A copy of `model` that calls write their signal into.
    work: Mutex<HistFactoryModel>,
}

impl DifferentiableSession {
    /// A session over `model` with `samples` ((channel, sample) pairs) external, their bins
    /// concatenated in the order given.
    pub fn new(model: &HistFactoryModel, samples: &[(String, String)]) -> Result<Self> {
        if samples.is_empty() {
            return Err(Error::InvalidInput(
                "name at least one (channel, sample) whose yields are the signal".into(),
            ));
        }
        let compiled = &model.compiled;
        let mut external = Vec::with_capacity(samples.len());
        let mut offset = 0;
        for (channel, sample) in samples {
            let block = model.block_of(channel, sample).ok_or_else(|| {
                Error::InvalidInput(format!(
                    "channel '{channel}' has no sample '{sample}' (channels: {})",
                    model
                        .channels
                        .iter()
                        .map(|c| c.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            })?;
            if external.iter().any(|e: &ExternalBlock| e.block == block) {
                return Err(Error::InvalidInput(format!(
                    "sample '{sample}' of channel '{channel}' is named twice"
                )));
            }
            let b = &compiled.samples[block];
            let (e0, n) = (b.entry_start as usize, b.n_bins as usize);
            for e in e0..e0 + n {
                let factors = compiled.entry_factor_start[e] as usize
                    ..compiled.entry_factor_start[e + 1] as usize;
                for &p in &compiled.entry_factor_param[factors] {
                    let set = model
                        .parameter_sets
                        .iter()
                        .find(|s| (s.offset..s.offset + s.n_parameters).contains(&(p as usize)));
                    if let Some(set) = set
                        && set.modifier_type == "shapesys"
                    {
                        return Err(Error::InvalidInput(format!(
                            "sample '{sample}' of channel '{channel}' carries the shapesys '{}': \
                             its τ and auxiliary data are computed from the nominal yields, which \
                             a differentiable signal replaces; remove it from that sample",
                            set.name
                        )));
                    }
                }
            }
            let terms = (b.histosys_end - b.histosys_start) as usize;
            let d0 = b.histosys_delta_start as usize;
            let mut templates = Vec::with_capacity(n * terms);
            for i in 0..n {
                let nominal = compiled.nominal[e0 + i];
                for t in 0..terms {
                    let row = d0 + i * 2 * terms + 2 * t;
                    let (up, down) = (
                        compiled.histosys_delta[row],
                        compiled.histosys_delta[row + 1],
                    );
                    templates.push((nominal + up, nominal - down));
                }
            }
            external.push(ExternalBlock {
                block,
                offset,
                n_bins: n,
                templates,
            });
            offset += n;
        }
        let staterror = staterror_links(model, &external)?;
        Ok(DifferentiableSession {
            model: model.clone(),
            external,
            staterror,
            n_signal: offset,
            warm: Mutex::new(Default::default()),
            work: Mutex::new(model.clone()),
        })
    }

    /// Length of the signal vector.
    pub fn n_signal(&self) -> usize {
        self.n_signal
    }

    pub fn model(&self) -> &HistFactoryModel {
        &self.model
    }

    /// The workspace's own yields of the external samples (the signal vector they replace).
    pub fn nominal_signal(&self) -> Vec<f64> {
        let c = &self.model.compiled;
        self.external
            .iter()
            .flat_map(|x| {
                let e0 = c.samples[x.block].entry_start as usize;
                c.nominal[e0..e0 + x.n_bins].iter().copied()
            })
            .collect()
    }

    /// Rows of a signal batch: a positive multiple of the signal length.
    fn batch_rows(&self, signals: &[f64]) -> Result<usize> {
        let n = self.n_signal;
        if signals.is_empty() || !signals.len().is_multiple_of(n) {
            return Err(Error::InvalidInput(format!(
                "signal batch has {} values, not a positive multiple of {n} bins",
                signals.len()
            )));
        }
        Ok(signals.len() / n)
    }

    /// Write `signal` into `model` as the external samples' yields (histosys deltas against
    /// their fixed templates, staterror widths from the yields).
    fn apply(&self, model: &mut HistFactoryModel, signal: &[f64]) -> Result<()> {
        if signal.len() != self.n_signal {
            return Err(Error::InvalidInput(format!(
                "the signal has {} yields but the external samples have {} bins",
                signal.len(),
                self.n_signal
            )));
        }
        if let Some(i) = signal.iter().position(|v| !v.is_finite()) {
            return Err(Error::InvalidInput(format!(
                "signal yield {i} is {}: yields must be finite",
                signal[i]
            )));
        }
        for link in &self.staterror {
            let total = link.fixed_nominal + link.members.iter().map(|&i| signal[i]).sum::<f64>();
            if !(total > 0.0) {
                return Err(Error::InvalidInput(format!(
                    "the yields a staterror covers sum to {total} in one bin: its relative width \
                     √(Σδ²)/Σν is undefined"
                )));
            }
            model.compiled.gaussian[link.constraint].sigma = link.absolute / total;
        }
        let c = &mut model.compiled;
        for x in &self.external {
            let b = c.samples[x.block];
            let (e0, d0) = (b.entry_start as usize, b.histosys_delta_start as usize);
            let terms = (b.histosys_end - b.histosys_start) as usize;
            for i in 0..x.n_bins {
                let s = signal[x.offset + i];
                c.nominal[e0 + i] = s;
                for t in 0..terms {
                    let (hi, lo) = x.templates[i * terms + t];
                    let row = d0 + i * 2 * terms + 2 * t;
                    c.histosys_delta[row] = hi - s;
                    c.histosys_delta[row + 1] = s - lo;
                }
            }
        }
        Ok(())
    }

    /// ∂NLL/∂s of the last evaluation on `scratch` (at `pars` on `data`), over the signal
    /// vector: through the expected counts, and through the staterror widths.
    fn signal_gradient(
        &self,
        eval: &CpuEvaluator,
        scratch: &Scratch,
        pars: &[f64],
        data: &PreparedData,
    ) -> Result<Vec<f64>> {
        let mut d = vec![0.0; self.n_signal];
        for x in &self.external {
            eval.nominal_gradient(scratch, x.block, &mut d[x.offset..x.offset + x.n_bins])?;
        }
        let gaussian = &eval.model().gaussian;
        for link in &self.staterror {
            let c = gaussian[link.constraint];
            let sigma = c.sigma;
            let pull = (data.aux[c.aux_index as usize] - pars[c.param as usize]) / sigma;
            // NLL term ½ pull² + ln σ; σ = √(Σδ²)/Σν, so dσ/ds = −σ/Σν = −σ²/√(Σδ²).
            let d_sigma = (1.0 - pull * pull) / sigma;
            let ds = -sigma * sigma / link.absolute;
            for &i in &link.members {
                d[i] += d_sigma * ds;
            }
        }
        Ok(d)
    }

    /// Run `f` on the working copy of the model (no copy per call), or on a private copy while
    /// another call holds it: concurrent calls never wait on each other.
    fn with_work<T>(&self, f: impl FnOnce(&mut HistFactoryModel) -> T) -> T {
        match self.work.try_lock() {
            Ok(mut model) => f(&mut model),
            Err(std::sync::TryLockError::Poisoned(poisoned)) => f(&mut poisoned.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => f(&mut self.model.clone()),
        }
    }

    /// NLL and its gradients at `pars` on `data` with `signal` as the external yields.
    pub fn nll(&self, signal: &[f64], pars: &[f64], data: &PreparedData) -> Result<NllGradient> {
        self.with_work(|model| self.nll_on(model, signal, pars, data))
    }

    fn nll_on(
        &self,
        model: &mut HistFactoryModel,
        signal: &[f64],
        pars: &[f64],
        data: &PreparedData,
    ) -> Result<NllGradient> {
        self.apply(model, signal)?;
        let model = &*model;
        let eval = CpuEvaluator::new(&model.compiled);
        let mut scratch = Scratch::new(&model.compiled);
        let mut d_pars = vec![0.0; model.n_params()];
        // The Gaussian normalisations in the data constant follow the staterror widths.
        let reprepared;
        let data = if self.staterror.is_empty() {
            data
        } else {
            reprepared = PreparedData::new(&model.compiled, data.main.clone(), data.aux.clone())?;
            &reprepared
        };
        let nll = eval.nll_with_gradient(pars, data, &mut scratch, Some(&mut d_pars))?;
        Ok(NllGradient {
            nll,
            d_signal: self.signal_gradient(&eval, &scratch, pars, data)?,
            d_pars,
        })
    }

    /// [`nll`](Self::nll) for many signal vectors (rows of `signals`) at once, in parallel;
    /// `pars` holds one row for all or one per signal.
    pub fn nll_batch(
        &self,
        signals: &[f64],
        pars: &[f64],
        data: &PreparedData,
    ) -> Result<Vec<NllGradient>> {
        let (n, p) = (self.n_signal, self.model.n_params());
        let rows = self.batch_rows(signals)?;
        if pars.len() != p && pars.len() != rows * p {
            return Err(Error::InvalidInput(format!(
                "parameters have {} values for {rows} signals of a {p}-parameter model (give {p} or {})",
                pars.len(),
                rows * p
            )));
        }
        signals
            .par_chunks(n)
            .enumerate()
            .map_init(
                || self.model.clone(),
                |model, (r, s)| {
                    let row = if pars.len() == p {
                        pars
                    } else {
                        &pars[r * p..(r + 1) * p]
                    };
                    self.nll_on(model, s, row, data)
                },
            )
            .collect()
    }

    /// d(expected main data)/ds after a forward pass on `scratch`: per signal yield, its bin and
    /// the slope.
    fn expected_jacobian(
        &self,
        eval: &CpuEvaluator,
        scratch: &Scratch,
    ) -> Result<Vec<(usize, f64)>> {
        let c = &self.model.compiled;
        let mut jacobian = Vec::with_capacity(self.n_signal);
        for x in &self.external {
            let mut slope = vec![0.0; x.n_bins];
            eval.nominal_slope(scratch, x.block, &mut slope)?;
            let bin0 = c.samples[x.block].bin_start as usize;
            jacobian.extend(slope.into_iter().enumerate().map(|(i, d)| (bin0 + i, d)));
        }
        Ok(jacobian)
    }

    /// A profiled test statistic at `mu` (ignored for q0) and its gradient with respect to the
    /// signal yields. `config` holds the fits' bounds and fixed parameters; each fit starts from
    /// the previous call's solution where that lies within the bounds (training moves the
    /// signal a little per step), else from `config.init`.
    pub fn profiled(
        &self,
        signal: &[f64],
        stat: TestStatistic,
        mu: f64,
        data: StatisticData,
        config: &FitConfig,
    ) -> Result<ProfiledStatistic> {
        let key = warm_key(stat, mu, &data);
        let warm = self.warm_start_of(key);
        let result =
            self.with_work(|model| self.profiled_on(model, signal, stat, mu, &data, config, warm))?;
        self.remember(key, &result);
        Ok(result)
    }

    fn warm_start_of(&self, key: WarmKey) -> WarmStart {
        self.warm
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get(&key)
            .cloned()
            .unwrap_or_default()
    }

    fn remember(&self, key: WarmKey, result: &ProfiledStatistic) {
        self.warm
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(
                key,
                (
                    Some(result.free_fit.parameters.clone()),
                    Some(result.fixed_fit.parameters.clone()),
                ),
            );
    }

    /// [`profiled`](Self::profiled) for many signal vectors (rows of `signals`), their fits in
    /// parallel; every row starts from the session's last solution of this statistic, and the
    /// first row's solution is kept for the next call (results do not depend on thread timing).
    pub fn profiled_batch(
        &self,
        signals: &[f64],
        stat: TestStatistic,
        mu: f64,
        data: StatisticData,
        config: &FitConfig,
    ) -> Result<Vec<ProfiledStatistic>> {
        let n = self.n_signal;
        self.batch_rows(signals)?;
        let key = warm_key(stat, mu, &data);
        let warm = self.warm_start_of(key);
        let results = signals
            .par_chunks(n)
            .map_init(
                || self.model.clone(),
                |model, s| self.profiled_on(model, s, stat, mu, &data, config, warm.clone()),
            )
            .collect::<Result<Vec<_>>>()?;
        self.remember(key, &results[0]);
        Ok(results)
    }

    #[allow(clippy::too_many_arguments)]
    fn profiled_on(
        &self,
        model: &mut HistFactoryModel,
        signal: &[f64],
        stat: TestStatistic,
        mu: f64,
        data: &StatisticData,
        config: &FitConfig,
        (warm_free, warm_fixed): WarmStart,
    ) -> Result<ProfiledStatistic> {
        self.apply(model, signal)?;
        let model = &*model;
        let fitter = Fitter::new(model);
        let poi = checks::free_poi(&fitter, config)?;
        let mu = if stat == TestStatistic::Q0 { 0.0 } else { mu };
        checks::value_in_bounds(&fitter, config, poi, mu, "mu")?;
        let eval = CpuEvaluator::new(&model.compiled);
        let mut scratch = Scratch::new(&model.compiled);
        let prepared;
        let (data, jacobian) = match *data {
            // The Gaussian normalisations in the data constant follow the staterror widths, so
            // the fits' twice_nll are those of the model with this signal.
            StatisticData::Fixed(d) if !self.staterror.is_empty() => {
                prepared = PreparedData::new(&model.compiled, d.main.clone(), d.aux.clone())?;
                (&prepared, None)
            }
            StatisticData::Fixed(d) => (d, None),
            StatisticData::Asimov { parameters } => {
                let (main, aux) = eval.expected_data(parameters, &mut scratch)?;
                let jacobian = self.expected_jacobian(&eval, &scratch)?;
                prepared = PreparedData::new(&model.compiled, main, aux)?;
                (&prepared, Some(jacobian))
            }
        };
        let free_fit = fitter.fit(data, &warm_start(config, warm_free))?;
        checks::started(&fitter, &free_fit, data)?;
        let fixed_fit = fitter.fit(data, &warm_start(&config.with_fixed(poi, mu), warm_fixed))?;
        checks::started(&fitter, &fixed_fit, data)?;
        let q = statistic_from_fits(stat, mu, poi, &fixed_fit, &free_fit);
        let mut d_signal = vec![0.0; self.n_signal];
        if q > 0.0 {
            let mut at = |pars: &[f64]| -> Result<(Vec<f64>, Vec<f64>)> {
                eval.nll_minus_constant(pars, data, &mut scratch, None)?;
                Ok((
                    self.signal_gradient(&eval, &scratch, pars, data)?,
                    scratch.expected_main().to_vec(),
                ))
            };
            let (g_fixed, expected_fixed) = at(&fixed_fit.parameters)?;
            let (g_free, expected_free) = at(&free_fit.parameters)?;
            for (k, d) in d_signal.iter_mut().enumerate() {
                *d = 2.0 * (g_fixed[k] - g_free[k]);
            }
            // Asimov data move with the signal: ∂q/∂n_b = 2(ln λ̂_b − ln λ̂̂_b). A bin where the
            // data do not move (slope 0: the signal is scaled to 0 at the Asimov point) or where
            // a fit expects nothing (q does not depend smoothly on its count there) adds nothing.
            if let Some(jacobian) = jacobian {
                for (d, (bin, slope)) in d_signal.iter_mut().zip(jacobian) {
                    let (free, fixed) = (expected_free[bin], expected_fixed[bin]);
                    if slope != 0.0 && free > 0.0 && fixed > 0.0 {
                        *d += 2.0 * (free.ln() - fixed.ln()) * slope;
                    }
                }
            }
        }
        Ok(ProfiledStatistic {
            q,
            d_signal,
            free_fit,
            fixed_fit,
        })
    }
}

/// The staterror parameters that cover external yields, with what their widths are made of.
fn staterror_links(
    model: &HistFactoryModel,
    external: &[ExternalBlock],
) -> Result<Vec<StatErrorLink>> {
    let c = &model.compiled;
    // A staterror bin pyhf fixes (no uncertainty, or no yield, in the workspace) keeps its
    // constant width 1: it has no link.
    let is_varying_staterror = |p: usize| {
        model.parameter_sets.iter().any(|s| {
            s.modifier_type == "staterror"
                && (s.offset..s.offset + s.n_parameters).contains(&p)
                && !s.fixed[p - s.offset]
        })
    };
    let factors = |e: usize| {
        &c.entry_factor_param
            [c.entry_factor_start[e] as usize..c.entry_factor_start[e + 1] as usize]
    };
    // Signal index of each external entry.
    let mut signal_index = std::collections::HashMap::new();
    for x in external {
        let e0 = c.samples[x.block].entry_start as usize;
        for i in 0..x.n_bins {
            signal_index.insert(e0 + i, x.offset + i);
        }
    }
    let mut links: Vec<(usize, StatErrorLink)> = Vec::new();
    for (&e, &i) in &signal_index {
        for &p in factors(e) {
            let p = p as usize;
            if !is_varying_staterror(p)
                || links.iter().any(|(q, l)| *q == p && l.members.contains(&i))
            {
                continue;
            }
            if let Some((_, link)) = links.iter_mut().find(|(q, _)| *q == p) {
                link.members.push(i);
                continue;
            }
            let constraint = c
                .gaussian
                .iter()
                .position(|g| g.param as usize == p)
                .ok_or_else(|| {
                    Error::InvalidModel(format!(
                        "internal: staterror parameter {p} has no constraint"
                    ))
                })?;
            let (mut total, mut fixed_nominal) = (0.0, 0.0);
            for entry in 0..c.n_entries() {
                if factors(entry).iter().any(|&q| q as usize == p) {
                    total += c.nominal[entry];
                    if !signal_index.contains_key(&entry) {
                        fixed_nominal += c.nominal[entry];
                    }
                }
            }
            let absolute = c.gaussian[constraint].sigma * total;
            if !(absolute > 0.0) {
                // No yield in the workspace's bin: √(Σδ²) cannot be recovered; the width stays.
                continue;
            }
            links.push((
                p,
                StatErrorLink {
                    constraint,
                    absolute,
                    fixed_nominal,
                    members: vec![i],
                },
            ));
        }
    }
    let mut links: Vec<StatErrorLink> = links.into_iter().map(|(_, l)| l).collect();
    for l in &mut links {
        l.members.sort_unstable();
    }
    links.sort_by_key(|l| l.constraint);
    Ok(links)
}

/// `config` starting from `previous` where every free parameter of it lies within the bounds.
fn warm_start(config: &FitConfig, previous: Option<Vec<f64>>) -> FitConfig {
    let mut c = config.clone();
    if let Some(p) = previous
        && p.len() == c.init.len()
        && (0..p.len()).all(|i| c.fixed[i] || (c.bounds[i].0 <= p[i] && p[i] <= c.bounds[i].1))
    {
        for i in 0..p.len() {
            if !c.fixed[i] {
                c.init[i] = p[i];
            }
        }
        // The variable scaling of the previous start is stale: recompute it.
        c.scale = None;
    }
    c
}
