//! A combination's `<Function Name Expression Dependents>`s under ROOT's semantics: a NormFactor
//! that names a function is that expression of its dependents (ROOT 6.40 builds a `RooFormulaVar`
//! and multiplies the sample by it; its Val, Low and High are not read). The engine's factors are
//! parameters, so an expression is read as a monomial c·∏ xᵢ^pᵢ: the powers of a sample's
//! NormFactors add up per parameter, and a sample becomes a normfactor per parameter whose total
//! power is 1 (and a constant normfactor for c ≠ 1). Anything else is refused by name.

use std::collections::BTreeMap;

use ns_core::monomial::{self, Monomial};
use ns_core::{Error, Result};
use serde_json::{Map, Value, json};

/// The functions of a combination, by name, and their dependents' parameter configs.
#[derive(Default)]
pub(crate) struct Functions {
    pub by_name: BTreeMap<String, Monomial>,
    pub dependents: Vec<Map<String, Value>>,
}

impl Functions {
    /// The `<Function>` children of `combination`.
    pub fn read(combination: roxmltree::Node, top: &str) -> Result<Self> {
        let mut functions = Functions::default();
        for node in combination
            .children()
            .filter(|n| n.has_tag_name("Function"))
        {
            let name = node.attribute("Name").unwrap_or("");
            let expression = node.attribute("Expression").unwrap_or("");
            let place = format!("{top}: <Function Name=\"{name}\" Expression=\"{expression}\">");
            if name.is_empty() || expression.is_empty() {
                return Err(Error::InvalidInput(format!(
                    "{place}: a Function needs a Name and an Expression"
                )));
            }
            let mut declared = Vec::new();
            for dependent in split_dependents(node.attribute("Dependents").unwrap_or("")) {
                let config = dependent_config(dependent, &place)?;
                declared.push(config["name"].as_str().unwrap_or("").to_string());
                if !functions
                    .dependents
                    .iter()
                    .any(|c| c["name"] == config["name"])
                {
                    functions.dependents.push(config);
                }
            }
            let monomial = monomial::parse(
                expression,
                &place,
                "a Function is read as a product of powers of its dependents and numbers (*, /, ^, \
                 sqrt, pow)",
            )?;
            if let Some(unknown) = monomial.powers.keys().find(|p| !declared.contains(p)) {
                return Err(Error::InvalidInput(format!(
                    "{place}: '{unknown}' is not one of its Dependents ({})",
                    declared.join(", ")
                )));
            }
            functions.by_name.insert(name.to_string(), monomial);
        }
        Ok(functions)
    }

    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }
}

/// `x[0,3],y[1]`: split at the commas outside brackets.
fn split_dependents(text: &str) -> Vec<&str> {
    let (mut parts, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, c) in text.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(text[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(text[start..].trim());
    parts.into_iter().filter(|p| !p.is_empty()).collect()
}

/// A dependent as RooFit's factory reads it: `x[low,high]` starts at the middle, `x[v,low,high]`
/// at v, `x[v]` is the constant v.
fn dependent_config(text: &str, place: &str) -> Result<Map<String, Value>> {
    let bad = || {
        Error::InvalidInput(format!(
            "{place}: the dependent '{text}' is not name[low,high], name[value,low,high] or \
             name[value]"
        ))
    };
    let (name, rest) = text.split_once('[').ok_or_else(bad)?;
    let values: Vec<f64> = rest
        .strip_suffix(']')
        .ok_or_else(bad)?
        .split(',')
        .map(|v| v.trim().parse::<f64>().map_err(|_| bad()))
        .collect::<Result<_>>()?;
    let name = name.trim();
    if !is_identifier(name) || values.iter().any(|v| !v.is_finite()) {
        return Err(bad());
    }
    if name.starts_with("alpha_") || name.starts_with("gamma_") || name == "Lumi" {
        return Err(Error::InvalidInput(format!(
            "{place}: the dependent '{name}' is a systematic's parameter; a Function's \
             dependents are read as normalisation factors"
        )));
    }
    let (init, low, high, fixed) = match values[..] {
        [low, high] => (0.5 * (low + high), low, high, false),
        [value, low, high] => (value, low, high, false),
        [value] => (value, value, value, true),
        _ => return Err(bad()),
    };
    if !(low <= init && init <= high) {
        return Err(Error::InvalidInput(format!(
            "{place}: the dependent '{text}' starts outside its range"
        )));
    }
    let mut config = Map::new();
    config.insert("name".into(), json!(name));
    config.insert("bounds".into(), json!([[low, high]]));
    config.insert("inits".into(), json!([init]));
    if fixed {
        config.insert("fixed".into(), json!(true));
    }
    Ok(config)
}

fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The normfactors of one sample under ROOT's semantics: its NormFactors, those that name a
/// function replaced by their monomials, multiplied out.
pub(crate) fn sample_normfactors(
    names: &[&str],
    functions: &Functions,
    place: &str,
) -> Result<(Vec<String>, f64)> {
    let mut product = Monomial::constant(1.0);
    for name in names {
        let factor = match functions.by_name.get(*name) {
            Some(monomial) => monomial.clone(),
            None => Monomial::variable(name),
        };
        product = product.times(&factor, 1.0);
    }
    let mut parameters = Vec::new();
    for (name, power) in &product.powers {
        if (power - 1.0).abs() < 1e-12 {
            parameters.push(name.clone());
        } else if power.abs() >= 1e-12 {
            return Err(Error::InvalidInput(format!(
                "{place}: its NormFactors multiply to {name}^{power} (through <Function>s); a \
                 sample's normalisation may hold each parameter to the power 1 only"
            )));
        }
    }
    Ok((parameters, product.constant))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_dependent_panics() {
        // Every string of up to five characters over the dependents' alphabet and a few others.
        let alphabet: Vec<char> = "x_1.[],- é".chars().collect();
        let mut strings = vec![String::new()];
        for _ in 0..5 {
            let longer: Vec<String> = strings
                .iter()
                .flat_map(|s| alphabet.iter().map(move |c| format!("{s}{c}")))
                .collect();
            strings.extend(longer);
            strings.dedup();
        }
        for text in &strings {
            let _ = dependent_config(text, "test");
        }
        assert!(strings.len() > 100_000);
    }

    #[test]
    fn dependents_start_where_roofits_factory_puts_them() {
        let configs: Vec<_> = split_dependents("a[0,3], b[1,0,5],c[2]")
            .into_iter()
            .map(|d| dependent_config(d, "test").unwrap())
            .collect();
        assert_eq!(configs[0]["inits"], json!([1.5]));
        assert_eq!(configs[1]["inits"], json!([1.0]));
        assert_eq!(configs[2]["fixed"], json!(true));
        assert!(dependent_config("alpha_x[0,1]", "test").is_err());
        assert!(dependent_config("x[5,0,1]", "test").is_err());
    }
}
