//! Building a HistFactory model from a workspace with pyhf 0.7.6's semantics, lowered into the
//! flat [`CompiledModel`].
//!
//! pyhf's rules reproduced here (see `docs/pyhf-semantics.md`):
//! - channels and samples are sorted by name; main data follows the sorted channels;
//! - parameter sets are grouped by modifier type (histosys, lumi, normfactor, normsys,
//!   shapefactor, shapesys, staterror); within a type they come in order of first appearance over
//!   sorted channels × sorted samples × sorted modifier names, except staterror, sorted by name;
//! - modifiers of different types may share a name only where their parameter requirements agree
//!   (pyhf's `InvalidNameReuse`); a measurement's parameter configuration overrides the defaults;
//! - auxdata follows the parameter order over constrained parameter sets.

use ns_core::interp::NormsysTerm;
use ns_core::layout::{GaussianConstraint, PoissonConstraint, SampleBlock, ScalarFactor};
use ns_core::{CompiledModel, Error, InterpCodes, Result};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::spec::{
    MODIFIER_TYPES, Modifier, ModifierKind, ParameterConfig, Sample, Workspace, f64_of, f64s,
};

/// How a parameter set is constrained.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Constraint {
    None,
    Gaussian,
    Poisson,
}

/// One named set of parameters (a scalar like `mu`, or one per bin like `staterror_SR`).
#[derive(Clone, Debug, PartialEq)]
pub struct ParameterSet {
    pub name: String,
    /// The modifier type that declared it first in pyhf's order.
    pub modifier_type: &'static str,
    /// Index of its first parameter in the model's parameter vector.
    pub offset: usize,
    pub n_parameters: usize,
    pub is_scalar: bool,
    pub constraint: Constraint,
    pub inits: Vec<f64>,
    pub bounds: Vec<(f64, f64)>,
    pub fixed: Vec<bool>,
    /// Auxiliary data of constrained sets.
    pub auxdata: Vec<f64>,
    /// Gaussian widths (1 unless configured; staterror: the relative MC uncertainty).
    pub sigmas: Vec<f64>,
    /// Poisson τ factors (shapesys).
    pub factors: Vec<f64>,
}

impl ParameterSet {
    /// The constraint width of parameter `i`: σ for Gaussian, 1/√τ for Poisson, `None` if free.
    pub fn prefit_width(&self, i: usize) -> Option<f64> {
        match self.constraint {
            Constraint::None => None,
            Constraint::Gaussian => Some(self.sigmas[i]),
            Constraint::Poisson => Some(1.0 / self.factors[i].sqrt()),
        }
    }

    /// The value parameter `i`'s constraint is centred on (what pulls are measured from, as in
    /// cabinetry): the auxiliary datum for Gaussian, aux/τ (1 for a shapesys γ) for Poisson,
    /// `None` if free.
    pub fn prefit_center(&self, i: usize) -> Option<f64> {
        match self.constraint {
            Constraint::None => None,
            Constraint::Gaussian => Some(self.auxdata[i]),
            Constraint::Poisson => Some(self.auxdata[i] / self.factors[i]),
        }
    }
}

/// A channel of the model: its bins occupy `bin_start..bin_start + n_bins` of the main data.
#[derive(Clone, Debug, PartialEq)]
pub struct ChannelInfo {
    pub name: String,
    pub n_bins: usize,
    pub bin_start: usize,
}

/// Options for building a model from a workspace.
#[derive(Clone, Debug, Default)]
pub struct ModelOptions {
    /// Measurement name; the first measurement when `None`.
    pub measurement: Option<String>,
    pub codes: InterpCodes,
}

/// A HistFactory model with pyhf's parameter layout, lowered into a [`CompiledModel`].
#[derive(Clone, Debug)]
pub struct HistFactoryModel {
    pub measurement: String,
    pub channels: Vec<ChannelInfo>,
    pub samples: Vec<String>,
    pub parameter_sets: Vec<ParameterSet>,
    pub par_names: Vec<String>,
    /// The measurement's POI name (it may not exist in a background-only workspace).
    pub poi_name: String,
    poi_index: Option<usize>,
    pub auxdata: Vec<f64>,
    pub compiled: CompiledModel,
}

