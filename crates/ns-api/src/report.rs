//! The JSON form of every inference result: the key names scripts read from `nextstat … `
//! output and from the Python package's `.to_dict()`. One builder per result, shared by all
//! front doors, so the contract cannot drift between them.

use ns_compute::Likelihood;
use serde_json::{Value, json};
use std::collections::BTreeMap;

use crate::request::{EvalPoint, Outcome};
use ns_inference::AutoChoice;
use ns_inference::fit::FitResult;
use ns_inference::gof::GoodnessOfFit;
use ns_inference::hypotest::{AsymptoticHypotest, ClsValues, Significance, TestStatistic};
use ns_inference::intervals::ProfileInterval;
use ns_inference::limits::{Outside, UpperLimit};
use ns_inference::params::number_json;
use ns_inference::posterior::{Posterior, SUMMARY_QUANTILES};
use ns_inference::ranking::Ranking;
use ns_inference::scan::ProfileScan;
use ns_inference::toy_limit::ToyUpperLimit;
use ns_inference::toys::ToyHypotest;
use ns_inference::yields::FitYields;

fn matrix(values: Option<&Vec<f64>>, n: usize) -> Option<Vec<Vec<f64>>> {
    values.map(|c| c.chunks(n.max(1)).map(|r| r.to_vec()).collect())
}

/// Where `auto` was asked, what it chose and why: `"auto": {"device", "reason"}` added to
/// `report` (a result or a shard's part).
pub fn add_auto(report: &mut Value, choice: Option<&AutoChoice>) {
    if let (Some(choice), Some(object)) = (choice, report.as_object_mut()) {
        object.insert(
            "auto".into(),
            json!({"device": choice.device.spec(), "reason": choice.reason}),
        );
    }
}

/// A fit; `matrices` adds the covariance and correlation (n×n: on large models hundreds of MB of
/// JSON, so the CLI writes them only when asked).
pub fn fit(model: &dyn Likelihood, fit: &FitResult, matrices: bool) -> Value {
    let mut value = json!({
        "parameter_names": model.parameter_names(),
        "bestfit": fit.parameters,
        "uncertainties": fit.uncertainties,
        "twice_nll": fit.twice_nll,
        "nll": fit.twice_nll / 2.0,
        "converged": fit.converged,
        "termination_reason": fit.termination.describe(),
        "iterations": fit.iterations,
        "evaluations": fit.evaluations,
        "projected_gradient": fit.projected_gradient,
        "at_bound": fit.at_bound,
        "warning": fit.warning,
        "parameter_kinds": (0..model.n_params()).map(|i| model.parameter_kind(i)).collect::<Vec<_>>(),
        "prefit_center": (0..model.n_params()).map(|i| model.constraint(i).map(|c| c.0)).collect::<Vec<_>>(),
        "prefit_width": (0..model.n_params()).map(|i| model.constraint(i).map(|c| c.1)).collect::<Vec<_>>(),
    });
    if matrices {
        value["correlation"] = json!(matrix(fit.correlation().as_ref(), model.n_params()));
        value["covariance"] = json!(matrix(fit.covariance.as_ref(), model.n_params()));
    }
    value
}

pub fn ranking(r: &Ranking) -> Value {
    let poi = r.poi_index;
    let entries: Vec<Value> = r
        .entries
        .iter()
        .map(|e| {
            json!({
                "name": e.name, "bestfit": e.bestfit, "uncertainty": e.uncertainty, "pull": e.pull, "constraint": e.constraint,
                "impact_prefit_up": e.impact_prefit_up, "impact_prefit_down": e.impact_prefit_down,
                "impact_postfit_up": e.impact_postfit_up, "impact_postfit_down": e.impact_postfit_down,
            })
        })
        .collect();
    json!({
        "poi": r.poi, "poi_bestfit": r.nominal.parameters[poi],
        "poi_uncertainty": r.nominal.uncertainties.as_ref().map(|u| u[poi]),
        "entries": entries, "failed_refits": r.failed_refits,
    })
}

