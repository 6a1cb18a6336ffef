//! The wgpu backend: the model packed and uploaded once, datasets resident in f32, batches of NLL
//! + gradient evaluations dispatched as one shader run each (one workgroup per evaluation).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};

use ns_core::{CompiledModel, Error, Result};
use rayon::prelude::*;
use wgpu::util::DeviceExt;

use super::abi::{FIT_HEADER, FitMeta, Meta, RUNNING, fit_header, shader_source};
use super::adapter::{Opened, open};
use super::packed::PackedModel;
use crate::backend::{
    Backend, Batching, Datasets, DeviceFitOutput, DeviceFitProblem, Objective, Precision, Resident,
    SignalBatch, Values, ValuesMut, check_batch, not_finite,
};
use crate::data::PreparedData;
use crate::device::Device;
use crate::signal::ExternalSignal;
use ns_core::optim::LbfgsbOptions;

/// Workgroups of one dispatch at most (each strides over the evaluations): enough to fill any
/// GPU, few enough that the scratch area stays small.
const MAX_WORKGROUPS: usize = 2048;

/// Datasets resident on the adapter: `count` rows of main then auxiliary data, in f32.
pub struct WgpuDatasets {
    buffer: wgpu::Buffer,
    count: usize,
}

/// A buffer that grows to the largest size asked of it.
struct Growable {
    buffer: Option<wgpu::Buffer>,
    usage: wgpu::BufferUsages,
    label: &'static str,
}

impl Growable {
    fn new(label: &'static str, usage: wgpu::BufferUsages) -> Self {
        Growable {
            buffer: None,
            usage,
            label,
        }
    }

    fn at_least(&mut self, device: &wgpu::Device, bytes: u64) -> &wgpu::Buffer {
        let bytes = bytes.max(4).next_multiple_of(4);
        if self.buffer.as_ref().is_none_or(|b| b.size() < bytes) {
            self.buffer = Some(device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(self.label),
                size: bytes,
                usage: self.usage,
                mapped_at_creation: false,
            }));
        }
        self.buffer.as_ref().expect("created above")
    }
}

/// A packed model on the adapter: its uniform and its two arrays.
#[derive(Clone)]
struct Uploaded {
    meta: Meta,
    meta_buffer: wgpu::Buffer,
    ints: wgpu::Buffer,
    reals: wgpu::Buffer,
}

/// An attached external signal: the model with the signal's layout appended, on the adapter.
struct WgpuSignal {
    external: ExternalSignal,
    model: Uploaded,
}

/// Which packed model a dispatch evaluates.
#[derive(Clone, Copy)]
enum Model<'a> {
    Plain,
    With(&'a Uploaded),
}

/// Everything on the adapter; calls are serialised through it.
struct Gpu {
    opened: Opened,
    pipeline: wgpu::ComputePipeline,
    /// The device optimizer (fit.wgsl's `fit`), on the same bindings plus `fit_meta`.
    fit_pipeline: wgpu::ComputePipeline,
    fit_meta: wgpu::Buffer,
    layout: wgpu::BindGroupLayout,
    model: Uploaded,
    /// The model's packed arrays on the host (a signal's layout is appended to a copy).
    packed: PackedModel,
    params: Growable,
    signal: Growable,
    /// The data of the last signal batch, on the adapter (a training loop passes the same data
    /// every step: uploaded again only when they change).
    signal_data: Option<(Vec<f64>, WgpuDatasets)>,
    which: Growable,
    scratch: Growable,
    result: Growable,
    staging: Growable,
}

/// Which entry point a submission runs.
#[derive(Clone, Copy)]
enum Entry {
    Evaluate,
    Fit,
}

/// What a submission reads back: the first `bytes` of the results, or `words` f32 of the
/// scratch buffer from word `offset`.
enum Readback {
    Result { bytes: u64 },
    Scratch { offset: usize, words: usize },
}

/// Evaluations per fit in one launch of the device optimizer: a launch stays short (a fraction
/// of a second on large models; the stop flag is seen between launches) and a batch needs a few.
const EVALS_PER_LAUNCH: u32 = 64;

/// The device optimizer's iteration and evaluation counters are f32: exact up to 2²⁴.
const F32_COUNT_LIMIT: usize = 1 << 24;

/// The most correction pairs the device optimizer keeps (the host optimizer's default).
const MAX_DEVICE_MEMORY: usize = 10;