/// What one modifier type asks of a parameter set, before the measurement's configuration.
#[derive(Clone, Debug, PartialEq)]
struct Requirement {
    modifier_type: &'static str,
    constraint: Constraint,
    n: usize,
    is_scalar: bool,
    inits: Option<Vec<f64>>,
    bounds: Option<Vec<(f64, f64)>>,
    auxdata: Option<Vec<f64>>,
    sigmas: Option<Vec<f64>>,
    factors: Option<Vec<f64>>,
    fixed: Vec<bool>,
    /// Which of auxdata / sigmas / factors the type lets a measurement configure.
    uses: [bool; 3],
}

impl Requirement {
    fn new(modifier_type: &'static str, n: usize) -> Self {
        let scalar =
            |constraint, init: f64, bounds: (f64, f64), aux: Option<f64>, uses| Requirement {
                modifier_type,
                constraint,
                n: 1,
                is_scalar: true,
                inits: Some(vec![init]),
                bounds: Some(vec![bounds]),
                auxdata: aux.map(|a| vec![a]),
                sigmas: None,
                factors: None,
                fixed: vec![false],
                uses,
            };
        match modifier_type {
            "normfactor" => scalar(Constraint::None, 1.0, (0.0, 10.0), None, [false; 3]),
            "normsys" | "histosys" => scalar(
                Constraint::Gaussian,
                0.0,
                (-5.0, 5.0),
                Some(0.0),
                [true, false, false],
            ),
            // pyhf requires inits, bounds, auxdata and sigmas of lumi from the measurement.
            "lumi" => Requirement {
                inits: None,
                bounds: None,
                ..scalar(
                    Constraint::Gaussian,
                    1.0,
                    (0.0, 10.0),
                    None,
                    [true, true, false],
                )
            },
            "shapefactor" => Requirement {
                modifier_type,
                constraint: Constraint::None,
                n,
                is_scalar: false,
                inits: Some(vec![1.0; n]),
                bounds: Some(vec![(0.0, 10.0); n]),
                auxdata: None,
                sigmas: None,
                factors: None,
                fixed: vec![false; n],
                uses: [false; 3],
            },
            // staterror and shapesys are filled in by their builders.
            other => Requirement {
                modifier_type: other_static(other),
                constraint: if other == "shapesys" {
                    Constraint::Poisson
                } else {
                    Constraint::Gaussian
                },
                n,
                is_scalar: false,
                inits: Some(vec![1.0; n]),
                bounds: Some(vec![(1e-10, 10.0); n]),
                auxdata: None,
                sigmas: None,
                factors: None,
                fixed: vec![false; n],
                uses: if other == "shapesys" {
                    [true, false, true]
                } else {
                    [true, true, false]
                },
            },
        }
    }

    /// pyhf's `InvalidNameReuse`: requirements of modifiers sharing a name must agree.
    fn agrees_with(&self, other: &Requirement) -> Option<&'static str> {
        if self.constraint != other.constraint {
            Some("paramset_type")
        } else if self.n != other.n {
            Some("n_parameters")
        } else if self.is_scalar != other.is_scalar {
            Some("is_scalar")
        } else if self.inits != other.inits {
            Some("inits")
        } else if self.bounds != other.bounds {
            Some("bounds")
        } else if self.auxdata != other.auxdata {
            Some("auxdata")
        } else if self.factors != other.factors {
            Some("factors")
        } else if self.sigmas != other.sigmas {
            Some("sigmas")
        } else if self.fixed != other.fixed {
            Some("fixed")
        } else {
            None
        }
    }
}

fn other_static(name: &str) -> &'static str {
    MODIFIER_TYPES
        .iter()
        .find(|t| **t == name)
        .copied()
        .unwrap_or("staterror")
}

/// One sample of one channel, with its modifiers deduplicated as pyhf does (the last of a
/// repeated type/name pair wins) and sorted by (name, type).
struct PlacedSample<'w> {
    channel: usize,
    sample: &'w Sample,
    modifiers: Vec<&'w Modifier>,
}

