//! Binned HS3 (`histfactory_dist`, as ROOT 6.40's `RooJSONFactoryWSTool` writes it) read as a
//! pyhf workspace with ROOT's semantics (the workspace key `nextstat:root_semantics`): the model
//! RooFit builds when it imports the file.
//!
//! The dialect, element by element (docs/hs3.md has the table):
//! - a `histfactory_dist` per channel (`model_<channel>`), one axis; samples with `contents`
//!   (and `errors` for a staterror);
//! - `normfactor` (with a `constraint_name`: the luminosity, a Gaussian of fixed width);
//! - `normsys` (`interpolation` 5, 4 or none: pyhf's code4; 1: pyhf's code1) and `histosys`
//!   (ROOT's code 4, pyhf's code4p),
//!   each with a unit Gaussian constraint on `alpha_<name>`;
//! - `staterror` (parameters `gamma_stat_<channel>_bin_<i>`, Poisson or Gaussian, no threshold:
//!   ROOT's importer applies none);
//! - `shapesys` with relative `vals` (Poisson or Gaussian), or all `vals` zero: a shapefactor;
//! - global observables from the parameter points (`nom_…`).
//!
//! Parameter names are those of the XML route: `alpha_X` → `X`, `gamma_stat_C_bin_i` →
//! `staterror_C[i]`, `gamma_X_bin_i` → `X[i]`, a constrained `Lumi` → `lumi`.

use std::collections::BTreeMap;

use ns_core::{HistosysCode, InterpCodes, NormsysCode, Result};
use serde_json::{Map, Value, json};

use super::{
    ALPHA_PREFIX, ROOT_CODE1, ROOT_CODE4, ROOT_CODE4_AS_5, ROOT_HISTOSYS_CODE4P, ROOT_LUMI,
    STAT_SET_PREFIX, channel_of, global_observable, stat_gamma,
};
use crate::{Document, index, invalid, number, str_list};

/// The workspace of a binned analysis and the nextstat name of each HS3 parameter.
pub struct BinnedWorkspace {
    pub workspace: Value,
    pub names: BTreeMap<String, String>,
    /// The interpolation codes its modifiers name (one normsys code per model; every histosys
    /// ROOT's code 4, pyhf's code4p).
    pub codes: InterpCodes,
    /// Where the likelihood also has unbinned channels: the document with the analysis's
    /// likelihood narrowed to them, for the unbinned reader (a joint likelihood of both).
    pub unbinned: Option<Value>,
    /// The analysis's parameter of interest, as the file names it.
    pub poi: Option<String>,
    /// Every parameter of interest the analysis lists, as the workspace names them.
    pub pois: Vec<String>,
}

/// The analysis a binned read takes by default: the first not on Asimov data (ROOT lists
/// `simPdf_asimovData` first), else the first.
fn default_analysis(doc: &Value) -> Option<&str> {
    let names: Vec<&str> = doc
        .get("analyses")?
        .as_array()?
        .iter()
        .filter_map(|a| a.get("name").and_then(Value::as_str))
        .collect();
    names
        .iter()
        .find(|n| !n.to_ascii_lowercase().contains("asimov"))
        .or(names.first())
        .copied()
}

