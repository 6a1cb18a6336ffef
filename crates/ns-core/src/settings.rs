//! Engine settings that come from the environment. A front door (the CLI, the Python package, the
//! server) reads them once with [`Settings::from_environment`] and [`install`]s them; engine code
//! reads [`settings`] and never the environment itself, so a library user (or a test) sets them
//! explicitly and a long-lived process is not reconfigured behind its back. Without an
//! installation the defaults hold — among them no kernel disk cache, so a Rust program that wants
//! the CLI's behaviour installs `Settings::from_environment()` first.

use std::path::PathBuf;
use std::sync::OnceLock;

/// The largest JSON input read unless configured: 4096 MB.
pub const DEFAULT_MAX_INPUT_MB: u64 = 4096;

/// Settings of the engine, with their environment variables.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// Largest JSON input read, in bytes (`NEXTSTAT_MAX_INPUT_MB`).
    pub max_input_bytes: u64,
    /// Where compiled CUDA kernels are cached (`NEXTSTAT_KERNEL_CACHE`, else
    /// `$XDG_CACHE_HOME/nextstat`, else `~/.cache/nextstat`); `None`: no cache.
    pub kernel_cache: Option<PathBuf>,
    /// The fit kernel's register budget as resident blocks per multiprocessor, 1–16
    /// (`NEXTSTAT_FIT_MIN_BLOCKS`; docs/gpu.md); `None`: the measured default.
    pub fit_min_blocks: Option<u32>,
    /// Blocks per multiprocessor of batched evaluations (`NEXTSTAT_CUDA_BLOCKS_PER_SM`); `None`:
    /// the occupancy the driver reports.
    pub cuda_blocks_per_sm: Option<u32>,
    /// Keep the optimizer of device fits on the host (`NEXTSTAT_GPU_OPTIMIZER=host`), for
    /// comparison.
    pub gpu_optimizer_on_host: bool,
    /// ONNX Runtime's library, for flow PDFs (`ORT_DYLIB_PATH`, else the `onnxruntime` package
    /// of the active virtual environment, `$VIRTUAL_ENV`); `None`: flows cannot be evaluated.
    pub onnxruntime: Option<PathBuf>,
    /// Execution providers of flow PDFs, tried in order (`NEXTSTAT_FLOW_PROVIDERS`, e.g.
    /// `tensorrt,cuda,cpu`); the CPU provider is always the last resort.
    pub flow_providers: Vec<String>,
    /// TensorRT's engine cache (`NEXTSTAT_TRT_CACHE`; default: `trt` under the kernel cache).
    pub trt_cache: Option<PathBuf>,
    /// Whether TensorRT may build fp16 engines (`NEXTSTAT_TRT_FP16=1`).
    pub trt_fp16: bool,
    /// TensorRT's optimisation profile over the event batch: min, opt, max events
    /// (`NEXTSTAT_TRT_PROFILE=1,65536,1048576`).
    pub trt_profile: [u64; 3],
    /// The widest SIMD instruction set the CPU evaluator may use (`NEXTSTAT_CPU_SIMD=baseline`,
    /// `avx2` or `avx512`), for benchmarks: every choice gives the same bits. `None`: the widest
    /// the CPU offers.
    pub cpu_simd: Option<CpuSimd>,
}

/// Instruction sets the CPU evaluator is compiled for, narrowest first. `Baseline` is what the
/// target guarantees (SSE2 on x86-64, NEON on aarch64).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CpuSimd {
    Baseline,
    Avx2,
    Avx512,
}

impl CpuSimd {
    pub fn name(self) -> &'static str {
        match self {
            CpuSimd::Baseline => "baseline",
            CpuSimd::Avx2 => "avx2",
            CpuSimd::Avx512 => "avx512",
        }
    }

    pub fn from_name(name: &str) -> crate::Result<CpuSimd> {
        [CpuSimd::Baseline, CpuSimd::Avx2, CpuSimd::Avx512]
            .into_iter()
            .find(|s| s.name() == name.trim().to_ascii_lowercase())
            .ok_or_else(|| {
                crate::Error::InvalidInput(format!(
                    "CPU instruction set '{name}' is not one of baseline, avx2, avx512"
                ))
            })
    }
}

/// TensorRT's default optimisation profile (events per batch: min, opt, max).
pub const DEFAULT_TRT_PROFILE: [u64; 3] = [1, 65_536, 1 << 20];

