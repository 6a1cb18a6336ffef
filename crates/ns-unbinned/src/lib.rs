//! Event-level (unbinned) likelihoods: HS3 models as ROOT writes them ([`hs3`]), parametric
//! shapes normalised over the observables' ranges ([`shapes`]), events from the HS3 file or
//! from Parquet ([`parquet`]), evaluated on the CPU ([`cpu`]) behind the engine's
//! [`Likelihood`] interface, so every inference algorithm runs on them unchanged.

pub mod cpu;
pub mod cuda;
pub mod events;
pub mod expr;
pub mod flow;
pub mod hs3;
pub mod model;
pub mod parquet;
mod parquet_pages;
pub mod reduce;
pub mod scalar;
pub mod shapes;
pub mod simd;

use rayon::prelude::*;

use ns_compute::backend::SampledToys;
use ns_compute::rng::ToyStream;
use ns_compute::{Backend, Device, Likelihood, PreparedData};
use ns_core::{Error, Result};

use events::{ChannelEvents, pack, views};
use model::{Channel, Constraint};

/// Cells per observable of the Asimov dataset (RooStats' default binning of an observable)...
pub const ASIMOV_BINS: usize = 100;

/// ...unless a channel's observables would make more cells than this: then fewer per
/// observable, ⌊MAX_ASIMOV_CELLS^(1/d)⌋, so that the Asimov data stay in proportion.
pub const MAX_ASIMOV_CELLS: usize = 1_000_000;

/// Cells per observable of the Asimov data of a channel with `dims` observables.
pub fn asimov_bins(dims: usize) -> usize {
    let cap = (MAX_ASIMOV_CELLS as f64)
        .powf(1.0 / dims.max(1) as f64)
        .floor() as usize;
    ASIMOV_BINS.min(cap.max(2))
}

/// What a reader hands over to make a model.
pub struct ModelParts {
    pub origin: String,
    pub names: Vec<String>,
    pub init: Vec<f64>,
    pub bounds: Vec<(f64, f64)>,
    pub poi: std::result::Result<usize, String>,
    pub channels: Vec<Channel>,
    pub constraints: Vec<Constraint>,
    pub aux_names: Vec<String>,
    pub observed: Vec<ChannelEvents>,
    pub observed_aux: Vec<f64>,
}

/// An unbinned model with its observed data.
pub struct UnbinnedModel {
    parts: ModelParts,
    dims: Vec<usize>,
}

impl UnbinnedModel {
    pub fn new(parts: ModelParts) -> Result<Self> {
        let dims = parts.channels.iter().map(Channel::data_dims).collect();
        Ok(UnbinnedModel { parts, dims })
    }

    pub fn parameter_count(&self) -> usize {
        self.parts.names.len()
    }

    pub fn channels(&self) -> &[Channel] {
        &self.parts.channels
    }

    pub fn constraints(&self) -> &[Constraint] {
        &self.parts.constraints
    }

    /// The global observables' names (the order of a dataset's `aux`).
    pub fn aux_names(&self) -> &[String] {
        &self.parts.aux_names
    }

    /// The observed events.
    pub fn observed_events(&self) -> &[ChannelEvents] {
        &self.parts.observed
    }

    /// The flow PDFs of the model, as scripts read them: per flow node its channel, manifest,
    /// precision, context, the execution provider it runs on and the providers tried before
    /// it with why they were not used; `None` for a model without flows.
    pub fn flows_json(&self) -> Option<serde_json::Value> {
        let flows: Vec<serde_json::Value> = self
            .parts
            .channels
            .iter()
            .flat_map(|c| {
                c.nodes.iter().filter_map(move |n| match &n.kind {
                    model::NodeKind::Flow { leaf, .. } => {
                        let (provider, fallbacks) = leaf.flow.provider();
                        Some(serde_json::json!({
                            "name": n.name,
                            "channel": c.name,
                            "manifest": leaf.flow.manifest.display().to_string(),
                            "precision": leaf.flow.precision().name(),
                            "context": leaf.flow.context,
                            "normalization": match leaf.flow.normalization {
                                flow::Normalization::Quadrature => "quadrature",
                                flow::Normalization::Unit => "unit",
                            },
                            "log_norm": leaf.fixed_log_norm,
                            "provider": provider,
                            "fallbacks": fallbacks.iter().map(|f| serde_json::json!({
                                "provider": f.provider, "reason": f.reason
                            })).collect::<Vec<_>>(),
                        }))
                    }
                    _ => None,
                })
            })
            .collect();
        (!flows.is_empty()).then_some(serde_json::Value::Array(flows))
    }

