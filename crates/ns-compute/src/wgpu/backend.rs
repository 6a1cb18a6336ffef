//! The wgpu backend: the model packed and uploaded once, datasets resident in f32, batches of NLL
//! + gradient evaluations dispatched as one shader run each (one workgroup per evaluation).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

use ns_core::{CompiledModel, Error, Result};
use wgpu::util::DeviceExt;

use super::abi::{Meta, nll_grad_source};
use super::adapter::{Opened, open};
use super::packed::PackedModel;
use crate::backend::{Backend, Batching, Datasets, Precision, Resident, SignalBatch};
use crate::data::PreparedData;
use crate::device::Device;
use crate::signal::ExternalSignal;

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

/// Everything on the adapter; calls are serialised through it.
struct Gpu {
    opened: Opened,
    pipeline: wgpu::ComputePipeline,
    layout: wgpu::BindGroupLayout,
    meta: Meta,
    meta_buffer: wgpu::Buffer,
    ints: wgpu::Buffer,
    reals: wgpu::Buffer,
    params: Growable,
    which: Growable,
    scratch: Growable,
    result: Growable,
    staging: Growable,
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

fn storage_entry(binding: u32, read_only: bool) -> wgpu::BindGroupLayoutEntry {
    wgpu::BindGroupLayoutEntry {
        binding,
        visibility: wgpu::ShaderStages::COMPUTE,
        ty: wgpu::BindingType::Buffer {
            ty: wgpu::BufferBindingType::Storage { read_only },
            has_dynamic_offset: false,
            min_binding_size: None,
        },
        count: None,
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

impl WgpuBackend {
    /// Open the best adapter of `device` (`Vulkan` or `Metal`), build the shader and upload
    /// `model`.
    pub fn new(model: &CompiledModel, device: Device) -> Result<Self> {
        if !matches!(device, Device::Vulkan | Device::Metal) {
            return Err(Error::InvalidInput(format!(
                "the wgpu backend runs on 'vulkan' or 'metal', not '{}'",
                device.name()
            )));
        }
        let opened = open(device)?;
        let gpu = &opened.device;
        let packed = PackedModel::new(model);
        let (pipeline, layout, meta_buffer, ints, reals) =
            scoped(gpu, "building the shader", || {
                let module = gpu.create_shader_module(wgpu::ShaderModuleDescriptor {
                    label: Some("nll_grad.wgsl"),
                    source: wgpu::ShaderSource::Wgsl(nll_grad_source().into()),
                });
                let mut entries = vec![wgpu::BindGroupLayoutEntry {
                    binding: 0,
                    visibility: wgpu::ShaderStages::COMPUTE,
                    ty: wgpu::BindingType::Buffer {
                        ty: wgpu::BufferBindingType::Uniform,
                        has_dynamic_offset: false,
                        min_binding_size: None,
                    },
                    count: None,
                }];
                entries.extend((1..=5).map(|b| storage_entry(b, true)));
                entries.extend((6..=7).map(|b| storage_entry(b, false)));
                let layout = gpu.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
                    label: Some("nll_grad"),
                    entries: &entries,
                });
                let pipeline_layout = gpu.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
                    label: Some("nll_grad"),
                    bind_group_layouts: &[Some(&layout)],
                    immediate_size: 0,
                });
                let pipeline = gpu.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                    label: Some("nll_grad"),
                    layout: Some(&pipeline_layout),
                    module: &module,
                    entry_point: Some("nll_grad"),
                    compilation_options: wgpu::PipelineCompilationOptions::default(),
                    cache: None,
                });
                let init = |label, contents: &[u8], usage| {
                    gpu.create_buffer_init(&wgpu::util::BufferInitDescriptor {
                        label: Some(label),
                        contents,
                        usage,
                    })
                };
                let meta_buffer = init(
                    "meta",
                    bytemuck::bytes_of(&packed.meta),
                    wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
                );
                let ints = init(
                    "model ints",
                    bytemuck::cast_slice(&packed.ints),
                    wgpu::BufferUsages::STORAGE,
                );
                let reals = init(
                    "model reals",
                    bytemuck::cast_slice(&packed.reals),
                    wgpu::BufferUsages::STORAGE,
                );
                (pipeline, layout, meta_buffer, ints, reals)
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
                layout,
                meta: packed.meta,
                meta_buffer,
                ints,
                reals,
                params: Growable::new("parameters", storage),
                which: Growable::new("dataset of each evaluation", storage),
                scratch: Growable::new("scratch", wgpu::BufferUsages::STORAGE),
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

