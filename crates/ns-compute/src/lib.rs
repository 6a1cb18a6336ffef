//! Evaluators of a [`CompiledModel`](ns_core::CompiledModel).
//!
//! `cpu` is the f64 reference: NLL, analytic reverse-mode gradient and expected data, single
//! or batched over many parameter vectors and datasets (rayon, deterministic for any thread
//! count because every evaluation is serial and in a fixed order).

pub mod cpu;
pub mod cuda;
pub mod data;
pub mod detmath;
pub mod poisson;
pub mod rng;

pub use cpu::{CpuEvaluator, Scratch};
pub use data::PreparedData;
