//! ROOT HistFactory's semantics of a model read from HistFactory XML, where they differ from
//! pyhf's: what `hist2workspace` (ROOT 6.40) builds and pyhf's JSON cannot say. A workspace
//! carries them under [`ROOT_SEMANTICS_KEY`]; without them a workspace is pyhf's.
//!
//! Term by term (docs/histfactory-xml.md has the table and the measurements behind it):
//! - staterror: each channel's `<StatErrorConfig>`: a Poisson (τ = 1/δ², ROOT's default) or
//!   Gaussian (σ = δ) constraint; bins whose relative error δ is below `RelErrorThreshold` are
//!   constant;
//! - shapesys: Gaussian (σ = δ, ROOT's default) or Poisson (τ = 1/δ²), as declared;
//! - every γ (staterror, shapesys) ranges over [0, 1 + 5δ]; a shapefactor over [0, 1000];
//! - a measurement's `<ConstraintTerm>`s: `Uniform` is a Gaussian of width 100 in ROOT 6.40,
//!   `NoConstraint` leaves the OverallSys out, `LogNormal` reads it through τ(κ^α − 1), `Gamma`
//!   makes the parameter ROOT's β, read as (β − 1)/rel under a Gamma constraint;
//! - each sample's yield in a bin is clipped at zero (ROOT's positive-definite interpolation).

use std::collections::{BTreeMap, BTreeSet};

use ns_core::layout::{GaussianRange, NormsysInput, NormsysTransform, PoissonRange};
use ns_core::model::{Constraint, ParameterSet};
use ns_core::{Error, Result};
use serde::{Deserialize, Serialize};

use crate::spec::{ModifierKind, Workspace};

/// The workspace key of [`RootSemantics`].
pub const ROOT_SEMANTICS_KEY: &str = "nextstat:root_semantics";

/// ROOT's default relative-error threshold of a staterror (`<StatErrorConfig>`).
pub const ROOT_STAT_ERROR_THRESHOLD: f64 = 0.05;

/// The width ROOT 6.40 gives a `Uniform` ConstraintTerm's Gaussian.
pub const ROOT_UNIFORM_WIDTH: f64 = 100.0;

/// The range of ROOT's β of a Gamma ConstraintTerm, and of its global observable.
pub const ROOT_GAMMA_BETA_MAX: f64 = 10.0;

/// The upper bound of a shapefactor in ROOT.
pub const ROOT_SHAPEFACTOR_MAX: f64 = 1000.0;

/// A constraint type as HistFactory XML names one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ConstraintType {
    Gaussian,
    Poisson,
}

/// A channel's `<StatErrorConfig>`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatErrorConfig {
    pub constraint: ConstraintType,
    /// Bins whose relative MC error is below it are constant.
    pub threshold: f64,
}

impl Default for StatErrorConfig {
    /// ROOT 6.40's default: Poisson, threshold 0.05.
    fn default() -> Self {
        StatErrorConfig {
            constraint: ConstraintType::Poisson,
            threshold: ROOT_STAT_ERROR_THRESHOLD,
        }
    }
}

/// A `<ShapeSys>`: its constraint and the relative widths of its histogram (ROOT reads them
/// as they are, where pyhf's data, their product with the nominal yields, lose those of empty
/// bins).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShapeSysConfig {
    pub constraint: ConstraintType,
    pub relative: Vec<f64>,
}

/// A measurement's `<ConstraintTerm Type=…>` on a normsys parameter.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub enum ConstraintTerm {
    Gamma { relative_uncertainty: f64 },
    LogNormal { relative_uncertainty: f64 },
    Uniform,
    NoConstraint,
}

/// What ROOT's HistFactory builds differently from pyhf for one workspace.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RootSemantics {
    /// Per staterror parameter set (`staterror_<channel>`): its channel's configuration
    /// (ROOT's default where a set is not listed).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub staterror: BTreeMap<String, StatErrorConfig>,
    /// Per shapesys: its constraint and relative widths (a Gaussian of the widths pyhf's data
    /// give where not listed, as in ROOT).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub shapesys: BTreeMap<String, ShapeSysConfig>,
    /// Per measurement, per normsys parameter: its ConstraintTerm.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub constraint_terms: BTreeMap<String, BTreeMap<String, ConstraintTerm>>,
    /// Where the model's file states them (an HS3 file's domains): per Gaussian-constrained
    /// parameter, the range of its global observable over which RooFit normalises the Gaussian;
    /// a parameter not listed is normalised over the whole line. `None`: HistFactory's ranges
    /// (α's over [−10, 10], γ's over [0, 10], the luminosity's over [0, nominal + 10σ]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub global_ranges: Option<BTreeMap<String, (f64, f64)>>,
}

