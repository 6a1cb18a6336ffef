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
use ns_core::layout::ScalarFactor;

/// The normsys factors of one parameter: `start..end` in the plan's term arrays.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct NormsysGroup {
    pub param: u32,
    pub start: u32,
    pub end: u32,
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Plan {
    /// Parameters that drive a histosys, each once, ascending.
    pub histosys_params: Vec<usize>,
    pub normsys_code: NormsysCode,
    /// Normsys terms grouped by parameter (ascending), in model order within a parameter.
    pub groups: Vec<NormsysGroup>,
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
    /// The histosys differences of `CompiledModel::histosys_delta` twice, so that both passes
    /// are long element-wise loops with accumulators in registers: bin-major rows padded with
    /// zeros to whole vectors (the gradient sums a row per bin into per-term accumulators), and
    /// term-major columns padded with zeros to whole vectors (the forward pass adds a column per
    /// term into the bins).
    pub histosys_rows: Vec<f64>,
    pub histosys_columns: Vec<f64>,
    /// Per sample block: where its rows start in `histosys_rows` and their padded length, and
    /// where its columns start in `histosys_columns`.
    pub histosys_row_start: Vec<usize>,
    pub histosys_row_len: Vec<usize>,
    pub histosys_column_start: Vec<usize>,
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
        };
        for block in &m.samples {
            let row_len = 2 * (block.histosys_end - block.histosys_start) as usize;
            let padded = row_len.next_multiple_of(LANES);
            plan.histosys_row_start.push(plan.histosys_rows.len());
            plan.histosys_row_len.push(padded);
            let (d0, n) = (block.histosys_delta_start as usize, block.n_bins as usize);
            let block_deltas = &m.histosys_delta[d0..d0 + n * row_len];
            for row in block_deltas.chunks_exact(row_len.max(1)) {
                plan.histosys_rows.extend_from_slice(row);
                plan.histosys_rows
                    .extend(std::iter::repeat_n(0.0, padded - row_len));
            }
            plan.histosys_column_start.push(plan.histosys_columns.len());
            for k in 0..row_len {
                plan.histosys_columns
                    .extend((0..n).map(|i| block_deltas[i * row_len + k]));
                plan.histosys_columns
                    .extend(std::iter::repeat_n(0.0, n.next_multiple_of(LANES) - n));
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
            match plan.groups.last_mut() {
                Some(g) if g.param == param => g.end += 1,
                _ => plan.groups.push(NormsysGroup {
                    param,
                    start: t as u32,
                    end: t as u32 + 1,
                }),
            }
        }
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

    pub fn block_linear(&self, block: usize) -> &[u32] {
        &self.block_linear
            [self.block_linear_start[block] as usize..self.block_linear_start[block + 1] as usize]
    }
}
