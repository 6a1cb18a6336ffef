//! Checking the CUDA libraries before anything calls into them.
//!
//! cudarc loads `libcuda` and `libnvrtc` at run time and resolves each entry point on its first
//! call, panicking ("Missing symbol cuInit") where the library lacks it: a stub `libcuda.so.1`
//! (containers, CI images), or a driver older than the CUDA 13 API the kernels are built for.
//! So every entry point the engine reaches is looked up here first, once, and a library that
//! lacks one is reported as unusable — by name and path — instead of crashing the process.

use std::sync::OnceLock;

/// Every driver entry point the engine reaches through cudarc (contexts, modules, memory,
/// launches, events, errors) or calls itself: the 35 that the CUDA parity and
/// differentiable suites resolved on an H100 (driver 580.159.04, 2026-11-25), traced by
/// `bench/gpu_hardening.sh`, and cuMemGetAddressRange_v2, which checks a device pointer handed in
/// from elsewhere (the flow reduction); rerun it when CUDA code changes (`docs/gpu.md`).
pub(crate) const DRIVER_SYMBOLS: [&str; 36] = [
    "cuInit",
    "cuDriverGetVersion",
    "cuGetErrorName",
    "cuGetErrorString",
    "cuDeviceGet",
    "cuDeviceGetCount",
    "cuDeviceGetName",
    "cuDeviceGetAttribute",
    "cuDeviceTotalMem_v2",
    "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxRelease_v2",
    "cuCtxGetCurrent",
    "cuCtxSetCurrent",
    "cuCtxSynchronize",
    "cuModuleLoadData",
    "cuModuleGetFunction",
    "cuModuleUnload",
    "cuLaunchKernel",
    "cuStreamSynchronize",
    "cuStreamWaitEvent",
    "cuEventCreate",
    "cuEventRecord",
    "cuEventDestroy_v2",
    "cuMemAlloc_v2",
    "cuMemFree_v2",
    "cuMemAllocAsync",
    "cuMemFreeAsync",
    "cuMemsetD8Async",
    "cuMemGetInfo_v2",
    "cuMemcpyHtoDAsync_v2",
    "cuMemcpyDtoHAsync_v2",
    "cuMemcpyDtoDAsync_v2",
    "cuPointerGetAttributes",
    "cuMemGetAddressRange_v2",
    "cuFuncGetAttribute",
    "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags",
];

/// Every NVRTC entry point the kernel compiler calls.
pub(crate) const NVRTC_SYMBOLS: [&str; 8] = [
    "nvrtcVersion",
    "nvrtcCreateProgram",
    "nvrtcCompileProgram",
    "nvrtcGetProgramLogSize",
    "nvrtcGetProgramLog",
    "nvrtcGetCUBINSize",
    "nvrtcGetCUBIN",
    "nvrtcDestroyProgram",
];

/// Why a library that loads cannot be used: the first entry points it lacks, with its path.
fn check(
    library: &libloading::Library,
    fragment: &str,
    symbols: &[&str],
    hint: &str,
) -> Option<String> {
    let missing: Vec<&str> = symbols
        .iter()
        .copied()
        // SAFETY: only looks the name up; the pointer is never called or dereferenced.
        .filter(|name| unsafe { library.get::<*const ()>(name.as_bytes()) }.is_err())
        .collect();
    if missing.is_empty() {
        return None;
    }
    let shown = missing
        .iter()
        .take(3)
        .copied()
        .collect::<Vec<_>>()
        .join(", ");
    let more = if missing.len() > 3 {
        format!(" and {} more", missing.len() - 3)
    } else {
        String::new()
    };
    Some(format!(
        "the library at {} lacks {shown}{more}: {hint}",
        loaded_path(fragment).unwrap_or_else(|| format!("lib{fragment}.so")),
    ))
}

/// The file a loaded library was mapped from (Linux: `/proc/self/maps`), for messages.
fn loaded_path(fragment: &str) -> Option<String> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    let needle = format!("lib{fragment}");
    maps.lines()
        .filter_map(|line| line.split_whitespace().nth(5))
        .find(|path| {
            std::path::Path::new(path)
                .file_name()
                .is_some_and(|f| f.to_string_lossy().starts_with(&needle))
        })
        .map(str::to_string)
}

/// One library cudarc loads at run time, as checked here.
struct Checked {
    /// Whether it loads (cudarc's `is_culib_present`).
    present: unsafe fn() -> bool,
    /// The loaded library (cudarc's `culib`; panics where it does not load).
    library: unsafe fn() -> &'static libloading::Library,
    fragment: &'static str,
    symbols: &'static [&'static str],
    what: &'static str,
    hint: &'static str,
}

impl Checked {
    fn problem(&self) -> Option<String> {
        // SAFETY: is_culib_present only tries to load the library; culib() then returns it.
        if !unsafe { (self.present)() } {
            return None;
        }
        check(
            unsafe { (self.library)() },
            self.fragment,
            self.symbols,
            self.hint,
        )
        .map(|reason| format!("{} cannot be used: {reason}", self.what))
    }
}

/// Why the CUDA driver library that loads cannot be used (`None`: it has every entry point, or
/// there is none — [`super::session::has_cuda`] tells those apart). Checked once per process.
pub(crate) fn driver_problem() -> Option<&'static str> {
    static PROBLEM: OnceLock<Option<String>> = OnceLock::new();
    PROBLEM
        .get_or_init(|| {
            Checked {
                present: cudarc::driver::sys::is_culib_present,
                library: cudarc::driver::sys::culib,
                fragment: "cuda",
                symbols: &DRIVER_SYMBOLS,
                what: "the CUDA driver",
                hint: "it is not a working NVIDIA driver (a stub, or a driver older than CUDA \
                       13.0, version 580); install or update the driver, or remove it from the \
                       library path",
            }
            .problem()
        })
        .as_deref()
}

/// Why the NVRTC library that loads cannot be used (`None`: it is complete, or absent).
pub(crate) fn nvrtc_problem() -> Option<&'static str> {
    static PROBLEM: OnceLock<Option<String>> = OnceLock::new();
    PROBLEM
        .get_or_init(|| {
            Checked {
                present: cudarc::nvrtc::sys::is_culib_present,
                library: cudarc::nvrtc::sys::culib,
                fragment: "nvrtc",
                symbols: &NVRTC_SYMBOLS,
                what: "NVRTC",
                hint: "install NVRTC 13 (pip install nvidia-cuda-nvrtc)",
            }
            .problem()
        })
        .as_deref()
}
