//! The backend interface: what every compute device offers inference. A backend holds one
//! compiled model (uploaded once where it lives on a device), keeps datasets where it evaluates
//! them, and evaluates the NLL and its gradient at a batch of points. It may also sample toys and
//! run whole batches of fits where it lives; where it does not, inference does it on the host
//! with the same generator and the same optimizer.
//!
//! What a new backend implements (see docs/ARCHITECTURE.md): [`Backend`] in its own module, plus
//! one arm in [`open`].

use std::any::Any;
use std::sync::atomic::AtomicBool;

use ns_core::optim::LbfgsbOptions;
use ns_core::{CompiledModel, Error, Result};
use rayon::prelude::*;

use crate::cpu::HessianPart;
use crate::data::PreparedData;
use crate::device::Device;
use crate::signal::ExternalSignal;
use crate::toys::ToyEnsembleRates;

/// The arithmetic of a backend's evaluations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precision {
    F64,
    F32,
}

impl Precision {
    /// The smallest projected-gradient tolerance a fit on this arithmetic can meet (in the
    /// optimizer's scaled variables): below it the gradient is rounding noise. f32: measured
    /// in docs/gpu-f32.md.
    pub fn pg_tol_floor(self) -> f64 {
        match self {
            Precision::F64 => 0.0,
            Precision::F32 => 1e-4,
        }
    }

    /// The projected-gradient tolerance, in the optimizer's curvature-scaled parameters and
    /// judged on the f64 gradient, below which a fit run in this arithmetic stands without an
    /// f64 completion. f32: where the f32 optimizers typically end, and where every toy's q is
    /// within 1e-3 of the f64 fits' on every shared workspace and published likelihood (worst
    /// measured 2.8e-4, docs/gpu-f32.md).
    pub fn settle_pg_tol(self) -> f64 {
        match self {
            Precision::F64 => 0.0,
            Precision::F32 => 1e-3,
        }
    }

    /// The rounding noise of the objective relative to max(1, |f|), where the optimizer must
    /// allow for it: `None` in f64 (the optimizers' own settings). In f32 the objective (the
    /// deviance form, its terms ≥ 0 summed in fixed trees) carries about one f32 rounding
    /// (6e-8) of its size: with 1e-7 declared, the line search judges steps by their slope where
    /// f no longer resolves them, and a run that stops lowering f ends, to be judged in f64
    /// ([`Precision::settle_pg_tol`]). Measured on tHq toys (docs/gpu-f32.md): 19 of 20 fits
    /// end within the f64 check, twice_nll within 5e-6 of the f64 fit's.
    pub fn objective_noise(self) -> Option<f64> {
        match self {
            Precision::F64 => None,
            Precision::F32 => Some(1e-7),
        }
    }
}

/// How a backend runs many fits at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Batching {
    /// One fit per CPU thread, each evaluating point after point.
    Parallel,
    /// Every fit advances together: one batched evaluation per optimizer step.
    Lockstep,
}

/// Datasets held where a backend evaluates them (on a GPU: device memory). Made by
/// [`Backend::upload`] or [`Backend::sample_toys`], read only by the backend that made them.
pub struct Resident {
    count: usize,
    storage: Box<dyn Any + Send + Sync>,
}

impl Resident {
    pub fn new<T: Any + Send + Sync>(count: usize, storage: T) -> Self {
        Resident {
            count,
            storage: Box::new(storage),
        }
    }

    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The backend's own storage; an error for datasets another backend made.
    pub fn storage<T: Any>(&self) -> Result<&T> {
        self.storage.downcast_ref().ok_or_else(|| {
            Error::InvalidInput("datasets were uploaded by a different backend".into())
        })
    }
}

/// The datasets of a batched evaluation: on the host, or already resident on the backend.
#[derive(Clone, Copy)]
pub enum Datasets<'a> {
    Host(&'a [PreparedData]),
    Resident(&'a Resident),
}

/// Toy datasets: host copies (for the host-side steps of each fit: scaling, polish,
/// uncertainties), and where the backend sampled them itself, the same data resident on it.
pub struct SampledToys {
    pub host: Vec<PreparedData>,
    pub resident: Option<Resident>,
}

/// Many fits for a device-resident optimizer: per fit (row of `n_params`), the full starting
/// vector, the indices of the free parameters (first `n_free[f]` entries of the row) and, per
/// free parameter, the optimizer's scaled bounds and the scale (the optimizer works in
/// `y = θ·scale`); the dataset each fit is against; and, where the model has external samples,
/// each fit's signal yields.
pub struct DeviceFitProblem<'a> {
    pub init: &'a [f64],
    pub free_index: &'a [u32],
    pub n_free: &'a [i32],
    pub lower: &'a [f64],
    pub upper: &'a [f64],
    pub scale: &'a [f64],
    pub dataset: &'a [u32],
    pub signal: Option<FitSignal<'a>>,
}

