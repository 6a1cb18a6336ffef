//! A CUDA session: one model uploaded once, serving many batched NLL + gradient evaluations
//! (here), toy generation (`toys.rs`) and whole fits (`fits.rs`) on the device.

mod fits;
mod signal;
mod toys;

pub use signal::DeviceSignal;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, DevicePtr, DeviceRepr, DriverError,
    LaunchConfig, PushKernelArg, sys,
};
use ns_core::{CompiledModel, Error, Result};

use crate::backend::{Objective, check_batch};
use crate::cuda::abi::{BLOCK_THREADS, ModelView, NllGradArgs, SignalView};
use crate::cuda::compile::{KernelOrigin, kernel_cubin, prebuilt_cubin};
use crate::data::PreparedData;
use crate::layout::KernelLayout;

/// Threads per block of `sample_toys`.
const TOY_BLOCK: u32 = 64;

fn driver(what: &str, e: DriverError) -> Error {
    Error::Device(format!("CUDA {what} failed: {e}"))
}

/// Copy a host array to the device; an empty one becomes one zero, since a kernel argument
/// needs a valid pointer even where it is never read.
fn upload<T: DeviceRepr + Copy + Default>(
    stream: &Arc<CudaStream>,
    values: &[T],
) -> std::result::Result<CudaSlice<T>, DriverError> {
    if values.is_empty() {
        stream.clone_htod(&[T::default()][..])
    } else {
        stream.clone_htod(values)
    }
}

/// Whether a usable CUDA driver and at least one device are present. Never panics: the driver
/// library is looked for, and every entry point the engine uses resolved, before anything
/// calls into it.
pub fn has_cuda() -> bool {
    // SAFETY: is_culib_present only tries to load the driver library; it touches nothing of ours.
    let present = unsafe { sys::is_culib_present() };
    present
        && crate::cuda::library::driver_problem().is_none()
        && CudaContext::device_count().is_ok_and(|n| n > 0)
}

/// The shared contexts of this process, by device ordinal ([`shared_context`]).
static CONTEXTS: Mutex<Vec<(usize, Arc<CudaContext>)>> = Mutex::new(Vec::new());

/// Whether this process holds device `ordinal`'s context already: a session opened on it
/// then costs milliseconds, not the ~0.5 s a process pays before its first device fit (driver,
/// context, kernels, uploads; `auto` weighs that).
pub fn context_open(ordinal: usize) -> bool {
    CONTEXTS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .any(|(o, _)| *o == ordinal)
}

/// The primary context of device `ordinal`, retained once per process and shared by every
/// session (binned and unbinned) on it. Creating it costs about 100 ms (an H200), and a context
/// is destroyed with its last handle: each session paid that again (`examples/cuda_startup.rs`).
/// Every session works on the context's default stream, so the context tracks no events
/// across streams (disabled here, once). A sticky device fault (an illegal address) now lasts
/// for the process, as it did for the sessions alive when it happened.
pub fn shared_context(ordinal: usize) -> std::result::Result<Arc<CudaContext>, DriverError> {
    let cached = |contexts: &[(usize, Arc<CudaContext>)]| {
        contexts
            .iter()
            .find(|(o, _)| *o == ordinal)
            .map(|(_, ctx)| ctx.clone())
    };
    if let Some(ctx) = cached(&CONTEXTS.lock().unwrap_or_else(|p| p.into_inner())) {
        ctx.bind_to_thread()?;
        return Ok(ctx);
    }
    // Created outside the lock: several GPUs open in parallel (`MultiCudaBackend`).
    let created = CudaContext::new(ordinal)?;
    // SAFETY: every session on this context uses its default stream only (above), so the
    // tracking events that order work across streams are never needed.
    unsafe { created.disable_event_tracking() };
    let mut contexts = CONTEXTS.lock().unwrap_or_else(|p| p.into_inner());
    Ok(match cached(&contexts) {
        Some(first) => first,
        None => {
            contexts.push((ordinal, created.clone()));
            created
        }
    })
}

