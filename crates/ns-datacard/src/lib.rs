//! CMS Combine datacards (the text `combine` and `text2workspace.py` read), without Combine:
//! [`parse`] reads a card as Combine's `DatacardParser` does, [`model`] builds the model with
//! Combine's likelihood (its conventions in docs/combine.md).
//!
//! The header — `imax`/`jmax`/`kmax`, `shapes`, `bin`, `observation`, the two `process` lines and
//! `rate` — ends at the `rate` line; other lines before it are ignored, as Combine ignores them.
//! Every line after it is a systematic (`lnN`, `lnU`, `gmN`, `shape…`, `param`) or a directive
//! (`rateParam`, `extArg`, `autoMCStats`, `group`, `nuisance edit`, `flatParam`, `discrete`).
//! A mistake is an error naming the card, the line and what is wrong.

mod edit;
mod mcstats;
mod model;
mod physics;
mod pyhf;
mod shapes;

use std::collections::BTreeMap;

use ns_core::{Error, Result};
use serde::{Deserialize, Serialize};

pub use model::{model, model_with};
pub use physics::SignalMaps;
pub use pyhf::workspace as pyhf_workspace;
pub use shapes::ShapeFiles;

/// The most columns (bin × process pairs) or lines a card may have: far beyond real analyses,
/// a bound on what a careless or hostile card can allocate.
pub const MAX_COLUMNS: usize = 100_000;

/// One (bin, process) column of the card.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Column {
    pub bin: String,
    pub process: String,
    /// Process id ≤ 0.
    pub signal: bool,
    /// The expected yield, or −1: its template's integral.
    pub rate: f64,
}

/// A systematic's effect on one column.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Effect {
    /// κ (or a shape's scale).
    Symmetric(f64),
    /// κ_lo/κ_hi.
    Asymmetric(f64, f64),
}

/// A systematic line's type.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum Kind {
    LnN,
    LnU,
    /// `trG`: the column's yield times 1 + v·θ, θ Gaussian-constrained within the range that
    /// keeps every such factor of it non-negative (Combine's truncated Gaussian).
    TrG,
    /// `gmN N`: the column's yield is α·θ with a Poisson constraint of N on θ.
    GmN {
        n: u64,
    },
    /// `shape`, `shapeN`, `shape?`, …: template morphing (its spelling kept).
    Shape {
        pdf: String,
    },
    /// `param mean sigma [range]` (sigma `-lo/+hi` for an asymmetric one).
    Param {
        args: Vec<String>,
    },
}

/// A systematic: its name, type, and effect per column (`None`: `-` or no effect).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Systematic {
    pub name: String,
    pub kind: Kind,
    pub effects: Vec<Option<Effect>>,
    /// The card line it came from.
    pub line: usize,
}

/// `name rateParam bin process init [min,max]` or `… (formula) args`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RateParam {
    pub name: String,
    pub bin: String,
    pub process: String,
    /// The initial value, or the formula with its arguments.
    pub value: String,
    pub range_or_args: Option<String>,
    pub line: usize,
}

/// A `shapes process channel file histogram [systematic-histogram]` line.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Shapes {
    pub process: String,
    pub channel: String,
    pub file: String,
    pub histogram: Option<String>,
    pub systematic_histogram: Option<String>,
}

/// A card as its lines say it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Datacard {
    /// Where it came from, for errors.
    pub origin: String,
    pub bins: Vec<String>,
    pub observations: Vec<f64>,
    pub columns: Vec<Column>,
    pub shapes: Vec<Shapes>,
    pub systematics: Vec<Systematic>,
    pub rate_params: Vec<RateParam>,
    /// `name extArg value [min,max]`: value and range text.
    pub ext_args: BTreeMap<String, Vec<String>>,
    /// `channel autoMCStats threshold [include-signal] [hist-mode]`, per channel it names (a
    /// pattern names every channel it matches; a later line replaces an earlier one).
    pub auto_mc_stats: BTreeMap<String, AutoMcStats>,
    pub groups: BTreeMap<String, Vec<String>>,
    /// `nuisance edit freeze …` lines, their words after `edit`, for the model (which knows
    /// every parameter); the other edits change `systematics` where they stand.
    pub edits: Vec<Vec<String>>,
    /// Whether the card has `nuisance edit` lines (kmax then no longer counts its systematics).
    #[serde(default)]
    pub edited: bool,
    pub flat_params: Vec<String>,
}

