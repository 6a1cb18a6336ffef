//! `nuisance edit` lines, applied to the systematics read so far where each line stands, as
//! Combine's `NuisanceModifier` applies them: `add`, `drop`, `rename`, `changepdf`, `merge`,
//! `split` and `flip` change systematic lines; `freeze` is kept for the model, which knows every
//! parameter (rateParams and extArgs too).
//!
//! Process, channel and systematic patterns are regular expressions matched whole, as Combine's
//! `fullmatch` (a `+` in a channel pattern is literal). Where Combine only warns that an edit
//! matched nothing, this is an error unless the line says `ifexists`: an edit that silently does
//! nothing is a typo's way of changing an answer.

use regex::Regex;

use crate::{Datacard, Effect, Kind, Systematic, at};
use ns_core::Result;

/// Longest pattern read: far beyond real cards, a bound on what a hostile card compiles.
const MAX_PATTERN: usize = 1000;
/// The most memory one compiled pattern may take.
const MAX_COMPILED: usize = 1 << 20;

/// Apply `nuisance edit WORDS` of line `n`.
pub(crate) fn apply(card: &mut Datacard, n: usize, words: &[String]) -> Result<()> {
    let origin = card.origin.clone();
    let err = |message: String| at(&origin, n, format!("nuisance edit: {message}"));
    let Some((command, args)) = words.split_first() else {
        return Err(err(
            "a command is missing (add, drop, rename, changepdf, merge, split, \
                        flip or freeze)"
                .into(),
        ));
    };
    let needs = |count: usize, syntax: &str| {
        if args.len() < count {
            Err(err(format!(
                "the syntax is 'nuisance edit {command} {syntax}'"
            )))
        } else {
            Ok(())
        }
    };
    let options = |from: usize| args.get(from..).unwrap_or(&[]);
    match command.as_str() {
        "add" => {
            needs(5, "PROCESS CHANNEL NAME PDF VALUE [addq|overwrite]")?;
            let kind = kind_of(&args[3]).ok_or_else(|| {
                err(format!(
                    "add: pdf '{}' is not one nextstat adds (lnN, lnU, trG)",
                    args[3]
                ))
            })?;
            let value = value_of(&args[4], &kind).map_err(|m| err(format!("add: {m}")))?;
            let targets = Targets::new(card, &args[0], &args[1]).map_err(&err)?;
            add(card, &targets, &args[2], kind, value, options(5), n).map_err(&err)
        }
        "drop" => {
            needs(3, "PROCESS CHANNEL NAME [ifexists]")?;
            let targets = Targets::new(card, &args[0], &args[1]).map_err(&err)?;
            let name = pattern(&args[2]).map_err(&err)?;
            let mut found = false;
            for syst in matching(card, &name) {
                found |= !targets.0.is_empty();
                for c in targets.columns() {
                    if let Some(e) = syst.effects.get_mut(c) {
                        *e = None;
                    }
                }
            }
            nothing_found(found, options(3), &err, || {
                format!("drop {}", args.join(" "))
            })
        }
        "rename" if args.len() == 2 => rename_everywhere(card, &args[0], &args[1]).map_err(&err),
        "rename" => {
            needs(4, "[PROCESS CHANNEL] OLDNAME NEWNAME [ifexists]")?;
            let targets = Targets::new(card, &args[0], &args[1]).map_err(&err)?;
            let moved = take(card, &targets, &regex::escape(&args[2])).map_err(&err)?;
            if moved.is_empty() {
                return nothing_found(false, options(4), &err, || {
                    format!("rename {}", args.join(" "))
                });
            }
            for (kind, entries) in moved {
                let into = target_of(card, &args[3], kind, n).map_err(&err)?;
                for (c, effect) in entries {
                    card.systematics[into].effects[c] = Some(effect);
                }
            }
            Ok(())
        }
        "changepdf" => {
            needs(2, "NAME NEWPDF")?;
            let name = pattern(&args[0]).map_err(&err)?;
            let new = kind_of(&args[1]).ok_or_else(|| {
                err(format!(
                    "changepdf: pdf '{}' is not one nextstat reads",
                    args[1]
                ))
            })?;
            let mut found = false;
            for syst in matching(card, &name) {
                found = true;
                change_pdf(syst, &new).map_err(&err)?;
            }
            nothing_found(found, &[], &err, || format!("changepdf {}", args.join(" ")))
        }
        "merge" => {
            needs(4, "PROCESS CHANNEL NAME1 NAME2 [ifexists]")?;
            let targets = Targets::new(card, &args[0], &args[1]).map_err(&err)?;
            let moved = take(card, &targets, &args[3]).map_err(&err)?;
            let found = !moved.is_empty();
            for (kind, entries) in moved {
                for (c, effect) in entries {
                    let one = Targets::column(c);
                    add(
                        card,
                        &one,
                        &args[2],
                        kind.clone(),
                        null_to_none(effect),
                        &["addq".into()],
                        n,
                    )
                    .map_err(&err)?;
                }
            }
            nothing_found(found, options(4), &err, || {
                format!("merge {}", args.join(" "))
            })
        }
        "split" => {
            needs(
                7,
                "PROCESS CHANNEL OLDNAME NEWNAME1 NEWNAME2 VALUE1 VALUE2 [ifexists]",
            )?;
            let targets = Targets::new(card, &args[0], &args[1]).map_err(&err)?;
            let moved = take(card, &targets, &args[2]).map_err(&err)?;
            let found = !moved.is_empty();
            for (kind, entries) in moved {
                let values = [
                    value_of(&args[5], &kind).map_err(|m| err(format!("split: {m}")))?,
                    value_of(&args[6], &kind).map_err(|m| err(format!("split: {m}")))?,
                ];
                for (c, _) in entries {
                    for (name, value) in args[3..5].iter().zip(values) {
                        let one = Targets::column(c);
                        add(
                            card,
                            &one,
                            name,
                            kind.clone(),
                            value,
                            &["overwrite".into()],
                            n,
                        )
                        .map_err(&err)?;
                    }
                }
            }
            nothing_found(found, options(7), &err, || {
                format!("split {}", args.join(" "))
            })
        }
        "flip" => {
            needs(3, "PROCESS CHANNEL NAME p2n|n2p [ifexists]")?;
            let opts = options(3);
            let (p2n, n2p) = (has(opts, "p2n"), has(opts, "n2p"));
            if !p2n && !n2p {
                return Err(err("flip needs the option p2n or n2p (or both)".into()));
            }
            let targets = Targets::new(card, &args[0], &args[1]).map_err(&err)?;
            let name = pattern(&args[2]).map_err(&err)?;
            let mut found = false;
            for syst in matching(card, &name) {
                if syst.kind != Kind::LnN {
                    return Err(err(format!("flip: '{}' is not an lnN", syst.name)));
                }
                for c in targets.columns() {
                    found = true;
                    let Some(Some(effect)) = syst.effects.get_mut(c) else {
                        continue;
                    };
                    let up = match *effect {
                        Effect::Symmetric(k) => k > 1.0,
                        Effect::Asymmetric(lo, _) => lo < 1.0,
                    };
                    let down = match *effect {
                        Effect::Symmetric(k) => k < 1.0,
                        Effect::Asymmetric(lo, _) => lo > 1.0,
                    };
                    if (up && p2n) || (down && n2p) {
                        *effect = match *effect {
                            Effect::Symmetric(k) => Effect::Symmetric(1.0 / k),
                            Effect::Asymmetric(lo, hi) => Effect::Asymmetric(1.0 / lo, 1.0 / hi),
                        };
                    }
                }
            }
            nothing_found(found, opts, &err, || format!("flip {}", args.join(" ")))
        }
        "freeze" => {
            needs(1, "NAME [ifexists]")?;
            pattern(&args[0]).map_err(&err)?;
            card.edits.push(words.to_vec());
            Ok(())
        }
        other => Err(err(format!(
            "'{other}' is not an edit Combine knows (add, drop, rename, changepdf, merge, split, \
             flip, freeze)"
        ))),
    }
}

