//! The CPU f64 evaluator: NLL (pyhf's `−logpdf`), analytic reverse-mode gradient and expected data.

use ns_core::interp::histosys_delta_and_derivative;
use ns_core::layout::ScalarFactor;
use ns_core::{CompiledModel, Error, Result};
use rayon::prelude::*;

use crate::data::PreparedData;

/// Evaluates one compiled model on the CPU.
#[derive(Clone, Copy, Debug)]
pub struct CpuEvaluator<'m> {
    model: &'m CompiledModel,
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
    /// Per histosys delta: dΔ/dα.
    histosys_slope: Vec<f64>,
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
        Scratch {
            expected: vec![0.0; model.n_main],
            bin_weight: vec![0.0; model.n_main],
            base: vec![0.0; model.n_entries()],
            entry_product: vec![0.0; model.n_entries()],
            histosys_slope: vec![0.0; model.histosys_up.len()],
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

/// `x ln y` with pyhf's `xlogy` convention: zero when `x` is zero.
#[inline]
fn xlogy(x: f64, y: f64) -> f64 {
    if x == 0.0 { 0.0 } else { x * y.ln() }
}

impl<'m> CpuEvaluator<'m> {
    pub fn new(model: &'m CompiledModel) -> Self {
        CpuEvaluator { model }
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

            let entries = block.entry_start as usize..(block.entry_start + block.n_bins) as usize;
            s.base[entries.clone()].copy_from_slice(&m.nominal[entries.clone()]);
            for term in &m.histosys[block.histosys_start as usize..block.histosys_end as usize] {
                let alpha = params[term.param as usize];
                let deltas =
                    term.delta_start as usize..term.delta_start as usize + block.n_bins as usize;
                for ((d, base), slope) in deltas
                    .clone()
                    .zip(s.base[entries.clone()].iter_mut())
                    .zip(&mut s.histosys_slope[deltas])
                {
                    let (delta, dslope) = histosys_delta_and_derivative(
                        codes.histosys,
                        alpha,
                        m.histosys_up[d],
                        m.histosys_down[d],
                    );
                    *base += delta;
                    *slope = dslope;
                }
            }
            for (i, e) in entries.enumerate() {
                let mut product = 1.0;
                for &p in &m.entry_factor_param
                    [m.entry_factor_start[e] as usize..m.entry_factor_start[e + 1] as usize]
                {
                    product *= params[p as usize];
                }
                s.entry_product[e] = product;
                s.expected[block.bin_start as usize + i] += s.base[e] * scale * product;
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
        mut grad: Option<&mut [f64]>,
    ) -> Result<f64> {
        self.check_params(params)?;
        let m = self.model;
        if data.main.len() != m.n_main || data.aux.len() != m.n_aux {
            return Err(Error::InvalidInput(
                "dataset does not match the model's bin and auxdata counts".into(),
            ));
        }
        self.forward(params, s);

        let mut nll = data.constant;
        for ((&lambda, &n), weight) in s.expected.iter().zip(&data.main).zip(&mut s.bin_weight) {
            nll += lambda - xlogy(n, lambda);
            *weight = if n == 0.0 { 1.0 } else { 1.0 - n / lambda };
        }
        for c in &m.gaussian {
            let theta = params[c.param as usize];
            let pull = (data.aux[c.aux_index as usize] - theta) / c.sigma;
            nll += 0.5 * pull * pull;
        }
        for c in &m.poisson {
            let rate = params[c.param as usize] * c.tau;
            nll += rate - xlogy(data.aux[c.aux_index as usize], rate);
        }

        if let Some(grad) = grad.as_deref_mut() {
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

    fn backward(&self, params: &[f64], data: &PreparedData, s: &mut Scratch, grad: &mut [f64]) {
        let m = self.model;
        for (block_index, block) in m.samples.iter().enumerate() {
            let scale = s.block_scale[block_index];
            let entries = block.entry_start as usize..(block.entry_start + block.n_bins) as usize;
            let weights =
                &s.bin_weight[block.bin_start as usize..(block.bin_start + block.n_bins) as usize];

            // Scalar factors: dNLL/df_k = Σ_e w_e base_e g_e · Π_{j≠k} f_j.
            let (k0, k1) = (block.scalar_start as usize, block.scalar_end as usize);
            if k1 > k0 {
                let unscaled: f64 = entries
                    .clone()
                    .zip(weights)
                    .map(|(e, w)| w * s.base[e] * s.entry_product[e])
                    .sum();
                let n = k1 - k0;
                s.suffix[n] = 1.0;
                for j in (0..n).rev() {
                    s.suffix[j] = s.suffix[j + 1] * s.scalar_value[k0 + j];
                }
                let mut prefix = 1.0;
                for j in 0..n {
                    let k = k0 + j;
                    grad[m.scalar_factors[k].param as usize] +=
                        unscaled * prefix * s.suffix[j + 1] * s.scalar_slope[k];
                    prefix *= s.scalar_value[k];
                }
            }

            // Histosys: dν_e/dα = scale · g_e · dΔ/dα.
            for term in &m.histosys[block.histosys_start as usize..block.histosys_end as usize] {
                let d0 = term.delta_start as usize;
                let sum: f64 = entries
                    .clone()
                    .zip(weights)
                    .enumerate()
                    .map(|(i, (e, w))| w * s.entry_product[e] * s.histosys_slope[d0 + i])
                    .sum();
                grad[term.param as usize] += scale * sum;
            }

            // Entry factors: dν_e/dθ_j = base_e · scale · Π_{i≠j} θ_i.
            for (e, w) in entries.zip(weights) {
                let factor_params = &m.entry_factor_param
                    [m.entry_factor_start[e] as usize..m.entry_factor_start[e + 1] as usize];
                let outer = w * s.base[e] * scale;
                match factor_params {
                    [] => {}
                    [p] => grad[*p as usize] += outer,
                    _ => {
                        let n = factor_params.len();
                        s.suffix[n] = 1.0;
                        for j in (0..n).rev() {
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

    /// NLL and gradient for many parameter vectors (rows of `params`, each `n_params` long),
    /// each against `datasets[i]`, or against `datasets[0]` when one dataset is given.
    /// Runs in parallel; each evaluation is serial, so results do not depend on the thread count.
    pub fn nll_grad_batch(
        &self,
        params: &[f64],
        datasets: &[PreparedData],
    ) -> Result<(Vec<f64>, Vec<f64>)> {
        let n_params = self.model.n_params;
        if n_params == 0 || params.len() % n_params != 0 {
            return Err(Error::InvalidInput(format!(
                "batch of parameters has length {} which is not a multiple of {} parameters",
                params.len(),
                n_params
            )));
        }
        let n = params.len() / n_params;
        if datasets.len() != 1 && datasets.len() != n {
            return Err(Error::InvalidInput(format!(
                "{} datasets given for {} parameter vectors (give one, or one per vector)",
                datasets.len(),
                n
            )));
        }
        let mut nll = vec![0.0; n];
        let mut grad = vec![0.0; n * n_params];
        nll.par_iter_mut()
            .zip(grad.par_chunks_mut(n_params))
            .zip(params.par_chunks(n_params))
            .enumerate()
            .try_for_each_init(
                || Scratch::new(self.model),
                |scratch, (i, ((value, g), p))| {
                    let data = if datasets.len() == 1 {
                        &datasets[0]
                    } else {
                        &datasets[i]
                    };
                    *value = self.nll_with_gradient(p, data, scratch, Some(g))?;
                    Ok::<(), Error>(())
                },
            )?;
        Ok((nll, grad))
    }
}
