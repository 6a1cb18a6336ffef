//! A card's TH1 templates (`shapes` lines), read with the project's ROOT reader, and what
//! Combine makes of them without autoMCStats (`ShapeTools.py`, `FastVerticalInterpHistPdf2`):
//! a process's yield in bin b is its normalisation times h_b(θ)/Σh⁰, where h(θ) is the nominal
//! template morphed vertically by its `shape` systematics — each Up/Down template first rescaled
//! to the nominal's integral, x = s·θ, the quintic blend inside |x| < a (a the smallest scale of
//! the process's shape systematics) and linear beyond: pyhf's histosys code4p on θ with the
//! differences scaled by s, where every scale of the process is s — and a separate `AsymPow`
//! normalisation κ = (ΣUp/Σnominal)^s, (ΣDown/Σnominal)^s, rounded to six decimals and dropped
//! within 1e-3 of 1, as Combine writes it. A morphed template's bins are raised to 1e-9 and the
//! template renormalised to its nominal integral (`ns_core::layout::FlooredBlock`).
//!
//! In a channel with autoMCStats Combine reads the templates as `CMSHistFunc`s instead: the
//! histogram itself is the yield (the card's rate only has to agree with its integral within
//! 1%), morphed the same way, its bins raised to 1e-9 without renormalisation.

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::PathBuf;

use ns_core::{Error, FileAccess, Result};
use ns_root::RootFile;

use crate::{Datacard, Shapes as ShapesLine};

/// Where a card's ROOT files are read from: the card's folder, under the load's file policy.
pub struct ShapeFiles<'a> {
    access: FileAccess<'a>,
    /// `$MASS` in histogram names (`-m MASS`).
    mass: Option<String>,
    roots: RefCell<HashMap<PathBuf, RootFile>>,
}

impl<'a> ShapeFiles<'a> {
    /// Files as `access` allows (relative paths from the card's folder, its `base`).
    pub fn new(access: FileAccess<'a>, mass: Option<String>) -> Self {
        ShapeFiles {
            access,
            mass,
            roots: RefCell::new(HashMap::new()),
        }
    }

    /// No file: a card with templates is refused.
    pub fn none() -> Self {
        ShapeFiles::new(FileAccess::Denied, None)
    }

    /// `file`, opened once, given to `read`.
    fn with_file<T>(
        &self,
        file: &str,
        place: &str,
        read: impl FnOnce(&RootFile) -> Result<T>,
    ) -> Result<T> {
        let path = self.access.resolve(file)?;
        let mut roots = self.roots.borrow_mut();
        if !roots.contains_key(&path) {
            let root = RootFile::open_named(&path, place)?;
            roots.insert(path.clone(), root);
        }
        read(&roots[&path])
    }

    /// Whether `file` holds an object `name`.
    fn contains(&self, file: &str, name: &str, place: &str) -> Result<bool> {
        self.with_file(file, place, |root| Ok(root.contains(name)))
    }

    /// The in-range bin contents of histogram `name` of `file`.
    fn histogram(&self, file: &str, name: &str, place: &str) -> Result<Vec<f64>> {
        Ok(self.histogram_with_errors(file, name, place)?.0)
    }

    /// The in-range bin contents of histogram `name` of `file`, and their errors (ROOT's
    /// `GetBinError`).
    fn histogram_with_errors(
        &self,
        file: &str,
        name: &str,
        place: &str,
    ) -> Result<(Vec<f64>, Vec<f64>)> {
        let histogram = self.with_file(file, place, |root| root.histogram_named(name, place))?;
        if histogram.axes.len() != 1 {
            return Err(Error::InvalidInput(format!(
                "{place}: '{name}' is a {}-dimensional histogram; templates are TH1s",
                histogram.axes.len()
            )));
        }
        // The contents hold under- and overflow at both ends.
        let n = histogram.contents.len();
        let in_range = |cells: Vec<f64>| {
            cells
                .get(1..n.max(1) - 1)
                .map(<[f64]>::to_vec)
                .ok_or_else(|| Error::InvalidInput(format!("{place}: '{name}' has no bins")))
        };
        let errors = in_range(histogram.errors())?;
        Ok((in_range(histogram.contents)?, errors))
    }

    /// A name pattern with `$PROCESS`, `$CHANNEL`, `$MASS` (and `$SYSTEMATIC`) filled in.
    fn name(&self, pattern: &str, process: &str, channel: &str, place: &str) -> Result<String> {
        let mut name = pattern
            .replace("$PROCESS", process)
            .replace("$CHANNEL", channel);
        if name.contains("$MASS") {
            let mass = self.mass.as_deref().ok_or_else(|| {
                Error::InvalidInput(format!(
                    "{place}: '{pattern}' names $MASS: give the mass (-m MASS, as text2workspace)"
                ))
            })?;
            name = name.replace("$MASS", mass);
        }
        Ok(name)
    }
}

