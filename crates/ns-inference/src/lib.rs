//! Statistical inference on the compiled model: the L-BFGS-B optimizer, maximum-likelihood fits
//! with uncertainties, test statistics, asymptotic hypothesis tests, upper limits and scans,
//! toys, and Bayesian posteriors by NUTS.
//!
//! The engine never prints or exits: results and typed errors only; long loops report progress
//! through a callback.

pub mod checks;
pub mod contour;
pub mod differentiable;
pub mod fit;
pub mod gof;
pub mod grid_scan;
pub mod hypotest;
pub mod intervals;
pub mod limits;
pub mod linalg;
pub mod mcmc_diagnostics;
pub mod nuts;
pub mod optimizer;
pub mod params;
pub mod posterior;
pub mod ranking;
pub mod scan;
pub mod stats;
pub mod toy_limit;
pub mod toys;
pub mod yields;

pub use fit::{AutoChoice, FitConfig, FitJob, FitResult, FitRun, Fitter, UNBOUNDED_BELOW};
pub use gof::{GoodnessOfFit, goodness_of_fit};
pub use grid_scan::{GridScan, profile_scan_grid};
pub use hypotest::{
    AsymptoticHypotest, ClsValues, Significance, TestStatistic, hypotest_asymptotic, significance,
    test_statistic,
};
pub use intervals::{ProfileInterval, profile_interval};
pub use limits::{UpperLimit, upper_limit_root, upper_limit_scan};
pub use ns_compute::{Device, Workload};
pub use posterior::{Posterior, PosteriorSpec, posterior};
pub use ranking::{Ranking, RankingEntry, ranking, ranking_batch};
pub use scan::{ProfileScan, profile_scan};
pub use toy_limit::{ToyLimitSpec, ToyUpperLimit, toy_upper_limit_auto, toy_upper_limit_scan};
pub use toys::{ToyHypotest, ToyTest, fit_toys, hypotest_toys, hypotest_toys_batch};