impl RootSemantics {
    pub fn staterror(&self, set: &str) -> StatErrorConfig {
        self.staterror.get(set).copied().unwrap_or_default()
    }

    pub fn shapesys(&self, name: &str) -> Option<&ShapeSysConfig> {
        self.shapesys.get(name)
    }

    /// The ConstraintTerms of a measurement.
    pub fn constraint_terms(&self, measurement: &str) -> Option<&BTreeMap<String, ConstraintTerm>> {
        self.constraint_terms.get(measurement)
    }
}

/// ROOT's range of a γ whose constraint has relative width `delta`.
pub fn gamma_bounds(delta: f64) -> (f64, f64) {
    (0.0, 1.0 + 5.0 * delta)
}

/// What a measurement's ConstraintTerms add to the compiled model.
#[derive(Default)]
pub(super) struct ConstraintTermParts {
    pub normsys_inputs: Vec<NormsysInput>,
    pub poisson_ranges: Vec<PoissonRange>,
}

/// A measurement's ConstraintTerms on its parameter sets: `Uniform` widens the Gaussian to
/// [`ROOT_UNIFORM_WIDTH`]; `NoConstraint` left the OverallSys out before; `LogNormal` reads the
/// normsys through α' = τ(κ^α − 1) (τ = 1/rel, κ = 1 + rel, rel in single precision as ROOT
/// reads it); `Gamma` makes the parameter ROOT's β ∈ [0, 10] (start 1), read by the normsys as
/// (β − 1)/rel, under a Gamma constraint: a continuous Poisson of rate β/rel² for its global
/// observable min(1/rel², 10), normalised over [0, 10] (`RooGamma` with k = y + 1, θ = rel²,
/// which RooFit normalises numerically over y). `histosys_names` are the parameters a HistoSys
/// reads: ROOT's β replaces only the OverallSys's α, so a Gamma term on one is refused.
pub(super) fn apply_constraint_terms(
    sets: &mut [ParameterSet],
    terms: &BTreeMap<String, ConstraintTerm>,
    measurement: &str,
    histosys_names: &BTreeSet<&str>,
) -> Result<ConstraintTermParts> {
    let mut parts = ConstraintTermParts::default();
    for (name, term) in terms {
        if *term == ConstraintTerm::NoConstraint && !sets.iter().any(|s| &s.name == name) {
            continue;
        }
        let at = format!("measurement '{measurement}', <ConstraintTerm> on '{name}'");
        let set = sets.iter_mut().find(|s| &s.name == name).ok_or_else(|| {
            Error::InvalidModel(format!(
                "{at}: the model has no parameter '{name}' (a ConstraintTerm names an \
                 OverallSys or HistoSys, without its alpha_ prefix)"
            ))
        })?;
        if !matches!(set.modifier_type, "normsys" | "histosys") {
            return Err(Error::InvalidModel(format!(
                "{at}: '{name}' is a {} parameter; a ConstraintTerm applies to an OverallSys or \
                 HistoSys",
                set.modifier_type
            )));
        }
        let relative = match term {
            ConstraintTerm::Uniform => {
                set.sigmas = vec![ROOT_UNIFORM_WIDTH];
                continue;
            }
            // Its OverallSys modifiers were left out (`without_normsys`); a HistoSys of the name
            // keeps its Gaussian, as in ROOT.
            ConstraintTerm::NoConstraint => continue,
            ConstraintTerm::LogNormal {
                relative_uncertainty,
            }
            | ConstraintTerm::Gamma {
                relative_uncertainty,
            } => *relative_uncertainty,
        };
        if !(relative > 0.0 && relative.is_finite()) {
            return Err(Error::InvalidModel(format!(
                "{at}: RelativeUncertainty=\"{relative}\" must be a positive number (it is the \
                 relative width of the constraint)"
            )));
        }
        let param = set.offset as u32;
        if let ConstraintTerm::LogNormal { .. } = term {
            parts.normsys_inputs.push(NormsysInput {
                param,
                transform: NormsysTransform::LogNormal {
                    tau: 1.0 / relative,
                    kappa: 1.0 + relative,
                },
            });
            continue;
        }
        if histosys_names.contains(name.as_str()) {
            return Err(Error::InvalidModel(format!(
                "{at}: '{name}' is also read by a HistoSys; ROOT's Gamma ConstraintTerm replaces \
                 only the OverallSys's alpha_{name} by a β, leaving the HistoSys its own alpha_{name}, \
                 two parameters of one name that a model here cannot hold"
            )));
        }
        let tau = 1.0 / (relative * relative);
        set.constraint = Constraint::Poisson;
        set.auxdata = vec![tau.min(ROOT_GAMMA_BETA_MAX)];
        set.factors = vec![tau];
        set.inits = vec![1.0];
        set.bounds = vec![(0.0, ROOT_GAMMA_BETA_MAX)];
        parts.normsys_inputs.push(NormsysInput {
            param,
            transform: NormsysTransform::Linear {
                scale: 1.0 / relative,
            },
        });
        parts.poisson_ranges.push(PoissonRange {
            param,
            tau,
            high: ROOT_GAMMA_BETA_MAX,
        });
    }
    Ok(parts)
}

