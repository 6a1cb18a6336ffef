//! The human-readable summaries of `--format text`, one per result.

use ns_api::request::Outcome;
use ns_compute::Likelihood;
use ns_inference::TestStatistic;
use ns_inference::limits::{Outside, UpperLimit};

/// The expected band's labels in pyhf's order (n_σ = 2 … −2: the "−2σ" CLs first).
const BAND_LABELS: [&str; 5] = ["-2σ", "-1σ", "median", "+1σ", "+2σ"];

/// One number style for every text output: 6 significant digits, exponent form for tiny or huge.
fn number(v: f64) -> String {
    if v.is_nan() {
        return "nan".into();
    }
    if v == 0.0 {
        return "0".into();
    }
    if (1e-3..1e6).contains(&v.abs()) {
        let digits = (5 - v.abs().log10().floor() as i32).max(0) as usize;
        format!("{v:.digits$}")
    } else {
        format!("{v:.5e}")
    }
}

/// An expected band, one labelled value per line.
fn band(what: &str, values: &[f64; 5]) -> String {
    BAND_LABELS
        .iter()
        .zip(values)
        .map(|(label, v)| format!("{what} {label:>6} = {}\n", number(*v)))
        .collect()
}

/// The human-readable summary of `--format text`.
pub fn text_of(outcome: &Outcome, model: &dyn Likelihood, matrices: bool) -> String {
    match outcome {
        // No verb of the CLI asks for these (the Python package's batch fits).
        Outcome::Eval { .. } | Outcome::FitToys { .. } | Outcome::FitDatasets(_) => String::new(),
        Outcome::Fit { fit, minos, .. } => {
            let mut text = format!(
                "twice_nll = {:.10}  ({})\n",
                fit.twice_nll,
                fit.termination.describe()
            );
            for (i, name) in model.parameter_names().iter().enumerate() {
                let sigma = fit.uncertainties.as_ref().map_or(f64::NAN, |u| u[i]);
                text.push_str(&format!(
                    "{name:>40} = {:>12.6} ± {:<10.6}{}\n",
                    fit.parameters[i],
                    sigma,
                    if fit.at_bound[i] { "  (at bound)" } else { "" }
                ));
            }
            for (name, iv) in minos {
                // An end the rise does not reach before the parameter's bound has no interval.
                let end = |e: Option<f64>| {
                    e.map_or("none before the bound".to_string(), |v| format!("{v:+.6}"))
                };
                text.push_str(&format!(
                    "{name:>40}: {} / {} (profile likelihood)\n",
                    end(iv.error_down),
                    end(iv.error_up)
                ));
            }
            if matrices {
                text.push_str(match fit.correlation() {
                    Some(_) => "the correlation and covariance matrices are in the JSON output (--format json)\n",
                    None => "no correlation or covariance matrix: the Hessian gave none (see the warning)\n",
                });
            }
            text
        }
        Outcome::Ranking(r) => {
            let mut text = format!(
                "{:>40}  {:>9}  {:>9}  {:>10}  {:>10}\n",
                "parameter", "pull", "constr.", "Δμ post+", "Δμ post−"
            );
            for e in &r.entries {
                let opt = |v: Option<f64>| v.map_or("-".to_string(), |x| format!("{x:.4}"));
                text.push_str(&format!(
                    "{:>40}  {:>9}  {:>9}  {:>10.5}  {:>10.5}\n",
                    e.name,
                    opt(e.pull),
                    opt(e.constraint),
                    e.impact_postfit_up,
                    e.impact_postfit_down
                ));
            }
            text
        }
        Outcome::Gof(g) => format!(
            "-2 ln λ = {:.4} for {} degrees of freedom: p = {:.4}\n",
            g.minus_two_log_lambda, g.ndof, g.p_value
        ),
        Outcome::Hypotest { result: h, .. } => {
            if h.test_statistic == TestStatistic::Q0 {
                format!(
                    "p0 observed = {}\n{}",
                    number(h.cls.clsb_obs),
                    band("p0 expected", &h.cls.clsb_exp)
                )
            } else {
                format!(
                    "mu = {}\nCLs observed = {}  (CLsb = {}, CLb = {})\n{}",
                    number(h.mu),
                    number(h.cls.cls_obs),
                    number(h.cls.clsb_obs),
                    number(h.cls.clb_obs),
                    band("CLs expected", &h.cls.cls_exp)
                )
            }
        }
        Outcome::HypotestToys { result: h, .. } => format!(
            "mu = {}\nCLs observed = {}  (CLsb = {}, CLb = {})\n{}toys: {} per hypothesis, {} failed\n",
            number(h.mu),
            number(h.cls.cls_obs),
            number(h.cls.clsb_obs),
            number(h.cls.clb_obs),
            band("CLs expected", &h.cls.cls_exp),
            h.n_toys,
            h.signal.n_failed + h.background.n_failed
        ),
        Outcome::UpperLimit { result: ul, .. } => limits_text(ul, None),
        Outcome::UpperLimitToys(r) => {
            let failed: usize = r
                .tests
                .iter()
                .map(|t| t.signal.n_failed + t.background.n_failed)
                .sum();
            format!(
                "{}toys: {} per hypothesis at {} μ values, {failed} failed\n",
                limits_text(&r.limit, Some(&r.errors)),
                r.tests[0].n_toys,
                r.tests.len()
            )
        }
        Outcome::Significance(r) => format!(
            "p0 observed = {}  (Z = {})\n{}{}",
            number(r.p0_obs),
            number(r.z_obs),
            band("p0 expected", &r.p0_exp),
            band("Z expected", &r.z_exp)
        ),
        Outcome::ProfileScan(scan) => {
            let mut text = format!("{:>12}  {:>16}\n", scan.parameter, "Δ twice_nll");
            for (v, d) in scan.values.iter().zip(&scan.delta_twice_nll) {
                text.push_str(&format!("{v:>12.6}  {d:>16.8}\n"));
            }
            text
        }
        Outcome::Posterior { result: p, .. } => {
            let percent = 100.0 * p.spec.cl;
            let mut text = format!(
                "{percent}% credible upper limit on {} = {} ± {}\n{percent}% central interval = [{}, {}]\n",
                p.poi,
                number(p.upper_limit),
                number(p.upper_limit_error),
                number(p.central_interval.0),
                number(p.central_interval.1)
            );
            text.push_str(&format!(
                "{:>40}  {:>12}  {:>10}  {:>12}  {:>7}  {:>8}\n",
                "parameter", "mean", "sd", "median", "R̂", "ESS bulk"
            ));
            for s in &p.parameters {
                text.push_str(&format!(
                    "{:>40}  {:>12.6}  {:>10.6}  {:>12.6}  {:>7.4}  {:>8.0}\n",
                    s.name,
                    s.mean,
                    s.sd,
                    s.quantiles[2],
                    s.diagnostics.r_hat,
                    s.diagnostics.ess_bulk
                ));
            }
            let divergences: usize = p.chains.iter().map(|c| c.divergences).sum();
            text.push_str(&format!(
                "{} chains × {} draws (after {} warmup), {divergences} divergent\n",
                p.spec.chains, p.spec.draws, p.spec.warmup
            ));
            text
        }
        Outcome::GridScan { scan, .. } => {
            let mut text: String = scan
                .parameters
                .iter()
                .map(|p| format!("{p:>12}  "))
                .collect();
            text.push_str(&format!("{:>16}\n", "Δ twice_nll"));
            let points = ns_inference::grid_scan::grid_points(&scan.axes);
            for (point, d) in points.iter().zip(&scan.delta_twice_nll) {
                for v in point {
                    text.push_str(&format!("{v:>12.6}  "));
                }
                text.push_str(&format!("{d:>16.8}\n"));
            }
            text
        }
    }
}

/// The observed and expected limits, a line each, with their Monte-Carlo errors where given.
fn limits_text(ul: &UpperLimit, errors: Option<&[f64; 6]>) -> String {
    let limit = |k: usize, value: f64| {
        let error = errors.map_or(String::new(), |e| format!(" ± {}", number(e[k])));
        match ul.outside[k] {
            Some(Outside::Above(mu)) => format!("> {} (outside {})", number(mu), ul.range),
            Some(Outside::Below(mu)) => format!("< {} (outside {})", number(mu), ul.range),
            None => format!("{}{error}", number(value)),
        }
    };
    let mut text = format!("upper limit observed = {}\n", limit(0, ul.obs));
    for (k, label) in BAND_LABELS.iter().enumerate() {
        text.push_str(&format!(
            "upper limit expected {label} = {}\n",
            limit(k + 1, ul.exp[k])
        ));
    }
    text
}
