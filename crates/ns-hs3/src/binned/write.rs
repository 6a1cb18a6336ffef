//! A HistFactory model written as binned HS3 in ROOT 6.40's dialect: the file ROOT's
//! `RooJSONFactoryWSTool` imports as the likelihood nextstat evaluates (docs/hs3-binned.md has
//! the table and the checks against RooFit).
//!
//! - one `histfactory_dist` per channel, its samples in the model's order;
//! - normfactor; lumi as a normfactor with a Gaussian constraint whose width is a constant
//!   parameter (ROOT reads a number in that place through `%g`, six digits);
//! - normsys with ROOT's code 5 (pyhf's code4) or 1 (code1); histosys without a code (ROOT reads
//!   every histosys with its code 4, pyhf's code4p); each α with a unit Gaussian around its
//!   global observable;
//! - staterror and shapesys as `shapesys` with the parameter set's relative widths and
//!   constraint: ROOT's importer makes every `staterror` a Poisson, so a Gaussian one is written
//!   in the form it reads right; shapefactor as a `shapesys` without widths (free γ, ROOT's own
//!   encoding);
//! - starts, bounds and constant parameters from the measurement; global observables unbounded
//!   except where the model normalises a Gaussian over a range (ROOT's semantics).
//!
//! ROOT clips each sample's yield at zero (its positive-definite interpolation): the file means
//! that likelihood, which is pyhf's wherever no yield turns negative. What ROOT cannot mean is
//! refused by name.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use ns_core::Result;
use ns_core::interp::{HistosysCode, NormsysCode};
use ns_core::model::{Constraint, HistFactoryModel, ParameterSet};
use ns_translate::Workspace;
use ns_translate::model::samples_in_order;
use ns_translate::spec::ModifierKind;
use serde_json::{Map, Value, json};

use super::{
    ROOT_CODE1, ROOT_CODE4, ROOT_LUMI, STAT_SET_PREFIX, alpha, channel_distribution,
    channel_observable, gamma, global_observable, stat_gamma,
};
use crate::invalid;

/// The parameter point of a written file.
const POINT: &str = "default_values";

/// The combined dataset, simultaneous pdf and index category ROOT builds from the channels
/// (`misc.ROOT_internal`, as ROOT writes them), and the ModelConfig of the analysis.
const ROOT_DATASET: &str = "obsData";
const ROOT_PDF: &str = "simPdf";
const ROOT_CATEGORY: &str = "channelCat";
const ROOT_MODEL_CONFIG: &str = "ModelConfig";
/// The domain of every variable, which ROOT's importer requires.
const ROOT_DOMAIN: &str = "default_domain";

