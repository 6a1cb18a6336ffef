//! nextstat core: the error type, the compiled-model layout that every evaluator reads, the
//! model's parameter metadata that inference reads, and the optimizer contract shared by the host
//! and device optimizers.
//!
//! This crate has no heavy dependencies; the translation layer (`ns-translate`) lowers a pyhf
//! workspace into [`CompiledModel`], and every backend in `ns-compute` evaluates that same layout.

pub mod contained;
pub mod error;
pub mod files;
pub mod interp;
pub mod lanes;
pub mod layout;
pub mod model;
pub mod monomial;
pub mod optim;
pub mod settings;
pub mod simd;

pub use error::{Error, Result};
pub use files::FileAccess;
pub use interp::{HistosysCode, InterpCodes, NormsysCode};
pub use layout::CompiledModel;
pub use model::{ChannelInfo, Constraint, HistFactoryModel, ParameterSet};
