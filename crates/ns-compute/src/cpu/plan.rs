//! What the CPU evaluator derives from a compiled model once, laid out for its loops.
//!
//! The compiled model stores scalar factors block by block, which suits the GPU (a thread per
//! block). On a CPU the cost of a published model is its ~2,000 normsys factors, evaluated one
//! by one in short per-block loops. Here they are regrouped by parameter into structure-of-arrays
//! runs: each parameter's powers (or its exponential branch) are decided once, and every
//! factor of that parameter is one branch-free line of a loop the compiler vectorises. The
//! blocks keep an index list into those runs for their products.

use ns_core::CompiledModel;
use ns_core::interp::NormsysCode;
use ns_core::lanes::LANES;
use ns_core::layout::{SampleBlock, ScalarFactor};

/// Length of a block's histosys row `[up, down]` per term, padded to whole vectors.
pub(crate) fn padded_histosys_row(block: &SampleBlock) -> usize {
    (2 * (block.histosys_end - block.histosys_start) as usize).next_multiple_of(LANES)
}

/// Width of the next span of a padded histosys row (or of a block's padded bins) with `rest`
/// values left: as many of its values as a pass keeps in registers at once (16, 8 or a vector).
pub(crate) fn row_span(rest: usize) -> usize {
    match rest {
        16.. => 16,
        8.. => 8,
        _ => LANES,
    }
}

/// Length of the backward pass's array of per-term histosys sums: every block's padded row.
pub(crate) fn histosys_sums_len(m: &CompiledModel) -> usize {
    m.samples.iter().map(padded_histosys_row).sum()
}

/// Length of the per-entry arrays laid out block by block, each block's bins padded to whole
/// vectors (`Plan::nominal`, the evaluator's base yields).
pub(crate) fn padded_entries_len(m: &CompiledModel) -> usize {
    m.samples
        .iter()
        .map(|b| (b.n_bins as usize).next_multiple_of(LANES))
        .sum()
}

fn entry_factors(m: &CompiledModel, block: &SampleBlock) -> EntryFactors {
    let (e0, e1) = (
        block.entry_start as usize,
        (block.entry_start + block.n_bins) as usize,
    );
    let starts = &m.entry_factor_start[e0..=e1];
    if starts[0] == starts[e1 - e0] {
        EntryFactors::None
    } else if starts.windows(2).all(|w| w[1] == w[0] + 1) {
        EntryFactors::One { start: starts[0] }
    } else {
        EntryFactors::Several
    }
}

/// The terms of one parameter: `start..end` in the plan's normsys or histosys term arrays.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct ParamGroup {
    pub param: u32,
    pub start: u32,
    pub end: u32,
}

impl ParamGroup {
    pub fn range(&self) -> std::ops::Range<usize> {
        self.start as usize..self.end as usize
    }
}

/// Runs of parameters sorted by (parameter, block): a group per parameter.
fn param_groups(sorted_params: impl Iterator<Item = u32>) -> Vec<ParamGroup> {
    let mut groups: Vec<ParamGroup> = Vec::new();
    for (t, param) in sorted_params.enumerate() {
        match groups.last_mut() {
            Some(g) if g.param == param => g.end += 1,
            _ => groups.push(ParamGroup {
                param,
                start: t as u32,
                end: t as u32 + 1,
            }),
        }
    }
    groups
}

