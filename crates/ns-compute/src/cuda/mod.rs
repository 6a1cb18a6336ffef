//! The CUDA f64 evaluator: kernels compiled by NVRTC at run time for the device's architecture,
//! loaded through the driver API with dynamic loading (no CUDA toolkit at build time; the same
//! binary runs where no GPU exists, and [`has_cuda`] tells).

mod compile;
mod layout;
mod session;

pub use compile::{KernelOrigin, cache_dir};
pub use layout::KernelLayout;
pub use session::{
    CudaSession, DEVICE_MAX_MEMORY, DeviceDatasets, DeviceFitOptions, DeviceFitOutput,
    DeviceFitProblem, DeviceInfo, ToyEnsembleRates, cuda_unavailable, has_cuda,
};