impl HistFactoryModel {
    /// Build the model of `workspace` for a measurement, pyhf-exact.
    pub fn from_workspace(workspace: &Workspace, options: &ModelOptions) -> Result<Self> {
        let measurement = workspace.measurement(options.measurement.as_deref())?;
        let invalid = |m: String| Error::InvalidModel(m);

        // Sorted channels and the global sample list.
        let mut channel_order: Vec<usize> = (0..workspace.channels.len()).collect();
        channel_order.sort_by(|&a, &b| workspace.channels[a].name.cmp(&workspace.channels[b].name));
        let mut channels = Vec::new();
        let mut bin_start = 0;
        for &ci in &channel_order {
            let c = &workspace.channels[ci];
            let n_bins = c.samples[0].data.len();
            channels.push(ChannelInfo {
                name: c.name.clone(),
                n_bins,
                bin_start,
            });
            bin_start += n_bins;
        }
        let n_main = bin_start;
        let samples: Vec<String> = workspace
            .channels
            .iter()
            .flat_map(|c| c.samples.iter().map(|s| s.name.clone()))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();

        let mut placed = Vec::new();
        for (channel, &ci) in channel_order.iter().enumerate() {
            let mut in_channel: Vec<&Sample> = workspace.channels[ci].samples.iter().collect();
            in_channel.sort_by(|a, b| a.name.cmp(&b.name));
            for sample in in_channel {
                let mut by_key: BTreeMap<(&str, &str), &Modifier> = BTreeMap::new();
                for m in &sample.modifiers {
                    let key = (m.name.as_str(), m.kind.type_name());
                    if matches!(m.kind, ModifierKind::ShapeSys(_)) && by_key.contains_key(&key) {
                        return Err(invalid(format!(
                            "shapesys '{}' appears twice on sample '{}' in channel '{}'",
                            m.name, sample.name, channels[channel].name
                        )));
                    }
                    by_key.insert(key, m);
                }
                placed.push(PlacedSample {
                    channel,
                    sample,
                    modifiers: by_key.into_values().collect(),
                });
            }
        }

        let staterror = StatErrorSets::collect(&placed, &channels)?;

        // Requirements per name, in pyhf's order: by type, then first appearance.
        let mut order: Vec<String> = Vec::new();
        let mut requirements: HashMap<String, Requirement> = HashMap::new();
        let mut shapesys_owner: HashMap<&str, (usize, &str)> = HashMap::new();
        for modifier_type in MODIFIER_TYPES {
            let mut add = |name: &str, req: Requirement| -> Result<()> {
                match requirements.get(name) {
                    None => {
                        order.push(name.to_string());
                        requirements.insert(name.to_string(), req);
                    }
                    Some(existing) if existing.modifier_type == req.modifier_type => {}
                    Some(existing) => {
                        if let Some(key) = existing.agrees_with(&req) {
                            return Err(invalid(format!(
                                "modifier name '{name}' is used by a {} and a {} modifier whose '{key}' differ \
                                 (pyhf InvalidNameReuse): use unique modifier names",
                                existing.modifier_type, req.modifier_type
                            )));
                        }
                    }
                }
                Ok(())
            };
            if modifier_type == "staterror" {
                for (name, set) in &staterror.sets {
                    add(name, set.requirement.clone())?;
                }
                continue;
            }
            for p in &placed {
                for m in p
                    .modifiers
                    .iter()
                    .filter(|m| m.kind.type_name() == modifier_type)
                {
                    let n_bins = p.sample.data.len();
                    let req = match &m.kind {
                        ModifierKind::ShapeSys(unc) => {
                            if let Some((channel, sample)) =
                                shapesys_owner.insert(&m.name, (p.channel, &p.sample.name))
                            {
                                return Err(invalid(format!(
                                    "shapesys '{}' is used by sample '{sample}' in channel '{}' and by sample '{}' in channel '{}': \
                                     a shapesys name must belong to one sample of one channel",
                                    m.name,
                                    channels[channel].name,
                                    p.sample.name,
                                    channels[p.channel].name
                                )));
                            }
                            shapesys_requirement(&f64s(&p.sample.data), &f64s(unc))
                        }
                        _ => Requirement::new(modifier_type, n_bins),
                    };
                    add(&m.name, req)?;
                }
            }
        }
        if order.is_empty() {
            return Err(invalid(
                "no parameters: the workspace declares no modifiers".into(),
            ));
        }

        // Apply the measurement's configuration and lay out the parameter vector.
        let configs: HashMap<&str, &ParameterConfig> = measurement
            .config
            .parameters
            .iter()
            .map(|p| (p.name.as_str(), p))
            .collect();
        let mut parameter_sets = Vec::with_capacity(order.len());
        let mut offset = 0;
        for name in &order {
            let req = requirements
                .remove(name)
                .ok_or_else(|| invalid(format!("internal: no requirement for '{name}'")))?;
            let set = configure(
                name,
                req,
                configs.get(name.as_str()).copied(),
                &measurement.name,
                offset,
            )?;
            offset += set.n_parameters;
            parameter_sets.push(set);
        }
        let n_params = offset;
        let par_names = parameter_sets
            .iter()
            .flat_map(|s| {
                (0..s.n_parameters).map(move |i| {
                    if s.is_scalar {
                        s.name.clone()
                    } else {
                        format!("{}[{i}]", s.name)
                    }
                })
            })
            .collect();
        let poi_name = measurement.config.poi.clone();
        let poi_index = parameter_sets
            .iter()
            .find(|s| s.name == poi_name && s.n_parameters == 1)
            .map(|s| s.offset);

        let compiled = lower(
            &placed,
            &channels,
            &parameter_sets,
            &staterror,
            n_main,
            n_params,
            options.codes,
        )?;
        let auxdata = parameter_sets
            .iter()
            .flat_map(|s| s.auxdata.iter().copied())
            .collect();
        Ok(HistFactoryModel {
            measurement: measurement.name.clone(),
            channels,
            samples,
            parameter_sets,
            par_names,
            poi_name,
            poi_index,
            auxdata,
            compiled,
        })
    }