/// Pre- and post-fit yields, channel by channel.
pub fn fit_yields(y: &FitYields) -> Value {
    let channels: Vec<Value> = y
        .prefit
        .iter()
        .zip(&y.postfit)
        .zip(&y.observed)
        .map(|((pre, post), observed)| {
            let samples: Vec<Value> = pre
                .samples
                .iter()
                .zip(&post.samples)
                .map(|((name, prefit), (_, postfit))| json!({"name": name, "prefit": prefit, "postfit": postfit}))
                .collect();
            json!({
                "channel": pre.channel, "observed": observed, "samples": samples,
                "prefit_total": pre.total, "prefit_stdev": pre.total_stdev,
                "prefit_sum": pre.sum, "prefit_sum_stdev": pre.sum_stdev,
                "postfit_total": post.total, "postfit_stdev": post.total_stdev,
                "postfit_sum": post.sum, "postfit_sum_stdev": post.sum_stdev,
            })
        })
        .collect();
    json!({"channels": channels})
}

pub fn gof(g: &GoodnessOfFit) -> Value {
    json!({
        "minus_two_log_lambda": g.minus_two_log_lambda, "ndof": g.ndof, "p_value": g.p_value,
        "twice_nll_bestfit": g.twice_nll_bestfit, "twice_nll_saturated": g.twice_nll_saturated, "converged": g.fit.converged,
    })
}

/// A posterior: the POI's credible upper limit and central interval, every free parameter's
/// summary, each chain's sampler, warnings; with `keep_draws`, every draw (`[chain][draw]
/// [parameter]` in the order of `draws.names`).
pub fn posterior(p: &Posterior, keep_draws: bool) -> Value {
    let n = number_json;
    let parameters: Vec<Value> = p
        .parameters
        .iter()
        .map(|s| {
            json!({
                "name": s.name, "mean": n(s.mean), "sd": n(s.sd),
                "quantiles": s.quantiles.map(n),
                "r_hat": n(s.diagnostics.r_hat), "ess_bulk": n(s.diagnostics.ess_bulk),
                "ess_tail": n(s.diagnostics.ess_tail),
            })
        })
        .collect();
    let chains: Vec<Value> = p
        .chains
        .iter()
        .map(|c| {
            json!({
                "divergences": c.divergences, "max_depth_hits": c.max_depth_hits,
                "step_size": n(c.step_size), "mean_tree_depth": c.mean_tree_depth,
                "mean_accept": n(c.mean_accept),
            })
        })
        .collect();
    let spec = &p.spec;
    let mut value = json!({
        "poi": p.poi, "cl": spec.cl, "upper_limit": n(p.upper_limit),
        "upper_limit_error": n(p.upper_limit_error),
        "central_interval": [n(p.central_interval.0), n(p.central_interval.1)],
        "chains": spec.chains, "warmup": spec.warmup, "draws": spec.draws, "seed": spec.seed,
        "target_accept": spec.target_accept, "max_tree_depth": spec.max_tree_depth,
        "prior": spec.prior.name(),
        "quantile_levels": SUMMARY_QUANTILES, "parameters": parameters, "sampler": chains,
    });
    if !p.warnings.is_empty() {
        value["warning"] = json!(p.warnings.join("; "));
    }
    if keep_draws {
        value["draws_by_chain"] = json!({"names": p.names, "values": p.draws});
    }
    value
}

pub fn hypotest(test_stat: &str, h: &AsymptoticHypotest) -> Value {
    let fits = [
        &h.free_fit,
        &h.fixed_fit,
        &h.asimov_fit,
        &h.free_fit_asimov,
        &h.fixed_fit_asimov,
    ];
    let mut value = json!({
        "mu": h.mu, "test_stat": test_stat,
        "sqrt_q": h.sqrt_q, "sqrt_q_asimov": h.sqrt_q_asimov, "asymptotic_teststat": h.asymptotic_teststat,
        "fits_converged": fits.iter().all(|f| f.converged),
        "fit_warnings": fit_warnings(&fits),
        "fitted_pars": {
            "free_fit_to_data": h.free_fit.parameters, "fixed_poi_fit_to_data": h.fixed_fit.parameters,
            "asimov_pars": h.asimov_fit.parameters, "free_fit_to_asimov": h.free_fit_asimov.parameters,
            "fixed_poi_fit_to_asimov": h.fixed_fit_asimov.parameters,
        },
    });
    add_pvalues(&mut value, h.test_statistic, &h.cls);
    value
}