/// How many CUDA devices the driver shows; an error where the driver is absent or unusable.
pub fn device_count() -> Result<usize> {
    // SAFETY: is_culib_present only tries to load the driver library; it touches nothing of ours.
    if !unsafe { sys::is_culib_present() } || crate::cuda::library::driver_problem().is_some() {
        return Err(cuda_unavailable());
    }
    let count = CudaContext::device_count().map_err(|e| driver("device count", e))?;
    Ok(count.max(0) as usize)
}

/// The names of the CUDA devices; an error where the driver is absent or unusable.
pub fn device_names() -> Result<Vec<String>> {
    (0..device_count()?)
        .map(|i| {
            // By the device's handle: a name needs no context (one would hold memory on every
            // GPU for the rest of the process).
            cudarc::driver::result::init()
                .and_then(|_| cudarc::driver::result::device::get(i as i32))
                .and_then(cudarc::driver::result::device::get_name)
                .map_err(|e| driver(&format!("naming device {i}"), e))
        })
        .collect()
}

/// Why CUDA cannot be used where a library was found but is not a working driver (a stub, or
/// one older than the API the engine uses): `auto` says this when it falls back to the CPU.
pub fn cuda_driver_problem() -> Option<&'static str> {
    crate::cuda::library::driver_problem()
}

/// Why this process can use no CUDA driver, judged without initialising one (the library looked
/// for and its entry points resolved): none is found, or the one found is not a working NVIDIA
/// driver. `None`: a driver is there; whether it sees a GPU is known once it is initialised.
pub fn cuda_driver_absent() -> Option<String> {
    // SAFETY: is_culib_present only tries to load the driver library; it touches nothing of ours.
    let present = unsafe { sys::is_culib_present() };
    if present && crate::cuda::library::driver_problem().is_none() {
        return None;
    }
    Some(match cuda_unavailable() {
        Error::Device(message) => message,
        other => other.to_string(),
    })
}

/// The error for a CUDA request on a machine without (usable) CUDA.
pub fn cuda_unavailable() -> Error {
    if let Some(problem) = crate::cuda::library::driver_problem() {
        return Error::Device(problem.to_string());
    }
    // SAFETY: is_culib_present only tries to load the driver library; it touches nothing of ours.
    if unsafe { sys::is_culib_present() } {
        Error::Device(
            "no CUDA device is visible (the driver is installed but reports no GPU)".into(),
        )
    } else if STATIC_BUILD {
        Error::Device(
            "CUDA is not available: this nextstat is statically linked and cannot load the \
             NVIDIA driver; use the glibc build or the Python wheel for GPUs"
                .into(),
        )
    } else {
        Error::Device(
            "CUDA is not available: the NVIDIA driver library (libcuda.so) was not found".into(),
        )
    }
}

/// A statically linked build (the musl CLI) cannot load shared libraries: no driver, no GPU.
pub const STATIC_BUILD: bool = cfg!(target_feature = "crt-static");

/// What a session runs on.
#[derive(Clone, Debug)]
pub struct DeviceInfo {
    pub name: String,
    pub compute_capability: (i32, i32),
    pub multiprocessors: u32,
    pub memory_bytes: usize,
    pub kernels: KernelOrigin,
    /// How long opening the session took, phase by phase.
    pub startup: StartupPhases,
}

/// The phases of opening a [`CudaSession`] (`examples/cuda_startup.rs` prints them): where a
/// process's CUDA start-up goes.
#[derive(Clone, Debug, Default)]
pub struct StartupPhases {
    /// Finding and loading the driver library, initialising it, counting the devices (paid by
    /// the first session of a process).
    pub driver: Duration,
    /// Retaining the device's primary context.
    pub context: Duration,
    /// Loading the kernel module (the embedded cubin, else compiled) and its functions.
    pub kernels: Duration,
    /// The first launch and allocation (the kernels' ABI check).
    pub first_launch: Duration,
    /// Uploading the model, the occupancy queries and the scratch allocation.
    pub model: Duration,
}