/// A pattern matched whole, as Combine's `fullmatch`.
pub(crate) fn pattern(text: &str) -> std::result::Result<Regex, String> {
    compiled(text, "$")
}

/// `text` as a regular expression anchored at the start (and at the end by `end`); its length
/// and its compiled size bounded, so a hostile card or request cannot take memory out of
/// proportion.
pub(crate) fn compiled(text: &str, end: &str) -> std::result::Result<Regex, String> {
    if text.len() > MAX_PATTERN {
        return Err(format!(
            "a pattern of {} characters (at most {MAX_PATTERN})",
            text.len()
        ));
    }
    regex::RegexBuilder::new(&format!("^(?:{text}){end}"))
        .size_limit(MAX_COMPILED)
        .build()
        .map_err(|e| format!("'{text}' is not a pattern: {e}"))
}

/// The systematics whose names `name` matches whole.
fn matching<'c>(
    card: &'c mut Datacard,
    name: &'c Regex,
) -> impl Iterator<Item = &'c mut Systematic> {
    card.systematics
        .iter_mut()
        .filter(move |s| name.is_match(&s.name))
}

fn has(options: &[String], option: &str) -> bool {
    options.iter().any(|o| o == option)
}

/// Ok where an edit found something or says `ifexists`; otherwise an error naming the edit.
fn nothing_found(
    found: bool,
    options: &[String],
    err: &impl Fn(String) -> ns_core::Error,
    what: impl Fn() -> String,
) -> Result<()> {
    if found || has(options, "ifexists") {
        Ok(())
    } else {
        Err(err(format!(
            "'{}' matches nothing (add 'ifexists' if that is meant)",
            what()
        )))
    }
}

