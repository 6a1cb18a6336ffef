//! One request layer for every front door: a typed request per inference verb, one [`Request::run`]
//! that dispatches it to the engine, and a typed [`Outcome`] whose JSON is built in `report.rs`.
//! The CLI builds requests from its flags, the Python package from keyword arguments (as JSON,
//! deserialised here), and the HTTP server to come from request bodies; none of them dispatches
//! verbs itself.

use ns_compute::PreparedData;
use ns_core::Result;
use ns_translate::HistFactoryModel;
use serde::Deserialize;
use serde_json::Value;

use crate::device::Workload;
use crate::fit::{FitConfig, FitResult, Fitter};
use crate::gof::{GoodnessOfFit, goodness_of_fit};
use crate::hypotest::{
    AsymptoticHypotest, Significance, TestStatistic, hypotest_asymptotic, significance,
};
use crate::limits::{UpperLimit, upper_limit_root, upper_limit_scan};
use crate::ranking::{Ranking, ranking};
use crate::report;
use crate::scan::{ProfileScan, profile_scan};
use crate::toys::{ToyHypotest, hypotest_toys};

fn qtilde() -> String {
    "qtilde".into()
}

fn default_level() -> f64 {
    0.05
}

/// Relative tolerance of the upper-limit root finding (on μ).
const LIMIT_RTOL: f64 = 1e-6;

/// An inference request: the verb and its own arguments. The fit configuration (init, bounds,
/// fixed parameters, tolerance) and the device travel beside it, since every verb shares them.
/// As JSON: `{"verb": "hypotest", "mu": 1.0, "test_stat": "qtilde"}`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(tag = "verb", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// Maximum-likelihood fit; with uncertainties (Hessian) if asked.
    Fit {
        #[serde(default)]
        uncertainties: bool,
    },
    /// Asymptotic CLs (or p0 for q0) at `mu`.
    Hypotest {
        mu: f64,
        #[serde(default = "qtilde")]
        test_stat: String,
    },
    /// Toy-based CLs at `mu`.
    HypotestToys {
        mu: f64,
        #[serde(default = "qtilde")]
        test_stat: String,
        n_toys: usize,
        #[serde(default)]
        seed: u64,
    },
    /// Observed and expected upper limits: root finding, or a linear scan over `scan`.
    UpperLimit {
        #[serde(default = "default_level")]
        level: f64,
        #[serde(default)]
        scan: Option<Vec<f64>>,
    },
    /// Discovery p0 and Z.
    Significance,
    /// Profile likelihood of `parameter` (the POI when `None`) at `values`.
    ProfileScan {
        #[serde(default)]
        parameter: Option<String>,
        values: Vec<f64>,
    },
    /// Pulls, constraints and impacts of every nuisance parameter.
    Ranking,
    /// Goodness of fit against the saturated model.
    Gof,
}

/// The typed result of a [`Request`].
#[derive(Clone, Debug)]
pub enum Outcome {
    Fit(FitResult),
    Hypotest {
        test_stat: String,
        result: AsymptoticHypotest,
    },
    HypotestToys {
        test_stat: String,
        result: ToyHypotest,
    },
    UpperLimit {
        level: f64,
        result: UpperLimit,
    },
    Significance(Significance),
    ProfileScan(ProfileScan),
    Ranking(Ranking),
    Gof(GoodnessOfFit),
}

impl Request {
    /// The shape of the work, for choosing a device (`auto`).
    pub fn workload(&self, model: &HistFactoryModel) -> Workload {
        match self {
            Request::HypotestToys { n_toys, .. } => Workload::Batch {
                fits: n_toys.saturating_mul(4),
            },
            Request::Ranking => Workload::Batch {
                fits: model.n_params().saturating_mul(4),
            },
            _ => Workload::Sequential,
        }
    }

    /// Steps the progress callback of [`run`](Self::run) counts up to, where known in advance
    /// (0: unknown, e.g. the hypotests of a root-finding limit).
    pub fn progress_steps(&self, model: &HistFactoryModel) -> u64 {
        match self {
            Request::HypotestToys { n_toys, .. } => (*n_toys as u64).saturating_mul(2),
            Request::Ranking => 4 * model.n_params() as u64,
            Request::ProfileScan { values, .. } => values.len() as u64,
            Request::UpperLimit {
                scan: Some(grid), ..
            } => grid.len() as u64,
            _ => 0,
        }
    }