impl Default for Settings {
    fn default() -> Self {
        Settings {
            max_input_bytes: DEFAULT_MAX_INPUT_MB << 20,
            kernel_cache: None,
            fit_min_blocks: None,
            cuda_blocks_per_sm: None,
            gpu_optimizer_on_host: false,
            onnxruntime: None,
            flow_providers: vec!["cpu".into()],
            trt_cache: None,
            trt_fp16: false,
            trt_profile: DEFAULT_TRT_PROFILE,
            cpu_simd: None,
        }
    }
}

/// The ONNX Runtime library of the `onnxruntime` package in a virtual environment (the newest
/// `capi/libonnxruntime.so.*` / `.dylib` under `lib/python3*/site-packages`).
fn onnxruntime_in(venv: &std::path::Path) -> Option<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(venv.join("lib"))
        .ok()?
        .flatten()
        .map(|e| e.path().join("site-packages/onnxruntime/capi"))
        .filter_map(|capi| std::fs::read_dir(capi).ok())
        .flat_map(|d| d.flatten().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("libonnxruntime.so.") || n == "libonnxruntime.dylib")
        })
        .collect();
    found.sort();
    found.pop()
}

impl Settings {
    /// The settings the environment asks for (unset or unreadable values: the defaults). Only
    /// front doors call this.
    pub fn from_environment() -> Self {
        let var = |name: &str| std::env::var(name).ok();
        let number = |name: &str| var(name).and_then(|v| v.trim().parse::<u64>().ok());
        let kernel_cache = std::env::var_os("NEXTSTAT_KERNEL_CACHE")
            .map(PathBuf::from)
            .or_else(|| {
                std::env::var_os("XDG_CACHE_HOME")
                    .map(PathBuf::from)
                    .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
                    .map(|base| base.join("nextstat"))
            });
        let trt_cache = std::env::var_os("NEXTSTAT_TRT_CACHE")
            .map(PathBuf::from)
            .or_else(|| kernel_cache.as_ref().map(|k| k.join("trt")));
        Settings {
            max_input_bytes: number("NEXTSTAT_MAX_INPUT_MB")
                .unwrap_or(DEFAULT_MAX_INPUT_MB)
                .saturating_mul(1 << 20),
            kernel_cache,
            fit_min_blocks: number("NEXTSTAT_FIT_MIN_BLOCKS")
                .filter(|b| (1..=16).contains(b))
                .map(|b| b as u32),
            cuda_blocks_per_sm: number("NEXTSTAT_CUDA_BLOCKS_PER_SM")
                .filter(|&b| b > 0 && b <= u32::MAX as u64)
                .map(|b| b as u32),
            gpu_optimizer_on_host: var("NEXTSTAT_GPU_OPTIMIZER").is_some_and(|v| v == "host"),
            onnxruntime: std::env::var_os("ORT_DYLIB_PATH")
                .map(PathBuf::from)
                .or_else(|| {
                    std::env::var_os("VIRTUAL_ENV").and_then(|v| onnxruntime_in(v.as_ref()))
                }),
            flow_providers: var("NEXTSTAT_FLOW_PROVIDERS")
                .map(|v| {
                    v.split(',')
                        .map(|p| p.trim().to_ascii_lowercase())
                        .filter(|p| !p.is_empty())
                        .collect()
                })
                .unwrap_or_else(|| vec!["cpu".into()]),
            trt_cache,
            trt_fp16: var("NEXTSTAT_TRT_FP16").is_some_and(|v| v == "1" || v == "true"),
            trt_profile: var("NEXTSTAT_TRT_PROFILE")
                .and_then(|v| {
                    let n: Vec<u64> = v.split(',').filter_map(|x| x.trim().parse().ok()).collect();
                    <[u64; 3]>::try_from(n).ok()
                })
                .filter(|[lo, opt, hi]| 0 < *lo && lo <= opt && opt <= hi)
                .unwrap_or(DEFAULT_TRT_PROFILE),
            cpu_simd: var("NEXTSTAT_CPU_SIMD").and_then(|v| CpuSimd::from_name(&v).ok()),
        }
    }
}

static INSTALLED: OnceLock<Settings> = OnceLock::new();

/// Make `settings` the engine's for the rest of the process; the first installation wins (a
/// later one returns `false`).
pub fn install(settings: Settings) -> bool {
    INSTALLED.set(settings).is_ok()
}

/// The installed settings, or the defaults where a front door installed none.
pub fn settings() -> &'static Settings {
    static DEFAULT: OnceLock<Settings> = OnceLock::new();
    INSTALLED
        .get()
        .unwrap_or_else(|| DEFAULT.get_or_init(Settings::default))
}
