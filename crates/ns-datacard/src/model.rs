//! A counting datacard as a model with Combine's likelihood (`ModelTools.py`'s
//! `doNuisances`/`doExpectedEvents`, summarised in docs/combine.md):
//! - the POI `r` multiplies every signal process, start 1 in [0, 20];
//! - `lnN κ` and `lnN κ_lo/κ_hi`: Combine's `AsymPow` factor exp(θ·L(θ)) on a θ with a unit
//!   Gaussian constraint, θ ∈ [−7, 7]; `lnU`: the same factor, θ ∈ [−1, 1] without constraint;
//! - `gmN N α`: the yield is α·θ, θ Poisson-constrained to N, starting at N + 1 as
//!   text2workspace starts it;
//! - `rateParam`: a free factor (its range, or none), shared by name; a formula of rateParams
//!   and `extArg`s multiplies them; `param μ σ` on one constrains it (Gaussian, range μ ± 4σ);
//! - `nuisance edit freeze NAME` fixes a parameter.
//!
//! What is not built yet is refused by name: shape templates, autoMCStats, asymmetric `param`s,
//! formulas other than products, the other `nuisance edit` operations.

use ns_core::interp::{HistosysCode, InterpCodes, NormsysCode, NormsysTerm};
use ns_core::layout::{GaussianConstraint, PoissonConstraint, SampleBlock, ScalarFactor};
use ns_core::model::{ChannelInfo, Constraint, HistFactoryModel, ParameterSet};
use ns_core::{CompiledModel, Error, Result};

use crate::{Datacard, Effect, Kind};

/// Combine's range of an lnN nuisance.
const LNN_RANGE: f64 = 7.0;
/// The POI's range under Combine's default physics model.
const POI_RANGE: (f64, f64) = (0.0, 20.0);
/// The POI of the default physics model.
pub const POI: &str = "r";

/// A parameter while the model is laid out.
struct Parameter {
    name: String,
    kind: &'static str,
    init: f64,
    bounds: (f64, f64),
    constraint: Constraint,
    /// Gaussian: mean and σ; Poisson: N (τ = 1).
    aux: f64,
    sigma: f64,
    fixed: bool,
}

impl Parameter {
    fn free(name: &str, kind: &'static str, init: f64, bounds: (f64, f64)) -> Self {
        Parameter {
            name: name.into(),
            kind,
            init,
            bounds,
            constraint: Constraint::None,
            aux: 0.0,
            sigma: 0.0,
            fixed: false,
        }
    }
}

