//! What a toy ensemble is drawn from, and the host sampler: main bins ~ Poisson(ν), Gaussian
//! auxiliary data ~ Normal(θ, σ), Poisson auxiliary data ~ Poisson(γτ), from the counter-based
//! generator of [`crate::rng`] — toy `i` of stream `s` with seed `k` is the same dataset on every
//! thread count and every backend (the CUDA sampler is a bit-exact twin).

use ns_core::{CompiledModel, Error, Result};

use crate::cpu::{CpuEvaluator, Scratch};
use crate::data::PreparedData;
use crate::rng::ToyStream;

/// What one toy ensemble is sampled from: the expected main data, the means of the Gaussian
/// auxiliary data and the rates of the Poisson ones (in the compiled model's constraint order),
/// and the ensemble's random stream number.
#[derive(Clone, Debug)]
pub struct ToyEnsembleRates {
    pub main: Vec<f64>,
    pub gauss_mean: Vec<f64>,
    pub pois_rate: Vec<f64>,
    pub stream: u32,
}

impl ToyEnsembleRates {
    /// The ensemble generated at parameters `params`.
    pub fn at(model: &CompiledModel, params: &[f64], stream: u32) -> Result<Self> {
        let (main, _) = CpuEvaluator::new(model).expected_data(params, &mut Scratch::new(model))?;
        Ok(ToyEnsembleRates {
            main,
            gauss_mean: model
                .gaussian
                .iter()
                .map(|c| params[c.param as usize])
                .collect(),
            pois_rate: model
                .poisson
                .iter()
                .map(|c| params[c.param as usize] * c.tau)
                .collect(),
            stream,
        })
    }

    /// Whether the rates have the model's shape.
    pub fn check(&self, model: &CompiledModel) -> Result<()> {
        if self.main.len() != model.n_main
            || self.gauss_mean.len() != model.gaussian.len()
            || self.pois_rate.len() != model.poisson.len()
        {
            return Err(Error::InvalidInput(
                "toy rates do not match the model".into(),
            ));
        }
        Ok(())
    }

    /// Toy `index` of this ensemble, drawn on the host.
    pub fn sample(&self, model: &CompiledModel, seed: u64, index: u32) -> Result<PreparedData> {
        self.check(model)?;
        let mut rng = ToyStream::new(seed, self.stream, index);
        let main: Vec<f64> = self
            .main
            .iter()
            .map(|&lambda| rng.poisson(lambda))
            .collect();
        let mut aux = vec![0.0; model.n_aux];
        for (c, &mean) in model.gaussian.iter().zip(&self.gauss_mean) {
            aux[c.aux_index as usize] = mean + c.sigma * rng.normal();
        }
        for (c, &rate) in model.poisson.iter().zip(&self.pois_rate) {
            aux[c.aux_index as usize] = rng.poisson(rate);
        }
        PreparedData::new(model, main, aux)
    }
}
