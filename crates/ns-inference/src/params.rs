//! Parameter values given as JSON by users (`--pars`, `--init`, Python dictionaries, a call's
//! `init`, `bounds` and `fixed`): points, bounds, and the numbers JSON cannot hold.

use ns_compute::Likelihood;
use ns_core::{Error, Result};
use serde_json::Value;

/// Parameters from JSON: a list in pyhf order, or an object keyed by parameter-set name
/// (value: list, or a number for scalars) or by `name[i]`. Missing parameters keep `base`.
pub fn params_from_json(model: &dyn Likelihood, value: &Value, base: &[f64]) -> Result<Vec<f64>> {
    let bad = |m: String| Error::InvalidInput(m);
    let number = |v: &Value, what: &str| {
        v.as_f64()
            .ok_or_else(|| bad(format!("{what} must be a number, found {v}")))
    };
    let mut params = base.to_vec();
    let groups = model.parameter_groups();
    match value {
        Value::Array(items) => {
            if items.len() != model.n_params() {
                return Err(bad(format!(
                    "parameter list has {} values but the model has {} parameters ({})",
                    items.len(),
                    model.n_params(),
                    model.parameter_names().join(", ")
                )));
            }
            for (i, v) in items.iter().enumerate() {
                params[i] = number(
                    v,
                    &format!("parameter {i} ('{}')", model.parameter_names()[i]),
                )?;
            }
        }
        Value::Object(map) => {
            for (key, v) in map {
                if let Some((_, range)) = groups.iter().find(|(name, _)| name == key) {
                    let values: Vec<f64> = match v {
                        Value::Array(items) => items
                            .iter()
                            .map(|x| number(x, &format!("parameter '{key}'")))
                            .collect::<Result<_>>()?,
                        other => vec![number(other, &format!("parameter '{key}'"))?],
                    };
                    if values.len() != range.len() {
                        return Err(bad(format!(
                            "parameter set '{key}' has {} parameters but {} values were given",
                            range.len(),
                            values.len()
                        )));
                    }
                    params[range.clone()].copy_from_slice(&values);
                } else {
                    let i = model.parameter_index(key).map_err(|e| {
                        bad(format!(
                            "{e}; the parameter sets are: {}",
                            groups
                                .iter()
                                .map(|(name, _)| name.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ))
                    })?;
                    params[i] = number(v, &format!("parameter '{key}'"))?;
                }
            }
        }
        other => {
            return Err(bad(format!(
                "parameters must be a list or an object, found {other}"
            )));
        }
    }
    Ok(params)
}

/// A number as a call's JSON holds it: finite values as numbers, and the values JSON has no
/// number for as strings — `"inf"`, `"-inf"`, `"NaN"` — so that a call says what was asked.
pub fn number_json(v: f64) -> Value {
    match serde_json::Number::from_f64(v) {
        Some(n) => Value::Number(n),
        None if v.is_nan() => Value::String("NaN".into()),
        None if v > 0.0 => Value::String("inf".into()),
        None => Value::String("-inf".into()),
    }
}

/// The number of a JSON value written by [`number_json`] (or by hand): a number or one of its
/// strings; `null` is `none`. `None` for anything else.
pub fn number_of(value: &Value, none: Option<f64>) -> Option<f64> {
    match value {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => match s.as_str() {
            "inf" | "+inf" | "Infinity" => Some(f64::INFINITY),
            "-inf" | "-Infinity" => Some(f64::NEG_INFINITY),
            "NaN" | "nan" => Some(f64::NAN),
            _ => None,
        },
        Value::Null => none,
        _ => None,
    }
}

/// `e` with `what: ` before its message.
pub fn prefixed(what: &str, e: Error) -> Error {
    match e {
        Error::InvalidInput(m) => Error::InvalidInput(format!("{what}: {m}")),
        other => other,
    }
}

/// The positions a parameter or group name stands for.
fn positions(model: &dyn Likelihood, name: &str) -> Result<std::ops::Range<usize>> {
    if let Some((_, range)) = model
        .parameter_groups()
        .into_iter()
        .find(|(g, _)| g == name)
    {
        return Ok(range);
    }
    let i = model.parameter_index(name).map_err(Error::InvalidInput)?;
    Ok(i..i + 1)
}

/// `[low, high]` of `what`; `null` is no bound on that side. A bound that is not a number, or a
/// low above the high, reaches the fit's own check with its message.
fn pair(value: &Value, what: &str) -> Result<(f64, f64)> {
    let bad = || {
        Error::InvalidInput(format!(
            "bounds of '{what}' must be [low, high], not {value}"
        ))
    };
    let items = value.as_array().filter(|a| a.len() == 2).ok_or_else(bad)?;
    Ok((
        number_of(&items[0], Some(f64::NEG_INFINITY)).ok_or_else(bad)?,
        number_of(&items[1], Some(f64::INFINITY)).ok_or_else(bad)?,
    ))
}

/// Bounds from JSON over `base`: a list of `[low, high]` in parameter order, or an object
/// mapping a parameter or group name to `[low, high]` (the others keep `base`).
pub fn bounds_from_json(
    model: &dyn Likelihood,
    bounds: &Value,
    base: &[(f64, f64)],
) -> Result<Vec<(f64, f64)>> {
    let n = model.n_params();
    let mut out = base.to_vec();
    match bounds {
        Value::Array(items) => {
            if items.len() != n {
                return Err(Error::InvalidInput(format!(
                    "bounds has {} entries but the model has {n} parameters",
                    items.len()
                )));
            }
            for (i, item) in items.iter().enumerate() {
                out[i] = pair(item, &model.parameter_names()[i])?;
            }
        }
        Value::Object(map) => {
            for (name, item) in map {
                let range = positions(model, name).map_err(|e| prefixed("bounds", e))?;
                let bound = pair(item, name)?;
                for i in range {
                    out[i] = bound;
                }
            }
        }
        other => {
            return Err(Error::InvalidInput(format!(
                "bounds must be a list of [low, high] or an object by parameter name, not {other}"
            )));
        }
    }
    Ok(out)
}
