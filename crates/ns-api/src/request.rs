//! One request layer for every front door: a typed request per inference verb, one [`Request::run`]
//! that dispatches it to the engine, and a typed [`Outcome`] whose JSON is built in `report.rs`.
//! The CLI builds requests from its flags, the Python package from keyword arguments (as JSON,
//! deserialised here), and the HTTP server to come from request bodies; none of them dispatches
//! verbs itself.

use ns_compute::{Likelihood, PreparedData};
use ns_core::{Error, Result};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use ns_compute::Workload;
use ns_inference::fit::{FitConfig, FitResult, Fitter};
use ns_inference::gof::{GoodnessOfFit, goodness_of_fit};
use ns_inference::grid_scan::{GridScan, level_of_cl, profile_scan_grid, refine_near_contours};
use ns_inference::hypotest::{
    AsymptoticHypotest, Significance, TestStatistic, hypotest_asymptotic, significance,
};
use ns_inference::intervals::{ProfileInterval, profile_interval};
use ns_inference::limits::{UpperLimit, upper_limit_root, upper_limit_scan};
use ns_inference::params::{bounds_from_json, params_from_json};
use ns_inference::posterior::{PoiPrior, Posterior, PosteriorSpec, posterior};
use ns_inference::ranking::{Ranking, ranking};
use ns_inference::scan::{ProfileScan, profile_scan};
use ns_inference::toy_limit::{
    ToyLimitSpec, ToyUpperLimit, toy_upper_limit_auto, toy_upper_limit_scan,
};
use ns_inference::toys::{ToyHypotest, fit_toys, hypotest_toys};
use ns_inference::yields::{FitYields, fit_yields};

/// The CLs level of an upper limit unless asked: 95 % CL.
pub const DEFAULT_CLS_LEVEL: f64 = 0.05;

/// The test statistic of hypotests unless asked (pyhf's default).
pub const DEFAULT_TEST_STATISTIC: TestStatistic = TestStatistic::QTilde;

fn qtilde() -> TestStatistic {
    DEFAULT_TEST_STATISTIC
}

fn default_level() -> f64 {
    DEFAULT_CLS_LEVEL
}

/// The POI's prior of a posterior, as a call names it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Prior {
    #[default]
    Flat,
    InverseSqrt,
}

/// A posterior's chains, warmup and draws per chain, credibility, target acceptance and tree
/// depth unless asked (Stan's defaults; a 95% credible upper limit).
pub const DEFAULT_CHAINS: usize = 4;
pub const DEFAULT_ITERATIONS: usize = 1000;
pub const DEFAULT_CREDIBILITY: f64 = 0.95;

fn default_chains() -> usize {
    DEFAULT_CHAINS
}

fn default_iterations() -> usize {
    DEFAULT_ITERATIONS
}

fn default_credibility() -> f64 {
    DEFAULT_CREDIBILITY
}

fn default_target_accept() -> f64 {
    0.8
}

fn default_tree_depth() -> usize {
    10
}

/// Relative tolerance of the upper-limit root finding (on μ).
const LIMIT_RTOL: f64 = 1e-6;

