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
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            max_input_bytes: DEFAULT_MAX_INPUT_MB << 20,
            kernel_cache: None,
            fit_min_blocks: None,
            cuda_blocks_per_sm: None,
            gpu_optimizer_on_host: false,
        }
    }
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
