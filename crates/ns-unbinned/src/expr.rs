//! Expressions of HS3 `generic_function` nodes (yields and derived parameters), with analytic
//! derivatives: parsed into a tree, their names resolved to parameters or constants, and
//! evaluated generically over [`Real`] so that a [`Dual`] gives the exact gradient.
//!
//! Grammar (ROOT's TFormula spellings included):
//! ```text
//! expr  := term (('+' | '-') term)*
//! term  := unary (('*' | '/') unary)*
//! unary := ('-' | '+') unary | power
//! power := atom (('^' | '**') unary)?          right-associative
//! atom  := number | name | name '(' expr (',' expr)* ')' | '(' expr ')'
//! ```
//! Names are `[A-Za-z_][A-Za-z0-9_]*`, optionally qualified with `::` (`TMath::Exp`). Functions:
//! `exp log ln log10 sqrt pow sin cos tan abs fabs` and `TMath::{Exp, Log, Log10, Sqrt, Power,
//! Sin, Cos, Tan, Abs}`, `std::` forms; constants `pi`, `TMath::Pi()`, `e`. Anything else
//! (indexed variables `x[0]`, `@0`, comparisons, conditionals) is an error naming the node.

use crate::scalar::{Dual, Real};

/// A function of the grammar.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Func {
    Exp,
    Ln,
    Log10,
    Sqrt,
    Pow,
    Sin,
    Cos,
    Tan,
    Abs,
}

impl Func {
    fn from_name(name: &str) -> Option<(Func, usize)> {
        let bare = name
            .strip_prefix("TMath::")
            .or_else(|| name.strip_prefix("std::"))
            .unwrap_or(name);
        Some(match bare.to_ascii_lowercase().as_str() {
            "exp" => (Func::Exp, 1),
            "log" | "ln" => (Func::Ln, 1),
            "log10" => (Func::Log10, 1),
            "sqrt" => (Func::Sqrt, 1),
            "pow" | "power" => (Func::Pow, 2),
            "sin" => (Func::Sin, 1),
            "cos" => (Func::Cos, 1),
            "tan" => (Func::Tan, 1),
            "abs" | "fabs" => (Func::Abs, 1),
            _ => return None,
        })
    }
}

/// An expression over leaves of type `L` (names when parsed, parameter slots when resolved).
#[derive(Clone, Debug, PartialEq)]
pub enum Expr<L> {
    Const(f64),
    Leaf(L),
    Neg(Box<Expr<L>>),
    Add(Box<Expr<L>>, Box<Expr<L>>),
    Sub(Box<Expr<L>>, Box<Expr<L>>),
    Mul(Box<Expr<L>>, Box<Expr<L>>),
    Div(Box<Expr<L>>, Box<Expr<L>>),
    Pow(Box<Expr<L>>, Box<Expr<L>>),
    Call(Func, Vec<Expr<L>>),
}

impl<L> Expr<L> {
    /// Replace every leaf through `f` (which may fail, naming the leaf).
    pub fn try_map<M, E>(self, f: &mut dyn FnMut(L) -> Result<Expr<M>, E>) -> Result<Expr<M>, E> {
        let b = |e: Box<Expr<L>>, f: &mut dyn FnMut(L) -> Result<Expr<M>, E>| {
            e.try_map(f).map(Box::new)
        };
        Ok(match self {
            Expr::Const(v) => Expr::Const(v),
            Expr::Leaf(l) => f(l)?,
            Expr::Neg(a) => Expr::Neg(b(a, f)?),
            Expr::Add(x, y) => Expr::Add(b(x, f)?, b(y, f)?),
            Expr::Sub(x, y) => Expr::Sub(b(x, f)?, b(y, f)?),
            Expr::Mul(x, y) => Expr::Mul(b(x, f)?, b(y, f)?),
            Expr::Div(x, y) => Expr::Div(b(x, f)?, b(y, f)?),
            Expr::Pow(x, y) => Expr::Pow(b(x, f)?, b(y, f)?),
            Expr::Call(func, args) => Expr::Call(
                func,
                args.into_iter()
                    .map(|a| a.try_map(f))
                    .collect::<Result<_, _>>()?,
            ),
        })
    }

