//! What the CPU evaluator derives from a compiled model once, laid out for its loops.
//!
//! The compiled model stores scalar factors block by block, which suits the GPU (a thread per
//! block). On a CPU the cost of a published model is its ~2,000 normsys factors, evaluated one
//! by one in short per-block loops. Here they are regrouped by parameter into structure-of-arrays
//! runs: each parameter's powers (or its exponential branch) are decided once, and every
//! factor of that parameter is one branch-free line of a loop the compiler vectorises. The
//! blocks keep an index list into those runs for their products.

use std::ops::Range;

use ns_core::CompiledModel;
use ns_core::interp::NormsysCode;
use ns_core::lanes::LANES;
use ns_core::layout::{BinStat, NormsysInput, SampleBlock, ScalarFactor};

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
    pub fn range(&self) -> Range<usize> {
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

/// Everything the evaluator's passes need of one sample block, in one record (one lookup per
/// block, rather than one per array).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct BlockPlan {
    pub bin_start: usize,
    pub entry_start: usize,
    pub n_bins: usize,
    /// Where its bins start in the arrays laid out as [`Plan::nominal`] (padded per block).
    pub base_start: usize,
    /// Its normsys terms (`Plan::block_terms`) and linear factors (`Plan::block_linear`).
    pub terms: Range<usize>,
    pub linear: Range<usize>,
    /// Its histosys terms (`CompiledModel::histosys_param`).
    pub histosys: Range<usize>,
    /// Where its histosys columns start in `Plan::histosys_columns`, where its rows start in
    /// `Plan::histosys_rows` and their padded length, and where its per-term sums
    /// `[Σ up, Σ down]` start in the backward pass's array of them (blocks one after another,
    /// each padded like its rows).
    pub columns_start: usize,
    pub rows_start: usize,
    pub row_len: usize,
    pub sums_start: usize,
    pub entry_factors: EntryFactors,
    /// Its morphed yields' floor, if any.
    pub floor: Option<BlockFloor>,
    /// Whether statistical terms (`Plan::stats`) read its entries.
    pub stats: bool,
}

/// The floor of a block's morphed yields, and the sum of its nominal yields where it is
/// renormalised to that sum afterwards; `logarithmic`: its base values are logarithms,
/// exponentiated and renormalised before the floor (`ns_core::layout::FlooredBlock`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct BlockFloor {
    /// The bins floored and renormalised (the rest are padding, zero).
    pub active: usize,
    pub floor: f64,
    pub renormalise_to: Option<f64>,
    pub logarithmic: bool,
}

/// An entry read by a statistical term: where it lies, and its template error σ.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct StatEntry {
    pub entry: usize,
    pub block: usize,
    /// Its bin within the block.
    pub offset: usize,
    pub sigma: f64,
}

/// A [`BinStat`] resolved to blocks: its main bin, parameter, entries (`Plan::stat_entries`)
/// and, for a Poisson term, the effective count n (the entry's factor is θ/n).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct StatPlan {
    pub bin: usize,
    pub param: usize,
    pub entries: Range<usize>,
    pub poisson_count: Option<f64>,
    /// Set analytically in fits: θ's range and its global observable's index.
    pub analytic: Option<((f64, f64), usize)>,
}

impl BlockPlan {
    /// Its bins padded to whole vectors.
    pub fn padded_bins(&self) -> usize {
        self.n_bins.next_multiple_of(LANES)
    }
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
    /// Per group: the transform its parameter is read through (ROOT's LogNormal), if any.
    pub group_inputs: Vec<Option<NormsysInput>>,
    /// Per term: its index in the model's normsys terms.
    pub term_normsys: Vec<u32>,
    /// Per term: the code-4 polynomial coefficient of α^(k+1) in `poly[k]`.
    pub poly: [Vec<f64>; 6],
    pub ln_hi: Vec<f64>,
    pub ln_lo: Vec<f64>,
    /// Per term: its sample block and its parameter.
    pub term_block: Vec<u32>,
    pub term_param: Vec<u32>,
    /// Per sample block, what the passes need of it.
    pub blocks: Vec<BlockPlan>,
    /// The blocks' normsys terms (indices into the term arrays), block after block.
    pub block_terms: Vec<u32>,
    /// The parameters of the blocks' linear factors (normfactor, lumi), block after block.
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
    /// Histosys terms grouped by parameter (ascending), in block order within a parameter, so
    /// that each parameter's gradient is one sum in the order the blocks come: per term, which
    /// pair `[Σ up, Σ down]` of the sums is its.
    pub histosys_groups: Vec<ParamGroup>,
    pub histosys_term_pair: Vec<u32>,
    /// The nominal yields block by block, each block padded with zeros to whole vectors: the
    /// layout of the evaluator's base yields, so that its passes read and write whole vectors.
    pub nominal: Vec<f64>,
    /// The statistical terms (CMS Combine's autoMCStats), their entries, and the main bins they
    /// add to (each once, ascending: the bins floored at [`BinStat::FLOOR`]).
    pub stats: Vec<StatPlan>,
    pub stat_entries: Vec<StatEntry>,
    pub stat_bins: Vec<usize>,
    /// Whether a statistical term is set analytically in fits.
    pub analytic: bool,
}

