//! Parameters, functions and expressions: every value a distribution reads, built once on one
//! tape (a DAG), with cycles named and the depth and size bounded.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;

use ns_core::Result;
use serde_json::Value;

use super::{FLOW_DIST, MAX_NESTING};
use crate::expr::{self, Op, ParamExpr, Tape};
use crate::flow::FlowPdf;
use crate::model::Axis;
use ns_hs3::{Variable, invalid};

/// The most operations one value's expression may take (functions built from functions
/// included; a function used twice counts once).
const MAX_EXPRESSION_NODES: usize = 100_000;

pub(super) struct Reader<'a> {
    pub(super) distributions: BTreeMap<&'a str, &'a Value>,
    pub(super) functions: BTreeMap<&'a str, &'a Value>,
    pub(super) variables: HashMap<String, Variable>,
    /// Fit parameters in order of the parameter point, then of first use.
    pub(super) order: Vec<String>,
    pub(super) params: Vec<String>,
    pub(super) globals: Vec<String>,
    /// Every expression read so far, each function once (a DAG: a function used twice is one
    /// entry, however deep the sharing).
    pub(super) tape: Tape<usize>,
    /// Functions on the tape, by name.
    pub(super) built: HashMap<String, usize>,
    /// Functions being built (to refuse cycles and bound the depth).
    pub(super) expanding: Vec<String>,
    /// Flows loaded so far, by manifest path (a flow used twice is loaded once).
    pub(super) flows: HashMap<PathBuf, Arc<FlowPdf>>,
}

impl<'a> Reader<'a> {
    fn parameter(&mut self, name: &str) -> usize {
        match self.params.iter().position(|p| p == name) {
            Some(i) => i,
            None => {
                self.params.push(name.to_string());
                self.params.len() - 1
            }
        }
    }

    /// A reference to a value (a number, a numeric string, a function, a variable) as an
    /// expression over fit parameters: its entry on the tape. `observables` may not be read here.
    pub(super) fn value(&mut self, v: &Value, at: &str, observables: &[Axis]) -> Result<usize> {
        if let Some(x) = v.as_f64() {
            return Ok(self.tape.constant(x));
        }
        let name = v
            .as_str()
            .ok_or_else(|| invalid(format!("{at} must be a name or a number, not {v}")))?;
        self.named(name, at, observables)
    }

    /// The expression at `entry`, on its own, checked against the size limit.
    pub(super) fn expression(&self, entry: usize, at: &str) -> Result<ParamExpr> {
        let e = ParamExpr::new(&self.tape, entry);
        if e.size() > MAX_EXPRESSION_NODES {
            return Err(invalid(format!(
                "{at} expands to {} operations, more than the {MAX_EXPRESSION_NODES} nextstat reads in one value (functions built from functions); write it more compactly",
                e.size()
            )));
        }
        Ok(e)
    }

    /// [`value`](Self::value) as an expression on its own.
    pub(super) fn param_expr(
        &mut self,
        v: &Value,
        at: &str,
        observables: &[Axis],
    ) -> Result<ParamExpr> {
        let entry = self.value(v, at, observables)?;
        self.expression(entry, at)
    }

    fn named(&mut self, name: &str, at: &str, observables: &[Axis]) -> Result<usize> {
        if let Ok(x) = name.trim().parse::<f64>() {
            return Ok(self.tape.constant(x));
        }
        if observables.iter().any(|a| a.name == name) {
            return Err(invalid(format!(
                "{at} reads the observable '{name}', which only a distribution's x may"
            )));
        }
        if let Some(&entry) = self.built.get(name) {
            return Ok(entry);
        }
        if let Some(f) = self.functions.get(name).copied() {
            if self.expanding.iter().any(|e| e == name) {
                return Err(invalid(format!(
                    "function '{name}' depends on itself: {} → {name}",
                    self.expanding.join(" → ")
                )));
            }
            if self.expanding.len() >= MAX_NESTING {
                return Err(invalid(format!(
                    "functions nest deeper than {MAX_NESTING} levels ({} → … → {name}); nextstat reads at most {MAX_NESTING}",
                    self.expanding[0]
                )));
            }
            self.expanding.push(name.to_string());
            let e = self.function(name, f, observables);
            self.expanding.pop();
            let entry = e?;
            self.expression(entry, &format!("function '{name}'"))?;
            self.built.insert(name.to_string(), entry);
            return Ok(entry);
        }
        let var = self.variables.get(name).cloned().unwrap_or_default();
        if var.constant {
            return var.value.map(|v| self.tape.constant(v)).ok_or_else(|| {
                invalid(format!(
                    "{at}: the constant '{name}' has no value in the parameter point"
                ))
            });
        }
        if self.distributions.contains_key(name) {
            return Err(invalid(format!(
                "{at} names the distribution '{name}' where a value is expected"
            )));
        }
        if !self.variables.contains_key(name) {
            return Err(invalid(format!(
                "{at} refers to '{name}', which is no parameter (in the parameter point or the domains), function or number"
            )));
        }
        let slot = self.parameter(name);
        Ok(self.tape.push(Op::Leaf(slot)))
    }