    /// The number of nodes.
    pub fn size(&self) -> usize {
        1 + match self {
            Expr::Const(_) | Expr::Leaf(_) => 0,
            Expr::Neg(a) => a.size(),
            Expr::Add(x, y)
            | Expr::Sub(x, y)
            | Expr::Mul(x, y)
            | Expr::Div(x, y)
            | Expr::Pow(x, y) => x.size() + y.size(),
            Expr::Call(_, args) => args.iter().map(Expr::size).sum(),
        }
    }

    /// Every leaf, in order of appearance.
    pub fn leaves<'a>(&'a self, out: &mut Vec<&'a L>) {
        match self {
            Expr::Const(_) => {}
            Expr::Leaf(l) => out.push(l),
            Expr::Neg(a) => a.leaves(out),
            Expr::Add(x, y)
            | Expr::Sub(x, y)
            | Expr::Mul(x, y)
            | Expr::Div(x, y)
            | Expr::Pow(x, y) => {
                x.leaves(out);
                y.leaves(out);
            }
            Expr::Call(_, args) => args.iter().for_each(|a| a.leaves(out)),
        }
    }

    /// The value, with each leaf's value from `leaf`.
    pub fn eval<T: Real>(&self, leaf: &impl Fn(&L) -> T) -> T {
        match self {
            Expr::Const(v) => T::constant(*v),
            Expr::Leaf(l) => leaf(l),
            Expr::Neg(a) => -a.eval(leaf),
            Expr::Add(x, y) => x.eval(leaf) + y.eval(leaf),
            Expr::Sub(x, y) => x.eval(leaf) - y.eval(leaf),
            Expr::Mul(x, y) => x.eval(leaf) * y.eval(leaf),
            Expr::Div(x, y) => x.eval(leaf) / y.eval(leaf),
            Expr::Pow(x, y) => power(x.eval(leaf), y, leaf),
            Expr::Call(func, args) => {
                let a = args[0].eval(leaf);
                match func {
                    Func::Exp => a.exp(),
                    Func::Ln => a.ln(),
                    Func::Log10 => a.ln() / std::f64::consts::LN_10,
                    Func::Sqrt => a.sqrt(),
                    Func::Pow => power(a, &args[1], leaf),
                    Func::Sin => a.sin(),
                    Func::Cos => a.cos(),
                    Func::Tan => a.sin() / a.cos(),
                    Func::Abs => a.abs(),
                }
            }
        }
    }
}

/// `base^exponent`: an integer constant exponent keeps negative bases defined; any other
/// exponent is defined for positive bases, as `pow` is.
fn power<T: Real, L>(base: T, exponent: &Expr<L>, leaf: &impl Fn(&L) -> T) -> T {
    match exponent {
        Expr::Const(n) if n.fract() == 0.0 && n.abs() <= 64.0 => base.powi(*n as i32),
        other => base.powf(other.eval(leaf)),
    }
}

/// Parse `text`; an error says what is wrong and where (column, 1-based).
pub fn parse(text: &str) -> Result<Expr<String>, String> {
    let mut p = Parser {
        chars: text.char_indices().collect(),
        pos: 0,
        text,
        depth: 0,
    };
    let e = p.expr()?;
    p.skip_space();
    if p.pos < p.chars.len() {
        return Err(p.unexpected());
    }
    Ok(e)
}

/// Nesting deeper than this (parentheses, unary signs, powers) is refused, not recursed into.
const MAX_DEPTH: usize = 200;

struct Parser<'a> {
    chars: Vec<(usize, char)>,
    pos: usize,
    text: &'a str,
    depth: usize,
}