    pub fn n_params(&self) -> usize {
        self.compiled.n_params
    }

    /// Index of the POI, or an error naming why there is none (e.g. a background-only workspace).
    pub fn poi(&self) -> Result<usize> {
        self.poi_index
            .ok_or_else(|| match self.parameter_set(&self.poi_name) {
                Some(set) => Error::InvalidModel(format!(
                    "the POI '{}' has {} components; only a single parameter can be the POI",
                    self.poi_name, set.n_parameters
                )),
                None => Error::InvalidModel(format!(
                    "measurement '{}' names the POI '{}', which is not a parameter of the model \
                 (a background-only workspace? apply a signal patch with -p or --patchset)",
                    self.measurement, self.poi_name
                )),
            })
    }

    /// The POI index if the model has one.
    pub fn poi_index(&self) -> Option<usize> {
        self.poi_index
    }

    pub fn parameter_set(&self, name: &str) -> Option<&ParameterSet> {
        self.parameter_sets.iter().find(|s| s.name == name)
    }

    /// Index of a parameter by its `par_names` entry (`mu`, `staterror_SR[1]`).
    /// A name that two parameters share (a scalar parameter named like an element `uncorr[0]` of
    /// a vector parameter `uncorr`, which pyhf allows) is refused: it would address either.
    pub fn parameter_index(&self, name: &str) -> std::result::Result<usize, String> {
        let mut hits = self
            .par_names
            .iter()
            .enumerate()
            .filter(|(_, n)| *n == name)
            .map(|(i, _)| i);
        match (hits.next(), hits.next()) {
            (Some(i), None) => Ok(i),
            (None, _) => Err(format!("unknown parameter '{name}' (see parameter_names)")),
            (Some(a), Some(b)) => Err(format!(
                "'{name}' names two parameters (positions {a} and {b} of parameter_names): a \
                 parameter is named like an element of a vector parameter; rename one of the \
                 modifiers (nextstat rename --modifier OLD NEW) to address it"
            )),
        }
    }

    /// pyhf's `par_order`: the parameter-set names in order.
    pub fn par_order(&self) -> Vec<&str> {
        self.parameter_sets
            .iter()
            .map(|s| s.name.as_str())
            .collect()
    }

    pub fn suggested_init(&self) -> Vec<f64> {
        self.parameter_sets
            .iter()
            .flat_map(|s| s.inits.iter().copied())
            .collect()
    }

    pub fn suggested_bounds(&self) -> Vec<(f64, f64)> {
        self.parameter_sets
            .iter()
            .flat_map(|s| s.bounds.iter().copied())
            .collect()
    }

    pub fn suggested_fixed(&self) -> Vec<bool> {
        self.parameter_sets
            .iter()
            .flat_map(|s| s.fixed.iter().copied())
            .collect()
    }

