//! A counting datacard as a model with Combine's likelihood (`ModelTools.py`'s
//! `doNuisances`/`doExpectedEvents`, summarised in docs/combine.md):
//! - the POI `r` multiplies every signal process, start 1 in [0, 20] (or the POIs of
//!   multiSignalModel's maps, `crate::physics`, the processes they name);
//! - `lnN κ` and `lnN κ_lo/κ_hi`: Combine's `AsymPow` factor exp(θ·L(θ)) on a θ with a unit
//!   Gaussian constraint, θ ∈ [−7, 7]; `lnU`: the same factor, θ ∈ [−1, 1] without constraint;
//! - `gmN N α`: the yield is α·θ, θ Poisson-constrained to N, starting at N + 1 as
//!   text2workspace starts it;
//! - `rateParam`: a free factor (its range, or none), shared by name; a formula of rateParams
//!   and `extArg`s — a product and quotient of them and numbers — multiplies them: a power other
//!   than 1 is a normsys term read through ln θ (θ^p = exp(p ln θ)); `param μ σ` on one
//!   constrains it (Gaussian, range μ ± 4σ);
//! - `nuisance edit freeze PATTERN` fixes parameters (the other edits are applied as the card
//!   is read, `crate::edit`); `trG` is the factor 1 + vθ (an affine normsys input).
//!
//! - TH1 templates and `shape` systematics as `crate::shapes` says; `shape?` is an lnN where a
//!   process has no templates;
//! - autoMCStats as `crate::mcstats` says.
//!
//! - `param μ -σlo/+σhi`: a Gaussian of width σhi above μ and σlo below (`LowSideWidth`).
//!
//! What is not built yet is refused by name: `shapeN` outside autoMCStats channels, shape
//! systematics of one process with different scales, formulas other than products and
//! quotients, autoMCStats' hist-mode 2 or on a channel
//! without templates (and CUDA and the f32 devices refuse morphed templates, autoMCStats and
//! two-sided constraints).

use ns_core::interp::{HistosysCode, InterpCodes, NormsysCode, NormsysTerm};
use ns_core::layout::{
    BinStat, FlooredBlock, GaussianConstraint, LowSideWidth, NormsysInput, NormsysTransform,
    PoissonConstraint, SampleBlock, ScalarFactor,
};
use ns_core::model::{ChannelInfo, Constraint, HistFactoryModel, ParameterSet};
use ns_core::{CompiledModel, Error, Result};

use crate::mcstats::{self, StatSpec};
use crate::physics::{Scale, SignalMaps};
use crate::shapes::{self, ShapeFiles, Template};
use crate::{Datacard, Effect, Kind};

/// Combine's range of a shape nuisance.
const SHAPE_RANGE: f64 = 4.0;
/// Combine's floor of a morphed template's bins (`FastTemplate::CropUnderflows`).
const TEMPLATE_FLOOR: f64 = 1e-9;

/// Combine's range of an lnN nuisance.
const LNN_RANGE: f64 = 7.0;
/// The POI's range under Combine's default physics model.
const POI_RANGE: (f64, f64) = (0.0, 20.0);
/// The POI of the default physics model.
pub const POI: &str = "r";

/// A parameter while the model is laid out.
pub(crate) struct Parameter {
    pub name: String,
    pub kind: &'static str,
    pub init: f64,
    pub bounds: (f64, f64),
    pub constraint: Constraint,
    /// Gaussian: mean and σ; Poisson: N (τ = 1).
    pub aux: f64,
    pub sigma: f64,
    /// A Gaussian's width below its mean where it differs (an asymmetric `param`).
    pub sigma_low: Option<f64>,
    pub fixed: bool,
}

impl Parameter {
    pub(crate) fn free(name: &str, kind: &'static str, init: f64, bounds: (f64, f64)) -> Self {
        Parameter {
            name: name.into(),
            kind,
            init,
            bounds,
            constraint: Constraint::None,
            aux: 0.0,
            sigma: 0.0,
            sigma_low: None,
            fixed: false,
        }
    }
}

/// The model of a card under Combine's default physics model, with its observed counts as its
/// data; `files` gives its templates.
pub fn model(card: &Datacard, files: &ShapeFiles) -> Result<HistFactoryModel> {
    model_with(card, files, &SignalMaps::default())
}

