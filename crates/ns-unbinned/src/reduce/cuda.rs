//! The mixture NLL reduction on a CUDA GPU (`kernels/reduce.cu`): log-probabilities from the
//! host (uploaded), from device memory of this engine, or from a device pointer produced
//! elsewhere on the GPU — a PyTorch CUDA tensor, ONNX Runtime's I/O binding — in f64 or f32,
//! read where they lie (no host copy). A pointer from elsewhere is checked against the driver's
//! record of its allocation before any kernel reads it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, DeviceRepr, DriverError, LaunchConfig,
    PushKernelArg, ValidAsZeroBits,
};
use ns_core::{Error, Result};

use super::{MixtureLayout, MixtureNll};
use crate::flow::runtime::Precision;

const SOURCE: &str = include_str!("../../kernels/reduce.cu");
/// Threads per block (the kernel's NS_BLOCK).
const BLOCK: u32 = 256;
/// The kernel's NS_EVENTS_PER_THREAD.
const EVENTS_PER_THREAD: usize = 8;

/// The -D options of a reduction kernel for `processes` processes: the launch shape is defined
/// here only.
fn defines(processes: usize) -> [String; 3] {
    [
        format!("-DNS_P={processes}"),
        format!("-DNS_BLOCK={BLOCK}"),
        format!("-DNS_EVENTS_PER_THREAD={EVENTS_PER_THREAD}"),
    ]
}
/// The most blocks per dataset: beyond, threads take more events each (10⁷ events fill it).
const MAX_BLOCKS: usize = 4096;

fn driver(what: &str, e: DriverError) -> Error {
    Error::Device(format!("CUDA {what} failed: {e}"))
}

/// Per-event log-probabilities on the device.
pub enum DeviceLogProbs<'a> {
    /// Device memory of this engine (f64).
    Slice(&'a CudaSlice<f64>),
    /// A device address from elsewhere on this GPU (its owner keeps it alive and finished
    /// writing it before the call), of the given precision.
    Pointer { address: u64, precision: Precision },
}

/// Weights: none, on the host, or on the device.
pub enum Weights<'a> {
    None,
    Host(&'a [f64]),
    Device(&'a CudaSlice<f64>),
}

struct Kernels {
    f64: CudaFunction,
    f32: CudaFunction,
    finish: CudaFunction,
}

/// Device buffers kept between calls, grown as needed: allocating per call costs more than
/// the reduction at small sizes (a memory pool gives its memory back at every synchronisation,
/// a PyTorch caller's included).
#[derive(Default)]
struct Buffers {
    offsets: Option<CudaSlice<i64>>,
    yields: Option<CudaSlice<f64>>,
    weights: Option<CudaSlice<f64>>,
    partials: Option<CudaSlice<f64>>,
    sums: Option<CudaSlice<f64>>,
}

/// `slot`'s buffer, replaced by a zeroed one of `len` values where it is shorter.
fn ensure<'a, T: DeviceRepr + ValidAsZeroBits>(
    stream: &Arc<CudaStream>,
    slot: &'a mut Option<CudaSlice<T>>,
    len: usize,
) -> Result<&'a mut CudaSlice<T>> {
    if slot.as_ref().is_none_or(|s| s.len() < len) {
        *slot = None;
        *slot = Some(
            stream
                .alloc_zeros(len.max(1))
                .map_err(|e| driver("allocation", e))?,
        );
    }
    Ok(slot.as_mut().expect("allocated above"))
}

/// `values` into `slot`'s buffer (grown as needed).
fn fill<'a, T: DeviceRepr + ValidAsZeroBits>(
    stream: &Arc<CudaStream>,
    slot: &'a mut Option<CudaSlice<T>>,
    values: &[T],
) -> Result<&'a mut CudaSlice<T>> {
    let buffer = ensure(stream, slot, values.len())?;
    stream
        .memcpy_htod(values, buffer)
        .map_err(|e| driver("upload", e))?;
    Ok(buffer)
}

/// The reduction kernels on one GPU, compiled per number of processes on first use.
pub struct MixtureReducer {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    kernels: Mutex<HashMap<usize, Arc<Kernels>>>,
    buffers: Mutex<Buffers>,
    /// Host log-probabilities' device copy, kept while calls give the same count (a fit's
    /// evaluations); taken before `buffers` when both are held.
    host_logp: Mutex<Option<CudaSlice<f64>>>,
    pub name: String,
}