/// Where a launch of device fits keeps its state in the scratch buffer (f32 words): the
/// evaluation scratch of every workgroup, one status word per fit, one state per fit, one output
/// row per fit (fit.wgsl).
struct FitLayout {
    state0: usize,
    stride: usize,
    out0: usize,
    out_width: usize,
    words: usize,
}

impl FitLayout {
    fn new(meta: &Meta, np: usize, memory: usize, count: usize) -> Self {
        let header = FIT_HEADER.len();
        let groups = count.clamp(1, MAX_WORKGROUPS);
        let state0 = groups * meta.scratch_stride as usize;
        let stride = header + 8 * np + 2 * memory * np + 2 * memory;
        let out0 = state0 + count + count * stride;
        let out_width = header + 2 * np;
        FitLayout {
            state0,
            stride,
            out0,
            out_width,
            words: out0 + count * out_width,
        }
    }
}

impl Gpu {
    /// The packed model a dispatch evaluates (a cheap handle: wgpu buffers are shared).
    fn model_of(&self, model: Model) -> Uploaded {
        match model {
            Model::Plain => self.model.clone(),
            Model::With(attached) => attached.clone(),
        }
    }

    /// The per-row inputs of a submission: parameters, each row's dataset, external yields.
    fn write_rows(&mut self, params: &[f32], which: &[u32], signal: &[f32]) -> Result<()> {
        let device = self.opened.device.clone();
        let queue = &self.opened.queue;
        let (p, w, sig) = (&mut self.params, &mut self.which, &mut self.signal);
        scoped(&device, "uploading an evaluation's inputs", || {
            let params_buffer = p.at_least(&device, 4 * params.len() as u64);
            queue.write_buffer(params_buffer, 0, bytemuck::cast_slice(params));
            let signal_buffer = sig.at_least(&device, 4 * signal.len() as u64);
            if !signal.is_empty() {
                queue.write_buffer(signal_buffer, 0, bytemuck::cast_slice(signal));
            }
            let which_buffer = w.at_least(&device, 4 * which.len() as u64);
            queue.write_buffer(which_buffer, 0, bytemuck::cast_slice(which));
        })
    }

    /// One submission: `entry` on `groups` workgroups over `rows` rows of `model` (none: a
    /// readback alone), then `readback` copied to the host.
    fn submit(
        &mut self,
        model: &Uploaded,
        rows: usize,
        datasets: &WgpuDatasets,
        entry: Option<(Entry, usize)>,
        scratch_words: usize,
        readback: Readback,
    ) -> Result<Vec<f32>> {
        let mut meta = model.meta;
        meta.n_eval = rows as u32;
        let width = 1 + meta.n_params as usize + meta.n_signal as usize;
        let device = self.opened.device.clone();
        let bytes = match readback {
            Readback::Result { bytes } => bytes,
            Readback::Scratch { words, .. } => 4 * words as u64,
        };
        let staging = scoped(&device, "a GPU submission", || {
            let queue = &self.opened.queue;
            queue.write_buffer(&model.meta_buffer, 0, bytemuck::bytes_of(&meta));
            let params = self.params.at_least(&device, 4);
            let signal = self.signal.at_least(&device, 4);
            let which = self.which.at_least(&device, 4);
            let scratch = self.scratch.at_least(&device, 4 * scratch_words as u64);
            let result = self.result.at_least(&device, (4 * rows * width) as u64);
            let staging = self.staging.at_least(&device, bytes);
            let bind_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some("nextstat"),
                layout: &self.layout,
                entries: &[
                    bind(0, &model.meta_buffer),
                    bind(1, &model.ints),
                    bind(2, &model.reals),
                    bind(3, params),
                    bind(4, &datasets.buffer),
                    bind(5, which),
                    bind(6, scratch),
                    bind(7, result),
                    bind(8, signal),
                    bind(9, &self.fit_meta),
                ],
            });
            let mut encoder = device.create_command_encoder(&Default::default());
            if let Some((entry, groups)) = entry {
                let mut pass = encoder.begin_compute_pass(&Default::default());
                pass.set_pipeline(match entry {
                    Entry::Evaluate => &self.pipeline,
                    Entry::Fit => &self.fit_pipeline,
                });
                pass.set_bind_group(0, &bind_group, &[]);
                pass.dispatch_workgroups(groups as u32, 1, 1);
            }
            match readback {
                Readback::Result { bytes } => {
                    encoder.copy_buffer_to_buffer(result, 0, staging, 0, Some(bytes))
                }
                Readback::Scratch { offset, words } => encoder.copy_buffer_to_buffer(
                    scratch,
                    4 * offset as u64,
                    staging,
                    0,
                    Some(4 * words as u64),
                ),
            }
            queue.submit([encoder.finish()]);
            staging.clone()
        })?;
        let slice = staging.slice(..bytes);
        let (sender, receiver) = std::sync::mpsc::channel();
        slice.map_async(wgpu::MapMode::Read, move |r| {
            let _ = sender.send(r);
        });
        device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| Error::Device(format!("waiting for the GPU failed: {e}")))?;
        receiver
            .recv()
            .map_err(|_| Error::Device("the GPU never answered a readback".into()))?
            .map_err(|e| Error::Device(format!("reading results back failed: {e}")))?;
        let values = {
            let view = slice
                .get_mapped_range()
                .map_err(|e| Error::Device(format!("reading results back failed: {e}")))?;
            bytemuck::cast_slice::<u8, f32>(&view).to_vec()
        };
        staging.unmap();
        Ok(values)
    }
}

