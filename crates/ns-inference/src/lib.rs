//! Statistical inference on the compiled model: the L-BFGS-B optimizer, maximum-likelihood fits
//! with uncertainties, test statistics, hypothesis tests and limits.
//!
//! The engine never prints or exits: results and typed errors only.

pub mod linalg;
pub mod optimizer;
