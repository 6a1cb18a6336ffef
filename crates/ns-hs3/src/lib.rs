//! The layer of an HS3 document that does not depend on what its distributions are — shared by
//! the readers of unbinned and binned distributions: what makes a document HS3, named entries,
//! numbers and ranges with messages naming their place, the analysis read (its likelihood's
//! distributions paired with their data, its parameter of interest), the variables of parameter
//! points and domains, and the axes of data.

pub mod binned;

use std::collections::{BTreeMap, HashMap};

use ns_core::{Error, Result};
use serde_json::Value;

/// Whether a JSON document is an HS3 model (rather than a pyhf workspace): a `distributions`
/// list and either `likelihoods` or `metadata.hs3_version`.
pub fn is_hs3(doc: &Value) -> bool {
    doc.get("distributions").is_some_and(Value::is_array)
        && (doc.get("likelihoods").is_some() || doc.pointer("/metadata/hs3_version").is_some())
}

/// The entries of `doc` of nextstat's own types (`"type": "nextstat:…"`: flows, Parquet
/// data), as "distribution 'NAME' (TYPE)": what no other HS3 reader reads.
pub fn nextstat_entries(doc: &Value) -> Vec<String> {
    ["distributions", "data"]
        .iter()
        .flat_map(|list| {
            doc.get(list)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(move |entry| {
                    let kind = entry.get("type").and_then(Value::as_str)?;
                    kind.starts_with("nextstat:").then(|| {
                        let name = entry.get("name").and_then(Value::as_str).unwrap_or("?");
                        format!("{} '{name}' ({kind})", list.trim_end_matches('s'))
                    })
                })
        })
        .collect()
}

/// One axis of data or of a domain: its name and its range.
#[derive(Clone, Debug, PartialEq)]
pub struct Axis {
    pub name: String,
    pub lo: f64,
    pub hi: f64,
}

/// An error of the model.
pub fn invalid(msg: String) -> Error {
    Error::InvalidModel(msg)
}

/// Named entries of a top-level array.
pub fn index<'a>(doc: &'a Value, key: &str) -> Result<BTreeMap<&'a str, &'a Value>> {
    let mut out = BTreeMap::new();
    let Some(list) = doc.get(key) else {
        return Ok(out);
    };
    let list = list
        .as_array()
        .ok_or_else(|| invalid(format!("'{key}' must be a list")))?;
    for (i, entry) in list.iter().enumerate() {
        let name = entry
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| invalid(format!("{key}[{i}] has no \"name\"")))?;
        // ROOT writes a node shared by several channels once per use: identical repeats are one.
        if let Some(previous) = out.insert(name, entry)
            && previous != entry
        {
            return Err(invalid(format!(
                "{key}: two different entries are named '{name}'"
            )));
        }
    }
    Ok(out)
}

pub fn str_list<'a>(v: &'a Value, what: &str) -> Result<Vec<&'a str>> {
    v.as_array()
        .ok_or_else(|| invalid(format!("{what} must be a list of names")))?
        .iter()
        .map(|x| {
            x.as_str()
                .ok_or_else(|| invalid(format!("{what} must be a list of names")))
        })
        .collect()
}

pub fn number(v: &Value, what: &str) -> Result<f64> {
    v.as_f64()
        .ok_or_else(|| invalid(format!("{what} must be a number, not {v}")))
}

/// `entry[key]` where given: a number, else an error naming `at`.
pub fn optional_number(entry: &Value, key: &str, at: &str) -> Result<Option<f64>> {
    match entry.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_f64()
            .map(Some)
            .ok_or_else(|| invalid(format!("{at}: '{key}' must be a number, not {v}"))),
    }
}

/// The `min`/`max` of a parameter or axis where given: both numbers, min < max.
pub fn optional_range(entry: &Value, at: &str) -> Result<Option<(f64, f64)>> {
    match (
        optional_number(entry, "min", at)?,
        optional_number(entry, "max", at)?,
    ) {
        (Some(lo), Some(hi)) if lo <= hi => Ok(Some((lo, hi))),
        (Some(lo), Some(hi)) => Err(invalid(format!(
            "{at}: its range [{lo}, {hi}] is empty (min must not exceed max)"
        ))),
        _ => Ok(None),
    }
}

