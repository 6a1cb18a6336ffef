//! Expressions of HS3 `generic_function` nodes (yields and derived parameters), with analytic
//! derivatives: parsed into a [`Tape`] (operations in order, each reading earlier ones — a DAG,
//! so a shared function is one entry however often it is used, and nothing is recursed into
//! however long an expression is), their names resolved to parameters or constants, and
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

/// One operation of a [`Tape`]; operands are positions of earlier operations.
#[derive(Clone, Debug, PartialEq)]
pub enum Op<L> {
    Const(f64),
    Leaf(L),
    Neg(usize),
    Add(usize, usize),
    Sub(usize, usize),
    Mul(usize, usize),
    Div(usize, usize),
    /// A power with a small integer constant exponent (defined for negative bases).
    PowI(usize, i32),
    Pow(usize, usize),
    Call(Func, usize),
}

/// Where a leaf of one tape goes on another: an entry there (pushed, or one it already has).
pub type LeafMap<'a, L, M, E> = dyn FnMut(&L, &mut Tape<M>) -> Result<usize, E> + 'a;

/// An expression as operations in evaluation order over leaves of type `L` (names when parsed,
/// parameter slots when resolved); one tape may hold several expressions that share entries.
#[derive(Clone, Debug, PartialEq)]
pub struct Tape<L> {
    ops: Vec<Op<L>>,
}

impl<L> Default for Tape<L> {
    fn default() -> Self {
        Tape { ops: Vec::new() }
    }
}

impl<L> Tape<L> {
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    pub fn ops(&self) -> &[Op<L>] {
        &self.ops
    }

    /// Append `op` (its operands already on the tape); its position.
    pub fn push(&mut self, op: Op<L>) -> usize {
        self.ops.push(op);
        self.ops.len() - 1
    }

    pub fn constant(&mut self, v: f64) -> usize {
        self.push(Op::Const(v))
    }

    /// `base^exponent`: an integer constant exponent keeps negative bases defined; any other
    /// exponent is defined for positive bases, as `pow` is.
    pub fn pow(&mut self, base: usize, exponent: usize) -> usize {
        match self.ops[exponent] {
            Op::Const(n) if n.fract() == 0.0 && n.abs() <= 64.0 => {
                self.push(Op::PowI(base, n as i32))
            }
            _ => self.push(Op::Pow(base, exponent)),
        }
    }

    /// The sum of `terms` (0 for none), as one chain.
    pub fn sum(&mut self, terms: &[usize]) -> usize {
        self.fold(terms, 0.0, Op::Add)
    }

    /// The product of `factors` (1 for none), as one chain.
    pub fn product(&mut self, factors: &[usize]) -> usize {
        self.fold(factors, 1.0, Op::Mul)
    }

    fn fold(&mut self, items: &[usize], empty: f64, op: fn(usize, usize) -> Op<L>) -> usize {
        match items.split_first() {
            None => self.constant(empty),
            Some((&first, rest)) => rest.iter().fold(first, |acc, &x| self.push(op(acc, x))),
        }
    }

    /// Copy the entries `root` reads (in their order) onto `into`, each leaf through `leaf`
    /// (which may fail, naming it); `root`'s position there.
    pub fn copy_into<M, E>(
        &self,
        root: usize,
        into: &mut Tape<M>,
        leaf: &mut LeafMap<'_, L, M, E>,
    ) -> Result<usize, E> {
        let reads = self.reads(root);
        let mut at = vec![usize::MAX; root + 1];
        for i in (0..=root).filter(|&i| reads[i]) {
            let m = |k: usize| at[k];
            at[i] = match &self.ops[i] {
                Op::Leaf(l) => leaf(l, into)?,
                Op::Const(v) => into.push(Op::Const(*v)),
                Op::Neg(a) => into.push(Op::Neg(m(*a))),
                Op::Add(a, b) => into.push(Op::Add(m(*a), m(*b))),
                Op::Sub(a, b) => into.push(Op::Sub(m(*a), m(*b))),
                Op::Mul(a, b) => into.push(Op::Mul(m(*a), m(*b))),
                Op::Div(a, b) => into.push(Op::Div(m(*a), m(*b))),
                Op::PowI(a, n) => into.push(Op::PowI(m(*a), *n)),
                Op::Pow(a, b) => into.push(Op::Pow(m(*a), m(*b))),
                Op::Call(f, a) => into.push(Op::Call(*f, m(*a))),
            };
        }
        Ok(at[root])
    }

    /// Which entries up to `root` it reads (itself included).
    fn reads(&self, root: usize) -> Vec<bool> {
        let mut reads = vec![false; root + 1];
        reads[root] = true;
        for i in (0..=root).rev() {
            if !reads[i] {
                continue;
            }
            match &self.ops[i] {
                Op::Const(_) | Op::Leaf(_) => {}
                Op::Neg(a) | Op::PowI(a, _) | Op::Call(_, a) => reads[*a] = true,
                Op::Add(a, b) | Op::Sub(a, b) | Op::Mul(a, b) | Op::Div(a, b) | Op::Pow(a, b) => {
                    reads[*a] = true;
                    reads[*b] = true;
                }
            }
        }
        reads
    }

