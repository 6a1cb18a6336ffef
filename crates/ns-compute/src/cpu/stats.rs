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
use super::plan::{Plan, StatPlan};
use crate::data::PreparedData;

/// What the statistical terms keep between the passes; empty for a model without them.
#[derive(Clone, Debug, Default)]
pub struct StatScratch {
    /// Per Gaussian term: E at the last forward pass, and its bin's yield before it.
    error: Vec<f64>,
    before: Vec<f64>,
    /// Per Gaussian term of a profiled evaluation: whether its range held θ*, and the weights
    /// the gradient owes through μ (already in the bin's weight) and through E.
    clamped: Vec<bool>,
    mu_weight: Vec<f64>,
    error_weight: Vec<f64>,
    /// A profiled evaluation's point (the parameters with θ* in place), kept to reuse.
    pub(super) point: Vec<f64>,
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
            before: vec![0.0; model.bin_stats.len()],
            clamped: vec![false; model.bin_stats.len()],
            mu_weight: vec![0.0; model.bin_stats.len()],
            error_weight: vec![0.0; model.bin_stats.len()],
            point: Vec::new(),
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
                stats.before[t] = s.expected[term.bin];
                stats.clamped[t] = false;
                stats.mu_weight[t] = 0.0;
                stats.error_weight[t] = 0.0;
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

/// The minimum over an analytic term's θ of its bin's Poisson term and its unit Gaussian
/// constraint, given the yield μ without it and its error E from the last forward pass: the
/// larger root of G(θ) = θ² + bθ + c, b = E + μ/E − g, c = μ − n − (μ/E)g (n the bin's count, g
/// θ's global observable; Combine's `runBarlowBeeston`), within θ's range. `None` where the bin
/// has no error; with the root, whether the range held it.
fn analytic_root(
    t: usize,
    term: &StatPlan,
    stats: &StatScratch,
    data: &PreparedData,
) -> Option<(f64, bool)> {
    let ((low, high), aux) = term.analytic?;
    let (mu, error) = (stats.before[t], stats.error[t]);
    if !(error > 0.0) {
        return None;
    }
    let (n, g) = (data.main[term.bin], data.aux[aux]);
    let b = error + mu / error - g;
    let c = mu - n - (mu / error) * g;
    let q = -0.5 * (b + b.signum() * (b * b - 4.0 * c).sqrt());
    let root = if q != 0.0 { q.max(c / q) } else { 0.0 };
    root.is_finite()
        .then(|| (root.clamp(low, high), !(low..=high).contains(&root)))
}

/// Sets each analytic term's θ in `params` to its minimum given the rest, from the last forward
/// pass on `stats`.
pub(super) fn profile(plan: &Plan, stats: &StatScratch, data: &PreparedData, params: &mut [f64]) {
    for (t, term) in plan.stats.iter().enumerate() {
        if let Some((theta, _)) = analytic_root(t, term, stats, data) {
            params[term.param] = theta;
        }
    }
}

/// After a forward pass at `point`: each analytic θ in `point` set to its minimum, the bin's
/// expected yield and floor with it, and what the gradient owes to θ's move with the other
/// parameters recorded (a profiled evaluation: [`weights`] then completes it).
pub(super) fn profile_forward(
    plan: &Plan,
    data: &PreparedData,
    point: &mut [f64],
    s: &mut Scratch,
) {
    for (t, term) in plan.stats.iter().enumerate() {
        let Some((theta, clamped)) = analytic_root(t, term, &s.stats, data) else {
            continue;
        };
        point[term.param] = theta;
        s.stats.clamped[t] = clamped;
        let value = s.stats.before[t] + theta * s.stats.error[t];
        let floored = value < BinStat::FLOOR;
        s.expected[term.bin] = if floored { BinStat::FLOOR } else { value };
        if let Ok(k) = plan.stat_bins.binary_search(&term.bin) {
            s.stats.bin_floored[k] = floored;
        }
    }
}

/// A profiled evaluation's gradient: θ*(x) moves with the other parameters x through μ and E,
/// and where ∂NLL/∂θ at θ* is not 0 (the bin held at its floor) the gradient owes
/// (∂NLL/∂θ)·dθ*/dx, with dθ*/dμ = −G_μ/G_θ and dθ*/dE = −G_E/G_θ (implicit derivatives of
/// G(θ*) = 0). The μ part joins the bin's weight; the E part is kept for [`backward`].
pub(super) fn weights(plan: &Plan, data: &PreparedData, point: &[f64], s: &mut Scratch) {
    for (t, term) in plan.stats.iter().enumerate() {
        let Some((_, aux)) = term.analytic else {
            continue;
        };
        let (mu, error) = (s.stats.before[t], s.stats.error[t]);
        if !(error > 0.0) || s.stats.clamped[t] {
            continue;
        }
        let (g, theta) = (data.aux[aux], point[term.param]);
        let owed = s.bin_weight[term.bin] * error + (theta - g);
        let slope = 2.0 * theta + error + mu / error - g;
        if owed == 0.0 || slope == 0.0 {
            continue;
        }
        let by_mu = -(theta / error + 1.0 - g / error) / slope;
        let by_error = -(theta * (1.0 - mu / (error * error)) + g * mu / (error * error)) / slope;
        s.stats.mu_weight[t] = owed * by_mu;
        s.stats.error_weight[t] = owed * by_error;
        s.bin_weight[term.bin] += owed * by_mu;
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
                // The bin's weight less what a profiled evaluation added for θ*'s move with μ.
                let weight = weight - stats.mu_weight[t];
                let error = stats.error[t];
                grad[term.param] += weight * error;
                if error > 0.0 {
                    // dE/dF_e = F_e σ_e² / E; a profiled θ* adds its own move with E.
                    let outer = (weight * params[term.param] + stats.error_weight[t]) / error;
                    for e in entries {
                        stats.factor_weight[e.entry] += outer * factor(e) * e.sigma * e.sigma;
                    }
                }
            }
        }
    }
}
