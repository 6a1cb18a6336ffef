//! What a figure shows, read from a verb's result JSON: every number drawn comes from here, so
//! the CLI's renderer and the Python package's (matplotlib, through `nextstat.plot`) draw the
//! same things. A result that lacks what a kind needs, or holds something that is not a finite
//! number where one is needed, is an error naming the key and the verb that writes it.

use ns_core::{Error, Result};
use serde::Serialize;
use serde_json::Value;

/// The kinds `nextstat plot` draws, with the verb whose JSON each reads.
pub const KINDS: [(&str, &str); 8] = [
    (
        "limit",
        "`upper-limit --patchset PS.json --all` (Brazil band) or `upper-limit --scan` (CLs against μ)",
    ),
    ("ranking", "`ranking`"),
    ("pulls", "`fit`"),
    ("correlation", "`fit --covariance`"),
    ("scan", "`scan`"),
    ("contour", "`scan --parameters a,b --grid …`"),
    ("yields", "`fit --yields`"),
    ("toys", "`hypotest-toys --teststats`"),
];

/// Choices a figure may take; each kind reads the ones it understands. As JSON (the Python
/// package's keyword arguments): the same names, `select` a list of `[label, value]`.
#[derive(Clone, Debug, Default, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Options {
    /// Entries shown at most (ranking: 20, correlation: 40).
    pub top: Option<usize>,
    /// Correlation: parameters kept when some |ρ| with another reaches this (0.2).
    pub threshold: Option<f64>,
    /// Pulls: parameters whose name contains this.
    pub filter: Option<String>,
    /// Limit grids: the patch label on the x axis (default: the first).
    pub x: Option<String>,
    /// Limit grids: keep the points whose label has this value (a slice of a 2-d grid).
    pub select: Vec<(String, f64)>,
    /// Limit grids: a theory curve, one value per point in x order.
    pub theory: Option<Vec<f64>>,
    /// Yields: post-fit (default) or pre-fit.
    pub prefit: bool,
    /// Toys: an asymptotic `hypotest` result at the same μ, for the asymptotic densities.
    pub asymptotic: Option<Value>,
}

/// A figure's content.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Figure {
    Limit(LimitBand),
    Cls(ClsCurve),
    Ranking(Impacts),
    Pulls(Pulls),
    Correlation(Correlation),
    Scan(LikelihoodScan),
    Contour(Contours),
    Yields(Yields),
    Toys(ToyDistributions),
}

/// Observed and expected limits over a grid of signal points (the Brazil band).
#[derive(Clone, Debug, Serialize)]
pub struct LimitBand {
    pub x_label: String,
    pub x: Vec<f64>,
    pub patches: Vec<String>,
    pub observed: Vec<f64>,
    /// Expected limits, −2σ, −1σ, median, +1σ, +2σ, each over the points.
    pub expected: Vec<Vec<f64>>,
    pub theory: Option<Vec<f64>>,
    /// CL of the limits (0.95 for a CLs level of 0.05).
    pub cl: f64,
    /// Points left out: a selected one whose limit lies outside the POI's bounds (`null`), and
    /// the patches the grid could not compute (its `errors`).
    pub skipped: Vec<String>,
}

/// CLs against μ for one point, with the level and the limits.
#[derive(Clone, Debug, Serialize)]
pub struct ClsCurve {
    pub mu: Vec<f64>,
    pub observed: Vec<f64>,
    pub expected: Vec<Vec<f64>>,
    pub level: f64,
    /// Where the observed and the median expected CLs cross the level; `None` where that lies
    /// beyond the scan.
    pub observed_limit: Option<f64>,
    pub expected_limit: Option<f64>,
}

/// The impact ranking: the largest post-fit impacts first.
#[derive(Clone, Debug, Serialize)]
pub struct Impacts {
    pub poi: String,
    pub entries: Vec<ImpactEntry>,
    /// Parameters ranked in all (entries shows the top ones).
    pub ranked: usize,
}

#[derive(Clone, Debug, Serialize)]
pub struct ImpactEntry {
    pub name: String,
    pub postfit_up: f64,
    pub postfit_down: f64,
    pub prefit_up: Option<f64>,
    pub prefit_down: Option<f64>,
    pub pull: Option<f64>,
    pub constraint: Option<f64>,
}

/// Pulls (θ̂ − θ₀)/σ₀ and constraints σ̂/σ₀ of the constrained parameters, grouped by kind.
#[derive(Clone, Debug, Serialize)]
pub struct Pulls {
    pub groups: Vec<PullGroup>,
}

#[derive(Clone, Debug, Serialize)]
pub struct PullGroup {
    pub kind: String,
    pub entries: Vec<PullEntry>,
}