impl Plan {
    pub fn new(m: &CompiledModel) -> Plan {
        let mut histosys_params: Vec<usize> =
            m.histosys_param.iter().map(|&p| p as usize).collect();
        histosys_params.sort_unstable();
        histosys_params.dedup();

        // (param, block, normsys index) of every normsys factor, in parameter order.
        let mut terms = Vec::new();
        let mut linear_of_block = vec![Vec::new(); m.samples.len()];
        for (b, block) in m.samples.iter().enumerate() {
            for f in &m.scalar_factors[block.scalar_start as usize..block.scalar_end as usize] {
                if f.normsys == ScalarFactor::LINEAR {
                    linear_of_block[b].push(f.param);
                } else {
                    terms.push((f.param, b as u32, f.normsys));
                }
            }
        }
        terms.sort_by_key(|&(param, block, _)| (param, block));

        let mut plan = Plan {
            histosys_params,
            normsys_code: m.codes.normsys,
            groups: param_groups(terms.iter().map(|t| t.0)),
            group_inputs: Vec::new(),
            term_normsys: Vec::with_capacity(terms.len()),
            poly: Default::default(),
            ln_hi: Vec::with_capacity(terms.len()),
            ln_lo: Vec::with_capacity(terms.len()),
            term_block: Vec::with_capacity(terms.len()),
            term_param: Vec::with_capacity(terms.len()),
            blocks: Vec::with_capacity(m.samples.len()),
            block_terms: Vec::with_capacity(terms.len()),
            block_linear: Vec::new(),
            histosys_rows: Vec::new(),
            histosys_columns: Vec::with_capacity(m.histosys_delta.len()),
            histosys_groups: Vec::new(),
            histosys_term_pair: Vec::new(),
            nominal: Vec::with_capacity(padded_entries_len(m)),
            stats: Vec::with_capacity(m.bin_stats.len()),
            stat_entries: Vec::new(),
            stat_bins: Vec::new(),
            analytic: false,
        };
        plan.group_inputs = plan
            .groups
            .iter()
            .map(|g| {
                m.normsys_inputs
                    .iter()
                    .find(|i| i.param == g.param)
                    .copied()
            })
            .collect();
        let mut terms_of_block: Vec<Vec<u32>> = vec![Vec::new(); m.samples.len()];
        for (t, &(param, block, normsys)) in terms.iter().enumerate() {
            let term = &m.normsys[normsys as usize];
            for (column, &c) in plan.poly.iter_mut().zip(&term.poly) {
                column.push(c);
            }
            plan.ln_hi.push(term.ln_hi);
            plan.ln_lo.push(term.ln_lo);
            plan.term_block.push(block);
            plan.term_param.push(param);
            plan.term_normsys.push(normsys);
            terms_of_block[block as usize].push(t as u32);
        }

        // (param, block, its pair of sums) of every histosys term, in parameter order. Rows are
        // padded to whole vectors, so every block's sums start at a pair.
        let mut histosys_terms = Vec::with_capacity(m.histosys_param.len());
        let mut sums_start = 0;
        for (b, block) in m.samples.iter().enumerate() {
            let (e0, n) = (block.entry_start as usize, block.n_bins as usize);
            let (h0, h1) = (block.histosys_start as usize, block.histosys_end as usize);
            for h in h0..h1 {
                let pair = sums_start / 2 + h - h0;
                histosys_terms.push((m.histosys_param[h], b as u32, pair as u32));
            }
            let row_len = padded_histosys_row(block);
            let record = BlockPlan {
                bin_start: block.bin_start as usize,
                entry_start: e0,
                n_bins: n,
                base_start: plan.nominal.len(),
                terms: extend_run(&mut plan.block_terms, &terms_of_block[b]),
                linear: extend_run(&mut plan.block_linear, &linear_of_block[b]),
                histosys: h0..h1,
                columns_start: plan.histosys_columns.len(),
                rows_start: plan.histosys_rows.len(),
                row_len,
                sums_start,
                entry_factors: entry_factors(m, block),
                floor: m
                    .floored_blocks
                    .iter()
                    .find(|fb| fb.block as usize == b)
                    .map(|fb| BlockFloor {
                        active: (fb.active_bins as usize).min(n),
                        floor: fb.floor,
                        renormalise_to: fb.renormalise_to,
                        logarithmic: fb.logarithmic,
                    }),
                stats: false,
            };
            plan.nominal.extend_from_slice(&m.nominal[e0..e0 + n]);
            plan.nominal
                .resize(record.base_start + record.padded_bins(), 0.0);
            plan.add_histosys_layouts(m, block, &record);
            plan.blocks.push(record);
            sums_start += row_len;
        }
        histosys_terms.sort_by_key(|&(param, block, _)| (param, block));
        plan.histosys_groups = param_groups(histosys_terms.iter().map(|t| t.0));
        plan.histosys_term_pair = histosys_terms.iter().map(|t| t.2).collect();
        plan.add_stats(m);
        plan
    }