/// A variable of the parameter point and the domains.
#[derive(Clone, Debug, Default)]
pub struct Variable {
    pub value: Option<f64>,
    pub constant: bool,
    pub range: Option<(f64, f64)>,
}

/// The axes of the data entry `name`: a non-empty list.
pub fn read_axes(entry: &Value, name: &str) -> Result<Vec<Axis>> {
    let axes = entry
        .get("axes")
        .ok_or_else(|| invalid(format!("data '{name}' has no list 'axes'")))?;
    let axes = read_axes_list(axes, &format!("data '{name}'"))?;
    if axes.is_empty() {
        return Err(invalid(format!("data '{name}' has no axes")));
    }
    Ok(axes)
}

/// A list of axes `[{"name", "min", "max"}]`; `what` names its owner in messages.
pub fn read_axes_list(list: &Value, what: &str) -> Result<Vec<Axis>> {
    let axes = list
        .as_array()
        .ok_or_else(|| invalid(format!("{what}: the axes must be a list")))?;
    axes.iter()
        .enumerate()
        .map(|(i, a)| {
            let axis = a.get("name").and_then(Value::as_str).ok_or_else(|| invalid(format!("{what} axis {i} has no name")))?;
            let bound = |k: &str| number(a.get(k).unwrap_or(&Value::Null), &format!("{what} axis '{axis}' {k}"));
            let (lo, hi) = (bound("min")?, bound("max")?);
            if !(lo < hi && lo.is_finite() && hi.is_finite()) {
                return Err(invalid(format!("{what} axis '{axis}' has the range [{lo}, {hi}]; it must be finite and not empty")));
            }
            Ok(Axis { name: axis.to_string(), lo, hi })
        })
        .collect()
}

/// What an HS3 document says whatever its distributions are: the likelihood of the analysis
/// read (its distributions paired with their data), the variables of its parameter point and
/// domains, and its parameter of interest.
pub struct Document<'a> {
    pub likelihood_name: String,
    /// (distribution, data name, data entry), in the likelihood's order.
    pub pairs: Vec<(&'a str, &'a str, &'a Value)>,
    pub variables: HashMap<String, Variable>,
    /// Variables in the order of the parameter point.
    pub order: Vec<String>,
    pub poi: Option<&'a str>,
    /// Every parameter of interest the analysis lists, `poi` first.
    pub pois: Vec<&'a str>,
}

