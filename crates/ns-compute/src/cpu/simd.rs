//! Which instruction set the CPU evaluator runs: `ns_core::simd`, where the dense kernels of
//! inference and the unbinned PDFs choose theirs too.

pub use ns_core::simd::{Simd, available, best};
