//! The CPU f64 evaluator: NLL (pyhf's `−logpdf`), analytic reverse-mode gradient and expected data.

use std::borrow::Cow;

use ns_core::interp::HistosysWeights;
use ns_core::layout::ScalarFactor;
use ns_core::{CompiledModel, Error, Result};

use crate::data::PreparedData;
use crate::poisson::poisson_deviance;

/// Evaluates one compiled model on the CPU.
#[derive(Clone, Debug)]
pub struct CpuEvaluator<'m> {
    model: &'m CompiledModel,
    /// Parameters that drive a histosys: their weights are computed once per evaluation.
    histosys_params: Cow<'m, [usize]>,
}

/// Working memory of one evaluation; reuse it across calls to avoid allocation.
#[derive(Clone, Debug)]
pub struct Scratch {
    expected: Vec<f64>,
    /// Per main bin: d NLL / d expected.
    bin_weight: Vec<f64>,
    /// Per entry: nominal plus histosys deltas.
    base: Vec<f64>,
    /// Per entry: product of the entry factors.
    entry_product: Vec<f64>,
    /// Per parameter: histosys weights at its current value (only histosys parameters are set).
    histosys_weights: Vec<HistosysWeights>,
    /// Per entry of the current block: d NLL / d ν times the entry-factor product.
    entry_weight: Vec<f64>,
    /// The current block's histosys weights `[w_up, w_down]` per term, and the backward pass's
    /// per-term accumulators, laid out like one bin-major row of `histosys_delta`.
    block_histosys_weight: Vec<f64>,
    block_histosys_sum: Vec<f64>,
    /// Per scalar factor: value and derivative.
    scalar_value: Vec<f64>,
    scalar_slope: Vec<f64>,
    /// Per sample block: product of its scalar factors.
    block_scale: Vec<f64>,
    /// Products of the factors after index k, for the product rule without division.
    suffix: Vec<f64>,
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
        let max_histosys = model
            .samples
            .iter()
            .map(|b| (b.histosys_end - b.histosys_start) as usize)
            .max()
            .unwrap_or(0);
        Scratch {
            expected: vec![0.0; model.n_main],
            bin_weight: vec![0.0; model.n_main],
            base: vec![0.0; model.n_entries()],
            entry_product: vec![0.0; model.n_entries()],
            histosys_weights: vec![HistosysWeights::new(model.codes.histosys, 0.0); model.n_params],
            entry_weight: vec![
                0.0;
                model
                    .samples
                    .iter()
                    .map(|b| b.n_bins as usize)
                    .max()
                    .unwrap_or(0)
            ],
            block_histosys_weight: vec![0.0; 2 * max_histosys],
            block_histosys_sum: vec![0.0; 2 * max_histosys],
            scalar_value: vec![0.0; model.scalar_factors.len()],
            scalar_slope: vec![0.0; model.scalar_factors.len()],
            block_scale: vec![0.0; model.samples.len()],
            suffix: vec![0.0; max_factors + 1],
        }
    }

    /// Expected main data of the last evaluation.
    pub fn expected_main(&self) -> &[f64] {
        &self.expected
    }
}

/// A dot product with four interleaved accumulators: fast for short rows, and the same
/// summation order every time (deterministic).
#[inline]
fn dot(a: &[f64], b: &[f64]) -> f64 {
    let (ca, cb) = (a.chunks_exact(4), b.chunks_exact(4));
    let tail: f64 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    let mut acc = [0.0; 4];
    for (x, y) in ca.zip(cb) {
        for k in 0..4 {
            acc[k] += x[k] * y[k];
        }
    }
    (acc[0] + acc[1]) + (acc[2] + acc[3]) + tail
}

impl<'m> CpuEvaluator<'m> {
    pub fn new(model: &'m CompiledModel) -> Self {
        CpuEvaluator {
            model,
            histosys_params: Cow::Owned(Self::histosys_params_of(model)),
        }
    }