    /// Run the request with `fitter` on `data`. `progress` receives the number of steps done.
    pub fn run(
        &self,
        fitter: &Fitter,
        data: &PreparedData,
        config: &FitConfig,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Outcome> {
        let model = fitter.model();
        Ok(match self {
            Request::Fit { uncertainties } => {
                let config = FitConfig {
                    uncertainties: *uncertainties,
                    ..config.clone()
                };
                Outcome::Fit(fitter.fit(data, &config)?)
            }
            Request::Hypotest { mu, test_stat } => Outcome::Hypotest {
                result: hypotest_asymptotic(
                    fitter,
                    *mu,
                    data,
                    config,
                    TestStatistic::from_name(test_stat)?,
                )?,
                test_stat: test_stat.clone(),
            },
            Request::HypotestToys {
                mu,
                test_stat,
                n_toys,
                seed,
            } => Outcome::HypotestToys {
                result: hypotest_toys(
                    fitter,
                    *mu,
                    data,
                    config,
                    TestStatistic::from_name(test_stat)?,
                    *n_toys,
                    *seed,
                    progress,
                )?,
                test_stat: test_stat.clone(),
            },
            Request::UpperLimit { level, scan } => {
                let mut step = |k: usize| progress(k);
                let result = match scan {
                    Some(grid) => upper_limit_scan(fitter, data, config, *level, grid, &mut step)?,
                    None => upper_limit_root(fitter, data, config, *level, LIMIT_RTOL, &mut step)?,
                };
                Outcome::UpperLimit {
                    level: *level,
                    result,
                }
            }
            Request::Significance => Outcome::Significance(significance(fitter, data, config)?),
            Request::ProfileScan { parameter, values } => {
                let index = match parameter {
                    Some(name) => model
                        .parameter_index(name)
                        .map_err(ns_core::Error::InvalidInput)?,
                    None => model.poi()?,
                };
                Outcome::ProfileScan(profile_scan(
                    fitter,
                    index,
                    values,
                    data,
                    config,
                    &mut |k| progress(k),
                )?)
            }
            Request::Ranking => Outcome::Ranking(ranking(fitter, data, config, progress)?),
            Request::Gof => Outcome::Gof(goodness_of_fit(fitter, data, config)?),
        })
    }
}

impl Outcome {
    /// The result's JSON (`report.rs`); `matrices` adds a fit's covariance and correlation.
    pub fn report(&self, model: &HistFactoryModel, matrices: bool) -> Value {
        match self {
            Outcome::Fit(fit) => report::fit(model, fit, matrices),
            Outcome::Hypotest { test_stat, result } => report::hypotest(test_stat, result),
            Outcome::HypotestToys { test_stat, result } => report::hypotest_toys(test_stat, result),
            Outcome::UpperLimit { level, result } => report::upper_limit(result, *level),
            Outcome::Significance(result) => report::significance(result),
            Outcome::ProfileScan(result) => report::scan(result),
            Outcome::Ranking(result) => report::ranking(model, result),
            Outcome::Gof(result) => report::gof(result),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_deserialise_from_the_json_front_doors_send() {
        let r: Request = serde_json::from_str(r#"{"verb": "hypotest", "mu": 1.5}"#).unwrap();
        assert_eq!(
            r,
            Request::Hypotest {
                mu: 1.5,
                test_stat: "qtilde".into()
            }
        );
        let r: Request =
            serde_json::from_str(r#"{"verb": "upper_limit", "scan": [0, 1, 2]}"#).unwrap();
        assert_eq!(
            r,
            Request::UpperLimit {
                level: 0.05,
                scan: Some(vec![0.0, 1.0, 2.0])
            }
        );
        let unknown = serde_json::from_str::<Request>(r#"{"verb": "fit", "mu": 1}"#);
        assert!(
            unknown
                .unwrap_err()
                .to_string()
                .contains("unknown field `mu`")
        );
        let missing = serde_json::from_str::<Request>(r#"{"verb": "hypotest_toys", "mu": 1}"#);
        assert!(missing.unwrap_err().to_string().contains("n_toys"));
    }
}