/// The f32 backend on a Vulkan or Metal adapter, holding one model.
pub struct WgpuBackend {
    device: Device,
    n_params: usize,
    n_main: usize,
    n_aux: usize,
    gpu: Mutex<Gpu>,
}

fn bind(binding: u32, buffer: &wgpu::Buffer) -> wgpu::BindGroupEntry<'_> {
    wgpu::BindGroupEntry {
        binding,
        resource: buffer.as_entire_binding(),
    }
}

fn buffer_entry(binding: u32, ty: wgpu::BufferBindingType) -> wgpu::BindGroupLayoutEntry {
    wgpu::BindGroupLayoutEntry {
        binding,
        visibility: wgpu::ShaderStages::COMPUTE,
        ty: wgpu::BindingType::Buffer {
            ty,
            has_dynamic_offset: false,
            min_binding_size: None,
        },
        count: None,
    }
}

fn upload_packed(device: &wgpu::Device, packed: &PackedModel) -> Uploaded {
    let init = |label, contents: &[u8], usage| {
        device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some(label),
            contents,
            usage,
        })
    };
    Uploaded {
        meta: packed.meta,
        meta_buffer: init(
            "meta",
            bytemuck::bytes_of(&packed.meta),
            wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
        ),
        ints: init(
            "model ints",
            bytemuck::cast_slice(&packed.ints),
            wgpu::BufferUsages::STORAGE,
        ),
        reals: init(
            "model reals",
            bytemuck::cast_slice(&packed.reals),
            wgpu::BufferUsages::STORAGE,
        ),
    }
}

/// Run `f` inside validation and out-of-memory error scopes: what the driver reports there
/// becomes an `Error::Device` naming `what`.
fn scoped<T>(device: &wgpu::Device, what: &str, f: impl FnOnce() -> T) -> Result<T> {
    let memory = device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
    let validation = device.push_error_scope(wgpu::ErrorFilter::Validation);
    let value = f();
    let errors = [
        pollster::block_on(validation.pop()),
        pollster::block_on(memory.pop()),
    ];
    match errors.into_iter().flatten().next() {
        Some(e) => Err(Error::Device(format!("{what} failed on the GPU: {e}"))),
        None => Ok(value),
    }
}

/// The shader built on one device: its two pipelines and their bind group layout. The shader
/// does not depend on the model, so the backends of a process share one per device, built with
/// the device at the first open (compiling it takes about 0.5 s on lavapipe).
#[derive(Clone)]
struct Built {
    opened: Opened,
    pipeline: wgpu::ComputePipeline,
    fit_pipeline: wgpu::ComputePipeline,
    layout: wgpu::BindGroupLayout,
}