#[derive(Clone, Debug, Serialize)]
pub struct PullEntry {
    pub name: String,
    pub pull: f64,
    pub constraint: f64,
}

/// The correlation matrix of the parameters that correlate with another beyond the threshold.
#[derive(Clone, Debug, Serialize)]
pub struct Correlation {
    pub names: Vec<String>,
    pub matrix: Vec<Vec<f64>>,
    pub threshold: f64,
    /// Free parameters in the fit (names shows those kept).
    pub total: usize,
}

/// Δ(2 ln L) = twice_nll − its minimum against a parameter, with the 1σ and 2σ crossings.
#[derive(Clone, Debug, Serialize)]
pub struct LikelihoodScan {
    pub parameter: String,
    pub values: Vec<f64>,
    pub delta: Vec<f64>,
    /// Where Δ(2 ln L) crosses 1 and 4 on each side of the minimum (linear between points);
    /// `None` where the scan does not reach the crossing.
    pub crossings: Vec<Crossing>,
}

/// The contours of a grid scan of two parameters, over the grid, with its lowest point.
#[derive(Clone, Debug, Serialize)]
pub struct Contours {
    pub x_label: String,
    pub y_label: String,
    pub x_range: [f64; 2],
    pub y_range: [f64; 2],
    /// The grid point with the lowest 2ΔNLL.
    pub best: [f64; 2],
    pub levels: Vec<ContourLevel>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ContourLevel {
    pub cl: f64,
    pub delta_twice_nll: f64,
    pub lines: Vec<Vec<[f64; 2]>>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Crossing {
    pub level: f64,
    pub low: Option<f64>,
    pub high: Option<f64>,
}

/// Stacked yields per channel with the data and the uncertainty of the total.
#[derive(Clone, Debug, Serialize)]
pub struct Yields {
    pub stage: &'static str,
    pub channels: Vec<ChannelYields>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ChannelYields {
    pub channel: String,
    pub samples: Vec<(String, Vec<f64>)>,
    pub total: Vec<f64>,
    pub stdev: Vec<f64>,
    pub observed: Option<Vec<f64>>,
}

/// The test-statistic distributions of a toy CLs, as densities, with the observed value.
#[derive(Clone, Debug, Serialize)]
pub struct ToyDistributions {
    pub test_stat: String,
    pub mu: f64,
    pub observed: f64,
    pub edges: Vec<f64>,
    /// Density per bin (count / (toys · width)) of the signal-plus-background and the
    /// background-only ensembles.
    pub signal_plus_background: Vec<f64>,
    pub background_only: Vec<f64>,
    pub n_toys: [usize; 2],
    /// The asymptotic densities on a grid (the continuous parts; the point mass at 0 is not
    /// drawn), where an asymptotic result was given.
    pub asymptotic: Option<AsymptoticDensities>,
}

#[derive(Clone, Debug, Serialize)]
pub struct AsymptoticDensities {
    pub q: Vec<f64>,
    pub signal_plus_background: Vec<f64>,
    pub background_only: Vec<f64>,
    pub sqrt_q_asimov: f64,
}

/// The figure of `kind` from a result's JSON.
/// The largest magnitude a figure draws: an axis must span its values with room to spare
/// (a range of ±1e308 overflows to infinity, and no axis can be laid out over it).
pub const MAX_DRAWN: f64 = 1e100;

/// The options `kind` reads: any other given is an error, not silently ignored.
fn check_options(kind: &str, options: &Options) -> Result<()> {
    let given: [(&str, bool, &[&str]); 7] = [
        ("top", options.top.is_some(), &["ranking", "correlation"]),
        ("threshold", options.threshold.is_some(), &["correlation"]),
        ("filter", options.filter.is_some(), &["pulls"]),
        ("x", options.x.is_some(), &["limit"]),
        ("select", !options.select.is_empty(), &["limit"]),
        ("theory", options.theory.is_some(), &["limit"]),
        ("asymptotic", options.asymptotic.is_some(), &["toys"]),
    ];
    for (name, set, kinds) in given {
        if set && !kinds.contains(&kind) {
            return Err(Error::InvalidInput(format!(
                "the {kind} figure takes no '{name}' (it applies to: {})",
                kinds.join(", ")
            )));
        }
    }
    if options.top == Some(0) {
        return Err(Error::InvalidInput(
            "top must be at least 1 (the entries shown)".into(),
        ));
    }
    Ok(())
}

pub fn figure(kind: &str, result: &Value, options: &Options) -> Result<Figure> {
    if !result.is_object() {
        return Err(Error::InvalidInput(
            "a result is a JSON object as a nextstat verb writes it".into(),
        ));
    }
    if KINDS.iter().any(|k| k.0 == kind) {
        check_options(kind, options)?;
    }
    match kind {
        "limit"
            if result
                .get("points")
                .is_some_and(|p| p.get(0).and_then(|p| p.get("patch")).is_some()) =>
        {
            limit_band(result, options).map(Figure::Limit)
        }
        "limit" => cls_curve(result).map(Figure::Cls),
        "ranking" => impacts(result, options).map(Figure::Ranking),
        "pulls" => pulls(result, options).map(Figure::Pulls),
        "correlation" => correlation(result, options).map(Figure::Correlation),
        "scan" => likelihood_scan(result).map(Figure::Scan),
        "contour" => contours(result).map(Figure::Contour),
        "yields" => yields(result, options).map(Figure::Yields),
        "toys" => toys(result, options).map(Figure::Toys),
        other => Err(Error::InvalidInput(format!(
            "no plot kind '{other}' (kinds: {})",
            KINDS.map(|k| k.0).join(", ")
        ))),
    }
}

/// `result[key]`, or an error naming the key and the verb that writes it.
fn field<'a>(result: &'a Value, key: &str, verb: &str) -> Result<&'a Value> {
    result.get(key).filter(|v| !v.is_null()).ok_or_else(|| {
        Error::InvalidInput(format!(
            "the result has no '{key}': this figure is drawn from the JSON of {verb}"
        ))
    })
}

fn number(v: &Value, what: &str) -> Result<f64> {
    let x = v
        .as_f64()
        .filter(|x| x.is_finite())
        .ok_or_else(|| Error::InvalidInput(format!("{what} is {v}, not a finite number")))?;
    if x.abs() > MAX_DRAWN {
        return Err(Error::InvalidInput(format!(
            "{what} is {x:e}: beyond ±{MAX_DRAWN:e}, no axis can draw it"
        )));
    }
    Ok(x)
}

fn numbers(v: &Value, what: &str) -> Result<Vec<f64>> {
    v.as_array()
        .ok_or_else(|| Error::InvalidInput(format!("{what} is not a list of numbers")))?
        .iter()
        .enumerate()
        .map(|(i, x)| number(x, &format!("{what}[{i}]")))
        .collect()
}

fn text(v: &Value, what: &str) -> Result<String> {
    v.as_str()
        .map(String::from)
        .ok_or_else(|| Error::InvalidInput(format!("{what} is {v}, not a string")))
}

/// Five expected values −2σ…+2σ.
fn band(v: &Value, what: &str) -> Result<Vec<f64>> {
    let b = numbers(v, what)?;
    if b.len() != 5 {
        return Err(Error::InvalidInput(format!(
            "{what} has {} values, not the five of −2σ…+2σ",
            b.len()
        )));
    }
    Ok(b)
}

fn limit_band(result: &Value, options: &Options) -> Result<LimitBand> {
    const VERB: &str = "`upper-limit --patchset PS.json --all`";
    let labels: Vec<String> = field(result, "labels", VERB)?
        .as_array()
        .ok_or_else(|| Error::InvalidInput("labels is not a list".into()))?
        .iter()
        .map(|l| text(l, "a label"))
        .collect::<Result<_>>()?;
    let label_index = |name: &str| {
        labels.iter().position(|l| l == name).ok_or_else(|| {
            Error::InvalidInput(format!(
                "the patchset has no label '{name}' (labels: {})",
                labels.join(", ")
            ))
        })
    };
    let x_label = options
        .x
        .clone()
        .or_else(|| labels.first().cloned())
        .ok_or_else(|| {
            Error::InvalidInput(
                "the patchset names no labels: no value to draw the limits against".into(),
            )
        })?;
    let xi = label_index(&x_label)?;
    let selected: Vec<(usize, f64)> = options
        .select
        .iter()
        .map(|(name, value)| Ok((label_index(name)?, *value)))
        .collect::<Result<_>>()?;
    let mut rows = Vec::new();
    let mut skipped = Vec::new();
    for (k, p) in field(result, "points", VERB)?
        .as_array()
        .ok_or_else(|| Error::InvalidInput("points is not a list".into()))?
        .iter()
        .enumerate()
    {
        let patch = text(field(p, "patch", VERB)?, &format!("points[{k}].patch"))?;
        let values = numbers(
            field(p, "values", VERB)?,
            &format!("patch '{patch}': values"),
        )?;
        if values.len() != labels.len() {
            return Err(Error::InvalidInput(format!(
                "patch '{patch}' has {} values for {} labels",
                values.len(),
                labels.len()
            )));
        }
        if !selected.iter().all(|&(i, v)| values[i] == v) {
            continue;
        }
        // A limit outside the POI's bounds is null (the side it lies on beside it): no point
        // of a line.
        let outside = p.get("obs").is_some_and(Value::is_null)
            || p.get("exp")
                .and_then(Value::as_array)
                .is_some_and(|e| e.iter().any(Value::is_null));
        if outside {
            skipped.push(patch);
            continue;
        }
        let what = format!("patch '{patch}'");
        let obs = number(
            field(p, "obs", VERB)?,
            &format!("{what}: the observed limit"),
        )?;
        let exp = band(
            field(p, "exp", VERB)?,
            &format!("{what}: the expected limits"),
        )?;
        rows.push((values[xi], patch, obs, exp));
    }
    if let Some(errors) = result.get("errors").and_then(Value::as_array) {
        skipped.extend(errors.iter().map(|e| {
            e.get("patch")
                .and_then(Value::as_str)
                .map_or_else(|| e.to_string(), String::from)
        }));
    }
    if rows.is_empty() {
        return Err(Error::InvalidInput(if skipped.is_empty() {
            "no point of the grid is selected: nothing to draw".into()
        } else {
            format!(
                "no selected point has its limits within the POI's bounds (left out: {})",
                skipped.join(", ")
            )
        }));
    }
    rows.sort_by(|a, b| a.0.total_cmp(&b.0));
    if let Some(w) = rows.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(Error::InvalidInput(format!(
            "patches '{}' and '{}' share {x_label} = {}: the grid has more than one label; \
             draw a slice (select another label's value) or choose the label with x",
            w[0].1, w[1].1, w[0].0
        )));
    }
    if let Some(t) = &options.theory
        && t.len() != rows.len()
    {
        return Err(Error::InvalidInput(format!(
            "the theory curve has {} values for {} points",
            t.len(),
            rows.len()
        )));
    }
    let level = number(field(result, "level", VERB)?, "level")?;
    Ok(LimitBand {
        x_label,
        x: rows.iter().map(|r| r.0).collect(),
        patches: rows.iter().map(|r| r.1.clone()).collect(),
        observed: rows.iter().map(|r| r.2).collect(),
        expected: (0..5)
            .map(|k| rows.iter().map(|r| r.3[k]).collect())
            .collect(),
        theory: options.theory.clone(),
        cl: 1.0 - level,
        skipped,
    })
}

