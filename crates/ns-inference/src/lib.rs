//! Statistical inference on the compiled model: the L-BFGS-B optimizer, maximum-likelihood fits
//! with uncertainties, test statistics, asymptotic hypothesis tests, upper limits and scans.
//!
//! The engine never prints or exits: results and typed errors only; long loops report progress
//! through a callback.

pub mod checks;
pub mod device;
pub mod fit;
pub mod gof;
pub mod gpu;
mod hessian;
pub mod hypotest;
pub mod intervals;
pub mod limits;
pub mod linalg;
mod newton;
pub mod optimizer;
pub mod ranking;
pub mod report;
pub mod request;
pub mod scan;
pub mod stats;
pub mod toys;

pub use device::{Device, Workload};
pub use fit::{FitConfig, FitJob, FitResult, FitRun, Fitter};
pub use gof::{GoodnessOfFit, goodness_of_fit};
pub use gpu::{fit_toys_batch_gpu, fit_toys_from_data_gpu, hypotest_qtilde_toys_gpu};
pub use hypotest::{
    AsymptoticHypotest, ClsValues, Significance, TestStatistic, hypotest_asymptotic, significance,
    test_statistic,
};
pub use intervals::{ProfileInterval, profile_interval};
pub use limits::{UpperLimit, upper_limit_root, upper_limit_scan};
pub use ranking::{Ranking, RankingEntry, ranking};
pub use scan::{ProfileScan, profile_scan};
pub use toys::{ToyHypotest, fit_toys, hypotest_toys};