    /// A dataset of these channels. Its constant is RooFit's for a simultaneous likelihood of K
    /// channels, which normalises every event's density over the channel category too:
    /// (Σ w)·ln K.
    /// The observables' events are extended by the log-densities of the flows without context
    /// (evaluated here, once per dataset).
    fn data(&self, channels: &[ChannelEvents], aux: Vec<f64>) -> Result<PreparedData> {
        let k = channels.len();
        let constant = if k > 1 {
            channels.iter().map(ChannelEvents::sum_weights).sum::<f64>() * (k as f64).ln()
        } else {
            0.0
        };
        let derived: Vec<ChannelEvents>;
        let channels = if self
            .parts
            .channels
            .iter()
            .any(|c| c.derived_flows().next().is_some())
        {
            derived = self
                .parts
                .channels
                .iter()
                .zip(channels)
                .map(|(c, events)| c.derive(events))
                .collect::<Result<_>>()?;
            &derived
        } else {
            channels
        };
        Ok(pack(channels, aux, constant))
    }

    /// The NLL (RooFit's convention, module docs of [`model`]) and its gradient.
    pub fn nll_grad(&self, data: &PreparedData, theta: &[f64], grad: &mut [f64]) -> Result<f64> {
        let channels = views(&data.main, &self.dims)?;
        if data.aux.len() != self.parts.aux_names.len() {
            return Err(Error::InvalidInput(format!(
                "the dataset has {} global observables, the model {}",
                data.aux.len(),
                self.parts.aux_names.len()
            )));
        }
        grad.fill(0.0);
        let mut nll = 0.0;
        for (c, events) in self.parts.channels.iter().zip(channels) {
            nll += c.nll_grad(events, theta, grad)?;
        }
        nll += model::constraints_nll_grad(&self.parts.constraints, &data.aux, theta, grad);
        Ok(nll)
    }

    /// The expected global observables at `theta`: each constraint's mean.
    fn aux_expected(&self, theta: &[f64]) -> Vec<f64> {
        let mut aux = self.parts.observed_aux.clone();
        for c in &self.parts.constraints {
            aux[c.aux] = c.mean.value(theta);
        }
        aux
    }

    fn check_params(&self, theta: &[f64]) -> Result<()> {
        if theta.len() != self.parts.names.len() {
            return Err(Error::InvalidInput(format!(
                "{} parameter values for {} parameters",
                theta.len(),
                self.parts.names.len()
            )));
        }
        Ok(())
    }

    /// One toy: events of every channel and global observables, from one random stream.
    fn toy(&self, theta: &[f64], seed: u64, stream: u32, index: u32) -> Result<PreparedData> {
        let mut rng = ToyStream::new(seed, stream, index);
        let channels = self
            .parts
            .channels
            .iter()
            .zip(&self.parts.observed)
            .map(|(c, obs)| c.sample(theta, obs.len(), &mut rng))
            .collect::<Result<Vec<_>>>()?;
        let mut aux = self.parts.observed_aux.clone();
        for c in &self.parts.constraints {
            // Within the global observable's range, as RooFit generates it.
            let (mean, sigma) = (c.mean.value(theta), c.sigma.value(theta));
            let sampler = shapes::Shape::Gaussian
                .sampler(&[mean, sigma], c.range)
                .and_then(|s| s.draw(&mut rng));
            aux[c.aux] = sampler.map_err(|e| {
                Error::Computation(format!(
                    "cannot sample the global observable '{}' of constraint '{}': {e}",
                    self.parts.aux_names[c.aux], c.name
                ))
            })?;
        }
        self.data(&channels, aux)
    }
}

impl Likelihood for UnbinnedModel {
    fn parameter_names(&self) -> &[String] {
        &self.parts.names
    }

    fn origin(&self) -> String {
        self.parts.origin.clone()
    }

    fn suggested_init(&self) -> Vec<f64> {
        self.parts.init.clone()
    }

    fn suggested_bounds(&self) -> Vec<(f64, f64)> {
        self.parts.bounds.clone()
    }

    fn suggested_fixed(&self) -> Vec<bool> {
        vec![false; self.parts.names.len()]
    }

    fn poi(&self) -> Result<usize> {
        self.parts.poi.clone().map_err(Error::InvalidModel)
    }

    fn constraint(&self, index: usize) -> Option<(f64, f64)> {
        self.parts.constraints.iter().find_map(|c| {
            (c.mean.as_parameter() == Some(index))
                .then(|| {
                    c.sigma
                        .as_constant()
                        .map(|s| (self.parts.observed_aux[c.aux], s))
                })
                .flatten()
        })
    }

