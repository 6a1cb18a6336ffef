//! The CUDA f64 backend: kernels compiled by NVRTC at run time for the device's architecture,
//! loaded through the driver API with dynamic loading (no CUDA toolkit at build time; the same
//! binary runs where no GPU exists, and [`has_cuda`] tells).

mod abi;
mod backend;
mod compile;
mod library;
mod multi;
mod session;

pub use abi::DEVICE_MAX_MEMORY;
pub use backend::CudaBackend;
pub use compile::{
    KernelOrigin, PREBUILT_ARCHS, cache_dir, compile_for, load_program, prebuild_kernels,
    prebuilt_archs,
};
pub use multi::MultiCudaBackend;
pub use session::{
    CudaSession, DeviceDatasets, DeviceInfo, DeviceSignal, STATIC_BUILD, StartupPhases,
    context_open, cuda_driver_absent, cuda_driver_problem, cuda_unavailable, device_count,
    device_names, has_cuda, shared_context,
};
