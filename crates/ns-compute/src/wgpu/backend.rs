//! The wgpu backend: the model packed and uploaded once, datasets resident in f32, batches of NLL
//! + gradient evaluations dispatched as one shader run each (one workgroup per evaluation).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

use ns_core::{CompiledModel, Error, Result};
use rayon::prelude::*;
use wgpu::util::DeviceExt;

use super::abi::{Meta, nll_grad_source};
use super::adapter::{Opened, open};
use super::packed::PackedModel;
use crate::backend::{
    Backend, Batching, Datasets, Precision, Resident, SignalBatch, Values, ValuesMut, check_batch,
    not_finite,
};
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

/// A packed model on the adapter: its uniform and its two arrays.
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
        let (pipeline, layout, uploaded) = scoped(gpu, "building the shader", || {
            let module = gpu.create_shader_module(wgpu::ShaderModuleDescriptor {
                label: Some("nll_grad.wgsl"),
                source: wgpu::ShaderSource::Wgsl(nll_grad_source().into()),
            });
            let storage = |read_only| wgpu::BufferBindingType::Storage { read_only };
            // 0 meta, 1 ints, 2 reals, 3 params, 4 data, 5 which, 6 scratch, 7 result, 8 signal.
            let mut entries = vec![buffer_entry(0, wgpu::BufferBindingType::Uniform)];
            entries.extend((1..=5).map(|b| buffer_entry(b, storage(true))));
            entries.extend((6..=7).map(|b| buffer_entry(b, storage(false))));
            entries.push(buffer_entry(8, storage(true)));
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
            (pipeline, layout, upload_packed(gpu, &packed))
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
                model: uploaded,
                packed,
                params: Growable::new("parameters", storage),
                signal: Growable::new("signal yields", storage),
                signal_data: None,
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
        let Gpu {
            opened,
            pipeline,
            layout,
            model: plain,
            params: params_buffer,
            signal: signal_buffer,
            which: which_buffer,
            scratch,
            result,
            staging,
            ..
        } = gpu;
        let model = match model {
            Model::Plain => &*plain,
            Model::With(attached) => attached,
        };
        let mut meta = model.meta;
        meta.n_eval = rows as u32;
        let width = 1 + self.n_params + meta.n_signal as usize;
        let result_bytes = (rows * width * 4) as u64;
        let groups = rows.clamp(1, MAX_WORKGROUPS);
        let (device, queue) = (&opened.device, &opened.queue);
        let staging = scoped(device, "an NLL evaluation", || {
            let params_buffer = params_buffer.at_least(device, 4 * params.len() as u64);
            queue.write_buffer(params_buffer, 0, bytemuck::cast_slice(params));
            let signal_buffer = signal_buffer.at_least(device, 4 * signal.len() as u64);
            if !signal.is_empty() {
                queue.write_buffer(signal_buffer, 0, bytemuck::cast_slice(signal));
            }
            let which_buffer = which_buffer.at_least(device, 4 * rows as u64);
            queue.write_buffer(which_buffer, 0, bytemuck::cast_slice(which));
            queue.write_buffer(&model.meta_buffer, 0, bytemuck::bytes_of(&meta));
            let scratch =
                scratch.at_least(device, 4 * (groups * meta.scratch_stride as usize) as u64);
            let result = result.at_least(device, result_bytes);
            let staging = staging.at_least(device, result_bytes);
            let bind_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some("nll_grad"),
                layout,
                entries: &[
                    bind(0, &model.meta_buffer),
                    bind(1, &model.ints),
                    bind(2, &model.reals),
                    bind(3, params_buffer),
                    bind(4, &datasets.buffer),
                    bind(5, which_buffer),
                    bind(6, scratch),
                    bind(7, result),
                    bind(8, signal_buffer),
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
        let values = {
            let view = slice
                .get_mapped_range()
                .map_err(|e| Error::Device(format!("reading results back failed: {e}")))?;
            bytemuck::cast_slice::<u8, f32>(&view).to_vec()
        };
        staging.unmap();
        Ok(values)
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
