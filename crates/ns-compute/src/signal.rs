//! External signal yields: samples ("external" samples, named by channel and sample) whose
//! nominal yields are an input of each evaluation rather than part of the model — what a
//! differentiable likelihood of a network's histogram needs. Every backend evaluates them the
//! same way:
//!
//! - the yields s replace the samples' nominal yields;
//! - their histosys templates (hi/lo data) stay fixed, so the deltas move with the yields
//!   (Δup = hi − s, Δdown = s − lo);
//! - a staterror on an external sample follows pyhf: its relative width is √(Σδ²)/Σν over the
//!   samples it covers in the bin, with the absolute uncertainties δ fixed, so the width moves
//!   with the yields (σ = √(Σδ²)/(ν_fixed + Σ s)); a staterror bin pyhf fixes (no uncertainty or
//!   no yield in the workspace) keeps its width;
//! - a shapesys on an external sample is refused: its τ and auxiliary data would move with the
//!   yields.
//!
//! Besides the NLL, an evaluation returns ∂NLL/∂s: through the expected counts (the slope of
//! the entry's yield in its nominal, times ∂NLL/∂λ of its bin) and through the staterror widths.

use std::collections::HashMap;

use ns_core::layout::SampleBlock;
use ns_core::{CompiledModel, Error, HistFactoryModel, Result};

use crate::cpu::{CpuEvaluator, Scratch};
use crate::data::PreparedData;

/// One external sample: its compiled block (index and layout), where its bins sit in the signal
/// vector, and its histosys templates per bin and term (hi, lo).
#[derive(Clone, Debug)]
pub struct ExternalBlock {
    pub block: usize,
    pub layout: SampleBlock,
    pub offset: usize,
    pub n_bins: usize,
    pub templates: Vec<(f64, f64)>,
}

/// A staterror parameter whose width moves with external yields: its Gaussian constraint,
/// √(Σδ²) of its bin, the nominal yield of the samples it covers that are not external, and the
/// signal indices it covers (ascending).
#[derive(Clone, Debug)]
pub struct StatErrorLink {
    pub constraint: usize,
    pub absolute: f64,
    pub fixed_nominal: f64,
    pub members: Vec<usize>,
}

/// The external samples of one model.
#[derive(Clone, Debug)]
pub struct ExternalSignal {
    blocks: Vec<ExternalBlock>,
    /// Sorted by constraint.
    staterror: Vec<StatErrorLink>,
    n_signal: usize,
}