    /// The value of the last entry, with each leaf's value from `leaf`.
    pub fn eval<T: Real>(&self, leaf: &impl Fn(&L) -> T) -> T {
        if let [Op::Leaf(l)] = self.ops.as_slice() {
            return leaf(l);
        }
        let mut v: Vec<T> = Vec::with_capacity(self.ops.len());
        for op in &self.ops {
            let x = match op {
                Op::Const(c) => T::constant(*c),
                Op::Leaf(l) => leaf(l),
                Op::Neg(a) => -v[*a],
                Op::Add(a, b) => v[*a] + v[*b],
                Op::Sub(a, b) => v[*a] - v[*b],
                Op::Mul(a, b) => v[*a] * v[*b],
                Op::Div(a, b) => v[*a] / v[*b],
                Op::PowI(a, n) => v[*a].powi(*n),
                Op::Pow(a, b) => v[*a].powf(v[*b]),
                Op::Call(func, a) => {
                    let a = v[*a];
                    match func {
                        Func::Exp => a.exp(),
                        Func::Ln => a.ln(),
                        Func::Log10 => a.ln() / std::f64::consts::LN_10,
                        Func::Sqrt => a.sqrt(),
                        Func::Sin => a.sin(),
                        Func::Cos => a.cos(),
                        Func::Tan => a.sin() / a.cos(),
                        Func::Abs => a.abs(),
                        Func::Pow => unreachable!("pow is parsed as a power"),
                    }
                }
            };
            v.push(x);
        }
        v.pop().unwrap_or_else(|| T::constant(0.0))
    }
}

/// Parse `text` into a tape whose last entry is the expression; an error says what is wrong
/// and where (column, 1-based).
pub fn parse(text: &str) -> Result<Tape<String>, String> {
    let mut p = Parser {
        chars: text.char_indices().collect(),
        pos: 0,
        text,
        depth: 0,
        tape: Tape::default(),
    };
    let root = p.expr()?;
    p.skip_space();
    if p.pos < p.chars.len() {
        return Err(p.unexpected());
    }
    debug_assert_eq!(root + 1, p.tape.len());
    Ok(p.tape)
}

/// Nesting deeper than this (parentheses, unary signs, powers) is refused, not recursed into.
const MAX_DEPTH: usize = 200;