/// The distinct warnings of the fits behind a result (parameters all at bounds, a Hessian that is
/// not positive definite), so that a test statistic built on a doubtful fit says so.
fn fit_warnings(fits: &[&FitResult]) -> Vec<String> {
    let mut warnings: Vec<String> = fits.iter().filter_map(|f| f.warning.clone()).collect();
    warnings.sort();
    warnings.dedup();
    warnings
}

/// The p-values of a hypothesis test under the keys that say what they are, as pyhf's `hypotest`
/// returns them: CLs (observed and −2σ…+2σ) for q, q̃, t, t̃; for q0 the discovery p-value p0 =
/// CL_{s+b} (pyhf's first return value there), and no CLs, which has no meaning for q0.
fn add_pvalues(value: &mut Value, stat: TestStatistic, cls: &ClsValues) {
    value["CLsb"] = json!(cls.clsb_obs);
    value["CLb"] = json!(cls.clb_obs);
    value["CLsb_exp"] = json!(cls.clsb_exp);
    value["CLb_exp"] = json!(cls.clb_exp);
    if stat == TestStatistic::Q0 {
        value["p0_obs"] = json!(cls.clsb_obs);
        value["p0_exp"] = json!(cls.clsb_exp);
    } else {
        value["CLs_obs"] = json!(cls.cls_obs);
        value["CLs_exp"] = json!(cls.cls_exp);
    }
}

/// A toy hypothesis test; `teststats` adds every toy's test statistic, ensemble by ensemble.
pub fn hypotest_toys(test_stat: &str, h: &ToyHypotest, teststats: bool) -> Value {
    let failures: BTreeMap<String, usize> =
        h.signal.failures.iter().chain(&h.background.failures).fold(
            BTreeMap::new(),
            |mut m, (k, v)| {
                *m.entry(k.clone()).or_insert(0) += v;
                m
            },
        );
    let mut value = json!({
        "mu": h.mu, "test_stat": test_stat, "teststat_obs": h.teststat_obs,
        "sqrt_q": h.teststat_obs.sqrt(),
        "n_toys": h.n_toys, "n_failed": h.signal.n_failed + h.background.n_failed, "failures": failures, "seed": h.seed,
    });
    add_pvalues(&mut value, h.test_statistic, &h.cls);
    value["warning"] = json!(h.warning);
    if teststats {
        value["teststats"] = json!({
            "signal_plus_background": h.signal.teststats,
            "background_only": h.background.teststats,
        });
    }
    value
}

pub fn upper_limit(ul: &UpperLimit, level: f64) -> Value {
    let side = |o: &Option<Outside>| match o {
        Some(Outside::Above(mu)) => json!({"above": mu}),
        Some(Outside::Below(mu)) => json!({"below": mu}),
        None => Value::Null,
    };
    // A limit outside the range is NaN, which JSON writes as null.
    json!({
        "obs": ul.obs, "exp": ul.exp, "level": level,
        "obs_outside": side(&ul.outside[0]),
        "exp_outside": ul.outside[1..].iter().map(side).collect::<Vec<_>>(),
        "warning": ul.outside_in_words(),
        "points": ul.points.iter().map(|(mu, obs, exp)| json!({"mu": mu, "CLs_obs": obs, "CLs_exp": exp})).collect::<Vec<_>>(),
    })
}

/// A toy-based limit: the upper limit's JSON with the Monte-Carlo errors of the limits and, per
/// μ, of its CLs values, with the toys' counts and failures.
pub fn upper_limit_toys(r: &ToyUpperLimit) -> Value {
    let mut value = upper_limit(&r.limit, r.level);
    value["method"] = json!("toys");
    value["obs_error"] = json!(number_json(r.errors[0]));
    value["exp_error"] = json!(
        r.errors[1..]
            .iter()
            .map(|&e| number_json(e))
            .collect::<Vec<_>>()
    );
    value["warning"] = json!(r.warning());
    let first = &r.tests[0];
    value["n_toys"] = json!(first.n_toys);
    value["seed"] = json!(first.seed);
    value["points"] = r
        .tests
        .iter()
        .zip(&r.cls_errors)
        .map(|(t, e)| {
            json!({
                "mu": t.mu, "CLs_obs": t.cls.cls_obs, "CLs_exp": t.cls.cls_exp,
                "CLs_obs_error": number_json(e[0]),
                "CLs_exp_error": e[1..].iter().map(|&x| number_json(x)).collect::<Vec<_>>(),
                "teststat_obs": t.teststat_obs,
                "n_failed": t.signal.n_failed + t.background.n_failed,
            })
        })
        .collect();
    value
}