/// The process's [`Built`] for `device` (`Vulkan` or `Metal`); a device that was lost is
/// opened and built anew.
fn built(device: Device) -> Result<Built> {
    static BUILT: OnceLock<Mutex<Vec<(Device, Built)>>> = OnceLock::new();
    let mut all = BUILT
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    all.retain(|(_, b)| {
        b.opened
            .lost
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_none()
    });
    if let Some((_, b)) = all.iter().find(|(d, _)| *d == device) {
        return Ok(b.clone());
    }
    let opened = open(device)?;
    let gpu = &opened.device;
    let (pipeline, fit_pipeline, layout) = scoped(gpu, "building the shader", || {
        let module = gpu.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("nll_grad.wgsl"),
            source: wgpu::ShaderSource::Wgsl(shader_source().into()),
        });
        let storage = |read_only| wgpu::BufferBindingType::Storage { read_only };
        // 0 meta, 1 ints, 2 reals, 3 params (written by the device optimizer), 4 data,
        // 5 which, 6 scratch, 7 result, 8 signal, 9 the device optimizer's launch.
        let mut entries = vec![buffer_entry(0, wgpu::BufferBindingType::Uniform)];
        entries.extend((1..=2).map(|b| buffer_entry(b, storage(true))));
        entries.push(buffer_entry(3, storage(false)));
        entries.extend((4..=5).map(|b| buffer_entry(b, storage(true))));
        entries.extend((6..=7).map(|b| buffer_entry(b, storage(false))));
        entries.push(buffer_entry(8, storage(true)));
        entries.push(buffer_entry(9, wgpu::BufferBindingType::Uniform));
        let layout = gpu.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some("nll_grad"),
            entries: &entries,
        });
        let pipeline_layout = gpu.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some("nll_grad"),
            bind_group_layouts: &[Some(&layout)],
            immediate_size: 0,
        });
        let pipeline_for = |entry| {
            gpu.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(entry),
                layout: Some(&pipeline_layout),
                module: &module,
                entry_point: Some(entry),
                compilation_options: wgpu::PipelineCompilationOptions::default(),
                cache: None,
            })
        };
        (pipeline_for("nll_grad"), pipeline_for("fit"), layout)
    })?;
    let built = Built {
        opened,
        pipeline,
        fit_pipeline,
        layout,
    };
    all.push((device, built.clone()));
    Ok(built)
}