/// Datasets resident on the device: `count` rows of main data and of auxiliary data.
pub struct DeviceDatasets {
    main: CudaSlice<f64>,
    aux: CudaSlice<f64>,
    count: usize,
}

impl DeviceDatasets {
    pub fn len(&self) -> usize {
        self.count
    }
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
}

/// A growable device buffer.
struct Buffer<T> {
    slice: Option<CudaSlice<T>>,
}

impl<T> Default for Buffer<T> {
    fn default() -> Self {
        Buffer { slice: None }
    }
}

impl<T: DeviceRepr + cudarc::driver::ValidAsZeroBits> Buffer<T> {
    fn with_len(&mut self, stream: &Arc<CudaStream>, len: usize) -> Result<&mut CudaSlice<T>> {
        if self.slice.as_ref().is_none_or(|s| s.len() < len) {
            self.slice = None;
            self.slice = Some(
                stream
                    .alloc_zeros::<T>(len.max(1))
                    .map_err(|e| driver("allocation", e))?,
            );
        }
        Ok(self.slice.as_mut().expect("allocated above"))
    }
}

/// The kernels of the module.
struct Kernels {
    nll_grad: CudaFunction,
    sample_toys: CudaFunction,
    fit_lbfgsb: CudaFunction,
    abi_layout: CudaFunction,
}

/// Load the kernels for the device of `ctx`: embedded at build time where a cubin matches the
/// device and the driver takes it, else compiled with NVRTC (or from the disk cache).
fn load_kernels(ctx: &Arc<CudaContext>) -> Result<(Kernels, DeviceInfo)> {
    let (major, minor) = ctx
        .compute_capability()
        .map_err(|e| driver("capability query", e))?;
    let mut driver_version = 0;
    // SAFETY: writes one int through a pointer to a live local.
    unsafe { sys::cuDriverGetVersion(&mut driver_version) }
        .result()
        .map_err(|e| driver("driver version query", e))?;
    let load = |cubin: Vec<u8>| ctx.load_module(cudarc::nvrtc::Ptx::from_binary(cubin));
    // A driver older than the compiler that built the embedded cubin refuses it: compile then.
    let prebuilt = prebuilt_cubin(major, minor)
        .and_then(|cubin| load(cubin.to_vec()).ok())
        .map(|module| (module, KernelOrigin::Prebuilt));
    let (module, origin) = match prebuilt {
        Some(loaded) => loaded,
        None => {
            let (cubin, origin) = kernel_cubin(major, minor, driver_version)?;
            (
                load(cubin).map_err(|e| driver("kernel module load", e))?,
                origin,
            )
        }
    };
    let function = |name: &str| {
        module
            .load_function(name)
            .map_err(|e| driver(&format!("kernel lookup of {name}"), e))
    };
    let kernels = Kernels {
        nll_grad: function("nll_grad")?,
        sample_toys: function("sample_toys")?,
        fit_lbfgsb: function("fit_lbfgsb")?,
        abi_layout: function("ns_abi_layout")?,
    };
    let info = DeviceInfo {
        name: ctx.name().map_err(|e| driver("name query", e))?,
        compute_capability: (major, minor),
        multiprocessors: ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_err(|e| driver("attribute query", e))? as u32,
        memory_bytes: ctx.total_mem().map_err(|e| driver("memory query", e))?,
        kernels: origin,
        startup: StartupPhases::default(),
    };
    Ok((kernels, info))
}