impl DeviceFitProblem<'_> {
    /// Every row array sized for `dataset.len()` fits of `n_params`, one free count per fit.
    pub fn check_rows(&self, n_params: usize) -> Result<()> {
        let n_fits = self.dataset.len();
        let rows_ok = [
            self.init.len(),
            self.free_index.len(),
            self.lower.len(),
            self.upper.len(),
            self.scale.len(),
        ]
        .iter()
        .all(|&l| l == n_fits * n_params);
        if !rows_ok || self.n_free.len() != n_fits {
            return Err(Error::InvalidInput(format!(
                "device fit problem rows do not match {n_fits} fits of {n_params} parameters"
            )));
        }
        Ok(())
    }
}

/// The external yields of device fits: the signal from [`Backend::attach_signal`] and one row
/// of its yields per fit. The fits minimise the deviance form of the model with those yields
/// (its data constant, with the widths the yields give, is the host's).
#[derive(Clone, Copy)]
pub struct FitSignal<'a> {
    pub attached: &'a Resident,
    pub values: &'a [f64],
}

/// Results of device fits, per fit: the scaled free variables and their gradient (rows of
/// `n_params`, first `n_free` used), the objective (twice the NLL without the data constant),
/// iteration and evaluation counts, and the termination code ([`ns_core::optim::Termination`]).
#[derive(Clone, Debug, Default)]
pub struct DeviceFitOutput {
    pub x: Vec<f64>,
    pub g: Vec<f64>,
    pub f: Vec<f64>,
    pub iterations: Vec<i32>,
    pub evaluations: Vec<i32>,
    pub termination: Vec<i32>,
}

impl DeviceFitOutput {
    /// Room for `n_fits` fits of `n_params` parameters, filled by a device optimizer.
    pub fn zeros(n_fits: usize, n_params: usize) -> Self {
        DeviceFitOutput {
            x: vec![0.0; n_fits * n_params],
            g: vec![0.0; n_fits * n_params],
            f: vec![0.0; n_fits],
            iterations: vec![0; n_fits],
            evaluations: vec![0; n_fits],
            termination: vec![0; n_fits],
        }
    }
}

/// `len` f64 values in the memory of the device a backend runs on (a CUDA tensor's memory,
/// read or written in place).
#[derive(Clone, Copy, Debug)]
pub struct DeviceSlice {
    ptr: u64,
    len: usize,
}