    fn function(&mut self, name: &str, f: &Value, observables: &[Axis]) -> Result<usize> {
        let kind = f.get("type").and_then(Value::as_str).unwrap_or("");
        let at = |key: &str| format!("function '{name}' ({kind}) key '{key}'");
        let list = |this: &mut Self, key: &str| -> Result<Vec<usize>> {
            let items = f.get(key).and_then(Value::as_array).ok_or_else(|| {
                invalid(format!("function '{name}' ({kind}) has no list '{key}'"))
            })?;
            items
                .iter()
                .map(|v| this.value(v, &at(key), observables))
                .collect()
        };
        match kind {
            "generic_function" => {
                let text = f.get("expression").and_then(Value::as_str).ok_or_else(|| {
                    invalid(format!(
                        "function '{name}' (generic_function) has no \"expression\""
                    ))
                })?;
                let parsed = expr::parse(text)
                    .map_err(|e| invalid(format!("function '{name}' (generic_function): {e}")))?;
                let mut resolved: HashMap<&str, usize> = HashMap::new();
                for op in parsed.ops() {
                    if let Op::Leaf(leaf) = op
                        && !resolved.contains_key(leaf.as_str())
                    {
                        let entry = self.named(leaf, &format!("function '{name}'"), observables)?;
                        resolved.insert(leaf, entry);
                    }
                }
                parsed.copy_into(parsed.len() - 1, &mut self.tape, &mut |leaf, _| {
                    Ok(resolved[leaf.as_str()])
                })
            }
            "product" => {
                let factors = list(self, "factors")?;
                Ok(self.tape.product(&factors))
            }
            "sum" => {
                let summands = list(self, "summands")?;
                Ok(self.tape.sum(&summands))
            }
            other => Err(invalid(format!(
                "function '{name}' has type '{other}', which nextstat does not read (generic_function, product, sum)"
            ))),
        }
    }

    /// Whether a distribution reads an observable, itself or through the distributions it
    /// names: to tell constraints (no observable) from densities. Each distribution is looked
    /// at once (a shared or cyclic reference is not followed twice; `build` names cycles).
    pub(super) fn reads_observable(&self, name: &str, observables: &[Axis]) -> bool {
        let mut seen: Vec<&str> = vec![name];
        let mut todo: Vec<&str> = vec![name];
        while let Some(next) = todo.pop() {
            let Some(d) = self.distributions.get(next) else {
                continue;
            };
            if matches!(
                d.get("type").and_then(Value::as_str),
                Some("histogram_dist" | FLOW_DIST)
            ) {
                return true;
            }
            let mut names = Vec::new();
            collect_strings(d, &mut names);
            for n in names {
                if observables.iter().any(|a| a.name == n) {
                    return true;
                }
                if self.distributions.contains_key(n) && !seen.contains(&n) {
                    seen.push(n);
                    todo.push(n);
                }
            }
        }
        false
    }

    /// The fit parameters' values at the parameter point (0 where it has none).
    pub(super) fn init_theta(&self) -> Vec<f64> {
        self.params
            .iter()
            .map(|p| self.variables.get(p).and_then(|v| v.value).unwrap_or(0.0))
            .collect()
    }
}

pub(super) fn collect_strings<'v>(v: &'v Value, out: &mut Vec<&'v str>) {
    match v {
        Value::String(s) => out.push(s),
        Value::Array(a) => a.iter().for_each(|x| collect_strings(x, out)),
        Value::Object(o) => o
            .iter()
            .filter(|(k, _)| *k != "name" && *k != "type")
            .for_each(|(_, x)| collect_strings(x, out)),
        _ => {}
    }
}