/// RooFit's normalisation of a Gaussian constraint: over its global observable's range —
/// [0, 10] for a γ, [−10, 10] for an α, [0, L + 10σ] for the luminosity L — except where RooFit
/// takes the full normal density: an α or the luminosity whose start keeps 4.99 σ from both
/// ends of its range. (A γ's width is a variable in ROOT's model, which keeps RooFit off that
/// shortcut; measured: a shapesys γ of width 0.2 starting 5 σ from 0.)
pub(super) fn gaussian_ranges(
    sets: &[ParameterSet],
    stated: Option<&BTreeMap<String, (f64, f64)>>,
) -> Vec<GaussianRange> {
    let mut ranges = Vec::new();
    for set in sets.iter().filter(|s| s.constraint == Constraint::Gaussian) {
        let is_gamma = matches!(set.modifier_type, "staterror" | "shapesys");
        for i in 0..set.n_parameters {
            let (start, (low, high), sigma) = (set.inits[i], set.bounds[i], set.sigmas[i]);
            let full_density = !is_gamma && (start - low).min(high - start) / sigma >= 4.99;
            if set.fixed[i] || full_density {
                continue;
            }
            let (low, high) = match (stated, set.modifier_type) {
                (Some(stated), _) => {
                    let name = if set.is_scalar {
                        set.name.clone()
                    } else {
                        format!("{}[{i}]", set.name)
                    };
                    match stated.get(&name) {
                        Some(&range) => range,
                        None => continue,
                    }
                }
                (None, "normsys" | "histosys") => (-10.0, 10.0),
                (None, "lumi") => (0.0, set.auxdata[i] + 10.0 * sigma),
                (None, _) => (0.0, 10.0),
            };
            ranges.push(GaussianRange {
                param: (set.offset + i) as u32,
                sigma,
                low,
                high,
            });
        }
    }
    ranges
}

/// The normsys names a measurement's ConstraintTerms leave out (`NoConstraint`).
pub(super) fn unconstrained(terms: &BTreeMap<String, ConstraintTerm>) -> Vec<&str> {
    terms
        .iter()
        .filter(|(_, t)| **t == ConstraintTerm::NoConstraint)
        .map(|(name, _)| name.as_str())
        .collect()
}

/// The workspace without the normsys modifiers named `names`.
pub(super) fn without_normsys(workspace: &Workspace, names: &[&str]) -> Workspace {
    let mut pruned = workspace.clone();
    for sample in pruned
        .channels
        .iter_mut()
        .flat_map(|c| c.samples.iter_mut())
    {
        sample.modifiers.retain(|m| {
            !(matches!(m.kind, ModifierKind::NormSys { .. }) && names.contains(&m.name.as_str()))
        });
    }
    pruned
}
