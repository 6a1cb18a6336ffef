//! Which device runs the work: the CPU, a CUDA GPU, or `auto` — the faster of the two for the
//! workload, from the crossover measured in `docs/benchmarks.md`.

use ns_core::{CompiledModel, Error, Result};

use crate::cuda::has_cuda;

/// A compute device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Device {
    Cpu,
    Cuda,
    /// The f32 wgpu backend on a Vulkan adapter (Linux, Windows; lavapipe on any CPU).
    Vulkan,
    /// The f32 wgpu backend on Apple's Metal.
    Metal,
    /// The faster of CPU and CUDA for the workload; the CPU where no GPU exists.
    Auto,
}

/// A wgpu adapter as `nextstat devices` lists it.
#[derive(Clone, Debug, PartialEq)]
pub struct AdapterSummary {
    pub name: String,
    /// "vulkan" or "metal".
    pub backend: String,
    /// "discrete", "integrated", "cpu" (a software driver such as lavapipe), "virtual", "other".
    pub kind: String,
    pub driver: String,
}

/// What this machine offers: CPU threads, CUDA devices, f32 (wgpu) adapters — so a user can
/// see why `auto` chose what it chose.
#[derive(Clone, Debug, PartialEq)]
pub struct Inventory {
    pub cpu_threads: usize,
    /// CUDA device names, or why there are none.
    pub cuda: std::result::Result<Vec<String>, String>,
    /// Vulkan and Metal adapters, or why there are none (a build without the backend).
    pub adapters: std::result::Result<Vec<AdapterSummary>, String>,
}

impl Inventory {
    pub fn probe() -> Self {
        let cuda = if has_cuda() {
            crate::cuda::device_names().map_err(|e| e.to_string())
        } else {
            Err(crate::cuda::cuda_unavailable().to_string())
        };
        #[cfg(feature = "wgpu")]
        let adapters = Ok(crate::wgpu::adapters());
        #[cfg(not(feature = "wgpu"))]
        let adapters = Err("this build has no f32 GPU backend (the 'wgpu' feature)".to_string());
        Inventory {
            cpu_threads: rayon::current_num_threads(),
            cuda,
            adapters,
        }
    }
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

/// `auto` sends a batch to the GPU when fits × main bins × parameters reaches this. Measured on
/// an H100 host (docs/benchmarks.md): 4000 tHq fits (41 bins × 184 parameters, 3·10⁷) take
/// 2.7 s on 16 CPU threads and 0.33 s on the GPU plus 0.25 s to open the CUDA session; 4000
/// fits of an 8-parameter, 4-bin model (10⁵) take 0.07 s on the CPU, less than the session
/// alone. The threshold (CPU time ≈ 0.7 s by the tHq rate) keeps `auto` from ever being slower.
const AUTO_MIN_BATCH_WORK: usize = 8_000_000;

impl Device {
    pub fn from_name(name: &str) -> Result<Self> {
        match name {
            "cpu" => Ok(Device::Cpu),
            "cuda" => Ok(Device::Cuda),
            "auto" => Ok(Device::Auto),
            "vulkan" => Ok(Device::Vulkan),
            "metal" => Ok(Device::Metal),
            other => Err(Error::InvalidInput(format!(
                "unknown device '{other}' (cpu, cuda, vulkan, metal, auto)"
            ))),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Device::Cpu => "cpu",
            Device::Cuda => "cuda",
            Device::Vulkan => "vulkan",
            Device::Metal => "metal",
            Device::Auto => "auto",
        }
    }

    /// The concrete device for `workload` on `model`: `Auto` picks CUDA only for batches large
    /// enough to repay opening a session, and only where a GPU exists. Sequential work (single
    /// fits, scans, limits) stays on the CPU, which is faster for it on every model measured.
    pub fn resolve(self, model: &CompiledModel, workload: Workload) -> Device {
        match self {
            Device::Auto => match workload {
                Workload::Batch { fits }
                    if fits
                        .saturating_mul(model.n_main)
                        .saturating_mul(model.n_params)
                        >= AUTO_MIN_BATCH_WORK
                        && has_cuda() =>
                {
                    Device::Cuda
                }
                _ => Device::Cpu,
            },
            d => d,
        }
    }
}
