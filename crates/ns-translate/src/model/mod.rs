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
use ns_core::model::{ChannelInfo, Constraint, HistFactoryModel, ParameterSet};
use ns_core::{CompiledModel, Error, InterpCodes, Result};
use std::collections::{BTreeMap, BTreeSet, HashMap};

mod lower;
pub mod root;

use crate::spec::{
    MODIFIER_TYPES, Modifier, ModifierKind, ParameterConfig, Sample, Workspace, f64_of, f64s,
};
use lower::{StatErrorSets, lower};
use root::{ConstraintType, RootSemantics};

/// Options for building a model from a workspace.
#[derive(Clone, Debug, Default)]
pub struct ModelOptions {
    /// Measurement name; the first measurement when `None`.
    pub measurement: Option<String>,
    pub codes: InterpCodes,
    /// Clip each sample's yield at zero as ROOT's HistFactory does (its histosys sum and its
    /// product of normsys factors), where pyhf lets them turn negative. Implied by a workspace's
    /// ROOT semantics.
    pub clip_negative_yields: bool,
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

/// Builds a [`HistFactoryModel`] from a workspace (pyhf-exact).
pub trait FromWorkspace: Sized {
    /// Build the model of `workspace` for a measurement, pyhf-exact.
    fn from_workspace(workspace: &Workspace, options: &ModelOptions) -> Result<Self>;
}

impl FromWorkspace for HistFactoryModel {
    /// Build the model of `workspace` for a measurement, pyhf-exact.
    fn from_workspace(workspace: &Workspace, options: &ModelOptions) -> Result<Self> {
        let measurement = workspace.measurement(options.measurement.as_deref())?;
        // ROOT leaves out an OverallSys whose ConstraintTerm is NoConstraint.
        let without_unconstrained;
        let workspace = match workspace
            .root_semantics
            .as_ref()
            .and_then(|r| r.constraint_terms(&measurement.name))
            .map(root::unconstrained)
        {
            Some(names) if !names.is_empty() => {
                without_unconstrained = root::without_normsys(workspace, &names);
                &without_unconstrained
            }
            _ => workspace,
        };
        let (channels, samples, placed) = place_samples(workspace)?;
        let root = workspace.root_semantics.as_ref();
        let staterror = StatErrorSets::collect(&placed, &channels, root)?;
        let (order, requirements) = requirements_in_order(&placed, &channels, &staterror, root)?;
        let mut parameter_sets = lay_out_parameters(&order, requirements, measurement)?;
        let parts = match root.and_then(|r| r.constraint_terms(&measurement.name)) {
            Some(terms) => {
                let histosys_names: BTreeSet<&str> = placed
                    .iter()
                    .flat_map(|p| &p.modifiers)
                    .filter(|m| matches!(m.kind, ModifierKind::HistoSys { .. }))
                    .map(|m| m.name.as_str())
                    .collect();
                root::apply_constraint_terms(
                    &mut parameter_sets,
                    terms,
                    &measurement.name,
                    &histosys_names,
                )?
            }
            None => root::ConstraintTermParts::default(),
        };
        let mut compiled = lower(
            &placed,
            &channels,
            &parameter_sets,
            &staterror,
            options.codes,
            root.is_some(),
            options.clip_negative_yields,
        )?;
        if let Some(root) = root {
            compiled.gaussian_ranges =
                root::gaussian_ranges(&parameter_sets, root.global_ranges.as_ref());
        }
        compiled.normsys_inputs = parts.normsys_inputs;
        compiled.poisson_ranges = parts.poisson_ranges;
        let mut model = HistFactoryModel::new(
            measurement.name.clone(),
            channels,
            samples,
            parameter_sets,
            measurement.config.poi.clone(),
            compiled,
            placed.iter().map(|p| p.sample.name.clone()).collect(),
        );
        model.observations = workspace.data(&model, false).map_err(|e| e.to_string());
        Ok(model)
    }
}

/// Each sample in the model's order (channels, then their samples, sorted by name) with its
/// channel's index in that order and its modifiers as pyhf reads them (a repeated name and type
/// keeps its last, sorted by name and type): the structure a writer of the model walks.
pub fn samples_in_order(workspace: &Workspace) -> Result<Vec<(usize, &Sample, Vec<&Modifier>)>> {
    let (_, _, placed) = place_samples(workspace)?;
    Ok(placed
        .into_iter()
        .map(|p| (p.channel, p.sample, p.modifiers))
        .collect())
}

/// Channels sorted by name (with their bin ranges), the global sorted sample list, and each
/// channel's samples sorted by name with their modifiers deduplicated as pyhf does.
fn place_samples(
    workspace: &Workspace,
) -> Result<(Vec<ChannelInfo>, Vec<String>, Vec<PlacedSample<'_>>)> {
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

    Ok((channels, samples, placed))
}

/// The parameter-set names in pyhf's order (by modifier type, then first appearance) and what
/// each modifier type asks of them, with pyhf's name-reuse rules.
fn requirements_in_order(
    placed: &[PlacedSample],
    channels: &[ChannelInfo],
    staterror: &StatErrorSets,
    root: Option<&RootSemantics>,
) -> Result<(Vec<String>, HashMap<String, Requirement>)> {
    let invalid = |m: String| Error::InvalidModel(m);
    // Requirements per name, in pyhf's order: by type, then first appearance.
    let mut order: Vec<String> = Vec::new();
    let mut requirements: HashMap<String, Requirement> = HashMap::new();
    let mut shapesys_owner: HashMap<&str, (usize, &str)> = HashMap::new();
    for modifier_type in MODIFIER_TYPES {
        // `make` builds the requirement only where it is compared or kept: most modifiers
        // repeat a name already required by the same type.
        let mut add = |name: &str, make: &dyn Fn() -> Requirement| -> Result<()> {
            match requirements.get(name) {
                None => {
                    order.push(name.to_string());
                    requirements.insert(name.to_string(), make());
                }
                Some(existing) if existing.modifier_type == modifier_type => {}
                Some(existing) => {
                    let req = make();
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
                add(name, &|| set.requirement.clone())?;
            }
            continue;
        }
        for p in placed {
            for m in p
                .modifiers
                .iter()
                .filter(|m| m.kind.type_name() == modifier_type)
            {
                let n_bins = p.sample.data.len();
                match &m.kind {
                    ModifierKind::ShapeSys(unc) => {
                        // With ROOT's relative widths the constraint is the shapesys's own, not
                        // one sample's: samples may share its γ (ROOT's HS3 does), bin for bin.
                        let widths = root.and_then(|r| r.shapesys(&m.name));
                        if let Some(w) = widths.filter(|w| w.relative.len() != n_bins) {
                            return Err(invalid(format!(
                                "shapesys '{}' of sample '{}' in channel '{}': {} relative widths for {n_bins} bins",
                                m.name,
                                p.sample.name,
                                channels[p.channel].name,
                                w.relative.len()
                            )));
                        }
                        if let Some((channel, sample)) =
                            shapesys_owner.insert(&m.name, (p.channel, &p.sample.name))
                            && widths.is_none()
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
                        let nominal = f64s(&p.sample.data);
                        let uncertainty = f64s(unc);
                        let requirement = match root {
                            None => shapesys_requirement(&nominal, &uncertainty),
                            Some(r) => root_shapesys_requirement(
                                &nominal,
                                &uncertainty,
                                r.shapesys(&m.name),
                            )
                            .map_err(|e| {
                                invalid(format!(
                                    "shapesys '{}' of sample '{}' in channel '{}': {e}",
                                    m.name, p.sample.name, channels[p.channel].name
                                ))
                            })?,
                        };
                        add(&m.name, &|| requirement.clone())?;
                    }
                    ModifierKind::ShapeFactor if root.is_some() => add(&m.name, &|| Requirement {
                        bounds: Some(vec![(0.0, root::ROOT_SHAPEFACTOR_MAX); n_bins]),
                        ..Requirement::new(modifier_type, n_bins)
                    })?,
                    _ => add(&m.name, &|| Requirement::new(modifier_type, n_bins))?,
                }
            }
        }
    }
    if order.is_empty() {
        return Err(invalid(
            "no parameters: the workspace declares no modifiers".into(),
        ));
    }

    Ok((order, requirements))
}

/// Apply the measurement's configuration to each requirement and lay out the parameter vector.
fn lay_out_parameters(
    order: &[String],
    mut requirements: HashMap<String, Requirement>,
    measurement: &crate::spec::Measurement,
) -> Result<Vec<ParameterSet>> {
    let invalid = |m: String| Error::InvalidModel(m);
    // Apply the measurement's configuration and lay out the parameter vector.
    let configs: HashMap<&str, &ParameterConfig> = measurement
        .config
        .parameters
        .iter()
        .map(|p| (p.name.as_str(), p))
        .collect();
    let mut parameter_sets = Vec::with_capacity(order.len());
    let mut offset = 0;
    for name in order {
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
    Ok(parameter_sets)
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

/// ROOT's shapesys requirement: relative widths δ (the XML's histogram where given, else
/// pyhf's data over the nominal yields); a Gaussian (σ = δ) or Poisson (τ = 1/δ²) constraint;
/// a bin with δ ≤ 0 constant; every γ over [0, 1 + 5δ].
fn root_shapesys_requirement(
    nominal: &[f64],
    uncertainty: &[f64],
    config: Option<&root::ShapeSysConfig>,
) -> std::result::Result<Requirement, String> {
    let relative: Vec<f64> = match config {
        Some(c) if c.relative.len() != nominal.len() => {
            return Err(format!(
                "ROOT's semantics give {} relative widths for {} bins",
                c.relative.len(),
                nominal.len()
            ));
        }
        Some(c) => c.relative.clone(),
        None => nominal
            .iter()
            .zip(uncertainty)
            .map(|(&n, &u)| if n > 0.0 { u / n } else { 0.0 })
            .collect(),
    };
    let constraint = config.map_or(ConstraintType::Gaussian, |c| c.constraint);
    let n = nominal.len();
    let valid: Vec<bool> = relative.iter().map(|&d| d > 0.0).collect();
    let or_one = |x: f64, ok: bool| if ok { x } else { 1.0 };
    let common = Requirement {
        bounds: Some(
            relative
                .iter()
                .map(|&d| root::gamma_bounds(d.max(0.0)))
                .collect(),
        ),
        fixed: valid.iter().map(|v| !v).collect(),
        ..Requirement::new("shapesys", n)
    };
    Ok(match constraint {
        ConstraintType::Poisson => {
            let factors: Vec<f64> = relative
                .iter()
                .zip(&valid)
                .map(|(&d, &ok)| or_one(1.0 / (d * d), ok))
                .collect();
            Requirement {
                auxdata: Some(factors.clone()),
                factors: Some(factors),
                ..common
            }
        }
        ConstraintType::Gaussian => Requirement {
            constraint: Constraint::Gaussian,
            auxdata: Some(vec![1.0; n]),
            sigmas: Some(
                relative
                    .iter()
                    .zip(&valid)
                    .map(|(&d, &ok)| or_one(d, ok))
                    .collect(),
            ),
            uses: [true, true, false],
            ..common
        },
    })
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