/// An inference request: the verb and its own arguments. The fit configuration (init, bounds,
/// fixed parameters, tolerance) and the device travel beside it, since every verb shares them.
/// As JSON: `{"verb": "hypotest", "mu": 1.0, "test_stat": "qtilde"}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "verb", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// twice_nll, the NLL gradient and the expected data at parameter points: `pars` is one
    /// point (a list in pyhf order, or an object by parameter name) or a list of points; the
    /// suggested init when absent.
    Eval {
        #[serde(default)]
        pars: Option<Value>,
    },
    /// Maximum-likelihood fit; with uncertainties (Hessian) if asked, and profile-likelihood
    /// (MINOS-like) intervals of the parameters named in `minos` ("all": every free one).
    Fit {
        #[serde(default)]
        uncertainties: bool,
        #[serde(default)]
        minos: Vec<String>,
        /// Report the covariance and correlation matrices (n×n: large on large models).
        #[serde(default)]
        covariance: bool,
        /// Report pre- and post-fit yields per channel and sample with the uncertainty of the
        /// total (implies uncertainties; binned models).
        #[serde(default)]
        yields: bool,
    },
    /// Asymptotic CLs (or p0 for q0) at `mu`.
    Hypotest {
        mu: f64,
        #[serde(default = "qtilde")]
        test_stat: TestStatistic,
    },
    /// Toy-based CLs at `mu`.
    HypotestToys {
        mu: f64,
        #[serde(default = "qtilde")]
        test_stat: TestStatistic,
        n_toys: usize,
        #[serde(default)]
        seed: u64,
        /// Report every toy's test statistic (both ensembles; what `nextstat plot toys` draws).
        #[serde(default)]
        teststats: bool,
    },
    /// Observed and expected upper limits: root finding, or a linear scan over `scan`. With
    /// `n_toys`, CLs from that many toys per hypothesis at each μ — of `scan`, or of a grid built
    /// around the asymptotic limits and refined near each crossing — every μ drawing from `seed`.
    UpperLimit {
        #[serde(default = "default_level")]
        level: f64,
        #[serde(default)]
        scan: Option<Vec<f64>>,
        #[serde(default)]
        n_toys: Option<usize>,
        #[serde(default)]
        seed: u64,
    },
    /// Discovery p0 and Z.
    Significance,
    /// Profile likelihood of `parameter` (the POI when `None`) at `values`; or, with `parameters`
    /// and `grid` (a list of values for each), over the grid of their values (the last parameter
    /// varying fastest), with, for two parameters, the contours at the confidence levels `cl`
    /// (68.27% and 95.45% unless given).
    ProfileScan {
        #[serde(default)]
        parameter: Option<String>,
        #[serde(default)]
        values: Vec<f64>,
        #[serde(default)]
        parameters: Vec<String>,
        #[serde(default)]
        grid: Vec<Vec<f64>>,
        #[serde(default)]
        cl: Option<Vec<f64>>,
        /// Rounds of refinement near the contours (two parameters): each halves the grid
        /// intervals a contour crosses and fits the added points.
        #[serde(default)]
        refine: usize,
    },
    /// Pulls, constraints and impacts of every nuisance parameter.
    Ranking,
    /// Goodness of fit against the saturated model.
    Gof,
    /// The Bayesian posterior by NUTS: `chains` chains of `warmup` adaptation iterations and
    /// `draws` draws, flat priors within the free parameters' bounds and the constraint terms as
    /// the nuisance parameters' priors; the POI's credible upper limit and central interval at
    /// `cl`; every draw in the report with `keep_draws`.
    Posterior {
        #[serde(default = "default_chains")]
        chains: usize,
        #[serde(default = "default_iterations")]
        warmup: usize,
        #[serde(default = "default_iterations")]
        draws: usize,
        #[serde(default)]
        seed: u64,
        #[serde(default = "default_credibility")]
        cl: f64,
        #[serde(default = "default_target_accept")]
        target_accept: f64,
        #[serde(default = "default_tree_depth")]
        max_tree_depth: usize,
        #[serde(default)]
        keep_draws: bool,
        /// The POI's prior: `flat` (within its bounds) or `inverse_sqrt` (∝ 1/√μ).
        #[serde(default)]
        prior: Prior,
    },
    /// `n_toys` toys drawn at `pars` (a list in parameter order), each fitted in one batch: the
    /// toy datasets and their fits.
    FitToys {
        pars: Vec<f64>,
        n_toys: usize,
        #[serde(default)]
        seed: u64,
    },
    /// The given datasets (rows: the observations, or the observations then the auxiliary
    /// data) fitted in one batch, each from `init` and within `bounds` (one for all or one per
    /// dataset, in parameter order; the call's fit options where absent).
    FitDatasets {
        datasets: Vec<Vec<f64>>,
        #[serde(default)]
        init: Option<Vec<Vec<f64>>>,
        /// Each a list of `[low, high]` in parameter order (`null` or `"inf"`: no bound).
        #[serde(default)]
        bounds: Option<Vec<Value>>,
    },
}