impl Parser<'_> {
    fn skip_space(&mut self) {
        while self.pos < self.chars.len() && self.chars[self.pos].1.is_whitespace() {
            self.pos += 1;
        }
    }

    fn peek(&mut self) -> Option<char> {
        self.skip_space();
        self.chars.get(self.pos).map(|c| c.1)
    }

    fn eat(&mut self, s: &str) -> bool {
        self.skip_space();
        let rest: String = self.chars[self.pos..]
            .iter()
            .take(s.len())
            .map(|c| c.1)
            .collect();
        if rest == s {
            self.pos += s.chars().count();
            true
        } else {
            false
        }
    }

    fn unexpected(&self) -> String {
        match self.chars.get(self.pos) {
            Some(&(_, c)) => format!(
                "unsupported '{c}' at column {} of '{}'",
                self.pos + 1,
                self.text
            ),
            None => format!("'{}' ends where an operand is expected", self.text),
        }
    }

    fn expr(&mut self) -> Result<Expr<String>, String> {
        let mut e = self.term()?;
        loop {
            if self.eat("+") {
                e = Expr::Add(Box::new(e), Box::new(self.term()?));
            } else if self.peek() == Some('-') {
                self.pos += 1;
                e = Expr::Sub(Box::new(e), Box::new(self.term()?));
            } else {
                return Ok(e);
            }
        }
    }

    fn term(&mut self) -> Result<Expr<String>, String> {
        let mut e = self.unary()?;
        loop {
            if self.peek() == Some('*') && !self.eat("**") {
                self.pos += 1;
                e = Expr::Mul(Box::new(e), Box::new(self.unary()?));
            } else if self.eat("/") {
                e = Expr::Div(Box::new(e), Box::new(self.unary()?));
            } else {
                return Ok(e);
            }
        }
    }

    fn unary(&mut self) -> Result<Expr<String>, String> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(format!(
                "'{}' nests deeper than {MAX_DEPTH} levels",
                self.text
            ));
        }
        let e = self.unary_inner();
        self.depth -= 1;
        e
    }

    fn unary_inner(&mut self) -> Result<Expr<String>, String> {
        if self.eat("-") {
            return Ok(Expr::Neg(Box::new(self.unary()?)));
        }
        if self.eat("+") {
            return self.unary();
        }
        let base = self.atom()?;
        if self.eat("^") || self.eat("**") {
            return Ok(Expr::Pow(Box::new(base), Box::new(self.unary()?)));
        }
        Ok(base)
    }

    fn atom(&mut self) -> Result<Expr<String>, String> {
        let Some(c) = self.peek() else {
            return Err(self.unexpected());
        };
        if self.eat("(") {
            let e = self.expr()?;
            if !self.eat(")") {
                return Err(self.unexpected());
            }
            return Ok(e);
        }
        let start = self.pos;
        if c.is_ascii_digit() || c == '.' {
            while self.pos < self.chars.len() {
                let c = self.chars[self.pos].1;
                let exponent_sign =
                    (c == '+' || c == '-') && matches!(self.chars[self.pos - 1].1, 'e' | 'E');
                if c.is_ascii_digit() || c == '.' || c == 'e' || c == 'E' || exponent_sign {
                    self.pos += 1;
                } else {
                    break;
                }
            }
            let s = self.slice(start);
            return s
                .parse::<f64>()
                .map(Expr::Const)
                .map_err(|_| format!("'{s}' is not a number (column {})", start + 1));
        }
        if c.is_ascii_alphabetic() || c == '_' {
            while self.pos < self.chars.len() {
                let c = self.chars[self.pos].1;
                if c.is_ascii_alphanumeric() || c == '_' {
                    self.pos += 1;
                } else if c == ':' && self.chars.get(self.pos + 1).map(|c| c.1) == Some(':') {
                    self.pos += 2;
                } else {
                    break;
                }
            }
            let name = self.slice(start);
            if self.eat("(") {
                if matches!(name.as_str(), "TMath::Pi" | "pi") && self.eat(")") {
                    return Ok(Expr::Const(std::f64::consts::PI));
                }
                let Some((func, arity)) = Func::from_name(&name) else {
                    return Err(format!(
                        "unsupported function '{name}' at column {} of '{}'",
                        start + 1,
                        self.text
                    ));
                };
                let mut args = vec![self.expr()?];
                while self.eat(",") {
                    args.push(self.expr()?);
                }
                if !self.eat(")") {
                    return Err(self.unexpected());
                }
                if args.len() != arity {
                    return Err(format!(
                        "'{name}' takes {arity} argument(s), not {} (in '{}')",
                        args.len(),
                        self.text
                    ));
                }
                return Ok(if func == Func::Pow {
                    let exponent = args.pop().expect("two arguments");
                    Expr::Pow(
                        Box::new(args.pop().expect("two arguments")),
                        Box::new(exponent),
                    )
                } else {
                    Expr::Call(func, args)
                });
            }
            return Ok(match name.as_str() {
                "pi" | "TMath::Pi" => Expr::Const(std::f64::consts::PI),
                "e" => Expr::Const(std::f64::consts::E),
                _ => Expr::Leaf(name),
            });
        }
        Err(self.unexpected())
    }

    fn slice(&self, start: usize) -> String {
        self.chars[start..self.pos].iter().map(|c| c.1).collect()
    }
}

