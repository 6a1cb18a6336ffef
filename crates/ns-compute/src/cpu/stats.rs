//! CMS Combine's autoMCStats on the CPU (`CMSHistErrorPropagator::updateCache`): after the
//! sample blocks, each main bin with statistical terms gets
//! - per Gaussian term θ·E, E = √(Σ_e (F_e σ_e)²) over its entries (the bin's summed template
//!   error, or one process's), F_e the factor on entry e's base yield;
//! - per Poisson term (θ/n − 1)·F_e·base_e: entry e's yield times θ/n;
//!
//! and its total is floored at [`BinStat::FLOOR`]. The backward pass hands each entry's share
//! back to its block as a multiplier (θ/n) on the entry's weight and a weight d NLL / d F_e.

use std::ops::Range;

use ns_core::CompiledModel;
use ns_core::layout::BinStat;

use super::evaluator::Scratch;
use super::plan::Plan;

/// What the statistical terms keep between the passes; empty for a model without them.
#[derive(Clone, Debug, Default)]
pub struct StatScratch {
    /// Per Gaussian term: E at the last forward pass.
    error: Vec<f64>,
    /// Per entry: its Poisson factor θ/n (1 without one).
    multiplier: Vec<f64>,
    /// Per entry: d NLL / d F_e owed to the Gaussian terms that read it.
    factor_weight: Vec<f64>,
    /// Per entry: what the statistical terms add to its yield (its Poisson factor's part, its
    /// share θ·(F_e σ_e)²/E of each Gaussian term, as Combine splits a bin's shift among
    /// processes).
    pub(super) shift: Vec<f64>,
    /// Per bin of `Plan::stat_bins`: held at the floor in the last forward pass.
    pub(super) bin_floored: Vec<bool>,
}

impl StatScratch {
    pub fn new(model: &CompiledModel) -> Self {
        if model.bin_stats.is_empty() {
            return Self::default();
        }
        let entries = model.n_entries();
        StatScratch {
            error: vec![0.0; model.bin_stats.len()],
            multiplier: vec![1.0; entries],
            factor_weight: vec![0.0; entries],
            shift: vec![0.0; entries],
            bin_floored: Vec::new(),
        }
    }

    /// The multipliers and factor weights of `entries` (a block read by statistical terms).
    pub(super) fn entry_terms(&self, entries: Range<usize>) -> (&[f64], &[f64]) {
        (
            &self.multiplier[entries.clone()],
            &self.factor_weight[entries],
        )
    }
}

/// Adds the statistical terms to `s.expected`, after the sample blocks.
pub(super) fn forward(plan: &Plan, params: &[f64], s: &mut Scratch) {
    let stats = &mut s.stats;
    for e in &plan.stat_entries {
        stats.shift[e.entry] = 0.0;
    }
    for (t, term) in plan.stats.iter().enumerate() {
        let entries = &plan.stat_entries[term.entries.clone()];
        let factor = |e: &super::plan::StatEntry| s.block_scale[e.block] * s.entry_product[e.entry];
        let theta = params[term.param];
        match term.poisson_count {
            Some(count) => {
                let e = &entries[0];
                let base = plan.block_base(&s.base, &plan.blocks[e.block])[e.offset];
                let multiplier = theta / count;
                let added = (multiplier - 1.0) * factor(e) * base;
                stats.multiplier[e.entry] = multiplier;
                stats.shift[e.entry] += added;
                s.expected[term.bin] += added;
            }
            None => {
                let mut sum = 0.0;
                for e in entries {
                    let error = factor(e) * e.sigma;
                    sum += error * error;
                }
                let error = sum.sqrt();
                stats.error[t] = error;
                s.expected[term.bin] += theta * error;
                if error > 0.0 {
                    for e in entries {
                        let share = factor(e) * e.sigma;
                        stats.shift[e.entry] += theta * share * share / error;
                    }
                }
            }
        }
    }
    stats.bin_floored.clear();
    for &bin in &plan.stat_bins {
        let floored = s.expected[bin] < BinStat::FLOOR;
        if floored {
            s.expected[bin] = BinStat::FLOOR;
        }
        stats.bin_floored.push(floored);
    }
}

/// The gradient of the statistical terms' own parameters, and what each read entry owes its
/// block's factors (`StatScratch::entry_terms`), from d NLL / d ν per bin.
#[allow(clippy::too_many_arguments)]
pub(super) fn backward(
    plan: &Plan,
    params: &[f64],
    bin_weight: &[f64],
    base: &[f64],
    block_scale: &[f64],
    entry_product: &[f64],
    stats: &mut StatScratch,
    grad: &mut [f64],
) {
    for e in &plan.stat_entries {
        stats.factor_weight[e.entry] = 0.0;
    }
    for (t, term) in plan.stats.iter().enumerate() {
        let entries = &plan.stat_entries[term.entries.clone()];
        let factor = |e: &super::plan::StatEntry| block_scale[e.block] * entry_product[e.entry];
        let weight = bin_weight[term.bin];
        match term.poisson_count {
            Some(count) => {
                let e = &entries[0];
                let base = plan.block_base(base, &plan.blocks[e.block])[e.offset];
                grad[term.param] += weight * factor(e) * base / count;
            }
            None => {
                let error = stats.error[t];
                grad[term.param] += weight * error;
                if error > 0.0 {
                    // dE/dF_e = F_e σ_e² / E.
                    let outer = weight * params[term.param] / error;
                    for e in entries {
                        stats.factor_weight[e.entry] += outer * factor(e) * e.sigma * e.sigma;
                    }
                }
            }
        }
    }
}
