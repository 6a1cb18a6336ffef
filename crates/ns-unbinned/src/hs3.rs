//! Reading HS3 JSON (v0.2) into an [`UnbinnedModel`]: the standard's spellings and ROOT 6.40's
//! dialect (`ARGUS_dist`, `crystalball_doublesided_dist`, an exponential whose `c` is the
//! `generic_function` "-c", analyses with `domains` and `parameters_of_interest`, constraints as
//! factors of a `product_dist` on `const` global observables, axes with a `"value"`).
//!
//! Choices written down (docs/unbinned.md): variables marked `const` in the parameter point are
//! constants (global observables where a constraint reads them as its `x`); every other variable
//! a distribution reads is a fit parameter, in the order of the parameter point; an event outside
//! its observable's range is refused (an error naming it), as is a non-finite value or weight.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;

use ns_core::{Error, FileAccess, Result};
use serde_json::Value;

use crate::UnbinnedModel;
use crate::events::ChannelEvents;
use crate::expr::{self, Op, ParamExpr, Tape};
use crate::flow::{FlowLeaf, FlowPdf};
use crate::model::{Axis, Channel, Constraint, Node, NodeKind};
use crate::shapes::{Histogram, Shape, Tails};

/// The distribution type of a flow PDF (a nextstat extension: other readers skip it).
pub const FLOW_DIST: &str = "nextstat:flow_dist";

/// The most operations one value's expression may take (functions built from functions
/// included; a function used twice counts once).
const MAX_EXPRESSION_NODES: usize = 100_000;

/// The deepest functions may be built from functions, and distributions from distributions:
/// a bound on the reader's recursion, far beyond what models need.
const MAX_NESTING: usize = 64;

/// Which analysis of the file to read, and which files (Parquet events, flow manifests) it may
/// open: none by default.
#[derive(Clone, Debug)]
pub struct ReadOptions<'a> {
    pub analysis: Option<&'a str>,
    pub files: FileAccess<'a>,
}

impl Default for ReadOptions<'_> {
    fn default() -> Self {
        ReadOptions {
            analysis: None,
            files: FileAccess::Denied,
        }
    }
}

/// Whether a JSON document is an HS3 model (rather than a pyhf workspace).
pub fn is_hs3(doc: &Value) -> bool {
    doc.get("distributions").is_some_and(Value::is_array)
        && (doc.get("likelihoods").is_some() || doc.pointer("/metadata/hs3_version").is_some())
}

fn invalid(msg: String) -> Error {
    Error::InvalidModel(msg)
}

/// Named entries of a top-level array.
fn index<'a>(doc: &'a Value, key: &str) -> Result<BTreeMap<&'a str, &'a Value>> {
    let mut out = BTreeMap::new();
    let Some(list) = doc.get(key) else {
        return Ok(out);
    };
    let list = list
        .as_array()
        .ok_or_else(|| invalid(format!("'{key}' must be a list")))?;
    for (i, entry) in list.iter().enumerate() {
        let name = entry
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| invalid(format!("{key}[{i}] has no \"name\"")))?;
        // ROOT writes a node shared by several channels once per use: identical repeats are one.
        if let Some(previous) = out.insert(name, entry)
            && previous != entry
        {
            return Err(invalid(format!(
                "{key}: two different entries are named '{name}'"
            )));
        }
    }
    Ok(out)
}

fn str_list<'a>(v: &'a Value, what: &str) -> Result<Vec<&'a str>> {
    v.as_array()
        .ok_or_else(|| invalid(format!("{what} must be a list of names")))?
        .iter()
        .map(|x| {
            x.as_str()
                .ok_or_else(|| invalid(format!("{what} must be a list of names")))
        })
        .collect()
}

fn number(v: &Value, what: &str) -> Result<f64> {
    v.as_f64()
        .ok_or_else(|| invalid(format!("{what} must be a number, not {v}")))
}

/// `entry[key]` where given: a number, else an error naming `at`.
fn optional_number(entry: &Value, key: &str, at: &str) -> Result<Option<f64>> {
    match entry.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_f64()
            .map(Some)
            .ok_or_else(|| invalid(format!("{at}: '{key}' must be a number, not {v}"))),
    }
}

/// The `min`/`max` of a parameter or axis where given: both numbers, min < max.
fn optional_range(entry: &Value, at: &str) -> Result<Option<(f64, f64)>> {
    match (
        optional_number(entry, "min", at)?,
        optional_number(entry, "max", at)?,
    ) {
        (Some(lo), Some(hi)) if lo <= hi => Ok(Some((lo, hi))),
        (Some(lo), Some(hi)) => Err(invalid(format!(
            "{at}: its range [{lo}, {hi}] is empty (min must not exceed max)"
        ))),
        _ => Ok(None),
    }
}

/// A variable of the parameter point and the domains.
#[derive(Clone, Debug, Default)]
struct Variable {
    value: Option<f64>,
    constant: bool,
    range: Option<(f64, f64)>,
}