impl<'a> Document<'a> {
    /// The analysis named `analysis` (default: the first) of `doc`, or its first likelihood
    /// where it has no analysis.
    pub fn read(doc: &'a Value, analysis: Option<&str>) -> Result<Self> {
        let analyses = index(doc, "analyses")?;
        let likelihoods = index(doc, "likelihoods")?;
        let data = index(doc, "data")?;
        let domains = index(doc, "domains")?;
        let points = index(doc, "parameter_points")?;
        let analysis = match analysis {
            Some(a) => Some(*analyses.get(a).ok_or_else(|| {
                invalid(format!(
                    "no analysis '{a}' (the file has: {})",
                    analyses.keys().copied().collect::<Vec<_>>().join(", ")
                ))
            })?),
            None => doc
                .get("analyses")
                .and_then(Value::as_array)
                .and_then(|a| a.first()),
        };
        let likelihood_name = match analysis
            .and_then(|a| a.get("likelihood"))
            .and_then(Value::as_str)
        {
            Some(l) => l.to_string(),
            None => doc
                .get("likelihoods")
                .and_then(Value::as_array)
                .and_then(|l| l.first())
                .and_then(|l| l.get("name"))
                .and_then(Value::as_str)
                .ok_or_else(|| invalid("the file has no likelihood".into()))?
                .to_string(),
        };
        let likelihood = likelihoods.get(likelihood_name.as_str()).ok_or_else(|| {
            invalid(format!(
                "the analysis names the likelihood '{likelihood_name}', which is not in 'likelihoods'"
            ))
        })?;

        // Variables: the parameter point, then the domains (the analysis's first).
        let mut variables: HashMap<String, Variable> = HashMap::new();
        let mut order = Vec::new();
        let point_name = analysis
            .and_then(|a| a.get("init"))
            .and_then(Value::as_str)
            .unwrap_or("default_values");
        let point = points.get(point_name).copied().or_else(|| {
            doc.get("parameter_points")
                .and_then(Value::as_array)
                .and_then(|p| p.first())
        });
        if let Some(point) = point {
            let point_name = point
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or(point_name);
            let entries = match point.get("parameters") {
                None => &Vec::new(),
                Some(Value::Array(list)) => list,
                Some(_) => {
                    return Err(invalid(format!(
                        "parameter point '{point_name}': 'parameters' must be a list"
                    )));
                }
            };
            for (i, p) in entries.iter().enumerate() {
                let name = p.get("name").and_then(Value::as_str).ok_or_else(|| {
                    invalid(format!(
                        "parameter point '{point_name}' parameters[{i}] has no \"name\""
                    ))
                })?;
                let at = format!("parameter point '{point_name}' parameter '{name}'");
                if order.iter().any(|o| o == name) {
                    return Err(invalid(format!(
                        "{at} is listed twice; give each parameter once"
                    )));
                }
                let var = variables.entry(name.to_string()).or_default();
                var.value = optional_number(p, "value", &at)?;
                var.constant = match p.get("const") {
                    None | Some(Value::Null) => false,
                    Some(Value::Bool(b)) => *b,
                    Some(other) => {
                        return Err(invalid(format!(
                            "{at} 'const' must be true or false, not {other}"
                        )));
                    }
                };
                var.range = optional_range(p, &at)?;
                order.push(name.to_string());
            }
        }
        let mut domain_names: Vec<&str> = analysis
            .and_then(|a| a.get("domains"))
            .and_then(Value::as_array)
            .map(|d| d.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        domain_names.extend(
            domains
                .keys()
                .copied()
                .filter(|d| !domain_names.contains(d))
                .collect::<Vec<_>>(),
        );
        for dname in domain_names {
            let Some(domain) = domains.get(dname) else {
                return Err(invalid(format!(
                    "the analysis names the domain '{dname}', which is not in 'domains'"
                )));
            };
            for a in domain
                .get("axes")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let name = a
                    .get("name")
                    .and_then(Value::as_str)
                    .ok_or_else(|| invalid(format!("domain '{dname}': an axis has no \"name\"")))?;
                let range = optional_range(a, &format!("domain '{dname}' axis '{name}'"))?;
                let var = variables.entry(name.to_string()).or_default();
                if var.range.is_none() {
                    var.range = range;
                }
            }
        }
        // The domains take precedence over a parameter point's own min/max.
        for dname in analysis
            .and_then(|a| a.get("domains"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            for a in domains
                .get(dname)
                .and_then(|d| d.get("axes"))
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let (Some(name), Some(lo), Some(hi)) = (
                    a.get("name").and_then(Value::as_str),
                    a.get("min").and_then(Value::as_f64),
                    a.get("max").and_then(Value::as_f64),
                ) {
                    variables.entry(name.to_string()).or_default().range = Some((lo, hi));
                }
            }
        }
        let dists = str_list(
            likelihood.get("distributions").unwrap_or(&Value::Null),
            &format!("likelihood '{likelihood_name}' distributions"),
        )?;
        let datas = str_list(
            likelihood.get("data").unwrap_or(&Value::Null),
            &format!("likelihood '{likelihood_name}' data"),
        )?;
        if dists.len() != datas.len() || dists.is_empty() {
            return Err(invalid(format!(
                "likelihood '{likelihood_name}' pairs {} distributions with {} datasets (one each, at least one)",
                dists.len(),
                datas.len()
            )));
        }
        let pairs = dists
            .iter()
            .zip(&datas)
            .map(|(&dist, &dname)| {
                let entry = data.get(dname).ok_or_else(|| {
                    invalid(format!(
                        "likelihood '{likelihood_name}' names the data '{dname}', which is not in 'data'"
                    ))
                })?;
                Ok((dist, dname, *entry))
            })
            .collect::<Result<Vec<_>>>()?;
        let pois: Vec<&str> = analysis
            .and_then(|a| a.get("parameters_of_interest"))
            .and_then(Value::as_array)
            .map_or(&[][..], Vec::as_slice)
            .iter()
            .map_while(Value::as_str)
            .collect();
        Ok(Document {
            likelihood_name,
            pairs,
            variables,
            order,
            poi: pois.first().copied(),
            pois,
        })
    }
}
