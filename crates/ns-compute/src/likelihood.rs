//! The likelihood interface: what inference needs of a model, whatever kind it is. Parameters
//! (names, suggested start, box, fixed set, POI, constraints), datasets (observed, Asimov, toys,
//! each carrying its data-only constant), backends that evaluate the NLL and its gradient in
//! batches, and an optional coupling description that lets the Hessian of a large model be
//! measured sparsely. Every inference algorithm (`ns-inference`) works through it.
//!
//! A dataset is a [`PreparedData`]: the observations in the layout the likelihood defines
//! (`main`: bin counts for a binned model; event coordinates for an event-level one),
//! the auxiliary data (global observables of the constraints) and the data-only constant of
//! the NLL. Only the likelihood that made a dataset reads its `main`.
//!
//! The HistFactory model implements it here ([`crate::histfactory`]); adding a model type is
//! listed in docs/ARCHITECTURE.md.

use ns_core::{Error, Result};

use crate::backend::{Backend, SampledToys};
use crate::data::PreparedData;
use crate::device::{Device, Workload};

/// Where one parameter acts, for the Hessian's sparsity: on one observation (a bin), on several,
/// or on none (it then couples to nothing but itself).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reach {
    Nothing,
    One(usize),
    Several,
}

/// The saturated model of a goodness-of-fit test: its twice_nll on a dataset and the degrees of
/// freedom of −2 ln λ.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Saturated {
    pub twice_nll: f64,
    pub ndof: usize,
}

/// One channel's expected yields, sample by sample (samples absent from the channel left out).
#[derive(Clone, Debug, PartialEq)]
pub struct ChannelYields {
    pub channel: String,
    /// The channel's observed main data (`None` where the workspace has none).
    pub observed: Option<Vec<f64>>,
    pub samples: Vec<(String, Vec<f64>)>,
}

/// A likelihood that inference can fit, test, scan, rank and sample toys from.
pub trait Likelihood: Send + Sync {
    /// The parameter names, in the order of every parameter vector.
    fn parameter_names(&self) -> &[String];

    fn n_params(&self) -> usize {
        self.parameter_names().len()
    }

    /// Where the model comes from, in words, for messages ("measurement 'NormalMeasurement'").
    fn origin(&self) -> String;

    fn suggested_init(&self) -> Vec<f64>;
    fn suggested_bounds(&self) -> Vec<(f64, f64)>;
    fn suggested_fixed(&self) -> Vec<bool>;

    /// Index of the parameter of interest, or an error naming why there is none.
    fn poi(&self) -> Result<usize>;

    /// The POI's index where the model has one.
    fn poi_index(&self) -> Option<usize> {
        self.poi().ok()
    }

    /// The parameters of interest the model declares: its POI first (the one each verb tests),
    /// then any others, which float in every test unless fixed.
    fn pois(&self) -> Vec<usize> {
        self.poi_index().into_iter().collect()
    }

    /// Index of a parameter by its name. A name two parameters share is refused.
    fn parameter_index(&self, name: &str) -> std::result::Result<usize, String> {
        ns_core::model::index_by_name(self.parameter_names(), name, "")
    }

    /// Named groups of parameters in order (a vector parameter such as `staterror_SR` is one
    /// group), each with the positions it covers: by default one group per parameter.
    fn parameter_groups(&self) -> Vec<(String, std::ops::Range<usize>)> {
        self.parameter_names()
            .iter()
            .enumerate()
            .map(|(i, name)| (name.clone(), i..i + 1))
            .collect()
    }

    /// What kind of parameter `index` is, for grouping in plots: the modifier type that declared
    /// it (normfactor, normsys, histosys, staterror, shapesys, shapefactor, lumi) in a binned
    /// model; "constrained" or "free" by default.
    fn parameter_kind(&self, index: usize) -> &str {
        if self.constraint(index).is_some() {
            "constrained"
        } else {
            "free"
        }
    }

    /// The expected yields of every sample in every channel at `params`, channel by channel;
    /// an error for a likelihood without samples (unbinned).
    fn sample_yields(&self, params: &[f64]) -> Result<Vec<ChannelYields>> {
        let _ = params;
        Err(ns_core::Error::InvalidInput(format!(
            "{}: per-sample yields exist for binned (HistFactory) models only",
            self.origin()
        )))
    }

    /// The constraint of parameter `index`: the value it is centred on and its prefit width;
    /// `None` for a free parameter.
    fn constraint(&self, index: usize) -> Option<(f64, f64)>;

    /// The observed dataset.
    fn observed(&self) -> Result<PreparedData>;

    /// A dataset from user values: the observations alone (the auxiliary data then come from
    /// the model), or the observations followed by the auxiliary data.
    fn dataset(&self, values: &[f64]) -> Result<PreparedData>;

    /// The Asimov dataset at `params`: the observations and auxiliary data the model expects.
    fn asimov(&self, params: &[f64]) -> Result<PreparedData>;

    /// The expected observations and auxiliary data at `params` (what `eval` reports).
    fn expected(&self, params: &[f64]) -> Result<(Vec<f64>, Vec<f64>)>;