/// The kinds an edit can give a systematic, by Combine's name.
fn kind_of(pdf: &str) -> Option<Kind> {
    match pdf {
        "lnN" => Some(Kind::LnN),
        "lnU" => Some(Kind::LnU),
        "trG" => Some(Kind::TrG),
        p if p.starts_with("shape") => Some(Kind::Shape { pdf: p.into() }),
        _ => None,
    }
}

/// An edit's VALUE: κ or κlo/κhi for lnN and lnU, v for trG, a scale for shapes.
fn value_of(text: &str, kind: &Kind) -> std::result::Result<Option<Effect>, String> {
    let read = |w: &str| {
        w.parse::<f64>()
            .ok()
            .filter(|v| v.is_finite())
            .ok_or_else(|| format!("value '{text}' is not a number"))
    };
    let effect = match text.split_once('/') {
        Some((lo, hi)) if matches!(kind, Kind::LnN | Kind::LnU) => {
            let (lo, hi) = (read(lo)?, read(hi)?);
            if lo <= 0.0 || hi <= 0.0 {
                return Err(format!("value '{text}' is not positive (a log-normal's κ)"));
            }
            Effect::Asymmetric(lo, hi)
        }
        Some(_) => {
            return Err(format!(
                "value '{text}': asymmetric values are for lnN and lnU"
            ));
        }
        None => {
            let v = read(text)?;
            if v < 0.0 && *kind != Kind::TrG {
                return Err(format!("value '{text}' is negative"));
            }
            Effect::Symmetric(v)
        }
    };
    Ok(null_to_none(effect))
}

/// Combine's "nothing": a value of 0, or 1 (an lnN's κ of 1 and, as Combine tests, any 1).
fn null_to_none(effect: Effect) -> Option<Effect> {
    match effect {
        Effect::Symmetric(v) if v == 0.0 || v == 1.0 => None,
        e => Some(e),
    }
}

/// The columns an edit's PROCESS and CHANNEL patterns select (`*`: every one).
struct Targets(Vec<usize>);

impl Targets {
    fn new(card: &Datacard, process: &str, channel: &str) -> std::result::Result<Self, String> {
        let process = (process != "*").then(|| pattern(process)).transpose()?;
        let channel = (channel != "*")
            .then(|| pattern(&channel.replace('+', r"\+")))
            .transpose()?;
        let columns = card
            .columns
            .iter()
            .enumerate()
            .filter(|(_, c)| {
                process.as_ref().is_none_or(|p| p.is_match(&c.process))
                    && channel.as_ref().is_none_or(|b| b.is_match(&c.bin))
            })
            .map(|(i, _)| i)
            .collect();
        Ok(Targets(columns))
    }

    fn column(c: usize) -> Self {
        Targets(vec![c])
    }

    fn columns(&self) -> impl Iterator<Item = usize> + '_ {
        self.0.iter().copied()
    }
}