impl MixtureReducer {
    /// The reducer on GPU `ordinal` (its primary context: the one PyTorch and ONNX Runtime use,
    /// so their device pointers are valid here).
    pub fn new(ordinal: usize) -> Result<Self> {
        if !ns_compute::cuda::has_cuda() {
            return Err(ns_compute::cuda::cuda_unavailable());
        }
        let count = ns_compute::cuda::device_count()?;
        if ordinal >= count {
            return Err(Error::Device(format!(
                "no CUDA device {ordinal} (this machine has {count})"
            )));
        }
        let ctx = ns_compute::cuda::shared_context(ordinal)
            .map_err(|e| driver(&format!("opening device {ordinal}"), e))?;
        let name = ctx.name().map_err(|e| driver("name query", e))?;
        Ok(MixtureReducer {
            stream: ctx.default_stream(),
            ctx,
            kernels: Mutex::new(HashMap::new()),
            buffers: Mutex::new(Buffers::default()),
            host_logp: Mutex::new(None),
            name,
        })
    }

    fn kernels(&self, processes: usize) -> Result<Arc<Kernels>> {
        let mut all = self.kernels.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(k) = all.get(&processes) {
            return Ok(k.clone());
        }
        let (module, _) = ns_compute::cuda::load_program(&self.ctx, SOURCE, &defines(processes))?;
        let get = |name: &str| {
            module
                .load_function(name)
                .map_err(|e| driver(&format!("kernel lookup of {name}"), e))
        };
        let k = Arc::new(Kernels {
            f64: get("mixture_partials_f64")?,
            f32: get("mixture_partials_f32")?,
            finish: get("mixture_finish")?,
        });
        all.insert(processes, k.clone());
        Ok(k)
    }

    /// `values` on this device (e.g. log-probabilities to keep there across calls).
    pub fn upload(&self, values: &[f64]) -> Result<CudaSlice<f64>> {
        let v: &[f64] = if values.is_empty() { &[0.0] } else { values };
        self.stream.clone_htod(v).map_err(|e| driver("upload", e))
    }

    /// Host log-probabilities, uploaded, then reduced as [`MixtureReducer::reduce`] does.
    pub fn reduce_host(
        &self,
        layout: &MixtureLayout,
        logp: &[f64],
        weights: Weights,
        yields: &[f64],
        values: &[f64],
    ) -> Result<Vec<MixtureNll>> {
        layout.check(logp.len(), yields, values, weight_len(&weights))?;
        let mut held = self.host_logp.lock().unwrap_or_else(|e| e.into_inner());
        // Exactly as long as the log-probabilities: `reduce` checks a slice's length.
        if held.as_ref().is_none_or(|b| b.len() != logp.len().max(1)) {
            *held = None;
        }
        let on_device = fill(&self.stream, &mut held, logp)?;
        self.reduce(
            layout,
            DeviceLogProbs::Slice(on_device),
            weights,
            yields,
            values,
        )
    }

