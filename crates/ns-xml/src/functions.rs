//! A combination's `<Function Name Expression Dependents>`s under ROOT's semantics: a NormFactor
//! that names a function is that expression of its dependents (ROOT 6.40 builds a `RooFormulaVar`
//! and multiplies the sample by it; its Val, Low and High are not read). The engine's factors are
//! parameters, so an expression is read as a monomial c·∏ xᵢ^pᵢ: the powers of a sample's
//! NormFactors add up per parameter, and a sample becomes a normfactor per parameter whose total
//! power is 1 (and a constant normfactor for c ≠ 1). Anything else is refused by name.

use std::collections::BTreeMap;

use ns_core::{Error, Result};
use serde_json::{Map, Value, json};

/// The deepest nesting of parentheses read in an expression.
const MAX_NESTING: usize = 32;

/// c·∏ xᵢ^pᵢ.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Monomial {
    pub constant: f64,
    pub powers: BTreeMap<String, f64>,
}

impl Monomial {
    fn constant(c: f64) -> Self {
        Monomial {
            constant: c,
            powers: BTreeMap::new(),
        }
    }

    fn times(mut self, other: &Monomial, sign: f64) -> Self {
        self.constant *= other.constant.powf(sign);
        for (name, power) in &other.powers {
            *self.powers.entry(name.clone()).or_default() += sign * power;
        }
        self
    }

    fn raised(mut self, exponent: f64) -> Self {
        self.constant = self.constant.powf(exponent);
        self.powers.values_mut().for_each(|p| *p *= exponent);
        self
    }
}

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
            let monomial = Parser::new(expression, &place).monomial()?;
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

/// A recursive-descent reader of a product of powers: `term := factor (('*' | '/') factor)*`,
/// `factor := atom ('^' number)?`, `atom := number | name | '(' term ')' | sqrt(term) |
/// pow(term, number)`.
struct Parser<'a> {
    text: &'a str,
    at: usize,
    place: &'a str,
    nesting: usize,
}

impl<'a> Parser<'a> {
    fn new(text: &'a str, place: &'a str) -> Self {
        Parser {
            text,
            at: 0,
            place,
            nesting: 0,
        }
    }

    fn refuse(&self, what: &str) -> Error {
        Error::InvalidInput(format!(
            "{}: {what} at character {}; a Function is read as a product of powers of its \
             dependents and numbers (*, /, ^, sqrt, pow)",
            self.place,
            self.at + 1
        ))
    }

    fn skip_spaces(&mut self) {
        while self.text[self.at..].starts_with(' ') {
            self.at += 1;
        }
    }

    fn peek(&mut self) -> Option<char> {
        self.skip_spaces();
        self.text[self.at..].chars().next()
    }

    fn monomial(mut self) -> Result<Monomial> {
        let result = self.term()?;
        if self.peek().is_some() {
            return Err(self.refuse("an operator other than *, / and ^"));
        }
        if !(result.constant.is_finite() && result.constant > 0.0)
            || result.powers.values().any(|p| !p.is_finite())
        {
            return Err(self.refuse("a factor that is not a positive finite number"));
        }
        Ok(result)
    }

    fn term(&mut self) -> Result<Monomial> {
        let mut product = self.factor()?;
        loop {
            let sign = match self.peek() {
                Some('*') => 1.0,
                Some('/') => -1.0,
                _ => return Ok(product),
            };
            self.at += 1;
            let next = self.factor()?;
            product = product.times(&next, sign);
        }
    }

    fn factor(&mut self) -> Result<Monomial> {
        let base = self.atom()?;
        if self.peek() == Some('^') {
            self.at += 1;
            let exponent = self.number()?;
            return Ok(base.raised(exponent));
        }
        Ok(base)
    }

