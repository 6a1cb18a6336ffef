//! Distributions: one builder per type (the table [`DISTRIBUTIONS`]), each channel's nodes
//! built once per distribution, cycles named and the depth bounded.

use std::collections::HashMap;

use ns_core::{FileAccess, Result};
use serde_json::Value;

use super::functions::Reader;
use super::{FLOW_DIST, MAX_NESTING};
use crate::expr::{Op, ParamExpr};
use crate::flow::{FlowLeaf, FlowPdf};
use crate::model::{Axis, Node, NodeKind};
use crate::shapes::{Histogram, Shape, Tails};
use ns_hs3::{invalid, number, str_list};

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

/// Builds one channel's nodes.
pub(super) struct ChannelBuilder<'r, 'a> {
    pub(super) reader: &'r mut Reader<'a>,
    /// The files flow manifests may be read from.
    pub(super) files: FileAccess<'r>,
    pub(super) axes: Vec<Axis>,
    pub(super) nodes: Vec<Node>,
    pub(super) constraints: Vec<(String, String, ParamExpr, ParamExpr)>,
    /// The expected count where an extended mixture sits at the top (or under products).
    pub(super) count: Option<ParamExpr>,
    /// Nodes built, by distribution and whether at the top: a distribution named twice is
    /// one node (the arena is a DAG; its passes add a shared node's adjoints).
    pub(super) built: HashMap<(String, bool), usize>,
    /// The distributions being built, outermost first (to refuse cycles and bound the depth).
    pub(super) building: Vec<String>,
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

    fn push_leaf(
        &mut self,
        name: &str,
        shape: Shape,
        column: usize,
        args: Vec<ParamExpr>,
    ) -> usize {
        self.push(
            name,
            NodeKind::Leaf {
                shape,
                column,
                args,
            },
        )
    }

    fn push(&mut self, name: &str, kind: NodeKind) -> usize {
        self.nodes.push(Node {
            name: name.to_string(),
            kind,
        });
        self.nodes.len() - 1
    }

    /// The node of distribution `name`; `top`: whether it may carry the channel's count.
    pub(super) fn build(&mut self, name: &str, top: bool) -> Result<usize> {
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
        Ok(self.push_leaf(name, shape, column, args))
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
        Ok(self.push_leaf(
            name,
            Shape::CrystalBall(Tails::DoubleSided { left, right }),
            column,
            args,
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
        Ok(self.push_leaf(name, shape, column, args))
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
        Ok(self.push_leaf(name, Shape::Histogram(h), column, Vec::new()))
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