    /// Every dataset's NLL and gradient from log-probabilities on the device.
    pub fn reduce(
        &self,
        layout: &MixtureLayout,
        logp: DeviceLogProbs,
        weights: Weights,
        yields: &[f64],
        values: &[f64],
    ) -> Result<Vec<MixtureNll>> {
        let (p, row) = (layout.processes, layout.events());
        let precision = match &logp {
            DeviceLogProbs::Slice(s) => {
                let len = if row * p == 0 { 1 } else { row * p };
                if s.len() != len {
                    return Err(Error::InvalidInput(format!(
                        "{} log-probabilities on the device for {p} processes × {row} events",
                        s.len()
                    )));
                }
                Precision::F64
            }
            DeviceLogProbs::Pointer { precision, .. } => *precision,
        };
        layout.check(p * row, yields, values, weight_len(&weights))?;
        if let DeviceLogProbs::Pointer { address, precision } = &logp {
            let bytes = p * row * if *precision == Precision::F64 { 8 } else { 4 };
            self.check_pointer(*address, bytes)?;
        }
        let kernels = self.kernels(p)?;
        let t = layout.datasets();
        let largest = layout
            .offsets
            .windows(2)
            .map(|w| w[1] - w[0])
            .max()
            .unwrap_or(0);
        let blocks = largest
            .div_ceil(BLOCK as usize * EVENTS_PER_THREAD)
            .clamp(1, MAX_BLOCKS);
        let offsets: Vec<i64> = layout.offsets.iter().map(|&o| o as i64).collect();
        let mut held = self.buffers.lock().unwrap_or_else(|e| e.into_inner());
        let Buffers {
            offsets: offsets_slot,
            yields: yields_slot,
            weights: weights_slot,
            partials: partials_slot,
            sums: sums_slot,
        } = &mut *held;
        let offsets = &*fill(&self.stream, offsets_slot, &offsets)?;
        let yields_d = &*fill(&self.stream, yields_slot, yields)?;
        let weights_d: Option<&CudaSlice<f64>> = match weights {
            Weights::None => None,
            Weights::Host(w) => Some(&*fill(&self.stream, weights_slot, w)?),
            Weights::Device(w) => Some(w),
        };
        let partials = ensure(&self.stream, partials_slot, t * blocks * (p + 1))?;
        let sums = ensure(&self.stream, sums_slot, t * (p + 1))?;
        let row = row as i64;
        let cfg = LaunchConfig {
            grid_dim: (blocks as u32, t as u32, 1),
            block_dim: (BLOCK, 1, 1),
            shared_mem_bytes: 0,
        };
        let null: u64 = 0;
        let launched = {
            let kernel = match precision {
                Precision::F64 => &kernels.f64,
                Precision::F32 => &kernels.f32,
            };
            let mut b = self.stream.launch_builder(kernel);
            let address;
            match &logp {
                DeviceLogProbs::Slice(s) => b.arg(*s),
                DeviceLogProbs::Pointer { address: a, .. } => {
                    address = *a;
                    b.arg(&address)
                }
            };
            b.arg(&row).arg(offsets).arg(yields_d);
            match weights_d {
                Some(w) => b.arg(w),
                None => b.arg(&null),
            };
            b.arg(&mut *partials);
            // SAFETY: arguments match mixture_partials_*'s parameters; the log-probabilities
            // span p × row values (checked above: a slice's length, a pointer's allocation),
            // offsets end at row, yields hold t × p values, weights row values.
            unsafe { b.launch(cfg) }
        };
        launched.map_err(|e| driver("launch of mixture_partials", e))?;
        let blocks_i = blocks as i32;
        let mut b = self.stream.launch_builder(&kernels.finish);
        b.arg(&*partials).arg(&blocks_i).arg(&mut *sums);
        let cfg = LaunchConfig {
            grid_dim: (t as u32, 1, 1),
            block_dim: (BLOCK, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: partials hold t × blocks × (p + 1) values, sums t × (p + 1).
        unsafe { b.launch(cfg) }.map_err(|e| driver("launch of mixture_finish", e))?;
        let sums = self
            .stream
            .clone_dtoh(&sums.slice(0..t * (p + 1)))
            .map_err(|e| driver("download", e))?;
        super::defined(
            (0..t)
                .map(|d| layout.finish(d, &sums[d * (p + 1)..(d + 1) * (p + 1)], yields, values))
                .collect(),
        )
    }

    /// `address` lies in a device allocation of this GPU's context with `bytes` bytes from it.
    fn check_pointer(&self, address: u64, bytes: usize) -> Result<()> {
        self.ctx
            .bind_to_thread()
            .map_err(|e| driver("context binding", e))?;
        let (mut base, mut size) = (0u64, 0usize);
        // SAFETY: writes two values through pointers to live locals; the driver validates the
        // address itself and fails for memory it did not allocate in this context.
        let r =
            unsafe { cudarc::driver::sys::cuMemGetAddressRange_v2(&mut base, &mut size, address) };
        if r.result().is_err() || address == 0 {
            return Err(Error::InvalidInput(format!(
                "the address {address:#x} is not device memory of CUDA device '{}' (a CUDA tensor of another device, or host memory?)",
                self.name
            )));
        }
        let end = base + size as u64;
        if address + bytes as u64 > end {
            return Err(Error::InvalidInput(format!(
                "the log-probabilities would span {bytes} bytes from {address:#x}, past the end of their allocation ({} bytes left)",
                end - address
            )));
        }
        Ok(())
    }
}

fn weight_len(w: &Weights) -> Option<usize> {
    match w {
        Weights::None => None,
        Weights::Host(h) => Some(h.len()),
        Weights::Device(d) => Some(d.len()),
    }
}

#[cfg(test)]
mod tests {
    /// Run by `scripts/test.sh` with NVRTC on LD_LIBRARY_PATH (no GPU needed), as the event
    /// kernel's compile test is.
    #[test]
    #[ignore = "needs NVRTC (pip nvidia-cuda-nvrtc) on LD_LIBRARY_PATH"]
    fn the_reduction_kernels_compile_for_every_prebuilt_architecture() {
        for processes in [1, super::super::MAX_PROCESSES] {
            for arch in ns_compute::cuda::PREBUILT_ARCHS {
                let cubin =
                    ns_compute::cuda::compile_for(super::SOURCE, &super::defines(processes), arch)
                        .unwrap_or_else(|e| panic!("sm_{arch}, {processes} processes: {e}"));
                assert!(!cubin.is_empty());
            }
        }
    }
}