    fn atom(&mut self) -> Result<Monomial> {
        match self.peek() {
            Some('(') => {
                self.at += 1;
                let inner = self.nested(|p| p.term())?;
                self.expect(')')?;
                Ok(inner)
            }
            Some(c) if c.is_ascii_digit() || c == '.' => Ok(Monomial::constant(self.number()?)),
            Some(c) if c.is_ascii_alphabetic() || c == '_' => {
                let name = self.identifier();
                match (name, self.peek()) {
                    ("sqrt", Some('(')) => {
                        self.at += 1;
                        let inner = self.nested(|p| p.term())?;
                        self.expect(')')?;
                        Ok(inner.raised(0.5))
                    }
                    ("pow", Some('(')) => {
                        self.at += 1;
                        let inner = self.nested(|p| p.term())?;
                        self.expect(',')?;
                        let exponent = self.number()?;
                        self.expect(')')?;
                        Ok(inner.raised(exponent))
                    }
                    (_, Some('(')) => Err(self.refuse(&format!("the function {name}()"))),
                    _ => Ok(Monomial {
                        constant: 1.0,
                        powers: BTreeMap::from([(name.to_string(), 1.0)]),
                    }),
                }
            }
            Some(_) => Err(self.refuse("an unexpected character")),
            None => Err(self.refuse("the end of the expression")),
        }
    }

    fn nested(&mut self, read: impl FnOnce(&mut Self) -> Result<Monomial>) -> Result<Monomial> {
        self.nesting += 1;
        if self.nesting > MAX_NESTING {
            return Err(self.refuse(&format!("more than {MAX_NESTING} nested parentheses")));
        }
        let result = read(self);
        self.nesting -= 1;
        result
    }

    fn expect(&mut self, c: char) -> Result<()> {
        if self.peek() == Some(c) {
            self.at += 1;
            Ok(())
        } else {
            Err(self.refuse(&format!("'{c}' expected")))
        }
    }

    fn identifier(&mut self) -> &'a str {
        let start = self.at;
        let rest = &self.text[start..];
        let len = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        self.at += len;
        &self.text[start..start + len]
    }

    fn number(&mut self) -> Result<f64> {
        self.skip_spaces();
        let rest = &self.text[self.at..];
        let negative = rest.starts_with('-');
        let digits = &rest[usize::from(negative)..];
        let len = digits
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(digits.len());
        let text = &rest[..usize::from(negative) + len];
        let value = text
            .parse::<f64>()
            .map_err(|_| self.refuse("a number expected"))?;
        self.at += text.len();
        Ok(value)
    }
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
            None => Monomial {
                constant: 1.0,
                powers: BTreeMap::from([(name.to_string(), 1.0)]),
            },
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

    fn read(expression: &str) -> Result<Monomial> {
        Parser::new(expression, "test").monomial()
    }

    #[test]
    fn expressions_read_as_products_of_powers() {
        let m = read("sqrt(mu)").unwrap();
        assert_eq!((m.constant, m.powers["mu"]), (1.0, 0.5));
        let m = read("2*mu_a*mu_b/ k ^2").unwrap();
        assert_eq!(m.constant, 2.0);
        assert_eq!(m.powers["k"], -2.0);
        let m = read("pow(x*y, 3) * (x)").unwrap();
        assert_eq!((m.powers["x"], m.powers["y"]), (4.0, 3.0));
        for bad in ["1+x", "exp(x)", "x^", "(x", "x)", "", "0*x", "x ^ y"] {
            assert!(read(bad).is_err(), "{bad}");
        }
        let deep = format!("{}x{}", "(".repeat(100), ")".repeat(100));
        assert!(read(&deep).unwrap_err().to_string().contains("nested"));
    }

    #[test]
    fn no_expression_panics() {
        // Every string of up to four characters over the grammar's alphabet and a few others.
        let alphabet: Vec<char> = "x_1.(*)^/,- sqrtpowé+".chars().collect();
        let mut strings = vec![String::new()];
        for _ in 0..4 {
            let longer: Vec<String> = strings
                .iter()
                .flat_map(|s| alphabet.iter().map(move |c| format!("{s}{c}")))
                .collect();
            strings.extend(longer);
            strings.dedup();
        }
        for text in &strings {
            let _ = read(text);
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