pub fn significance(r: &Significance) -> Value {
    json!({
        "p0_obs": r.p0_obs, "Z_obs": number_json(r.z_obs), "p0_exp": r.p0_exp,
        "Z_exp": r.z_exp.map(number_json),
    })
}

/// A number for JSON, which has neither infinities nor NaN: they are written as the strings
/// "inf", "-inf" and "NaN" (a significance whose p0 underflows, a likelihood undefined at a
/// point), which Python's `float()` reads back.
/// One evaluated point (`nextstat eval`): twice_nll, nll, the gradient and the expected data.
fn eval_point(p: &EvalPoint) -> Value {
    let mut out = json!({
        "parameters": p.parameters,
        "twice_nll": number_json(2.0 * p.nll),
        "nll": number_json(p.nll),
        "gradient": p.gradient.iter().map(|&g| number_json(g)).collect::<Vec<_>>(),
        "expected_data": {"main": p.expected_main.iter().map(|&x| number_json(x)).collect::<Vec<_>>(), "aux": p.expected_aux},
    });
    if let Some(why) = &p.undefined {
        out["warning"] = json!(format!("the likelihood is undefined here: {why}"));
    }
    out
}

/// A fit with its MINOS-like intervals (under "minos", by parameter name, when any were asked).
pub fn fit_with_minos(
    model: &dyn Likelihood,
    result: &FitResult,
    minos: &[(String, ProfileInterval)],
    matrices: bool,
) -> Value {
    let mut value = fit(model, result, matrices);
    if !minos.is_empty() {
        value["minos"] = Value::Object(
            minos
                .iter()
                .map(|(name, iv)| (name.clone(), interval(iv)))
                .collect(),
        );
    }
    value
}

/// Evaluated points: one object, or `{"points": [...]}` for a list; with the parameter names and
/// model's settings (HistFactory: the interpolation codes).
pub fn eval(model: &dyn Likelihood, points: &[EvalPoint], list: bool) -> Value {
    let point = eval_point;
    let mut out = if list {
        json!({"points": points.iter().map(point).collect::<Vec<_>>()})
    } else {
        points.first().map(point).unwrap_or_else(|| json!({}))
    };
    out["parameter_names"] = json!(model.parameter_names());
    for (name, value) in model.settings() {
        out[name] = json!(value);
    }
    out
}

/// A profile-likelihood (MINOS-like) interval; `null` ends where the rise is not reached before
/// the parameter's bound.
pub fn interval(iv: &ProfileInterval) -> Value {
    json!({"lower": iv.lower, "upper": iv.upper, "error_down": iv.error_down, "error_up": iv.error_up})
}

pub fn scan(scan: &ProfileScan) -> Value {
    json!({
        "parameter": scan.parameter, "values": scan.values, "twice_nll": scan.twice_nll,
        "delta_twice_nll": scan.delta_twice_nll, "bestfit_twice_nll": scan.free_fit.twice_nll,
        "converged": scan.fits.iter().map(|f| f.converged).collect::<Vec<_>>(),
    })
}

/// A grid scan's points, as one process or merged shards hold them.
pub struct GridPoints<'a> {
    pub parameters: &'a [String],
    pub axes: &'a [Vec<f64>],
    pub twice_nll: &'a [f64],
    pub delta_twice_nll: &'a [f64],
    pub converged: &'a [bool],
    pub bestfit_twice_nll: f64,
}

/// A grid scan: the axes, per point (the last parameter fastest) twice_nll, 2ΔNLL and whether
/// its fit converged, and for two parameters the contour lines at each confidence level.
pub fn grid_scan(g: &GridPoints, cl: &[f64]) -> Value {
    let contours: Vec<Value> = if g.axes.len() == 2 {
        cl.iter()
            .filter_map(|&c| {
                let level = ns_inference::grid_scan::level_of_cl(c, 2).ok()?;
                let lines = ns_inference::contour::contour_lines(
                    &g.axes[0],
                    &g.axes[1],
                    g.delta_twice_nll,
                    level,
                );
                Some(json!({"cl": c, "delta_twice_nll": level, "lines": lines}))
            })
            .collect()
    } else {
        Vec::new()
    };
    json!({
        "parameters": g.parameters, "grid": g.axes,
        "twice_nll": g.twice_nll.iter().map(|&t| number_json(t)).collect::<Vec<_>>(),
        "delta_twice_nll": g.delta_twice_nll.iter().map(|&t| number_json(t)).collect::<Vec<_>>(),
        "converged": g.converged, "bestfit_twice_nll": number_json(g.bestfit_twice_nll),
        "cl": cl, "contours": contours,
    })
}