/// Combine's `doAddNuisance`: `value` on the selected columns of systematic `name` (created
/// with `kind` where there is none); an existing value is refused unless `addq` (added in
/// quadrature) or `overwrite`.
fn add(
    card: &mut Datacard,
    targets: &Targets,
    name: &str,
    kind: Kind,
    value: Option<Effect>,
    options: &[String],
    line: usize,
) -> std::result::Result<(), String> {
    if targets.0.is_empty() && !has(options, "ifexists") {
        return Err(format!(
            "add: no column of the card matches the process and channel given for '{name}' (add \
             'ifexists' if that is meant)"
        ));
    }
    let into = target_of(card, name, kind, line)?;
    let Some(value) = value else { return Ok(()) };
    let syst = &mut card.systematics[into];
    for c in targets.columns() {
        let slot = &mut syst.effects[c];
        *slot = Some(match *slot {
            None => value,
            Some(old) if has(options, "addq") => quadrature(&syst.kind, old, value)?,
            Some(_) if has(options, "overwrite") => value,
            Some(old) => {
                return Err(format!(
                    "add: '{name}' already has {old:?} on column {} ('{}' in '{}'); say addq or \
                     overwrite",
                    c + 1,
                    card.columns[c].process,
                    card.columns[c].bin
                ));
            }
        });
    }
    Ok(())
}

/// The index of systematic `name`, of `kind`; created with no effect where there is none.
fn target_of(
    card: &mut Datacard,
    name: &str,
    kind: Kind,
    line: usize,
) -> std::result::Result<usize, String> {
    if let Some(i) = card.systematics.iter().position(|s| s.name == name) {
        let existing = &card.systematics[i].kind;
        if *existing != kind {
            return Err(format!(
                "'{name}' exists as {existing:?}; it cannot also be {kind:?}"
            ));
        }
        return Ok(i);
    }
    card.systematics.push(Systematic {
        name: name.into(),
        kind,
        effects: vec![None; card.columns.len()],
        line,
    });
    Ok(card.systematics.len() - 1)
}

/// Take the effects of systematics named by the pattern `name` off the selected columns, per
/// kind: what `rename`, `merge` and `split` move elsewhere.
type Moved = Vec<(Kind, Vec<(usize, Effect)>)>;

fn take(card: &mut Datacard, targets: &Targets, name: &str) -> std::result::Result<Moved, String> {
    let name = pattern(name)?;
    let mut moved: Moved = Vec::new();
    for syst in matching(card, &name) {
        if matches!(syst.kind, Kind::Param { .. } | Kind::GmN { .. } | Kind::TrG) {
            return Err(format!(
                "'{}' is a {:?}: Combine edits only lnN, lnU and shape lines this way (rename \
                 its line instead)",
                syst.name, syst.kind
            ));
        }
        let entries: Vec<(usize, Effect)> = targets
            .columns()
            .filter_map(|c| syst.effects[c].take().map(|e| (c, e)))
            .collect();
        if !entries.is_empty() {
            match moved.iter_mut().find(|(k, _)| *k == syst.kind) {
                Some((_, list)) => list.extend(entries),
                None => moved.push((syst.kind.clone(), entries)),
            }
        }
    }
    Ok(moved)
}

/// `rename OLD NEW`: the systematic takes the new name; where NEW exists with the same lnN or
/// lnU kind, both act on one parameter, so their κ multiply per column.
fn rename_everywhere(card: &mut Datacard, old: &str, new: &str) -> std::result::Result<(), String> {
    let from = card
        .systematics
        .iter()
        .position(|s| s.name == old)
        .ok_or_else(|| format!("rename: no systematic is named '{old}'"))?;
    let kind = card.systematics[from].kind.clone();
    if matches!(kind, Kind::Param { .. } | Kind::GmN { .. } | Kind::TrG) {
        return Err(format!(
            "rename: '{old}' is a {kind:?}; Combine renames only lnN, lnU and shape \
             systematics (rename its line instead)"
        ));
    }
    let Some(into) = card.systematics.iter().position(|s| s.name == new) else {
        card.systematics[from].name = new.into();
        return Ok(());
    };
    if card.systematics[into].kind != kind || !matches!(kind, Kind::LnN | Kind::LnU) {
        return Err(format!(
            "rename: '{new}' exists as {:?}, which '{old}' ({kind:?}) cannot join",
            card.systematics[into].kind
        ));
    }
    let source = card.systematics.remove(from);
    let into = if into > from { into - 1 } else { into };
    for (slot, effect) in card.systematics[into]
        .effects
        .iter_mut()
        .zip(source.effects)
    {
        *slot = match (*slot, effect) {
            (a, None) => a,
            (None, b) => b,
            (Some(a), Some(b)) => Some(product(a, b)),
        };
    }
    Ok(())
}

