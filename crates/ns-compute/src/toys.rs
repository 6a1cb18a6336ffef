//! What a toy ensemble is drawn from, and the host sampler: main bins ~ Poisson(ν), Gaussian
//! auxiliary data ~ Normal(θ, σ) (a two-sided constraint's bifurcated, as RooFit draws the global
//! observable of CMS Combine's asymmetric `param`), Poisson auxiliary data ~ Poisson(γτ) — where
//! a constraint is
//! normalised over a bounded range of its global observable (ROOT's semantics), the normal
//! truncated to it and the Poisson datum continuous on it — from the counter-based
//! generator of [`crate::rng`] — toy `i` of stream `s` with seed `k` is the same dataset on every
//! thread count and every backend (the CUDA sampler is a bit-exact twin).

use ns_core::{CompiledModel, Error, Result};

use crate::cpu::{CpuEvaluator, Scratch};
use crate::data::PreparedData;
use crate::rng::{ContinuousPoisson, ToyStream};

/// What one toy ensemble is sampled from: the expected main data, the means of the Gaussian
/// auxiliary data and the rates of the Poisson ones (in the compiled model's constraint order),
/// the densities of the continuous Poisson ones (default where a Poisson datum is a count), and
/// the ensemble's random stream number.
#[derive(Clone, Debug)]
pub struct ToyEnsembleRates {
    pub main: Vec<f64>,
    pub gauss_mean: Vec<f64>,
    pub pois_rate: Vec<f64>,
    pub pois_shape: Vec<ContinuousPoisson>,
    pub stream: u32,
}

/// The ranges of the global observables that bound them (ROOT's semantics): per Gaussian
/// constraint [low, high] (infinite where unbounded), per Poisson constraint its upper end
/// (infinite where the datum is a count).
#[derive(Clone, Debug)]
pub struct AuxRanges {
    pub gauss: Vec<(f64, f64)>,
    pub pois_high: Vec<f64>,
}

impl AuxRanges {
    pub fn of(model: &CompiledModel) -> Self {
        let gauss = model
            .gaussian
            .iter()
            .map(|c| {
                model
                    .gaussian_ranges
                    .iter()
                    .find(|r| r.param == c.param)
                    .map_or((f64::NEG_INFINITY, f64::INFINITY), |r| (r.low, r.high))
            })
            .collect();
        let pois_high = model
            .poisson
            .iter()
            .map(|c| {
                model
                    .poisson_ranges
                    .iter()
                    .find(|r| r.param == c.param)
                    .map_or(f64::INFINITY, |r| r.high)
            })
            .collect();
        AuxRanges { gauss, pois_high }
    }
}

impl ToyEnsembleRates {
    /// The ensemble generated at parameters `params`.
    pub fn at(model: &CompiledModel, params: &[f64], stream: u32) -> Result<Self> {
        let ranges = AuxRanges::of(model);
        if let Some(w) = model.low_side_widths.iter().find(|w| {
            let (low, high) = ranges.gauss[w.constraint as usize];
            low.is_finite() || high.is_finite()
        }) {
            return Err(Error::InvalidModel(format!(
                "toys of a two-sided Gaussian constraint whose global observable has a bounded \
                 range (constraint {}) are not drawn",
                w.constraint
            )));
        }
        let (main, _) = CpuEvaluator::new(model).expected_data(params, &mut Scratch::new(model))?;
        let pois_rate: Vec<f64> = model
            .poisson
            .iter()
            .map(|c| params[c.param as usize] * c.tau)
            .collect();
        let pois_shape = ranges
            .pois_high
            .iter()
            .zip(&pois_rate)
            .map(|(&high, &rate)| {
                if high.is_finite() {
                    ContinuousPoisson::at(rate, high)
                } else {
                    ContinuousPoisson::default()
                }
            })
            .collect();
        Ok(ToyEnsembleRates {
            main,
            gauss_mean: model
                .gaussian
                .iter()
                .map(|c| params[c.param as usize])
                .collect(),
            pois_rate,
            pois_shape,
            stream,
        })
    }

    /// Whether the rates have the model's shape.
    pub fn check(&self, model: &CompiledModel) -> Result<()> {
        if self.main.len() != model.n_main
            || self.gauss_mean.len() != model.gaussian.len()
            || self.pois_rate.len() != model.poisson.len()
            || self.pois_shape.len() != model.poisson.len()
        {
            return Err(Error::InvalidInput(
                "toy rates do not match the model".into(),
            ));
        }
        Ok(())
    }

    /// Toy `index` of this ensemble, drawn on the host (for many toys, take one
    /// [`sampler`](Self::sampler) and draw from it).
    pub fn sample(&self, model: &CompiledModel, seed: u64, index: u32) -> Result<PreparedData> {
        self.sampler(model)?.sample(seed, index)
    }

    /// The host sampler of this ensemble: what the model contributes to every toy (the ranges of
    /// the global observables, the constraints' low-side widths) resolved once.
    pub fn sampler<'a>(&'a self, model: &'a CompiledModel) -> Result<ToySampler<'a>> {
        self.check(model)?;
        Ok(ToySampler {
            rates: self,
            model,
            ranges: AuxRanges::of(model),
            low_widths: low_side_widths(model),
        })
    }
}

/// Draws the toys of one ensemble on the host ([`ToyEnsembleRates::sampler`]).
pub struct ToySampler<'a> {
    rates: &'a ToyEnsembleRates,
    model: &'a CompiledModel,
    ranges: AuxRanges,
    low_widths: Vec<f64>,
}

impl ToySampler<'_> {
    /// Toy `index` of the ensemble with generator seed `seed`.
    pub fn sample(&self, seed: u64, index: u32) -> Result<PreparedData> {
        let (rates, model) = (self.rates, self.model);
        let mut rng = ToyStream::new(seed, rates.stream, index);
        let main: Vec<f64> = rates
            .main
            .iter()
            .map(|&lambda| rng.poisson(lambda))
            .collect();
        let mut aux = vec![0.0; model.n_aux];
        for (((c, &mean), &(low, high)), &sigma_low) in model
            .gaussian
            .iter()
            .zip(&rates.gauss_mean)
            .zip(&self.ranges.gauss)
            .zip(&self.low_widths)
        {
            // Below the observable the constraint's low side: the observable lies above θ.
            aux[c.aux_index as usize] = if sigma_low != c.sigma {
                rng.bifurcated_normal(mean, c.sigma, sigma_low)
            } else if low.is_finite() || high.is_finite() {
                rng.truncated_normal(mean, c.sigma, low, high)
            } else {
                mean + c.sigma * rng.normal()
            };
        }
        for (((c, &rate), shape), &high) in model
            .poisson
            .iter()
            .zip(&rates.pois_rate)
            .zip(&rates.pois_shape)
            .zip(&self.ranges.pois_high)
        {
            aux[c.aux_index as usize] = if high.is_finite() {
                rng.continuous_poisson(shape, high)
            } else {
                rng.poisson(rate)
            };
        }
        PreparedData::new(model, main, aux)
    }
}

/// Per Gaussian constraint, its width where θ lies below its global observable: a two-sided
/// constraint's low side (CMS Combine's asymmetric `param`), σ otherwise.
pub fn low_side_widths(model: &CompiledModel) -> Vec<f64> {
    let mut widths: Vec<f64> = model.gaussian.iter().map(|c| c.sigma).collect();
    for w in &model.low_side_widths {
        widths[w.constraint as usize] = w.sigma_low;
    }
    widths
}