/// An expression over fit parameters (leaves are parameter indices), with the parameters it
/// reads listed once: evaluated with its gradient.
#[derive(Clone, Debug, PartialEq)]
pub struct ParamExpr {
    expr: Expr<usize>,
    params: Vec<usize>,
}

/// Inputs seeded per forward pass.
const SEEDS: usize = 8;

impl ParamExpr {
    pub fn new(expr: Expr<usize>) -> Self {
        let mut leaves = Vec::new();
        expr.leaves(&mut leaves);
        let mut params: Vec<usize> = leaves.into_iter().copied().collect();
        params.sort_unstable();
        params.dedup();
        ParamExpr { expr, params }
    }

    pub fn constant(v: f64) -> Self {
        ParamExpr::new(Expr::Const(v))
    }

    pub fn parameter(index: usize) -> Self {
        ParamExpr::new(Expr::Leaf(index))
    }

    /// The same expression with parameter `i` renumbered `map[i]`.
    pub fn remapped(&self, map: &[usize]) -> Self {
        let e: Result<Expr<usize>, ()> = self
            .expr
            .clone()
            .try_map(&mut |i: usize| Ok(Expr::Leaf(map[i])));
        ParamExpr::new(e.expect("renumbering cannot fail"))
    }

    /// The parameter it is, where it is one parameter and nothing else.
    pub fn as_parameter(&self) -> Option<usize> {
        match self.expr {
            Expr::Leaf(i) => Some(i),
            _ => None,
        }
    }

    /// The parameters it depends on, ascending.
    pub fn params(&self) -> &[usize] {
        &self.params
    }

    /// The constant value where it reads no parameter.
    pub fn as_constant(&self) -> Option<f64> {
        match self.expr {
            Expr::Const(v) => Some(v),
            _ => self.params.is_empty().then(|| self.value(&[])),
        }
    }

    pub fn value(&self, theta: &[f64]) -> f64 {
        self.expr.eval(&|&i: &usize| theta[i])
    }

