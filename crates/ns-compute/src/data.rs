//! Observed data prepared for repeated evaluation: the data-only constant of the NLL is summed once.

use ns_core::{CompiledModel, Error, Result};

use crate::poisson::poisson_data_term;

/// The largest count a dataset may hold. Beyond it the likelihood's arithmetic — λ, n ln n,
/// twice the NLL and its curvature — overflows f64 (pyhf's NLL is NaN at 1e308 and loses every
/// digit by 1e300); no measurement comes near.
pub const MAX_COUNT: f64 = 1e300;

const COUNTS_ARE: &str = "counts must be finite, non-negative and at most 1e300 (the likelihood \
     overflows f64 beyond)";

/// Main and auxiliary observations with the parts of the NLL that do not depend on parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct PreparedData {
    pub main: Vec<f64>,
    pub aux: Vec<f64>,
    /// The parameter-independent part of the NLL: `Σ [ln Γ(n+1) − n ln n + n]` over main bins
    /// and Poisson aux data (`poisson::poisson_data_term`, the saturated Poisson terms), plus the Gaussian normalisations
    /// `Σ ln(σ √(2π))`. The evaluator sums the rest as small deviance terms, so the NLL's
    /// parameter dependence is resolved far below the rounding of its total (~1e4 on large models).
    pub constant: f64,
}

impl PreparedData {
    /// Check the lengths against the model and precompute the constant terms.
    pub fn new(model: &CompiledModel, main: Vec<f64>, aux: Vec<f64>) -> Result<Self> {
        if main.len() != model.n_main {
            return Err(Error::InvalidInput(format!(
                "main data has {} bins but the model has {}",
                main.len(),
                model.n_main
            )));
        }
        if aux.len() != model.n_aux {
            return Err(Error::InvalidInput(format!(
                "auxiliary data has {} entries but the model has {}",
                aux.len(),
                model.n_aux
            )));
        }
        if let Some((bin, &n)) = main
            .iter()
            .enumerate()
            .find(|(_, n)| !(0.0..=MAX_COUNT).contains(*n))
        {
            return Err(Error::InvalidInput(format!(
                "main data bin {bin} (in channel order) is {n}: {COUNTS_ARE}"
            )));
        }
        for c in &model.poisson {
            let n = aux[c.aux_index as usize];
            if !(0.0..=MAX_COUNT).contains(&n) {
                return Err(Error::InvalidInput(format!(
                    "auxiliary data entry {} (a Poisson constraint's count) is {n}: {COUNTS_ARE}",
                    c.aux_index
                )));
            }
        }
        for c in &model.gaussian {
            let a = aux[c.aux_index as usize];
            if !(a.abs() <= MAX_COUNT) {
                return Err(Error::InvalidInput(format!(
                    "auxiliary data entry {} (a Gaussian constraint's value) is {a}: it must be a \
                     finite number of magnitude at most {MAX_COUNT:e}",
                    c.aux_index
                )));
            }
        }
        let ln_sqrt_2pi = 0.5 * (2.0 * std::f64::consts::PI).ln();
        let mut constant: f64 = main.iter().map(|&n| poisson_data_term(n)).sum();
        constant += model
            .poisson
            .iter()
            .map(|c| poisson_data_term(aux[c.aux_index as usize]))
            .sum::<f64>();
        constant += model
            .gaussian
            .iter()
            .map(|c| c.sigma.ln() + ln_sqrt_2pi)
            .sum::<f64>();
        // A two-sided width normalises by (σ_low + σ)/2 in place of σ.
        constant += model
            .low_side_widths
            .iter()
            .map(|w| {
                let sigma = model.gaussian[w.constraint as usize].sigma;
                (0.5 * (w.sigma_low + sigma)).ln() - sigma.ln()
            })
            .sum::<f64>();
        Ok(PreparedData {
            main,
            aux,
            constant,
        })
    }

    /// Split a pyhf-style full data vector (main bins, then auxdata) and prepare it.
    pub fn from_full(model: &CompiledModel, full: &[f64]) -> Result<Self> {
        if full.len() != model.n_main + model.n_aux {
            return Err(Error::InvalidInput(format!(
                "data has length {} but the model expects {} main + {} auxiliary = {}",
                full.len(),
                model.n_main,
                model.n_aux,
                model.n_main + model.n_aux
            )));
        }
        let (main, aux) = full.split_at(model.n_main);
        Self::new(model, main.to_vec(), aux.to_vec())
    }
}