/// The HS3 document of `model`, built from `workspace` (the pyhf workspace it was built from,
/// its ROOT semantics included).
pub fn write(workspace: &Workspace, model: &HistFactoryModel) -> Result<Value> {
    if let Some(terms) = workspace
        .root_semantics
        .as_ref()
        .and_then(|r| r.constraint_terms(&model.measurement))
        .filter(|t| !t.is_empty())
    {
        return Err(invalid(format!(
            "measurement '{}': its ConstraintTerms ({}) are not written as HS3 yet: ROOT's \
             importer builds every normsys α with a unit Gaussian",
            model.measurement,
            terms.keys().cloned().collect::<Vec<_>>().join(", ")
        )));
    }
    let mut writer = Writer::new(model)?;
    let distributions = writer.channels(workspace)?;
    let data = writer.data(workspace)?;
    // The analysis and its likelihood are named after the measurement, ROOT's domains of a
    // ModelConfig after them (ROOT finds the global observables by that name).
    let measurement = &model.measurement;
    let domain_names = [
        "parameters_of_interest",
        "nuisance_parameters",
        "global_observables",
    ]
    .map(|d| format!("{measurement}_{d}"));
    let mut analysis = json!({
        "name": measurement,
        "likelihood": measurement,
        "domains": domain_names,
        "init": POINT,
    });
    // Every POI the model declares, its POI first (a datacard's maps declare several).
    let pois = model.pois();
    if !pois.is_empty() {
        analysis["parameters_of_interest"] =
            json!(pois.iter().map(|&i| &writer.names[i]).collect::<Vec<_>>());
    }
    let (point, axes, constant_axes) = writer.point_and_domains(&pois);
    let channels: Vec<&str> = model.channels.iter().map(|c| c.name.as_str()).collect();
    let combined = |extra: Value| {
        let mut entry = json!({
            "index_cat": ROOT_CATEGORY,
            "indices": (0..channels.len()).collect::<Vec<_>>(),
            "labels": channels,
        });
        if let (Value::Object(entry), Value::Object(extra)) = (&mut entry, extra) {
            entry.extend(extra);
        }
        entry
    };
    Ok(json!({
        "metadata": {
            "hs3_version": "0.2",
            "packages": [{"name": "nextstat", "version": env!("CARGO_PKG_VERSION")}],
        },
        "distributions": distributions.into_iter().chain(writer.constraints).collect::<Vec<_>>(),
        "data": data,
        "likelihoods": [{
            "name": measurement,
            "distributions": model.channels.iter().map(|c| channel_distribution(&c.name)).collect::<Vec<_>>(),
            "data": model.channels.iter().map(|c| observed_data(&c.name)).collect::<Vec<_>>(),
        }],
        "analyses": [analysis],
        "domains": std::iter::once((ROOT_DOMAIN.to_string(), [axes.concat(), constant_axes].concat()))
            .chain(domain_names.into_iter().zip(axes))
            .map(|(name, axes)| json!({"name": name, "type": "product_domain", "axes": axes}))
            .collect::<Vec<_>>(),
        "parameter_points": [{"name": POINT, "parameters": point}],
        "misc": {"ROOT_internal": {
            "ModelConfigs": {measurement: {"mcName": ROOT_MODEL_CONFIG, "pdfName": ROOT_PDF}},
            // RooFit's binned likelihood (Poisson terms per bin, as HistFactory builds it).
            "attributes": channels.iter().map(|c| {
                (format!("{c}_model"), json!({"tags": ["BinnedLikelihood", "GenerateBinned"]}))
            }).collect::<Map<String, Value>>(),
            "combined_datasets": {ROOT_DATASET: combined(json!({}))},
            "combined_distributions": {ROOT_PDF: combined(json!({
                "distributions": channels.iter().map(|c| channel_distribution(c)).collect::<Vec<_>>(),
            }))},
        }},
    }))
}

/// The observed data of channel `channel`.
fn observed_data(channel: &str) -> String {
    format!("obsData_{channel}")
}

struct Writer<'m> {
    model: &'m HistFactoryModel,
    /// The HS3 name of each model parameter.
    names: Vec<String>,
    /// Which model object took each HS3 name (names must not collide).
    taken: HashMap<String, String>,
    sets: HashMap<&'m str, &'m ParameterSet>,
    /// Constant parameters beside the model's: global observables and constraint widths.
    constants: Vec<(String, f64)>,
    /// The global observables among the constants.
    globals: BTreeSet<String>,
    /// The range of a global observable over which its Gaussian is normalised.
    global_ranges: BTreeMap<String, (f64, f64)>,
    constraints: Vec<Value>,
    normsys_code: Option<i64>,
}

impl<'m> Writer<'m> {
    fn new(model: &'m HistFactoryModel) -> Result<Self> {
        let normsys_code = match model.compiled.codes.normsys {
            NormsysCode::Code4 => Some(ROOT_CODE4),
            NormsysCode::Code1 => Some(ROOT_CODE1),
            NormsysCode::AsymPow => None,
        };
        let mut writer = Writer {
            model,
            names: Vec::with_capacity(model.par_names.len()),
            taken: HashMap::new(),
            sets: model
                .parameter_sets
                .iter()
                .map(|s| (s.name.as_str(), s))
                .collect(),
            constants: Vec::new(),
            globals: BTreeSet::new(),
            global_ranges: BTreeMap::new(),
            constraints: Vec::new(),
            normsys_code,
        };
        let ranges: HashMap<usize, (f64, f64)> = model
            .compiled
            .gaussian_ranges
            .iter()
            .map(|r| (r.param as usize, (r.low, r.high)))
            .collect();
        for set in &model.parameter_sets {
            for i in 0..set.n_parameters {
                let name = hs3_name(model, set, i);
                writer.claim(&name, &model.par_names[set.offset + i])?;
                if set.constraint != Constraint::None {
                    let global = global_observable(&name);
                    writer.claim(&global, &format!("the global observable of '{name}'"))?;
                    writer.constants.push((global.clone(), set.auxdata[i]));
                    writer.globals.insert(global.clone());
                    if let Some(&range) = ranges.get(&(set.offset + i)) {
                        writer.global_ranges.insert(global, range);
                    }
                }
                writer.names.push(name);
            }
            if set.is_scalar && set.constraint == Constraint::Gaussian {
                writer.scalar_constraint(set)?;
            }
        }
        Ok(writer)
    }