/// The workspace of `doc`'s analysis where its distributions are `histfactory_dist`; `None`
/// where none is (an unbinned model). Where they are some of its distributions, the workspace
/// of those, and the document narrowed to the others ([`BinnedWorkspace::unbinned`]).
pub fn read(doc: &Value, analysis: Option<&str>) -> Result<Option<BinnedWorkspace>> {
    let chosen = analysis.or_else(|| default_analysis(doc));
    let mut document = Document::read(doc, chosen)?;
    let dists = index(doc, "distributions")?;
    if let Some((missing, _, _)) = document
        .pairs
        .iter()
        .find(|(d, _, _)| !dists.contains_key(d))
    {
        return Err(invalid(format!(
            "likelihood '{}' names the distribution '{missing}', which is not in 'distributions'",
            document.likelihood_name
        )));
    }
    let kinds: Vec<bool> = document
        .pairs
        .iter()
        .map(|(dist, _, _)| {
            dists
                .get(dist)
                .and_then(|d| d.get("type"))
                .and_then(Value::as_str)
                == Some("histfactory_dist")
        })
        .collect();
    if !kinds.iter().any(|&b| b) {
        return Ok(None);
    }
    let unbinned = if kinds.iter().all(|&b| b) {
        None
    } else {
        let others = document
            .pairs
            .iter()
            .zip(&kinds)
            .filter(|(_, binned)| !**binned)
            .map(|((dist, data, _), _)| (*dist, *data));
        let narrowed = narrowed(doc, &document.likelihood_name, others)?;
        let mut kind = kinds.iter();
        document.pairs.retain(|_| *kind.next().unwrap_or(&false));
        Some(narrowed)
    };
    let name = chosen.unwrap_or(&document.likelihood_name).to_string();
    let mut binned = Translation::new(doc, &document).run(&dists, name)?;
    binned.unbinned = unbinned;
    Ok(Some(binned))
}

/// `doc` with its likelihood `likelihood` holding only the (distribution, data) `pairs`.
fn narrowed<'a>(
    doc: &Value,
    likelihood: &str,
    pairs: impl Iterator<Item = (&'a str, &'a str)>,
) -> Result<Value> {
    let (dists, data): (Vec<&str>, Vec<&str>) = pairs.unzip();
    let mut narrowed = doc.clone();
    let entry = narrowed
        .get_mut("likelihoods")
        .and_then(Value::as_array_mut)
        .and_then(|list| {
            list.iter_mut()
                .find(|l| l.get("name").and_then(Value::as_str) == Some(likelihood))
        })
        .ok_or_else(|| invalid(format!("no likelihood '{likelihood}' to narrow")))?;
    entry["distributions"] = json!(dists);
    entry["data"] = json!(data);
    Ok(narrowed)
}

struct Translation<'a> {
    document: &'a Document<'a>,
    /// Values of the parameter points, for global observables.
    values: BTreeMap<&'a str, f64>,
    names: BTreeMap<String, String>,
    parameters: BTreeMap<String, Value>,
    staterror: Map<String, Value>,
    shapesys: Map<String, Value>,
    /// nextstat's name → the range of its Gaussian's global observable.
    global_ranges: BTreeMap<String, (f64, f64)>,
    /// The normsys interpolation and the first modifier that gave it.
    normsys_code: Option<(NormsysCode, String)>,
}