/// How the entries of one sample block are scaled per bin (staterror, shapesys, shapefactor),
/// so that the common cases run as plain element-wise loops.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum EntryFactors {
    /// No entry of the block has a factor.
    None,
    /// Every entry has exactly one, and their parameters are the contiguous run
    /// `CompiledModel::entry_factor_param[start..start + n_bins]`.
    One { start: u32 },
    /// Anything else: entry by entry, through `CompiledModel::entry_factor_start`.
    Several,
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Plan {
    /// Parameters that drive a histosys, each once, ascending.
    pub histosys_params: Vec<usize>,
    pub normsys_code: NormsysCode,
    /// Normsys terms grouped by parameter (ascending), in model order within a parameter.
    pub groups: Vec<ParamGroup>,
    /// Per term: the code-4 polynomial coefficient of α^(k+1) in `poly[k]`.
    pub poly: [Vec<f64>; 6],
    pub ln_hi: Vec<f64>,
    pub ln_lo: Vec<f64>,
    /// Per term: its sample block and its parameter.
    pub term_block: Vec<u32>,
    pub term_param: Vec<u32>,
    /// Per sample block: its normsys terms (CSR into the term arrays).
    pub block_terms_start: Vec<u32>,
    pub block_terms: Vec<u32>,
    /// Per sample block: the parameters of its linear factors (normfactor, lumi; CSR).
    pub block_linear_start: Vec<u32>,
    pub block_linear: Vec<u32>,
    /// The histosys differences of `CompiledModel::histosys_delta` twice, each laid out so that
    /// its pass reads one contiguous run of whole vectors per block, accumulators in registers:
    /// - `histosys_rows` (the gradient's sums over bins): a block's rows `[up_0, down_0, …]`,
    ///   padded with zeros to whole vectors and cut into spans ([`row_span`]), span by span, and
    ///   within a span bin by bin;
    /// - `histosys_columns` (the forward pass's sums over terms): a block's bins padded with
    ///   zeros to whole vectors and cut into spans the same way, span by span, and within a span
    ///   term by term (the span's ups, then its downs).
    pub histosys_rows: Vec<f64>,
    pub histosys_columns: Vec<f64>,
    /// Per sample block: where its rows start in `histosys_rows` and their padded length, and
    /// where its columns start in `histosys_columns`.
    pub histosys_row_start: Vec<usize>,
    pub histosys_row_len: Vec<usize>,
    pub histosys_column_start: Vec<usize>,
    /// Per sample block: where its per-term sums `[Σ up, Σ down]` start in the backward pass's
    /// array of them (blocks one after another, each padded like its rows).
    pub histosys_sum_start: Vec<usize>,
    /// Histosys terms grouped by parameter (ascending), in block order within a parameter, so
    /// that each parameter's gradient is one sum in the order the blocks come: per term, which
    /// pair `[Σ up, Σ down]` of the sums is its.
    pub histosys_groups: Vec<ParamGroup>,
    pub histosys_term_pair: Vec<u32>,
    /// Per sample block: how its entries are scaled per bin.
    pub entry_factors: Vec<EntryFactors>,
    /// The nominal yields block by block, each block padded with zeros to whole vectors, and
    /// where each block starts: the layout of the evaluator's base yields, so that its passes
    /// read and write whole vectors.
    pub nominal: Vec<f64>,
    pub base_start: Vec<usize>,
}

