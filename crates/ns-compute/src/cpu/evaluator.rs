//! The CPU f64 evaluator: NLL (pyhf's `−logpdf`), analytic reverse-mode gradient and expected data.
//!
//! One evaluation is a fixed sequence of passes over the [`Plan`]: normsys factors by parameter
//! (structure-of-arrays runs), sample blocks (scale, base yields as the nominal plus histosys
//! columns a span of bins at a time, per-bin factors), the Poisson and constraint terms, then
//! the same in reverse for the gradient (histosys rows summed a span of terms at a time). The passes are compiled once per instruction set ([`Simd`]) and chosen at run
//! time; no pass relies on floating-point reassociation or fused multiply-add, so every
//! instruction set gives the same bits, as does every thread count.

use ns_core::interp::{HistosysWeights, NormsysCode};
use ns_core::{CompiledModel, Error, Result};

use super::plan::{EntryFactors, Plan, histosys_sums_len, padded_entries_len, row_span};
use super::simd::{self, Simd};
use super::stats::StatScratch;
use crate::data::PreparedData;
use crate::poisson::{poisson_deviance, walled_empty_bin};
use ns_core::lanes::{LANES, dot};

/// Evaluates one compiled model on the CPU.
#[derive(Clone, Debug)]
pub struct CpuEvaluator<'m> {
    pub(super) model: &'m CompiledModel,
    pub(super) plan: std::borrow::Cow<'m, Plan>,
    /// Evaluates the NLL profiled over the analytic parameters (a fit's objective): they are
    /// set to their minimum at every point, their gradient is 0, and the others' gradient is
    /// the profile's.
    profiled: bool,
    /// 0: the likelihood's kinks as they are. Otherwise the width, in events, over which a
    /// template bin's floor and a clipped sample yield are smoothed ([`smoothed`](Self::smoothed)).
    pub(super) kink_width: f64,
}

/// max(d, 0) smoothed over `width` (softplus), and its slope (the logistic function).
#[inline]
fn smooth_max0(d: f64, width: f64) -> (f64, f64) {
    let t = d / width;
    let softplus = t.max(0.0) + (-t.abs()).exp().ln_1p();
    let slope = if t >= 0.0 {
        1.0 / (1.0 + (-t).exp())
    } else {
        let e = t.exp();
        e / (1.0 + e)
    };
    (width * softplus, slope)
}

/// Working memory of one evaluation; reuse it across calls to avoid allocation.
#[derive(Clone, Debug)]
pub struct Scratch {
    pub(super) expected: Vec<f64>,
    /// Per main bin: d NLL / d expected.
    pub(super) bin_weight: Vec<f64>,
    /// Per entry of the blocks with histosys terms: nominal plus histosys deltas, laid out as
    /// `Plan::nominal` (read through `Plan::block_base`).
    pub(super) base: Vec<f64>,
    /// Per entry: product of the entry factors.
    pub(super) entry_product: Vec<f64>,
    /// Per parameter: histosys weights at its current value (only histosys parameters are set).
    pub(super) histosys_weights: Vec<HistosysWeights>,
    /// Per entry of the current block: d NLL / d ν times the entry-factor product.
    entry_weight: Vec<f64>,
    /// Per histosys term: d NLL / d w as `[Σ up, Σ down]` over its block's bins (the block's
    /// scale included), the blocks laid out as `BlockPlan::sums_start` says.
    histosys_sums: Vec<f64>,
    /// Per normsys term of the plan: factor, its derivative, and derivative / factor.
    pub(super) normsys_value: Vec<f64>,
    normsys_slope: Vec<f64>,
    pub(super) normsys_log_slope: Vec<f64>,
    /// Per sample block: product of its normsys factors, of its linear factors, of both.
    pub(super) block_normsys: Vec<f64>,
    block_linear: Vec<f64>,
    pub(super) block_scale: Vec<f64>,
    /// Per sample block: d NLL / d ln(normsys factor), shared by its normsys factors (0 where
    /// the block's factors were differentiated one by one instead).
    block_log_weight: Vec<f64>,
    /// Products of the factors after index k, for the product rule without division.
    suffix: Vec<f64>,
    /// Per entry as `base`: d base / d (its value before the floor or the clip): 0 where
    /// raised to its block's floor or clipped, 1 where not, between where smoothed.
    kink_slope: Vec<f64>,
    /// Per sample block: the renormalisation T / Σ f of a renormalised block.
    block_renorm: Vec<f64>,
    /// Whether the last forward pass, unsmoothed, clipped a sample's normsys product or a
    /// histosys sum that was below zero (not at it): a yield held on a kink's flat side.
    pub(super) clipped_below_zero: bool,
    /// The statistical terms' state (CMS Combine's autoMCStats); empty without them.
    pub(super) stats: StatScratch,
}

impl Scratch {
    pub fn new(model: &CompiledModel) -> Self {
        let max_factors = model
            .samples
            .iter()
            .map(|b| (b.scalar_end - b.scalar_start) as usize)
            .chain(
                model
                    .entry_factor_start
                    .windows(2)
                    .map(|w| (w[1] - w[0]) as usize),
            )
            .max()
            .unwrap_or(0);
        let n_terms = model
            .scalar_factors
            .iter()
            .filter(|f| f.normsys != ns_core::layout::ScalarFactor::LINEAR)
            .count();
        let blocks = model.samples.len();
        let max_bins = model
            .samples
            .iter()
            .map(|b| b.n_bins as usize)
            .max()
            .unwrap_or(0);
        Scratch {
            expected: vec![0.0; model.n_main],
            bin_weight: vec![0.0; model.n_main],
            base: vec![0.0; padded_entries_len(model)],
            entry_product: vec![0.0; model.n_entries()],
            histosys_weights: vec![HistosysWeights::new(model.codes.histosys, 0.0); model.n_params],
            entry_weight: vec![0.0; max_bins],
            histosys_sums: vec![0.0; histosys_sums_len(model)],
            normsys_value: vec![0.0; n_terms],
            normsys_slope: vec![0.0; n_terms],
            normsys_log_slope: vec![0.0; n_terms],
            block_normsys: vec![0.0; blocks],
            block_linear: vec![0.0; blocks],
            block_scale: vec![0.0; blocks],
            block_log_weight: vec![0.0; blocks],
            suffix: vec![0.0; max_factors + 1],
            kink_slope: vec![1.0; padded_entries_len(model)],
            block_renorm: vec![1.0; blocks],
            clipped_below_zero: false,
            stats: StatScratch::new(model),
        }
    }