    /// Take HS3 name `name` for `owner`; two owners of one name are refused.
    fn claim(&mut self, name: &str, owner: &str) -> Result<()> {
        if let Some(other) = self.taken.insert(name.to_string(), owner.to_string()) {
            return Err(invalid(format!(
                "'{owner}' and '{other}' would both be '{name}' in HS3 (ROOT's names: alpha_X for \
                 a normsys or histosys X, gamma_X_bin_i for a per-bin X, nom_… for global \
                 observables); rename one"
            )));
        }
        Ok(())
    }

    /// The Gaussian constraint of a scalar set (normsys, histosys, lumi): `<x>Constraint`,
    /// around the global observable, of width 1 for an α and a constant parameter otherwise.
    fn scalar_constraint(&mut self, set: &ParameterSet) -> Result<()> {
        let x = self.names[set.offset].clone();
        let sigma = set.sigmas[0];
        let width = if set.modifier_type != "lumi" && sigma == 1.0 {
            json!(1.0)
        } else {
            let name = format!("sigma_{x}");
            self.claim(&name, &format!("the constraint width of '{x}'"))?;
            self.constants.push((name.clone(), sigma));
            json!(name)
        };
        let name = constraint_name(&x);
        self.claim(&name, &format!("the constraint of '{x}'"))?;
        self.constraints.push(json!({
            "name": name,
            "type": "gaussian_dist",
            "x": x,
            "mean": global_observable(&x),
            "sigma": width,
        }));
        Ok(())
    }

