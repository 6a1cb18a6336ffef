//! The extended mixture NLL from per-event log-probabilities: what a flow (or any density
//! evaluated elsewhere) hands over. For P processes with yields νₚ and per-event log-densities
//! ln fₚ(xₑ) (normalised), weights wₑ, and Gaussian constraints on parameters θ_c:
//!
//! NLL = Σₚ νₚ − Σₑ wₑ ln Σₚ νₚ fₚ(xₑ) + Σ_c ½((θ_c − μ_c)/σ_c)²,
//! ∂NLL/∂νₚ = 1 − Σₑ wₑ fₚ(xₑ) / Σ_q ν_q f_q(xₑ),  ∂NLL/∂θ_c = (θ_c − μ_c)/σ_c².
//!
//! Log-probabilities are process-major: row p holds every event's ln fₚ. Several datasets
//! (toys) lie side by side in one array, dataset t at events `offsets[t]..offsets[t + 1]`,
//! each with its own yields and constraint values. This module is the CPU reference
//! (fixed chunks summed in order: the same bits on any thread count); [`cuda`] reduces on the
//! GPU from host, device and f32 device memory.

pub mod cuda;

use rayon::prelude::*;

use ns_core::{Error, Result};

/// Events per chunk of the CPU reduction.
const CHUNK: usize = 4096;

/// The most processes of one reduction (the GPU keeps a sum per process in registers).
pub const MAX_PROCESSES: usize = 16;

/// A Gaussian constraint on one parameter: its mean and width (its value is per dataset).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GaussConstraint {
    pub mean: f64,
    pub sigma: f64,
}

/// The shape of a reduction: processes, datasets (by event offsets), constraints.
#[derive(Clone, Debug, PartialEq)]
pub struct MixtureLayout {
    pub processes: usize,
    /// Dataset t spans events offsets[t]..offsets[t + 1]; the last is the row length.
    pub offsets: Vec<usize>,
    pub constraints: Vec<GaussConstraint>,
}

/// One dataset's NLL and its gradient: yields first, then the constrained parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct MixtureNll {
    pub nll: f64,
    pub grad: Vec<f64>,
}

impl MixtureLayout {
    /// A layout of one dataset of `events` events.
    pub fn single(processes: usize, events: usize, constraints: Vec<GaussConstraint>) -> Self {
        MixtureLayout {
            processes,
            offsets: vec![0, events],
            constraints,
        }
    }

    pub fn datasets(&self) -> usize {
        self.offsets.len().saturating_sub(1)
    }

    pub fn events(&self) -> usize {
        self.offsets.last().copied().unwrap_or(0)
    }

    /// Checks the layout and the per-dataset inputs' lengths: `yields` (datasets × processes),
    /// `values` (datasets × constraints), `weights` (events) and `logp_len` log-probabilities.
    pub fn check(
        &self,
        logp_len: usize,
        yields: &[f64],
        values: &[f64],
        weights: Option<usize>,
    ) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidInput(m));
        let (p, t, n) = (self.processes, self.datasets(), self.events());
        if p == 0 || p > MAX_PROCESSES {
            return bad(format!(
                "{p} processes: the mixture reduction takes 1 to {MAX_PROCESSES}"
            ));
        }
        if t == 0 || self.offsets[0] != 0 || self.offsets.windows(2).any(|w| w[1] < w[0]) {
            return bad(format!(
                "dataset offsets {:?}: give at least [0, events], non-decreasing from 0",
                &self.offsets[..self.offsets.len().min(8)]
            ));
        }
        if logp_len != p * n {
            return bad(format!(
                "{logp_len} log-probabilities for {p} processes × {n} events"
            ));
        }
        if yields.len() != t * p {
            return bad(format!(
                "{} yields for {t} datasets × {p} processes",
                yields.len()
            ));
        }
        if values.len() != t * self.constraints.len() {
            return bad(format!(
                "{} constrained values for {t} datasets × {} constraints",
                values.len(),
                self.constraints.len()
            ));
        }
        if let Some(w) = weights
            && w != n
        {
            return bad(format!("{w} weights for {n} events"));
        }
        if let Some(c) = self
            .constraints
            .iter()
            .find(|c| !(c.sigma > 0.0 && c.sigma.is_finite() && c.mean.is_finite()))
        {
            return bad(format!(
                "a constraint has mean {} and width {}: give a finite mean and a positive width",
                c.mean, c.sigma
            ));
        }
        if let Some(y) = yields.iter().find(|y| !(**y >= 0.0 && y.is_finite())) {
            return bad(format!(
                "a yield is {y}: yields must be finite and non-negative"
            ));
        }
        Ok(())
    }

    /// The dataset-level terms: Σν, the constraints, and their gradient entries; `event` the
    /// event sums (Σ w ln S, then Σ w fₚ/S per process).
    pub fn finish(&self, t: usize, event: &[f64], yields: &[f64], values: &[f64]) -> MixtureNll {
        let p = self.processes;
        let nu = &yields[t * p..(t + 1) * p];
        let mut nll = nu.iter().sum::<f64>() - event[0];
        let mut grad: Vec<f64> = (0..p).map(|q| 1.0 - event[1 + q]).collect();
        let k = self.constraints.len();
        for (c, &v) in self.constraints.iter().zip(&values[t * k..(t + 1) * k]) {
            let pull = (v - c.mean) / c.sigma;
            nll += 0.5 * pull * pull;
            grad.push(pull / c.sigma);
        }
        MixtureNll { nll, grad }
    }
}