impl<'a> Translation<'a> {
    fn new(doc: &'a Value, document: &'a Document<'a>) -> Self {
        // Every point's values, the first point that gives one winning.
        let mut values = BTreeMap::new();
        let entries = doc
            .get("parameter_points")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|point| point.get("parameters").and_then(Value::as_array))
            .flatten();
        for p in entries {
            if let (Some(n), Some(v)) = (
                p.get("name").and_then(Value::as_str),
                p.get("value").and_then(Value::as_f64),
            ) {
                values.entry(n).or_insert(v);
            }
        }
        Translation {
            document,
            values,
            names: BTreeMap::new(),
            parameters: BTreeMap::new(),
            staterror: Map::new(),
            shapesys: Map::new(),
            global_ranges: BTreeMap::new(),
            normsys_code: None,
        }
    }

    /// A global observable's value: the analysis's parameter point, then the others.
    fn global(&self, name: &str, at: &str) -> Result<f64> {
        if let Some(v) = self.document.variables.get(name).and_then(|v| v.value) {
            return Ok(v);
        }
        self.values.get(name).copied().ok_or_else(|| {
            invalid(format!(
                "{at}: the global observable '{name}' has no value in any parameter point"
            ))
        })
    }

    /// The measurement's configuration of parameter `ours` (HS3's `theirs`): init, bounds and
    /// fixed from the analysis's variables, with `extra` keys.
    fn configure(&mut self, ours: &str, theirs: &[&str], extra: Value) {
        if self.parameters.contains_key(ours) {
            // A parameter shared by several samples: configured once.
            return;
        }
        let mut config = Map::new();
        config.insert("name".into(), json!(ours));
        let vars: Vec<_> = theirs
            .iter()
            .map(|t| self.document.variables.get(*t))
            .collect();
        if vars.iter().all(|v| v.and_then(|v| v.value).is_some()) {
            config.insert(
                "inits".into(),
                json!(
                    vars.iter()
                        .map(|v| v.and_then(|v| v.value))
                        .collect::<Vec<_>>()
                ),
            );
        }
        if vars.iter().all(|v| v.and_then(|v| v.range).is_some()) {
            let bounds: Vec<[f64; 2]> = vars
                .iter()
                .filter_map(|v| v.and_then(|v| v.range))
                .map(|(lo, hi)| [lo, hi])
                .collect();
            config.insert("bounds".into(), json!(bounds));
        }
        if vars.iter().all(|v| v.is_some_and(|v| v.constant)) {
            config.insert("fixed".into(), json!(true));
        }
        if let Value::Object(extra) = extra {
            config.extend(extra);
        }
        self.parameters
            .insert(ours.to_string(), Value::Object(config));
    }

    /// The name under which HS3's `theirs` enters the workspace; one HS3 parameter has one
    /// name, and two may not share one.
    fn name(&mut self, theirs: &str, ours: String) -> Result<String> {
        if let Some((other, _)) = self
            .names
            .iter()
            .find(|(t, o)| **o == ours && t.as_str() != theirs)
        {
            return Err(invalid(format!(
                "the parameters '{theirs}' and '{other}' would both be '{ours}' in nextstat"
            )));
        }
        self.names.insert(theirs.to_string(), ours.clone());
        Ok(ours)
    }

    /// The value of global observable `name`, the mean of the Gaussian constraint of `ours`
    /// (nextstat's name): the range of the observable, where the file gives one, is where
    /// RooFit normalises that Gaussian.
    fn gaussian_mean(&mut self, name: &str, ours: &str, at: &str) -> Result<f64> {
        if let Some(range) = self.document.variables.get(name).and_then(|v| v.range) {
            self.global_ranges.insert(ours.to_string(), range);
        }
        self.global(name, at)
    }

    /// The global observables of per-bin parameters `ps` (nextstat's `ours[i]`): their values
    /// as the configuration's `auxdata`; no key where no parameter point gives any of them
    /// (a file written without ROOT's nominal snapshot): RooFit's importer then puts each at
    /// its constraint's nominal (τ = 1/σ² for a Poisson, 1 for a Gaussian), as the model's
    /// default does.
    fn per_bin_means(&mut self, ps: &[&str], ours: &str, at: &str) -> Result<Value> {
        let given = |t: &Self, p: &&str| {
            let name = global_observable(p);
            t.document
                .variables
                .get(&name)
                .and_then(|v| v.value)
                .is_some()
                || t.values.contains_key(name.as_str())
        };
        if !ps.iter().any(|p| given(self, p)) {
            return Ok(json!({}));
        }
        let means = ps
            .iter()
            .enumerate()
            .map(|(i, p)| self.gaussian_mean(&global_observable(p), &format!("{ours}[{i}]"), at))
            .collect::<Result<Vec<f64>>>()?;
        Ok(json!({"auxdata": means}))
    }

    /// The unit Gaussian constraint `constraint_name` of `modifier` on `parameter` (nextstat's
    /// `ours`): its mean's value (the global observable).
    fn unit_gaussian(
        &mut self,
        dists: &BTreeMap<&str, &Value>,
        modifier: &Value,
        parameter: &str,
        ours: &str,
        at: &str,
    ) -> Result<f64> {
        let Some(constraint) = modifier.get("constraint_name").and_then(Value::as_str) else {
            // The older (ROOT 6.32, ATLAS-published) dialect: `"constraint": "Gauss"` on the
            // modifier, around the global observable `nom_<parameter>` (0 where no point
            // gives it, as ROOT reads it).
            return match modifier.get("constraint").and_then(Value::as_str) {
                Some("Gauss") => Ok(self
                    .gaussian_mean(&global_observable(parameter), ours, at)
                    .unwrap_or(0.0)),
                Some(other) => Err(invalid(format!(
                    "{at}: constraint '{other}' (an α takes HistFactory's unit Gaussian, \"Gauss\")"
                ))),
                None => Err(invalid(format!(
                    "{at}: no constraint_name and no \"constraint\": an α needs its Gaussian"
                ))),
            };
        };
        let c = dists.get(constraint).ok_or_else(|| {
            invalid(format!(
                "{at}: its constraint '{constraint}' is not among the distributions"
            ))
        })?;
        let sigma = c.get("sigma").and_then(Value::as_f64);
        if c.get("type").and_then(Value::as_str) != Some("gaussian_dist")
            || c.get("x").and_then(Value::as_str) != Some(parameter)
            || sigma != Some(1.0)
        {
            return Err(invalid(format!(
                "{at}: its constraint '{constraint}' must be a unit gaussian_dist of '{parameter}' \
                 (HistFactory's; another width has no pyhf counterpart)"
            )));
        }
        match c.get("mean") {
            Some(Value::String(mean)) => self.gaussian_mean(mean, ours, at),
            Some(v) => number(v, &format!("{at}: constraint mean")),
            None => Err(invalid(format!(
                "{at}: its constraint '{constraint}' has no mean"
            ))),
        }
    }

    fn run(mut self, dists: &BTreeMap<&str, &Value>, analysis: String) -> Result<BinnedWorkspace> {
        let (mut channels, mut observations) = (Vec::new(), Vec::new());
        for &(dist_name, data_name, data) in &self.document.pairs {
            let dist = dists[dist_name];
            let channel = channel_of(dist_name);
            let at_channel = format!("histfactory_dist '{dist_name}'");
            let bins = axis_bins(dist.pointer("/axes/0"), &at_channel)?;
            if dist
                .get("axes")
                .and_then(Value::as_array)
                .is_some_and(|a| a.len() != 1)
            {
                return Err(invalid(format!(
                    "{at_channel}: one axis is read (a HistFactory channel is one histogram)"
                )));
            }
            let mut samples = Vec::new();
            for (s, sample) in dist
                .get("samples")
                .and_then(Value::as_array)
                .ok_or_else(|| invalid(format!("{at_channel}: no samples")))?
                .iter()
                .enumerate()
            {
                let sample_name = sample
                    .get("name")
                    .and_then(Value::as_str)
                    .ok_or_else(|| invalid(format!("{at_channel} samples[{s}] has no name")))?;
                let at = format!("{at_channel} sample '{sample_name}'");
                let contents = numbers(
                    sample.pointer("/data/contents"),
                    bins,
                    format!("{at} data.contents"),
                )?;
                let mut modifiers = Vec::new();
                for m in sample
                    .get("modifiers")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let kind = m.get("type").and_then(Value::as_str).unwrap_or("");
                    let mname = m.get("name").and_then(Value::as_str).unwrap_or("");
                    let at = format!("{at} modifier '{mname}'");
                    modifiers.push(
                        self.modifier(dists, m, kind, &at, sample, &contents, bins, channel)?,
                    );
                }
                samples
                    .push(json!({"name": sample_name, "data": contents, "modifiers": modifiers}));
            }
            channels.push(json!({"name": channel, "samples": samples}));
            observations.push(json!({
                "name": channel,
                "data": numbers(data.get("contents"), bins, format!("data '{data_name}' contents"))?,
            }));
        }
        let ours = |p: &str| self.names.get(p).cloned().unwrap_or_else(|| p.to_string());
        let pois: Vec<String> = self.document.pois.iter().map(|p| ours(p)).collect();
        let poi = pois.first().cloned().unwrap_or_default();
        let workspace = json!({
            "channels": channels,
            "observations": observations,
            "measurements": [{"name": analysis, "config": {
                "poi": poi,
                "parameters": self.parameters.into_values().collect::<Vec<_>>(),
            }}],
            "version": "1.0.0",
            "nextstat:root_semantics": {
                "staterror": self.staterror,
                "shapesys": self.shapesys,
                "global_ranges": self.global_ranges,
            },
        });
        Ok(BinnedWorkspace {
            workspace,
            unbinned: None,
            poi: self.document.poi.map(str::to_string),
            pois,
            names: self.names,
            codes: InterpCodes {
                normsys: self
                    .normsys_code
                    .map_or(NormsysCode::Code4, |(code, _)| code),
                histosys: HistosysCode::Code4p,
            },
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn modifier(
        &mut self,
        dists: &BTreeMap<&str, &Value>,
        m: &Value,
        kind: &str,
        at: &str,
        sample: &Value,
        contents: &[f64],
        bins: usize,
        channel: &str,
    ) -> Result<Value> {
        let numbers = |v: Option<&Value>, what: String| numbers(v, bins, what);
        let parameter = || {
            m.get("parameter")
                .and_then(Value::as_str)
                .ok_or_else(|| invalid(format!("{at}: no parameter")))
        };
        // A per-bin modifier's parameters: one per bin.
        let parameters = || {
            let ps = str_list(
                m.get("parameters").unwrap_or(&Value::Null),
                &format!("{at} parameters"),
            )?;
            if ps.len() != bins {
                return Err(invalid(format!(
                    "{at}: {} parameters for {bins} bins (one γ per bin)",
                    ps.len()
                )));
            }
            Ok(ps)
        };
        let constraint_type = |default: &str| -> Result<&'static str> {
            match m
                .get("constraint_type")
                .or_else(|| m.get("constraint"))
                .and_then(Value::as_str)
                .unwrap_or(default)
            {
                "Poisson" => Ok("poisson"),
                "Gauss" | "Gaussian" | "Normal" => Ok("gaussian"),
                other => Err(invalid(format!(
                    "{at}: constraint type '{other}' (Poisson or Gauss are read)"
                ))),
            }
        };
        Ok(match kind {
            "normfactor" => {
                let p = parameter()?;
                match m.get("constraint_name").and_then(Value::as_str) {
                    None => {
                        let ours = self.name(p, p.to_string())?;
                        self.configure(&ours, &[p], json!({}));
                        json!({"name": ours, "type": "normfactor", "data": null})
                    }
                    Some(constraint) => {
                        // The luminosity: a Gaussian of fixed width around its global
                        // observable. ROOT's importer reads a width given as a number through
                        // `%g` (six significant digits).
                        let c = dists.get(constraint).ok_or_else(|| {
                            invalid(format!("{at}: its constraint '{constraint}' is missing"))
                        })?;
                        if c.get("type").and_then(Value::as_str) != Some("gaussian_dist")
                            || c.get("x").and_then(Value::as_str) != Some(p)
                        {
                            return Err(invalid(format!(
                                "{at}: its constraint '{constraint}' must be a gaussian_dist of '{p}'"
                            )));
                        }
                        let ours = self.name(
                            p,
                            if p == ROOT_LUMI {
                                "lumi".into()
                            } else {
                                p.into()
                            },
                        )?;
                        let sigma = match c.get("sigma") {
                            Some(Value::String(s)) => self.global(s, at)?,
                            Some(v) => six_digits(number(v, &format!("{at}: sigma"))?),
                            None => {
                                return Err(invalid(format!("{at}: its constraint has no sigma")));
                            }
                        };
                        let mean = match c.get("mean") {
                            Some(Value::String(s)) => self.gaussian_mean(s, &ours, at)?,
                            Some(v) => six_digits(number(v, &format!("{at}: mean"))?),
                            None => {
                                return Err(invalid(format!("{at}: its constraint has no mean")));
                            }
                        };
                        self.configure(&ours, &[p], json!({"auxdata": [mean], "sigmas": [sigma]}));
                        json!({"name": ours, "type": "lumi", "data": null})
                    }
                }
            }
            "normsys" | "histosys" => {
                let p = parameter()?;
                let code = m.get("interpolation").and_then(Value::as_i64);
                let normsys = match code {
                    _ if kind != "normsys" => None,
                    // No key: ROOT's importer gives code 4, which ROOT 6.40 evaluates exactly
                    // as code 5 (measured: docs/hs3-binned.md).
                    None | Some(ROOT_CODE4) | Some(ROOT_CODE4_AS_5) => Some(NormsysCode::Code4),
                    Some(ROOT_CODE1) => Some(NormsysCode::Code1),
                    _ => None,
                };
                let readable = match kind {
                    "normsys" => normsys.is_some(),
                    _ => code.is_none() || code == Some(ROOT_HISTOSYS_CODE4P),
                };
                if !readable {
                    return Err(invalid(format!(
                        "{at}: interpolation code {} is not read: a normsys must be ROOT's 5 or \
                         4 (pyhf's code4, the default) or 1 (pyhf's code1), a histosys ROOT's 4 \
                         (pyhf's code4p, the default)",
                        code.map_or("none".into(), |c| c.to_string())
                    )));
                }
                if let Some(code) = normsys {
                    match self.normsys_code {
                        Some((other, ref first)) if other != code => {
                            return Err(invalid(format!(
                                "{at}: interpolation {} where {first} has {}: nextstat reads \
                                 one normsys interpolation per model",
                                code.name(),
                                other.name()
                            )));
                        }
                        Some(_) => {}
                        None => self.normsys_code = Some((code, at.to_string())),
                    }
                }
                let ours = self.name(p, p.strip_prefix(ALPHA_PREFIX).unwrap_or(p).to_string())?;
                let aux = self.unit_gaussian(dists, m, p, &ours, at)?;
                self.configure(&ours, &[p], json!({"auxdata": [aux]}));
                let data = if kind == "normsys" {
                    json!({
                        "hi": number(m.pointer("/data/hi").unwrap_or(&Value::Null), &format!("{at} data.hi"))?,
                        "lo": number(m.pointer("/data/lo").unwrap_or(&Value::Null), &format!("{at} data.lo"))?,
                    })
                } else {
                    json!({
                        "hi_data": numbers(m.pointer("/data/hi/contents"), format!("{at} data.hi.contents"))?,
                        "lo_data": numbers(m.pointer("/data/lo/contents"), format!("{at} data.lo.contents"))?,
                    })
                };
                json!({"name": ours, "type": kind, "data": data})
            }
            "staterror" => {
                // The older dialect names no parameters: ROOT's names for the channel.
                let named: Vec<String>;
                let ps = if m.get("parameters").is_some() {
                    parameters()?
                } else {
                    named = (0..bins).map(|i| stat_gamma(channel, i)).collect();
                    named.iter().map(String::as_str).collect()
                };
                let channel = ps
                    .first()
                    .and_then(|p| p.strip_prefix("gamma_stat_"))
                    .and_then(|p| p.strip_suffix("_bin_0"))
                    .ok_or_else(|| {
                        invalid(format!(
                            "{at}: staterror parameters must be gamma_stat_<channel>_bin_<i>"
                        ))
                    })?;
                let ours = format!("{STAT_SET_PREFIX}{channel}");
                for (i, p) in ps.iter().enumerate() {
                    if *p != stat_gamma(channel, i) {
                        return Err(invalid(format!(
                            "{at}: parameter {i} is '{p}', not gamma_stat_{channel}_bin_{i}"
                        )));
                    }
                    self.name(p, format!("{ours}[{i}]"))?;
                }
                let constraint = constraint_type("Poisson")?;
                let errors = numbers(
                    sample.pointer("/data/errors"),
                    format!("{at}: the sample's data.errors"),
                )?;
                let aux = self.per_bin_means(&ps, &ours, at)?;
                self.configure(&ours, &ps, aux);
                self.staterror.insert(
                    ours.clone(),
                    json!({"constraint": constraint, "threshold": 0.0}),
                );
                json!({"name": ours, "type": "staterror", "data": errors})
            }
            "shapesys" => {
                let ps = parameters()?;
                let ours = m
                    .get("name")
                    .and_then(Value::as_str)
                    .ok_or_else(|| invalid(format!("{at}: no name")))?
                    .to_string();
                for (i, p) in ps.iter().enumerate() {
                    self.name(p, format!("{ours}[{i}]"))?;
                }
                let vals = numbers(m.pointer("/data/vals"), format!("{at} data.vals"))?;
                if vals.iter().all(|&v| v == 0.0) {
                    // ROOT writes a ShapeFactor as a shapesys without widths.
                    self.configure(&ours, &ps, json!({}));
                    return Ok(json!({"name": ours, "type": "shapefactor", "data": null}));
                }
                // A zero width leaves a γ free and unconstrained in ROOT, which a shapesys
                // cannot say, unless the γ is constant (a bin without a width, fixed).
                let unconstrained = vals.iter().zip(&ps).find(|&(&v, p)| {
                    let constant = self.document.variables.get(*p).is_some_and(|v| v.constant);
                    let readable = (v > 0.0 && v.is_finite()) || (v == 0.0 && constant);
                    !readable
                });
                if let Some((v, p)) = unconstrained {
                    return Err(invalid(format!(
                        "{at}: the relative width of '{p}' is {v}; every width must be positive, \
                         or zero for a constant γ (ROOT leaves a free γ without a width \
                         unconstrained, which a shapesys cannot say)"
                    )));
                }
                let constraint = constraint_type("Gauss")?;
                let aux = self.per_bin_means(&ps, &ours, at)?;
                self.configure(&ours, &ps, aux);
                self.shapesys.insert(
                    ours.clone(),
                    json!({"constraint": constraint, "relative": vals}),
                );
                let absolute: Vec<f64> = vals.iter().zip(contents).map(|(v, c)| v * c).collect();
                json!({"name": ours, "type": "shapesys", "data": absolute})
            }
            other => {
                return Err(invalid(format!(
                    "{at}: modifier type '{other}' is not read (normfactor, normsys, histosys, \
                     staterror and shapesys are)"
                )));
            }
        })
    }
}