    /// Parameters from JSON: a list in pyhf order, or an object keyed by parameter-set name
    /// (value: list, or a number for scalars) or by `name[i]`. Missing parameters keep `base`.
    pub fn params_from_json(&self, value: &Value, base: &[f64]) -> Result<Vec<f64>> {
        let bad = |m: String| Error::InvalidInput(m);
        let number = |v: &Value, what: &str| {
            v.as_f64()
                .ok_or_else(|| bad(format!("{what} must be a number, found {v}")))
        };
        let mut params = base.to_vec();
        match value {
            Value::Array(items) => {
                if items.len() != self.n_params() {
                    return Err(bad(format!(
                        "parameter list has {} values but the model has {} parameters ({})",
                        items.len(),
                        self.n_params(),
                        self.par_names.join(", ")
                    )));
                }
                for (i, v) in items.iter().enumerate() {
                    params[i] = number(v, &format!("parameter {i} ('{}')", self.par_names[i]))?;
                }
            }
            Value::Object(map) => {
                for (key, v) in map {
                    if let Some(set) = self.parameter_set(key) {
                        let values: Vec<f64> = match v {
                            Value::Array(items) => items
                                .iter()
                                .map(|x| number(x, &format!("parameter '{key}'")))
                                .collect::<Result<_>>()?,
                            other => vec![number(other, &format!("parameter '{key}'"))?],
                        };
                        if values.len() != set.n_parameters {
                            return Err(bad(format!(
                                "parameter set '{key}' has {} parameters but {} values were given",
                                set.n_parameters,
                                values.len()
                            )));
                        }
                        params[set.offset..set.offset + set.n_parameters].copy_from_slice(&values);
                    } else {
                        let i = self.parameter_index(key).map_err(|e| {
                            bad(format!(
                                "{e}; the parameter sets are: {}",
                                self.par_order().join(", ")
                            ))
                        })?;
                        params[i] = number(v, &format!("parameter '{key}'"))?;
                    }
                }
            }
            other => {
                return Err(bad(format!(
                    "parameters must be a list or an object, found {other}"
                )));
            }
        }
        Ok(params)
    }
}

/// pyhf's shapesys requirement: τ = (ν/δ)² where both are positive, otherwise fixed with τ = 1.
fn shapesys_requirement(nominal: &[f64], uncertainty: &[f64]) -> Requirement {
    let valid: Vec<bool> = nominal
        .iter()
        .zip(uncertainty)
        .map(|(&n, &u)| n > 0.0 && u > 0.0)
        .collect();
    let factors: Vec<f64> = valid
        .iter()
        .zip(nominal.iter().zip(uncertainty))
        .map(|(&ok, (&n, &u))| if ok { n * n / (u * u) } else { 1.0 })
        .collect();
    Requirement {
        auxdata: Some(factors.clone()),
        factors: Some(factors),
        fixed: valid.iter().map(|v| !v).collect(),
        ..Requirement::new("shapesys", nominal.len())
    }
}