impl WgpuBackend {
    /// Open the best adapter of `device` (`Vulkan` or `Metal`), build the shader and upload
    /// `model`, whose evaluations are of `objective`.
    pub fn new(model: &CompiledModel, device: Device, objective: Objective) -> Result<Self> {
        crate::layout::check_f32_device_terms(model)?;
        if !matches!(device, Device::Vulkan | Device::Metal) {
            return Err(Error::InvalidInput(format!(
                "the wgpu backend runs on 'vulkan' or 'metal', not '{}'",
                device.name()
            )));
        }
        let Built {
            opened,
            pipeline,
            fit_pipeline,
            layout,
        } = built(device)?;
        let gpu = &opened.device;
        let packed = PackedModel::new(model, objective);
        let (fit_meta, uploaded) = scoped(gpu, "uploading the model", || {
            let fit_meta = gpu.create_buffer(&wgpu::BufferDescriptor {
                label: Some("fit launch"),
                size: std::mem::size_of::<FitMeta>() as u64,
                usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            (fit_meta, upload_packed(gpu, &packed))
        })?;
        let storage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST;
        Ok(WgpuBackend {
            device,
            n_params: model.n_params,
            n_main: model.n_main,
            n_aux: model.n_aux,
            gpu: Mutex::new(Gpu {
                opened,
                pipeline,
                fit_pipeline,
                fit_meta,
                layout,
                model: uploaded,
                packed,
                params: Growable::new("parameters", storage),
                signal: Growable::new("signal yields", storage),
                signal_data: None,
                which: Growable::new("dataset of each evaluation", storage),
                scratch: Growable::new(
                    "scratch",
                    wgpu::BufferUsages::STORAGE
                        | wgpu::BufferUsages::COPY_DST
                        | wgpu::BufferUsages::COPY_SRC,
                ),
                result: Growable::new(
                    "results",
                    wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
                ),
                staging: Growable::new(
                    "readback",
                    wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                ),
            }),
        })
    }

    /// A panic elsewhere cannot leave the adapter state half-updated (each call is
    /// self-contained), so a poisoned lock is taken over.
    fn gpu(&self) -> Result<MutexGuard<'_, Gpu>> {
        let gpu = self.gpu.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(lost) = gpu
            .opened
            .lost
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
        {
            return Err(Error::Device(lost));
        }
        Ok(gpu)
    }

    fn upload_rows(&self, gpu: &Gpu, datasets: &[PreparedData]) -> Result<WgpuDatasets> {
        let mut values = Vec::with_capacity(datasets.len() * (self.n_main + self.n_aux) + 1);
        for d in datasets {
            if d.main.len() != self.n_main || d.aux.len() != self.n_aux {
                return Err(Error::InvalidInput(
                    "dataset does not match the model's bin and auxdata counts".into(),
                ));
            }
            values.extend(d.main.iter().chain(&d.aux).map(|&v| v as f32));
        }
        values.push(0.0);
        let device = &gpu.opened.device;
        let buffer = scoped(device, "uploading datasets", || {
            device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some("datasets"),
                contents: bytemuck::cast_slice(&values),
                usage: wgpu::BufferUsages::STORAGE,
            })
        })?;
        Ok(WgpuDatasets {
            buffer,
            count: datasets.len(),
        })
    }

    /// Rows per dispatch within the adapter's binding size (the results are the largest array).
    fn rows_per_dispatch(&self, gpu: &Gpu, width: usize) -> usize {
        let limit = gpu.opened.device.limits().max_storage_buffer_binding_size;
        ((limit / (4 * width as u64)) as usize).clamp(1, 1 << 16)
    }

    /// One dispatch of `model` (the plain model, or one with a signal attached): evaluations
    /// of `params` (f32 rows) against `datasets[which]`, with `signal` rows where the model has
    /// external yields. Returns the result rows (NLL, gradient, then ∂NLL/∂s).
    fn dispatch(
        &self,
        gpu: &mut Gpu,
        model: Model,
        datasets: &WgpuDatasets,
        params: &[f32],
        which: &[u32],
        signal: &[f32],
    ) -> Result<Vec<f32>> {
        let rows = which.len();
        let model = gpu.model_of(model);
        let width = 1 + self.n_params + model.meta.n_signal as usize;
        let groups = rows.clamp(1, MAX_WORKGROUPS);
        gpu.write_rows(params, which, signal)?;
        gpu.submit(
            &model,
            rows,
            datasets,
            Some((Entry::Evaluate, groups)),
            groups * model.meta.scratch_stride as usize,
            Readback::Result {
                bytes: (rows * width * 4) as u64,
            },
        )
    }

    /// Fits `fits` of `problem` on the device optimizer (fit.wgsl), launch after launch of at
    /// most [`EVALS_PER_LAUNCH`] evaluations each until every fit has stopped; their ends into
    /// `out` (rows of `fits`).
    #[allow(clippy::too_many_arguments)]
    fn fit_group(
        &self,
        gpu: &mut Gpu,
        model: Model,
        datasets: &WgpuDatasets,
        problem: &DeviceFitProblem,
        fits: std::ops::Range<usize>,
        options: LbfgsbOptions,
        stop: &AtomicBool,
        out: &mut DeviceFitOutput,
    ) -> Result<()> {
        let np = self.n_params;
        let count = fits.len();
        let model = gpu.model_of(model);
        let layout = FitLayout::new(&model.meta, np, options.memory, count);
        let header = FIT_HEADER.len();
        // Each fit's parameters start at its initial point; fixed ones stay there.
        let params: Vec<f32> = problem.init[fits.start * np..fits.end * np]
            .iter()
            .map(|&v| v as f32)
            .collect();
        let which = &problem.dataset[fits.clone()];
        let signal: Vec<f32> = match &problem.signal {
            Some(s) => {
                let n = model.meta.n_signal as usize;
                s.values[fits.start * n..fits.end * n]
                    .iter()
                    .map(|&v| v as f32)
                    .collect()
            }
            None => Vec::new(),
        };
        gpu.write_rows(&params, which, &signal)?;
        let launch = FitMeta {
            state0: layout.state0 as u32,
            state_stride: layout.stride as u32,
            out0: layout.out0 as u32,
            memory: options.memory as u32,
            evals_per_launch: EVALS_PER_LAUNCH,
            // The shader counts in f32: exact up to 2²⁴.
            max_iterations: options.max_iterations.min(F32_COUNT_LIMIT) as u32,
            max_evaluations: options.max_evaluations.min(F32_COUNT_LIMIT) as u32,
            pg_tol: (options.pg_tol.max(Precision::F32.pg_tol_floor()) as f32).to_bits(),
            noise: (Precision::F32.objective_noise().unwrap_or(0.0) as f32).to_bits(),
            ..FitMeta::default()
        };
        // The starting states: running, no correction pairs yet, the trial at the start point.
        let mut states = Vec::with_capacity(count * (header + 8 * np));
        for r in fits.clone() {
            let free = problem.n_free[r].max(0) as usize;
            let row = r * np..(r + 1) * np;
            let (lo, hi, sc) = (
                &problem.lower[row.clone()],
                &problem.upper[row.clone()],
                &problem.scale[row.clone()],
            );
            let mut h = [0.0f32; 16];
            // f stays NaN until the first evaluation is finite: a fit that cannot start ends
            // with no objective, never a plausible 0.
            h[fit_header("H_F")] = f32::NAN;
            h[fit_header("H_BEST")] = f32::INFINITY;
            h[fit_header("H_TERMINATION")] = RUNNING;
            h[fit_header("H_NEWEST")] = (options.memory - 1) as f32;
            h[fit_header("H_N_FREE")] = free as f32;
            states.extend_from_slice(&h);
            let start: Vec<f32> = (0..np)
                .map(|k| {
                    let i = problem.free_index[row.start + k] as usize;
                    if k < free {
                        (problem.init[r * np + i] * sc[k]).max(lo[k]).min(hi[k]) as f32
                    } else {
                        0.0
                    }
                })
                .collect();
            states.extend_from_slice(&start); // y
            states.extend(std::iter::repeat_n(0.0, np)); // g
            states.extend(lo.iter().map(|&v| v as f32));
            states.extend(hi.iter().map(|&v| v as f32));
            states.extend(sc.iter().map(|&v| v as f32));
            states.extend(std::iter::repeat_n(0.0, np)); // d
            states.extend_from_slice(&start); // trial
            // As values (exact below 2²⁴): the bits of a small integer are a subnormal float,
            // which drivers may flush to zero.
            states.extend(problem.free_index[row].iter().map(|&i| i as f32));
        }
        let device = gpu.opened.device.clone();
        let scratch = gpu
            .scratch
            .at_least(&device, 4 * layout.words as u64)
            .clone();
        scoped(&device, "starting device fits", || {
            let queue = &gpu.opened.queue;
            queue.write_buffer(&gpu.fit_meta, 0, bytemuck::bytes_of(&launch));
            let status = vec![RUNNING; count];
            queue.write_buffer(
                &scratch,
                4 * layout.state0 as u64,
                bytemuck::cast_slice(&status),
            );
            let prefix = header + 8 * np;
            for (k, state) in states.chunks_exact(prefix).enumerate() {
                let at = layout.state0 + count + k * layout.stride;
                queue.write_buffer(&scratch, 4 * at as u64, bytemuck::cast_slice(state));
            }
        })?;
        let groups = count.clamp(1, MAX_WORKGROUPS);
        let launches = options.max_evaluations.min(F32_COUNT_LIMIT) / EVALS_PER_LAUNCH as usize + 2;
        for _ in 0..launches {
            if stop.load(Ordering::Relaxed) {
                return Err(Error::Interrupted);
            }
            let status = gpu.submit(
                &model,
                count,
                datasets,
                Some((Entry::Fit, groups)),
                layout.words,
                Readback::Scratch {
                    offset: layout.state0,
                    words: count,
                },
            )?;
            if status.iter().all(|&t| t != RUNNING) {
                break;
            }
        }
        let ends = gpu.submit(
            &model,
            count,
            datasets,
            None,
            layout.words,
            Readback::Scratch {
                offset: layout.out0,
                words: count * layout.out_width,
            },
        )?;
        for (k, end) in ends.chunks_exact(layout.out_width).enumerate() {
            let r = fits.start + k;
            let (h, rest) = end.split_at(header);
            out.f[r] = h[fit_header("H_F")] as f64;
            out.iterations[r] = h[fit_header("H_ITERATIONS")] as i32;
            out.evaluations[r] = h[fit_header("H_EVALUATIONS")] as i32;
            // A fit still running after every launch ran out of evaluations.
            let code = h[fit_header("H_TERMINATION")];
            out.termination[r] = if code == RUNNING {
                ns_core::optim::Termination::MaxEvaluations.code()
            } else {
                code as i32
            };
            for q in 0..np {
                out.x[r * np + q] = rest[q] as f64;
                out.g[r * np + q] = rest[np + q] as f64;
            }
        }
        Ok(())
    }

    fn host_only(&self) -> Error {
        Error::InvalidInput(format!(
            "the f32 '{}' backend reads and writes host memory only (signal batches in place in \
             device memory are CUDA's)",
            self.device.name()
        ))
    }
}

