//! nextstat core: the error type and the compiled-model layout that every evaluator reads.
//!
//! This crate has no heavy dependencies; the translation layer (`ns-translate`) lowers a pyhf
//! workspace into [`CompiledModel`], and every backend in `ns-compute` evaluates that same layout.

pub mod error;
pub mod interp;
pub mod layout;

pub use error::{Error, Result};
pub use interp::{HistosysCode, InterpCodes, NormsysCode};
pub use layout::CompiledModel;