/// The number of bins of a channel's axis: `nbins`, or one fewer than its `edges` (variable
/// bins, as ATLAS's files give them: a binned likelihood reads counts, whatever the widths).
fn axis_bins(axis: Option<&Value>, at: &str) -> Result<usize> {
    let axis = axis.ok_or_else(|| invalid(format!("{at}: no axes")))?;
    if let Some(n) = axis.get("nbins") {
        return n
            .as_u64()
            .filter(|&n| n > 0)
            .map(|n| n as usize)
            .ok_or_else(|| {
                invalid(format!(
                    "{at}: axes[0] nbins must be a positive whole number, not {n}"
                ))
            });
    }
    let edges = axis
        .get("edges")
        .ok_or_else(|| invalid(format!("{at}: axes[0] has neither nbins nor edges")))?;
    let edges: Vec<f64> = edges
        .as_array()
        .ok_or_else(|| invalid(format!("{at}: axes[0] edges must be a list of numbers")))?
        .iter()
        .map(|e| number(e, &format!("{at}: axes[0] edges")))
        .collect::<Result<_>>()?;
    let increasing = edges.windows(2).all(|w| w[0] < w[1]) && edges.iter().all(|e| e.is_finite());
    if edges.len() < 2 || !increasing {
        return Err(invalid(format!(
            "{at}: axes[0] edges must be at least two finite numbers, increasing (bins between them)"
        )));
    }
    Ok(edges.len() - 1)
}

/// A list of `bins` numbers at `v`; an error names `what`.
fn numbers(v: Option<&Value>, bins: usize, what: String) -> Result<Vec<f64>> {
    let list = v
        .and_then(Value::as_array)
        .ok_or_else(|| invalid(format!("{what} must be a list of numbers")))?;
    if list.len() != bins {
        return Err(invalid(format!(
            "{what} has {} entries for {bins} bins",
            list.len()
        )));
    }
    list.iter().map(|x| number(x, &what)).collect()
}

/// A number as `%g` prints it (six significant digits): how ROOT's importer reads a number in
/// the place of a parameter.
fn six_digits(x: f64) -> f64 {
    format!("{x:.5e}").parse().unwrap_or(x)
}