impl Backend for WgpuBackend {
    fn device(&self) -> Device {
        self.device
    }

    fn description(&self) -> String {
        match self.gpu() {
            Ok(gpu) => {
                let i = &gpu.opened.info;
                format!("{} ({}, {}; {}); f32", i.name, i.backend, i.kind, i.driver)
            }
            Err(e) => format!("{} adapter: {e}", self.device.name()),
        }
    }

    fn batching(&self) -> Batching {
        Batching::Lockstep
    }

    fn precision(&self) -> Precision {
        Precision::F32
    }

    fn upload(&self, datasets: &[PreparedData]) -> Result<Resident> {
        let gpu = self.gpu()?;
        Ok(Resident::new(
            datasets.len(),
            self.upload_rows(&gpu, datasets)?,
        ))
    }

    fn nll_grad_batch(
        &self,
        points: &[f64],
        datasets: Datasets,
        which: &[u32],
        nll: &mut [f64],
        grad: &mut [f64],
        stop: &AtomicBool,
    ) -> Result<()> {
        let (rows, np) = (which.len(), self.n_params);
        let mut gpu = self.gpu()?;
        let uploaded;
        let on_device = match datasets {
            Datasets::Resident(r) => r.storage::<WgpuDatasets>()?,
            Datasets::Host(host) => {
                uploaded = self.upload_rows(&gpu, host)?;
                &uploaded
            }
        };
        check_batch(points, which, nll, grad, np, on_device.count)?;
        let per_dispatch = self.rows_per_dispatch(&gpu, 1 + np);
        let mut start = 0;
        while start < rows {
            if stop.load(Ordering::Relaxed) {
                return Err(Error::Interrupted);
            }
            let end = (start + per_dispatch).min(rows);
            let params: Vec<f32> = points[start * np..end * np]
                .par_iter()
                .map(|&v| v as f32)
                .collect();
            let values = self.dispatch(
                &mut gpu,
                Model::Plain,
                on_device,
                &params,
                &which[start..end],
                &[],
            )?;
            nll[start..end]
                .par_iter_mut()
                .enumerate()
                .for_each(|(k, nll)| *nll = values[k * (1 + np)] as f64);
            grad[start * np..end * np]
                .par_iter_mut()
                .enumerate()
                .for_each(|(i, g)| *g = values[(i / np) * (1 + np) + 1 + i % np] as f64);
            start = end;
        }
        Ok(())
    }