/// The typed result of a [`Request`].
#[derive(Clone, Debug)]
pub enum Outcome {
    /// Evaluated points; `list` when a list of points was asked for.
    Eval {
        points: Vec<EvalPoint>,
        list: bool,
    },
    Fit {
        fit: FitResult,
        minos: Vec<(String, ProfileInterval)>,
        yields: Option<FitYields>,
    },
    Hypotest {
        test_stat: TestStatistic,
        result: AsymptoticHypotest,
    },
    HypotestToys {
        test_stat: TestStatistic,
        result: ToyHypotest,
        /// Whether the report lists every toy's test statistic.
        teststats: bool,
    },
    UpperLimit {
        level: f64,
        result: UpperLimit,
    },
    UpperLimitToys(ToyUpperLimit),
    Significance(Significance),
    ProfileScan(ProfileScan),
    /// A grid scan and its contours' confidence levels.
    GridScan {
        scan: GridScan,
        cl: Vec<f64>,
    },
    Ranking(Ranking),
    Gof(GoodnessOfFit),
    Posterior {
        result: Box<Posterior>,
        keep_draws: bool,
    },
    /// Toy datasets and their fits, toy by toy.
    FitToys {
        toys: Vec<PreparedData>,
        fits: Vec<FitResult>,
    },
    FitDatasets(Vec<FitResult>),
}

impl Request {
    /// The shape of the work, for choosing a device (`auto`).
    pub fn workload(&self, model: &dyn Likelihood) -> Workload {
        match self {
            Request::HypotestToys { n_toys, .. } => Workload::Batch {
                fits: n_toys.saturating_mul(4),
            },
            Request::Ranking => Workload::Batch {
                fits: model.n_params().saturating_mul(4),
            },
            Request::FitToys { n_toys, .. } => Workload::Batch { fits: *n_toys },
            Request::UpperLimit {
                n_toys: Some(n_toys),
                scan,
                ..
            } => Workload::Batch {
                // A built grid has tens of μ values (toy_limit::toy_upper_limit_auto).
                fits: n_toys
                    .saturating_mul(4)
                    .saturating_mul(scan.as_ref().map_or(30, Vec::len)),
            },
            Request::FitDatasets { datasets, .. } => Workload::Batch {
                fits: datasets.len(),
            },
            _ => Workload::Sequential,
        }
    }

    /// What a posterior request asks the sampler (`None` for other requests).
    pub fn posterior_spec(&self) -> Option<PosteriorSpec> {
        match self {
            Request::Posterior {
                chains,
                warmup,
                draws,
                seed,
                cl,
                target_accept,
                max_tree_depth,
                prior,
                ..
            } => Some(PosteriorSpec {
                chains: *chains,
                warmup: *warmup,
                draws: *draws,
                seed: *seed,
                cl: *cl,
                target_accept: *target_accept,
                max_tree_depth: *max_tree_depth,
                prior: match prior {
                    Prior::Flat => PoiPrior::Flat,
                    Prior::InverseSqrt => PoiPrior::InverseSqrt,
                },
            }),
            _ => None,
        }
    }

    /// Whether the request tests the parameter of interest (its report names it as `"poi"`).
    pub fn tests_poi(&self) -> bool {
        matches!(
            self,
            Request::Hypotest { .. }
                | Request::HypotestToys { .. }
                | Request::UpperLimit { .. }
                | Request::Significance
        )
    }

