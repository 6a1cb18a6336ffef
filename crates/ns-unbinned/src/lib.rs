//! Event-level (unbinned) likelihoods: HS3 models as ROOT writes them, parametric PDFs
//! normalised over the observables' ranges, events from the HS3 file or from Parquet.

pub mod expr;
pub mod shapes;
pub mod scalar;