/// The model of a counting card, with the observed counts as its data.
pub fn model(card: &Datacard) -> Result<HistFactoryModel> {
    let origin = &card.origin;
    let refuse = |what: String| Error::InvalidModel(format!("{origin}: {what} (not built yet)"));
    if let Some(s) = card.shapes.iter().find(|s| s.file != "FAKE") {
        return Err(refuse(format!(
            "shapes line for process '{}', channel '{}' ({}): shape analyses with TH1 templates \
             are not read yet; counting cards (and 'shapes * * FAKE') are",
            s.process, s.channel, s.file
        )));
    }
    if let Some((b, _)) = card
        .bins
        .iter()
        .zip(&card.observations)
        .find(|(_, o)| **o < 0.0)
    {
        return Err(Error::InvalidModel(format!(
            "{origin}: the observation of '{b}' is -1 (the data histogram's integral), but the \
             card has no data histogram"
        )));
    }
    if let Some(c) = card.columns.iter().find(|c| c.rate < 0.0) {
        return Err(Error::InvalidModel(format!(
            "{origin}: the rate of '{}' in '{}' is -1 (its template's integral), but the card \
             has no template for it",
            c.process, c.bin
        )));
    }
    if let Some(channel) = card.auto_mc_stats.keys().next() {
        return Err(refuse(format!("autoMCStats on '{channel}'")));
    }
    let mut parameters = vec![Parameter::free(POI, "normfactor", 1.0, POI_RANGE)];
    // Per column, what multiplies its nominal: scalar (parameter, normsys term) and per-bin
    // (gmN) factors.
    let mut normsys: Vec<NormsysTerm> = Vec::new();
    let mut scalars: Vec<Vec<ScalarFactor>> = vec![Vec::new(); card.columns.len()];
    let mut entry_factor: Vec<Option<u32>> = vec![None; card.columns.len()];
    let mut nominal: Vec<f64> = card.columns.iter().map(|c| c.rate).collect();
    for (c, column) in card.columns.iter().enumerate() {
        if column.signal {
            scalars[c].push(ScalarFactor {
                param: 0,
                normsys: ScalarFactor::LINEAR,
            });
        }
    }
    for syst in &card.systematics {
        let at = format!("{origin} line {}: '{}'", syst.line, syst.name);
        let index = parameters.len() as u32;
        match &syst.kind {
            Kind::LnN | Kind::LnU => {
                let mut parameter =
                    Parameter::free(&syst.name, "normsys", 0.0, (-LNN_RANGE, LNN_RANGE));
                if syst.kind == Kind::LnN {
                    parameter.constraint = Constraint::Gaussian;
                    parameter.sigma = 1.0;
                } else {
                    parameter.bounds = (-1.0, 1.0);
                }
                parameters.push(parameter);
                for (c, effect) in syst.effects.iter().enumerate() {
                    let (hi, lo) = match effect {
                        None => continue,
                        Some(Effect::Symmetric(k)) => (*k, 1.0 / k),
                        Some(Effect::Asymmetric(lo, hi)) => (*hi, *lo),
                    };
                    scalars[c].push(ScalarFactor {
                        param: index,
                        normsys: normsys.len() as u32,
                    });
                    normsys.push(NormsysTerm::new(NormsysCode::AsymPow, hi, lo));
                }
            }
            Kind::GmN { n } => {
                let n = *n as f64;
                parameters.push(Parameter {
                    name: syst.name.clone(),
                    kind: "gmN",
                    init: n + 1.0,
                    bounds: (0.0, 10.0 * (n + 1.0)),
                    constraint: Constraint::Poisson,
                    aux: n,
                    sigma: 0.0,
                    fixed: false,
                });
                for (c, effect) in syst.effects.iter().enumerate() {
                    match effect {
                        None => {}
                        Some(Effect::Symmetric(alpha)) => {
                            if entry_factor[c].is_some() {
                                return Err(Error::InvalidModel(format!(
                                    "{at}: a second gmN on one column"
                                )));
                            }
                            entry_factor[c] = Some(index);
                            nominal[c] = *alpha;
                        }
                        Some(Effect::Asymmetric(..)) => {
                            return Err(Error::InvalidModel(format!(
                                "{at}: a gmN's α is one number"
                            )));
                        }
                    }
                }
            }
            Kind::Shape { pdf } => {
                return Err(refuse(format!("line {}: '{} {pdf}'", syst.line, syst.name)));
            }
            Kind::Param { .. } => {}
        }
    }
    rate_params(card, &mut parameters, &mut scalars)?;
    for syst in &card.systematics {
        if let Kind::Param { args } = &syst.kind {
            param_constraint(card, syst.line, &syst.name, args, &mut parameters)?;
        }
    }
    for edit in &card.edits {
        match edit.first().map(String::as_str) {
            Some("freeze") => {
                for name in &edit[1..] {
                    let p = parameters
                        .iter_mut()
                        .find(|p| &p.name == name)
                        .ok_or_else(|| {
                            Error::InvalidModel(format!(
                                "{origin}: nuisance edit freeze '{name}': no such parameter"
                            ))
                        })?;
                    p.fixed = true;
                }
            }
            _ => {
                return Err(refuse(format!("'nuisance edit {}'", edit.join(" "))));
            }
        }
    }
    Ok(assemble(
        card,
        parameters,
        normsys,
        scalars,
        entry_factor,
        nominal,
    ))
}