    /// Steps the progress callback of [`run`](Self::run) counts up to, where known in advance
    /// (0: unknown, e.g. the hypotests of a root-finding limit).
    pub fn progress_steps(&self, model: &dyn Likelihood) -> u64 {
        match self {
            Request::HypotestToys { n_toys, .. } => (*n_toys as u64).saturating_mul(2),
            Request::Ranking => 4 * model.n_params() as u64,
            // A refined grid's points are known only as it refines.
            Request::ProfileScan { refine, .. } if *refine > 0 => 0,
            Request::ProfileScan { values, grid, .. } => {
                grid.iter()
                    .map(Vec::len)
                    .reduce(usize::saturating_mul)
                    .unwrap_or(values.len()) as u64
            }
            Request::FitToys { n_toys, .. } => *n_toys as u64,
            Request::FitDatasets { datasets, .. } => datasets.len() as u64,
            Request::Posterior {
                chains,
                warmup,
                draws,
                ..
            } => (*chains as u64).saturating_mul(warmup.saturating_add(*draws) as u64),
            Request::UpperLimit {
                scan: Some(grid),
                n_toys,
                ..
            } => (grid.len() as u64)
                .saturating_mul(n_toys.map_or(1, |n| (n as u64).saturating_mul(2))),
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
            Request::Eval { pars } => eval_points(fitter, data, pars.as_ref())?,
            Request::Fit {
                uncertainties,
                minos,
                yields,
                ..
            } => {
                let config = FitConfig {
                    uncertainties: *uncertainties || *yields,
                    ..config.clone()
                };
                let fit = fitter.fit_global(data, &config)?;
                // The same refusal as every other verb where the likelihood is undefined at the
                // start, not a result with `converged: false`.
                ns_inference::checks::started(fitter, &fit, data)?;
                let minos = minos_intervals(fitter, data, &config, minos)?;
                let yields = yields.then(|| fit_yields(model, &fit)).transpose()?;
                Outcome::Fit { fit, minos, yields }
            }
            Request::Hypotest { mu, test_stat } => Outcome::Hypotest {
                result: hypotest_asymptotic(fitter, *mu, data, config, *test_stat)?,
                test_stat: *test_stat,
            },
            Request::HypotestToys {
                mu,
                test_stat,
                n_toys,
                seed,
                teststats,
            } => Outcome::HypotestToys {
                result: hypotest_toys(
                    fitter, *mu, data, config, *test_stat, *n_toys, *seed, progress,
                )?,
                test_stat: *test_stat,
                teststats: *teststats,
            },
            Request::UpperLimit {
                level,
                scan,
                n_toys: Some(n_toys),
                seed,
            } => {
                let spec = ToyLimitSpec {
                    level: *level,
                    n_toys: *n_toys,
                    seed: *seed,
                };
                Outcome::UpperLimitToys(match scan {
                    Some(grid) => {
                        toy_upper_limit_scan(fitter, data, config, &spec, grid, progress)?
                    }
                    None => toy_upper_limit_auto(fitter, data, config, &spec, progress)?,
                })
            }
            Request::UpperLimit {
                level,
                scan,
                n_toys: None,
                ..
            } => {
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
            Request::ProfileScan {
                parameters,
                grid,
                cl,
                refine,
                ..
            } if self.is_grid_scan()? => {
                let indices = parameter_indices(model, parameters)?;
                let cl = contour_levels(cl.as_deref(), parameters.len())?;
                let scan = profile_scan_grid(fitter, &indices, grid, data, config, progress)?;
                let levels = cl
                    .iter()
                    .map(|&c| level_of_cl(c, parameters.len()))
                    .collect::<Result<Vec<f64>>>()?;
                // Refinement's points count on from the grid's.
                let first = scan.fits.len();
                let scan = refine_near_contours(
                    fitter,
                    &indices,
                    scan,
                    &levels,
                    *refine,
                    data,
                    config,
                    &|k| progress(first + k),
                )?;
                Outcome::GridScan { scan, cl }
            }
            Request::ProfileScan {
                parameter, values, ..
            } => {
                let index = match parameter {
                    Some(name) => model
                        .parameter_index(name)
                        .map_err(ns_core::Error::InvalidInput)?,
                    None => config.poi(model)?,
                };
                Outcome::ProfileScan(profile_scan(fitter, index, values, data, config, progress)?)
            }
            Request::Ranking => Outcome::Ranking(ranking(fitter, data, config, progress)?),
            Request::Gof => Outcome::Gof(goodness_of_fit(fitter, data, config)?),
            Request::Posterior { keep_draws, .. } => {
                let spec = self.posterior_spec().expect("a posterior request");
                Outcome::Posterior {
                    result: Box::new(posterior(fitter, data, config, &spec, progress)?),
                    keep_draws: *keep_draws,
                }
            }
            Request::FitToys { pars, n_toys, seed } => {
                let pars = params_from_json(model, &serde_json::json!(pars), &config.init)?;
                // The optimizer's variable scaling, once for all toys: at the Asimov data of
                // the generating point.
                let config = fitter.with_scale(&model.asimov(&pars)?, config)?;
                let (toys, fits) = fit_toys(fitter, &pars, *n_toys, *seed, &config, progress)?;
                Outcome::FitToys {
                    toys,
                    fits: fits.into_iter().collect::<Result<_>>()?,
                }
            }
            Request::FitDatasets {
                datasets,
                init,
                bounds,
            } => {
                let datasets = datasets
                    .iter()
                    .map(|row| model.dataset(row))
                    .collect::<Result<Vec<_>>>()?;
                let init = init.clone().unwrap_or_else(|| vec![config.init.clone()]);
                let bounds = match bounds {
                    Some(specs) => specs
                        .iter()
                        .map(|spec| bounds_from_json(model, spec, &config.bounds))
                        .collect::<Result<Vec<_>>>()?,
                    None => vec![config.bounds.clone()],
                };
                Outcome::FitDatasets(
                    fitter
                        .fit_datasets(&datasets, &init, &bounds, config, progress)?
                        .into_iter()
                        .collect::<Result<_>>()?,
                )
            }
        })
    }
}

