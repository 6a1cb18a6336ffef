//! The overview of one model, `nextstat report`'s results: the fit (uncertainties, covariance,
//! and yields where the model is binned), the upper limit, its CLs curve, a profile scan of the
//! POI and the ranking — each a call of the template on the loaded model, the ranges of the
//! curve and the scan chosen from the fit and the limit.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use ns_core::Result;
use ns_source::LoadedModel;
use serde_json::Value;

use crate::call::{Call, linspace};
use crate::request::{DEFAULT_CLS_LEVEL, Outcome, Request};

/// The results of an overview, as reports (each the JSON its verb gives, matrices included).
pub struct Overview {
    pub fit: Value,
    pub upper_limit: Value,
    pub cls_scan: Value,
    pub scan: Value,
    pub ranking: Value,
    /// Whether the model is binned (its fit has per-sample yields).
    pub binned: bool,
}

/// The calls an overview runs, in order (what `progress` is told before each).
pub const OVERVIEW_STEPS: [&str; 5] = ["fit", "upper limit", "CLs scan", "profile scan", "ranking"];

/// Points of the CLs curve and of the profile scan.
const CLS_POINTS: f64 = 41.0;
const SCAN_POINTS: f64 = 31.0;

/// The overview of `loaded` under `template`'s fit options, device and data (its request is
/// replaced by each step's).
pub fn overview(
    template: &Call,
    loaded: &LoadedModel,
    stop: Arc<AtomicBool>,
    progress: &dyn Fn(&str),
) -> Result<Overview> {
    let model = loaded.likelihood();
    let poi = template.fit_config(model)?.poi(model)?;
    let binned = matches!(loaded, LoadedModel::Binned { .. });
    let mut steps = OVERVIEW_STEPS.iter();
    let mut run = |request: Request| -> Result<(Outcome, Value)> {
        progress(steps.next().copied().unwrap_or(""));
        let call = Call {
            request,
            ..template.clone()
        };
        let fitter = call.open(model, stop.clone())?;
        let outcome = call.run_on(&fitter, &|_| {})?;
        let mut report = call.report(&outcome, model, true);
        crate::report::add_auto(&mut report, fitter.auto_choice());
        loaded.annotate(&mut report);
        Ok((outcome, report))
    };
    let finite = |x: f64| Some(x).filter(|x| x.is_finite());
    let (fit_outcome, fit) = run(Request::Fit {
        uncertainties: true,
        minos: vec![],
        covariance: true,
        yields: binned,
    })?;
    let (limit_outcome, upper_limit) = run(Request::UpperLimit {
        level: DEFAULT_CLS_LEVEL,
        scan: None,
        n_toys: None,
        seed: 0,
    })?;
    // The CLs curve reaches past the +2σ expected and the observed limit; the profile scan spans
    // ±3σ around the best fit; both within the POI's bounds.
    let (lo, hi) = model.suggested_bounds()[poi];
    let reach = match &limit_outcome {
        Outcome::UpperLimit { result, .. } => [result.exp[4], result.obs]
            .into_iter()
            .filter_map(finite)
            .fold(1.0f64, f64::max),
        _ => 1.0,
    } * 1.3;
    let (_, cls_scan) = run(Request::UpperLimit {
        level: DEFAULT_CLS_LEVEL,
        scan: Some(linspace(lo.max(0.0), reach.min(hi), CLS_POINTS)?),
        n_toys: None,
        seed: 0,
    })?;
    let (mu_hat, sigma) = match &fit_outcome {
        Outcome::Fit { fit, .. } => (
            finite(fit.parameters[poi]).unwrap_or(0.0),
            fit.uncertainties
                .as_ref()
                .and_then(|u| finite(u[poi]))
                .filter(|s| *s > 0.0)
                .unwrap_or(1.0),
        ),
        _ => (0.0, 1.0),
    };
    let (_, scan) = run(Request::ProfileScan {
        parameters: Vec::new(),
        grid: Vec::new(),
        cl: None,
        refine: 0,
        parameter: None,
        values: linspace(
            (mu_hat - 3.0 * sigma).max(lo),
            (mu_hat + 3.0 * sigma).min(hi),
            SCAN_POINTS,
        )?,
    })?;
    let (_, ranking) = run(Request::Ranking)?;
    Ok(Overview {
        fit,
        upper_limit,
        cls_scan,
        scan,
        ranking,
        binned,
    })
}
