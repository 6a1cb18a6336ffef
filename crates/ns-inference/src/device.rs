//! Which device runs the work: the CPU, a CUDA GPU, or `auto` — the faster of the two for the
//! workload, from the crossover measured in `docs/benchmarks.md`.

use ns_compute::PreparedData;
use ns_compute::cuda::{DeviceDatasets, has_cuda};
use ns_core::{Error, Result};
use ns_translate::HistFactoryModel;

/// A compute device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Device {
    Cpu,
    Cuda,
    /// The faster of CPU and CUDA for the workload; the CPU where no GPU exists.
    Auto,
}

/// The shape of the work, for `Device::Auto`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    /// One fit after another (fit, scan, upper limit, asymptotic hypotest): latency-bound, each
    /// step a single evaluation.
    Sequential,
    /// Many independent fits at once (toys, ranking): throughput-bound.
    Batch { fits: usize },
}

/// Fewest fits in a batch for which the GPU beats the CPU (`bench/gpu_bench.sh`; see
/// `docs/benchmarks.md`). Below it `auto` stays on the CPU.
const AUTO_MIN_BATCH_FITS: usize = 256;
/// Smallest model (main bins × parameters) on which a batch is worth the GPU.
const AUTO_MIN_MODEL_SIZE: usize = 200;

impl Device {
    pub fn from_name(name: &str) -> Result<Self> {
        match name {
            "cpu" => Ok(Device::Cpu),
            "cuda" => Ok(Device::Cuda),
            "auto" => Ok(Device::Auto),
            "metal" => Err(Error::Device(
                "the Metal (f32) backend is not available in this build; use 'cpu' or 'cuda'"
                    .into(),
            )),
            other => Err(Error::InvalidInput(format!(
                "unknown device '{other}' (cpu, cuda, auto)"
            ))),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Device::Cpu => "cpu",
            Device::Cuda => "cuda",
            Device::Auto => "auto",
        }
    }

    /// The concrete device for `workload` on `model`: `Auto` picks CUDA only for large batches
    /// on models big enough to fill the GPU, and only where a GPU exists.
    pub fn resolve(self, model: &HistFactoryModel, workload: Workload) -> Device {
        match self {
            Device::Auto => {
                let size = model.compiled.n_main * model.n_params();
                match workload {
                    Workload::Batch { fits }
                        if fits >= AUTO_MIN_BATCH_FITS
                            && size >= AUTO_MIN_MODEL_SIZE
                            && has_cuda() =>
                    {
                        Device::Cuda
                    }
                    _ => Device::Cpu,
                }
            }
            d => d,
        }
    }
}

/// The datasets of a batch: on the host, or already on the device.
pub(crate) enum BatchData<'a> {
    Host(&'a [PreparedData]),
    Device(DeviceDatasets),
}

impl BatchData<'_> {
    pub(crate) fn host(&self, index: usize) -> Result<&PreparedData> {
        match self {
            BatchData::Host(h) => h.get(index).ok_or_else(|| {
                Error::InvalidInput(format!("dataset {index} of {} requested", h.len()))
            }),
            BatchData::Device(_) => Err(Error::InvalidInput(
                "device datasets cannot be evaluated on the CPU".into(),
            )),
        }
    }
}
