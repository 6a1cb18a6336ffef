//! Parameter points given as JSON by users: `--pars`, `--init`, Python dictionaries.

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
                params[i] = number(v, &format!("parameter {i} ('{}')", model.parameter_names()[i]))?;
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