    /// Expected main data of the last evaluation.
    pub fn expected_main(&self) -> &[f64] {
        &self.expected
    }
}

/// The deviance of a main bin that observed `observed` and expects `expected`, and its slope
/// d NLL / d ν: pyhf's (slope 1 where nothing was observed, whatever is expected), or, where
/// the model clips yields at zero (`walled`, ROOT's semantics), an empty bin's term with its
/// wall below zero ([`walled_empty_bin`], smoothed over `width` events where > 0).
#[inline(always)]
pub(super) fn main_bin_term(observed: f64, expected: f64, walled: bool, width: f64) -> (f64, f64) {
    if observed != 0.0 {
        (
            poisson_deviance(observed, expected),
            1.0 - observed / expected,
        )
    } else if walled {
        walled_empty_bin(expected, width)
    } else {
        (expected, 1.0)
    }
}

/// Adds the gradient of block `block`'s entry factors (staterror, shapesys, shapefactor, gmN):
/// with `weight(i)` = d NLL / d (the product of bin i's factors), dθ_j gets
/// weight(i) · Π_{k≠j} θ_k.
#[inline(always)]
fn entry_factor_gradient(
    m: &CompiledModel,
    block: &super::plan::BlockPlan,
    params: &[f64],
    suffix: &mut [f64],
    grad: &mut [f64],
    weight: impl Fn(usize) -> f64,
) {
    let (e0, n) = (block.entry_start, block.n_bins);
    match block.entry_factors {
        EntryFactors::None => {}
        EntryFactors::One { start } => {
            let factor_params = &m.entry_factor_param[start as usize..start as usize + n];
            for (i, &p) in factor_params.iter().enumerate() {
                grad[p as usize] += weight(i);
            }
        }
        EntryFactors::Several => {
            for i in 0..n {
                let factor_params = m.entry_factor_params(e0 + i);
                match factor_params {
                    [] => {}
                    [p] => grad[*p as usize] += weight(i),
                    _ => {
                        products_of_others(
                            |j| params[factor_params[j] as usize],
                            factor_params.len(),
                            suffix,
                        );
                        let outer = weight(i);
                        for (j, &p) in factor_params.iter().enumerate() {
                            grad[p as usize] += outer * suffix[j];
                        }
                    }
                }
            }
        }
    }
}

/// Σ_t weight[index[t]]·x[t], in the order of [`ns_core::lanes::dot`].
#[inline(always)]
fn gather_dot(weight: &[f64], index: &[u32], x: &[f64]) -> f64 {
    let (ci, cx) = (index.chunks_exact(LANES), x.chunks_exact(LANES));
    let tail: f64 = ci
        .remainder()
        .iter()
        .zip(cx.remainder())
        .map(|(&i, v)| weight[i as usize] * v)
        .sum();
    let mut acc = [0.0; LANES];
    for (i, v) in ci.zip(cx) {
        for k in 0..LANES {
            acc[k] += weight[i[k] as usize] * v[k];
        }
    }
    (acc[0] + acc[1]) + (acc[2] + acc[3]) + tail
}

/// `base[i] = nominal[i] + Σ_h (w_up(α_h)·up_h[i] + w_down(α_h)·down_h[i])` in ascending term h
/// for every bin of a block padded to whole vectors, over its columns laid out as
/// `Plan::histosys_columns` (span by span, each term's ups then downs) and the weights of each
/// term's parameter: a span of bins at a time, its running sums in registers.
#[inline(always)]
fn histosys_base(
    base: &mut [f64],
    nominal: &[f64],
    term_params: &[u32],
    weights: &[HistosysWeights],
    columns: &[f64],
) {
    let mut columns = columns;
    let mut at = 0;
    while at < base.len() {
        let width = row_span(base.len() - at);
        let (span, rest) = columns.split_at(2 * term_params.len() * width);
        let (base, nominal) = (&mut base[at..at + width], &nominal[at..at + width]);
        match width {
            16 => histosys_span::<16>(base, nominal, term_params, weights, span),
            8 => histosys_span::<8>(base, nominal, term_params, weights, span),
            _ => histosys_span::<LANES>(base, nominal, term_params, weights, span),
        }
        columns = rest;
        at += width;
    }
}

/// [`histosys_base`] over one span of `W` bins.
#[inline(always)]
fn histosys_span<const W: usize>(
    base: &mut [f64],
    nominal: &[f64],
    term_params: &[u32],
    weights: &[HistosysWeights],
    span: &[f64],
) {
    let (columns, _) = span.as_chunks::<W>();
    let (pairs, _) = columns.as_chunks::<2>();
    let mut acc = [0.0; W];
    acc.copy_from_slice(nominal);
    for (&p, [up, down]) in term_params.iter().zip(pairs) {
        let w = &weights[p as usize];
        for k in 0..W {
            acc[k] += w.w_up * up[k];
        }
        for k in 0..W {
            acc[k] += w.w_down * down[k];
        }
    }
    base.copy_from_slice(&acc);
}

