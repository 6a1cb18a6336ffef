//! Expressions read as products of powers c·∏ xᵢ^pᵢ (`*`, `/`, `^`, `sqrt`, `pow`, numbers,
//! parentheses): what the engine's factors can hold of a formula — a HistFactory `<Function>`,
//! a Combine `rateParam` formula. Names start with a letter, `_` or `@` (Combine's `@0`).

use std::collections::BTreeMap;

use crate::{Error, Result};

/// `expression` as a monomial; an error names `place`, the character where reading stopped,
/// and `grammar` (what the caller reads, for the user).
pub fn parse(expression: &str, place: &str, grammar: &str) -> Result<Monomial> {
    Parser::new(expression, place, grammar).monomial()
}

/// The deepest nesting of parentheses read in an expression.
const MAX_NESTING: usize = 32;

/// c·∏ xᵢ^pᵢ.
#[derive(Clone, Debug, PartialEq)]
pub struct Monomial {
    pub constant: f64,
    pub powers: BTreeMap<String, f64>,
}

impl Monomial {
    /// One variable to the power 1.
    pub fn variable(name: &str) -> Self {
        Monomial {
            constant: 1.0,
            powers: BTreeMap::from([(name.to_string(), 1.0)]),
        }
    }

    pub fn constant(c: f64) -> Self {
        Monomial {
            constant: c,
            powers: BTreeMap::new(),
        }
    }

    /// This times `other` raised to `sign` (1: a product, −1: a quotient).
    pub fn times(mut self, other: &Monomial, sign: f64) -> Self {
        self.constant *= other.constant.powf(sign);
        for (name, power) in &other.powers {
            *self.powers.entry(name.clone()).or_default() += sign * power;
        }
        self
    }

    /// This raised to `exponent`.
    pub fn raised(mut self, exponent: f64) -> Self {
        self.constant = self.constant.powf(exponent);
        self.powers.values_mut().for_each(|p| *p *= exponent);
        self
    }
}

/// A recursive-descent reader of a product of powers: `term := factor (('*' | '/') factor)*`,
/// `factor := atom ('^' number)?`, `atom := number | name | '(' term ')' | sqrt(term) |
/// pow(term, number)`.
struct Parser<'a> {
    text: &'a str,
    at: usize,
    place: &'a str,
    grammar: &'a str,
    nesting: usize,
}

impl<'a> Parser<'a> {
    fn new(text: &'a str, place: &'a str, grammar: &'a str) -> Self {
        Parser {
            text,
            at: 0,
            place,
            grammar,
            nesting: 0,
        }
    }

    fn refuse(&self, what: &str) -> Error {
        Error::InvalidInput(format!(
            "{}: {what} at character {}; {}",
            self.place,
            self.at + 1,
            self.grammar
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
            Some(c) if c.is_ascii_alphabetic() || c == '_' || c == '@' => {
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
                    _ => Ok(Monomial::variable(name)),
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
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '@'))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn read(expression: &str) -> Result<Monomial> {
        parse(expression, "test", "products of powers")
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
        let alphabet: Vec<char> = "x_1.(*)^/,- sqrtpowé+@".chars().collect();
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
        }
        assert!(strings.len() > 100_000);
    }
}