    fn observed(&self) -> Result<PreparedData> {
        self.data(&self.parts.observed, self.parts.observed_aux.clone())
    }

    fn dataset(&self, values: &[f64]) -> Result<PreparedData> {
        let [channel] = self.parts.channels.as_slice() else {
            return Err(Error::InvalidInput(format!(
                "data given as a list of values fits a model of one channel with one observable; {} has {} channels",
                self.origin(),
                self.parts.channels.len()
            )));
        };
        if channel.axes.len() != 1 {
            return Err(Error::InvalidInput(format!(
                "data given as a list of values fits one observable; channel '{}' has {}",
                channel.name,
                channel.axes.len()
            )));
        }
        let events = ChannelEvents {
            columns: vec![values.to_vec()],
            weights: None,
        };
        events::check_events(&events, &channel.axes, "the given events")?;
        self.data(&[events], self.parts.observed_aux.clone())
    }

    fn asimov(&self, params: &[f64]) -> Result<PreparedData> {
        self.check_params(params)?;
        let channels: Vec<ChannelEvents> = self
            .parts
            .channels
            .iter()
            .zip(&self.parts.observed)
            .map(|(c, obs)| c.asimov(params, asimov_bins(c.axes.len()), obs.sum_weights()))
            .collect::<Result<_>>()?;
        self.data(&channels, self.aux_expected(params))
    }

    fn expected(&self, params: &[f64]) -> Result<(Vec<f64>, Vec<f64>)> {
        self.check_params(params)?;
        let counts = self
            .parts
            .channels
            .iter()
            .zip(&self.parts.observed)
            .map(|(c, obs)| {
                c.count
                    .as_ref()
                    .map_or(obs.sum_weights(), |n| n.value(params))
            })
            .collect();
        Ok((counts, self.aux_expected(params)))
    }

    fn sample_toys(
        &self,
        _backend: &dyn Backend,
        ensembles: &[(&[f64], u32)],
        seed: u64,
        first: u32,
        n_toys: usize,
    ) -> Result<SampledToys> {
        let jobs: Vec<(&[f64], u32, u32)> = ensembles
            .iter()
            .flat_map(|&(p, s)| (0..n_toys as u32).map(move |i| (p, s, first + i)))
            .collect();
        let host = jobs
            .into_par_iter()
            .map(|(p, s, i)| self.toy(p, seed, s, i))
            .collect::<Result<Vec<_>>>()?;
        Ok(SampledToys {
            host,
            resident: None,
        })
    }

    fn dataset_size(&self) -> usize {
        self.parts
            .observed
            .iter()
            .zip(&self.dims)
            .map(|(o, d)| 2 + o.len() * (d + 1))
            .sum::<usize>()
            + self.parts.aux_names.len()
    }

    fn open(&self, device: Device) -> Result<Box<dyn Backend + '_>> {
        match device {
            Device::Cpu => Ok(Box::new(cpu::UnbinnedCpu::new(self))),
            Device::Cuda(gpus) => {
                if !ns_compute::cuda::has_cuda() {
                    return Err(ns_compute::cuda::cuda_unavailable());
                }
                match gpus.ordinals(ns_compute::cuda::device_count()?)?.as_slice() {
                    &[one] => Ok(Box::new(cuda::UnbinnedCuda::new(self, one)?)),
                    several => Err(Error::Device(format!(
                        "unbinned models run on one CUDA GPU; {} were named",
                        several.len()
                    ))),
                }
            }
            other => Err(Error::Device(format!(
                "unbinned models run on the CPU and on CUDA, not on {} (the f32 backend is for binned models)",
                other.name()
            ))),
        }
    }

    fn where_undefined(&self, params: &[f64], data: &PreparedData) -> Option<String> {
        let channels = views(&data.main, &self.dims).ok()?;
        for (c, events) in self.parts.channels.iter().zip(channels) {
            let values = match c.values(events, params) {
                Ok(v) => v,
                Err(e) => return Some(e.to_string()),
            };
            if let Some(e) = values.iter().position(|v| !(*v > 0.0 && v.is_finite())) {
                return Some(c.diagnose(events, params, e));
            }
        }
        None
    }

    fn settings(&self) -> Vec<(&'static str, String)> {
        let cells: Vec<String> = self
            .parts
            .channels
            .iter()
            .map(|c| asimov_bins(c.axes.len()).to_string())
            .collect();
        vec![("asimov_cells_per_observable", cells.join(","))]
    }
}