/// `nextstat devices` / `nextstat.devices()`: what this machine offers.
pub fn devices(inventory: &ns_compute::Inventory) -> Value {
    let listed = |r: &std::result::Result<Vec<Value>, String>| match r {
        Ok(items) => json!(items),
        Err(_) => json!([]),
    };
    let cuda = inventory
        .cuda
        .as_ref()
        .map(|names| names.iter().map(|n| json!({"name": n})).collect::<Vec<_>>())
        .map_err(Clone::clone);
    let adapters = inventory
        .adapters
        .as_ref()
        .map(|list| {
            list.iter()
                .map(|a| {
                    json!({"name": a.name, "backend": a.backend, "kind": a.kind, "driver": a.driver, "precision": "f32"})
                })
                .collect::<Vec<_>>()
        })
        .map_err(Clone::clone);
    json!({
        "cpu": {"threads": inventory.cpu_threads, "precision": "f64"},
        "cuda": listed(&cuda),
        "cuda_unavailable": cuda.as_ref().err(),
        "cuda_prebuilt_kernels": ns_compute::cuda::prebuilt_archs().iter().map(|a| format!("sm_{a}")).collect::<Vec<_>>(),
        "wgpu": listed(&adapters),
        "wgpu_unavailable": match &adapters {
            Ok(list) if list.is_empty() => Some(NO_WGPU_ADAPTER.to_string()),
            Ok(_) => None,
            Err(why) => Some(why.clone()),
        },
    })
}

/// Why no f32 adapter is listed where the backend is built in but finds none.
pub const NO_WGPU_ADAPTER: &str =
    "no Vulkan or Metal adapter (Linux: install a Vulkan driver, e.g. mesa-vulkan-drivers)";

impl Outcome {
    /// The result's JSON; `matrices` adds a fit's covariance and correlation.
    pub fn report(&self, model: &dyn Likelihood, matrices: bool) -> Value {
        match self {
            Outcome::Eval { points, list } => eval(model, points, *list),
            Outcome::Fit { fit, minos, yields } => {
                let mut value = fit_with_minos(model, fit, minos, matrices);
                if let Some(y) = yields {
                    value["yields"] = fit_yields(y);
                }
                value
            }
            Outcome::Hypotest { test_stat, result } => hypotest(test_stat.name(), result),
            Outcome::HypotestToys {
                test_stat,
                result,
                teststats,
            } => hypotest_toys(test_stat.name(), result, *teststats),
            Outcome::UpperLimit { level, result } => upper_limit(result, *level),
            Outcome::UpperLimitToys(result) => upper_limit_toys(result),
            Outcome::Significance(result) => significance(result),
            Outcome::ProfileScan(result) => scan(result),
            Outcome::GridScan { scan, cl } => grid_scan(
                &GridPoints {
                    parameters: &scan.parameters,
                    axes: &scan.axes,
                    twice_nll: &scan.twice_nll,
                    delta_twice_nll: &scan.delta_twice_nll,
                    converged: &scan.fits.iter().map(|f| f.converged).collect::<Vec<_>>(),
                    bestfit_twice_nll: scan.free_fit.twice_nll,
                },
                cl,
            ),
            Outcome::Ranking(result) => ranking(result),
            Outcome::Gof(result) => gof(result),
            Outcome::Posterior { result, keep_draws } => posterior(result, *keep_draws),
            Outcome::FitToys { toys, fits } => json!({
                "toys": toys
                    .iter()
                    .map(|t| t.main.iter().chain(&t.aux).copied().collect::<Vec<f64>>())
                    .collect::<Vec<_>>(),
                "fits": fits.iter().map(|f| fit(model, f, matrices)).collect::<Vec<_>>(),
            }),
            Outcome::FitDatasets(fits) => json!({
                "fits": fits.iter().map(|f| fit(model, f, matrices)).collect::<Vec<_>>(),
            }),
        }
    }
}