/// `results`, or an error where a dataset's NLL is not a number: an event that no process
/// can produce (every log-probability −∞), or a log-probability that is NaN or +∞.
pub(crate) fn defined(results: Vec<MixtureNll>) -> Result<Vec<MixtureNll>> {
    match results.iter().position(|r| !r.nll.is_finite()) {
        None => Ok(results),
        Some(t) => Err(Error::Computation(format!(
            "the NLL of dataset {t} is {}: an event has no density under any process, or a log-probability is NaN or infinite",
            results[t].nll
        ))),
    }
}

/// Σ w ln S and Σ w fₚ/S over the events `range` of process-major `logp` (row length `row`).
fn event_sums(
    logp: &[f64],
    row: usize,
    p: usize,
    nu: &[f64],
    weights: Option<&[f64]>,
    range: std::ops::Range<usize>,
) -> Vec<f64> {
    let mut acc = vec![0.0; p + 1];
    let mut r = [0.0; MAX_PROCESSES];
    for e in range {
        // S = e^m Σ νₚ e^{lₚ − m}, m the largest log-probability (no underflow of the sum).
        let m = (0..p)
            .map(|q| logp[q * row + e])
            .fold(f64::NEG_INFINITY, f64::max);
        let mut s = 0.0;
        for q in 0..p {
            r[q] = (logp[q * row + e] - m).exp();
            s += nu[q] * r[q];
        }
        let w = weights.map_or(1.0, |w| w[e]);
        acc[0] += w * (m + s.ln());
        for q in 0..p {
            acc[1 + q] += w * r[q] / s;
        }
    }
    acc
}

/// The NLL and gradient of every dataset of `layout` (CPU).
pub fn mixture_nll(
    layout: &MixtureLayout,
    logp: &[f64],
    weights: Option<&[f64]>,
    yields: &[f64],
    values: &[f64],
) -> Result<Vec<MixtureNll>> {
    layout.check(logp.len(), yields, values, weights.map(<[f64]>::len))?;
    let (p, row) = (layout.processes, layout.events());
    defined(
        (0..layout.datasets())
            .map(|t| {
                let (lo, hi) = (layout.offsets[t], layout.offsets[t + 1]);
                let nu = &yields[t * p..(t + 1) * p];
                let chunks: Vec<Vec<f64>> = (lo..hi)
                    .step_by(CHUNK)
                    .collect::<Vec<_>>()
                    .into_par_iter()
                    .map(|start| {
                        event_sums(logp, row, p, nu, weights, start..(start + CHUNK).min(hi))
                    })
                    .collect();
                let mut total = vec![0.0; p + 1];
                for c in chunks {
                    for (sum, x) in total.iter_mut().zip(c) {
                        *sum += x;
                    }
                }
                layout.finish(t, &total, yields, values)
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_formula_and_its_finite_differences() {
        let n = 10_000;
        let logp: Vec<f64> = (0..2 * n)
            .map(|i| -1.0 - ((i * 7919) % 1000) as f64 / 300.0)
            .collect();
        let weights: Vec<f64> = (0..n).map(|i| 0.5 + (i % 3) as f64 * 0.25).collect();
        let layout = MixtureLayout::single(
            2,
            n,
            vec![GaussConstraint {
                mean: 0.1,
                sigma: 0.5,
            }],
        );
        let nll = |nu: &[f64], v: f64| {
            mixture_nll(&layout, &logp, Some(&weights), nu, &[v]).unwrap()[0].clone()
        };
        let at = nll(&[300.0, 2000.0], 0.4);
        let direct: f64 = 2300.0 + 0.5 * (0.3f64 / 0.5).powi(2)
            - (0..n)
                .map(|e| weights[e] * (300.0 * logp[e].exp() + 2000.0 * logp[n + e].exp()).ln())
                .sum::<f64>();
        assert!((at.nll - direct).abs() < 1e-9 * direct.abs());
        let h = 1e-3;
        let fd0 =
            (nll(&[300.0 + h, 2000.0], 0.4).nll - nll(&[300.0 - h, 2000.0], 0.4).nll) / (2.0 * h);
        let fdc =
            (nll(&[300.0, 2000.0], 0.4 + h).nll - nll(&[300.0, 2000.0], 0.4 - h).nll) / (2.0 * h);
        assert!((at.grad[0] - fd0).abs() < 1e-6, "{} {fd0}", at.grad[0]);
        assert!((at.grad[2] - fdc).abs() < 1e-6, "{} {fdc}", at.grad[2]);
    }

    #[test]
    fn careless_inputs_are_errors() {
        let layout = MixtureLayout::single(2, 3, Vec::new());
        let logp = [0.0; 6];
        let msg = |r: Result<Vec<MixtureNll>>| r.unwrap_err().to_string();
        assert!(
            msg(mixture_nll(&layout, &logp[..5], None, &[1.0, 1.0], &[]))
                .contains("5 log-probabilities")
        );
        assert!(msg(mixture_nll(&layout, &logp, None, &[1.0], &[])).contains("1 yields"));
        assert!(
            msg(mixture_nll(&layout, &logp, None, &[1.0, f64::NAN], &[])).contains("yield is NaN")
        );
        assert!(
            msg(mixture_nll(&layout, &logp, Some(&[1.0]), &[1.0, 1.0], &[])).contains("1 weights")
        );
        let nan = [0.0, f64::NAN, 0.0, 0.0, 0.0, 0.0];
        assert!(
            msg(mixture_nll(&layout, &nan, None, &[1.0, 1.0], &[]))
                .contains("NLL of dataset 0 is NaN")
        );
        let impossible = [0.0, f64::NEG_INFINITY, 0.0, 0.0, f64::NEG_INFINITY, 0.0];
        assert!(
            msg(mixture_nll(&layout, &impossible, None, &[1.0, 1.0], &[]))
                .contains("no density under any process")
        );
        let none = MixtureLayout::single(0, 3, Vec::new());
        assert!(msg(mixture_nll(&none, &[], None, &[], &[])).contains("0 processes"));
    }
}