    /// Resolves the model's statistical terms to blocks (their entries are the model's own:
    /// its builder lays them out).
    fn add_stats(&mut self, m: &CompiledModel) {
        let locate = |entry: u32, sigma: f64| {
            let entry = entry as usize;
            let block = m
                .samples
                .partition_point(|b| (b.entry_start + b.n_bins) as usize <= entry);
            StatEntry {
                entry,
                block,
                offset: entry - m.samples[block].entry_start as usize,
                sigma,
            }
        };
        for stat in &m.bin_stats {
            let start = self.stat_entries.len();
            let poisson_count = match stat {
                BinStat::Gaussian { entries, .. } => {
                    self.stat_entries
                        .extend(entries.iter().map(|&(e, sigma)| locate(e, sigma)));
                    None
                }
                BinStat::Poisson { entry, count, .. } => {
                    self.stat_entries.push(locate(*entry, 0.0));
                    Some(*count)
                }
            };
            let (bin, param) = (stat.main_bin(m) as usize, stat.param() as usize);
            let analytic = stat.analytic(m).map(|(range, aux)| (range, aux as usize));
            for e in &self.stat_entries[start..] {
                self.blocks[e.block].stats = true;
            }
            self.stats.push(StatPlan {
                bin,
                param,
                entries: start..self.stat_entries.len(),
                poisson_count,
                analytic,
            });
            self.stat_bins.push(bin);
        }
        self.stat_bins.sort_unstable();
        self.stat_bins.dedup();
        self.analytic = self.stats.iter().any(|t| t.analytic.is_some());
    }

    /// Appends the histosys differences of `sample` (planned as `block`) to `histosys_rows` and
    /// `histosys_columns`.
    fn add_histosys_layouts(&mut self, m: &CompiledModel, sample: &SampleBlock, block: &BlockPlan) {
        let row_len = 2 * block.histosys.len();
        let (d0, n) = (sample.histosys_delta_start as usize, block.n_bins);
        let block_deltas = &m.histosys_delta[d0..d0 + n * row_len];
        // Zero beyond the row's or the block's end.
        let delta = |bin: usize, k: usize| {
            if bin < n && k < row_len {
                block_deltas[bin * row_len + k]
            } else {
                0.0
            }
        };
        let mut at = 0;
        while at < block.row_len {
            let width = row_span(block.row_len - at);
            for bin in 0..n {
                self.histosys_rows
                    .extend((at..at + width).map(|k| delta(bin, k)));
            }
            at += width;
        }
        let mut first_bin = 0;
        while first_bin < block.padded_bins() {
            let width = row_span(block.padded_bins() - first_bin);
            for k in 0..row_len {
                self.histosys_columns
                    .extend((first_bin..first_bin + width).map(|bin| delta(bin, k)));
            }
            first_bin += width;
        }
    }

    pub fn block_terms(&self, block: usize) -> &[u32] {
        &self.block_terms[self.blocks[block].terms.clone()]
    }

    pub fn block_linear(&self, block: usize) -> &[u32] {
        &self.block_linear[self.blocks[block].linear.clone()]
    }

    /// The base yields (nominal plus histosys deltas) of block `block`, from the evaluator's
    /// array of them (laid out as [`Plan::nominal`]): only blocks with histosys terms have their
    /// own there; the others' are their nominal yields.
    pub fn block_base<'a>(&'a self, base: &'a [f64], block: &BlockPlan) -> &'a [f64] {
        let range = block.base_start..block.base_start + block.n_bins;
        if block.row_len > 0 {
            &base[range]
        } else {
            &self.nominal[range]
        }
    }
}

/// Appends `items` to `run` and returns where they lie in it.
fn extend_run(run: &mut Vec<u32>, items: &[u32]) -> Range<usize> {
    let start = run.len();
    run.extend_from_slice(items);
    start..run.len()
}