struct Reader<'a> {
    distributions: BTreeMap<&'a str, &'a Value>,
    functions: BTreeMap<&'a str, &'a Value>,
    variables: HashMap<String, Variable>,
    /// Fit parameters in order of the parameter point, then of first use.
    order: Vec<String>,
    params: Vec<String>,
    globals: Vec<String>,
    /// Every expression read so far, each function once (a DAG: a function used twice is one
    /// entry, however deep the sharing).
    tape: Tape<usize>,
    /// Functions on the tape, by name.
    built: HashMap<String, usize>,
    /// Functions being built (to refuse cycles and bound the depth).
    expanding: Vec<String>,
    /// Flows loaded so far, by manifest path (a flow used twice is loaded once).
    flows: HashMap<PathBuf, Arc<FlowPdf>>,
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
    fn value(&mut self, v: &Value, at: &str, observables: &[Axis]) -> Result<usize> {
        if let Some(x) = v.as_f64() {
            return Ok(self.tape.constant(x));
        }
        let name = v
            .as_str()
            .ok_or_else(|| invalid(format!("{at} must be a name or a number, not {v}")))?;
        self.named(name, at, observables)
    }

    /// The expression at `entry`, on its own, checked against the size limit.
    fn expression(&self, entry: usize, at: &str) -> Result<ParamExpr> {
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
    fn param_expr(&mut self, v: &Value, at: &str, observables: &[Axis]) -> Result<ParamExpr> {
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
    fn reads_observable(&self, name: &str, observables: &[Axis]) -> bool {
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
    fn init_theta(&self) -> Vec<f64> {
        self.params
            .iter()
            .map(|p| self.variables.get(p).and_then(|v| v.value).unwrap_or(0.0))
            .collect()
    }
}

fn collect_strings<'v>(v: &'v Value, out: &mut Vec<&'v str>) {
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

/// Builds one channel's nodes.
/// A distribution type's builder: the node of distribution `name` from its JSON (of type
/// `kind`); the flag says whether it may carry the channel's count.
type Builder = fn(&mut ChannelBuilder<'_, '_>, &Value, &str, &str, bool) -> Result<usize>;

/// Every distribution type nextstat reads, with its builder: the dispatch, and the list an
/// unknown type's error gives.
const DISTRIBUTIONS: [(&str, Builder); 13] = [
    ("gaussian_dist", |b, d, name, kind, _| {
        b.leaf((d, name, kind), Shape::Gaussian, "x", &["mean", "sigma"])
    }),
    ("normal_dist", |b, d, name, kind, _| {
        b.leaf((d, name, kind), Shape::Gaussian, "x", &["mean", "sigma"])
    }),
    ("exponential_dist", |b, d, name, kind, _| {
        b.leaf((d, name, kind), Shape::Exponential, "x", &["c"])
    }),
    ("crystalball_dist", |b, d, name, kind, _| {
        b.crystal_ball(d, name, kind)
    }),
    ("crystalball_doublesided_dist", |b, d, name, kind, _| {
        b.crystal_ball(d, name, kind)
    }),
    ("argus_dist", |b, d, name, kind, _| b.argus(d, name, kind)),
    ("ARGUS_dist", |b, d, name, kind, _| b.argus(d, name, kind)),
    ("chebychev_dist", |b, d, name, kind, _| {
        b.polynomial(d, name, kind)
    }),
    ("polynomial_dist", |b, d, name, kind, _| {
        b.polynomial(d, name, kind)
    }),
    ("histogram_dist", |b, d, name, _, _| b.histogram(d, name)),
    ("product_dist", |b, d, name, kind, top| {
        b.product(d, name, kind, top)
    }),
    ("mixture_dist", |b, d, name, _, top| b.mixture(d, name, top)),
    (FLOW_DIST, |b, d, name, _, _| b.flow(d, name)),
];

struct ChannelBuilder<'r, 'a> {
    reader: &'r mut Reader<'a>,
    /// The files flow manifests may be read from.
    files: FileAccess<'r>,
    axes: Vec<Axis>,
    nodes: Vec<Node>,
    constraints: Vec<(String, String, ParamExpr, ParamExpr)>,
    /// The expected count where an extended mixture sits at the top (or under products).
    count: Option<ParamExpr>,
    /// Nodes built, by distribution and whether at the top: a distribution named twice is
    /// one node (the arena is a DAG; its passes add a shared node's adjoints).
    built: HashMap<(String, bool), usize>,
    /// The distributions being built, outermost first (to refuse cycles and bound the depth).
    building: Vec<String>,
}

impl ChannelBuilder<'_, '_> {
    fn key<'v>(d: &'v Value, name: &str, kind: &str, key: &str) -> Result<&'v Value> {
        d.get(key)
            .ok_or_else(|| invalid(format!("distribution '{name}' ({kind}) has no key '{key}'")))
    }

    fn arg(&mut self, d: &Value, name: &str, kind: &str, key: &str) -> Result<ParamExpr> {
        let v = Self::key(d, name, kind, key)?;
        self.reader.param_expr(
            v,
            &format!("distribution '{name}' ({kind}) key '{key}'"),
            &self.axes,
        )
    }

    fn observable(&self, d: &Value, name: &str, kind: &str, key: &str) -> Result<usize> {
        let v = Self::key(d, name, kind, key)?;
        let obs = v.as_str().unwrap_or("");
        self.axes.iter().position(|a| a.name == obs).ok_or_else(|| {
            invalid(format!(
                "distribution '{name}' ({kind}) key '{key}' is '{}', which is not an observable of its data (axes: {})",
                v.as_str().unwrap_or(&v.to_string()),
                self.axes.iter().map(|a| a.name.as_str()).collect::<Vec<_>>().join(", ")
            ))
        })
    }

    fn push(&mut self, name: &str, kind: NodeKind) -> usize {
        self.nodes.push(Node {
            name: name.to_string(),
            kind,
        });
        self.nodes.len() - 1
    }

    /// The node of distribution `name`; `top`: whether it may carry the channel's count.
    fn build(&mut self, name: &str, top: bool) -> Result<usize> {
        if let Some(&node) = self.built.get(&(name.to_string(), top)) {
            return Ok(node);
        }
        if self.building.iter().any(|b| b == name) {
            return Err(invalid(format!(
                "distribution '{name}' contains itself: {} → {name}",
                self.building.join(" → ")
            )));
        }
        if self.building.len() >= MAX_NESTING {
            return Err(invalid(format!(
                "distributions nest deeper than {MAX_NESTING} levels ({} → … → {name}); nextstat reads at most {MAX_NESTING}",
                self.building[0]
            )));
        }
        self.building.push(name.to_string());
        let node = self.build_new(name, top);
        self.building.pop();
        let node = node?;
        self.built.insert((name.to_string(), top), node);
        Ok(node)
    }

    fn build_new(&mut self, name: &str, top: bool) -> Result<usize> {
        let d = *self.reader.distributions.get(name).ok_or_else(|| {
            invalid(format!(
                "distribution '{name}' is referenced but not defined"
            ))
        })?;
        let kind = d.get("type").and_then(Value::as_str).unwrap_or("");
        if kind.is_empty() {
            return Err(invalid(format!("distribution '{name}' has no \"type\"")));
        }
        match DISTRIBUTIONS
            .iter()
            .find(|(type_name, _)| *type_name == kind)
        {
            Some((_, builder)) => builder(self, d, name, kind, top),
            None => Err(invalid(format!(
                "distribution '{name}' has type '{kind}', which nextstat does not read ({})",
                DISTRIBUTIONS.map(|(type_name, _)| type_name).join(", ")
            ))),
        }
    }

    /// A leaf of `shape` over observable key `x` with arguments `keys`.
    fn leaf(
        &mut self,
        (d, name, kind): (&Value, &str, &str),
        shape: Shape,
        x: &str,
        keys: &[&str],
    ) -> Result<usize> {
        let column = self.observable(d, name, kind, x)?;
        let args = keys
            .iter()
            .map(|k| self.arg(d, name, kind, k))
            .collect::<Result<Vec<_>>>()?;
        Ok(self.push(
            name,
            NodeKind::Leaf {
                shape,
                column,
                args,
            },
        ))
    }

    fn crystal_ball(&mut self, d: &Value, name: &str, kind: &str) -> Result<usize> {
        if d.get("alpha").is_some() {
            return self.leaf(
                (d, name, kind),
                Shape::CrystalBall(Tails::OneSided),
                "m",
                &["m0", "sigma", "alpha", "n"],
            );
        }
        let (left, right) = (d.get("alpha_L").is_some(), d.get("alpha_R").is_some());
        if !left && !right {
            return Err(invalid(format!(
                "distribution '{name}' ({kind}) has neither 'alpha' nor 'alpha_L'/'alpha_R'"
            )));
        }
        let column = self.observable(d, name, kind, "m")?;
        let sigma_l = self.arg(
            d,
            name,
            kind,
            if d.get("sigma_L").is_some() {
                "sigma_L"
            } else {
                "sigma"
            },
        )?;
        let sigma_r = match d.get("sigma_R") {
            Some(_) => self.arg(d, name, kind, "sigma_R")?,
            None => sigma_l.clone(),
        };
        let tail = |this: &mut Self, present: bool, a: &str, n: &str| -> Result<[ParamExpr; 2]> {
            Ok(if present {
                [this.arg(d, name, kind, a)?, this.arg(d, name, kind, n)?]
            } else {
                [ParamExpr::constant(0.0), ParamExpr::constant(0.0)]
            })
        };
        let [al, nl] = tail(self, left, "alpha_L", "n_L")?;
        let [ar, nr] = tail(self, right, "alpha_R", "n_R")?;
        let args = vec![
            self.arg(d, name, kind, "m0")?,
            sigma_l,
            sigma_r,
            al,
            nl,
            ar,
            nr,
        ];
        Ok(self.push(
            name,
            NodeKind::Leaf {
                shape: Shape::CrystalBall(Tails::DoubleSided { left, right }),
                column,
                args,
            },
        ))
    }

    fn argus(&mut self, d: &Value, name: &str, kind: &str) -> Result<usize> {
        let id = self.leaf(
            (d, name, kind),
            Shape::Argus,
            "mass",
            &["resonance", "slope", "power"],
        )?;
        if let NodeKind::Leaf { column, .. } = self.nodes[id].kind
            && self.axes[column].lo < 0.0
        {
            return Err(invalid(format!(
                "distribution '{name}' (ARGUS) needs its observable '{}' non-negative, but its range starts at {}",
                self.axes[column].name, self.axes[column].lo
            )));
        }
        Ok(id)
    }

    /// A Chebychev series (`chebychev_dist`) or power series (`polynomial_dist`).
    fn polynomial(&mut self, d: &Value, name: &str, kind: &str) -> Result<usize> {
        let coefs = Self::key(d, name, kind, "coefficients")?
            .as_array()
            .ok_or_else(|| {
                invalid(format!(
                    "distribution '{name}' ({kind}) key 'coefficients' must be a list"
                ))
            })?
            .clone();
        if coefs.len() > crate::shapes::MAX_ARGS {
            return Err(invalid(format!(
                "distribution '{name}' ({kind}) has {} coefficients: nextstat reads at most {}",
                coefs.len(),
                crate::shapes::MAX_ARGS
            )));
        }
        let column = self.observable(d, name, kind, "x")?;
        let args = coefs
            .iter()
            .map(|c| {
                self.reader.param_expr(
                    c,
                    &format!("distribution '{name}' ({kind}) coefficients"),
                    &self.axes,
                )
            })
            .collect::<Result<Vec<_>>>()?;
        let shape = if kind == "chebychev_dist" {
            Shape::Chebychev(args.len())
        } else {
            Shape::Polynomial(args.len())
        };
        Ok(self.push(
            name,
            NodeKind::Leaf {
                shape,
                column,
                args,
            },
        ))
    }

    fn product(&mut self, d: &Value, name: &str, kind: &str, top: bool) -> Result<usize> {
        let factors = str_list(
            Self::key(d, name, kind, "factors")?,
            &format!("distribution '{name}' factors"),
        )?;
        let mut children = Vec::new();
        for f in factors {
            if self.reader.reads_observable(f, &self.axes) {
                children.push(self.build(f, top)?);
            } else {
                self.constraint(f)?;
            }
        }
        match children.as_slice() {
            [] => Err(invalid(format!(
                "product '{name}' has no factor over an observable of its data"
            ))),
            [one] => Ok(*one),
            _ => Ok(self.push(name, NodeKind::Product(children))),
        }
    }

    /// `{"type": "nextstat:flow_dist", "manifest": PATH, "x": [observables…]?, "context":
    /// {name: value}?}`: the flow of the manifest over the channel's observables `x` (default:
    /// the manifest's names), its context values given by name.
    fn flow(&mut self, d: &Value, name: &str) -> Result<usize> {
        let at = format!("distribution '{name}' ({FLOW_DIST})");
        let manifest = d
            .get("manifest")
            .and_then(Value::as_str)
            .ok_or_else(|| invalid(format!("{at} has no 'manifest' path")))?;
        let path = self.files.resolve(manifest)?;
        let flow = match self.reader.flows.get(&path) {
            Some(f) => f.clone(),
            None => {
                let f = FlowPdf::load(&path)?;
                self.reader.flows.insert(path.clone(), f.clone());
                f
            }
        };
        let names: Vec<&str> = match d.get("x") {
            Some(x) => str_list(x, &format!("{at} x"))?,
            None => flow.observables.iter().map(|a| a.name.as_str()).collect(),
        };
        if names.len() != flow.observables.len() {
            return Err(invalid(format!(
                "{at}: 'x' names {} observables, the flow takes {}",
                names.len(),
                flow.observables.len()
            )));
        }
        let mut columns = Vec::new();
        let mut bounds = Vec::new();
        for (obs, declared) in names.iter().zip(&flow.observables) {
            let c = self
                .axes
                .iter()
                .position(|a| a.name == *obs)
                .ok_or_else(|| {
                    invalid(format!(
                        "{at}: '{obs}' is not an observable of its data (axes: {})",
                        self.axes
                            .iter()
                            .map(|a| a.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ))
                })?;
            let axis = &self.axes[c];
            if axis.lo < declared.lo || axis.hi > declared.hi {
                return Err(invalid(format!(
                    "{at}: observable '{obs}' spans [{}, {}], beyond the flow's range [{}, {}] for '{}' (its manifest)",
                    axis.lo, axis.hi, declared.lo, declared.hi, declared.name
                )));
            }
            columns.push(c);
            bounds.push((axis.lo, axis.hi));
        }
        let context = d.get("context");
        if let Some(c) = context
            && !c.is_object()
        {
            return Err(invalid(format!(
                "{at}: 'context' must map the flow's context names to values"
            )));
        }
        if let Some(extra) = context
            .and_then(Value::as_object)
            .and_then(|c| c.keys().find(|k| !flow.context.contains(k)))
        {
            return Err(invalid(format!(
                "{at}: the flow has no context '{extra}' (it has: {})",
                flow.context.join(", ")
            )));
        }
        let args = flow
            .context
            .iter()
            .map(|c| {
                let v = context.and_then(|m| m.get(c)).ok_or_else(|| {
                    invalid(format!("{at}: no value for the flow's context '{c}'"))
                })?;
                self.reader
                    .param_expr(v, &format!("{at} context '{c}'"), &self.axes)
            })
            .collect::<Result<Vec<_>>>()?;
        let theta = self.reader.init_theta();
        let init: Vec<f64> = args.iter().map(|a| a.value(&theta)).collect();
        let leaf = FlowLeaf::new(flow, columns, bounds, &init)?;
        Ok(self.push(
            name,
            NodeKind::Flow {
                leaf: Box::new(leaf),
                args,
            },
        ))
    }

    fn histogram(&mut self, d: &Value, name: &str) -> Result<usize> {
        let at = format!("distribution '{name}' (histogram_dist)");
        let data = d
            .get("data")
            .ok_or_else(|| invalid(format!("{at} has no key 'data'")))?;
        let axes = data
            .get("axes")
            .and_then(Value::as_array)
            .ok_or_else(|| invalid(format!("{at}: data has no 'axes'")))?;
        let [axis] = axes.as_slice() else {
            return Err(invalid(format!(
                "{at} has {} axes: nextstat reads one-dimensional histograms",
                axes.len()
            )));
        };
        let obs = axis.get("name").and_then(Value::as_str).unwrap_or("");
        let column = self
            .axes
            .iter()
            .position(|a| a.name == obs)
            .ok_or_else(|| {
                invalid(format!(
                    "{at}: its axis '{obs}' is not an observable of its data"
                ))
            })?;
        let contents: Vec<f64> = data
            .get("contents")
            .and_then(Value::as_array)
            .ok_or_else(|| invalid(format!("{at}: data has no 'contents'")))?
            .iter()
            .map(|c| number(c, &format!("{at} contents")))
            .collect::<Result<_>>()?;
        let lo = number(
            axis.get("min").unwrap_or(&Value::Null),
            &format!("{at} axis min"),
        )?;
        let hi = number(
            axis.get("max").unwrap_or(&Value::Null),
            &format!("{at} axis max"),
        )?;
        let nbins = axis
            .get("nbins")
            .and_then(Value::as_u64)
            .unwrap_or(contents.len() as u64) as usize;
        if nbins != contents.len() || contents.is_empty() || !(hi > lo) {
            return Err(invalid(format!(
                "{at}: {} contents for {nbins} bins on [{lo}, {hi}]",
                contents.len()
            )));
        }
        if let Some(c) = contents.iter().find(|c| !(**c >= 0.0 && c.is_finite())) {
            return Err(invalid(format!(
                "{at}: a bin content is {c}; contents must be finite and non-negative"
            )));
        }
        let range = &self.axes[column];
        if lo > range.lo || hi < range.hi {
            return Err(invalid(format!(
                "{at} covers [{lo}, {hi}], less than the range [{}, {}] of '{}'",
                range.lo, range.hi, range.name
            )));
        }
        let h = Histogram { lo, hi, contents };
        if !(h.contents.iter().sum::<f64>() > 0.0) {
            return Err(invalid(format!("{at} is empty")));
        }
        Ok(self.push(
            name,
            NodeKind::Leaf {
                shape: Shape::Histogram(h),
                column,
                args: Vec::new(),
            },
        ))
    }

    fn mixture(&mut self, d: &Value, name: &str, top: bool) -> Result<usize> {
        let kind = "mixture_dist";
        let summands = str_list(
            Self::key(d, name, kind, "summands")?,
            &format!("distribution '{name}' summands"),
        )?;
        let coefs = Self::key(d, name, kind, "coefficients")?
            .as_array()
            .ok_or_else(|| {
                invalid(format!(
                    "distribution '{name}' (mixture_dist) coefficients must be a list"
                ))
            })?
            .clone();
        let extended = d.get("extended").and_then(Value::as_bool).unwrap_or(false);
        let mut children = Vec::new();
        for s in &summands {
            children.push(self.build(s, false)?);
        }
        let at = format!("distribution '{name}' (mixture_dist) coefficients");
        let mut c: Vec<usize> = coefs
            .iter()
            .map(|v| self.reader.value(v, &at, &self.axes))
            .collect::<Result<_>>()?;
        let n = summands.len();
        if extended {
            if c.len() != n {
                return Err(invalid(format!(
                    "{at}: an extended mixture needs one yield per summand ({n}), not {}",
                    c.len()
                )));
            }
            if !top {
                return Err(invalid(format!(
                    "extended mixture '{name}' sits inside another mixture: nextstat reads extended mixtures at the top of a channel (or under products)"
                )));
            }
            if self.count.is_some() {
                return Err(invalid(format!(
                    "channel has two extended mixtures ('{name}' is the second)"
                )));
            }
            let total = self.reader.tape.sum(&c);
            self.count = Some(self.reader.expression(total, &at)?);
        } else if c.len() + 1 == n {
            // Fractions: the last summand takes 1 − Σ.
            let tape = &mut self.reader.tape;
            let (one, total) = (tape.constant(1.0), tape.sum(&c));
            c.push(tape.push(Op::Sub(one, total)));
        } else if c.len() == n {
            // All coefficients without extension: normalised to fractions.
            let tape = &mut self.reader.tape;
            let total = tape.sum(&c);
            c = c
                .into_iter()
                .map(|ci| tape.push(Op::Div(ci, total)))
                .collect();
        } else {
            return Err(invalid(format!(
                "{at}: {} coefficients for {n} summands (give {n} or {})",
                c.len(),
                n - 1
            )));
        }
        let coefs = c
            .into_iter()
            .map(|ci| self.reader.expression(ci, &at))
            .collect::<Result<_>>()?;
        Ok(self.push(name, NodeKind::Mixture { children, coefs }))
    }

    /// A factor over no observable: a Gaussian constraint on a global observable.
    fn constraint(&mut self, name: &str) -> Result<()> {
        let d = *self.reader.distributions.get(name).ok_or_else(|| {
            invalid(format!(
                "distribution '{name}' is referenced but not defined"
            ))
        })?;
        let kind = d.get("type").and_then(Value::as_str).unwrap_or("");
        if !matches!(kind, "gaussian_dist" | "normal_dist") {
            return Err(invalid(format!(
                "distribution '{name}' ({kind}) reads no observable of its data, so it is a constraint; nextstat reads Gaussian constraints (gaussian_dist)"
            )));
        }
        let x = Self::key(d, name, kind, "x")?.as_str().unwrap_or("");
        let is_global = self.reader.variables.get(x).is_some_and(|v| v.constant);
        if !is_global {
            return Err(invalid(format!(
                "constraint '{name}': its x '{x}' must be a global observable (a variable marked const in the parameter point)"
            )));
        }
        let at = |k: &str| format!("constraint '{name}' key '{k}'");
        let mean =
            self.reader
                .param_expr(Self::key(d, name, kind, "mean")?, &at("mean"), &self.axes)?;
        let sigma =
            self.reader
                .param_expr(Self::key(d, name, kind, "sigma")?, &at("sigma"), &self.axes)?;
        self.constraints
            .push((name.to_string(), x.to_string(), mean, sigma));
        Ok(())
    }
}

/// The events of an unbinned data entry, checked against its axes.
fn read_events(entry: &Value, name: &str, files: FileAccess) -> Result<(Vec<Axis>, ChannelEvents)> {
    let kind = entry.get("type").and_then(Value::as_str).unwrap_or("");
    match kind {
        "unbinned" => {}
        crate::parquet::TYPE => return crate::parquet::read_entry(entry, name, files),
        "binned" => {
            return Err(invalid(format!(
                "data '{name}' is binned: nextstat reads binned models as pyhf JSON workspaces"
            )));
        }
        other => {
            return Err(invalid(format!(
                "data '{name}' has type '{other}'; nextstat reads 'unbinned' and '{}'",
                crate::parquet::TYPE
            )));
        }
    }
    let axes = read_axes(entry, name)?;
    let rows = entry
        .get("entries")
        .and_then(Value::as_array)
        .ok_or_else(|| invalid(format!("data '{name}' has no list 'entries'")))?;
    let mut columns = vec![Vec::with_capacity(rows.len()); axes.len()];
    for (i, row) in rows.iter().enumerate() {
        let row = row
            .as_array()
            .filter(|r| r.len() == axes.len())
            .ok_or_else(|| {
                invalid(format!(
                    "data '{name}' entry {i} must be a list of {} numbers (one per axis)",
                    axes.len()
                ))
            })?;
        for (d, v) in row.iter().enumerate() {
            columns[d].push(v.as_f64().ok_or_else(|| {
                invalid(format!("data '{name}' entry {i} holds {v}, not a number"))
            })?);
        }
    }
    let weights = match entry.get("weights") {
        None | Some(Value::Null) => None,
        Some(w) => Some(
            w.as_array()
                .ok_or_else(|| invalid(format!("data '{name}' weights must be a list")))?
                .iter()
                .map(|x| number(x, &format!("data '{name}' weight")))
                .collect::<Result<Vec<_>>>()?,
        ),
    };
    let events = ChannelEvents { columns, weights };
    check_events(&events, &axes, &format!("data '{name}'"))?;
    Ok((axes, events))
}

pub(crate) fn read_axes(entry: &Value, name: &str) -> Result<Vec<Axis>> {
    let axes = entry
        .get("axes")
        .ok_or_else(|| invalid(format!("data '{name}' has no list 'axes'")))?;
    let axes = read_axes_list(axes, &format!("data '{name}'"))?;
    if axes.is_empty() {
        return Err(invalid(format!("data '{name}' has no axes")));
    }
    Ok(axes)
}

/// A list of axes `[{"name", "min", "max"}]`; `what` names its owner in messages.
pub(crate) fn read_axes_list(list: &Value, what: &str) -> Result<Vec<Axis>> {
    let axes = list
        .as_array()
        .ok_or_else(|| invalid(format!("{what}: the axes must be a list")))?;
    axes.iter()
        .enumerate()
        .map(|(i, a)| {
            let axis = a.get("name").and_then(Value::as_str).ok_or_else(|| invalid(format!("{what} axis {i} has no name")))?;
            let bound = |k: &str| number(a.get(k).unwrap_or(&Value::Null), &format!("{what} axis '{axis}' {k}"));
            let (lo, hi) = (bound("min")?, bound("max")?);
            if !(lo < hi && lo.is_finite() && hi.is_finite()) {
                return Err(invalid(format!("{what} axis '{axis}' has the range [{lo}, {hi}]; it must be finite and not empty")));
            }
            Ok(Axis { name: axis.to_string(), lo, hi })
        })
        .collect()
}

/// Every value finite and inside its axis's range; weights one per event and finite. `what`
/// names the events in messages ("data 'obs'").
pub(crate) fn check_events(events: &ChannelEvents, axes: &[Axis], what: &str) -> Result<()> {
    for (axis, col) in axes.iter().zip(&events.columns) {
        if let Some((i, x)) = col
            .iter()
            .enumerate()
            .find(|(_, x)| !(**x >= axis.lo && **x <= axis.hi))
        {
            return Err(Error::InvalidInput(format!(
                "{what}: event {i} has {} = {}, outside its range [{}, {}]: nextstat refuses events outside the observable's range (select them out, or widen the range)",
                axis.name,
                crate::model::short(*x),
                crate::model::short(axis.lo),
                crate::model::short(axis.hi)
            )));
        }
    }
    if let Some(w) = &events.weights {
        if w.len() != events.len() {
            return Err(Error::InvalidInput(format!(
                "{what} has {} weights for {} events",
                w.len(),
                events.len()
            )));
        }
        if let Some((i, x)) = w.iter().enumerate().find(|(_, x)| !x.is_finite()) {
            return Err(Error::InvalidInput(format!(
                "{what}: weight {i} is {}; weights must be finite",
                crate::model::short(*x)
            )));
        }
    }
    Ok(())
}

/// Read the model of an HS3 document.
pub fn read(doc: &Value, options: &ReadOptions) -> Result<UnbinnedModel> {
    if !is_hs3(doc) {
        return Err(invalid(
            "the document is not HS3: it has no 'distributions' and 'likelihoods'".into(),
        ));
    }
    let analyses = index(doc, "analyses")?;
    let likelihoods = index(doc, "likelihoods")?;
    let data = index(doc, "data")?;
    let domains = index(doc, "domains")?;
    let points = index(doc, "parameter_points")?;
    let analysis = match options.analysis {
        Some(a) => Some(*analyses.get(a).ok_or_else(|| {
            invalid(format!(
                "no analysis '{a}' (the file has: {})",
                analyses.keys().copied().collect::<Vec<_>>().join(", ")
            ))
        })?),
        None => doc
            .get("analyses")
            .and_then(Value::as_array)
            .and_then(|a| a.first()),
    };
    let likelihood_name = match analysis
        .and_then(|a| a.get("likelihood"))
        .and_then(Value::as_str)
    {
        Some(l) => l.to_string(),
        None => doc
            .get("likelihoods")
            .and_then(Value::as_array)
            .and_then(|l| l.first())
            .and_then(|l| l.get("name"))
            .and_then(Value::as_str)
            .ok_or_else(|| invalid("the file has no likelihood".into()))?
            .to_string(),
    };
    let likelihood = likelihoods.get(likelihood_name.as_str()).ok_or_else(|| {
        invalid(format!(
            "the analysis names the likelihood '{likelihood_name}', which is not in 'likelihoods'"
        ))
    })?;

    // Variables: the parameter point, then the domains (the analysis's first).
    let mut variables: HashMap<String, Variable> = HashMap::new();
    let mut order = Vec::new();
    let point_name = analysis
        .and_then(|a| a.get("init"))
        .and_then(Value::as_str)
        .unwrap_or("default_values");
    let point = points.get(point_name).copied().or_else(|| {
        doc.get("parameter_points")
            .and_then(Value::as_array)
            .and_then(|p| p.first())
    });
    if let Some(point) = point {
        let point_name = point
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or(point_name);
        let entries = match point.get("parameters") {
            None => &Vec::new(),
            Some(Value::Array(list)) => list,
            Some(_) => {
                return Err(invalid(format!(
                    "parameter point '{point_name}': 'parameters' must be a list"
                )));
            }
        };
        for (i, p) in entries.iter().enumerate() {
            let name = p.get("name").and_then(Value::as_str).ok_or_else(|| {
                invalid(format!(
                    "parameter point '{point_name}' parameters[{i}] has no \"name\""
                ))
            })?;
            let at = format!("parameter point '{point_name}' parameter '{name}'");
            if order.iter().any(|o| o == name) {
                return Err(invalid(format!(
                    "{at} is listed twice; give each parameter once"
                )));
            }
            let var = variables.entry(name.to_string()).or_default();
            var.value = optional_number(p, "value", &at)?;
            var.constant = match p.get("const") {
                None | Some(Value::Null) => false,
                Some(Value::Bool(b)) => *b,
                Some(other) => {
                    return Err(invalid(format!(
                        "{at} 'const' must be true or false, not {other}"
                    )));
                }
            };
            var.range = optional_range(p, &at)?;
            order.push(name.to_string());
        }
    }
    let mut domain_names: Vec<&str> = analysis
        .and_then(|a| a.get("domains"))
        .and_then(Value::as_array)
        .map(|d| d.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    domain_names.extend(
        domains
            .keys()
            .copied()
            .filter(|d| !domain_names.contains(d))
            .collect::<Vec<_>>(),
    );
    for dname in domain_names {
        let Some(domain) = domains.get(dname) else {
            return Err(invalid(format!(
                "the analysis names the domain '{dname}', which is not in 'domains'"
            )));
        };
        for a in domain
            .get("axes")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let name = a
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| invalid(format!("domain '{dname}': an axis has no \"name\"")))?;
            let range = optional_range(a, &format!("domain '{dname}' axis '{name}'"))?;
            let var = variables.entry(name.to_string()).or_default();
            if var.range.is_none() {
                var.range = range;
            }
        }
    }
    // The domains take precedence over a parameter point's own min/max.
    for dname in analysis
        .and_then(|a| a.get("domains"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        for a in domains
            .get(dname)
            .and_then(|d| d.get("axes"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let (Some(name), Some(lo), Some(hi)) = (
                a.get("name").and_then(Value::as_str),
                a.get("min").and_then(Value::as_f64),
                a.get("max").and_then(Value::as_f64),
            ) {
                variables.entry(name.to_string()).or_default().range = Some((lo, hi));
            }
        }
    }

    let mut reader = Reader {
        distributions: index(doc, "distributions")?,
        functions: index(doc, "functions")?,
        variables,
        order,
        params: Vec::new(),
        globals: Vec::new(),
        tape: Tape::default(),
        built: HashMap::new(),
        expanding: Vec::new(),
        flows: HashMap::new(),
    };
    let dists = str_list(
        likelihood.get("distributions").unwrap_or(&Value::Null),
        &format!("likelihood '{likelihood_name}' distributions"),
    )?;
    let datas = str_list(
        likelihood.get("data").unwrap_or(&Value::Null),
        &format!("likelihood '{likelihood_name}' data"),
    )?;
    if dists.len() != datas.len() || dists.is_empty() {
        return Err(invalid(format!(
            "likelihood '{likelihood_name}' pairs {} distributions with {} datasets (one each, at least one)",
            dists.len(),
            datas.len()
        )));
    }
    let mut channels = Vec::new();
    let mut observed = Vec::new();
    let mut raw_constraints = Vec::new();
    for (dist, dname) in dists.iter().zip(&datas) {
        let entry = data.get(dname).ok_or_else(|| {
            invalid(format!(
                "likelihood '{likelihood_name}' names the data '{dname}', which is not in 'data'"
            ))
        })?;
        let (axes, events) = read_events(entry, dname, options.files)?;
        let mut b = ChannelBuilder {
            reader: &mut reader,
            files: options.files,
            axes,
            nodes: Vec::new(),
            constraints: Vec::new(),
            count: None,
            built: HashMap::new(),
            building: Vec::new(),
        };
        let root = b.build(dist, true)?;
        let ChannelBuilder {
            axes,
            mut nodes,
            constraints,
            count,
            ..
        } = b;
        raw_constraints.extend(constraints);
        // Flows without context: their log-densities become columns after the observables.
        let mut derived = axes.len();
        for node in &mut nodes {
            if let NodeKind::Flow { leaf, args } = &mut node.kind
                && args.is_empty()
            {
                leaf.derived_column = Some(derived);
                derived += 1;
            }
        }
        if count.is_some() && events.weights.is_some() && !(events.sum_weights() > 0.0) {
            return Err(Error::InvalidInput(format!(
                "data '{dname}': its weights sum to {} (an extended likelihood needs a positive total)",
                events.sum_weights()
            )));
        }
        let channel = Channel {
            name: dist.to_string(),
            axes,
            nodes,
            root,
            count,
        };
        channel.check_columns()?;
        channels.push(channel);
        observed.push(events);
    }
    // The same constraint may be a factor of several channels: keep one.
    let mut constraints = Vec::new();
    let mut aux = Vec::new();
    for (name, x, mean, sigma) in raw_constraints {
        if constraints.iter().any(|c: &Constraint| c.name == name) {
            continue;
        }
        let var = reader.variables.get(&x).cloned().unwrap_or_default();
        let slot = match reader.globals.iter().position(|g| *g == x) {
            Some(s) => s,
            None => {
                reader.globals.push(x.clone());
                aux.push(var.value.ok_or_else(|| {
                    invalid(format!(
                        "global observable '{x}' has no value in the parameter point"
                    ))
                })?);
                reader.globals.len() - 1
            }
        };
        constraints.push(Constraint {
            name,
            aux: slot,
            mean,
            sigma,
            range: var.range.unwrap_or((f64::NEG_INFINITY, f64::INFINITY)),
        });
    }

    // Parameters in the order of the parameter point, then of first use.
    let used = reader.params.clone();
    let mut names: Vec<String> = reader
        .order
        .iter()
        .filter(|n| used.contains(n))
        .cloned()
        .collect();
    let unlisted: Vec<String> = used
        .iter()
        .filter(|n| !names.contains(n))
        .cloned()
        .collect();
    names.extend(unlisted);
    let remap: Vec<usize> = used
        .iter()
        .map(|u| {
            names
                .iter()
                .position(|n| n == u)
                .expect("every used name is kept")
        })
        .collect();
    for c in &mut channels {
        for node in &mut c.nodes {
            node.remap(&remap);
        }
        if let Some(count) = &mut c.count {
            *count = count.remapped(&remap);
        }
    }
    for c in &mut constraints {
        c.mean = c.mean.remapped(&remap);
        c.sigma = c.sigma.remapped(&remap);
    }
    let mut init = Vec::new();
    let mut bounds = Vec::new();
    for n in &names {
        let var = &reader.variables[n];
        let range = var.range.ok_or_else(|| invalid(format!("parameter '{n}' has no domain: give it a range in 'domains' (or min/max in the parameter point)")))?;
        if !(range.0 <= range.1) {
            return Err(invalid(format!(
                "parameter '{n}' has the empty range [{}, {}]",
                range.0, range.1
            )));
        }
        init.push(var.value.unwrap_or(0.5 * (range.0 + range.1)));
        bounds.push(range);
    }
    let poi = match analysis
        .and_then(|a| a.get("parameters_of_interest"))
        .and_then(Value::as_array)
        .and_then(|p| p.first())
        .and_then(Value::as_str)
    {
        Some(p) => names.iter().position(|n| n == p).ok_or_else(|| {
            format!("the parameter of interest '{p}' is not a free parameter of the likelihood")
        }),
        None => Err(format!(
            "likelihood '{likelihood_name}' names no parameter of interest (the analysis's 'parameters_of_interest')"
        )),
    };
    UnbinnedModel::new(crate::ModelParts {
        origin: format!("HS3 likelihood '{likelihood_name}'"),
        names,
        init,
        bounds,
        poi,
        channels,
        constraints,
        aux_names: reader.globals,
        observed,
        observed_aux: aux,
    })
}
