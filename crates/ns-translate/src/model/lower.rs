//! Lowering a built model into the flat [`CompiledModel`] layout the evaluators read: sample
//! blocks, per-entry factors, normsys/histosys terms and constraints, with staterror's
//! per-channel parameter sets resolved to global bins.

use super::*;
use root::StatErrorConfig;

/// A staterror parameter set: which global bins it covers and its per-bin relative widths.
pub(super) struct StatErrorSet {
    /// Per covered channel (index), where its bins start among the set's parameters (the set's
    /// parameter i belongs to the i-th covered bin, channels in order).
    channel_offset: HashMap<usize, usize>,
    pub(super) requirement: Requirement,
}

pub(super) struct StatErrorSets {
    pub(super) sets: BTreeMap<String, StatErrorSet>,
}

impl StatErrorSets {
    /// pyhf's staterror builder: σ_b = √(Σ δ²) / Σ ν over the samples carrying it; a zero σ is
    /// fixed (with σ set to 1). Every carrying sample must cover the same bins.
    /// With ROOT's semantics (`root`) each set follows its channel's StatErrorConfig.
    pub(super) fn collect(
        placed: &[PlacedSample],
        channels: &[ChannelInfo],
        root: Option<&RootSemantics>,
    ) -> Result<Self> {
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
            let deltas: Vec<f64> = rel_sq.iter().map(|r| r.sqrt()).collect();
            let requirement = staterror_requirement(&deltas, root.map(|r| r.staterror(name)));
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

/// A staterror set's requirement from its bins' relative widths δ: pyhf's Gaussian (σ = δ; a
/// zero δ fixed, with σ set to 1), or with ROOT's semantics (`root`: the channel's
/// StatErrorConfig) a Gaussian or a Poisson (τ = 1/δ²) whose bins below the threshold are
/// constant, every γ ranging over [0, 1 + 5δ].
fn staterror_requirement(deltas: &[f64], root: Option<StatErrorConfig>) -> Requirement {
    let n = deltas.len();
    let or_one = |x: f64, ok: bool| if ok { x } else { 1.0 };
    let Some(config) = root else {
        return Requirement {
            auxdata: Some(vec![1.0; n]),
            sigmas: Some(deltas.iter().map(|&d| or_one(d, d != 0.0)).collect()),
            fixed: deltas.iter().map(|&d| d == 0.0).collect(),
            ..Requirement::new("staterror", n)
        };
    };
    let fixed: Vec<bool> = deltas
        .iter()
        .map(|&d| d == 0.0 || d < config.threshold)
        .collect();
    let bounds = Some(deltas.iter().map(|&d| root::gamma_bounds(d)).collect());
    match config.constraint {
        ConstraintType::Gaussian => Requirement {
            auxdata: Some(vec![1.0; n]),
            sigmas: Some(deltas.iter().map(|&d| or_one(d, d != 0.0)).collect()),
            fixed,
            bounds,
            ..Requirement::new("staterror", n)
        },
        ConstraintType::Poisson => {
            let factors: Vec<f64> = deltas
                .iter()
                .map(|&d| or_one(1.0 / (d * d), d != 0.0))
                .collect();
            Requirement {
                constraint: Constraint::Poisson,
                auxdata: Some(factors.clone()),
                factors: Some(factors),
                sigmas: None,
                fixed,
                bounds,
                uses: [true, false, true],
                ..Requirement::new("staterror", n)
            }
        }
    }
}

/// Lower the placed samples into the flat layout.
pub(super) fn lower(
    placed: &[PlacedSample],
    channels: &[ChannelInfo],
    sets: &[ParameterSet],
    staterror: &StatErrorSets,
    codes: InterpCodes,
    root: bool,
    clip_negative_yields: bool,
) -> Result<CompiledModel> {
    let n_main = channels.iter().map(|c| c.n_bins).sum();
    let n_params = sets.iter().map(|s| s.n_parameters).sum();
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
        gaussian_ranges: vec![],
        normsys_inputs: vec![],
        poisson_ranges: vec![],
        floored_blocks: vec![],
        bin_stats: vec![],
        low_side_widths: vec![],
        clip_sample_yields: root || clip_negative_yields,
    };
    for p in placed {
        lower_sample(&mut model, p, &channels[p.channel], &offset_of, staterror)?;
    }
    add_constraints(&mut model, sets)?;

    Ok(model)
}

/// An index as the layout's u32.
fn to_u32(x: usize) -> Result<u32> {
    u32::try_from(x).map_err(|_| Error::InvalidModel("model too large for 32-bit indices".into()))
}

/// Append one placed sample's block: nominal yields, scalar factors (normfactor, lumi, normsys),
/// histosys terms and per-bin factors (shapefactor, shapesys, staterror).
fn lower_sample(
    model: &mut CompiledModel,
    p: &PlacedSample,
    channel: &ChannelInfo,
    offset_of: &HashMap<&str, &ParameterSet>,
    staterror: &StatErrorSets,
) -> Result<()> {
    let nominal = f64s(&p.sample.data);
    let n_bins = nominal.len();
    let entry_start = model.nominal.len();
    let (scalar_start, histosys_start) = (model.scalar_factors.len(), model.histosys_param.len());
    let histosys_delta_start = model.histosys_delta.len();
    let mut terms = BlockTerms {
        histosys: vec![],
        entry_params: vec![vec![]; n_bins],
    };
    for m in &p.modifiers {
        let set = offset_of.get(m.name.as_str()).copied().ok_or_else(|| {
            Error::InvalidModel(format!(
                "internal: modifier '{}' has no parameter set",
                m.name
            ))
        })?;
        add_modifier(
            model,
            &mut terms,
            Place {
                sample: p,
                channel,
                modifier: m,
                set,
            },
            &nominal,
            staterror,
        )?;
    }
    for i in 0..n_bins {
        for (up, down) in &terms.histosys {
            model.histosys_delta.push(up[i]);
            model.histosys_delta.push(down[i]);
        }
    }
    if model.clip_sample_yields && terms.histosys.is_empty() {
        // Without histosys terms a sample's yield is its nominal one, clipped once here.
        model.nominal.extend(nominal.iter().map(|&v| v.max(0.0)));
    } else {
        model.nominal.extend_from_slice(&nominal);
    }
    for list in terms.entry_params {
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
    Ok(())
}

/// What a sample block collects besides scalar factors: (up, down) per histosys term,
/// term-major (written bin-major afterwards), and the per-bin factor parameters of each bin.
struct BlockTerms {
    histosys: Vec<(Vec<f64>, Vec<f64>)>,
    entry_params: Vec<Vec<u32>>,
}

/// Where a modifier sits: its sample, channel and parameter set.
struct Place<'a, 'w> {
    sample: &'a PlacedSample<'w>,
    channel: &'a ChannelInfo,
    modifier: &'w Modifier,
    set: &'a ParameterSet,
}

/// Lower one modifier of a sample block.
fn add_modifier(
    model: &mut CompiledModel,
    terms: &mut BlockTerms,
    place: Place,
    nominal: &[f64],
    staterror: &StatErrorSets,
) -> Result<()> {
    let Place {
        sample: p,
        channel,
        modifier: m,
        set,
    } = place;
    let (param, n_bins, codes) = (set.offset, nominal.len(), model.codes);
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
            terms.histosys.push((up, down));
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
            for (j, list) in terms.entry_params.iter_mut().enumerate() {
                list.push(to_u32(param + j)?);
            }
        }
        ModifierKind::StatError(_) => {
            let offset = staterror
                .sets
                .get(m.name.as_str())
                .and_then(|set| set.channel_offset.get(&p.channel))
                .ok_or_else(|| {
                    Error::InvalidModel(format!("internal: {} does not cover its channel", at()))
                })?;
            for (j, list) in terms.entry_params.iter_mut().enumerate() {
                list.push(to_u32(param + offset + j)?);
            }
        }
    }
    Ok(())
}

/// The Gaussian and Poisson constraint terms, auxdata in parameter order.
fn add_constraints(model: &mut CompiledModel, sets: &[ParameterSet]) -> Result<()> {
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
    Ok(())
}