    /// The value and its derivative with respect to each of [`params`](Self::params), in
    /// forward passes of up to eight seeded parameters.
    pub fn value_grad(&self, theta: &[f64], grad: &mut Vec<f64>) -> f64 {
        grad.clear();
        if self.params.is_empty() {
            return self.value(theta);
        }
        let mut value = 0.0;
        for block in self.params.chunks(SEEDS) {
            let r: Dual<SEEDS> =
                self.expr
                    .eval(&|&i: &usize| match block.iter().position(|&p| p == i) {
                        Some(slot) => Dual::input(theta[i], slot),
                        None => Dual::constant(theta[i]),
                    });
            value = r.v;
            grad.extend_from_slice(&r.d[..block.len()]);
        }
        value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolved(text: &str, names: &[&str]) -> ParamExpr {
        let e = parse(text).unwrap();
        ParamExpr::new(
            e.try_map(&mut |n: String| names.iter().position(|m| *m == n).map(Expr::Leaf).ok_or(n))
                .unwrap(),
        )
    }

    #[test]
    fn evaluates_with_exact_gradients() {
        let names = ["nbkg", "theta", "c"];
        let theta = [500.0, 0.3, -0.2];
        let cases: [(&str, f64, [f64; 3]); 6] = [
            ("nbkg*(1+0.1*theta)", 515.0, [1.03, 50.0, 0.0]),
            ("-c", 0.2, [0.0, 0.0, -1.0]),
            ("2^3 + theta**2 - -c", 8.09 - 0.2, [0.0, 0.6, 1.0]),
            (
                "TMath::Exp(theta)*pow(nbkg, 2)/1e5",
                0.3f64.exp() * 2.5,
                [0.3f64.exp() * 1e3 / 1e5, 0.3f64.exp() * 2.5, 0.0],
            ),
            (
                "sqrt(nbkg) + log(nbkg) + abs(c)",
                500f64.sqrt() + 500f64.ln() + 0.2,
                [0.5 / 500f64.sqrt() + 1.0 / 500.0, 0.0, -1.0],
            ),
            (
                "nbkg^theta",
                500f64.powf(0.3),
                [0.3 * 500f64.powf(-0.7), 500f64.powf(0.3) * 500f64.ln(), 0.0],
            ),
        ];
        for (text, value, grad) in cases {
            let e = resolved(text, &names);
            let mut g = Vec::new();
            let v = e.value_grad(&theta, &mut g);
            assert!(
                (v - value).abs() <= 1e-12 * value.abs().max(1.0),
                "{text}: {v} against {value}"
            );
            for (k, &p) in e.params().iter().enumerate() {
                assert!(
                    (g[k] - grad[p]).abs() <= 1e-12 * grad[p].abs().max(1.0),
                    "{text}: ∂/∂{} = {} against {}",
                    names[p],
                    g[k],
                    grad[p]
                );
            }
            for p in 0..3 {
                if !e.params().contains(&p) {
                    assert_eq!(grad[p], 0.0, "{text} reads {}", names[p]);
                }
            }
        }
    }

    #[test]
    fn more_than_eight_parameters_take_several_passes() {
        let names: Vec<String> = (0..11).map(|i| format!("p{i}")).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let text = (0..11)
            .map(|i| format!("{}*p{i}", i + 1))
            .collect::<Vec<_>>()
            .join("+");
        let e = resolved(&text, &refs);
        let mut g = Vec::new();
        e.value_grad(&[1.0; 11], &mut g);
        assert_eq!(g, (1..=11).map(|i| i as f64).collect::<Vec<_>>());
    }

    #[test]
    fn unsupported_constructs_are_named() {
        let deep = format!("{}1{}", "(".repeat(5000), ")".repeat(5000));
        let signs = "-".repeat(5000);
        for (text, says) in [
            ("x[0]*2", "unsupported '['"),
            ("@0+1", "unsupported '@'"),
            ("gamma(x)", "unsupported function 'gamma'"),
            ("a > b", "unsupported '>'"),
            ("(a+b", "ends where"),
            ("pow(a)", "takes 2 argument"),
            ("1.2.3", "not a number"),
            (deep.as_str(), "nests deeper"),
            (signs.as_str(), "nests deeper"),
        ] {
            let err = parse(text).unwrap_err();
            assert!(err.contains(says), "{text}: {err}");
        }
    }
}