/// Combine's template statistics of a channel (`autoMCStats`, Barlow–Beeston-lite).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct AutoMcStats {
    /// Bins of at most this many effective events get a parameter per process.
    pub threshold: f64,
    /// Whether signal processes count in the effective events of a bin.
    pub include_signal: bool,
    /// How shape templates are read (1: their normalisation a separate lnN term).
    pub hist_mode: i64,
}

impl Datacard {
    /// The processes in order of first appearance.
    pub fn processes(&self) -> Vec<&str> {
        let mut seen: Vec<&str> = Vec::new();
        for c in &self.columns {
            if !seen.contains(&c.process.as_str()) {
                seen.push(&c.process);
            }
        }
        seen
    }
}

/// Whether `head` (a file's first bytes) looks like a datacard: a line of it starts with
/// `imax`, `jmax` or `kmax`, or it has both a `bin` and an `observation` line (cards may open
/// with free text, which Combine ignores).
pub fn claims_head(head: &[u8]) -> bool {
    let text = String::from_utf8_lossy(head);
    let first_words: Vec<&str> = text
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    first_words
        .iter()
        .any(|w| matches!(*w, "imax" | "jmax" | "kmax"))
        || (first_words.contains(&"bin") && first_words.contains(&"observation"))
}

/// A datacard line's error.
fn at(origin: &str, line: usize, message: impl std::fmt::Display) -> Error {
    Error::InvalidInput(format!("{origin} line {line}: {message}"))
}

fn number(origin: &str, line: usize, word: &str, what: &str) -> Result<f64> {
    word.parse::<f64>()
        .ok()
        .filter(|v| v.is_finite())
        .ok_or_else(|| at(origin, line, format!("{what} '{word}' is not a number")))
}

/// `imax`/`jmax`/`kmax`: a count or `*`.
fn count(origin: &str, line: usize, words: &[&str]) -> Result<Option<usize>> {
    match words.get(1) {
        Some(&"*") => Ok(None),
        Some(w) => w.parse::<usize>().map(Some).map_err(|_| {
            at(
                origin,
                line,
                format!("{} '{w}' is not a count or *", words[0]),
            )
        }),
        None => Err(at(origin, line, format!("{} without a count", words[0]))),
    }
}

