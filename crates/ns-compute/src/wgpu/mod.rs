//! The f32 GPU backend: WGSL compute shaders through wgpu, on Vulkan (Linux/Windows: NVIDIA, AMD,
//! Intel, and Mesa's lavapipe on any CPU) and Metal (macOS). WGSL has no f64 and no float atomics:
//! the shader works in f32 on the deviance form of the NLL (O(χ²), not O(Σ n ln n)), sums in fixed
//! trees, and exchanges parameters and results with the host in f64, where the data-only constant
//! is added. Fits run in lockstep from the host (one batched evaluation per optimizer step), told
//! the f32 objective's noise ([`crate::Precision::objective_noise`]) and settled in f64 on the
//! host ([`crate::Precision::settle_pg_tol`]).

mod abi;
mod adapter;
mod backend;
mod packed;

pub use adapter::adapters;
pub use backend::WgpuBackend;
