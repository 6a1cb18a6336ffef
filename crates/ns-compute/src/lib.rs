//! Evaluators of a [`CompiledModel`](ns_core::CompiledModel) behind one [`Backend`] interface,
//! and the [`Likelihood`] interface through which inference sees a model (HistFactory's in
//! [`histfactory`]).
//!
//! `cpu` is the f64 reference: NLL, analytic reverse-mode gradient and expected data, single
//! or batched over many parameter vectors and datasets (rayon, deterministic for any thread
//! count because every evaluation is serial and in a fixed order). `cuda` is the f64 GPU backend.
//! [`device`] chooses between them; [`backend::open`] opens one.

pub mod backend;
pub mod cpu;
pub mod cuda;
pub mod data;
pub mod detmath;
pub mod device;
pub mod histfactory;
pub mod joint;
pub mod layout;
pub mod likelihood;
pub mod poisson;
pub mod rng;
pub mod signal;
pub mod toys;
#[cfg(feature = "wgpu")]
pub mod wgpu;

pub use backend::{
    Backend, Batching, Datasets, DeviceSlice, FitSignal, Objective, Precision, Resident,
    SampledToys, SignalBatch, Values, ValuesMut,
};
pub use cpu::{CpuBackend, CpuEvaluator, HessianPart, Scratch};
pub use data::{MAX_COUNT, PreparedData};
pub use device::{AdapterSummary, CudaGpus, Device, Inventory, Workload};
pub use likelihood::{ChannelYields, Likelihood, NegativeEmptyBins, Reach, Saturated};
pub use signal::ExternalSignal;
pub use toys::{ToyEnsembleRates, ToySampler};

/// The backends compiled into this build: "cuda" (the driver and NVRTC are loaded at run time,
/// so a build without a GPU still has it) and "wgpu" with the f32 backend's feature — neither in a
/// statically linked build, which cannot load the drivers.
pub fn compiled_features() -> Vec<&'static str> {
    let mut features = Vec::new();
    if !cuda::STATIC_BUILD {
        features.push("cuda");
        if cfg!(feature = "wgpu") {
            features.push("wgpu");
        }
    }
    features
}
