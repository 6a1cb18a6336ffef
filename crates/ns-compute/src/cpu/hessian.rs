//! The analytic Hessian of the NLL on the CPU: the curvature behind uncertainties, the Newton
//! polish and the optimizer's variable scaling, in one pass instead of 2·n gradient probes.
//!
//! Every expected yield is ν = B·T: B the nominal plus its histosys deltas (each term a function
//! of one parameter), T the product of its multiplicative factors (normsys, normfactor, lumi,
//! shapesys, staterror, shapefactor; each a function of one parameter). With G_p = ∂ln T/∂p,
//! H_p = ∂²ln T/∂p², B_p = ∂B/∂p and B_pp = ∂²B/∂p²:
//!
//! ∂ν/∂p = T·(B·G_p + B_p),  ∂²ν/∂p∂q = T·(B·G_p·G_q + B_p·G_q + B_q·G_p) + δ_pq·T·(B·H_p + B_pp),
//!
//! and the Poisson terms give H = Σ_bins (1 − n/ν)·∇²ν + (n/ν²)·∇ν∇νᵀ, plus the constraints'
//! diagonal. The logarithmic form needs non-zero factors: a normfactor or lumi at 0 is taken as
//! the limit (one per sample); a γ at 0, two at 0 in one sample, or a normsys product that is
//! not a normal number have no answer here, and the caller differences the gradient instead.
//! A sample whose product ROOT's semantics clip at zero adds nothing (flat, as in the gradient).
//! One thread, a fixed order: the same bits for every thread count and instruction set.

use ns_core::Result;
use ns_core::interp::{HistosysWeights, NormsysCode};

use super::evaluator::{CpuEvaluator, Scratch, main_bin_term};
use crate::data::PreparedData;
use crate::poisson::walled_empty_bin_curvature;

/// Which part of the Hessian to compute.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HessianPart {
    /// The whole n×n matrix, row-major.
    Full,
    /// Its diagonal only (n values): cheaper, for the optimizer's variable scaling.
    Diagonal,
}

/// One parameter's share in the multiplicative factors of a sample: ∂ln T/∂p and ∂²ln T/∂p².
#[derive(Clone, Copy, Debug)]
struct Share {
    param: u32,
    log_slope: f64,
    log_curvature: f64,
}

/// The shares of a sample's factors, merged by parameter (a parameter may act through several
/// modifiers).
struct Shares {
    list: Vec<Share>,
    /// Per parameter: its position in `list`, or `u32::MAX`.
    slot: Vec<u32>,
}

impl Shares {
    fn new(n_params: usize) -> Self {
        Shares {
            list: Vec::new(),
            slot: vec![u32::MAX; n_params],
        }
    }

    fn add(&mut self, param: u32, (log_slope, log_curvature): (f64, f64)) {
        let slot = &mut self.slot[param as usize];
        if *slot == u32::MAX {
            *slot = self.list.len() as u32;
            self.list.push(Share {
                param,
                log_slope,
                log_curvature,
            });
        } else {
            let share = &mut self.list[*slot as usize];
            share.log_slope += log_slope;
            share.log_curvature += log_curvature;
        }
    }

    fn clear(&mut self) {
        for share in &self.list {
            self.slot[share.param as usize] = u32::MAX;
        }
        self.list.clear();
    }
}

/// Where the Hessian accumulates.
struct Sink<'a> {
    part: HessianPart,
    n: usize,
    values: &'a mut [f64],
}

impl Sink<'_> {
    /// Adds a term `v·(e_p e_qᵀ + e_q e_pᵀ)`: `v` at (p, q) and (q, p), or `2v` on the
    /// diagonal where p = q (the two halves of a symmetric product such as ∂B·Gᵀ + G·∂Bᵀ).
    #[inline]
    fn pair(&mut self, p: u32, q: u32, v: f64) {
        self.add(p, q, if p == q { 2.0 * v } else { v });
    }

    /// Adds `v` at (p, q) and (q, p) (once where p = q): into the upper triangle, which
    /// [`finish`](Self::finish) mirrors.
    #[inline]
    fn add(&mut self, p: u32, q: u32, v: f64) {
        let (p, q) = (p.min(q) as usize, p.max(q) as usize);
        match self.part {
            HessianPart::Full => self.values[p * self.n + q] += v,
            HessianPart::Diagonal => {
                if p == q {
                    self.values[p] += v;
                }
            }
        }
    }

    /// The lower triangle from the upper one.
    fn finish(self) {
        if self.part == HessianPart::Full {
            for r in 0..self.n {
                for c in r + 1..self.n {
                    self.values[c * self.n + r] = self.values[r * self.n + c];
                }
            }
        }
    }
}