/// `sums[k] = Σ_i weight[i]·row_i[k]` in ascending i for every k, over the rows of a block laid
/// out as `Plan::histosys_rows` (span by span, bin by bin): a span of accumulators at a time,
/// kept in registers.
#[inline(always)]
fn sum_rows(sums: &mut [f64], weight: &[f64], rows: &[f64]) {
    let mut rows = rows;
    let mut at = 0;
    while at < sums.len() {
        let width = row_span(sums.len() - at);
        let (span, rest) = rows.split_at(weight.len() * width);
        let sums = &mut sums[at..at + width];
        match width {
            16 => sum_span::<16>(sums, weight, span),
            8 => sum_span::<8>(sums, weight, span),
            _ => sum_span::<LANES>(sums, weight, span),
        }
        rows = rest;
        at += width;
    }
}

/// [`sum_rows`] over one span of `W` accumulators.
#[inline(always)]
fn sum_span<const W: usize>(sums: &mut [f64], weight: &[f64], span: &[f64]) {
    let (rows, _) = span.as_chunks::<W>();
    let mut acc = [0.0; W];
    for (&w, row) in weight.iter().zip(rows) {
        for k in 0..W {
            acc[k] += w * row[k];
        }
    }
    sums.copy_from_slice(&acc);
}

/// Π_t value[index[t]] with four interleaved partial products (short dependency chains).
#[inline(always)]
fn gather_product(value: &[f64], index: &[u32]) -> f64 {
    let chunks = index.chunks_exact(LANES);
    let tail: f64 = chunks
        .remainder()
        .iter()
        .map(|&i| value[i as usize])
        .product();
    let mut acc = [1.0; LANES];
    for i in chunks {
        for k in 0..LANES {
            acc[k] *= value[i[k] as usize];
        }
    }
    (acc[0] * acc[1]) * (acc[2] * acc[3]) * tail
}

/// `out[j] = Π_{i≠j} values[i]` without division (a zero among the values is fine), using
/// `suffix` (length ≥ n + 1) as working memory.
#[inline(always)]
fn products_of_others(values: impl Fn(usize) -> f64, n: usize, suffix: &mut [f64]) {
    suffix[n] = 1.0;
    for j in (0..n).rev() {
        suffix[j] = suffix[j + 1] * values(j);
    }
    let mut prefix = 1.0;
    for j in 0..n {
        let v = values(j);
        suffix[j] = prefix * suffix[j + 1];
        prefix *= v;
    }
}

impl<'m> CpuEvaluator<'m> {
    pub fn new(model: &'m CompiledModel) -> Self {
        CpuEvaluator {
            model,
            plan: std::borrow::Cow::Owned(Plan::new(model)),
            profiled: false,
            kink_width: 0.0,
        }
    }

    /// The same evaluator with the model's kinks smoothed over `width` events: a morphed
    /// template's bin raised to its floor (CMS Combine's `shape`, not `shapeN`) and a sample
    /// yield clipped at zero (ROOT's semantics) become `floor + softplus` of the distance over
    /// `width`. Not the likelihood: fits that stall on a kink follow its minimum as the width
    /// shrinks (ns_inference's kink handling); the exact likelihood then judges the end.
    pub fn smoothed(mut self, width: f64) -> Self {
        self.kink_width = width;
        self
    }

    /// Whether the model has kinks that [`smoothed`](Self::smoothed) smooths.
    pub fn has_smoothable_kinks(model: &CompiledModel) -> bool {
        model.clip_sample_yields
            || model.floored_blocks.iter().any(|f| {
                let b = &model.samples[f.block as usize];
                !f.logarithmic && b.histosys_end > b.histosys_start
            })
    }

    /// The same evaluator, its NLL and gradient profiled over the analytic parameters (CMS
    /// Combine's per-bin autoMCStats parameters, [`ns_core::layout::BinStat`]), as fits see
    /// them.
    pub fn profiled(mut self) -> Self {
        self.profiled = true;
        self
    }

    /// An evaluator over a plan built once, by a caller that evaluates point after point.
    pub(crate) fn with_plan(model: &'m CompiledModel, plan: &'m Plan) -> Self {
        CpuEvaluator {
            model,
            plan: std::borrow::Cow::Borrowed(plan),
            profiled: false,
            kink_width: 0.0,
        }
    }

