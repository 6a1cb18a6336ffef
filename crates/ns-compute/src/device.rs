//! Which device runs the work: the CPU, a CUDA GPU, or `auto` — the faster of the two for the
//! workload, from the crossover measured in `docs/benchmarks.md`.

use ns_core::{CompiledModel, Error, Result};

use crate::cuda::has_cuda;

/// A compute device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Device {
    Cpu,
    /// One CUDA GPU, or several of one host sharing each batch.
    Cuda(CudaGpus),
    /// The f32 wgpu backend on a Vulkan adapter (Linux, Windows; lavapipe on any CPU).
    Vulkan,
    /// The f32 wgpu backend on Apple's Metal.
    Metal,
    /// The faster of CPU and CUDA for the workload; the CPU where no GPU exists.
    Auto,
}

/// The CUDA GPUs a device names: `cuda` is GPU 0, `cuda:1` GPU 1, `cuda:0,1` both, `cuda:all`
/// every GPU of the host. Several GPUs split each batch (toys, refits) between them, each GPU a
/// contiguous share; results are the same bits as on one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CudaGpus {
    /// Bit `i` set: GPU `i`.
    Set(u64),
    All,
}

impl CudaGpus {
    /// GPU 0, what `cuda` names.
    pub const FIRST: CudaGpus = CudaGpus::Set(1);

    /// The part of a device name after `cuda:`: `all`, or ordinals separated by commas.
    pub fn parse(spec: &str) -> Result<Self> {
        if spec == "all" {
            return Ok(CudaGpus::All);
        }
        let mut set = 0u64;
        for part in spec.split(',') {
            let ordinal: u32 = part.trim().parse().map_err(|_| {
                Error::InvalidInput(format!(
                    "'cuda:{spec}': '{part}' is not a GPU number (cuda:0, cuda:0,1, cuda:all)"
                ))
            })?;
            if ordinal >= 64 {
                return Err(Error::InvalidInput(format!(
                    "'cuda:{spec}': GPU {ordinal} is beyond the 64 a host can name"
                )));
            }
            if set & (1 << ordinal) != 0 {
                return Err(Error::InvalidInput(format!(
                    "'cuda:{spec}' names GPU {ordinal} twice"
                )));
            }
            set |= 1 << ordinal;
        }
        Ok(CudaGpus::Set(set))
    }

    /// The GPU numbers, ascending, after checking each against the `count` the host has.
    pub fn ordinals(self, count: usize) -> Result<Vec<usize>> {
        match self {
            CudaGpus::All if count == 0 => Err(crate::cuda::cuda_unavailable()),
            CudaGpus::All => Ok((0..count).collect()),
            CudaGpus::Set(set) => {
                let ordinals: Vec<usize> = (0..64).filter(|i| set & (1u64 << i) != 0).collect();
                match ordinals.iter().find(|&&i| i >= count) {
                    Some(i) => Err(Error::Device(format!(
                        "CUDA GPU {i} was asked for, but this host has {count} (nextstat devices lists them)"
                    ))),
                    None => Ok(ordinals),
                }
            }
        }
    }

    /// The name that parses back to this set.
    pub fn name(self) -> String {
        match self {
            CudaGpus::All => "cuda:all".into(),
            CudaGpus::FIRST => "cuda".into(),
            CudaGpus::Set(set) => {
                let ordinals: Vec<String> = (0..64)
                    .filter(|i| set & (1u64 << i) != 0)
                    .map(|i| i.to_string())
                    .collect();
                format!("cuda:{}", ordinals.join(","))
            }
        }
    }
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

/// `auto` considers the GPU for a batch whose fits × main bins × parameters reaches this times
/// the CPU threads (4·10⁶ on 16); smaller batches stay on the CPU unweighed. On a 16-thread H200
/// host the published likelihoods' batches below it were all faster on the CPU (500 toys of 3L
/// eRJR, 5.5·10⁵: 0.28 s against 0.58 s), and 2000 toys of the 3ℓ on-shell likelihood (2·10⁷)
/// were faster on the GPU; a batch above it is weighed by a timed fit (ns-inference's
/// `Fitter::auto_device`, docs/benchmarks.md).
const AUTO_MIN_BATCH_WORK_PER_THREAD: usize = 250_000;

impl Device {
    pub fn from_name(name: &str) -> Result<Self> {
        if let Some(spec) = name.strip_prefix("cuda:") {
            return Ok(Device::Cuda(CudaGpus::parse(spec)?));
        }
        match name {
            "cpu" => Ok(Device::Cpu),
            "cuda" => Ok(Device::Cuda(CudaGpus::FIRST)),
            "auto" => Ok(Device::Auto),
            "vulkan" => Ok(Device::Vulkan),
            "metal" => Ok(Device::Metal),
            other => Err(Error::InvalidInput(format!(
                "unknown device '{other}' (cpu, cuda, cuda:N, cuda:N,M, cuda:all, vulkan, metal, auto)"
            ))),
        }
    }

    /// The name that parses back to this device (`cuda:0,1`, where [`name`](Self::name) says
    /// `cuda`).
    pub fn spec(self) -> String {
        match self {
            Device::Cuda(gpus) => gpus.name(),
            other => other.name().into(),
        }
    }

    /// The kind of device: cpu, cuda, vulkan, metal or auto.
    pub fn name(self) -> &'static str {
        match self {
            Device::Cpu => "cpu",
            Device::Cuda(_) => "cuda",
            Device::Vulkan => "vulkan",
            Device::Metal => "metal",
            Device::Auto => "auto",
        }
    }

    /// Whether `workload` on `model` is a batch large enough that a GPU could repay opening a
    /// session, by its size alone: initialises no CUDA driver (0.1–0.2 s of the ~0.5 s a process
    /// pays before its first device fit). Sequential work (single fits, scans, limits) never is:
    /// the CPU is faster for it on every model measured.
    pub fn worth_weighing(model: &CompiledModel, workload: Workload) -> bool {
        match workload {
            Workload::Batch { fits } => {
                fits.saturating_mul(model.n_main)
                    .saturating_mul(model.n_params)
                    >= AUTO_MIN_BATCH_WORK_PER_THREAD.saturating_mul(rayon::current_num_threads())
            }
            Workload::Sequential => false,
        }
    }
}