    /// One dispatch: evaluations `points` (f64 rows) against `datasets[which]`; results into
    /// `nll` and `grad`.
    fn dispatch(
        &self,
        gpu: &mut Gpu,
        datasets: &WgpuDatasets,
        points: &[f64],
        which: &[u32],
        nll: &mut [f64],
        grad: &mut [f64],
    ) -> Result<()> {
        let rows = which.len();
        let np = self.n_params;
        let params: Vec<f32> = points.iter().map(|&v| v as f32).collect();
        let groups = rows.clamp(1, MAX_WORKGROUPS);
        let mut meta = gpu.meta;
        meta.n_eval = rows as u32;
        let result_bytes = (rows * (1 + np) * 4) as u64;
        let Gpu {
            opened,
            pipeline,
            layout,
            meta_buffer,
            ints,
            reals,
            params: params_buffer,
            which: which_buffer,
            scratch,
            result,
            staging,
            ..
        } = gpu;
        let (device, queue) = (&opened.device, &opened.queue);
        let staging = scoped(device, "an NLL evaluation", || {
            let params_buffer = params_buffer.at_least(device, 4 * params.len() as u64);
            queue.write_buffer(params_buffer, 0, bytemuck::cast_slice(&params));
            let which_buffer = which_buffer.at_least(device, 4 * rows as u64);
            queue.write_buffer(which_buffer, 0, bytemuck::cast_slice(which));
            queue.write_buffer(meta_buffer, 0, bytemuck::bytes_of(&meta));
            let scratch =
                scratch.at_least(device, 4 * (groups * meta.scratch_stride as usize) as u64);
            let result = result.at_least(device, result_bytes);
            let staging = staging.at_least(device, result_bytes);
            let bind_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some("nll_grad"),
                layout,
                entries: &[
                    bind(0, meta_buffer),
                    bind(1, ints),
                    bind(2, reals),
                    bind(3, params_buffer),
                    bind(4, &datasets.buffer),
                    bind(5, which_buffer),
                    bind(6, scratch),
                    bind(7, result),
                ],
            });
            let mut encoder = device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("nll_grad"),
            });
            {
                let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                    label: Some("nll_grad"),
                    timestamp_writes: None,
                });
                pass.set_pipeline(pipeline);
                pass.set_bind_group(0, &bind_group, &[]);
                pass.dispatch_workgroups(groups as u32, 1, 1);
            }
            encoder.copy_buffer_to_buffer(result, 0, staging, 0, Some(result_bytes));
            queue.submit([encoder.finish()]);
            staging.clone()
        })?;
        let slice = staging.slice(..result_bytes);
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
        {
            let view = slice
                .get_mapped_range()
                .map_err(|e| Error::Device(format!("reading results back failed: {e}")))?;
            let values: &[f32] = bytemuck::cast_slice(&view);
            for (r, row) in values.chunks_exact(1 + np).enumerate() {
                nll[r] = row[0] as f64;
                for (g, &v) in grad[r * np..(r + 1) * np].iter_mut().zip(&row[1..]) {
                    *g = v as f64;
                }
            }
        }
        staging.unmap();
        Ok(())
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
        if points.len() != rows * np || nll.len() != rows || grad.len() != rows * np {
            return Err(Error::InvalidInput(format!(
                "batch of {rows} evaluations needs {} parameters, {rows} NLL and {} gradient slots",
                rows * np,
                rows * np
            )));
        }
        let mut gpu = self.gpu()?;
        let uploaded;
        let on_device = match datasets {
            Datasets::Resident(r) => r.storage::<WgpuDatasets>()?,
            Datasets::Host(host) => {
                uploaded = self.upload_rows(&gpu, host)?;
                &uploaded
            }
        };
        if let Some(&bad) = which.iter().find(|&&d| d as usize >= on_device.count) {
            return Err(Error::InvalidInput(format!(
                "dataset index {bad} out of range: {} datasets are on the GPU",
                on_device.count
            )));
        }
        // Dispatches within the adapter's binding size (results are the largest array).
        let limit = gpu.opened.device.limits().max_storage_buffer_binding_size;
        let per_dispatch = ((limit / (4 * (1 + np as u64))) as usize).clamp(1, 1 << 16);
        let mut start = 0;
        while start < rows {
            if stop.load(Ordering::Relaxed) {
                return Err(Error::Interrupted);
            }
            let end = (start + per_dispatch).min(rows);
            self.dispatch(
                &mut gpu,
                on_device,
                &points[start * np..end * np],
                &which[start..end],
                &mut nll[start..end],
                &mut grad[start * np..end * np],
            )?;
            start = end;
        }
        Ok(())
    }

    fn attach_signal(&self, _external: &ExternalSignal) -> Result<Resident> {
        Err(self.no_signal())
    }

    fn nll_grad_signal(&self, _attached: &Resident, _batch: SignalBatch) -> Result<()> {
        Err(self.no_signal())
    }
}

impl WgpuBackend {
    fn no_signal(&self) -> Error {
        Error::Device(format!(
            "differentiable evaluations (external signal yields) are not available on the f32 \
             '{}' backend yet; use 'cpu' or 'cuda'",
            self.device.name()
        ))
    }
}