    fn set(&self, name: &str) -> Result<&'m ParameterSet> {
        self.sets
            .get(name)
            .copied()
            .ok_or_else(|| invalid(format!("the model has no parameter set '{name}'")))
    }

    /// One `histfactory_dist` per channel.
    fn channels(&mut self, workspace: &Workspace) -> Result<Vec<Value>> {
        let placed = samples_in_order(workspace)?;
        let model = self.model;
        // Where each channel's bins start in a staterror set spanning several channels.
        let mut stat_offsets: HashMap<(&str, usize), usize> = HashMap::new();
        let mut stat_filled: HashMap<&str, usize> = HashMap::new();
        for (channel, _, modifiers) in &placed {
            for m in modifiers {
                if let ModifierKind::StatError(_) = m.kind
                    && !stat_offsets.contains_key(&(m.name.as_str(), *channel))
                {
                    let filled = stat_filled.entry(&m.name).or_default();
                    stat_offsets.insert((&m.name, *channel), *filled);
                    *filled += model.channels[*channel].n_bins;
                }
            }
        }
        let mut samples: Vec<Vec<Value>> = vec![Vec::new(); model.channels.len()];
        for (channel, sample, modifiers) in &placed {
            let info = &model.channels[*channel];
            let at = format!("channel '{}' sample '{}'", info.name, sample.name);
            let mut written = Vec::new();
            for m in modifiers {
                let at = format!("{at} modifier '{}'", m.name);
                let entry = match &m.kind {
                    // ROOT's importer names a normfactor's parameter after the modifier.
                    ModifierKind::NormFactor => {
                        let p = self.scalar(&m.name)?;
                        json!({"name": p, "type": "normfactor", "parameter": p})
                    }
                    ModifierKind::Lumi => {
                        let p = self.scalar(&m.name)?;
                        json!({
                            "name": p, "type": "normfactor", "parameter": p,
                            "constraint_name": constraint_name(&p),
                        })
                    }
                    ModifierKind::NormSys { hi, lo } => {
                        let code = self.normsys_code.ok_or_else(|| {
                            invalid(format!(
                                "{at}: CMS Combine's AsymPow interpolation has no HistFactory \
                                 code in ROOT"
                            ))
                        })?;
                        let p = self.scalar(&m.name)?;
                        json!({
                            "name": m.name, "type": "normsys", "parameter": p,
                            "interpolation": code, "constraint_name": constraint_name(&p),
                            "data": {"hi": hi, "lo": lo},
                        })
                    }
                    ModifierKind::HistoSys { hi_data, lo_data } => {
                        if model.compiled.codes.histosys != HistosysCode::Code4p {
                            return Err(invalid(format!(
                                "{at}: ROOT's importer reads every histosys with its code 4 \
                                 (pyhf's code4p); this model's histosys interpolation is {}",
                                model.compiled.codes.histosys.name()
                            )));
                        }
                        let p = self.scalar(&m.name)?;
                        json!({
                            "name": m.name, "type": "histosys", "parameter": p,
                            "constraint_name": constraint_name(&p),
                            "data": {"hi": {"contents": hi_data}, "lo": {"contents": lo_data}},
                        })
                    }
                    ModifierKind::ShapeFactor => {
                        let (parameters, _) = self.per_bin(&m.name, 0, info.n_bins, &at)?;
                        json!({
                            "name": m.name, "type": "shapesys", "constraint_type": "Gauss",
                            "parameters": parameters, "data": {"vals": vec![0.0; info.n_bins]},
                        })
                    }
                    ModifierKind::ShapeSys(_) | ModifierKind::StatError(_) => {
                        let offset = stat_offsets
                            .get(&(m.name.as_str(), *channel))
                            .copied()
                            .unwrap_or(0);
                        let (parameters, set) = self.per_bin(&m.name, offset, info.n_bins, &at)?;
                        let (constraint, vals): (&str, Vec<f64>) = match set.constraint {
                            Constraint::Gaussian => {
                                ("Gauss", set.sigmas[offset..offset + info.n_bins].to_vec())
                            }
                            Constraint::Poisson => (
                                "Poisson",
                                set.factors[offset..offset + info.n_bins]
                                    .iter()
                                    .map(|tau| 1.0 / tau.sqrt())
                                    .collect(),
                            ),
                            Constraint::None => {
                                return Err(invalid(format!("{at}: a γ set without a constraint")));
                            }
                        };
                        // A constant γ is written without a width: RooFit drops the
                        // constraint of a constant parameter, and the width of a bin that has
                        // none (pyhf's placeholder 1) would read as one.
                        let fixed = &set.fixed[offset..offset + info.n_bins];
                        let vals: Vec<f64> = vals
                            .iter()
                            .zip(fixed)
                            .map(|(&v, &fixed)| if fixed { 0.0 } else { v })
                            .collect();
                        json!({
                            "name": m.name, "type": "shapesys", "constraint_type": constraint,
                            "parameters": parameters, "data": {"vals": vals},
                        })
                    }
                };
                written.push(entry);
            }
            samples[*channel].push(json!({
                "name": sample.name,
                "data": {"contents": sample.data},
                "modifiers": written,
            }));
        }
        Ok(model
            .channels
            .iter()
            .zip(samples)
            .map(|(c, samples)| {
                json!({
                    "name": channel_distribution(&c.name),
                    "type": "histfactory_dist",
                    "axes": [axis(&c.name, c.n_bins)],
                    "samples": samples,
                })
            })
            .collect())
    }

    /// The HS3 name of scalar set `name`'s parameter.
    fn scalar(&self, name: &str) -> Result<String> {
        Ok(self.names[self.set(name)?.offset].clone())
    }

    /// The HS3 names of per-bin set `name`'s parameters `offset..offset + bins`.
    fn per_bin(
        &self,
        name: &str,
        offset: usize,
        bins: usize,
        at: &str,
    ) -> Result<(Vec<String>, &'m ParameterSet)> {
        let set = self.set(name)?;
        if offset + bins > set.n_parameters {
            return Err(invalid(format!(
                "{at}: {bins} bins from {offset} in a set of {} parameters",
                set.n_parameters
            )));
        }
        let start = set.offset + offset;
        Ok((self.names[start..start + bins].to_vec(), set))
    }

    /// The observed data of each channel, as the workspace gives it.
    fn data(&self, workspace: &Workspace) -> Result<Vec<Value>> {
        if let Err(why) = &self.model.observations {
            return Err(invalid(format!("the model has no observed data: {why}")));
        }
        self.model
            .channels
            .iter()
            .map(|c| {
                let observed = workspace
                    .observations
                    .iter()
                    .find(|o| o.name == c.name)
                    .ok_or_else(|| invalid(format!("channel '{}' has no observations", c.name)))?;
                if observed.data.len() != c.n_bins {
                    return Err(invalid(format!(
                        "channel '{}': {} observations for {} bins",
                        c.name,
                        observed.data.len(),
                        c.n_bins
                    )));
                }
                Ok(json!({
                    "name": observed_data(&c.name),
                    "type": "binned",
                    "axes": [axis(&c.name, c.n_bins)],
                    "contents": observed.data,
                }))
            })
            .collect()
    }

    /// The parameter point (starts, constant parameters, global observables and widths), the
    /// axes of the three domains of a ModelConfig (the POI's bounds, the floating parameters'
    /// bounds, the global observables with the range of those that have one) and the bounds of
    /// the constant parameters.
    fn point_and_domains(&self, pois: &[usize]) -> (Vec<Value>, [Vec<Value>; 3], Vec<Value>) {
        let mut point = Vec::new();
        let [mut poi_axes, mut nuisances, mut globals, mut constants] =
            [Vec::new(), Vec::new(), Vec::new(), Vec::new()];
        for set in &self.model.parameter_sets {
            for i in 0..set.n_parameters {
                let name = &self.names[set.offset + i];
                let mut entry = Map::new();
                entry.insert("name".into(), json!(name));
                entry.insert("value".into(), json!(set.inits[i]));
                if set.fixed[i] {
                    entry.insert("const".into(), json!(true));
                }
                point.push(Value::Object(entry));
                let (lo, hi) = set.bounds[i];
                let axis = json!({"name": name, "min": lo, "max": hi});
                // ROOT's nuisance parameters are the floating ones: a constant one's
                // constraint is left out of RooFit's NLL.
                if pois.contains(&(set.offset + i)) {
                    poi_axes.push(axis);
                } else if set.fixed[i] {
                    constants.push(axis);
                } else {
                    nuisances.push(axis);
                }
            }
        }
        for (name, value) in &self.constants {
            point.push(json!({"name": name, "value": value, "const": true}));
            if self.globals.contains(name) {
                globals.push(match self.global_ranges.get(name) {
                    Some((lo, hi)) => json!({"name": name, "min": lo, "max": hi}),
                    None => json!({"name": name}),
                });
            }
        }
        (point, [poi_axes, nuisances, globals], constants)
    }
}

/// The HS3 name of parameter `i` of `set`: ROOT's names where the set follows ROOT's
/// conventions (a channel's staterror `staterror_<channel>`, the luminosity `lumi`), so that
/// a file ROOT wrote keeps its names through nextstat.
fn hs3_name(model: &HistFactoryModel, set: &ParameterSet, i: usize) -> String {
    match set.modifier_type {
        "lumi" if set.name == "lumi" => ROOT_LUMI.into(),
        "normfactor" | "lumi" => set.name.clone(),
        "normsys" | "histosys" => alpha(&set.name),
        "staterror" => match set.name.strip_prefix(STAT_SET_PREFIX) {
            Some(channel) if model.channels.iter().any(|c| c.name == channel) => {
                stat_gamma(channel, i)
            }
            _ => gamma(&set.name, i),
        },
        _ => gamma(&set.name, i),
    }
}

/// The constraint distribution of parameter `x`.
fn constraint_name(x: &str) -> String {
    format!("{x}Constraint")
}

/// The axis of channel `channel`: one unit per bin, as ROOT writes a HistFactory channel.
fn axis(channel: &str, bins: usize) -> Value {
    json!({"name": channel_observable(channel), "min": 0.0, "max": bins as f64, "nbins": bins})
}
