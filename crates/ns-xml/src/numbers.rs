//! Histogram values as pyhf reads them through uproot: integer histograms give integers, float
//! histograms their values widened to f64, and errors √sumw2 where sums of squared weights are
//! kept, else √content in the histogram's own precision (numpy's square root of a float32 or
//! int16 array is float32).

use ns_core::{Error, Result};
use ns_root::Histogram;
use serde_json::Value;

use crate::Semantics;
use crate::files::Files;

/// One number as pyhf's JSON holds it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Num {
    Int(i64),
    Float(f64),
}

impl Num {
    fn as_f64(self) -> f64 {
        match self {
            Num::Int(i) => i as f64,
            Num::Float(f) => f,
        }
    }
}

impl serde::Serialize for Num {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match self {
            Num::Int(i) => s.serialize_i64(*i),
            Num::Float(f) => s.serialize_f64(*f),
        }
    }
}

/// The numbers as a JSON array.
pub(crate) fn array(numbers: Vec<Num>) -> Value {
    Value::Array(numbers.into_iter().map(Value::from).collect())
}

/// The numbers as f64.
pub(crate) fn floats(numbers: &[Num]) -> Vec<f64> {
    numbers.iter().map(|n| n.as_f64()).collect()
}

/// The in-range values and errors of one histogram.
pub(crate) struct Values {
    pub(crate) values: Vec<Num>,
    pub(crate) errors: Vec<Num>,
}

/// Element by element, as numpy's `multiply` of two lists and Python's `a * b` give it:
/// integers stay integers, anything with a float is a float.
pub(crate) fn product(a: &[Num], b: &[Num], place: &str) -> Result<Vec<Num>> {
    if a.len() != b.len() {
        return Err(Error::InvalidInput(format!(
            "{place}: the histogram has {} bins but the sample has {}",
            a.len(),
            b.len()
        )));
    }
    Ok(a.iter()
        .zip(b)
        .map(|(x, y)| match (x, y) {
            (Num::Int(x), Num::Int(y)) => Num::Int(x.wrapping_mul(*y)),
            _ => Num::Float(x.as_f64() * y.as_f64()),
        })
        .collect())
}

/// The histogram `name` of `file`, found as pyhf finds it: `name` itself, else `path/name`.
pub(crate) fn histogram(
    files: &Files,
    file: &str,
    path: &str,
    name: &str,
    place: &str,
    semantics: Semantics,
) -> Result<Values> {
    if file.is_empty() {
        return Err(Error::InvalidInput(format!(
            "{place}: histogram '{name}' has no InputFile (on the element or its channel)"
        )));
    }
    let root = files.root(file, place)?;
    let path = path.trim_matches('/');
    let full = if path.is_empty() {
        name.to_string()
    } else {
        format!("{path}/{name}")
    };
    // pyhf's order: the name itself, else under the path.
    let found = if root.contains(name) { name } else { &full };
    let histogram = root.histogram_named(found, place)?;
    // ROOT's HistFactory reads a 2-D histogram's cells as one row of bins, x fastest.
    if histogram.axes.len() != 1 && semantics == Semantics::Pyhf {
        return Err(Error::InvalidInput(format!(
            "{place}: '{full}' in {file} is a {} (2-D): pyhf's semantics read 1-D histograms \
             only (ROOT's, the default, read 2-D ones)",
            histogram.class
        )));
    }
    Ok(values_of(&histogram))
}

fn values_of(h: &Histogram) -> Values {
    let kind = h.class.get(3..).unwrap_or("");
    let integer = matches!(kind, "I" | "S" | "C");
    let single = matches!(kind, "F" | "S" | "C");
    let raw = h.values();
    let values = raw
        .iter()
        .map(|&v| {
            if integer {
                Num::Int(v as i64)
            } else {
                Num::Float(v)
            }
        })
        .collect();
    let errors = match &h.sumw2 {
        Some(_) => h.value_errors().into_iter().map(Num::Float).collect(),
        None if single => raw
            .iter()
            .map(|&v| Num::Float(f64::from((v as f32).sqrt())))
            .collect(),
        None => raw.iter().map(|&v| Num::Float(v.sqrt())).collect(),
    };
    Values { values, errors }
}

impl From<Num> for Value {
    fn from(n: Num) -> Value {
        match n {
            Num::Int(i) => i.into(),
            // Finite: the XML's numbers are checked where read, histogram values are f64s of
            // the file's floats and integers.
            Num::Float(f) => serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number),
        }
    }
}