/// The model of a card under the physics model `maps` (`crate::physics`).
pub fn model_with(
    card: &Datacard,
    files: &ShapeFiles,
    maps: &SignalMaps,
) -> Result<HistFactoryModel> {
    let origin = &card.origin;
    let refuse = |what: String| Error::InvalidModel(format!("{origin}: {what} (not built yet)"));
    let templates: Vec<Option<Template>> = (0..card.columns.len())
        .map(|c| shapes::template(card, c, files))
        .collect::<Result<_>>()?;
    let mut observed = Vec::with_capacity(card.bins.len());
    for (bin, &count) in card.bins.iter().zip(&card.observations) {
        match shapes::observed(card, bin, files)? {
            Some(histogram) => {
                // Combine's check of the card's count against the data histogram's integral
                // (ShapeTools: 0.5%, or any data where the card says 0).
                let integral: f64 = histogram.iter().sum();
                let mismatch = if count == 0.0 {
                    integral > 0.01
                } else {
                    count > 0.0 && (integral / count - 1.0).abs() > 0.005
                };
                if mismatch {
                    return Err(Error::InvalidModel(format!(
                        "{origin}: the observation of '{bin}' is {count}, but its data \
                         histogram holds {integral} (Combine refuses them too: \"Mismatch in \
                         normalizations\"; give -1 to take the histogram's)"
                    )));
                }
                observed.push(histogram)
            }
            None if count < 0.0 => {
                return Err(Error::InvalidModel(format!(
                    "{origin}: the observation of '{bin}' is -1 (the data histogram's integral), \
                     but the card has no data histogram for it"
                )));
            }
            None => observed.push(vec![count]),
        }
    }
    if let Some((c, _)) = card
        .columns
        .iter()
        .zip(&templates)
        .find(|(c, t)| c.rate < 0.0 && t.is_none())
    {
        return Err(Error::InvalidModel(format!(
            "{origin}: the rate of '{}' in '{}' is -1 (its template's integral), but the card \
             has no template for it",
            c.process, c.bin
        )));
    }
    for (channel, flags) in &card.auto_mc_stats {
        if flags.hist_mode != 1 {
            return Err(refuse(format!(
                "autoMCStats hist-mode {} on '{channel}' (hist-mode 1 is read)",
                flags.hist_mode
            )));
        }
        let in_channel = |c: &usize| &card.columns[*c].bin == channel;
        if let Some(c) = (0..card.columns.len())
            .filter(in_channel)
            .find(|&c| templates[c].is_none())
        {
            return Err(refuse(format!(
                "autoMCStats on '{channel}', where process '{}' has no TH1 template",
                card.columns[c].process
            )));
        }
    }
    let mut parameters = match maps.is_default() {
        true => vec![Parameter::free(POI, "normfactor", 1.0, POI_RANGE)],
        false => maps
            .pois
            .iter()
            .map(|p| Parameter::free(&p.name, "normfactor", p.init, p.bounds))
            .collect(),
    };
    // Per column, what multiplies its nominal: scalar (parameter, normsys term) and per-bin
    // (gmN) factors.
    let mut normsys: Vec<NormsysTerm> = Vec::new();
    let mut scalars: Vec<Vec<ScalarFactor>> = vec![Vec::new(); card.columns.len()];
    let mut entry_factor: Vec<Option<u32>> = vec![None; card.columns.len()];
    let mut nominal: Vec<f64> = card.columns.iter().map(|c| c.rate).collect();
    // The POI on every signal process, or each process's POI by the maps (0 removes one).
    let mut removed = vec![false; card.columns.len()];
    for (c, column) in card.columns.iter().enumerate() {
        let scale = match maps.is_default() {
            true if column.signal => Scale::Poi(POI.into()),
            true => Scale::Constant(1.0),
            false => maps.scale(&column.bin, &column.process),
        };
        match scale {
            Scale::Poi(name) => scalars[c].push(ScalarFactor {
                param: parameters.iter().position(|p| p.name == name).unwrap_or(0) as u32,
                normsys: ScalarFactor::LINEAR,
            }),
            Scale::Constant(k) => removed[c] = k == 0.0,
        }
    }
    let mut inputs: Vec<NormsysInput> = Vec::new();
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
                    let Some(effect) = effect else { continue };
                    let (hi, lo) = log_normal_kappas(effect);
                    scalars[c].push(ScalarFactor {
                        param: index,
                        normsys: normsys.len() as u32,
                    });
                    normsys.push(NormsysTerm::new(NormsysCode::AsymPow, hi, lo));
                }
            }
            Kind::TrG => {
                let (parameter, slope) = truncated_gaussian(&syst.name, &syst.effects, &at)?;
                parameters.push(parameter);
                inputs.push(NormsysInput {
                    param: index,
                    transform: NormsysTransform::Affine { slope },
                });
                for (c, effect) in syst.effects.iter().enumerate() {
                    if effect.is_some() {
                        // e^α' = 1 + vθ: AsymPow of a symmetric κ = e is κ^α'.
                        scalars[c].push(ScalarFactor {
                            param: index,
                            normsys: normsys.len() as u32,
                        });
                        normsys.push(NormsysTerm::new(
                            NormsysCode::AsymPow,
                            std::f64::consts::E,
                            1.0 / std::f64::consts::E,
                        ));
                    }
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
                    sigma_low: None,
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
                            if card.auto_mc_stats.contains_key(&card.columns[c].bin) {
                                return Err(refuse(format!(
                                    "line {}: gmN '{}' in the autoMCStats channel '{}'",
                                    syst.line, syst.name, card.columns[c].bin
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
            Kind::Shape { pdf }
                if !matches!(pdf.as_str(), "shape" | "shape?" | "shapeN" | "shapeN?") =>
            {
                return Err(refuse(format!("line {}: '{} {pdf}'", syst.line, syst.name)));
            }
            Kind::Shape { pdf } => {
                let mut parameter =
                    Parameter::free(&syst.name, "shape", 0.0, (-SHAPE_RANGE, SHAPE_RANGE));
                parameter.constraint = Constraint::Gaussian;
                parameter.sigma = 1.0;
                parameters.push(parameter);
                for (c, effect) in syst.effects.iter().enumerate() {
                    let Some(effect) = effect else { continue };
                    let from_templates = templates[c].as_ref().is_some_and(|t| {
                        t.variations.iter().any(|v| v.syst == s_index(card, syst))
                    });
                    if from_templates {
                        continue;
                    }
                    if !pdf.ends_with('?') {
                        let column = &card.columns[c];
                        return Err(Error::InvalidModel(format!(
                            "{at}: process '{}' in channel '{}' has no templates (no shapes line \
                             names its histograms) for this shape systematic",
                            column.process, column.bin
                        )));
                    }
                    // `shape?` where the process has no templates: an lnN of the value.
                    let (hi, lo) = log_normal_kappas(effect);
                    scalars[c].push(ScalarFactor {
                        param: index,
                        normsys: normsys.len() as u32,
                    });
                    normsys.push(NormsysTerm::new(NormsysCode::AsymPow, hi, lo));
                }
            }
            Kind::Param { .. } => {}
        }
    }
    // Constant factors of formulas (and the maps' zeros), per column.
    let mut column_scale: Vec<f64> = removed.iter().map(|&r| if r { 0.0 } else { 1.0 }).collect();
    rate_params(
        card,
        &mut parameters,
        &mut scalars,
        &mut column_scale,
        &mut normsys,
        &mut inputs,
    )?;
    for syst in &card.systematics {
        if let Kind::Param { args } = &syst.kind {
            param_constraint(card, syst.line, &syst.name, args, &mut parameters)?;
        }
    }
    // `nuisance edit freeze PATTERN [ifexists]` (the only edits left to the model).
    for edit in &card.edits {
        let (Some("freeze"), Some(name)) = (edit.first().map(String::as_str), edit.get(1)) else {
            return Err(Error::InvalidModel(format!(
                "{origin}: 'nuisance edit {}' is not a freeze (the other edits are applied as \
                 the card is read)",
                edit.join(" ")
            )));
        };
        let pattern = crate::edit::pattern(name)
            .map_err(|e| Error::InvalidModel(format!("{origin}: nuisance edit freeze: {e}")))?;
        let mut found = false;
        for p in parameters.iter_mut().filter(|p| pattern.is_match(&p.name)) {
            p.fixed = true;
            found = true;
        }
        if !found && !edit[2..].iter().any(|o| o == "ifexists") {
            return Err(Error::InvalidModel(format!(
                "{origin}: nuisance edit freeze '{name}' matches no parameter (add 'ifexists' \
                 if that is meant)"
            )));
        }
    }
    // Combine's channels share one observable (`CMS_th1x`) as wide as the widest template, and
    // a narrower channel observes nothing in the extra bins. A density template without
    // morphing has them, empty and so raised to the 1e-9 floor, in its normalisation; a morphed
    // one is renormalised over its own bins (`FastVerticalInterpHistPdf2`'s active bins), so
    // its padding stays out of the likelihood. Padded here the same way.
    let width = templates
        .iter()
        .flatten()
        .map(|t| t.nominal.len())
        .max()
        .unwrap_or(0);
    for (bin, data) in card.bins.iter().zip(&mut observed) {
        let padded = !card.auto_mc_stats.contains_key(bin)
            && card
                .columns
                .iter()
                .zip(&templates)
                .any(|(c, t)| &c.bin == bin && t.is_some());
        if padded && data.len() < width {
            data.resize(width, 0.0);
        }
    }
    let shaped = shape_terms(
        card,
        &templates,
        &parameters,
        &mut scalars,
        &mut normsys,
        width,
    )?;
    let columns: Vec<Shaped> = nominal
        .iter()
        .zip(&column_scale)
        .zip(shaped)
        .map(|((n, k), shape)| match shape {
            Some(mut shape) => {
                // A constant factor k: yields times k, logarithms plus ln k.
                let scale = |v: &mut f64| match shape.logarithmic {
                    true => *v += k.ln(),
                    false => *v *= k,
                };
                shape.nominal.iter_mut().for_each(scale);
                for (_, hi, lo) in &mut shape.histosys {
                    hi.iter_mut().chain(lo.iter_mut()).for_each(scale);
                }
                shape.errors.iter_mut().for_each(|v| *v *= k);
                shape.floor = shape.floor.map(|f| f * k);
                shape
            }
            None => Shaped {
                active_bins: 1,
                nominal: vec![n * k],
                errors: vec![0.0],
                histosys: Vec::new(),
                floor: None,
                renormalise_to: None,
                logarithmic: false,
            },
        })
        .collect();
    let initial_factor: Vec<f64> = scalars
        .iter()
        .map(|factors| initial_value(factors, &parameters, &normsys, &inputs))
        .collect();
    let stats = mcstats::bin_parameters(card, &columns, &initial_factor, &mut parameters)?;
    let mut model = assemble(
        card,
        parameters,
        normsys,
        scalars,
        entry_factor,
        columns,
        stats,
        observed,
    )?;
    model.compiled.normsys_inputs = inputs;
    if !maps.is_default() {
        let names: Vec<&str> = maps.pois.iter().map(|p| p.name.as_str()).collect();
        model.set_pois(&names)?;
    }
    Ok(model)
}

/// The rateParams, extArgs and formulas: each a factor on the columns it names.
fn rate_params(
    card: &Datacard,
    parameters: &mut Vec<Parameter>,
    scalars: &mut [Vec<ScalarFactor>],
    column_scale: &mut [f64],
    normsys: &mut Vec<NormsysTerm>,
    inputs: &mut Vec<NormsysInput>,
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
        // The formula as a product of powers of its arguments (@k) and a constant.
        let product = ns_core::monomial::parse(
            formula,
            &at,
            "formulas are read as products and quotients of their arguments and positive \
             numbers (@0*@1/@2, ^, sqrt, pow); others are not built yet",
        )
        .map_err(|e| match e {
            Error::InvalidInput(message) => Error::InvalidModel(message),
            other => other,
        })?;
        let constant = product.constant;
        let mut powers = Vec::with_capacity(product.powers.len());
        for (name, power) in product.powers {
            let k: usize = name
                .strip_prefix('@')
                .and_then(|k| k.parse().ok())
                .ok_or_else(|| {
                    Error::InvalidModel(format!(
                        "{at}: '{name}': a formula names its arguments @0, @1, …"
                    ))
                })?;
            powers.push((k, power));
        }
        column_scale[column] *= constant;
        for (k, power) in powers {
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
            if power == 1.0 {
                scalars[column].push(ScalarFactor {
                    param: i,
                    normsys: ScalarFactor::LINEAR,
                });
            } else if power != 0.0 {
                // θ^p = exp(p ln θ): a normsys term of ln hi = p = −ln lo on ln θ, which needs
                // θ > 0 (an unbounded rateParam keeps to the positive side).
                let bounds = &mut parameters[i as usize].bounds;
                bounds.0 = bounds.0.max(0.0);
                if inputs
                    .iter()
                    .any(|input| input.param == i && input.transform != NormsysTransform::Log)
                {
                    return Err(Error::InvalidModel(format!(
                        "{at}: '{name}' is a trG nuisance, which a formula cannot raise to a power"
                    )));
                }
                if !inputs.iter().any(|input| input.param == i) {
                    inputs.push(NormsysInput {
                        param: i,
                        transform: NormsysTransform::Log,
                    });
                }
                scalars[column].push(ScalarFactor {
                    param: i,
                    normsys: normsys.len() as u32,
                });
                normsys.push(NormsysTerm::new(
                    NormsysCode::AsymPow,
                    power.exp(),
                    (-power).exp(),
                ));
            }
        }
    }
    Ok(())
}

/// A `trG` parameter and its factors' slope v (1 + vθ, v as Combine prints it: `%f`). Its range
/// is Combine's: [−7, 7], cut where a factor reaches zero, printed `%f`; its constraint a unit
/// Gaussian.
fn truncated_gaussian(
    name: &str,
    effects: &[Option<Effect>],
    at: &str,
) -> Result<(Parameter, f64)> {
    let printed = |v: f64| -> f64 { format!("{v:.6}").parse().unwrap_or(v) };
    let values: Vec<f64> = effects
        .iter()
        .flatten()
        .map(|e| match e {
            Effect::Symmetric(v) => Ok(*v),
            Effect::Asymmetric(..) => Err(Error::InvalidModel(format!(
                "{at}: a trG value is one number"
            ))),
        })
        .collect::<Result<_>>()?;
    let (mut low, mut high) = (-LNN_RANGE, LNN_RANGE);
    for &v in &values {
        if v > 0.0 && 1.0 + low * v < 0.0 {
            low = -1.0 / v;
        }
        if v < 0.0 && 1.0 + high * v < 0.0 {
            high = -1.0 / v;
        }
    }
    let slope = values.first().map_or(0.0, |&v| printed(v));
    if let Some(other) = values.iter().find(|&&v| printed(v) != slope) {
        return Err(Error::InvalidModel(format!(
            "{at}: trG values {slope} and {other} on different processes (one trG value per              nuisance is built yet)"
        )));
    }
    let mut parameter = Parameter::free(name, "trG", 0.0, (printed(low), printed(high)));
    parameter.constraint = Constraint::Gaussian;
    parameter.sigma = 1.0;
    Ok((parameter, slope))
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
    // σ, or −σ_low/+σ_high (Combine's RooBifurGauss: σ_low below the mean).
    let width = |text: &str| {
        text.trim_start_matches(['+', '-'])
            .parse::<f64>()
            .ok()
            .filter(|s| *s > 0.0 && s.is_finite())
            .ok_or_else(|| {
                Error::InvalidModel(format!(
                    "{at}: sigma '{}' is not a positive number (σ or -σlow/+σhigh)",
                    args[1]
                ))
            })
    };
    let (sigma_low, sigma) = match args[1].split_once('/') {
        Some((low, high)) => (width(low)?, width(high)?),
        None => {
            let sigma = width(&args[1])?;
            (sigma, sigma)
        }
    };
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
    parameter.sigma_low = (sigma_low != sigma).then_some(sigma_low);
    parameter.bounds = match args.get(2) {
        Some(range) => range_of(range, &at)?,
        None => (mean - 4.0 * sigma_low, mean + 4.0 * sigma),
    };
    Ok(())
}

/// The product of a column's scalar factors at the parameters' initial values.
fn initial_value(
    factors: &[ScalarFactor],
    parameters: &[Parameter],
    normsys: &[NormsysTerm],
    inputs: &[NormsysInput],
) -> f64 {
    factors
        .iter()
        .map(|f| {
            let init = parameters[f.param as usize].init;
            if f.normsys == ScalarFactor::LINEAR {
                return init;
            }
            let alpha = inputs
                .iter()
                .find(|i| i.param == f.param)
                .map_or(init, |i| i.apply(init).0);
            normsys[f.normsys as usize]
                .factor_and_derivative(NormsysCode::AsymPow, alpha)
                .0
        })
        .product()
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

/// The up and down factors (κ_hi, κ_lo) of an lnN entry: κ and 1/κ, or κ_lo/κ_hi as written.
fn log_normal_kappas(effect: &Effect) -> (f64, f64) {
    match *effect {
        Effect::Symmetric(k) => (k, 1.0 / k),
        Effect::Asymmetric(lo, hi) => (hi, lo),
    }
}

/// The index of `syst` among the card's systematics.
fn s_index(card: &Datacard, syst: &crate::Systematic) -> usize {
    card.systematics
        .iter()
        .position(|s| std::ptr::eq(s, syst))
        .unwrap_or(usize::MAX)
}

/// A column's shape: its yields per bin and their template errors, its histosys terms
/// (parameter, high and low yields per bin), and — where it is morphed — Combine's floor of the
/// morphed template in yields (1e-9 of the template's units), after which it is renormalised
/// where `renormalise` says. `logarithmic` (shapeN): the nominal and histosys values are
/// logarithms of yields (`ns_core::layout::FlooredBlock`).
pub(crate) struct Shaped {
    /// The template's own bins (before the padding of a narrower channel); the floor and the
    /// renormalisation of a morphed template cover these.
    pub active_bins: usize,
    pub nominal: Vec<f64>,
    pub errors: Vec<f64>,
    pub histosys: Vec<(u32, Vec<f64>, Vec<f64>)>,
    pub floor: Option<f64>,
    pub renormalise_to: Option<f64>,
    pub logarithmic: bool,
}

impl Shaped {
    /// The yield of bin `j` at the nominal point (a logarithmic shape's exponentiated, at
    /// least its floor).
    pub fn yield_at(&self, j: usize) -> f64 {
        match self.logarithmic {
            true => self.nominal[j].exp().max(self.floor.unwrap_or(0.0)),
            false => self.nominal[j],
        }
    }
}

/// The columns' shapes from their templates (`None` for a counting column), each shape
/// systematic's normalisation term added to the column's scalar factors.
fn shape_terms(
    card: &Datacard,
    templates: &[Option<Template>],
    parameters: &[Parameter],
    scalars: &mut [Vec<ScalarFactor>],
    normsys: &mut Vec<NormsysTerm>,
    width: usize,
) -> Result<Vec<Option<Shaped>>> {
    let origin = &card.origin;
    let mut shaped = Vec::with_capacity(templates.len());
    for (c, template) in templates.iter().enumerate() {
        let Some(t) = template else {
            shaped.push(None);
            continue;
        };
        let column = &card.columns[c];
        let place = format!(
            "{origin}: process '{}' in channel '{}'",
            column.process, column.bin
        );
        // The sum of the single-precision template, which Combine normalises by, and the
        // integral of the histogram as stored, which its rate of -1 and its checks read.
        let total: f64 = t.nominal.iter().sum();
        let integral = t.integral;
        // With autoMCStats the template is the yield (`CMSHistFunc`); without, it is a density
        // scaled to the rate, with empty bins up to the card's widest template.
        let self_normalised = card.auto_mc_stats.contains_key(&column.bin);
        let padding = if self_normalised {
            0
        } else {
            width.saturating_sub(t.nominal.len())
        };
        let pad = |mut v: Vec<f64>| {
            v.resize(v.len() + padding, 0.0);
            v
        };
        if column.rate == 0.0 || (column.rate < 0.0 && integral == 0.0) {
            // A process without events in this channel (Combine leaves it out).
            shaped.push(Some(Shaped {
                active_bins: t.nominal.len(),
                nominal: vec![0.0; t.nominal.len() + padding],
                errors: vec![0.0; t.nominal.len() + padding],
                histosys: Vec::new(),
                floor: None,
                renormalise_to: None,
                logarithmic: false,
            }));
            continue;
        }
        if column.rate > 0.0
            && integral != 0.0
            && (integral - column.rate).abs() > 0.01 * column.rate.max(1.0)
        {
            return Err(Error::InvalidModel(format!(
                "{place}: its rate {} and its template's integral {integral} differ by more than 1% \
                 (Combine refuses them too: \"Mismatch in normalizations\")",
                column.rate
            )));
        }
        if !(total > 0.0) {
            return Err(Error::InvalidModel(format!(
                "{place}: its nominal template sums to {total}; a template needs a positive \
                 integral"
            )));
        }
        let rate = if column.rate < 0.0 {
            integral
        } else {
            column.rate
        };
        let scale_of = |s: usize| match card.systematics[s].effects[c] {
            Some(Effect::Symmetric(v)) => v,
            _ => 1.0,
        };
        // Combine's smooth region is the process's smallest scale; with one scale it is code4p
        // on the differences scaled by it.
        if let Some((first, rest)) = t.variations.split_first()
            && rest
                .iter()
                .any(|v| scale_of(v.syst) != scale_of(first.syst))
        {
            return Err(Error::InvalidModel(format!(
                "{place}: shape systematics of different scales on one process (Combine's smooth \
                 region then differs from each scale; not built yet)"
            )));
        }
        // shapeN morphs the logarithm (`CMSHistFunc`'s LogQuadLinear); one process morphs one
        // way, as Combine requires.
        let is_log = |s: usize| matches!(&card.systematics[s].kind, Kind::Shape { pdf } if pdf.starts_with("shapeN"));
        let logarithmic = t.variations.first().is_some_and(|v| is_log(v.syst));
        if t.variations.iter().any(|v| is_log(v.syst) != logarithmic) {
            return Err(Error::InvalidModel(format!(
                "{place}: shape and shapeN systematics on one process (Combine allows one \
                 morphing per process)"
            )));
        }
        if logarithmic && !self_normalised {
            return Err(Error::InvalidModel(format!(
                "{place}: shapeN in a channel without autoMCStats \
                 (FastVerticalInterpHistPdf2's logarithmic morphing; not built yet)"
            )));
        }
        let to_rate = if self_normalised { 1.0 } else { rate / total };
        let errors = pad(t.errors.iter().map(|e| e * to_rate).collect());
        // A shapeN template's bins as logarithms: ln h, or −999 where h ≤ 0 (`FastTemplate::Log`).
        let log_nominal: Vec<f64> = t
            .nominal
            .iter()
            .map(|&n| if n > 0.0 { n.ln() } else { -999.0 })
            .collect();
        let mut histosys = Vec::new();
        for variation in &t.variations {
            let syst = &card.systematics[variation.syst];
            let scale = scale_of(variation.syst);
            let param = parameters
                .iter()
                .position(|p| p.name == syst.name)
                .unwrap_or_default() as u32;
            let side = |h: &[f64]| -> Result<Vec<f64>> {
                let sum: f64 = h.iter().sum();
                if !(sum > 0.0) {
                    return Err(Error::InvalidModel(format!(
                        "{place}: a template of '{}' sums to {sum}",
                        syst.name
                    )));
                }
                // Rescaled to the nominal's integral (with autoMCStats by `TH1F::Scale`, so
                // rounded to single precision), the difference scaled, in yields.
                let rescaled = |v: f64| {
                    if self_normalised {
                        (v * (total / sum)) as f32 as f64
                    } else {
                        v * total / sum
                    }
                };
                if logarithmic {
                    // ln h + s·ln(ĥ/h), the ratio's log 0 where either is not positive
                    // (`FastTemplate::LogRatio`).
                    return Ok(h
                        .iter()
                        .zip(&t.nominal)
                        .zip(&log_nominal)
                        .map(|((&v, &n), &ln)| {
                            let v = rescaled(v);
                            let ratio = if v > 0.0 && n > 0.0 {
                                (v / n).ln()
                            } else {
                                0.0
                            };
                            ln + scale * ratio
                        })
                        .collect());
                }
                Ok(pad(h
                    .iter()
                    .zip(&t.nominal)
                    .map(|(&v, n)| to_rate * (n + scale * (rescaled(v) - n)))
                    .collect()))
            };
            histosys.push((param, side(&variation.up)?, side(&variation.down)?));
            let kappa = |sum: f64| shapes::six_decimals((sum / integral).powf(scale));
            let (hi, lo) = (kappa(variation.up_integral), kappa(variation.down_integral));
            if (hi - 1.0).abs() >= 1e-3 || (lo - 1.0).abs() >= 1e-3 {
                scalars[c].push(ScalarFactor {
                    param,
                    normsys: normsys.len() as u32,
                });
                normsys.push(NormsysTerm::new(NormsysCode::AsymPow, hi, lo));
            }
        }
        // The yields (or their logarithms), the floor of the morphed template and the total it
        // is renormalised to after it.
        let (nominal, floor, renormalise_to) = if logarithmic {
            let total = log_nominal.iter().map(|v| v.exp()).sum();
            (log_nominal, Some(TEMPLATE_FLOOR), Some(total))
        } else if histosys.is_empty() && self_normalised {
            let floored = t.nominal.iter().map(|n| n.max(TEMPLATE_FLOOR)).collect();
            (floored, None, None)
        } else if histosys.is_empty() {
            // Combine's template as a density: each bin raised to 1e-9 of the integral, then
            // renormalised (what a morphed template gets at every evaluation).
            let density: Vec<f64> = pad(t.nominal.iter().map(|n| n / total).collect())
                .into_iter()
                .map(|d| d.max(TEMPLATE_FLOOR))
                .collect();
            let sum: f64 = density.iter().sum();
            (density.iter().map(|d| rate * d / sum).collect(), None, None)
        } else if self_normalised {
            (t.nominal.clone(), Some(TEMPLATE_FLOOR), None)
        } else {
            // In a padded channel `FastVerticalInterpHistPdf2` morphs from its nominal raised to
            // the floor (`setActiveBins`, which Combine calls on a channel narrower than its
            // observable, crops it after the morphs were set up), with the differences to the
            // nominal as read: a bin's raise moves its high and low templates alike.
            let floor = TEMPLATE_FLOOR * rate;
            let mut yields = pad(t.nominal.iter().map(|n| n * to_rate).collect());
            let cropped = if padding > 0 { t.nominal.len() } else { 0 };
            for (b, y) in yields.iter_mut().enumerate().take(cropped) {
                let raise = floor - *y;
                if raise > 0.0 {
                    *y = floor;
                    for (_, hi, lo) in &mut histosys {
                        hi[b] += raise;
                        lo[b] += raise;
                    }
                }
            }
            (yields, Some(floor), Some(rate))
        };
        shaped.push(Some(Shaped {
            active_bins: t.nominal.len(),
            nominal,
            errors,
            histosys,
            floor,
            renormalise_to,
            logarithmic,
        }));
    }
    Ok(shaped)
}

/// The compiled model: one channel per card bin, a sample block per column.
#[allow(clippy::too_many_arguments)]
fn assemble(
    card: &Datacard,
    parameters: Vec<Parameter>,
    normsys: Vec<NormsysTerm>,
    scalars: Vec<Vec<ScalarFactor>>,
    entry_factor: Vec<Option<u32>>,
    columns: Vec<Shaped>,
    stats: Vec<StatSpec>,
    observed: Vec<Vec<f64>>,
) -> Result<HistFactoryModel> {
    // The POIs come first: the default model's `r`, or the maps' first.
    let poi = parameters[0].name.clone();
    let n_main = observed.iter().map(Vec::len).sum();
    let mut compiled = CompiledModel {
        n_params: parameters.len(),
        n_main,
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
        floored_blocks: Vec::new(),
        bin_stats: Vec::new(),
        low_side_widths: Vec::new(),
        clip_sample_yields: false,
    };
    // Where each column's entries and each channel's bins start.
    let mut column_entry = vec![0u32; card.columns.len()];
    let mut channel_bin = vec![0u32; card.bins.len()];
    let mut block_samples = Vec::new();
    let mut channels = Vec::with_capacity(card.bins.len());
    let mut bin_start = 0;
    for (channel, (bin, data)) in card.bins.iter().zip(&observed).enumerate() {
        let n_bins = data.len();
        channel_bin[channel] = bin_start as u32;
        for (c, column) in card
            .columns
            .iter()
            .enumerate()
            .filter(|(_, c)| &c.bin == bin)
        {
            let shape = &columns[c];
            if shape.nominal.len() != n_bins {
                return Err(Error::InvalidModel(format!(
                    "{}: process '{}' in channel '{bin}' has {} bins, the channel's data {n_bins}",
                    card.origin,
                    column.process,
                    shape.nominal.len()
                )));
            }
            let scalar_start = compiled.scalar_factors.len() as u32;
            compiled.scalar_factors.extend_from_slice(&scalars[c]);
            let histosys_start = compiled.histosys_param.len() as u32;
            let histosys_delta_start = compiled.histosys_delta.len() as u32;
            compiled
                .histosys_param
                .extend(shape.histosys.iter().map(|h| h.0));
            // Bin-major rows: per bin, (up, down) of each term.
            for (b, nominal) in shape.nominal.iter().enumerate() {
                for (_, hi, lo) in &shape.histosys {
                    compiled
                        .histosys_delta
                        .extend_from_slice(&[hi[b] - nominal, nominal - lo[b]]);
                }
            }
            if let Some(floor) = shape.floor {
                compiled.floored_blocks.push(FlooredBlock {
                    block: compiled.samples.len() as u32,
                    active_bins: shape.active_bins as u32,
                    floor,
                    renormalise_to: shape.renormalise_to,
                    logarithmic: shape.logarithmic,
                });
            }
            column_entry[c] = compiled.nominal.len() as u32;
            compiled.samples.push(SampleBlock {
                bin_start: bin_start as u32,
                n_bins: n_bins as u32,
                entry_start: compiled.nominal.len() as u32,
                scalar_start,
                scalar_end: compiled.scalar_factors.len() as u32,
                histosys_start,
                histosys_end: compiled.histosys_param.len() as u32,
                histosys_delta_start,
            });
            for &value in &shape.nominal {
                compiled.nominal.push(value);
                compiled.entry_factor_param.extend(entry_factor[c]);
                compiled
                    .entry_factor_start
                    .push(compiled.entry_factor_param.len() as u32);
            }
            block_samples.push(column.process.clone());
        }
        channels.push(ChannelInfo {
            name: bin.clone(),
            n_bins,
            bin_start,
        });
        bin_start += n_bins;
    }
    compiled.bin_stats = stats
        .into_iter()
        .map(|spec| match spec {
            StatSpec::Gaussian {
                channel,
                bin,
                param,
                columns,
                analytic,
            } => BinStat::Gaussian {
                bin: channel_bin[channel] + bin as u32,
                param,
                entries: columns
                    .into_iter()
                    .map(|(c, sigma)| (column_entry[c] + bin as u32, sigma))
                    .collect(),
                analytic: analytic.then_some(mcstats::GAUSSIAN_BOUNDS),
            },
            StatSpec::Poisson {
                column,
                bin,
                param,
                count,
            } => BinStat::Poisson {
                entry: column_entry[column] + bin as u32,
                param,
                count,
            },
        })
        .collect();
    let mut sets = Vec::with_capacity(parameters.len());
    for (i, p) in parameters.into_iter().enumerate() {
        let constrained = p.constraint != Constraint::None;
        if constrained {
            let aux_index = compiled.n_aux as u32;
            match p.constraint {
                Constraint::Gaussian => {
                    if let Some(sigma_low) = p.sigma_low {
                        compiled.low_side_widths.push(LowSideWidth {
                            constraint: compiled.gaussian.len() as u32,
                            sigma_low,
                        });
                    }
                    compiled.gaussian.push(GaussianConstraint {
                        param: i as u32,
                        aux_index,
                        sigma: p.sigma,
                    })
                }
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
    let samples = card.processes().iter().map(|p| p.to_string()).collect();
    let mut model = HistFactoryModel::new(
        "datacard".into(),
        channels,
        samples,
        sets,
        poi,
        compiled,
        block_samples,
    );
    model.observations = Ok(observed.into_iter().flatten().collect());
    Ok(model)
}