/// One evaluated point of [`Request::Eval`].
#[derive(Clone, Debug)]
pub struct EvalPoint {
    pub parameters: Vec<f64>,
    pub nll: f64,
    pub gradient: Vec<f64>,
    pub expected_main: Vec<f64>,
    pub expected_aux: Vec<f64>,
    /// Where the NLL is not finite: why, naming the term (`Likelihood::where_undefined`).
    pub undefined: Option<String>,
}

/// [`Request::Eval`]: the suggested init, one point, or each point of a list, evaluated on the
/// fitter's backend.
fn eval_points(fitter: &Fitter, data: &PreparedData, pars: Option<&Value>) -> Result<Outcome> {
    let model = fitter.model();
    let init = model.suggested_init();
    let (points, list) = match pars {
        // A list of points (lists or objects) evaluates each.
        Some(Value::Array(points))
            if points
                .first()
                .is_some_and(|p| p.is_array() || p.is_object()) =>
        {
            (points.iter().collect::<Vec<_>>(), true)
        }
        Some(point) => (vec![point], false),
        None => (Vec::new(), false),
    };
    let points = if points.is_empty() {
        vec![evaluate(fitter, data, init)?]
    } else {
        points
            .into_iter()
            .map(|p| evaluate(fitter, data, params_from_json(model, p, &init)?))
            .collect::<Result<Vec<_>>>()?
    };
    Ok(Outcome::Eval { points, list })
}

/// The NLL, its gradient and the expected data at `parameters`.
fn evaluate(fitter: &Fitter, data: &PreparedData, parameters: Vec<f64>) -> Result<EvalPoint> {
    let mut gradient = vec![0.0; parameters.len()];
    let nll = 0.5 * fitter.twice_nll_and_gradient(&parameters, data, &mut gradient)?;
    for g in &mut gradient {
        *g *= 0.5;
    }
    let (expected_main, expected_aux) = fitter.model().expected(&parameters)?;
    let undefined = (!nll.is_finite()).then(|| {
        fitter
            .model()
            .where_undefined(&parameters, data)
            .unwrap_or_else(|| "a term of the likelihood is not finite".into())
    });
    Ok(EvalPoint {
        parameters,
        nll,
        gradient,
        expected_main,
        expected_aux,
        undefined,
    })
}