    /// On a GPU the whole fit runs there (fit.wgsl). On a software driver (lavapipe) the
    /// shader's barriers are emulated thread by thread and the host optimizer is faster (and
    /// proven there on every model, which the device optimizer is not yet: docs/gpu-f32.md):
    /// fits are driven from the host there (`fit_lbfgsb` still runs, for tests).
    fn device_optimizer_memory(&self) -> Option<usize> {
        let on_cpu = self.gpu().is_ok_and(|gpu| gpu.opened.info.kind == "cpu");
        (!on_cpu).then_some(MAX_DEVICE_MEMORY)
    }

    /// Whole fits on the device (fit.wgsl): a bounded L-BFGS in f32 per workgroup, its
    /// evaluations on the same workgroup, launch after launch until every fit has stopped. The
    /// fits are settled in f64 on the host afterwards (`Fitter::settle_f32`).
    fn fit_lbfgsb(
        &self,
        problem: &DeviceFitProblem,
        datasets: &Resident,
        options: LbfgsbOptions,
        stop: &AtomicBool,
    ) -> Result<DeviceFitOutput> {
        let np = self.n_params;
        problem.check_rows(np)?;
        if !(1..=MAX_DEVICE_MEMORY).contains(&options.memory) {
            return Err(Error::InvalidInput(format!(
                "the f32 device optimizer keeps 1 to {MAX_DEVICE_MEMORY} correction pairs, not {}",
                options.memory
            )));
        }
        let n_fits = problem.dataset.len();
        let mut gpu = self.gpu()?;
        let on_device = datasets.storage::<WgpuDatasets>()?;
        if let Some(d) = problem
            .dataset
            .iter()
            .find(|&&d| d as usize >= on_device.count)
        {
            return Err(Error::InvalidInput(format!(
                "device fit refers to dataset {d} of {}",
                on_device.count
            )));
        }
        let model = match &problem.signal {
            Some(signal) => {
                let WgpuSignal { external, model } = signal.attached.storage::<WgpuSignal>()?;
                if signal.values.len() != n_fits * external.len() {
                    return Err(Error::InvalidInput(format!(
                        "{} signal values for {n_fits} fits of {} yields",
                        signal.values.len(),
                        external.len()
                    )));
                }
                Model::With(model)
            }
            None => Model::Plain,
        };
        // Fits per group: the most whose scratch (each workgroup's evaluation area, then each
        // fit's state and output) fits the adapter's largest binding and buffer.
        let meta = gpu.model_of(model).meta;
        let limits = gpu.opened.device.limits();
        let limit = (limits
            .max_storage_buffer_binding_size
            .min(limits.max_buffer_size)
            / 4) as usize;
        let words = |count: usize| FitLayout::new(&meta, np, options.memory, count).words;
        let per_fit = words(1) - meta.scratch_stride as usize;
        let evaluation = meta.scratch_stride as usize;
        let per_group = if limit / (evaluation + per_fit) >= MAX_WORKGROUPS {
            (limit - MAX_WORKGROUPS * evaluation) / per_fit
        } else {
            limit / (evaluation + per_fit)
        };
        if per_group == 0 || words(1) > limit {
            return Err(Error::Device(format!(
                "one device fit of this model needs {} MB of scratch, more than the adapter's \
                 largest buffer binding ({} MB)",
                4 * words(1) / 1_000_000,
                4 * limit / 1_000_000
            )));
        }
        let mut out = DeviceFitOutput::zeros(n_fits, np);
        let mut start = 0;
        while start < n_fits {
            let end = (start + per_group).min(n_fits);
            self.fit_group(
                &mut gpu,
                model,
                on_device,
                problem,
                start..end,
                options,
                stop,
                &mut out,
            )?;
            start = end;
        }
        Ok(out)
    }