    pub fn model(&self) -> &'m CompiledModel {
        self.model
    }

    pub(super) fn check_params(&self, params: &[f64]) -> Result<()> {
        if params.len() != self.model.n_params {
            return Err(Error::InvalidInput(format!(
                "parameter vector has length {} but the model has {} parameters",
                params.len(),
                self.model.n_params
            )));
        }
        Ok(())
    }

    pub(super) fn check_data(&self, data: &PreparedData) -> Result<()> {
        if data.main.len() != self.model.n_main || data.aux.len() != self.model.n_aux {
            return Err(Error::InvalidInput(
                "dataset does not match the model's bin and auxdata counts".into(),
            ));
        }
        Ok(())
    }

    /// Every normsys factor, its derivative and their ratio, parameter by parameter.
    #[inline(always)]
    fn normsys_pass(&self, params: &[f64], s: &mut Scratch) {
        let plan = &*self.plan;
        let (values, slopes, log_slopes) = (
            &mut s.normsys_value[..],
            &mut s.normsys_slope[..],
            &mut s.normsys_log_slope[..],
        );
        let (ln_hi, ln_lo) = (&plan.ln_hi[..], &plan.ln_lo[..]);
        let [c0, c1, c2, c3, c4, c5] = &plan.poly;
        let (c0, c1, c2, c3, c4, c5) = (&c0[..], &c1[..], &c2[..], &c3[..], &c4[..], &c5[..]);
        for (g, input) in plan.groups.iter().zip(&plan.group_inputs) {
            let theta = params[g.param as usize];
            // A parameter read through a transform: the interpolation at α', slopes chained.
            let (alpha, chain) = match input {
                Some(input) => {
                    let (alpha, chain, _) = input.apply(theta);
                    (alpha, chain)
                }
                None => (theta, 1.0),
            };
            let r = g.start as usize..g.end as usize;
            // Term by term where a transform reads the parameter, or inside AsymPow's blend.
            let blend = plan.normsys_code == NormsysCode::AsymPow && alpha.abs() < 0.5;
            if input.is_some() || blend {
                let (value, slope, log_slope) = (
                    &mut values[r.clone()],
                    &mut slopes[r.clone()],
                    &mut log_slopes[r.clone()],
                );
                for (t, ((v, s), l)) in r.clone().zip(value.iter_mut().zip(slope).zip(log_slope)) {
                    let term = &self.model.normsys[plan.term_normsys[t] as usize];
                    let (value_at, slope_at) = term.factor_and_derivative(plan.normsys_code, alpha);
                    *v = value_at;
                    *s = slope_at * chain;
                    *l = if value_at != 0.0 {
                        slope_at / value_at * chain
                    } else {
                        0.0
                    };
                }
                continue;
            }
            let value = &mut values[r.clone()];
            let slope = &mut slopes[r.clone()];
            let log_slope = &mut log_slopes[r.clone()];
            if plan.normsys_code == NormsysCode::Code4 && alpha.abs() < 1.0 {
                // Inside ±1 code 4 is 1 + Σ_k c_k α^k: the powers are the parameter's, the
                // coefficients the term's, so each term is two independent dot products.
                let a2 = alpha * alpha;
                let a3 = a2 * alpha;
                let a = [alpha, a2, a3, a2 * a2, a2 * a3, a3 * a3];
                let d = [1.0, 2.0 * alpha, 3.0 * a2, 4.0 * a3, 5.0 * a[3], 6.0 * a[4]];
                // Every column sliced to the run's length: no bounds checks, so the loop vectorises.
                let n = value.len();
                let (c0, c1, c2) = (
                    &c0[r.clone()][..n],
                    &c1[r.clone()][..n],
                    &c2[r.clone()][..n],
                );
                let (c3, c4, c5) = (&c3[r.clone()][..n], &c4[r.clone()][..n], &c5[r][..n]);
                let (slope, log_slope) = (&mut slope[..n], &mut log_slope[..n]);
                for i in 0..n {
                    let v = 1.0
                        + ((c0[i] * a[0] + c1[i] * a[1])
                            + (c2[i] * a[2] + c3[i] * a[3])
                            + (c4[i] * a[4] + c5[i] * a[5]));
                    let sl = (c0[i] * d[0] + c1[i] * d[1])
                        + (c2[i] * d[2] + c3[i] * d[3])
                        + (c4[i] * d[4] + c5[i] * d[5]);
                    value[i] = v;
                    slope[i] = sl;
                    log_slope[i] = if v != 0.0 { sl / v } else { 0.0 };
                }
            } else {
                // Code 1, and code 4 outside ±1: hi^α from 0 up, lo^−α below (the kink of
                // code 1 at 0 takes the upper branch, see `ns_core::interp`).
                let (ln, sign) = if alpha >= 0.0 {
                    (&ln_hi[r], 1.0)
                } else {
                    (&ln_lo[r], -1.0)
                };
                let n = value.len();
                let (ln, slope, log_slope) = (&ln[..n], &mut slope[..n], &mut log_slope[..n]);
                for i in 0..n {
                    let l = sign * ln[i];
                    let v = (alpha * l).exp();
                    value[i] = v;
                    slope[i] = v * l;
                    log_slope[i] = l;
                }
            }
        }
    }

    /// Forward pass: expected main data into `scratch.expected`, keeping what the backward pass needs.
    #[inline(always)]
    pub(super) fn forward(&self, params: &[f64], s: &mut Scratch) {
        let m = self.model;
        let plan = &*self.plan;
        for &p in &plan.histosys_params {
            s.histosys_weights[p] = HistosysWeights::new(m.codes.histosys, params[p]);
        }
        self.normsys_pass(params, s);
        s.expected.fill(0.0);
        // Every array is a slice held here, so that the block loop does not reload it through
        // `plan` or `s` after each store.
        let (block_terms, block_linear) = (&plan.block_terms[..], &plan.block_linear[..]);
        let (nominal, columns) = (&plan.nominal[..], &plan.histosys_columns[..]);
        let histosys_param = &m.histosys_param[..];
        let Scratch {
            expected,
            base,
            entry_product,
            histosys_weights,
            normsys_value,
            block_normsys,
            block_linear: linear_products,
            block_scale,
            kink_slope,
            block_renorm,
            clipped_below_zero,
            ..
        } = s;
        *clipped_below_zero = false;
        let (expected, base, entry_product) =
            (&mut expected[..], &mut base[..], &mut entry_product[..]);
        let (histosys_weights, normsys_value) = (&histosys_weights[..], &normsys_value[..]);
        let (block_normsys, linear_products, block_scale) = (
            &mut block_normsys[..],
            &mut linear_products[..],
            &mut block_scale[..],
        );
        for (b, block) in plan.blocks.iter().enumerate() {
            let mut normsys = gather_product(normsys_value, &block_terms[block.terms.clone()]);
            if m.clip_sample_yields && normsys <= 0.0 {
                // ROOT's FlexibleInterpVar: a product of normsys factors at or below zero is
                // clipped (to the smallest normal double there, zero here); it is flat there.
                *clipped_below_zero |= normsys < 0.0;
                normsys = 0.0;
            }
            let mut linear = 1.0;
            for &p in &block_linear[block.linear.clone()] {
                linear *= params[p as usize];
            }
            let scale = normsys * linear;
            block_normsys[b] = normsys;
            linear_products[b] = linear;
            block_scale[b] = scale;

            let (e0, n, padded) = (block.entry_start, block.n_bins, block.padded_bins());
            if !block.histosys.is_empty() {
                let bins = block.base_start..block.base_start + padded;
                let start = block.columns_start;
                histosys_base(
                    &mut base[bins.clone()],
                    &nominal[bins.clone()],
                    &histosys_param[block.histosys.clone()],
                    histosys_weights,
                    &columns[start..start + padded * 2 * block.histosys.len()],
                );
                if m.clip_sample_yields {
                    // As the CUDA kernel: below zero clipped, NaN kept.
                    let slopes = &mut kink_slope[bins.clone()];
                    for (v, slope) in base[bins.clone()].iter_mut().zip(slopes) {
                        if self.kink_width > 0.0 {
                            (*v, *slope) = smooth_max0(*v, self.kink_width);
                        } else {
                            // At zero, the derivatives of the clipped side.
                            *slope = if *v <= 0.0 { 0.0 } else { 1.0 };
                            if *v < 0.0 {
                                // Strictly below: padding bins (nominal and deltas 0) are not.
                                *clipped_below_zero = true;
                                *v = 0.0;
                            }
                        }
                    }
                }
                if let Some(floor) = block.floor.filter(|f| f.logarithmic) {
                    // Logarithms: exponentiated, scaled to the nominal total, then raised to the
                    // floor (the raised bins marked: they do not move with α).
                    let bins = block.base_start..block.base_start + floor.active;
                    let mut sum = 0.0;
                    for v in &mut base[bins.clone()] {
                        *v = v.exp();
                        sum += *v;
                    }
                    let k = floor.renormalise_to.unwrap_or(sum) / sum;
                    block_renorm[b] = k;
                    for (v, slope) in base[bins.clone()].iter_mut().zip(&mut kink_slope[bins]) {
                        *v *= k;
                        let raised = *v < floor.floor;
                        *slope = if raised { 0.0 } else { 1.0 };
                        if raised {
                            *v = floor.floor;
                        }
                    }
                } else if let Some(floor) = block.floor {
                    // Raised to the floor (and scaled back to the nominal total where asked);
                    // the raised bins marked for the backward pass (they do not move with α).
                    let bins = block.base_start..block.base_start + floor.active;
                    let mut sum = 0.0;
                    for (v, slope) in base[bins.clone()]
                        .iter_mut()
                        .zip(&mut kink_slope[bins.clone()])
                    {
                        if self.kink_width > 0.0 {
                            let (above, s) = smooth_max0(*v - floor.floor, self.kink_width);
                            (*v, *slope) = (floor.floor + above, s);
                        } else {
                            let raised = *v < floor.floor;
                            *slope = if raised { 0.0 } else { 1.0 };
                            if raised {
                                *v = floor.floor;
                            }
                        }
                        sum += *v;
                    }
                    if let Some(total) = floor.renormalise_to {
                        let k = total / sum;
                        block_renorm[b] = k;
                        for v in &mut base[bins] {
                            *v *= k;
                        }
                    }
                }
            }
            let base = plan.block_base(base, block);
            let expected = &mut expected[block.bin_start..block.bin_start + n];
            let entry_product = &mut entry_product[e0..e0 + n];
            // The product of an entry's factors starts at 1, so one factor is that factor and
            // none is 1, bit for bit.
            match block.entry_factors {
                EntryFactors::None => entry_product.fill(1.0),
                EntryFactors::One { start } => {
                    let factor_params = &m.entry_factor_param[start as usize..start as usize + n];
                    for (product, &p) in entry_product.iter_mut().zip(factor_params) {
                        *product = params[p as usize];
                    }
                }
                EntryFactors::Several => {
                    for (i, product) in entry_product.iter_mut().enumerate() {
                        *product = 1.0;
                        for &p in m.entry_factor_params(e0 + i) {
                            *product *= params[p as usize];
                        }
                    }
                }
            }
            for ((nu, &base), &product) in expected.iter_mut().zip(base).zip(&*entry_product) {
                *nu += base * scale * product;
            }
        }
        if !plan.stats.is_empty() {
            super::stats::forward(plan, params, s);
        }
    }

    /// NLL (`−logpdf`) and, when `grad` is given, its gradient with respect to every parameter.
    ///
    /// A non-positive expected count gives what pyhf gives (NaN or +∞), never a panic.
    pub fn nll_with_gradient(
        &self,
        params: &[f64],
        data: &PreparedData,
        s: &mut Scratch,
        grad: Option<&mut [f64]>,
    ) -> Result<f64> {
        Ok(data.constant + self.nll_minus_constant(params, data, s, grad)?)
    }

    /// The NLL without its data-only constant (`data.constant`), and its gradient: what an
    /// optimizer should minimize, since its value is ~1e4 times smaller than the NLL on large
    /// models and differences stay resolved near the minimum.
    pub fn nll_minus_constant(
        &self,
        params: &[f64],
        data: &PreparedData,
        s: &mut Scratch,
        grad: Option<&mut [f64]>,
    ) -> Result<f64> {
        self.nll_minus_constant_on(simd::best(), params, data, s, grad)
    }

    /// [`nll_minus_constant`](Self::nll_minus_constant) compiled for `simd`, which this CPU must
    /// offer ([`simd::available`]): every choice gives the same bits.
    pub fn nll_minus_constant_on(
        &self,
        simd: Simd,
        params: &[f64],
        data: &PreparedData,
        s: &mut Scratch,
        grad: Option<&mut [f64]>,
    ) -> Result<f64> {
        self.check_params(params)?;
        self.check_data(data)?;
        let m = self.model;
        if let Some(g) = &grad
            && g.len() != m.n_params
        {
            return Err(Error::InvalidInput(format!(
                "gradient buffer has length {} but the model has {} parameters",
                g.len(),
                m.n_params
            )));
        }
        if !simd::available().contains(&simd) {
            return Err(Error::InvalidInput(format!(
                "this CPU does not offer {}",
                simd.name()
            )));
        }
        Ok(match simd {
            Simd::Baseline => self.evaluate(params, data, s, grad),
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the instruction set was checked above (`simd::available` detects it).
            Simd::Avx2 => unsafe { self.evaluate_avx2(params, data, s, grad) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as above.
            Simd::Avx512 => unsafe { self.evaluate_avx512(params, data, s, grad) },
            #[cfg(not(target_arch = "x86_64"))]
            _ => unreachable!("only the baseline is available off x86_64"),
        })
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    fn evaluate_avx2(
        &self,
        params: &[f64],
        data: &PreparedData,
        s: &mut Scratch,
        grad: Option<&mut [f64]>,
    ) -> f64 {
        self.evaluate(params, data, s, grad)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx2")]
    fn evaluate_avx512(
        &self,
        params: &[f64],
        data: &PreparedData,
        s: &mut Scratch,
        grad: Option<&mut [f64]>,
    ) -> f64 {
        self.evaluate(params, data, s, grad)
    }

    /// The NLL without its constant, and the gradient where asked; inputs already checked.
    #[inline(always)]
    fn evaluate(
        &self,
        params: &[f64],
        data: &PreparedData,
        s: &mut Scratch,
        grad: Option<&mut [f64]>,
    ) -> f64 {
        let m = self.model;
        self.forward(params, s);
        // A profiled evaluation: the point with the analytic parameters at their minimum.
        let profiled = self.profiled && self.plan.analytic;
        let mut point = std::mem::take(&mut s.stats.point);
        let params = if profiled {
            point.clear();
            point.extend_from_slice(params);
            super::stats::profile_forward(&self.plan, data, &mut point, s);
            &point[..]
        } else {
            params
        };
        let mut nll = 0.0;
        for ((&lambda, &n), weight) in s.expected.iter().zip(&data.main).zip(&mut s.bin_weight) {
            let (term, slope) = main_bin_term(n, lambda, m.clip_sample_yields, self.kink_width);
            nll += term;
            *weight = slope;
        }
        // A bin held at its floor does not move.
        for (&bin, &floored) in self.plan.stat_bins.iter().zip(&s.stats.bin_floored) {
            if floored {
                s.bin_weight[bin] = 0.0;
            }
        }
        if profiled {
            super::stats::weights(&self.plan, data, params, s);
        }
        for c in &m.gaussian {
            let theta = params[c.param as usize];
            let pull = (data.aux[c.aux_index as usize] - theta) / c.sigma;
            nll += 0.5 * pull * pull;
        }
        for c in &m.poisson {
            let rate = params[c.param as usize] * c.tau;
            nll += poisson_deviance(data.aux[c.aux_index as usize], rate);
        }
        for r in &m.gaussian_ranges {
            nll += r.log_norm(params[r.param as usize]).0;
        }
        for r in &m.poisson_ranges {
            nll += r.log_norm(params[r.param as usize]).0;
        }
        for w in &m.low_side_widths {
            let c = &m.gaussian[w.constraint as usize];
            let aux = data.aux[c.aux_index as usize];
            nll += w.correction(params[c.param as usize], aux, c.sigma).0;
        }
        if let Some(grad) = grad {
            grad.fill(0.0);
            self.backward(params, data, s, grad);
            if profiled {
                for t in self.plan.stats.iter().filter(|t| t.analytic.is_some()) {
                    grad[t.param] = 0.0;
                }
            }
        }
        s.stats.point = point;
        nll
    }

    /// d ν / d ν₀ for each bin of sample block `block` at the point of the last forward pass on
    /// `s` (any evaluation, or `expected_data`): how the expected yield of the bin moves with a
    /// nominal yield that replaces the block's (a differentiable signal). The block's histosys
    /// templates stay fixed, so its deltas move with the nominal (Δup = hi − ν₀, Δdown = ν₀ − lo)
    /// and d base / d ν₀ = 1 − Σ w_up + Σ w_down over its histosys terms.
    pub fn nominal_slope(&self, s: &Scratch, block: usize, out: &mut [f64]) -> Result<()> {
        let m = self.model;
        let b = m.samples.get(block).ok_or_else(|| {
            Error::InvalidInput(format!(
                "sample block {block} of {} requested",
                m.samples.len()
            ))
        })?;
        let (e0, n) = (b.entry_start as usize, b.n_bins as usize);
        if !m.bin_stats.is_empty() {
            return Err(Error::InvalidInput(
                "a nominal that replaces a sample's is not differentiated through template \
                 statistics (autoMCStats)"
                    .into(),
            ));
        }
        if out.len() != n {
            return Err(Error::InvalidInput(format!(
                "nominal gradient buffer has length {} but the block has {n} bins",
                out.len()
            )));
        }
        let mut histosys_slope = 1.0;
        for &p in &m.histosys_param[b.histosys_start as usize..b.histosys_end as usize] {
            let w = s.histosys_weights[p as usize];
            histosys_slope += w.w_down - w.w_up;
        }
        let base = self.plan.block_base(&s.base, &self.plan.blocks[block]);
        let scale = s.block_scale[block];
        for i in 0..n {
            // A clipped yield does not move with its nominal.
            let clipped = m.clip_sample_yields && base[i] == 0.0;
            out[i] = if clipped {
                0.0
            } else {
                scale * s.entry_product[e0 + i] * histosys_slope
            };
        }
        Ok(())
    }

    /// d NLL / d ν₀ for each bin of sample block `block` at the point of the last
    /// [`nll_minus_constant`](Self::nll_minus_constant) on `s`: [`nominal_slope`](Self::nominal_slope)
    /// times d NLL / d ν of the bin.
    pub fn nominal_gradient(&self, s: &Scratch, block: usize, out: &mut [f64]) -> Result<()> {
        self.nominal_slope(s, block, out)?;
        let bin0 = self.model.samples[block].bin_start as usize;
        for (i, d) in out.iter_mut().enumerate() {
            *d *= s.bin_weight[bin0 + i];
        }
        Ok(())
    }

    #[inline(always)]
    fn backward(&self, params: &[f64], data: &PreparedData, s: &mut Scratch, grad: &mut [f64]) {
        let m = self.model;
        let plan = &*self.plan;
        // As in the forward pass, every array is a slice held here.
        let (block_terms, block_linear, rows) = (
            &plan.block_terms[..],
            &plan.block_linear[..],
            &plan.histosys_rows[..],
        );
        let Scratch {
            bin_weight,
            base,
            entry_product,
            entry_weight,
            histosys_sums,
            kink_slope,
            block_renorm,
            normsys_value,
            normsys_slope,
            block_normsys,
            block_linear: linear_products,
            block_scale,
            block_log_weight,
            suffix,
            stats,
            ..
        } = s;
        let (bin_weight, base, entry_product) = (&bin_weight[..], &base[..], &entry_product[..]);
        let (kink_slope, block_renorm) = (&kink_slope[..], &block_renorm[..]);
        let (normsys_value, normsys_slope) = (&normsys_value[..], &normsys_slope[..]);
        let (block_normsys, linear_products, block_scale) =
            (&block_normsys[..], &linear_products[..], &block_scale[..]);
        let (entry_weight, histosys_sums, block_log_weight, suffix) = (
            &mut entry_weight[..],
            &mut histosys_sums[..],
            &mut block_log_weight[..],
            &mut suffix[..],
        );
        if !plan.stats.is_empty() {
            super::stats::backward(
                plan,
                params,
                bin_weight,
                base,
                block_scale,
                entry_product,
                stats,
                grad,
            );
        }
        for (b, block) in plan.blocks.iter().enumerate() {
            let scale = block_scale[b];
            let (e0, n, bin0) = (block.entry_start, block.n_bins, block.bin_start);
            let base = plan.block_base(base, block);
            let bin_weight = &bin_weight[bin0..bin0 + n];
            let entry_weight = &mut entry_weight[..n];
            for ((w, &bw), &product) in entry_weight
                .iter_mut()
                .zip(bin_weight)
                .zip(&entry_product[e0..e0 + n])
            {
                *w = bw * product;
            }
            // d NLL / d scale; a block read by statistical terms adds what they owe to its
            // factors (an entry's Poisson factor θ/n, its share of a Gaussian term).
            let stat = block.stats.then(|| stats.entry_terms(e0..e0 + n));
            if let Some((multiplier, _)) = stat {
                for (w, &m) in entry_weight.iter_mut().zip(multiplier) {
                    *w *= m;
                }
            }
            let mut unscaled = dot(entry_weight, base);
            if let Some((_, factor_weight)) = stat {
                unscaled += dot(factor_weight, &entry_product[e0..e0 + n]);
            }

            // Linear factors: d scale / d θ_j = normsys product · Π_{i≠j} θ_i.
            let linear = &block_linear[block.linear.clone()];
            if !linear.is_empty() {
                let outer = unscaled * block_normsys[b];
                products_of_others(|j| params[linear[j] as usize], linear.len(), suffix);
                for (j, &p) in linear.iter().enumerate() {
                    grad[p as usize] += outer * suffix[j];
                }
            }
            // Normsys factors: d scale / d α = scale · (slope / factor). Where the product is
            // not a normal number (a zero or overflowing factor), the product rule instead.
            let normsys = block_normsys[b];
            if normsys.is_normal() {
                block_log_weight[b] = unscaled * scale;
            } else if m.clip_sample_yields && normsys == 0.0 {
                // Clipped: the product does not move with its factors.
                block_log_weight[b] = 0.0;
            } else {
                block_log_weight[b] = 0.0;
                let terms = &block_terms[block.terms.clone()];
                products_of_others(|j| normsys_value[terms[j] as usize], terms.len(), suffix);
                let outer = unscaled * linear_products[b];
                for (j, &t) in terms.iter().enumerate() {
                    let t = t as usize;
                    grad[plan.term_param[t] as usize] += outer * suffix[j] * normsys_slope[t];
                }
            }

            // Histosys: dν_e/dα = scale · g_e · (s_up·up_e + s_down·down_e): here the sums over
            // the bins of scale · g_e times each term's differences, parameter by parameter below.
            let row_len = block.row_len;
            if row_len > 0 {
                for w in entry_weight.iter_mut() {
                    *w *= scale;
                }
                let slopes = &kink_slope[block.base_start..block.base_start + n];
                if m.clip_sample_yields {
                    // A clipped yield does not move with its histosys parameters.
                    for (w, &slope) in entry_weight.iter_mut().zip(slopes) {
                        if slope != 1.0 {
                            *w = if slope == 0.0 { 0.0 } else { *w * slope };
                        }
                    }
                }
                if let Some(floor) = block.floor.filter(|f| f.logarithmic) {
                    // y_b = T e^f_b / Σ e^f: dy_b/df_c = y_b δ_bc − y_b y_c / T, so the weight
                    // of f_c is y_c (w_c − Σ w·y / T) over the bins that move (a raised bin's
                    // own y, below the floor before it was raised, is taken at the floor).
                    let total = floor.renormalise_to.unwrap_or(f64::NAN);
                    for (w, &slope) in entry_weight.iter_mut().zip(slopes) {
                        if slope == 0.0 {
                            *w = 0.0;
                        }
                    }
                    let mean = dot(entry_weight, base) / total;
                    for (w, &y) in entry_weight.iter_mut().zip(base) {
                        *w = y * (*w - mean);
                    }
                } else if let Some(floor) = block.floor {
                    // A bin raised to the floor does not move with α. Renormalised, y = f·T/F:
                    // dy_b = (T/F)(df_b − f_b·dF/F), so each weight w_b becomes
                    // (w_b − Σ w·y/T)·T/F times df_b/d(its value before the floor).
                    let (mean, k) = match floor.renormalise_to {
                        Some(total) => (dot(entry_weight, base) / total, block_renorm[b]),
                        None => (0.0, 1.0),
                    };
                    for (w, &slope) in entry_weight.iter_mut().zip(slopes) {
                        *w = match slope {
                            0.0 => 0.0,
                            1.0 => (*w - mean) * k,
                            _ => (*w - mean) * k * slope,
                        };
                    }
                }
                let (start, sums) = (block.rows_start, block.sums_start);
                sum_rows(
                    &mut histosys_sums[sums..sums + row_len],
                    entry_weight,
                    &rows[start..start + n * row_len],
                );
            }

            // Entry factors: dν_e/dθ_j = base_e · scale · Π_{i≠j} θ_i.
            match stat {
                None => entry_factor_gradient(m, block, params, suffix, grad, |i| {
                    bin_weight[i] * base[i] * scale
                }),
                Some((multiplier, factor_weight)) => {
                    entry_factor_gradient(m, block, params, suffix, grad, |i| {
                        (bin_weight[i] * base[i] * multiplier[i] + factor_weight[i]) * scale
                    })
                }
            }
        }
        // Each histosys parameter's terms in block order: its sums over them of Σ up and Σ down,
        // weighted once by the parameter's slopes.
        let (pairs, _) = histosys_sums.as_chunks::<2>();
        let (term_pair, histosys_weights) = (&plan.histosys_term_pair[..], &s.histosys_weights[..]);
        for g in &plan.histosys_groups {
            // Two running sums of alternate terms: two short chains of additions, not one long.
            let (twos, last) = term_pair[g.range()].as_chunks::<2>();
            let mut even = [0.0; 2];
            let mut odd = [0.0; 2];
            for &[a, b] in twos {
                let (a, b) = (pairs[a as usize], pairs[b as usize]);
                even = [even[0] + a[0], even[1] + a[1]];
                odd = [odd[0] + b[0], odd[1] + b[1]];
            }
            for &a in last {
                let a = pairs[a as usize];
                even = [even[0] + a[0], even[1] + a[1]];
            }
            let w = histosys_weights[g.param as usize];
            grad[g.param as usize] += w.s_up * (even[0] + odd[0]) + w.s_down * (even[1] + odd[1]);
        }
        let (term_block, log_slopes) = (&plan.term_block[..], &s.normsys_log_slope[..]);
        for g in &plan.groups {
            let r = g.range();
            grad[g.param as usize] +=
                gather_dot(block_log_weight, &term_block[r.clone()], &log_slopes[r]);
        }
        for c in &m.gaussian {
            let theta = params[c.param as usize];
            grad[c.param as usize] +=
                (theta - data.aux[c.aux_index as usize]) / (c.sigma * c.sigma);
        }
        for c in &m.poisson {
            let gamma = params[c.param as usize];
            let aux = data.aux[c.aux_index as usize];
            grad[c.param as usize] += if aux == 0.0 {
                c.tau
            } else {
                c.tau - aux / gamma
            };
        }
        for r in &m.gaussian_ranges {
            grad[r.param as usize] += r.log_norm(params[r.param as usize]).1;
        }
        for r in &m.poisson_ranges {
            grad[r.param as usize] += r.log_norm(params[r.param as usize]).1;
        }
        for w in &m.low_side_widths {
            let c = &m.gaussian[w.constraint as usize];
            let aux = data.aux[c.aux_index as usize];
            grad[c.param as usize] += w.correction(params[c.param as usize], aux, c.sigma).1;
        }
    }

    /// NLL only.
    pub fn nll(&self, params: &[f64], data: &PreparedData, s: &mut Scratch) -> Result<f64> {
        self.nll_with_gradient(params, data, s, None)
    }

    /// The expected yield of every entry (sample block × bin, in entry order) at `params`: what
    /// each sample contributes to its bins.
    pub fn entry_yields(&self, params: &[f64], s: &mut Scratch) -> Result<Vec<f64>> {
        self.check_params(params)?;
        self.forward(params, s);
        let m = self.model;
        let mut yields = vec![0.0; m.n_entries()];
        for (b, block) in self.plan.blocks.iter().enumerate() {
            let e0 = block.entry_start;
            let base = self.plan.block_base(&s.base, block);
            for (i, &base) in base.iter().enumerate() {
                yields[e0 + i] = base * s.block_scale[b] * s.entry_product[e0 + i];
            }
        }
        if !m.bin_stats.is_empty() {
            for (y, shift) in yields.iter_mut().zip(&s.stats.shift) {
                *y += shift;
            }
        }
        Ok(yields)
    }

    /// Sets the parameters that fits set analytically (CMS Combine's per-bin autoMCStats
    /// parameters, [`ns_core::layout::BinStat`]) to their minimum given the others and `data`;
    /// the rest of `params` is left as it is.
    pub fn profile_analytic(
        &self,
        params: &mut [f64],
        data: &PreparedData,
        s: &mut Scratch,
    ) -> Result<()> {
        self.check_params(params)?;
        self.check_data(data)?;
        if self.plan.analytic {
            self.forward(params, s);
            super::stats::profile(&self.plan, &s.stats, data, params);
        }
        Ok(())
    }

    /// Whether some sample yield is clipped from below zero at `params` (ROOT's semantics: a
    /// normsys product or a histosys sum below zero, not at it): flat in its parameters there,
    /// however far past the kink they are. Asked of an unsmoothed evaluator (a smoothed one
    /// smooths histosys sums instead of clipping them).
    pub fn held_at_kinks(&self, params: &[f64], s: &mut Scratch) -> Result<bool> {
        self.check_params(params)?;
        self.forward(params, s);
        Ok(s.clipped_below_zero)
    }

    /// Expected main data (`ν_b`, channels in pyhf order) and expected auxiliary data
    /// (θ for Gaussian constraints, γτ for Poisson ones), as pyhf's `expected_data`.
    pub fn expected_data(&self, params: &[f64], s: &mut Scratch) -> Result<(Vec<f64>, Vec<f64>)> {
        self.check_params(params)?;
        self.forward(params, s);
        let m = self.model;
        let mut aux = vec![0.0; m.n_aux];
        for c in &m.gaussian {
            aux[c.aux_index as usize] = params[c.param as usize];
        }
        for c in &m.poisson {
            aux[c.aux_index as usize] = params[c.param as usize] * c.tau;
        }
        Ok((s.expected.clone(), aux))
    }
}