/// Read a card's text as Combine's `DatacardParser` reads it; `origin` names it in errors.
pub fn parse(text: &str, origin: &str) -> Result<Datacard> {
    let mut card = Datacard {
        origin: origin.to_string(),
        ..Datacard::default()
    };
    let (mut imax, mut jmax, mut kmax) = (None, None, None);
    let mut bin_line: Vec<String> = Vec::new();
    let mut process_names: Vec<String> = Vec::new();
    let mut process_ids: Vec<String> = Vec::new();
    let mut observations: Option<Vec<f64>> = None;
    let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l));
    let mut rate_seen = false;
    for (n, line) in lines.by_ref() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let Some(&first) = words.first() else {
            continue;
        };
        match first {
            "imax" => imax = count(origin, n, &words)?,
            "jmax" => jmax = count(origin, n, &words)?.map(|j| j + 1),
            "kmax" => kmax = count(origin, n, &words)?,
            "shapes" => {
                if words.len() < 4 {
                    return Err(at(
                        origin,
                        n,
                        "a shapes line is 'shapes PROCESS CHANNEL FILE [HISTOGRAM [SYSTEMATIC]]'",
                    ));
                }
                if card
                    .shapes
                    .iter()
                    .any(|s| s.process == words[1] && s.channel == words[2])
                {
                    return Err(at(
                        origin,
                        n,
                        format!(
                            "a second shapes line for process '{}', channel '{}'",
                            words[1], words[2]
                        ),
                    ));
                }
                card.shapes.push(Shapes {
                    process: words[1].into(),
                    channel: words[2].into(),
                    file: words[3].into(),
                    histogram: words.get(4).map(|s| s.to_string()),
                    systematic_histogram: words.get(5).map(|s| s.to_string()),
                });
            }
            "observation" | "Observation" => {
                let values = words[1..]
                    .iter()
                    .map(|w| number(origin, n, w, "the observation"))
                    .collect::<Result<Vec<_>>>()?;
                if let Some(i) = imax
                    && i != values.len()
                {
                    return Err(at(
                        origin,
                        n,
                        format!("{} observations, but imax declares {i} bins", values.len()),
                    ));
                }
                if !bin_line.is_empty() {
                    if bin_line.len() != values.len() {
                        return Err(at(
                            origin,
                            n,
                            format!(
                                "{} observations for the {} bins of the bin line before it",
                                values.len(),
                                bin_line.len()
                            ),
                        ));
                    }
                    card.bins = std::mem::take(&mut bin_line);
                }
                observations = Some(values);
            }
            "bin" => {
                bin_line = words[1..].iter().map(|w| w.to_string()).collect();
                if let Some(b) = bin_line
                    .iter()
                    .find(|b| b.starts_with(|c: char| c.is_ascii_digit()))
                {
                    return Err(at(
                        origin,
                        n,
                        format!("bin '{b}' starts with a digit, which Combine refuses: rename it"),
                    ));
                }
                if bin_line.len() > MAX_COLUMNS {
                    return Err(at(origin, n, format!("more than {MAX_COLUMNS} columns")));
                }
            }
            "process" if process_names.is_empty() => {
                if words.len() == 1 {
                    return Err(at(origin, n, "a process line without processes"));
                }
                process_names = words[1..].iter().map(|w| w.to_string()).collect();
                if bin_line.len() != process_names.len() {
                    return Err(at(
                        origin,
                        n,
                        format!(
                            "{} processes, but the bin line before it has {} columns",
                            process_names.len(),
                            bin_line.len()
                        ),
                    ));
                }
            }
            "process" => {
                process_ids = words[1..].iter().map(|w| w.to_string()).collect();
                let is_id = |w: Option<&String>| w.is_some_and(|w| w.parse::<i64>().is_ok());
                // The two process lines may come in either order.
                if is_id(process_names.first()) && !is_id(process_ids.first()) {
                    std::mem::swap(&mut process_names, &mut process_ids);
                }
                if process_ids.len() != process_names.len() {
                    return Err(at(
                        origin,
                        n,
                        format!(
                            "{} process ids for {} process names",
                            process_ids.len(),
                            process_names.len()
                        ),
                    ));
                }
            }
            "rate" => {
                if process_names.is_empty() || process_ids.is_empty() {
                    return Err(at(
                        origin,
                        n,
                        "the rate line comes before the two process lines (names and ids)",
                    ));
                }
                if words.len() - 1 != process_names.len() {
                    return Err(at(
                        origin,
                        n,
                        format!(
                            "{} rates for {} columns (bin and process lines)",
                            words.len() - 1,
                            process_names.len()
                        ),
                    ));
                }
                for ((bin, (name, id)), rate) in bin_line
                    .iter()
                    .zip(process_names.iter().zip(&process_ids))
                    .zip(&words[1..])
                {
                    let id: i64 = id.parse().map_err(|_| {
                        at(
                            origin,
                            n,
                            format!("process id '{id}' of '{name}' is not an integer"),
                        )
                    })?;
                    let rate =
                        number(origin, n, rate, &format!("the rate of '{name}' in '{bin}'"))?;
                    // −1: the integral of the process's template.
                    if rate < 0.0 && rate != -1.0 {
                        return Err(at(
                            origin,
                            n,
                            format!(
                                "the rate of '{name}' in '{bin}' is negative ({rate}); a rate is \
                                 an expected yield, or -1 for its template's integral"
                            ),
                        ));
                    }
                    card.columns.push(Column {
                        bin: bin.clone(),
                        process: name.clone(),
                        signal: id <= 0,
                        rate,
                    });
                }
                rate_seen = true;
                break;
            }
            _ => {}
        }
    }
    if !rate_seen {
        return Err(Error::InvalidInput(format!(
            "{origin}: no rate line; a datacard lists its bins, processes and rates (bin, \
             process, process, rate) before its systematics"
        )));
    }
    finish_header(&mut card, observations, imax, jmax, origin)?;
    for (n, line) in lines {
        if card.systematics.len() + card.rate_params.len() > MAX_COLUMNS {
            return Err(at(
                origin,
                n,
                format!("more than {MAX_COLUMNS} systematics"),
            ));
        }
        systematic_line(&mut card, n, line)?;
    }
    card.systematics.retain(|s| {
        !matches!(
            s.kind,
            Kind::LnN | Kind::LnU | Kind::TrG | Kind::Shape { .. } | Kind::GmN { .. }
        ) || s.effects.iter().zip(&card.columns).any(|(e, c)| {
            let null = match e {
                None => true,
                Some(Effect::Symmetric(k)) => s.kind == Kind::LnN && *k == 1.0,
                Some(Effect::Asymmetric(..)) => false,
            };
            !null && c.rate != 0.0
        })
    });
    // Combine counts the systematics left (param lines included) unless an edit changes them.
    if let Some(k) = kmax
        && !card.edited
        && card.systematics.len() != k
    {
        return Err(Error::InvalidInput(format!(
            "{origin}: kmax declares {k} systematics; the card has {} with an effect ({})",
            card.systematics.len(),
            card.systematics
                .iter()
                .map(|s| s.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    Ok(card)
}

/// The bins and observations once the rate line is read, checked against imax and jmax.
fn finish_header(
    card: &mut Datacard,
    observations: Option<Vec<f64>>,
    imax: Option<usize>,
    jmax: Option<usize>,
    origin: &str,
) -> Result<()> {
    for c in &card.columns {
        if !card.bins.contains(&c.bin) {
            if card.bins.len() >= observations.as_ref().map_or(usize::MAX, Vec::len) {
                return Err(Error::InvalidInput(format!(
                    "{origin}: bin '{}' of the process columns is not among the observed bins ({})",
                    c.bin,
                    card.bins.join(", ")
                )));
            }
            card.bins.push(c.bin.clone());
        }
    }
    let observations = observations
        .ok_or_else(|| Error::InvalidInput(format!("{origin}: no observation line")))?;
    if observations.len() != card.bins.len() {
        return Err(Error::InvalidInput(format!(
            "{origin}: {} observations for {} bins ({})",
            observations.len(),
            card.bins.len(),
            card.bins.join(", ")
        )));
    }
    card.observations = observations;
    if let Some(i) = imax
        && i != card.bins.len()
    {
        return Err(Error::InvalidInput(format!(
            "{origin}: imax declares {i} bins; the card has {}",
            card.bins.len()
        )));
    }
    let processes = card.processes().len();
    if let Some(j) = jmax
        && j != processes
    {
        return Err(Error::InvalidInput(format!(
            "{origin}: jmax declares {} backgrounds; the card has {} processes ({})",
            j - 1,
            processes,
            card.processes().join(", ")
        )));
    }
    for p in card.processes() {
        let kinds: Vec<bool> = card
            .columns
            .iter()
            .filter(|c| c.process == p)
            .map(|c| c.signal)
            .collect();
        if kinds.iter().any(|s| *s != kinds[0]) {
            return Err(Error::InvalidInput(format!(
                "{origin}: process '{p}' is a signal in some bin and a background in another"
            )));
        }
    }
    if !card.columns.iter().any(|c| c.signal) {
        return Err(Error::InvalidInput(format!(
            "{origin}: no signal process (a process id ≤ 0)"
        )));
    }
    for (b, observed) in card.bins.iter().zip(&card.observations) {
        // −1: the integral of the data histogram.
        if *observed < 0.0 && *observed != -1.0 {
            return Err(Error::InvalidInput(format!(
                "{origin}: bin '{b}' observes a negative count ({observed}); an observation is \
                 a count, or -1 for the data histogram's integral"
            )));
        }
        if !card.columns.iter().any(|c| &c.bin == b && c.rate != 0.0) {
            return Err(Error::InvalidInput(format!(
                "{origin}: bin '{b}' has no process with a non-zero rate"
            )));
        }
    }
    Ok(())
}

/// One line after the rate line.
fn systematic_line(card: &mut Datacard, n: usize, line: &str) -> Result<()> {
    let origin = card.origin.clone();
    if line.starts_with("--") {
        return Ok(());
    }
    let line = line.split('#').next().unwrap_or("");
    let words: Vec<&str> = line.split_whitespace().collect();
    if words.len() <= 1 {
        return Ok(());
    }
    let mut name = words[0].trim_end_matches("[nofloat]").to_string();
    if name.starts_with(|c: char| c.is_ascii_digit()) {
        name = format!("theta{name}");
    }
    let kind_word = words[1];
    let rest = &words[2..];
    let (kind, numbers) = match kind_word {
        "lnN" => (Kind::LnN, rest),
        "lnU" => (Kind::LnU, rest),
        "trG" => (Kind::TrG, rest),
        "gmN" => {
            let n_events = rest
                .first()
                .and_then(|w| w.parse::<u64>().ok())
                .ok_or_else(|| {
                    at(
                        &origin,
                        n,
                        format!("gmN '{name}' needs its event count N (an integer) first"),
                    )
                })?;
            (Kind::GmN { n: n_events }, &rest[1..])
        }
        pdf if pdf.starts_with("shape") => (Kind::Shape { pdf: pdf.into() }, rest),
        "param" => {
            if rest.len() < 2 {
                return Err(at(
                    &origin,
                    n,
                    format!("param '{name}' needs a mean and a sigma"),
                ));
            }
            card.systematics.push(Systematic {
                name,
                kind: Kind::Param {
                    args: rest.iter().map(|w| w.to_string()).collect(),
                },
                effects: Vec::new(),
                line: n,
            });
            return Ok(());
        }
        "rateParam" => return rate_param(card, n, &name, rest),
        "extArg" => {
            card.ext_args
                .insert(name, rest.iter().map(|w| w.to_string()).collect());
            return Ok(());
        }
        "autoMCStats" => {
            if rest.is_empty() || rest.len() > 3 {
                return Err(at(
                    &origin,
                    n,
                    "autoMCStats is 'CHANNEL autoMCStats THRESHOLD [INCLUDE-SIGNAL] [HIST-MODE]'",
                ));
            }
            let threshold = number(&origin, n, rest[0], "the autoMCStats threshold")?;
            let flag = |i: usize, default: i64, what: &str| -> Result<i64> {
                rest.get(i).map_or(Ok(default), |w| {
                    w.parse::<i64>()
                        .map_err(|_| at(&origin, n, format!("{what} '{w}' is not an integer")))
                })
            };
            let stats = AutoMcStats {
                threshold,
                include_signal: flag(1, 0, "autoMCStats' include-signal")? != 0,
                hist_mode: flag(2, 1, "autoMCStats' hist-mode")?,
            };
            let channels: Vec<String> = if name.contains('*') {
                card.bins
                    .iter()
                    .filter(|b| wildcard(&name, b))
                    .cloned()
                    .collect()
            } else if card.bins.contains(&name) {
                vec![name]
            } else {
                return Err(at(
                    &origin,
                    n,
                    format!(
                        "autoMCStats names channel '{name}', which the card does not have ({})",
                        card.bins.join(", ")
                    ),
                ));
            };
            for channel in channels {
                card.auto_mc_stats.insert(channel, stats);
            }
            return Ok(());
        }
        "group" => {
            let (op, members) = rest
                .split_first()
                .ok_or_else(|| at(&origin, n, format!("group '{name}' is empty")))?;
            let members: Vec<String> = members.iter().map(|w| w.to_string()).collect();
            match (*op, card.groups.get_mut(&name)) {
                ("=", None) => {
                    card.groups.insert(name, members);
                }
                ("+=", Some(group)) => group.extend(members),
                ("=", Some(_)) => {
                    return Err(at(
                        &origin,
                        n,
                        format!("group '{name}' is defined twice (use +=)"),
                    ));
                }
                ("+=", None) => {
                    return Err(at(
                        &origin,
                        n,
                        format!("group '{name}' is extended before it is defined"),
                    ));
                }
                (other, _) => {
                    return Err(at(
                        &origin,
                        n,
                        format!("group '{name}': '=' or '+=' expected, not '{other}'"),
                    ));
                }
            }
            return Ok(());
        }
        "edit" if name == "nuisance" => {
            card.edited = true;
            let words: Vec<String> = rest.iter().map(|w| w.to_string()).collect();
            return edit::apply(card, n, &words);
        }
        "flatParam" => {
            card.flat_params.push(name);
            return Ok(());
        }
        other => {
            return Err(at(
                &origin,
                n,
                format!(
                    "'{name} {other}': '{other}' is not a systematic type Combine reads (lnN, lnU, trG, \
                     gmN, shape, shapeN, shape?, param, rateParam, extArg, autoMCStats, group, \
                     nuisance edit, flatParam)"
                ),
            ));
        }
    };
    if numbers.len() < card.columns.len() {
        return Err(at(
            &origin,
            n,
            format!(
                "'{name}' has {} entries for the card's {} columns",
                numbers.len(),
                card.columns.len()
            ),
        ));
    }
    let mut effects = Vec::with_capacity(card.columns.len());
    for (word, column) in numbers.iter().zip(&card.columns) {
        let here = || format!("'{name}' on '{}' in '{}'", column.process, column.bin);
        if word.chars().all(|c| c == '-') {
            effects.push(None);
            continue;
        }
        let effect = match word.split_once('/') {
            Some((lo, hi)) => {
                if !matches!(kind, Kind::LnN | Kind::LnU) && !kind_word.ends_with('?') {
                    return Err(at(
                        &origin,
                        n,
                        format!("{}: asymmetric values are for lnN and lnU", here()),
                    ));
                }
                let (lo, hi) = (
                    number(&origin, n, lo, &here())?,
                    number(&origin, n, hi, &here())?,
                );
                if lo <= 0.0 || hi <= 0.0 {
                    return Err(at(
                        &origin,
                        n,
                        format!("{}: '{word}' is not positive (a log-normal's κ)", here()),
                    ));
                }
                Effect::Asymmetric(lo, hi)
            }
            None => {
                let v = number(&origin, n, word, &here())?;
                if v < 0.0 && kind != Kind::TrG {
                    return Err(at(&origin, n, format!("{}: '{word}' is negative", here())));
                }
                if v == 0.0 {
                    effects.push(None);
                    continue;
                }
                Effect::Symmetric(v)
            }
        };
        effects.push(Some(effect));
    }
    if let Some(existing) = card.systematics.iter().find(|s| s.name == name) {
        return Err(at(
            &origin,
            n,
            format!(
                "'{name}' is declared twice (also on line {})",
                existing.line
            ),
        ));
    }
    card.systematics.push(Systematic {
        name,
        kind,
        effects,
        line: n,
    });
    Ok(())
}

/// `name rateParam bin process value [range]`, with shell-style wildcards in bin and process.
fn rate_param(card: &mut Datacard, n: usize, name: &str, rest: &[&str]) -> Result<()> {
    let origin = card.origin.clone();
    if rest.len() < 3 || rest.len() > 4 {
        return Err(at(
            &origin,
            n,
            "rateParam is 'NAME rateParam BIN PROCESS VALUE [MIN,MAX]' or 'NAME rateParam BIN \
             PROCESS (FORMULA) ARGS'",
        ));
    }
    let mut matched = false;
    let columns: Vec<(String, String)> = card
        .columns
        .iter()
        .map(|c| (c.bin.clone(), c.process.clone()))
        .collect();
    for (bin, process) in columns {
        if wildcard(rest[0], &bin) && wildcard(rest[1], &process) {
            matched = true;
            card.rate_params.push(RateParam {
                name: name.into(),
                bin,
                process,
                value: rest[2].into(),
                range_or_args: rest.get(3).map(|s| s.to_string()),
                line: n,
            });
        }
    }
    if !matched {
        return Err(at(
            &origin,
            n,
            format!(
                "rateParam '{name}' names bin '{}' and process '{}', which match no column",
                rest[0], rest[1]
            ),
        ));
    }
    Ok(())
}

/// Shell-style matching of `*` and `?` (Combine's `fnmatch`).
fn wildcard(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    // Iterative matching with one backtrack point for the last `*`: linear-ish, no recursion.
    let (mut i, mut j, mut star, mut mark) = (0, 0, None, 0);
    while j < t.len() {
        if i < p.len() && (p[i] == '?' || p[i] == t[j]) {
            i += 1;
            j += 1;
        } else if i < p.len() && p[i] == '*' {
            star = Some(i);
            mark = j;
            i += 1;
        } else if let Some(s) = star {
            i = s + 1;
            mark += 1;
            j = mark;
        } else {
            return false;
        }
    }
    p[i..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards_match_as_fnmatch() {
        assert!(wildcard("*", "SR"));
        assert!(wildcard("C*", "CRA"));
        assert!(wildcard("?RA", "CRA"));
        assert!(!wildcard("C*B", "CRA"));
        assert!(wildcard("bkg*", "bkgA"));
    }
}