struct Parser<'a> {
    chars: Vec<(usize, char)>,
    pos: usize,
    text: &'a str,
    depth: usize,
    tape: Tape<String>,
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

    /// `what` (a closing parenthesis) is missing here.
    fn missing(&self, what: &str) -> String {
        match self.chars.get(self.pos) {
            Some(&(_, c)) => format!(
                "'{what}' expected at column {}, found '{c}' (in '{}')",
                self.pos + 1,
                self.text
            ),
            None => format!("'{}' ends where '{what}' is missing", self.text),
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

    fn expr(&mut self) -> Result<usize, String> {
        let mut e = self.term()?;
        loop {
            if self.eat("+") {
                let t = self.term()?;
                e = self.tape.push(Op::Add(e, t));
            } else if self.peek() == Some('-') {
                self.pos += 1;
                let t = self.term()?;
                e = self.tape.push(Op::Sub(e, t));
            } else {
                return Ok(e);
            }
        }
    }

    fn term(&mut self) -> Result<usize, String> {
        let mut e = self.unary()?;
        loop {
            if self.peek() == Some('*') && !self.eat("**") {
                self.pos += 1;
                let u = self.unary()?;
                e = self.tape.push(Op::Mul(e, u));
            } else if self.eat("/") {
                let u = self.unary()?;
                e = self.tape.push(Op::Div(e, u));
            } else {
                return Ok(e);
            }
        }
    }

    fn unary(&mut self) -> Result<usize, String> {
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

    fn unary_inner(&mut self) -> Result<usize, String> {
        if self.eat("-") {
            let u = self.unary()?;
            return Ok(self.tape.push(Op::Neg(u)));
        }
        if self.eat("+") {
            return self.unary();
        }
        let base = self.atom()?;
        if self.eat("^") || self.eat("**") {
            let exponent = self.unary()?;
            return Ok(self.tape.pow(base, exponent));
        }
        Ok(base)
    }

    fn atom(&mut self) -> Result<usize, String> {
        let Some(c) = self.peek() else {
            return Err(self.unexpected());
        };
        if self.eat("(") {
            let e = self.expr()?;
            if !self.eat(")") {
                return Err(self.missing(")"));
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
            let v = s
                .parse::<f64>()
                .map_err(|_| format!("'{s}' is not a number (column {})", start + 1))?;
            return Ok(self.tape.constant(v));
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
                    return Ok(self.tape.constant(std::f64::consts::PI));
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
                    return Err(self.missing(")"));
                }
                if args.len() != arity {
                    return Err(format!(
                        "'{name}' takes {arity} argument(s), not {} (in '{}')",
                        args.len(),
                        self.text
                    ));
                }
                return Ok(match args[..] {
                    [base, exponent] => self.tape.pow(base, exponent),
                    [a] => self.tape.push(Op::Call(func, a)),
                    _ => unreachable!("arity checked"),
                });
            }
            return Ok(match name.as_str() {
                "pi" | "TMath::Pi" => self.tape.constant(std::f64::consts::PI),
                "e" => self.tape.constant(std::f64::consts::E),
                _ => self.tape.push(Op::Leaf(name)),
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
    tape: Tape<usize>,
    params: Vec<usize>,
}

/// Inputs seeded per forward pass.
const SEEDS: usize = 8;

impl ParamExpr {
    /// The expression at `root` of `tape` (only the entries it reads are kept).
    pub fn new(tape: &Tape<usize>, root: usize) -> Self {
        let mut own = Tape::default();
        let copied: Result<usize, std::convert::Infallible> =
            tape.copy_into(root, &mut own, &mut |&i, t| Ok(t.push(Op::Leaf(i))));
        debug_assert!(copied.is_ok());
        Self::of(own)
    }

    fn of(tape: Tape<usize>) -> Self {
        let mut params: Vec<usize> = tape
            .ops
            .iter()
            .filter_map(|op| match op {
                Op::Leaf(i) => Some(*i),
                _ => None,
            })
            .collect();
        params.sort_unstable();
        params.dedup();
        ParamExpr { tape, params }
    }

    pub fn constant(v: f64) -> Self {
        Self::of(Tape {
            ops: vec![Op::Const(v)],
        })
    }

    pub fn parameter(index: usize) -> Self {
        Self::of(Tape {
            ops: vec![Op::Leaf(index)],
        })
    }

    /// The number of operations it evaluates.
    pub fn size(&self) -> usize {
        self.tape.len()
    }

    /// The same expression with parameter `i` renumbered `map[i]`.
    pub fn remapped(&self, map: &[usize]) -> Self {
        let ops = self
            .tape
            .ops
            .iter()
            .map(|op| match op {
                Op::Leaf(i) => Op::Leaf(map[*i]),
                other => other.clone(),
            })
            .collect();
        Self::of(Tape { ops })
    }

    /// The parameter it is, where it is one parameter and nothing else.
    pub fn as_parameter(&self) -> Option<usize> {
        match self.tape.ops.as_slice() {
            [Op::Leaf(i)] => Some(*i),
            _ => None,
        }
    }

    /// The parameters it depends on, ascending.
    pub fn params(&self) -> &[usize] {
        &self.params
    }

    /// The constant value where it reads no parameter.
    pub fn as_constant(&self) -> Option<f64> {
        self.params.is_empty().then(|| self.value(&[]))
    }

    pub fn value(&self, theta: &[f64]) -> f64 {
        self.tape.eval(&|&i: &usize| theta[i])
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
                self.tape
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
        let parsed = parse(text).unwrap();
        let mut tape = Tape::default();
        let root = parsed
            .copy_into(parsed.len() - 1, &mut tape, &mut |n: &String, t| {
                let i = names.iter().position(|m| m == n).ok_or(n.clone())?;
                Ok::<_, String>(t.push(Op::Leaf(i)))
            })
            .unwrap();
        ParamExpr::new(&tape, root)
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
            ("(a+b", "ends where ')' is missing"),
            ("pow(a, b", "ends where ')' is missing"),
            ("(a+b c", "')' expected at column 6"),
            ("pow(a)", "takes 2 argument"),
            ("1.2.3", "not a number"),
            (deep.as_str(), "nests deeper"),
            (signs.as_str(), "nests deeper"),
        ] {
            let err = parse(text).unwrap_err();
            assert!(err.contains(says), "{text}: {err}");
        }
    }

    #[test]
    fn long_expressions_evaluate_without_recursion() {
        // 20,000 terms: a left-deep chain as long as the text, evaluated in one loop (a tree
        // would recurse 20,000 levels and overflow a thread's stack).
        let text = vec!["a"; 20_000].join(" + ");
        let e = resolved(&text, &["a"]);
        let mut g = Vec::new();
        let v = std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(move || {
                let v = e.value_grad(&[0.5], &mut g);
                (v, g)
            })
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(v, (10_000.0, vec![20_000.0]));
    }

    #[test]
    fn a_shared_entry_is_copied_once() {
        // ((a+a)+(a+a)) … twenty levels: 2^20 paths, 21 entries.
        let mut tape = Tape::default();
        let mut top = tape.push(Op::Leaf(0));
        for _ in 0..20 {
            top = tape.push(Op::Add(top, top));
        }
        let e = ParamExpr::new(&tape, top);
        assert_eq!(e.size(), 21);
        assert_eq!(e.value(&[1.0]), 1_048_576.0);
    }
}