/// The rateParams, extArgs and formulas: each a factor on the columns it names.
fn rate_params(
    card: &Datacard,
    parameters: &mut Vec<Parameter>,
    scalars: &mut [Vec<ScalarFactor>],
) -> Result<()> {
    let origin = &card.origin;
    let index_of = |name: &str,
                    parameters: &mut Vec<Parameter>,
                    make: &dyn Fn() -> Result<Parameter>|
     -> Result<u32> {
        if let Some(i) = parameters.iter().position(|p| p.name == name) {
            return Ok(i as u32);
        }
        parameters.push(make()?);
        Ok((parameters.len() - 1) as u32)
    };
    // Independent rateParams first, then formulas (which read them and extArgs).
    for rp in card
        .rate_params
        .iter()
        .filter(|r| !r.value.starts_with('('))
    {
        let at = format!("{origin} line {}: rateParam '{}'", rp.line, rp.name);
        let init: f64 = rp
            .value
            .parse()
            .ok()
            .filter(|v: &f64| v.is_finite())
            .ok_or_else(|| {
                Error::InvalidModel(format!(
                    "{at}: initial value '{}' is not a number",
                    rp.value
                ))
            })?;
        let bounds = match &rp.range_or_args {
            Some(range) => range_of(range, &at)?,
            None => (f64::NEG_INFINITY, f64::INFINITY),
        };
        let i = index_of(&rp.name, parameters, &|| {
            Ok(Parameter::free(&rp.name, "rateParam", init, bounds))
        })?;
        let column = column_of(card, &rp.bin, &rp.process);
        scalars[column].push(ScalarFactor {
            param: i,
            normsys: ScalarFactor::LINEAR,
        });
    }
    for rp in card.rate_params.iter().filter(|r| r.value.starts_with('(')) {
        let at = format!(
            "{origin} line {}: rateParam '{}' = {}",
            rp.line, rp.name, rp.value
        );
        let args: Vec<&str> = rp
            .range_or_args
            .as_deref()
            .unwrap_or("")
            .split(',')
            .filter(|a| !a.is_empty())
            .collect();
        let formula = rp.value.trim_start_matches('(').trim_end_matches(')');
        let column = column_of(card, &rp.bin, &rp.process);
        for factor in formula.split('*') {
            let factor = factor.trim();
            let k: usize = factor
                .strip_prefix('@')
                .and_then(|k| k.parse().ok())
                .ok_or_else(|| {
                    Error::InvalidModel(format!(
                        "{at}: '{factor}': formulas are read as products of their arguments \
                         (@0*@1*…); others are not built yet"
                    ))
                })?;
            let name = args.get(k).ok_or_else(|| {
                Error::InvalidModel(format!("{at}: @{k} but {} arguments", args.len()))
            })?;
            let i = index_of(name, parameters, &|| {
                let ext = card.ext_args.get(*name).ok_or_else(|| {
                    Error::InvalidModel(format!(
                        "{at}: '{name}' is neither a rateParam nor an extArg"
                    ))
                })?;
                let init: f64 = ext.first().and_then(|v| v.parse().ok()).ok_or_else(|| {
                    Error::InvalidModel(format!("{at}: extArg '{name}' has no initial value"))
                })?;
                let bounds = match ext.get(1) {
                    Some(range) => range_of(range, &at)?,
                    None => (f64::NEG_INFINITY, f64::INFINITY),
                };
                Ok(Parameter::free(name, "extArg", init, bounds))
            })?;
            scalars[column].push(ScalarFactor {
                param: i,
                normsys: ScalarFactor::LINEAR,
            });
        }
    }
    Ok(())
}

/// `param μ σ [range]` on a rateParam or extArg: a Gaussian constraint, range μ ± 4σ unless
/// given.
fn param_constraint(
    card: &Datacard,
    line: usize,
    name: &str,
    args: &[String],
    parameters: &mut [Parameter],
) -> Result<()> {
    let at = format!("{} line {line}: param '{name}'", card.origin);
    let mean: f64 = args[0]
        .parse()
        .map_err(|_| Error::InvalidModel(format!("{at}: mean '{}' is not a number", args[0])))?;
    if args[1].contains('/') {
        return Err(Error::InvalidModel(format!(
            "{at}: an asymmetric param (a bifurcated Gaussian) is not built yet"
        )));
    }
    let sigma: f64 = args[1]
        .parse()
        .ok()
        .filter(|s: &f64| *s > 0.0 && s.is_finite())
        .ok_or_else(|| {
            Error::InvalidModel(format!(
                "{at}: sigma '{}' is not a positive number",
                args[1]
            ))
        })?;
    let parameter = parameters
        .iter_mut()
        .find(|p| p.name == name)
        .ok_or_else(|| {
            Error::InvalidModel(format!(
                "{at}: constrains no rateParam or extArg of the model (a param of its own is not \
             built yet)"
            ))
        })?;
    parameter.constraint = Constraint::Gaussian;
    parameter.aux = mean;
    parameter.sigma = sigma;
    parameter.bounds = match args.get(2) {
        Some(range) => range_of(range, &at)?,
        None => (mean - 4.0 * sigma, mean + 4.0 * sigma),
    };
    Ok(())
}