/// Profile-likelihood intervals (Δ twice_nll = 1) of the named parameters; "all" names every
/// free one.
fn minos_intervals(
    fitter: &Fitter,
    data: &PreparedData,
    config: &FitConfig,
    names: &[String],
) -> Result<Vec<(String, ProfileInterval)>> {
    let model = fitter.model();
    let names: Vec<String> = if names.iter().any(|m| m == "all") {
        (0..model.n_params())
            .filter(|&i| !config.fixed[i])
            .map(|i| model.parameter_names()[i].clone())
            .collect()
    } else {
        names.to_vec()
    };
    let plain = FitConfig {
        uncertainties: false,
        ..config.clone()
    };
    names
        .into_iter()
        .map(|name| {
            let index = model
                .parameter_index(&name)
                .map_err(|e| Error::InvalidInput(format!("minos: {e}")))?;
            Ok((name, profile_interval(fitter, index, data, &plain, 1.0)?))
        })
        .collect()
}

impl Request {
    /// Whether a profile scan is over a grid of parameters (`parameters` and `grid`) rather than
    /// one parameter's `values`; an error where it names both or a grid's half.
    pub fn is_grid_scan(&self) -> Result<bool> {
        let Request::ProfileScan {
            parameter,
            values,
            parameters,
            grid,
            cl,
            refine,
        } = self
        else {
            return Ok(false);
        };
        let grid_named = !parameters.is_empty() || !grid.is_empty();
        if grid_named && (parameter.is_some() || !values.is_empty()) {
            return Err(Error::InvalidInput(
                "a profile scan is of one parameter (parameter, values) or over a grid \
                 (parameters, grid), not both"
                    .into(),
            ));
        }
        if !grid_named && cl.is_some() {
            return Err(Error::InvalidInput(
                "contour levels (cl) belong to a grid scan of two parameters".into(),
            ));
        }
        if *refine > 0 && parameters.len() != 2 {
            return Err(Error::InvalidInput(format!(
                "refine = {refine}: refining near the contours belongs to a grid scan of two \
                 parameters"
            )));
        }
        if *refine > ns_inference::grid_scan::MAX_REFINE_ROUNDS {
            return Err(Error::InvalidInput(format!(
                "refine = {refine}: at most {} rounds (each can double the points along both \
                 axes)",
                ns_inference::grid_scan::MAX_REFINE_ROUNDS
            )));
        }
        if grid_named {
            ns_inference::grid_scan::check_grid(parameters, grid)?;
        }
        Ok(grid_named)
    }
}

/// The indices of parameters named in a request, each named where it is unknown.
pub fn parameter_indices(model: &dyn Likelihood, names: &[String]) -> Result<Vec<usize>> {
    names
        .iter()
        .map(|n| model.parameter_index(n).map_err(Error::InvalidInput))
        .collect()
}

/// The 2ΔNLL levels of a grid scan's contours at confidence levels `cl` (68.27% and 95.45% by
/// default), for `dof` scanned parameters; contours are drawn for two.
pub fn contour_levels(cl: Option<&[f64]>, dof: usize) -> Result<Vec<f64>> {
    let cl = cl.map_or_else(|| vec![0.6827, 0.9545], <[f64]>::to_vec);
    if cl.len() > 16 {
        return Err(Error::InvalidInput(format!(
            "{} contour levels: at most 16",
            cl.len()
        )));
    }
    for &c in &cl {
        level_of_cl(c, dof)?;
    }
    Ok(cl)
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
                test_stat: TestStatistic::QTilde
            }
        );
        let r: Request =
            serde_json::from_str(r#"{"verb": "upper_limit", "scan": [0, 1, 2]}"#).unwrap();
        assert_eq!(
            r,
            Request::UpperLimit {
                level: 0.05,
                scan: Some(vec![0.0, 1.0, 2.0]),
                n_toys: None,
                seed: 0,
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