/// Two log-normal factors on one parameter: κ per side multiplied.
fn product(a: Effect, b: Effect) -> Effect {
    let sides = |e: Effect| match e {
        Effect::Symmetric(k) => (1.0 / k, k),
        Effect::Asymmetric(lo, hi) => (lo, hi),
    };
    match (a, b) {
        (Effect::Symmetric(x), Effect::Symmetric(y)) => Effect::Symmetric(x * y),
        _ => {
            let ((lo_a, hi_a), (lo_b, hi_b)) = (sides(a), sides(b));
            Effect::Asymmetric(lo_a * lo_b, hi_a * hi_b)
        }
    }
}

/// Combine's `quadratureAdd` of two lnN/lnU values.
fn quadrature(kind: &Kind, a: Effect, b: Effect) -> std::result::Result<Effect, String> {
    if !matches!(kind, Kind::LnN | Kind::LnU) {
        return Err(format!(
            "addq adds lnN and lnU values in quadrature, not {kind:?}"
        ));
    }
    let one = |x: f64, y: f64| {
        if x.ln() * y.ln() < 0.0 {
            return Err(format!(
                "addq: κ {x} and {y} go in different directions; they cannot be added in \
                 quadrature"
            ));
        }
        let k = x.ln().hypot(y.ln()).exp();
        Ok(if x > 1.0 { k } else { 1.0 / k })
    };
    Ok(match (a, b) {
        (Effect::Symmetric(x), Effect::Symmetric(y)) => Effect::Symmetric(one(x, y)?),
        (Effect::Asymmetric(lo, hi), Effect::Symmetric(y)) => {
            Effect::Asymmetric(one(lo, 1.0 / y)?, one(hi, y)?)
        }
        (Effect::Symmetric(x), Effect::Asymmetric(lo, hi)) => {
            Effect::Asymmetric(one(1.0 / x, lo)?, one(x, hi)?)
        }
        (Effect::Asymmetric(lo1, hi1), Effect::Asymmetric(lo2, hi2)) => {
            Effect::Asymmetric(one(lo1, lo2)?, one(hi1, hi2)?)
        }
    })
}

/// Combine's `doChangeNuisancePdf`: lnN ↔ lnU keep their values; lnN/lnU → trG takes ln κ
/// and trG → lnN/lnU takes e^v; shapes change among shape pdfs.
fn change_pdf(syst: &mut Systematic, new: &Kind) -> std::result::Result<(), String> {
    if syst.kind == *new {
        return Ok(());
    }
    let log_normal = |k: &Kind| matches!(k, Kind::LnN | Kind::LnU);
    let map: Option<fn(f64) -> f64> = match (&syst.kind, new) {
        (a, b) if log_normal(a) && log_normal(b) => None,
        (a, Kind::TrG) if log_normal(a) => Some(f64::ln),
        (Kind::TrG, b) if log_normal(b) => Some(f64::exp),
        (Kind::Shape { .. }, Kind::Shape { .. }) => None,
        (old, _) => {
            return Err(format!(
                "changepdf: '{}' cannot change from {old:?} to {new:?}",
                syst.name
            ));
        }
    };
    if let Some(map) = map {
        for effect in syst.effects.iter_mut() {
            *effect = match *effect {
                None => None,
                // Combine maps a value of 0 or 1 to nothing in both directions (so a trG of
                // exactly 1 is dropped by a change to lnN, as there).
                Some(Effect::Symmetric(v)) => {
                    null_to_none(Effect::Symmetric(map(v))).filter(|_| v != 0.0 && v != 1.0)
                }
                Some(Effect::Asymmetric(..)) => {
                    return Err(format!(
                        "changepdf: '{}' has an asymmetric value, which {new:?} cannot take",
                        syst.name
                    ));
                }
            };
        }
    }
    syst.kind = new.clone();
    Ok(())
}