    /// An evaluator from the parameters `histosys_params_of(model)` gave (kept by a caller that
    /// evaluates point after point, so that none is sorted again).
    pub fn with_histosys_params(model: &'m CompiledModel, histosys_params: &'m [usize]) -> Self {
        CpuEvaluator {
            model,
            histosys_params: Cow::Borrowed(histosys_params),
        }
    }

    /// The parameters that drive a histosys, each once, ascending.
    pub fn histosys_params_of(model: &CompiledModel) -> Vec<usize> {
        let mut params: Vec<usize> = model.histosys_param.iter().map(|&p| p as usize).collect();
        params.sort_unstable();
        params.dedup();
        params
    }

    pub fn model(&self) -> &'m CompiledModel {
        self.model
    }

    fn check_params(&self, params: &[f64]) -> Result<()> {
        if params.len() != self.model.n_params {
            return Err(Error::InvalidInput(format!(
                "parameter vector has length {} but the model has {} parameters",
                params.len(),
                self.model.n_params
            )));
        }
        Ok(())
    }

    /// Forward pass: expected main data into `scratch.expected`, keeping what the backward pass needs.
    fn forward(&self, params: &[f64], s: &mut Scratch) {
        let m = self.model;
        let codes = m.codes;
        for &p in self.histosys_params.iter() {
            s.histosys_weights[p] = HistosysWeights::new(codes.histosys, params[p]);
        }
        s.expected.fill(0.0);
        for (block_index, block) in m.samples.iter().enumerate() {
            let mut scale = 1.0;
            for k in block.scalar_start as usize..block.scalar_end as usize {
                let factor = m.scalar_factors[k];
                let theta = params[factor.param as usize];
                let (value, slope) = if factor.normsys == ScalarFactor::LINEAR {
                    (theta, 1.0)
                } else {
                    m.normsys[factor.normsys as usize].factor_and_derivative(codes.normsys, theta)
                };
                s.scalar_value[k] = value;
                s.scalar_slope[k] = slope;
                scale *= value;
            }
            s.block_scale[block_index] = scale;

            let (e0, n) = (block.entry_start as usize, block.n_bins as usize);
            let base = &mut s.base[e0..e0 + n];
            base.copy_from_slice(&m.nominal[e0..e0 + n]);
            let (h0, h1) = (block.histosys_start as usize, block.histosys_end as usize);
            if h1 > h0 {
                let row_len = 2 * (h1 - h0);
                let weights = &mut s.block_histosys_weight[..row_len];
                for (pair, &p) in weights.chunks_exact_mut(2).zip(&m.histosys_param[h0..h1]) {
                    let w = s.histosys_weights[p as usize];
                    pair[0] = w.w_up;
                    pair[1] = w.w_down;
                }
                let d0 = block.histosys_delta_start as usize;
                for (i, row) in m.histosys_delta[d0..d0 + n * row_len]
                    .chunks_exact(row_len)
                    .enumerate()
                {
                    base[i] += dot(weights, row);
                }
            }
            let bin0 = block.bin_start as usize;
            for i in 0..n {
                let e = e0 + i;
                let mut product = 1.0;
                for &p in &m.entry_factor_param
                    [m.entry_factor_start[e] as usize..m.entry_factor_start[e + 1] as usize]
                {
                    product *= params[p as usize];
                }
                s.entry_product[e] = product;
                s.expected[bin0 + i] += base[i] * scale * product;
            }
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
        self.check_params(params)?;
        let m = self.model;
        if data.main.len() != m.n_main || data.aux.len() != m.n_aux {
            return Err(Error::InvalidInput(
                "dataset does not match the model's bin and auxdata counts".into(),
            ));
        }
        self.forward(params, s);

        let mut nll = 0.0;
        for ((&lambda, &n), weight) in s.expected.iter().zip(&data.main).zip(&mut s.bin_weight) {
            nll += poisson_deviance(n, lambda);
            *weight = if n == 0.0 { 1.0 } else { 1.0 - n / lambda };
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

        if let Some(grad) = grad {
            if grad.len() != m.n_params {
                return Err(Error::InvalidInput(format!(
                    "gradient buffer has length {} but the model has {} parameters",
                    grad.len(),
                    m.n_params
                )));
            }
            grad.fill(0.0);
            self.backward(params, data, s, grad);
        }
        Ok(nll)
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
        let scale = s.block_scale[block];
        for i in 0..n {
            out[i] = scale * s.entry_product[e0 + i] * histosys_slope;
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

    fn backward(&self, params: &[f64], data: &PreparedData, s: &mut Scratch, grad: &mut [f64]) {
        let m = self.model;
        for (block_index, block) in m.samples.iter().enumerate() {
            let scale = s.block_scale[block_index];
            let (e0, n, bin0) = (
                block.entry_start as usize,
                block.n_bins as usize,
                block.bin_start as usize,
            );
            let base = &s.base[e0..e0 + n];
            let entry_weight = &mut s.entry_weight[..n];
            for (i, w) in entry_weight.iter_mut().enumerate() {
                *w = s.bin_weight[bin0 + i] * s.entry_product[e0 + i];
            }

            // Scalar factors: dNLL/df_k = Σ_e w_e base_e g_e · Π_{j≠k} f_j.
            let (k0, k1) = (block.scalar_start as usize, block.scalar_end as usize);
            if k1 > k0 {
                let unscaled: f64 = entry_weight.iter().zip(base).map(|(w, b)| w * b).sum();
                let count = k1 - k0;
                s.suffix[count] = 1.0;
                for j in (0..count).rev() {
                    s.suffix[j] = s.suffix[j + 1] * s.scalar_value[k0 + j];
                }
                let mut prefix = 1.0;
                for j in 0..count {
                    let k = k0 + j;
                    grad[m.scalar_factors[k].param as usize] +=
                        unscaled * prefix * s.suffix[j + 1] * s.scalar_slope[k];
                    prefix *= s.scalar_value[k];
                }
            }

            // Histosys: dν_e/dα = scale · g_e · (s_up·up_e + s_down·down_e), summed over the bins.
            let (h0, h1) = (block.histosys_start as usize, block.histosys_end as usize);
            if h1 > h0 {
                let row_len = 2 * (h1 - h0);
                let sums = &mut s.block_histosys_sum[..row_len];
                sums.fill(0.0);
                let d0 = block.histosys_delta_start as usize;
                for (row, &w) in m.histosys_delta[d0..d0 + n * row_len]
                    .chunks_exact(row_len)
                    .zip(entry_weight.iter())
                {
                    for (sum, delta) in sums.iter_mut().zip(row) {
                        *sum += w * delta;
                    }
                }
                for (pair, &p) in sums.chunks_exact(2).zip(&m.histosys_param[h0..h1]) {
                    let w = s.histosys_weights[p as usize];
                    grad[p as usize] += scale * (w.s_up * pair[0] + w.s_down * pair[1]);
                }
            }

            // Entry factors: dν_e/dθ_j = base_e · scale · Π_{i≠j} θ_i.
            for i in 0..n {
                let e = e0 + i;
                let factor_params = &m.entry_factor_param
                    [m.entry_factor_start[e] as usize..m.entry_factor_start[e + 1] as usize];
                let outer = s.bin_weight[bin0 + i] * base[i] * scale;
                match factor_params {
                    [] => {}
                    [p] => grad[*p as usize] += outer,
                    _ => {
                        let count = factor_params.len();
                        s.suffix[count] = 1.0;
                        for j in (0..count).rev() {
                            s.suffix[j] = s.suffix[j + 1] * params[factor_params[j] as usize];
                        }
                        let mut prefix = 1.0;
                        for (j, &p) in factor_params.iter().enumerate() {
                            grad[p as usize] += outer * prefix * s.suffix[j + 1];
                            prefix *= params[p as usize];
                        }
                    }
                }
            }
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
        for (b, block) in m.samples.iter().enumerate() {
            let (e0, n) = (block.entry_start as usize, block.n_bins as usize);
            for e in e0..e0 + n {
                yields[e] = s.base[e] * s.block_scale[b] * s.entry_product[e];
            }
        }
        Ok(yields)
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
