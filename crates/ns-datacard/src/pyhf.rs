//! A card as a pyhf workspace (`nextstat datacard2json`), where pyhf's terms give Combine's
//! likelihood exactly; every other term is refused by name, never written as another model.
//!
//! | card | pyhf |
//! |---|---|
//! | signal processes | normfactor `r` (start 1 in [0, 20], the measurement's POI), or the POIs of multiSignalModel's maps |
//! | symmetric `lnN κ` | normsys hi = κ, lo = 1/κ, θ in [−7, 7]: κ^θ under normsys code1 (`AsymPow` of a symmetric κ) |
//! | `gmN N α` on one process | the process's yield α·N with a shapesys of width α√N: γ Poisson-constrained by τ = N, the yield α·N·γ |
//! | `rateParam` with a range | a normfactor of that start and range, shared by name |
//! | TH1 templates without shape systematics | the yields Combine reads (the density raised to 1e-9 and renormalised; a narrower channel padded as Combine pads it) |
//! | `nuisance edit freeze` | the parameter fixed in the measurement |
//!
//! pyhf keeps interpolation codes out of the workspace: the lnN factors are exact under normsys
//! code1, which the caller chooses when building the model (`InterpCodes` here, pyhf's
//! `modifier_settings`).

use serde_json::{Value, json};

use crate::physics::{Scale, SignalMaps};
use crate::{Datacard, Effect, Kind, ShapeFiles};
use ns_core::{Error, Result};

/// The workspace of `card`: channels, samples, observations and one measurement named after the
/// POI; an error names the first term pyhf cannot express exactly.
pub fn workspace(card: &Datacard, files: &ShapeFiles, maps: &SignalMaps) -> Result<Value> {
    refuse_inexact(card)?;
    let model = crate::model_with(card, files, maps)?;
    let m = &model.compiled;
    let observed = model
        .observations
        .clone()
        .map_err(|e| Error::InvalidModel(format!("{}: {e}", card.origin)))?;
    let mut named: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
    let mut channels = Vec::new();
    let mut observations = Vec::new();
    for channel in &model.channels {
        let mut samples = Vec::new();
        for (k, block) in m.samples.iter().enumerate() {
            if block.bin_start as usize != channel.bin_start {
                continue;
            }
            let process = &model.block_samples[k];
            let c = card
                .columns
                .iter()
                .position(|c| c.bin == channel.name && &c.process == process)
                .ok_or_else(|| {
                    Error::Computation(format!("no column for '{process}' in '{}'", channel.name))
                })?;
            let entries = block.entry_start as usize..(block.entry_start + block.n_bins) as usize;
            let mut data: Vec<f64> = m.nominal[entries].to_vec();
            if data.iter().all(|&v| v == 0.0) {
                continue;
            }
            let mut modifiers = Vec::new();
            let scale = match maps.is_default() {
                true if card.columns[c].signal => Scale::Poi(crate::model::POI.into()),
                true => Scale::Constant(1.0),
                false => maps.scale(&channel.name, process),
            };
            if let Scale::Poi(poi) = scale {
                modifiers.push(json!({"name": poi, "type": "normfactor", "data": null}));
            }
            for syst in &card.systematics {
                match (&syst.kind, syst.effects.get(c).copied().flatten()) {
                    (Kind::LnN, Some(Effect::Symmetric(kappa))) => modifiers.push(json!({
                        "name": syst.name, "type": "normsys",
                        "data": {"hi": kappa, "lo": 1.0 / kappa},
                    })),
                    (Kind::GmN { n }, Some(Effect::Symmetric(_))) => {
                        let n = *n as f64;
                        data.iter_mut().for_each(|v| *v *= n);
                        let widths: Vec<f64> = data.iter().map(|v| v / n.sqrt()).collect();
                        modifiers
                            .push(json!({"name": syst.name, "type": "shapesys", "data": widths}));
                    }
                    _ => {}
                }
            }
            for rp in card.rate_params.iter().filter(|r| {
                crate::wildcard(&r.bin, &channel.name) && crate::wildcard(&r.process, process)
            }) {
                modifiers.push(json!({"name": rp.name, "type": "normfactor", "data": null}));
            }
            named.extend(
                modifiers
                    .iter()
                    .filter_map(|m| m["name"].as_str().map(String::from)),
            );
            samples.push(json!({"name": process, "data": data, "modifiers": modifiers}));
        }
        let bins = channel.bin_start..channel.bin_start + channel.n_bins;
        channels.push(json!({"name": channel.name, "samples": samples}));
        observations.push(json!({"name": channel.name, "data": observed[bins].to_vec()}));
    }
    // Every parameter's start, range and fixing, as the card's model has them (gmN's γ = θ/N).
    let mut parameters = Vec::new();
    for set in model
        .parameter_sets
        .iter()
        .filter(|s| named.contains(&s.name))
    {
        let scale = match card.systematics.iter().find(|s| s.name == set.name) {
            Some(crate::Systematic {
                kind: Kind::GmN { n },
                ..
            }) => *n as f64,
            _ => 1.0,
        };
        let (low, high) = set.bounds[0];
        let mut entry = json!({
            "name": set.name,
            "inits": [set.inits[0] / scale],
            "bounds": [[low / scale, high / scale]],
        });
        if set.fixed[0] {
            entry["fixed"] = json!(true);
        }
        parameters.push(entry);
    }
    Ok(json!({
        "channels": channels,
        "observations": observations,
        "measurements": [{
            "name": "combine",
            "config": {"poi": model.poi_name, "parameters": parameters},
        }],
        "version": "1.0.0",
    }))
}