impl DeviceSlice {
    /// # Safety
    /// `ptr` is the address of `len` f64 in memory of the device the backend runs on, which
    /// stays allocated, and is written by nothing else, until the call it is passed to returns.
    /// (A backend also checks with its driver that the range lies in one of its allocations.)
    pub unsafe fn new(ptr: u64, len: usize) -> Self {
        DeviceSlice { ptr, len }
    }

    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Input values of a signal evaluation: in host memory or on the backend's device.
#[derive(Clone, Copy, Debug)]
pub enum Values<'a> {
    Host(&'a [f64]),
    Device(DeviceSlice),
}

impl Values<'_> {
    pub fn len(&self) -> usize {
        match self {
            Values::Host(v) => v.len(),
            Values::Device(d) => d.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Where a signal evaluation writes values: host memory or the backend's device.
#[derive(Debug)]
pub enum ValuesMut<'a> {
    Host(&'a mut [f64]),
    Device(DeviceSlice),
}

impl ValuesMut<'_> {
    pub fn len(&self) -> usize {
        match self {
            ValuesMut::Host(v) => v.len(),
            ValuesMut::Device(d) => d.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A batch of evaluations with external signal yields ([`crate::signal`]), one per row of
/// `signals` (rows of the signal length), at one parameter row shared by all or one per signal,
/// on `data`. Writes, per row, the NLL (with the data constant) into `nll`, ∂NLL/∂s into
/// `d_signal` and ∂NLL/∂θ into `d_pars`.
///
/// Where every output is in device memory, a device backend may return before its work is done:
/// the work is queued on the device's default stream, so later work there (a torch operation on
/// the outputs) sees the results; a non-finite row then shows as NaN, not as an error.
pub struct SignalBatch<'a> {
    pub signals: Values<'a>,
    pub pars: Values<'a>,
    pub data: &'a PreparedData,
    pub nll: ValuesMut<'a>,
    pub d_signal: ValuesMut<'a>,
    pub d_pars: ValuesMut<'a>,
}

impl SignalBatch<'_> {
    /// The number of rows, after checking every length against it; whether the parameters are
    /// one shared row.
    pub fn rows(&self, n_signal: usize, n_params: usize) -> Result<(usize, bool)> {
        let rows = self.nll.len();
        if rows == 0 {
            return Err(Error::InvalidInput(
                "a signal batch needs at least one row".into(),
            ));
        }
        let shared = self.pars.len() == n_params;
        let lengths = [
            ("signals", self.signals.len(), rows * n_signal),
            ("∂NLL/∂s", self.d_signal.len(), rows * n_signal),
            ("∂NLL/∂θ", self.d_pars.len(), rows * n_params),
        ];
        for (what, got, want) in lengths {
            if got != want {
                return Err(Error::InvalidInput(format!(
                    "{what} of a batch of {rows} rows has {got} values, not {want}"
                )));
            }
        }
        if let Values::Host(pars) = self.pars
            && let Some(i) = pars.iter().position(|v| !v.is_finite())
        {
            return Err(Error::InvalidInput(format!(
                "parameter {} (of row {}) is {}: parameters must be finite",
                i % n_params.max(1),
                i / n_params.max(1),
                pars[i]
            )));
        }
        if !shared && self.pars.len() != rows * n_params {
            return Err(Error::InvalidInput(format!(
                "parameters have {} values for {rows} signals of a {n_params}-parameter model \
                 (give {n_params} or {})",
                self.pars.len(),
                rows * n_params
            )));
        }
        Ok((rows, shared))
    }
}

/// Checks every backend's `nll_grad_batch` makes first: `points`, `nll` and `grad` sized for
/// `which.len()` rows of `n_params`, and every dataset index below `datasets`.
pub fn check_batch(
    points: &[f64],
    which: &[u32],
    nll: &[f64],
    grad: &[f64],
    n_params: usize,
    datasets: usize,
) -> Result<()> {
    let rows = which.len();
    if points.len() != rows * n_params || nll.len() != rows || grad.len() != rows * n_params {
        return Err(Error::InvalidInput(format!(
            "batch of {rows} evaluations needs {} parameters, {rows} NLL and {} gradient slots",
            rows * n_params,
            rows * n_params
        )));
    }
    check_dataset_indices(which, datasets)
}

/// Every index of `which` below `datasets`.
pub fn check_dataset_indices(which: &[u32], datasets: usize) -> Result<()> {
    match which.iter().find(|&&d| d as usize >= datasets) {
        Some(&bad) => Err(Error::InvalidInput(format!(
            "dataset index {bad} out of range: {datasets} datasets are held"
        ))),
        None => Ok(()),
    }
}

/// The error for signal row `row` whose NLL is not finite.
pub fn not_finite(row: usize) -> Error {
    Error::InvalidInput(format!(
        "the NLL of signal row {row} is not finite: a yield is not finite, the yields a staterror \
         covers sum to 0 or less, or an expected count is negative"
    ))
}

/// A compute device holding one compiled model.
pub trait Backend: Send + Sync {
    /// The device this backend runs on (never [`Device::Auto`]).
    fn device(&self) -> Device;

    /// The hardware, in words (for reports and benchmarks).
    fn description(&self) -> String;

    /// How many fits at once are best run.
    fn batching(&self) -> Batching;

    /// The arithmetic of its evaluations (f64 unless it says otherwise).
    fn precision(&self) -> Precision {
        Precision::F64
    }

    /// Copy datasets to where this backend evaluates them.
    fn upload(&self, datasets: &[PreparedData]) -> Result<Resident>;

    /// The NLL without its data-only constant (the deviance form) and its gradient at each row
    /// of `points` (`n_params` long) against dataset `which[row]` of `datasets`; fills `nll` (one
    /// per row) and `grad` (row-major). Long batches stop early with `Error::Interrupted` once
    /// `stop` is set.
    fn nll_grad_batch(
        &self,
        points: &[f64],
        datasets: Datasets,
        which: &[u32],
        nll: &mut [f64],
        grad: &mut [f64],
        stop: &AtomicBool,
    ) -> Result<()>;

    /// The Hessian of the NLL at `point` against `data` (`part`: n×n row-major, or its diagonal),
    /// where this backend computes it analytically in f64; `None` where it does not (callers
    /// then difference the gradient).
    fn nll_hessian(
        &self,
        point: &[f64],
        data: &PreparedData,
        part: HessianPart,
    ) -> Result<Option<Vec<f64>>> {
        let _ = (point, data, part);
        Ok(None)
    }

    /// Prepare `external` for [`nll_grad_signal`](Self::nll_grad_signal) (on a device: upload
    /// its layout once).
    fn attach_signal(&self, external: &ExternalSignal) -> Result<Resident>;

    /// NLL and its gradients with external signal yields, for every row of `batch`; `attached`
    /// comes from [`attach_signal`](Self::attach_signal). A row whose NLL is not finite is an
    /// error naming it.
    fn nll_grad_signal(&self, attached: &Resident, batch: SignalBatch) -> Result<()>;

    /// Toys `first..first + n_toys` of each ensemble, ensemble after ensemble. By default
    /// sampled on the host; a device backend may sample them where it lives, bit for bit the same.
    fn sample_toys(
        &self,
        model: &CompiledModel,
        ensembles: &[ToyEnsembleRates],
        seed: u64,
        first: u32,
        n_toys: usize,
    ) -> Result<SampledToys> {
        let samplers = ensembles
            .iter()
            .map(|rates| rates.sampler(model))
            .collect::<Result<Vec<_>>>()?;
        let host = samplers
            .iter()
            .flat_map(|sampler| (0..n_toys).map(move |i| (sampler, first + i as u32)))
            .collect::<Vec<_>>()
            .into_par_iter()
            .map(|(sampler, index)| sampler.sample(seed, index))
            .collect::<Result<Vec<_>>>()?;
        Ok(SampledToys {
            host,
            resident: None,
        })
    }

    /// The most L-BFGS-B correction pairs the backend's own optimizer keeps; `None` where it
    /// has none (fits are then driven from the host).
    fn device_optimizer_memory(&self) -> Option<usize> {
        None
    }

    /// Run many fits to completion on the backend (optimizer and evaluations where it lives).
    /// Only called where [`device_optimizer_memory`](Self::device_optimizer_memory) allows
    /// `options.memory`. Large batches stop between launches with `Error::Interrupted` once
    /// `stop` is set.
    fn fit_lbfgsb(
        &self,
        problem: &DeviceFitProblem,
        datasets: &Resident,
        options: LbfgsbOptions,
        stop: &AtomicBool,
    ) -> Result<DeviceFitOutput> {
        let _ = (problem, datasets, options, stop);
        Err(Error::Device(format!(
            "the {} backend has no device optimizer",
            self.device().name()
        )))
    }
}

/// What a backend's NLL and gradient are of. The two differ only for a model with parameters
/// that fits set analytically ([`CompiledModel::analytic_parameters`]: CMS Combine's per-bin
/// autoMCStats parameters).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Objective {
    /// The likelihood at the given point.
    Likelihood,
    /// The likelihood profiled over the analytic parameters, what fits minimise
    /// ([`crate::CpuEvaluator::profiled`]): their gradient is zero.
    Profiled,
}

/// The backend of `device` for `model`, borrowed (`&CompiledModel`) or owned
/// (`Arc<CompiledModel>`: a backend that outlives the caller's borrow). `Auto` must have been
/// resolved first (ns-inference's `Fitter::auto_device`, or [`crate::Likelihood::resolve`]).
pub fn open<'m, M>(device: Device, model: M) -> Result<Box<dyn Backend + 'm>>
where
    M: std::borrow::Borrow<CompiledModel> + Send + Sync + 'm,
{
    open_for(device, model, Objective::Likelihood)
}

/// [`open`] for `objective`. Adding a backend adds one arm here.
pub fn open_for<'m, M>(
    device: Device,
    model: M,
    objective: Objective,
) -> Result<Box<dyn Backend + 'm>>
where
    M: std::borrow::Borrow<CompiledModel> + Send + Sync + 'm,
{
    Ok(match device {
        Device::Cpu => match objective {
            Objective::Likelihood => Box::new(crate::cpu::CpuBackend::new(model)),
            Objective::Profiled => Box::new(crate::cpu::CpuBackend::new(model).profiled()),
        },
        Device::Cuda(gpus) => {
            if !crate::cuda::has_cuda() {
                return Err(crate::cuda::cuda_unavailable());
            }
            let count = crate::cuda::device_count()?;
            match gpus.ordinals(count)?.as_slice() {
                &[one] => Box::new(crate::cuda::CudaBackend::new(
                    model.borrow(),
                    one,
                    objective,
                )?),
                several => Box::new(crate::cuda::MultiCudaBackend::new(
                    model.borrow(),
                    several,
                    gpus,
                    objective,
                )?),
            }
        }
        #[cfg(feature = "wgpu")]
        Device::Vulkan | Device::Metal => Box::new(crate::wgpu::WgpuBackend::new(
            model.borrow(),
            device,
            objective,
        )?),
        #[cfg(not(feature = "wgpu"))]
        Device::Vulkan | Device::Metal => {
            return Err(Error::Device(format!(
                "this build has no f32 GPU backend (the 'wgpu' feature): '{}' is not available",
                device.name()
            )));
        }
        Device::Auto => {
            return Err(Error::InvalidInput(
                "device 'auto' must be resolved for a workload before a backend opens".into(),
            ));
        }
    })
}