/// The `shapes` line that applies to `process` in `channel`, as Combine looks it up.
fn line_for<'c>(card: &'c Datacard, process: &str, channel: &str) -> Option<&'c ShapesLine> {
    let find = |p: &str, c: &str| {
        card.shapes
            .iter()
            .find(|s| s.process == p && s.channel == c)
    };
    find(process, channel)
        .or_else(|| find("*", channel))
        .or_else(|| find(process, "*"))
        .or_else(|| find("*", "*"))
        .filter(|s| s.file != "FAKE")
}

/// A column's templates as Combine reads them (rounded to single precision), the integrals of
/// the histograms as stored (Combine's rate of `-1` and its shape κ's), the nominal's bin
/// errors, and per shape systematic its Up and Down.
pub(crate) struct Template {
    pub nominal: Vec<f64>,
    pub integral: f64,
    pub errors: Vec<f64>,
    pub variations: Vec<Variation>,
}

/// One shape systematic's templates of a column.
pub(crate) struct Variation {
    /// The systematic's index in the card.
    pub syst: usize,
    pub up: Vec<f64>,
    pub down: Vec<f64>,
    pub up_integral: f64,
    pub down_integral: f64,
}

/// The template of one column, or `None` for a counting column.
pub(crate) fn template(
    card: &Datacard,
    column: usize,
    files: &ShapeFiles,
) -> Result<Option<Template>> {
    let c = &card.columns[column];
    let Some(line) = line_for(card, &c.process, &c.bin) else {
        return Ok(None);
    };
    let place = format!(
        "{}: shapes of process '{}' in channel '{}'",
        card.origin, c.process, c.bin
    );
    let pattern = line.histogram.as_deref().ok_or_else(|| {
        Error::InvalidInput(format!("{place}: the shapes line names no histogram"))
    })?;
    let name = files.name(pattern, &c.process, &c.bin, &place)?;
    let file = files.name(&line.file, &c.process, &c.bin, &place)?;
    let (nominal, errors) = files.histogram_with_errors(&file, &name, &place)?;
    let integral = nominal.iter().sum();
    let nominal = single_precision(nominal);
    let mut variations = Vec::new();
    for (s, syst) in card.systematics.iter().enumerate() {
        let crate::Kind::Shape { pdf } = &syst.kind else {
            continue;
        };
        if syst.effects[column].is_none() {
            continue;
        }
        let pattern = line.systematic_histogram.as_deref().ok_or_else(|| {
            Error::InvalidInput(format!(
                "{place}: '{} {pdf}' needs the shapes line's systematic histogram pattern",
                syst.name
            ))
        })?;
        let base = files.name(pattern, &c.process, &c.bin, &place)?;
        let read = |side: &str| {
            let name = base.replace("$SYSTEMATIC", &format!("{}{side}", syst.name));
            let values = files.histogram(&file, &name, &place)?;
            if values.len() != nominal.len() {
                return Err(Error::InvalidInput(format!(
                    "{place}: '{name}' has {} bins, the nominal '{}' {}",
                    values.len(),
                    pattern,
                    nominal.len()
                )));
            }
            Ok(values)
        };
        // shape?: a process without the templates takes the value as an lnN κ.
        if pdf.ends_with('?') {
            let name = base.replace("$SYSTEMATIC", &format!("{}Up", syst.name));
            if !files.contains(&file, &name, &place)? {
                continue;
            }
        }
        let (up, down) = (read("Up")?, read("Down")?);
        variations.push(Variation {
            syst: s,
            up_integral: up.iter().sum(),
            down_integral: down.iter().sum(),
            up: single_precision(up),
            down: single_precision(down),
        });
    }
    Ok(Some(Template {
        nominal,
        integral,
        errors,
        variations,
    }))
}

/// The observed counts of a channel: its `data_obs` histogram.
pub(crate) fn observed(
    card: &Datacard,
    channel: &str,
    files: &ShapeFiles,
) -> Result<Option<Vec<f64>>> {
    let Some(line) = line_for(card, "data_obs", channel) else {
        return Ok(None);
    };
    let place = format!("{}: the data of channel '{channel}'", card.origin);
    let pattern = line.histogram.as_deref().ok_or_else(|| {
        Error::InvalidInput(format!("{place}: the shapes line names no histogram"))
    })?;
    let name = files.name(pattern, "data_obs", channel, &place)?;
    let file = files.name(&line.file, "data_obs", channel, &place)?;
    files
        .histogram(&file, &name, &place)
        .map(|counts| Some(single_precision(counts)))
}

/// A template's (or the data's) contents as Combine reads them: copied into a TH1F
/// (`ShapeTools.rebinH1`), so rounded to single precision (template errors stay double).
pub(crate) fn single_precision(contents: Vec<f64>) -> Vec<f64> {
    contents.into_iter().map(|v| v as f32 as f64).collect()
}

/// Combine's `"%f"` of a shape normalisation κ: six decimals.
pub(crate) fn six_decimals(kappa: f64) -> f64 {
    format!("{kappa:.6}").parse().unwrap_or(kappa)
}