/// The first term of `card` that pyhf cannot express exactly, as an error naming it.
fn refuse_inexact(card: &Datacard) -> Result<()> {
    let refuse = |what: String| {
        Err(Error::InvalidModel(format!(
            "{}: {what}; it has no exact pyhf form, so the card is not written as pyhf JSON \
             (every verb reads the card itself)",
            card.origin
        )))
    };
    for syst in &card.systematics {
        let at = format!("line {}: '{}'", syst.line, syst.name);
        match &syst.kind {
            Kind::LnN => {
                if syst
                    .effects
                    .iter()
                    .flatten()
                    .any(|e| matches!(e, Effect::Asymmetric(..)))
                {
                    return refuse(format!(
                        "{at} is an asymmetric lnN (Combine's AsymPow blends its two sides \
                         inside |θ| < 0.5, which no pyhf normsys code does)"
                    ));
                }
            }
            Kind::GmN { n } => {
                let columns = syst.effects.iter().flatten().count();
                if *n == 0 || columns > 1 {
                    return refuse(format!(
                        "{at} is a gmN with N = {n} on {columns} processes (pyhf's shapesys \
                         takes N > 0 events of one process)"
                    ));
                }
            }
            Kind::LnU => return refuse(format!("{at} is an lnU (pyhf has no flat constraint)")),
            Kind::TrG => return refuse(format!("{at} is a trG (an affine factor)")),
            Kind::Shape { pdf } => {
                return refuse(format!(
                    "{at} is a {pdf} systematic (Combine morphs a renormalised density with a \
                     floor and a separate AsymPow normalisation; pyhf's histosys does neither)"
                ));
            }
            Kind::Param { .. } => {
                return refuse(format!(
                    "{at} is a param constraint (pyhf constrains no normfactor)"
                ));
            }
        }
    }
    if let Some(rp) = card.rate_params.iter().find(|r| r.value.starts_with('(')) {
        return refuse(format!(
            "line {}: rateParam '{}' is a formula",
            rp.line, rp.name
        ));
    }
    if let Some(rp) = card.rate_params.iter().find(|r| r.range_or_args.is_none()) {
        return refuse(format!(
            "line {}: rateParam '{}' has no range (pyhf's normfactors are bounded: give it \
             [MIN,MAX])",
            rp.line, rp.name
        ));
    }
    if let Some(channel) = card.auto_mc_stats.keys().next() {
        return refuse(format!(
            "autoMCStats on '{channel}' (Combine's per-bin Barlow–Beeston terms scale with each \
             process's normalisation; pyhf's staterror does not)"
        ));
    }
    Ok(())
}