impl ExternalSignal {
    /// `samples` ((channel, sample) pairs) of `model` as external, their bins concatenated in
    /// the order given.
    pub fn new(model: &HistFactoryModel, samples: &[(String, String)]) -> Result<Self> {
        if samples.is_empty() {
            return Err(Error::InvalidInput(
                "name at least one (channel, sample) whose yields are the signal".into(),
            ));
        }
        let compiled = &model.compiled;
        let mut blocks: Vec<ExternalBlock> = Vec::with_capacity(samples.len());
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
            if blocks.iter().any(|e| e.block == block) {
                return Err(Error::InvalidInput(format!(
                    "sample '{sample}' of channel '{channel}' is named twice"
                )));
            }
            refuse_shapesys(model, block, channel, sample)?;
            let floored = compiled
                .floored_blocks
                .iter()
                .any(|f| f.block as usize == block);
            if floored || !compiled.bin_stats.is_empty() {
                return Err(Error::InvalidInput(format!(
                    "sample '{sample}' of channel '{channel}' cannot take external yields: {}",
                    if floored {
                        "its morphed template is floored (CMS Combine's shape systematics), which \
                         external yields are not differentiated through"
                    } else {
                        "the model has template statistics (CMS Combine's autoMCStats), which \
                         external yields are not differentiated through"
                    }
                )));
            }
            let b = &compiled.samples[block];
            let (e0, n) = (b.entry_start as usize, b.n_bins as usize);
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
            blocks.push(ExternalBlock {
                block,
                layout: *b,
                offset,
                n_bins: n,
                templates,
            });
            offset += n;
        }
        let staterror = staterror_links(model, &blocks)?;
        Ok(ExternalSignal {
            blocks,
            staterror,
            n_signal: offset,
        })
    }

    /// Length of the signal vector.
    pub fn len(&self) -> usize {
        self.n_signal
    }

    pub fn is_empty(&self) -> bool {
        self.n_signal == 0
    }

    pub fn blocks(&self) -> &[ExternalBlock] {
        &self.blocks
    }

    pub fn staterror(&self) -> &[StatErrorLink] {
        &self.staterror
    }

    /// The workspace's own yields of the external samples (the signal vector they replace).
    pub fn nominal(&self, model: &CompiledModel) -> Vec<f64> {
        self.blocks
            .iter()
            .flat_map(|x| {
                let e0 = model.samples[x.block].entry_start as usize;
                model.nominal[e0..e0 + x.n_bins].iter().copied()
            })
            .collect()
    }

    /// Rows of a signal batch: a positive multiple of the signal length.
    pub fn rows(&self, signals: usize) -> Result<usize> {
        let n = self.n_signal;
        if signals == 0 || !signals.is_multiple_of(n) {
            return Err(Error::InvalidInput(format!(
                "signal batch has {signals} values, not a positive multiple of {n} bins"
            )));
        }
        Ok(signals / n)
    }

    /// The staterror width of `link` with `signal` as the external yields.
    fn width(link: &StatErrorLink, signal: &[f64]) -> f64 {
        link.absolute / (link.fixed_nominal + link.members.iter().map(|&i| signal[i]).sum::<f64>())
    }

    /// Errors for a signal no evaluation can take: wrong length, a non-finite yield, or yields
    /// under a staterror that sum to nothing.
    pub fn check(&self, signal: &[f64]) -> Result<()> {
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
        }
        Ok(())
    }

    /// Write `signal` into `model` (a copy of the model this was made for) as the external
    /// samples' yields: nominal yields, histosys deltas against the fixed templates, staterror
    /// widths.
    pub fn apply(&self, model: &mut CompiledModel, signal: &[f64]) -> Result<()> {
        self.check(signal)?;
        for link in &self.staterror {
            model.gaussian[link.constraint].sigma = Self::width(link, signal);
        }
        for x in &self.blocks {
            let b = model.samples[x.block];
            let (e0, d0) = (b.entry_start as usize, b.histosys_delta_start as usize);
            let terms = (b.histosys_end - b.histosys_start) as usize;
            for i in 0..x.n_bins {
                let s = signal[x.offset + i];
                model.nominal[e0 + i] = s;
                for t in 0..terms {
                    let (hi, lo) = x.templates[i * terms + t];
                    let row = d0 + i * 2 * terms + 2 * t;
                    model.histosys_delta[row] = hi - s;
                    model.histosys_delta[row + 1] = s - lo;
                }
            }
        }
        Ok(())
    }

    /// ∂NLL/∂s of the last evaluation by `eval` (of a model with the signal applied) on
    /// `scratch`, at `pars` on `data`: through the expected counts, then through the staterror
    /// widths (links in constraint order).
    pub fn gradient(
        &self,
        eval: &CpuEvaluator,
        scratch: &Scratch,
        pars: &[f64],
        data: &PreparedData,
    ) -> Result<Vec<f64>> {
        let mut d = vec![0.0; self.n_signal];
        for x in &self.blocks {
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

    /// d(expected main data)/ds after a forward pass by `eval` on `scratch`: per signal yield,
    /// its main bin and the slope.
    pub fn expected_jacobian(
        &self,
        eval: &CpuEvaluator,
        scratch: &Scratch,
    ) -> Result<Vec<(usize, f64)>> {
        let c = eval.model();
        let mut jacobian = Vec::with_capacity(self.n_signal);
        for x in &self.blocks {
            let mut slope = vec![0.0; x.n_bins];
            eval.nominal_slope(scratch, x.block, &mut slope)?;
            let bin0 = c.samples[x.block].bin_start as usize;
            jacobian.extend(slope.into_iter().enumerate().map(|(i, d)| (bin0 + i, d)));
        }
        Ok(jacobian)
    }
}

/// The error for a shapesys on external sample `block`.
fn refuse_shapesys(
    model: &HistFactoryModel,
    block: usize,
    channel: &str,
    sample: &str,
) -> Result<()> {
    let c = &model.compiled;
    let b = &c.samples[block];
    let (e0, n) = (b.entry_start as usize, b.n_bins as usize);
    for e in e0..e0 + n {
        for &p in c.entry_factor_params(e) {
            let set = model
                .parameter_sets
                .iter()
                .find(|s| (s.offset..s.offset + s.n_parameters).contains(&(p as usize)));
            if let Some(set) = set
                && set.modifier_type == "shapesys"
            {
                return Err(Error::InvalidInput(format!(
                    "sample '{sample}' of channel '{channel}' carries the shapesys '{}': its τ \
                     and auxiliary data are computed from the nominal yields, which a \
                     differentiable signal replaces; remove it from that sample",
                    set.name
                )));
            }
        }
    }
    Ok(())
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
    // Signal index of each external entry.
    let mut signal_index = HashMap::new();
    for x in external {
        let e0 = c.samples[x.block].entry_start as usize;
        for i in 0..x.n_bins {
            signal_index.insert(e0 + i, x.offset + i);
        }
    }
    let mut links: Vec<(usize, StatErrorLink)> = Vec::new();
    for (&e, &i) in &signal_index {
        for &p in c.entry_factor_params(e) {
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
                        "the staterror parameter {p} has no Gaussian constraint (a Poisson one, \
                         as ROOT's StatErrorConfig gives): an external signal's yields move \
                         Gaussian staterror widths only; read HistFactory XML with pyhf's \
                         semantics or declare a Gaussian StatErrorConfig"
                    ))
                })?;
            let (mut total, mut fixed_nominal) = (0.0, 0.0);
            for entry in 0..c.n_entries() {
                if c.entry_factor_params(entry)
                    .iter()
                    .any(|&q| q as usize == p)
                {
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