/// Every kernel-argument field where the kernels' compiler put it, against where Rust puts it
/// (`abi::field_offsets`): a mismatch is an error before any launch reads a wrong field.
fn check_abi(stream: &Arc<CudaStream>, layout: &CudaFunction) -> Result<()> {
    let expected = crate::cuda::abi::field_offsets();
    let mut out = stream
        .alloc_zeros::<u64>(expected.len())
        .map_err(|e| driver("ABI check allocation", e))?;
    let cfg = LaunchConfig {
        grid_dim: (1, 1, 1),
        block_dim: (1, 1, 1),
        shared_mem_bytes: 0,
    };
    let mut launch = stream.launch_builder(layout);
    launch.arg(&mut out);
    // SAFETY: `ns_abi_layout` takes one pointer to as many u64 as `field_offsets` lists, which
    // `out` holds; one thread.
    unsafe { launch.launch(cfg) }.map_err(|e| driver("ABI check launch", e))?;
    let device = stream
        .clone_dtoh(&out)
        .map_err(|e| driver("ABI check", e))?;
    match expected
        .iter()
        .zip(&device)
        .find(|((_, rust), dev)| *rust as u64 != **dev)
    {
        Some(((field, rust), dev)) => Err(Error::Device(format!(
            "kernel ABI: {field} is at byte {dev} in the compiled kernels but at byte {rust} in \
             ns_compute::cuda::abi (a stale kernel cache or embedded cubin?)"
        ))),
        None => Ok(()),
    }
}

/// The model's arrays on the device (kept alive for the pointers in `ModelView`).
struct ModelBuffers {
    stream: Arc<CudaStream>,
    u32s: Vec<CudaSlice<u32>>,
    f64s: Vec<CudaSlice<f64>>,
}

impl ModelBuffers {
    fn u32(&mut self, values: &[u32]) -> Result<u64> {
        let slice = upload(&self.stream, values).map_err(|e| driver("model upload", e))?;
        let pointer = slice.device_ptr(&self.stream).0;
        self.u32s.push(slice);
        Ok(pointer)
    }

    fn f64(&mut self, values: &[f64]) -> Result<u64> {
        let slice = upload(&self.stream, values).map_err(|e| driver("model upload", e))?;
        let pointer = slice.device_ptr(&self.stream).0;
        self.f64s.push(slice);
        Ok(pointer)
    }
}

/// Upload every array of `layout`; the view points the kernels at them, field by field.
fn upload_model(
    stream: &Arc<CudaStream>,
    model: &CompiledModel,
    l: &KernelLayout,
    objective: Objective,
) -> Result<(ModelView, ModelBuffers)> {
    let mut up = ModelBuffers {
        stream: stream.clone(),
        u32s: Vec::new(),
        f64s: Vec::new(),
    };
    let view = ModelView {
        blocks: up.u32(&l.blocks)?,
        nominal: up.f64(&l.nominal)?,
        entry_factor_start: up.u32(&l.entry_factor_start)?,
        entry_factor_param: up.u32(&l.entry_factor_param)?,
        entry_block: up.u32(&l.entry_block)?,
        scalar_param: up.u32(&l.scalar_param)?,
        scalar_normsys: up.u32(&l.scalar_normsys)?,
        normsys: up.f64(&l.normsys)?,
        histosys_param: up.u32(&l.histosys_param)?,
        histosys_block: up.u32(&l.histosys_block)?,
        histosys_delta: up.f64(&l.histosys_delta)?,
        bin_entry_start: up.u32(&l.bin_entry_start)?,
        bin_entries: up.u32(&l.bin_entries)?,
        gauss_param: up.u32(&l.gauss_param)?,
        gauss_aux: up.u32(&l.gauss_aux)?,
        gauss_sigma: up.f64(&l.gauss_sigma)?,
        gauss_sigma_low: up.f64(&l.gauss_sigma_low)?,
        pois_param: up.u32(&l.pois_param)?,
        pois_aux: up.u32(&l.pois_aux)?,
        pois_tau: up.f64(&l.pois_tau)?,
        range_param: up.u32(&l.range_param)?,
        range_values: up.f64(&l.range_values)?,
        normsys_input: up.f64(&l.normsys_input)?,
        pois_range_param: up.u32(&l.pois_range_param)?,
        pois_range_values: up.f64(&l.pois_range_values)?,
        floor_block: up.u32(&l.floor_block)?,
        floor_values: up.f64(&l.floor_values)?,
        stat_bin_start: up.u32(&l.stat_bin_start)?,
        stat_terms: up.u32(&l.stat_terms)?,
        stat_param: up.u32(&l.stat_param)?,
        stat_values: up.f64(&l.stat_values)?,
        stat_aux: up.u32(&l.stat_aux)?,
        stat_entry_start: up.u32(&l.stat_entry_start)?,
        stat_entries: up.u32(&l.stat_entries)?,
        stat_sigma: up.f64(&l.stat_sigma)?,
        param_analytic: up.u32(&l.param_analytic)?,
        param_slot_start: up.u32(&l.param_slot_start)?,
        param_slots: up.u32(&l.param_slots)?,
        n_params: model.n_params as i32,
        n_main: model.n_main as i32,
        n_aux: model.n_aux as i32,
        n_blocks: model.samples.len() as i32,
        n_entries: model.n_entries() as i32,
        n_scalar: l.scalar_param.len() as i32,
        n_histosys: l.histosys_param.len() as i32,
        n_entry_factors: l.entry_factor_param.len() as i32,
        n_gauss: l.gauss_param.len() as i32,
        n_pois: l.pois_param.len() as i32,
        n_ranges: l.range_param.len() as i32,
        n_pois_ranges: l.pois_range_param.len() as i32,
        clip_sample_yields: l.clip_sample_yields,
        has_normsys_input: i32::from(!l.normsys_input.is_empty()),
        has_gauss_sigma_low: i32::from(!l.gauss_sigma_low.is_empty()),
        n_floored: (l.floor_values.len() / crate::layout::FLOOR_WORDS) as i32,
        n_stats: l.stat_param.len() as i32,
        profile_analytic: i32::from(
            objective == Objective::Profiled && !l.param_analytic.is_empty(),
        ),
        normsys_code: l.normsys_code,
        histosys_code: l.histosys_code,
    };
    Ok((view, up))
}