fn cls_curve(result: &Value) -> Result<ClsCurve> {
    const VERB: &str = "`upper-limit --scan START STOP COUNT`";
    let points = field(result, "points", VERB)?
        .as_array()
        .ok_or_else(|| Error::InvalidInput("points is not a list".into()))?;
    if points.len() < 2 {
        return Err(Error::InvalidInput(
            "the scan has fewer than two points: no curve to draw".into(),
        ));
    }
    let mut mu = Vec::new();
    let mut observed = Vec::new();
    let mut expected = vec![Vec::new(); 5];
    for (k, p) in points.iter().enumerate() {
        mu.push(number(field(p, "mu", VERB)?, &format!("points[{k}].mu"))?);
        observed.push(number(
            field(p, "CLs_obs", VERB)?,
            &format!("points[{k}].CLs_obs"),
        )?);
        for (e, v) in expected.iter_mut().zip(band(
            field(p, "CLs_exp", VERB)?,
            &format!("points[{k}].CLs_exp"),
        )?) {
            e.push(v);
        }
    }
    let limit = |v: Option<&Value>, what: &str| match v {
        None | Some(Value::Null) => Ok(None),
        Some(v) => number(v, what).map(Some),
    };
    let exp = field(result, "exp", VERB)?
        .as_array()
        .filter(|e| e.len() == 5)
        .ok_or_else(|| {
            Error::InvalidInput("exp is not the five expected limits of −2σ…+2σ".into())
        })?;
    Ok(ClsCurve {
        mu,
        observed,
        expected,
        level: number(field(result, "level", VERB)?, "level")?,
        observed_limit: limit(result.get("obs"), "obs")?,
        expected_limit: limit(exp.get(2), "exp[2]")?,
    })
}