/// Apply a measurement's parameter configuration to a requirement, with pyhf's checks.
fn configure(
    name: &str,
    req: Requirement,
    config: Option<&ParameterConfig>,
    measurement: &str,
    offset: usize,
) -> Result<ParameterSet> {
    let at = format!("measurement '{measurement}', parameter '{name}'");
    let bad = |m: String| Error::InvalidModel(format!("{at}: {m}"));
    let n = req.n;
    let check_len = |key: &str, len: usize| {
        if len != n {
            Err(bad(format!(
                "{key} has {len} values but the parameter set has {n} (pyhf: incorrect number of values)"
            )))
        } else {
            Ok(())
        }
    };
    let [uses_aux, uses_sigmas, uses_factors] = req.uses;
    let mut set = ParameterSet {
        name: name.to_string(),
        modifier_type: req.modifier_type,
        offset,
        n_parameters: n,
        is_scalar: req.is_scalar,
        constraint: req.constraint,
        inits: req.inits.unwrap_or_default(),
        bounds: req.bounds.unwrap_or_default(),
        fixed: req.fixed,
        auxdata: req.auxdata.unwrap_or_default(),
        sigmas: req.sigmas.unwrap_or_else(|| {
            if req.constraint == Constraint::Gaussian {
                vec![1.0; n]
            } else {
                vec![]
            }
        }),
        factors: req.factors.unwrap_or_default(),
    };
    if let Some(c) = config {
        if let Some(v) = &c.inits {
            check_len("inits", v.len())?;
            set.inits = f64s(v);
        }
        if let Some(v) = &c.bounds {
            check_len("bounds", v.len())?;
            set.bounds = v.iter().map(|b| (f64_of(&b[0]), f64_of(&b[1]))).collect();
        }
        if let Some(fixed) = c.fixed {
            set.fixed = vec![fixed; n];
        }
        for (key, given, uses, target) in [
            ("auxdata", &c.auxdata, uses_aux, &mut set.auxdata),
            ("sigmas", &c.sigmas, uses_sigmas, &mut set.sigmas),
            ("factors", &c.factors, uses_factors, &mut set.factors),
        ] {
            if let Some(v) = given {
                if !uses {
                    return Err(bad(format!(
                        "a {} parameter does not use the '{key}' attribute (pyhf rejects it too)",
                        req.modifier_type
                    )));
                }
                check_len(key, v.len())?;
                *target = f64s(v);
            }
        }
    }
    if req.modifier_type == "lumi" {
        if set.auxdata.is_empty() {
            return Err(bad(
                "a lumi modifier needs a parameter configuration named 'lumi' with 'auxdata' (and 'sigmas') in the measurement".into(),
            ));
        }
        // pyhf crashes without inits and bounds; we take the nominal luminosity and (0, 10·lumi),
        // the defaults pyhf's lumi modifier documents. Without sigmas pyhf uses a width of 1, as here.
        if set.inits.is_empty() {
            set.inits = set.auxdata.clone();
        }
        if set.bounds.is_empty() {
            set.bounds = set.auxdata.iter().map(|&a| (0.0, 10.0 * a)).collect();
        }
    }
    if let Some(i) = set.bounds.iter().position(|(lo, hi)| lo > hi) {
        return Err(bad(format!("bounds[{i}] has low > high")));
    }
    if let Some(i) = set.sigmas.iter().position(|s| !(*s > 0.0)) {
        return Err(bad(format!(
            "sigmas[{i}] = {} must be positive",
            set.sigmas[i]
        )));
    }
    Ok(set)
}

/// A staterror parameter set: which global bins it covers and its per-bin relative widths.
struct StatErrorSet {
    /// Per covered channel (index), where its bins start among the set's parameters (the set's
    /// parameter i belongs to the i-th covered bin, channels in order).
    channel_offset: HashMap<usize, usize>,
    requirement: Requirement,
}

struct StatErrorSets {
    sets: BTreeMap<String, StatErrorSet>,
}