/// One compiled model on one CUDA device.
pub struct CudaSession {
    stream: Arc<CudaStream>,
    kernels: Kernels,
    info: DeviceInfo,
    view: ModelView,
    /// The uploaded model arrays; `view` points into them.
    _model_buffers: ModelBuffers,
    scratch: CudaSlice<f64>,
    grid: u32,
    /// Blocks of the fit kernel: as many as are resident at once, so that each block's
    /// evaluation scratch stays hot in L2 across its fits.
    fit_grid: u32,
    /// Evaluations per launch, sized from free device memory; larger batches are split.
    max_batch: usize,
    params: Buffer<f64>,
    eval_dataset: Buffer<u32>,
    nll: Buffer<f64>,
    grad: Buffer<f64>,
    signal_buffers: signal::SignalBuffers,
    /// Length of the model's histosys delta array.
    n_deltas: usize,
    n_params: usize,
    n_main: usize,
    n_aux: usize,
}

impl CudaSession {
    /// Open device `ordinal`, load (or compile) the kernels and upload `model`, evaluating
    /// `objective`.
    pub fn new(model: &CompiledModel, ordinal: usize, objective: Objective) -> Result<Self> {
        let mut clock = Instant::now();
        let mut lap = || {
            let now = Instant::now();
            std::mem::replace(&mut clock, now).elapsed()
        };
        if !has_cuda() {
            return Err(cuda_unavailable());
        }
        let driver_time = lap();
        let ctx =
            shared_context(ordinal).map_err(|e| driver(&format!("opening device {ordinal}"), e))?;
        let stream = ctx.default_stream();
        let context_time = lap();
        let (kernels, mut info) = load_kernels(&ctx)?;
        let kernels_time = lap();
        check_abi(&stream, &kernels.abi_layout)?;
        let first_launch_time = lap();
        let layout = KernelLayout::new(model);
        let (view, model_buffers) = upload_model(&stream, model, &layout, objective)?;

        let blocks_per_sm = match ns_core::settings::settings().cuda_blocks_per_sm {
            Some(n) => n,
            None => kernels
                .nll_grad
                .occupancy_max_active_blocks_per_multiprocessor(BLOCK_THREADS, 0, None)
                .map_err(|e| driver("occupancy query", e))?
                .clamp(1, 8),
        };
        let grid = info.multiprocessors * blocks_per_sm;
        let fit_grid = info.multiprocessors
            * kernels
                .fit_lbfgsb
                .occupancy_max_active_blocks_per_multiprocessor(BLOCK_THREADS, 0, None)
                .map_err(|e| driver("occupancy query", e))?
                .clamp(1, blocks_per_sm);
        let scratch = stream
            .alloc_zeros::<f64>(grid as usize * layout.scratch_doubles_per_block())
            .map_err(|e| driver("scratch allocation", e))?;
        let (free, _) = ctx.mem_get_info().map_err(|e| driver("memory query", e))?;
        let bytes_per_eval = 8 * (2 * model.n_params + 1) + 4;
        let max_batch = (free / 4 / bytes_per_eval).max(1);
        info.startup = StartupPhases {
            driver: driver_time,
            context: context_time,
            kernels: kernels_time,
            first_launch: first_launch_time,
            model: lap(),
        };
        Ok(CudaSession {
            stream,
            kernels,
            info,
            view,
            _model_buffers: model_buffers,
            scratch,
            grid,
            fit_grid,
            max_batch,
            params: Buffer { slice: None },
            eval_dataset: Buffer { slice: None },
            nll: Buffer { slice: None },
            grad: Buffer { slice: None },
            signal_buffers: Default::default(),
            n_deltas: model.histosys_delta.len(),
            n_params: model.n_params,
            n_main: model.n_main,
            n_aux: model.n_aux,
        })
    }

    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }

    /// Registers, local-memory bytes per thread and resident blocks per multiprocessor of the
    /// evaluation and the fit kernels, and the grid both are launched with (for benchmarks).
    pub fn kernel_report(&self) -> String {
        let describe = |name: &str, f: &CudaFunction| {
            format!(
                "{name}: {} registers, {} B local, {} blocks/SM",
                f.num_regs().unwrap_or(-1),
                f.local_size_bytes().unwrap_or(-1),
                f.occupancy_max_active_blocks_per_multiprocessor(BLOCK_THREADS, 0, None)
                    .map_or(-1, |b| b as i64)
            )
        };
        format!(
            "{}; {}; grids {} and {} blocks",
            describe("nll_grad", &self.kernels.nll_grad),
            describe("fit_lbfgsb", &self.kernels.fit_lbfgsb),
            self.grid,
            self.fit_grid
        )
    }

    /// Copy prepared datasets to the device.
    pub fn upload_datasets(&self, datasets: &[&PreparedData]) -> Result<DeviceDatasets> {
        let mut main = Vec::with_capacity(datasets.len() * self.n_main);
        let mut aux = Vec::with_capacity(datasets.len() * self.n_aux);
        for d in datasets {
            if d.main.len() != self.n_main || d.aux.len() != self.n_aux {
                return Err(Error::InvalidInput(
                    "dataset does not match the model's bin and auxdata counts".into(),
                ));
            }
            main.extend_from_slice(&d.main);
            aux.extend_from_slice(&d.aux);
        }
        main.push(0.0);
        aux.push(0.0);
        Ok(DeviceDatasets {
            main: self
                .stream
                .clone_htod(&main)
                .map_err(|e| driver("dataset upload", e))?,
            aux: self
                .stream
                .clone_htod(&aux)
                .map_err(|e| driver("dataset upload", e))?,
            count: datasets.len(),
        })
    }

    /// Main and auxiliary data of device datasets, row after row.
    pub fn download_datasets(&self, d: &DeviceDatasets) -> Result<(Vec<f64>, Vec<f64>)> {
        let main = self
            .stream
            .clone_dtoh(&d.main.slice(0..d.count * self.n_main))
            .map_err(|e| driver("dataset download", e))?;
        let aux = self
            .stream
            .clone_dtoh(&d.aux.slice(0..d.count * self.n_aux))
            .map_err(|e| driver("dataset download", e))?;
        Ok((main, aux))
    }

    /// NLL without its data-only constant (the deviance form of
    /// `CpuEvaluator::nll_minus_constant`) and its gradient, for each row of `params`
    /// (`n_params` long) against dataset `eval_dataset[row]` of `datasets`. Fills `nll` (one per
    /// row) and `grad` (row-major). Stops with `Error::Interrupted` between launches once `stop`
    /// is set.
    pub fn nll_grad(
        &mut self,
        params: &[f64],
        datasets: &DeviceDatasets,
        eval_dataset: &[u32],
        nll: &mut [f64],
        grad: &mut [f64],
        stop: &AtomicBool,
    ) -> Result<()> {
        let n = eval_dataset.len();
        check_batch(
            params,
            eval_dataset,
            nll,
            grad,
            self.n_params,
            datasets.count,
        )?;
        // Any thread may evaluate a batch (a posterior's chains each run on their own): the
        // session's context is made current on this one.
        self.stream
            .context()
            .bind_to_thread()
            .map_err(|e| driver("binding the context", e))?;
        let np = self.n_params;
        let mut start = 0;
        while start < n {
            if stop.load(Ordering::Relaxed) {
                return Err(Error::Interrupted);
            }
            let end = (start + self.max_batch).min(n);
            self.launch_chunk(
                &params[start * np..end * np],
                datasets,
                &eval_dataset[start..end],
                &mut nll[start..end],
                &mut grad[start * np..end * np],
            )?;
            start = end;
        }
        Ok(())
    }

    fn launch_chunk(
        &mut self,
        params: &[f64],
        datasets: &DeviceDatasets,
        eval_dataset: &[u32],
        nll: &mut [f64],
        grad: &mut [f64],
    ) -> Result<()> {
        let n = eval_dataset.len();
        let s = self.stream.clone();
        let copy = |e| driver("batch upload", e);
        let params_dev = self.params.with_len(&s, params.len())?;
        s.memcpy_htod(params, params_dev).map_err(copy)?;
        let index_dev = self.eval_dataset.with_len(&s, n)?;
        s.memcpy_htod(eval_dataset, index_dev).map_err(copy)?;
        self.nll.with_len(&s, n)?;
        self.grad.with_len(&s, grad.len())?;
        let (params_dev, index_dev) = (
            self.params.slice.as_ref().expect("sized above"),
            self.eval_dataset.slice.as_ref().expect("sized above"),
        );
        let nll_dev = self.nll.slice.as_mut().expect("sized above");
        let grad_dev = self.grad.slice.as_mut().expect("sized above");
        let args = NllGradArgs {
            model: self.view,
            signal: SignalView::default(),
            params: params_dev.device_ptr(&s).0,
            eval_dataset: index_dev.device_ptr(&s).0,
            main_data: datasets.main.device_ptr(&s).0,
            aux_data: datasets.aux.device_ptr(&s).0,
            scratch: self.scratch.device_ptr(&s).0,
            nll_out: nll_dev.device_ptr(&s).0,
            grad_out: grad_dev.device_ptr(&s).0,
            nll_offset: 0.0,
            params_stride: self.n_params as i32,
            n_eval: n as i32,
        };
        let cfg = LaunchConfig {
            grid_dim: (self.grid.min(n as u32).max(1), 1, 1),
            block_dim: (BLOCK_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut launch = s.launch_builder(&self.kernels.nll_grad);
        launch.arg(&args);
        // SAFETY: `args` is the kernel's one parameter (its layout checked against the generated
        // header); its pointers are this session's buffers, sized for the launch's rows above,
        // which outlive the launch (the results are read back below on the same stream); the
        // grid and block are within the limits queried from the device.
        unsafe { launch.launch(cfg) }.map_err(|e| driver("NLL kernel launch", e))?;
        let download = |e| driver("NLL kernel", e);
        s.memcpy_dtoh(&nll_dev.slice(0..n), nll).map_err(download)?;
        s.memcpy_dtoh(&grad_dev.slice(0..grad.len()), grad)
            .map_err(download)?;
        Ok(())
    }
}