fn impacts(result: &Value, options: &Options) -> Result<Impacts> {
    const VERB: &str = "`ranking`";
    let entries = field(result, "entries", VERB)?
        .as_array()
        .ok_or_else(|| Error::InvalidInput("entries is not a list".into()))?;
    let optional = |e: &Value, key: &str, what: &str| -> Result<Option<f64>> {
        match e.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => number(v, what).map(Some),
        }
    };
    let top = options.top.unwrap_or(20);
    let shown = entries
        .iter()
        .take(top)
        .enumerate()
        .map(|(k, e)| {
            let name = text(field(e, "name", VERB)?, &format!("entries[{k}].name"))?;
            let what = |key: &str| format!("{name}: {key}");
            Ok(ImpactEntry {
                postfit_up: number(
                    field(e, "impact_postfit_up", VERB)?,
                    &what("impact_postfit_up"),
                )?,
                postfit_down: number(
                    field(e, "impact_postfit_down", VERB)?,
                    &what("impact_postfit_down"),
                )?,
                prefit_up: optional(e, "impact_prefit_up", &what("impact_prefit_up"))?,
                prefit_down: optional(e, "impact_prefit_down", &what("impact_prefit_down"))?,
                pull: optional(e, "pull", &what("pull"))?,
                constraint: optional(e, "constraint", &what("constraint"))?,
                name,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    if shown.is_empty() {
        return Err(Error::InvalidInput(
            "the ranking has no entries (no free parameter besides the POI)".into(),
        ));
    }
    Ok(Impacts {
        poi: text(field(result, "poi", VERB)?, "poi")?,
        entries: shown,
        ranked: entries.len(),
    })
}

/// The fit's per-parameter lists: names, best fit, uncertainties.
fn fit_parameters(result: &Value) -> Result<(Vec<String>, Vec<f64>, Vec<f64>)> {
    const VERB: &str = "`fit`";
    let names: Vec<String> = field(result, "parameter_names", VERB)?
        .as_array()
        .ok_or_else(|| Error::InvalidInput("parameter_names is not a list".into()))?
        .iter()
        .map(|n| text(n, "a parameter name"))
        .collect::<Result<_>>()?;
    let bestfit = numbers(field(result, "bestfit", VERB)?, "bestfit")?;
    let sigmas = numbers(
        field(
            result,
            "uncertainties",
            "`fit` with converged uncertainties",
        )?,
        "uncertainties",
    )?;
    if bestfit.len() != names.len() || sigmas.len() != names.len() {
        return Err(Error::InvalidInput(format!(
            "{} parameter names but {} best-fit values and {} uncertainties",
            names.len(),
            bestfit.len(),
            sigmas.len()
        )));
    }
    Ok((names, bestfit, sigmas))
}

fn pulls(result: &Value, options: &Options) -> Result<Pulls> {
    const VERB: &str = "`fit`";
    let (names, bestfit, sigmas) = fit_parameters(result)?;
    let kinds = field(result, "parameter_kinds", VERB)?
        .as_array()
        .filter(|k| k.len() == names.len())
        .ok_or_else(|| {
            Error::InvalidInput("parameter_kinds is not one kind per parameter".into())
        })?;
    let centers = field(result, "prefit_center", VERB)?
        .as_array()
        .filter(|k| k.len() == names.len())
        .ok_or_else(|| {
            Error::InvalidInput("prefit_center is not one value per parameter".into())
        })?;
    let widths = field(result, "prefit_width", VERB)?
        .as_array()
        .filter(|k| k.len() == names.len())
        .ok_or_else(|| Error::InvalidInput("prefit_width is not one value per parameter".into()))?;
    let mut groups: Vec<PullGroup> = Vec::new();
    for i in 0..names.len() {
        if centers[i].is_null() || widths[i].is_null() {
            continue; // free parameters have no pull
        }
        if let Some(f) = &options.filter
            && !names[i].contains(f.as_str())
        {
            continue;
        }
        let center = number(&centers[i], &format!("{}: prefit_center", names[i]))?;
        let width = number(&widths[i], &format!("{}: prefit_width", names[i]))?;
        let kind = text(&kinds[i], &format!("{}: parameter kind", names[i]))?;
        let entry = PullEntry {
            name: names[i].clone(),
            pull: (bestfit[i] - center) / width,
            constraint: sigmas[i] / width,
        };
        match groups.iter_mut().find(|g| g.kind == kind) {
            Some(g) => g.entries.push(entry),
            None => groups.push(PullGroup {
                kind,
                entries: vec![entry],
            }),
        }
    }
    if groups.is_empty() {
        return Err(Error::InvalidInput(match &options.filter {
            Some(f) => format!("no constrained parameter's name contains '{f}'"),
            None => "the model has no constrained parameter: no pulls".into(),
        }));
    }
    Ok(Pulls { groups })
}

fn correlation(result: &Value, options: &Options) -> Result<Correlation> {
    let (names, _, _) = fit_parameters(result)?;
    let rows = field(result, "correlation", "`fit --covariance`")?
        .as_array()
        .filter(|r| r.len() == names.len())
        .ok_or_else(|| {
            Error::InvalidInput("correlation is not a square matrix over the parameters".into())
        })?;
    let matrix: Vec<Vec<f64>> = rows
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let row = numbers(r, &format!("correlation[{i}]"))?;
            if row.len() != names.len() {
                return Err(Error::InvalidInput(format!(
                    "correlation[{i}] has {} entries for {} parameters",
                    row.len(),
                    names.len()
                )));
            }
            // A correlation lies in [−1, 1] (rounding aside).
            if let Some((j, rho)) = row.iter().enumerate().find(|(_, r)| r.abs() > 1.0 + 1e-9) {
                return Err(Error::InvalidInput(format!(
                    "correlation[{i}][{j}] is {rho}, outside [−1, 1]: not a correlation matrix"
                )));
            }
            Ok(row)
        })
        .collect::<Result<_>>()?;
    let threshold = options.threshold.unwrap_or(0.2);
    // A fixed parameter's row is zero (apart from its diagonal): it is left out.
    let free: Vec<usize> = (0..names.len())
        .filter(|&i| (0..names.len()).any(|j| j != i && matrix[i][j] != 0.0) || matrix[i][i] != 0.0)
        .collect();
    let strongest = |i: usize| {
        (0..names.len())
            .filter(|&j| j != i)
            .map(|j| matrix[i][j].abs())
            .fold(0.0, f64::max)
    };
    let mut kept: Vec<usize> = free
        .iter()
        .copied()
        .filter(|&i| strongest(i) >= threshold)
        .collect();
    kept.sort_by(|&a, &b| strongest(b).total_cmp(&strongest(a)).then(a.cmp(&b)));
    kept.truncate(options.top.unwrap_or(40));
    kept.sort_unstable();
    if kept.is_empty() {
        return Err(Error::InvalidInput(format!(
            "no two parameters correlate by |ρ| ≥ {threshold}: lower the threshold"
        )));
    }
    Ok(Correlation {
        names: kept.iter().map(|&i| names[i].clone()).collect(),
        matrix: kept
            .iter()
            .map(|&i| kept.iter().map(|&j| matrix[i][j]).collect())
            .collect(),
        threshold,
        total: free.len(),
    })
}

fn likelihood_scan(result: &Value) -> Result<LikelihoodScan> {
    const VERB: &str = "`scan`";
    let values = numbers(field(result, "values", VERB)?, "values")?;
    let delta = numbers(field(result, "delta_twice_nll", VERB)?, "delta_twice_nll")?;
    if values.len() != delta.len() || values.len() < 2 {
        return Err(Error::InvalidInput(format!(
            "{} scan values and {} Δ(2 ln L) values: a curve needs two or more pairs",
            values.len(),
            delta.len()
        )));
    }
    // In increasing parameter value (a scan may run downwards: `--range 2 0 21`), so that
    // `low` and `high` are the crossings below and above the minimum.
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_by(|&a, &b| values[a].total_cmp(&values[b]));
    let (values, delta): (Vec<f64>, Vec<f64>) =
        order.iter().map(|&k| (values[k], delta[k])).unzip();
    let min = (0..delta.len())
        .min_by(|&a, &b| delta[a].total_cmp(&delta[b]))
        .expect("two or more points");
    // Linear between the points on each side of the minimum.
    let cross = |level: f64, range: Box<dyn Iterator<Item = usize>>| {
        let mut previous = min;
        for k in range {
            if delta[k] >= level && delta[previous] < level {
                let t = (level - delta[previous]) / (delta[k] - delta[previous]);
                return Some(values[previous] + t * (values[k] - values[previous]));
            }
            previous = k;
        }
        None
    };
    let crossings = [1.0, 4.0]
        .map(|level| Crossing {
            level,
            low: cross(level, Box::new((0..min).rev())),
            high: cross(level, Box::new(min + 1..delta.len())),
        })
        .to_vec();
    Ok(LikelihoodScan {
        parameter: text(field(result, "parameter", VERB)?, "parameter")?,
        values,
        delta,
        crossings,
    })
}

fn contours(result: &Value) -> Result<Contours> {
    const VERB: &str = "`scan --parameters a,b --grid …`";
    let parameters = field(result, "parameters", VERB)?
        .as_array()
        .ok_or_else(|| Error::InvalidInput("parameters is not a list".into()))?;
    let axes = field(result, "grid", VERB)?
        .as_array()
        .ok_or_else(|| Error::InvalidInput("grid is not a list of value lists".into()))?;
    if parameters.len() != 2 || axes.len() != 2 {
        return Err(Error::InvalidInput(format!(
            "a grid scan of {} parameters: contours are drawn for two",
            parameters.len()
        )));
    }
    let (xs, ys) = (numbers(&axes[0], "grid[0]")?, numbers(&axes[1], "grid[1]")?);
    // A point whose fit failed is "NaN" there: it is no candidate for the lowest point.
    let delta: Vec<f64> = field(result, "delta_twice_nll", VERB)?
        .as_array()
        .ok_or_else(|| Error::InvalidInput("delta_twice_nll is not a list".into()))?
        .iter()
        .map(|v| v.as_f64().unwrap_or(f64::NAN))
        .collect();
    if xs.len() < 2 || ys.len() < 2 || delta.len() != xs.len() * ys.len() {
        return Err(Error::InvalidInput(format!(
            "a grid of {} × {} values with {} Δ(2 ln L) values: a contour needs two or more \
             values a side and one Δ(2 ln L) per point",
            xs.len(),
            ys.len(),
            delta.len()
        )));
    }
    let k = (0..delta.len())
        .min_by(|&a, &b| delta[a].total_cmp(&delta[b]))
        .expect("four or more points");
    let levels = field(result, "contours", VERB)?
        .as_array()
        .ok_or_else(|| Error::InvalidInput("contours is not a list".into()))?
        .iter()
        .map(|c| {
            let lines = c["lines"]
                .as_array()
                .ok_or_else(|| Error::InvalidInput("a contour's lines is not a list".into()))?
                .iter()
                .map(|line| {
                    line.as_array()
                        .ok_or_else(|| Error::InvalidInput("a contour line is not a list".into()))?
                        .iter()
                        .map(|p| {
                            let xy = numbers(p, "a contour point")?;
                            match xy.as_slice() {
                                [x, y] => Ok([*x, *y]),
                                _ => Err(Error::InvalidInput(format!(
                                    "a contour point {p} is not [x, y]"
                                ))),
                            }
                        })
                        .collect::<Result<Vec<_>>>()
                })
                .collect::<Result<Vec<_>>>()?;
            Ok(ContourLevel {
                cl: number(&c["cl"], "a contour's cl")?,
                delta_twice_nll: number(&c["delta_twice_nll"], "a contour's delta_twice_nll")?,
                lines,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Contours {
        x_label: text(&parameters[0], "parameters[0]")?,
        y_label: text(&parameters[1], "parameters[1]")?,
        x_range: [xs[0], xs[xs.len() - 1]],
        y_range: [ys[0], ys[ys.len() - 1]],
        best: [xs[k / ys.len()], ys[k % ys.len()]],
        levels,
    })
}

fn yields(result: &Value, options: &Options) -> Result<Yields> {
    const VERB: &str = "`fit --yields`";
    let stage = if options.prefit { "prefit" } else { "postfit" };
    let channels = field(field(result, "yields", VERB)?, "channels", VERB)?
        .as_array()
        .ok_or_else(|| Error::InvalidInput("yields.channels is not a list".into()))?;
    let channels = channels
        .iter()
        .map(|c| {
            let channel = text(field(c, "channel", VERB)?, "a channel name")?;
            let what = |key: &str| format!("channel '{channel}': {key}");
            let total = numbers(field(c, &format!("{stage}_total"), VERB)?, &what("total"))?;
            let stdev = numbers(field(c, &format!("{stage}_stdev"), VERB)?, &what("stdev"))?;
            let samples = field(c, "samples", VERB)?
                .as_array()
                .ok_or_else(|| Error::InvalidInput(what("samples is not a list")))?
                .iter()
                .map(|s| {
                    let name = text(field(s, "name", VERB)?, &what("a sample name"))?;
                    let values = numbers(field(s, stage, VERB)?, &what(&name))?;
                    Ok((name, values))
                })
                .collect::<Result<Vec<_>>>()?;
            let observed = match c.get("observed") {
                None | Some(Value::Null) => None,
                Some(v) => Some(numbers(v, &what("observed"))?),
            };
            let bins = total.len();
            if stdev.len() != bins
                || samples.iter().any(|s| s.1.len() != bins)
                || observed.as_ref().is_some_and(|o| o.len() != bins)
            {
                return Err(Error::InvalidInput(what(
                    "the samples, total, stdev and data differ in their number of bins",
                )));
            }
            Ok(ChannelYields {
                channel,
                samples,
                total,
                stdev,
                observed,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    if channels.is_empty() {
        return Err(Error::InvalidInput("the yields have no channel".into()));
    }
    Ok(Yields { stage, channels })
}

/// Bins of the toy histograms.
const TOY_BINS: usize = 40;

fn toys(result: &Value, options: &Options) -> Result<ToyDistributions> {
    const VERB: &str = "`hypotest-toys --teststats`";
    let stats = field(result, "teststats", VERB)?;
    let sb = numbers(
        field(stats, "signal_plus_background", VERB)?,
        "teststats.signal_plus_background",
    )?;
    let b = numbers(
        field(stats, "background_only", VERB)?,
        "teststats.background_only",
    )?;
    if sb.is_empty() || b.is_empty() {
        return Err(Error::InvalidInput(
            "an ensemble has no test statistic".into(),
        ));
    }
    let observed = number(field(result, "teststat_obs", VERB)?, "teststat_obs")?;
    let mu = number(field(result, "mu", VERB)?, "mu")?;
    let test_stat = text(field(result, "test_stat", VERB)?, "test_stat")?;
    // Up to where 99.5 % of either ensemble lies (and the observed value).
    let quantile = |v: &[f64]| {
        let mut s = v.to_vec();
        s.sort_by(f64::total_cmp);
        s[((s.len() - 1) as f64 * 0.995) as usize]
    };
    let top = quantile(&sb).max(quantile(&b)).max(observed).max(1e-3) * 1.1;
    let width = top / TOY_BINS as f64;
    let edges: Vec<f64> = (0..=TOY_BINS).map(|k| k as f64 * width).collect();
    let density = |v: &[f64]| {
        let mut counts = vec![0.0; TOY_BINS];
        for &t in v {
            let k = ((t / width) as usize).min(TOY_BINS - 1);
            counts[k] += 1.0;
        }
        counts
            .iter()
            .map(|c| c / (v.len() as f64 * width))
            .collect()
    };
    let asymptotic = options
        .asymptotic
        .as_ref()
        .map(|a| asymptotic_densities(a, mu, &test_stat, top))
        .transpose()?;
    Ok(ToyDistributions {
        signal_plus_background: density(&sb),
        background_only: density(&b),
        n_toys: [sb.len(), b.len()],
        edges,
        test_stat,
        mu,
        observed,
        asymptotic,
    })
}

/// The asymptotic densities of the test statistic (Cowan, Cranmer, Gross, Vitells 2011, eqs.
/// 57, 65 and 49 for qμ, q̃μ and q0) under the two hypotheses of the toys, σ from the Asimov
/// value of an asymptotic `hypotest` at the same μ.
fn asymptotic_densities(
    hypotest: &Value,
    mu: f64,
    test_stat: &str,
    top: f64,
) -> Result<AsymptoticDensities> {
    const VERB: &str = "`hypotest` at the toys' μ and test statistic";
    let at = number(field(hypotest, "mu", VERB)?, "the asymptotic result's mu")?;
    let stat = text(
        field(hypotest, "test_stat", VERB)?,
        "the asymptotic result's test_stat",
    )?;
    if at != mu || stat != test_stat {
        return Err(Error::InvalidInput(format!(
            "the asymptotic result is {stat} at μ = {at}, the toys {test_stat} at μ = {mu}"
        )));
    }
    let sqrt_qa = number(field(hypotest, "sqrt_q_asimov", VERB)?, "sqrt_q_asimov")?;
    // The shift of √q between the hypotheses: (μ − μ′)/σ = √q_A.
    let chi = |q: f64, shift: f64| {
        let r = q.sqrt();
        0.5 / (2.0 * std::f64::consts::PI * q).sqrt() * (-0.5 * (r - shift) * (r - shift)).exp()
    };
    let q: Vec<f64> = (1..=400).map(|k| top * k as f64 / 400.0).collect();
    let (null, alternative): (Vec<f64>, Vec<f64>) = q
        .iter()
        .map(|&x| match test_stat {
            // q̃μ beyond μ²/σ² = q_A: a Gaussian in q̃ of variance 4 q_A, centred on −q_A
            // under μ and on q_A under μ′ = 0 (eq. 65).
            "qtilde" if x > sqrt_qa * sqrt_qa => {
                let qa = sqrt_qa * sqrt_qa;
                let gauss = |mean: f64| {
                    (-(x - mean) * (x - mean) / (8.0 * qa)).exp()
                        / (2.0 * (2.0 * std::f64::consts::PI * qa).sqrt())
                };
                (gauss(-qa), gauss(qa))
            }
            _ => (chi(x, 0.0), chi(x, sqrt_qa)),
        })
        .unzip();
    // For q0 the signal-plus-background ensemble is the background-only hypothesis μ = 0 (the
    // null of a discovery test), and the other one the signal at μ = 1.
    let (signal_plus_background, background_only) = (null, alternative);
    Ok(AsymptoticDensities {
        q,
        signal_plus_background,
        background_only,
        sqrt_q_asimov: sqrt_qa,
    })
}