impl StatErrorSets {
    /// pyhf's staterror builder: σ_b = √(Σ δ²) / Σ ν over the samples carrying it; a zero σ is
    /// fixed (with σ set to 1). Every carrying sample must cover the same bins.
    fn collect(placed: &[PlacedSample], channels: &[ChannelInfo]) -> Result<Self> {
        // name -> sample name -> channels where that sample carries it.
        let mut carriers: BTreeMap<&str, BTreeMap<&str, BTreeSet<usize>>> = BTreeMap::new();
        for p in placed {
            for m in &p.modifiers {
                if let ModifierKind::StatError(_) = m.kind {
                    carriers
                        .entry(&m.name)
                        .or_default()
                        .entry(&p.sample.name)
                        .or_default()
                        .insert(p.channel);
                }
            }
        }
        let mut sets = BTreeMap::new();
        for (name, by_sample) in carriers {
            let mut iter = by_sample.iter();
            let Some((first_sample, first_channels)) = iter.next() else {
                continue;
            };
            for (sample, chans) in iter {
                if chans != first_channels {
                    let names = |s: &BTreeSet<usize>| {
                        s.iter()
                            .map(|&c| channels[c].name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    };
                    return Err(Error::InvalidModel(format!(
                        "staterror '{name}' is carried by samples that cover different bins: sample '{first_sample}' in channels [{}] \
                         but sample '{sample}' in channels [{}] (pyhf fails here with a bare assertion)",
                        names(first_channels),
                        names(chans)
                    )));
                }
            }
            // Where each covered channel's bins start in the set's parameter vector.
            let mut set_offset = HashMap::new();
            let mut bins: Vec<usize> = Vec::new();
            for &c in first_channels {
                set_offset.insert(c, bins.len());
                bins.extend(channels[c].bin_start..channels[c].bin_start + channels[c].n_bins);
            }
            // Samples of a carrying name in a covered channel contribute to the nominal sum; those
            // that carry this staterror contribute their uncertainties too. Linear in bins.
            let mut placed_carriers = Vec::new();
            for p in placed
                .iter()
                .filter(|p| by_sample.contains_key(p.sample.name.as_str()))
            {
                let Some(&offset) = set_offset.get(&p.channel) else {
                    continue;
                };
                let carried = p.modifiers.iter().find_map(|m| match &m.kind {
                    ModifierKind::StatError(d) if m.name == name => Some(f64s(d)),
                    _ => None,
                });
                placed_carriers.push((p, offset, carried));
            }
            let mut nominal_sum = vec![0.0; bins.len()];
            for (p, offset, _) in &placed_carriers {
                for (j, v) in p.sample.data.iter().enumerate() {
                    nominal_sum[offset + j] += f64_of(v);
                }
            }
            let mut rel_sq = vec![0.0; bins.len()];
            for (_, offset, carried) in &placed_carriers {
                let Some(unc) = carried else { continue };
                for (j, u) in unc.iter().enumerate() {
                    let i = offset + j;
                    if nominal_sum[i] > 0.0 {
                        let rel = u / nominal_sum[i];
                        rel_sq[i] += rel * rel;
                    }
                }
            }
            let sigmas: Vec<f64> = rel_sq.iter().map(|r| r.sqrt()).collect();
            let fixed: Vec<bool> = sigmas.iter().map(|&s| s == 0.0).collect();
            let sigmas = sigmas
                .into_iter()
                .map(|s| if s == 0.0 { 1.0 } else { s })
                .collect();
            let requirement = Requirement {
                auxdata: Some(vec![1.0; bins.len()]),
                sigmas: Some(sigmas),
                fixed,
                ..Requirement::new("staterror", bins.len())
            };
            sets.insert(
                name.to_string(),
                StatErrorSet {
                    channel_offset: set_offset,
                    requirement,
                },
            );
        }
        Ok(StatErrorSets { sets })
    }
}

/// Lower the placed samples into the flat layout.
fn lower(
    placed: &[PlacedSample],
    channels: &[ChannelInfo],
    sets: &[ParameterSet],
    staterror: &StatErrorSets,
    n_main: usize,
    n_params: usize,
    codes: InterpCodes,
) -> Result<CompiledModel> {
    let offset_of: HashMap<&str, &ParameterSet> =
        sets.iter().map(|s| (s.name.as_str(), s)).collect();
    let mut model = CompiledModel {
        n_params,
        n_main,
        n_aux: sets
            .iter()
            .filter(|s| s.constraint != Constraint::None)
            .map(|s| s.n_parameters)
            .sum(),
        codes,
        samples: vec![],
        nominal: vec![],
        entry_factor_start: vec![0],
        entry_factor_param: vec![],
        scalar_factors: vec![],
        normsys: vec![],
        histosys_param: vec![],
        histosys_delta: vec![],
        gaussian: vec![],
        poisson: vec![],
    };
    let to_u32 = |x: usize| {
        u32::try_from(x)
            .map_err(|_| Error::InvalidModel("model too large for 32-bit indices".into()))
    };
    for p in placed {
        let channel = &channels[p.channel];
        let nominal = f64s(&p.sample.data);
        let n_bins = nominal.len();
        let entry_start = model.nominal.len();
        let (scalar_start, histosys_start) =
            (model.scalar_factors.len(), model.histosys_param.len());
        let histosys_delta_start = model.histosys_delta.len();
        // (up, down) per histosys term of this block, term-major; written bin-major below.
        let mut histosys_terms: Vec<(Vec<f64>, Vec<f64>)> = vec![];
        let mut entry_params: Vec<Vec<u32>> = vec![vec![]; n_bins];
        for m in &p.modifiers {
            let set = offset_of.get(m.name.as_str()).copied().ok_or_else(|| {
                Error::InvalidModel(format!(
                    "internal: modifier '{}' has no parameter set",
                    m.name
                ))
            })?;
            let param = set.offset;
            let at = || {
                format!(
                    "sample '{}' in channel '{}', {} '{}'",
                    p.sample.name,
                    channel.name,
                    m.kind.type_name(),
                    m.name
                )
            };
            match &m.kind {
                ModifierKind::NormFactor | ModifierKind::Lumi => {
                    model.scalar_factors.push(ScalarFactor {
                        param: to_u32(param)?,
                        normsys: ScalarFactor::LINEAR,
                    });
                }
                ModifierKind::NormSys { hi, lo } => {
                    let (hi, lo) = (f64_of(hi), f64_of(lo));
                    if !(hi > 0.0 && lo > 0.0) {
                        // pyhf's fits fail on these (log of a non-positive factor): say why here.
                        return Err(Error::InvalidModel(format!(
                            "{}: hi = {hi} and lo = {lo} must both be positive (they scale the \
                             yield, and the interpolation takes their logarithms)",
                            at()
                        )));
                    }
                    model.scalar_factors.push(ScalarFactor {
                        param: to_u32(param)?,
                        normsys: to_u32(model.normsys.len())?,
                    });
                    model.normsys.push(NormsysTerm::new(codes.normsys, hi, lo));
                }
                ModifierKind::HistoSys { hi_data, lo_data } => {
                    model.histosys_param.push(to_u32(param)?);
                    let up = nominal
                        .iter()
                        .zip(f64s(hi_data))
                        .map(|(nom, hi)| hi - nom)
                        .collect();
                    let down = nominal
                        .iter()
                        .zip(f64s(lo_data))
                        .map(|(nom, lo)| nom - lo)
                        .collect();
                    histosys_terms.push((up, down));
                }
                ModifierKind::ShapeFactor | ModifierKind::ShapeSys(_) => {
                    if n_bins > set.n_parameters {
                        return Err(Error::InvalidModel(format!(
                            "{}: the channel has {n_bins} bins but the parameter set '{}' has {} (it was declared on a channel with fewer bins)",
                            at(),
                            set.name,
                            set.n_parameters
                        )));
                    }
                    for (j, list) in entry_params.iter_mut().enumerate() {
                        list.push(to_u32(param + j)?);
                    }
                }
                ModifierKind::StatError(_) => {
                    let offset = staterror
                        .sets
                        .get(m.name.as_str())
                        .and_then(|set| set.channel_offset.get(&p.channel))
                        .ok_or_else(|| {
                            Error::InvalidModel(format!(
                                "internal: {} does not cover its channel",
                                at()
                            ))
                        })?;
                    for (j, list) in entry_params.iter_mut().enumerate() {
                        list.push(to_u32(param + offset + j)?);
                    }
                }
            }
        }
        for i in 0..n_bins {
            for (up, down) in &histosys_terms {
                model.histosys_delta.push(up[i]);
                model.histosys_delta.push(down[i]);
            }
        }
        model.nominal.extend_from_slice(&nominal);
        for list in entry_params {
            model.entry_factor_param.extend(list);
            model
                .entry_factor_start
                .push(to_u32(model.entry_factor_param.len())?);
        }
        model.samples.push(SampleBlock {
            bin_start: to_u32(channel.bin_start)?,
            n_bins: to_u32(n_bins)?,
            entry_start: to_u32(entry_start)?,
            scalar_start: to_u32(scalar_start)?,
            scalar_end: to_u32(model.scalar_factors.len())?,
            histosys_start: to_u32(histosys_start)?,
            histosys_end: to_u32(model.histosys_param.len())?,
            histosys_delta_start: to_u32(histosys_delta_start)?,
        });
    }
    let mut aux_index = 0;
    for set in sets {
        for i in 0..set.n_parameters {
            let (param, aux) = (to_u32(set.offset + i)?, to_u32(aux_index)?);
            match set.constraint {
                Constraint::None => continue,
                Constraint::Gaussian => model.gaussian.push(GaussianConstraint {
                    param,
                    aux_index: aux,
                    sigma: set.sigmas[i],
                }),
                Constraint::Poisson => model.poisson.push(PoissonConstraint {
                    param,
                    aux_index: aux,
                    tau: set.factors[i],
                }),
            }
            aux_index += 1;
        }
    }
    Ok(model)
}

impl Workspace {
    /// Observed main data in the model's channel order, followed by the auxdata if asked (pyhf's `Workspace.data`).
    pub fn data(&self, model: &HistFactoryModel, include_auxdata: bool) -> Result<Vec<f64>> {
        let mut data = Vec::with_capacity(model.compiled.n_main + model.auxdata.len());
        for channel in &model.channels {
            let obs = self
                .observations
                .iter()
                .find(|o| o.name == channel.name)
                .ok_or_else(|| {
                    Error::InvalidWorkspace(format!(
                        "channel '{}' has no observation",
                        channel.name
                    ))
                })?;
            data.extend(f64s(&obs.data));
        }
        if include_auxdata {
            data.extend_from_slice(&model.auxdata);
        }
        Ok(data)
    }
}