impl Plan {
    pub fn new(m: &CompiledModel) -> Plan {
        let mut histosys_params: Vec<usize> =
            m.histosys_param.iter().map(|&p| p as usize).collect();
        histosys_params.sort_unstable();
        histosys_params.dedup();

        // (param, block, normsys index) of every normsys factor, in parameter order.
        let mut terms = Vec::new();
        let mut block_linear_start = vec![0];
        let mut block_linear = Vec::new();
        for (b, block) in m.samples.iter().enumerate() {
            for f in &m.scalar_factors[block.scalar_start as usize..block.scalar_end as usize] {
                if f.normsys == ScalarFactor::LINEAR {
                    block_linear.push(f.param);
                } else {
                    terms.push((f.param, b as u32, f.normsys));
                }
            }
            block_linear_start.push(block_linear.len() as u32);
        }
        terms.sort_by_key(|&(param, block, _)| (param, block));

        let mut plan = Plan {
            histosys_params,
            normsys_code: m.codes.normsys,
            groups: Vec::new(),
            poly: Default::default(),
            ln_hi: Vec::with_capacity(terms.len()),
            ln_lo: Vec::with_capacity(terms.len()),
            term_block: Vec::with_capacity(terms.len()),
            term_param: Vec::with_capacity(terms.len()),
            block_terms_start: Vec::new(),
            block_terms: Vec::new(),
            block_linear_start,
            block_linear,
            histosys_rows: Vec::new(),
            histosys_columns: Vec::with_capacity(m.histosys_delta.len()),
            histosys_row_start: Vec::with_capacity(m.samples.len()),
            histosys_row_len: Vec::with_capacity(m.samples.len()),
            histosys_column_start: Vec::with_capacity(m.samples.len()),
            histosys_sum_start: Vec::with_capacity(m.samples.len()),
            histosys_groups: Vec::new(),
            histosys_term_pair: Vec::new(),
            entry_factors: m.samples.iter().map(|b| entry_factors(m, b)).collect(),
            nominal: Vec::with_capacity(padded_entries_len(m)),
            base_start: Vec::with_capacity(m.samples.len()),
        };
        for block in &m.samples {
            let (e0, n) = (block.entry_start as usize, block.n_bins as usize);
            plan.base_start.push(plan.nominal.len());
            plan.nominal.extend_from_slice(&m.nominal[e0..e0 + n]);
            plan.nominal.resize(plan.nominal.len() + n.next_multiple_of(LANES) - n, 0.0);
        }
        // (param, block, its pair of sums) of every histosys term, in parameter order. Rows are
        // padded to whole vectors, so every block's sums start at a pair.
        let mut histosys_terms = Vec::with_capacity(m.histosys_param.len());
        let mut sums = 0;
        for (b, block) in m.samples.iter().enumerate() {
            plan.histosys_sum_start.push(sums);
            for h in block.histosys_start..block.histosys_end {
                let pair = sums / 2 + (h - block.histosys_start) as usize;
                histosys_terms.push((m.histosys_param[h as usize], b as u32, pair as u32));
            }
            sums += padded_histosys_row(block);
        }
        histosys_terms.sort_by_key(|&(param, block, _)| (param, block));
        plan.histosys_groups = param_groups(histosys_terms.iter().map(|t| t.0));
        plan.histosys_term_pair = histosys_terms.iter().map(|t| t.2).collect();
        for block in &m.samples {
            let row_len = 2 * (block.histosys_end - block.histosys_start) as usize;
            let padded = padded_histosys_row(block);
            let (d0, n) = (block.histosys_delta_start as usize, block.n_bins as usize);
            let block_deltas = &m.histosys_delta[d0..d0 + n * row_len];
            // Zero beyond the row's or the block's end.
            let delta = |bin: usize, k: usize| {
                if bin < n && k < row_len {
                    block_deltas[bin * row_len + k]
                } else {
                    0.0
                }
            };
            plan.histosys_row_start.push(plan.histosys_rows.len());
            plan.histosys_row_len.push(padded);
            let mut at = 0;
            while at < padded {
                let width = row_span(padded - at);
                for bin in 0..n {
                    plan.histosys_rows
                        .extend((at..at + width).map(|k| delta(bin, k)));
                }
                at += width;
            }
            plan.histosys_column_start.push(plan.histosys_columns.len());
            if row_len > 0 {
                let padded_bins = n.next_multiple_of(LANES);
                let mut first_bin = 0;
                while first_bin < padded_bins {
                    let width = row_span(padded_bins - first_bin);
                    for term in 0..row_len / 2 {
                        for k in [2 * term, 2 * term + 1] {
                            plan.histosys_columns
                                .extend((first_bin..first_bin + width).map(|bin| delta(bin, k)));
                        }
                    }
                    first_bin += width;
                }
            }
        }
        let mut of_block: Vec<Vec<u32>> = vec![Vec::new(); m.samples.len()];
        for (t, &(param, block, normsys)) in terms.iter().enumerate() {
            let term = &m.normsys[normsys as usize];
            for (column, &c) in plan.poly.iter_mut().zip(&term.poly) {
                column.push(c);
            }
            plan.ln_hi.push(term.ln_hi);
            plan.ln_lo.push(term.ln_lo);
            plan.term_block.push(block);
            plan.term_param.push(param);
            of_block[block as usize].push(t as u32);
        }
        plan.groups = param_groups(terms.iter().map(|t| t.0));
        plan.block_terms_start.push(0);
        for list in of_block {
            plan.block_terms.extend(list);
            plan.block_terms_start.push(plan.block_terms.len() as u32);
        }
        plan
    }

    pub fn block_terms(&self, block: usize) -> &[u32] {
        &self.block_terms
            [self.block_terms_start[block] as usize..self.block_terms_start[block + 1] as usize]
    }

    /// The base yields (nominal plus histosys deltas) of block `block`'s `n` bins, from the
    /// evaluator's array of them (laid out as [`Plan::nominal`]): only blocks with histosys
    /// terms have their own there; the others' are their nominal yields.
    pub fn block_base<'a>(&'a self, base: &'a [f64], block: usize, n: usize) -> &'a [f64] {
        let start = self.base_start[block];
        if self.histosys_row_len[block] > 0 {
            &base[start..start + n]
        } else {
            &self.nominal[start..start + n]
        }
    }

    pub fn block_linear(&self, block: usize) -> &[u32] {
        &self.block_linear
            [self.block_linear_start[block] as usize..self.block_linear_start[block + 1] as usize]
    }
}
