//! The CPU f64 reference: the evaluator (NLL, analytic reverse-mode gradient, expected data) and
//! the CPU backend over it (batches in parallel with rayon; every evaluation is serial and in a
//! fixed order, so results do not depend on the thread count).

mod backend;
mod evaluator;
mod hessian;
mod plan;
pub mod simd;
mod stats;

pub use backend::CpuBackend;
pub use evaluator::{CpuEvaluator, Scratch};
pub use hessian::HessianPart;
pub(crate) use plan::Plan;