impl CpuEvaluator<'_> {
    /// The Hessian of the NLL at `params` (with respect to every parameter), analytic: `part`
    /// says whether the whole matrix or its diagonal. `None` where the module's form does not
    /// hold: a γ at 0, two linear factors of one sample at 0, a normsys product that is not a
    /// normal number (one that ROOT's semantics clip at zero adds nothing instead), a floored
    /// block or statistical terms (their second derivatives are left to differences of the
    /// gradient).
    pub fn nll_hessian(
        &self,
        params: &[f64],
        data: &PreparedData,
        s: &mut Scratch,
        part: HessianPart,
    ) -> Result<Option<Vec<f64>>> {
        self.check_params(params)?;
        self.check_data(data)?;
        let m = self.model;
        if !m.floored_blocks.is_empty() || !m.bin_stats.is_empty() || !m.low_side_widths.is_empty()
        {
            return Ok(None);
        }
        let plan = &*self.plan;
        let n = m.n_params;
        self.forward(params, s);

        // ∂²ln f/∂α² of every normsys term: 0 on the exponential branches.
        let mut normsys_curvature = vec![0.0; plan.term_param.len()];
        for (g, input) in plan.groups.iter().zip(&plan.group_inputs) {
            // Read through α'(θ): ∂²ln f/∂θ² = ∂²ln f/∂α'² · α'_θ² + ∂ln f/∂α' · α'_θθ.
            let theta = params[g.param as usize];
            let (alpha, chain, chain2) = input.map_or((theta, 1.0, 0.0), |i| i.apply(theta));
            let polynomial = match plan.normsys_code {
                NormsysCode::Code4 => alpha.abs() < 1.0,
                NormsysCode::AsymPow => alpha.abs() < 0.5,
                NormsysCode::Code1 => false,
            };
            if !polynomial && input.is_none() {
                continue;
            }
            let dd = code4_second_powers(alpha);
            for t in g.range() {
                let term = &m.normsys[plan.term_normsys[t] as usize];
                // The forward pass's values where the parameter is read as it is.
                let (value, log_slope) = match input {
                    None => (s.normsys_value[t], s.normsys_log_slope[t]),
                    Some(_) => {
                        let (value, slope) = term.factor_and_derivative(plan.normsys_code, alpha);
                        (value, if value != 0.0 { slope / value } else { 0.0 })
                    }
                };
                let curvature = match plan.normsys_code {
                    _ if !polynomial => 0.0,
                    NormsysCode::AsymPow => term.asympow_log(alpha).2,
                    _ => {
                        let second: f64 = (0..6).map(|k| plan.poly[k][t] * dd[k]).sum();
                        second / value - log_slope * log_slope
                    }
                };
                normsys_curvature[t] = curvature * chain * chain + log_slope * chain2;
            }
        }

        let mut values = vec![
            0.0;
            match part {
                HessianPart::Full => n * n,
                HessianPart::Diagonal => n,
            }
        ];
        let mut sink = Sink {
            part,
            n,
            values: &mut values,
        };
        // ∂ν_b/∂p of every main bin, as (parameter, share) pairs from each of its yields.
        let mut bin_slopes: Vec<Vec<(u32, f64)>> = vec![Vec::new(); m.n_main];
        let mut block_shares = Shares::new(n);
        // This bin's histosys terms (parameter, ∂B, ∂²B) and γ's (parameter, ∂ln, ∂²ln).
        let mut histosys_now: Vec<(u32, f64, f64)> = Vec::new();
        let mut entry_now: Vec<(u32, f64, f64)> = Vec::new();
        let linear = |theta: f64| (1.0 / theta, -1.0 / (theta * theta));
        for (b, block) in m.samples.iter().enumerate() {
            if m.clip_sample_yields && s.block_normsys[b] == 0.0 {
                // Clipped (ROOT's semantics): its yields are zero and flat in every parameter,
                // as the gradient has them on the kink's flat side.
                continue;
            }
            if !s.block_normsys[b].is_normal() {
                return Ok(None);
            }
            block_shares.clear();
            for &t in plan.block_terms(b) {
                let t = t as usize;
                block_shares.add(
                    plan.term_param[t],
                    (s.normsys_log_slope[t], normsys_curvature[t]),
                );
            }
            // A linear factor at 0 (a signal normalisation at its bound): T = θ_z·U, so the
            // block's yields have ∂ν/∂θ_z = B·U and ∂²ν/∂θ_z∂q = U·(B·G_q + B_q) as their only
            // non-zero derivatives. At most one such factor per block; more have no answer here.
            let mut zero = None;
            let mut others = s.block_normsys[b];
            for &p in plan.block_linear(b) {
                let theta = params[p as usize];
                if theta != 0.0 {
                    others *= theta;
                    block_shares.add(p, linear(theta));
                } else if zero.replace(p).is_some() {
                    return Ok(None);
                }
            }
            let histosys =
                &m.histosys_param[block.histosys_start as usize..block.histosys_end as usize];
            if let Some(z) = zero
                && (block_shares.slot[z as usize] != u32::MAX || histosys.contains(&z))
            {
                return Ok(None);
            }
            let (deltas, row_len) = (block.histosys_delta_start as usize, 2 * histosys.len());
            let (e0, bin0) = (block.entry_start as usize, block.bin_start as usize);
            // Σ over the block's bins of w·T·B and of w·T·∂B/∂p per histosys term (T → U where a
            // linear factor is 0): the block-level terms are one outer product per block.
            let mut yield_sum = 0.0;
            let mut histosys_sums = vec![0.0; histosys.len()];
            let bases = plan.block_base(&s.base, &plan.blocks[b]);
            for (i, &base) in bases.iter().enumerate() {
                let (e, bin) = (e0 + i, bin0 + i);
                let factor = match zero {
                    None => s.block_scale[b],
                    Some(_) => others,
                } * s.entry_product[e];
                let weight = main_bin_term(
                    data.main[bin],
                    s.expected[bin],
                    m.clip_sample_yields,
                    self.kink_width,
                )
                .1;
                let t = weight * factor;
                histosys_now.clear();
                let row = &m.histosys_delta[deltas + i * row_len..];
                // A clipped yield does not move with its histosys parameters.
                let clipped = m.clip_sample_yields && base == 0.0;
                for (k, &p) in histosys.iter().enumerate().filter(|_| !clipped) {
                    let w = s.histosys_weights[p as usize];
                    let (c_up, c_down) =
                        HistosysWeights::curvature(m.codes.histosys, params[p as usize]);
                    let (up, down) = (row[2 * k], row[2 * k + 1]);
                    let slope = w.s_up * up + w.s_down * down;
                    histosys_now.push((p, slope, c_up * up + c_down * down));
                    histosys_sums[k] += t * slope;
                }
                entry_now.clear();
                for &p in m.entry_factor_params(e) {
                    let theta = params[p as usize];
                    if theta == 0.0 || zero == Some(p) {
                        return Ok(None);
                    }
                    let (g, h) = linear(theta);
                    match entry_now.iter_mut().find(|(q, _, _)| *q == p) {
                        Some(entry) => (entry.1, entry.2) = (entry.1 + g, entry.2 + h),
                        None => entry_now.push((p, g, h)),
                    }
                }
                yield_sum += t * base;
                let slopes = &mut bin_slopes[bin];
                if let Some(z) = zero {
                    slopes.push((z, factor * base));
                    for &(p, g, _) in &entry_now {
                        sink.add(z, p, t * base * g);
                    }
                    continue;
                }
                for share in &block_shares.list {
                    slopes.push((share.param, factor * base * share.log_slope));
                }
                for &(p, slope, curvature) in &histosys_now {
                    slopes.push((p, factor * slope));
                    sink.add(p, p, t * curvature);
                }
                for (j, &(p, g, h)) in entry_now.iter().enumerate() {
                    slopes.push((p, factor * base * g));
                    sink.add(p, p, t * base * (g * g + h));
                    for &(q, g2, _) in &entry_now[j + 1..] {
                        sink.pair(p, q, t * base * g * g2);
                    }
                    for share in &block_shares.list {
                        sink.pair(p, share.param, t * base * g * share.log_slope);
                    }
                    for &(q, slope, _) in &histosys_now {
                        sink.pair(p, q, t * slope * g);
                    }
                }
            }
            match zero {
                Some(z) => {
                    for share in &block_shares.list {
                        sink.add(z, share.param, yield_sum * share.log_slope);
                    }
                    for (&p, &sum) in histosys.iter().zip(&histosys_sums) {
                        sink.add(z, p, sum);
                    }
                }
                None => {
                    let shares = &block_shares.list;
                    for (j, a) in shares.iter().enumerate() {
                        sink.add(
                            a.param,
                            a.param,
                            yield_sum * (a.log_slope * a.log_slope + a.log_curvature),
                        );
                        for c in &shares[j + 1..] {
                            sink.add(a.param, c.param, yield_sum * a.log_slope * c.log_slope);
                        }
                    }
                    for (&p, &sum) in histosys.iter().zip(&histosys_sums) {
                        for share in shares {
                            sink.pair(p, share.param, sum * share.log_slope);
                        }
                    }
                }
            }
        }

        // (n/ν²)·∇ν∇νᵀ per bin, ∇ν merged by parameter.
        let mut gradient = vec![0.0; n];
        let mut seen = vec![false; n];
        let mut touched: Vec<u32> = Vec::new();
        for (bin, slopes) in bin_slopes.iter().enumerate() {
            let (observed, nu) = (data.main[bin], s.expected[bin]);
            let weight = if observed != 0.0 {
                observed / (nu * nu)
            } else if m.clip_sample_yields {
                // The smoothed wall's parabola, where an empty bin is on it.
                walled_empty_bin_curvature(nu, self.kink_width)
            } else {
                0.0
            };
            if weight == 0.0 {
                continue;
            }
            for &(p, d) in slopes {
                if !seen[p as usize] {
                    seen[p as usize] = true;
                    touched.push(p);
                }
                gradient[p as usize] += d;
            }
            for (j, &p) in touched.iter().enumerate() {
                let dp = gradient[p as usize];
                sink.add(p, p, weight * dp * dp);
                if part == HessianPart::Full {
                    for &q in &touched[j + 1..] {
                        sink.add(p, q, weight * dp * gradient[q as usize]);
                    }
                }
            }
            for &p in &touched {
                gradient[p as usize] = 0.0;
                seen[p as usize] = false;
            }
            touched.clear();
        }

        for c in &m.gaussian {
            sink.add(c.param, c.param, 1.0 / (c.sigma * c.sigma));
        }
        for c in &m.poisson {
            let gamma = params[c.param as usize];
            sink.add(
                c.param,
                c.param,
                data.aux[c.aux_index as usize] / (gamma * gamma),
            );
        }
        for r in &m.gaussian_ranges {
            sink.add(r.param, r.param, r.log_norm(params[r.param as usize]).2);
        }
        for r in &m.poisson_ranges {
            sink.add(r.param, r.param, r.log_norm(params[r.param as usize]).2);
        }
        sink.finish();
        Ok(Some(values))
    }
}

/// The second derivatives of α, α², …, α⁶: code 4's polynomial curvature is their dot product
/// with a term's coefficients.
fn code4_second_powers(alpha: f64) -> [f64; 6] {
    let a2 = alpha * alpha;
    [
        0.0,
        2.0,
        6.0 * alpha,
        12.0 * a2,
        20.0 * a2 * alpha,
        30.0 * a2 * a2,
    ]
}