/// `[min,max]`.
fn range_of(text: &str, at: &str) -> Result<(f64, f64)> {
    let inner = text
        .strip_prefix('[')
        .and_then(|t| t.strip_suffix(']'))
        .ok_or_else(|| Error::InvalidModel(format!("{at}: range '{text}' is not [MIN,MAX]")))?;
    let (lo, hi) = inner
        .split_once(',')
        .ok_or_else(|| Error::InvalidModel(format!("{at}: range '{text}' is not [MIN,MAX]")))?;
    match (lo.trim().parse::<f64>(), hi.trim().parse::<f64>()) {
        (Ok(lo), Ok(hi)) if lo < hi => Ok((lo, hi)),
        _ => Err(Error::InvalidModel(format!(
            "{at}: range '{text}' is not [MIN,MAX] with MIN < MAX"
        ))),
    }
}

fn column_of(card: &Datacard, bin: &str, process: &str) -> usize {
    card.columns
        .iter()
        .position(|c| c.bin == bin && c.process == process)
        .unwrap_or_default()
}

/// The compiled model: one channel of one bin per card bin, a sample block per column.
fn assemble(
    card: &Datacard,
    parameters: Vec<Parameter>,
    normsys: Vec<NormsysTerm>,
    scalars: Vec<Vec<ScalarFactor>>,
    entry_factor: Vec<Option<u32>>,
    nominal: Vec<f64>,
) -> HistFactoryModel {
    let mut compiled = CompiledModel {
        n_params: parameters.len(),
        n_main: card.bins.len(),
        n_aux: 0,
        codes: InterpCodes {
            normsys: NormsysCode::AsymPow,
            histosys: HistosysCode::Code4p,
        },
        samples: Vec::new(),
        nominal: Vec::new(),
        entry_factor_start: vec![0],
        entry_factor_param: Vec::new(),
        scalar_factors: Vec::new(),
        normsys,
        histosys_param: Vec::new(),
        histosys_delta: Vec::new(),
        gaussian: Vec::new(),
        poisson: Vec::new(),
        gaussian_ranges: Vec::new(),
        normsys_inputs: Vec::new(),
        poisson_ranges: Vec::new(),
        clip_sample_yields: false,
    };
    let mut block_samples = Vec::new();
    for (b, bin) in card.bins.iter().enumerate() {
        for (c, column) in card
            .columns
            .iter()
            .enumerate()
            .filter(|(_, c)| &c.bin == bin)
        {
            let scalar_start = compiled.scalar_factors.len() as u32;
            compiled.scalar_factors.extend_from_slice(&scalars[c]);
            compiled.samples.push(SampleBlock {
                bin_start: b as u32,
                n_bins: 1,
                entry_start: compiled.nominal.len() as u32,
                scalar_start,
                scalar_end: compiled.scalar_factors.len() as u32,
                histosys_start: 0,
                histosys_end: 0,
                histosys_delta_start: 0,
            });
            compiled.nominal.push(nominal[c]);
            compiled.entry_factor_param.extend(entry_factor[c]);
            compiled
                .entry_factor_start
                .push(compiled.entry_factor_param.len() as u32);
            block_samples.push(column.process.clone());
        }
    }
    let mut sets = Vec::with_capacity(parameters.len());
    for (i, p) in parameters.into_iter().enumerate() {
        let constrained = p.constraint != Constraint::None;
        if constrained {
            let aux_index = compiled.n_aux as u32;
            match p.constraint {
                Constraint::Gaussian => compiled.gaussian.push(GaussianConstraint {
                    param: i as u32,
                    aux_index,
                    sigma: p.sigma,
                }),
                _ => compiled.poisson.push(PoissonConstraint {
                    param: i as u32,
                    aux_index,
                    tau: 1.0,
                }),
            }
            compiled.n_aux += 1;
        }
        sets.push(ParameterSet {
            name: p.name,
            modifier_type: p.kind,
            offset: i,
            n_parameters: 1,
            is_scalar: true,
            constraint: p.constraint,
            inits: vec![p.init],
            bounds: vec![p.bounds],
            fixed: vec![p.fixed],
            auxdata: if constrained { vec![p.aux] } else { vec![] },
            sigmas: if p.constraint == Constraint::Gaussian {
                vec![p.sigma]
            } else {
                vec![]
            },
            factors: if p.constraint == Constraint::Poisson {
                vec![1.0]
            } else {
                vec![]
            },
        });
    }
    let channels = card
        .bins
        .iter()
        .enumerate()
        .map(|(b, name)| ChannelInfo {
            name: name.clone(),
            n_bins: 1,
            bin_start: b,
        })
        .collect();
    let samples = card.processes().iter().map(|p| p.to_string()).collect();
    let mut model = HistFactoryModel::new(
        "datacard".into(),
        channels,
        samples,
        sets,
        POI.into(),
        compiled,
        block_samples,
    );
    model.observations = Ok(card.observations.clone());
    model
}