    fn attach_signal(&self, external: &ExternalSignal) -> Result<Resident> {
        let gpu = self.gpu()?;
        let packed = gpu.packed.with_signal(external);
        let device = &gpu.opened.device;
        let model = scoped(device, "uploading the signal layout", || {
            upload_packed(device, &packed)
        })?;
        Ok(Resident::new(
            0,
            WgpuSignal {
                external: external.clone(),
                model,
            },
        ))
    }

    fn nll_grad_signal(&self, attached: &Resident, batch: SignalBatch) -> Result<()> {
        let WgpuSignal { external, model } = attached.storage::<WgpuSignal>()?;
        let (n, np) = (external.len(), self.n_params);
        let (rows, shared) = batch.rows(n, np)?;
        let (Values::Host(signals), Values::Host(pars)) = (batch.signals, batch.pars) else {
            return Err(self.host_only());
        };
        let (ValuesMut::Host(nll), ValuesMut::Host(d_signal), ValuesMut::Host(d_pars)) =
            (batch.nll, batch.d_signal, batch.d_pars)
        else {
            return Err(self.host_only());
        };
        for row in signals.chunks(n.max(1)) {
            external.check(row)?;
        }
        let mut gpu = self.gpu()?;
        let full: Vec<f64> = batch
            .data
            .main
            .iter()
            .chain(&batch.data.aux)
            .copied()
            .collect();
        let data = match gpu.signal_data.take() {
            Some((held, on_device)) if held == full => on_device,
            _ => self.upload_rows(&gpu, std::slice::from_ref(batch.data))?,
        };
        let width = 1 + np + n;
        let per_dispatch = self.rows_per_dispatch(&gpu, width);
        let mut start = 0;
        while start < rows {
            let end = (start + per_dispatch).min(rows);
            let params: Vec<f32> = (start..end)
                .flat_map(|r| {
                    if shared {
                        pars
                    } else {
                        &pars[r * np..(r + 1) * np]
                    }
                })
                .map(|&v| v as f32)
                .collect();
            let values: Vec<f32> = signals[start * n..end * n]
                .iter()
                .map(|&v| v as f32)
                .collect();
            let zeros = vec![0; end - start];
            let out = self.dispatch(
                &mut gpu,
                Model::With(model),
                &data,
                &params,
                &zeros,
                &values,
            )?;
            for (k, row) in out.chunks_exact(width).enumerate() {
                let r = start + k;
                nll[r] = row[0] as f64 + batch.data.constant;
                for (d, &v) in d_pars[r * np..(r + 1) * np].iter_mut().zip(&row[1..1 + np]) {
                    *d = v as f64;
                }
                for (d, &v) in d_signal[r * n..(r + 1) * n].iter_mut().zip(&row[1 + np..]) {
                    *d = v as f64;
                }
                if !nll[r].is_finite() {
                    return Err(not_finite(r));
                }
            }
            start = end;
        }
        gpu.signal_data = Some((full, data));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The backends of a process share one device and one compiled shader per device: the
    /// shader is built once (each build compiles both pipelines). Needs a Vulkan adapter (in CI
    /// lavapipe, installed by scripts/test.sh).
    #[test]
    fn backends_of_a_device_share_its_shader() {
        let first = built(Device::Vulkan).expect("a Vulkan adapter");
        let second = built(Device::Vulkan).expect("a Vulkan adapter");
        assert!(first.pipeline == second.pipeline && first.fit_pipeline == second.fit_pipeline);
        assert!(first.opened.device == second.opened.device);
    }
}