    /// The main bins of `data` observed empty whose expected count is negative at `params`, for
    /// a binned Poisson likelihood; `None` where there are none or the likelihood has no bins.
    /// pyhf's Poisson term of n = 0 is e^−λ (its `xlogy`), above 1 there, so the likelihood
    /// grows without bound as λ falls. Under ROOT's semantics, whose empty bins have a wall
    /// below zero ([`crate::poisson::EMPTY_BIN_WALL`]), only bins that broke through it.
    fn negative_empty_bins(
        &self,
        params: &[f64],
        data: &PreparedData,
    ) -> Option<NegativeEmptyBins> {
        let _ = (params, data);
        None
    }

    /// Toys `first..first + n_toys` of each `(generating parameters, stream)` ensemble, ensemble
    /// after ensemble, from the counter-based generator: toy `i` of stream `s` under `seed` is the
    /// same dataset on every backend. `backend` (opened by this likelihood) may sample them where
    /// it lives.
    fn sample_toys(
        &self,
        backend: &dyn Backend,
        ensembles: &[(&[f64], u32)],
        seed: u64,
        first: u32,
        n_toys: usize,
    ) -> Result<SampledToys>;

    /// Values one dataset holds (what a batch of toys costs in memory).
    fn dataset_size(&self) -> usize;

    /// The backend of `device` for this likelihood (`Auto` resolved first: ns-inference's
    /// `Fitter::auto_device`, or [`resolve`](Self::resolve)).
    fn open(&self, device: Device) -> Result<Box<dyn Backend + '_>>;

    /// Whether `workload` is large enough that `auto` weighs running it on a GPU (asking
    /// nothing of a driver); by default never.
    fn worth_a_gpu(&self, workload: Workload) -> bool {
        let _ = workload;
        false
    }

    /// The concrete device for `workload` when `Auto` is asked, by size alone: the first GPU
    /// where [`worth_a_gpu`](Self::worth_a_gpu) and one exists, else the CPU. The same on every
    /// run of a machine, where work split into parts must agree (shards of one job); a single
    /// batch is better weighed by a timed fit (ns-inference's `Fitter::auto_device`).
    fn resolve(&self, device: Device, workload: Workload) -> Device {
        match device {
            Device::Auto if self.worth_a_gpu(workload) && crate::cuda::has_cuda() => {
                Device::Cuda(crate::CudaGpus::FIRST)
            }
            Device::Auto => Device::Cpu,
            d => d,
        }
    }

    /// Where each parameter acts, for a sparse Hessian; `None`: treat every pair as coupled.
    fn reach(&self) -> Option<Vec<Reach>> {
        None
    }

    /// The saturated model on `data` with the parameters `fixed` fixed; an error where the
    /// likelihood has none.
    fn saturated(&self, data: &PreparedData, fixed: &[bool]) -> Result<Saturated> {
        let _ = (data, fixed);
        Err(Error::InvalidModel(format!(
            "{} has no saturated model: goodness of fit is defined for binned likelihoods",
            self.origin()
        )))
    }

    /// Why the likelihood is not finite at `params` on `data`, naming the observation or term,
    /// where the model can tell.
    fn where_undefined(&self, params: &[f64], data: &PreparedData) -> Option<String> {
        let _ = (params, data);
        None
    }

    /// Parameters a fit sets analytically at every step, to their minimum given the others,
    /// instead of minimising over them (CMS Combine's per-bin autoMCStats parameters); the
    /// model suggests them fixed, and [`open_for_fits`](Self::open_for_fits) evaluates the NLL
    /// profiled over them. None by default.
    fn analytic_parameters(&self) -> Vec<usize> {
        Vec::new()
    }

    /// A backend whose NLL is a fit's objective: profiled over the
    /// [`analytic_parameters`](Self::analytic_parameters) where the model has them; else
    /// [`open`](Self::open).
    fn open_for_fits(&self, device: Device) -> Result<Box<dyn Backend + '_>> {
        self.open(device)
    }

    /// A CPU backend of fits' objective with the likelihood's kinks smoothed over `width`
    /// events ([`crate::CpuEvaluator::smoothed`]: template floors, clipped yields); `None`
    /// where it has no such kinks. Fits that stall on a kink follow the smoothed minimum.
    fn open_smoothed(&self, width: f64) -> Option<Box<dyn Backend + '_>> {
        let _ = width;
        None
    }

    /// Whether the likelihood has kinks ([`open_smoothed`](Self::open_smoothed) has something
    /// to smooth): yields clipped at zero (ROOT's semantics) or raised to a floor.
    fn has_kinks(&self) -> bool {
        self.open_smoothed(1.0).is_some()
    }

    /// Whether some yield is clipped from below zero at `params` (ROOT's semantics), however
    /// far past the kink: flat in its parameters there, so a fit's end depends on its path.
    fn held_at_kinks(&self, params: &[f64]) -> Result<bool> {
        let _ = params;
        Ok(false)
    }

    /// Sets the [`analytic_parameters`](Self::analytic_parameters) in `params` for `data`.
    fn profile_analytic(&self, params: &mut [f64], data: &PreparedData) -> Result<()> {
        let _ = (params, data);
        Ok(())
    }

    /// Settings of the model worth reporting beside an evaluation (name, value).
    fn settings(&self) -> Vec<(&'static str, String)> {
        Vec::new()
    }
}

/// Main bins observed empty with a negative expected count ([`Likelihood::negative_empty_bins`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NegativeEmptyBins {
    /// The first such bin (in channel order) and its expectation.
    pub first: (usize, f64),
    /// 2·Σ|λ| over them: how much pyhf's terms e^−λ > 1 lower twice_nll there.
    pub gain: f64,
}
