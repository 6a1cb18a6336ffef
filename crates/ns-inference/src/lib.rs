//! Statistical inference on the compiled model: the L-BFGS-B optimizer, maximum-likelihood fits
//! with uncertainties, test statistics, asymptotic hypothesis tests, upper limits and scans.
//!
//! The engine never prints or exits: results and typed errors only; long loops report progress
//! through a callback.

pub mod fit;
pub mod hypotest;
pub mod limits;
pub mod linalg;
pub mod optimizer;
pub mod rng;
pub mod scan;
pub mod stats;
pub mod toys;

pub use fit::{FitConfig, FitResult, Fitter};
pub use hypotest::{
    AsymptoticHypotest, Significance, TestStatistic, hypotest_asymptotic, significance,
    test_statistic,
};
pub use limits::{UpperLimit, upper_limit_root, upper_limit_scan};
pub use scan::{ProfileScan, profile_scan};
pub use toys::{ToyHypotest, hypotest_toys};
