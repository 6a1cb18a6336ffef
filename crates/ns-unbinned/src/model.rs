//! The unbinned model: channels of events, each with a density tree (shapes of one observable,
//! products over observables, mixtures with coefficients that are expressions of the
//! parameters), an expected count where the channel is extended, and constraint terms on global
//! observables. Evaluates the NLL and its exact gradient over events in fixed chunks summed in
//! a fixed order, so results are the same on any thread count.
//!
//! The NLL is RooFit's: per channel ν − Σₑ wₑ ln(ν·f(xₑ)) where extended (−Σₑ wₑ ln f(xₑ)
//! otherwise), plus −ln of each constraint normalised over its global observable's range.

use rayon::prelude::*;

use ns_compute::rng::ToyStream;
use ns_core::{Error, Result};

use crate::events::{ChannelEvents, ChannelView};
use crate::expr::ParamExpr;
use crate::scalar::{Dual, Real};
use crate::shapes::{MAX_ARGS, Shape};

/// Events per chunk of the reduction: the partition, and so the summation order, never depends
/// on the thread count.
pub const CHUNK: usize = 2048;

/// An observable and its range.
#[derive(Clone, Debug, PartialEq)]
pub struct Axis {
    pub name: String,
    pub lo: f64,
    pub hi: f64,
}

#[derive(Clone, Debug, PartialEq)]
pub enum NodeKind {
    /// A shape over observable `column` of the channel.
    Leaf {
        shape: Shape,
        column: usize,
        args: Vec<ParamExpr>,
    },
    /// A product of densities over disjoint observables.
    Product(Vec<usize>),
    /// Σₚ cₚ·fₚ: yields where extended, fractions summing to one otherwise.
    Mixture {
        children: Vec<usize>,
        coefs: Vec<ParamExpr>,
    },
}

/// A node of a channel's density tree, with the parameters its value depends on (ascending).
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    pub name: String,
    pub kind: NodeKind,
    pub slots: Vec<usize>,
}

impl Node {
    /// Renumber parameter `i` as `map[i]`.
    pub fn remap(&mut self, map: &[usize]) {
        let exprs = match &mut self.kind {
            NodeKind::Leaf { args, .. } => args,
            NodeKind::Mixture { coefs, .. } => coefs,
            NodeKind::Product(_) => &mut Vec::new(),
        };
        for e in exprs.iter_mut() {
            *e = e.remapped(map);
        }
        for s in &mut self.slots {
            *s = map[*s];
        }
        self.slots.sort_unstable();
    }
}

/// A channel: its observables, its density tree (nodes, root last) and, where extended, the
/// expected number of events.
#[derive(Clone, Debug, PartialEq)]
pub struct Channel {
    pub name: String,
    pub axes: Vec<Axis>,
    pub nodes: Vec<Node>,
    pub root: usize,
    pub count: Option<ParamExpr>,
}

/// A Gaussian constraint: global observable `aux` ~ N(mean, sigma) normalised over `range`.
#[derive(Clone, Debug, PartialEq)]
pub struct Constraint {
    pub name: String,
    pub aux: usize,
    pub mean: ParamExpr,
    pub sigma: ParamExpr,
    pub range: (f64, f64),
}

impl Constraint {
    fn args(&self) -> [&ParamExpr; 2] {
        [&self.mean, &self.sigma]
    }

    /// −ln of the normalised density at `g`, adding its gradient into `grad`.
    fn nll_grad(&self, g: f64, theta: &[f64], grad: &mut [f64]) -> f64 {
        let mut jac = Vec::new();
        let mut a = [Dual::<2>::constant(0.0); 2];
        let mut jacs = Vec::with_capacity(2);
        for (j, e) in self.args().into_iter().enumerate() {
            a[j] = Dual::input(e.value_grad(theta, &mut jac), j);
            jacs.push((e.params(), jac.clone()));
        }
        let r = Shape::Gaussian.log_density(g, &a, self.range)
            - Shape::Gaussian.log_integral(&a, self.range.0, self.range.1, self.range);
        for (j, (params, d)) in jacs.iter().enumerate() {
            for (&p, &dp) in params.iter().zip(d) {
                grad[p] -= r.d[j] * dp;
            }
        }
        -r.v
    }
}

/// One node's parameter-dependent state at a point: a leaf's argument values, their Jacobian
/// in the node's slots and its log-normalisation with gradient; a mixture's coefficients and
/// their Jacobian.
struct NodeState {
    values: Vec<f64>,
    /// Row per argument or coefficient, a column per node slot.
    jac: Vec<f64>,
    log_norm: f64,
    dlog_norm: Vec<f64>,
    /// For every child, the position of each of its slots among this node's.
    child_slots: Vec<Vec<usize>>,
}

/// Values and their Jacobian (rows over `exprs`, columns over `slots`).
fn values_and_jacobian(
    exprs: &[ParamExpr],
    slots: &[usize],
    theta: &[f64],
) -> (Vec<f64>, Vec<f64>) {
    let mut values = Vec::with_capacity(exprs.len());
    let mut jac = vec![0.0; exprs.len() * slots.len()];
    let mut grad = Vec::new();
    for (j, e) in exprs.iter().enumerate() {
        values.push(e.value_grad(theta, &mut grad));
        for (&p, &d) in e.params().iter().zip(&grad) {
            let k = slots
                .binary_search(&p)
                .expect("a node's slots cover its expressions");
            jac[j * slots.len() + k] = d;
        }
    }
    (values, jac)
}

fn position_map(child: &[usize], parent: &[usize]) -> Vec<usize> {
    child
        .iter()
        .map(|p| {
            parent
                .binary_search(p)
                .expect("a parent's slots cover its children")
        })
        .collect()
}

impl Channel {
    fn prepare(&self, theta: &[f64]) -> Vec<NodeState> {
        self.nodes
            .iter()
            .map(|node| match &node.kind {
                NodeKind::Leaf {
                    shape,
                    column,
                    args,
                } => {
                    let (values, jac) = values_and_jacobian(args, &node.slots, theta);
                    let axis = &self.axes[*column];
                    let mut dnorm = [0.0; MAX_ARGS];
                    let log_norm = shape.log_norm_grad(&values, (axis.lo, axis.hi), &mut dnorm);
                    let dlog_norm = (0..node.slots.len())
                        .map(|k| {
                            (0..args.len())
                                .map(|j| dnorm[j] * jac[j * node.slots.len() + k])
                                .sum()
                        })
                        .collect();
                    NodeState {
                        values,
                        jac,
                        log_norm,
                        dlog_norm,
                        child_slots: Vec::new(),
                    }
                }
                NodeKind::Product(children) => NodeState {
                    values: Vec::new(),
                    jac: Vec::new(),
                    log_norm: 0.0,
                    dlog_norm: Vec::new(),
                    child_slots: children
                        .iter()
                        .map(|&c| position_map(&self.nodes[c].slots, &node.slots))
                        .collect(),
                },
                NodeKind::Mixture { children, coefs } => {
                    let (values, jac) = values_and_jacobian(coefs, &node.slots, theta);
                    NodeState {
                        values,
                        jac,
                        log_norm: 0.0,
                        dlog_norm: Vec::new(),
                        child_slots: children
                            .iter()
                            .map(|&c| position_map(&self.nodes[c].slots, &node.slots))
                            .collect(),
                    }
                }
            })
            .collect()
    }

    /// Node `i`'s value at each event of `cols` (`val`) and its derivatives in the node's slots
    /// (`dv`, slot-major).
    fn eval_node(
        &self,
        i: usize,
        states: &[NodeState],
        cols: &[&[f64]],
        val: &mut [f64],
        dv: &mut [f64],
    ) {
        let n = val.len();
        let node = &self.nodes[i];
        let state = &states[i];
        let ns = node.slots.len();
        match &node.kind {
            NodeKind::Leaf { shape, column, .. } => {
                let k = state.values.len();
                let axis = &self.axes[*column];
                let mut dlog = vec![0.0; k * n];
                shape.log_density_grad(
                    cols[*column],
                    &state.values,
                    (axis.lo, axis.hi),
                    val,
                    &mut dlog,
                );
                for v in val.iter_mut() {
                    *v = (*v - state.log_norm).exp();
                }
                for s in 0..ns {
                    let out = &mut dv[s * n..(s + 1) * n];
                    out.fill(-state.dlog_norm[s]);
                    for j in 0..k {
                        let jac = state.jac[j * ns + s];
                        if jac != 0.0 {
                            for (o, d) in out.iter_mut().zip(&dlog[j * n..(j + 1) * n]) {
                                *o += d * jac;
                            }
                        }
                    }
                    for (o, v) in out.iter_mut().zip(val.iter()) {
                        *o *= v;
                    }
                }
            }
            NodeKind::Product(children) => {
                val.fill(1.0);
                dv.fill(0.0);
                for (c, &child) in children.iter().enumerate() {
                    let cs = self.nodes[child].slots.len();
                    let (mut cv, mut cdv) = (vec![0.0; n], vec![0.0; cs * n]);
                    self.eval_node(child, states, cols, &mut cv, &mut cdv);
                    for s in 0..ns {
                        for (d, c) in dv[s * n..(s + 1) * n].iter_mut().zip(&cv) {
                            *d *= c;
                        }
                    }
                    for (cslot, &s) in state.child_slots[c].iter().enumerate() {
                        for e in 0..n {
                            dv[s * n + e] += val[e] * cdv[cslot * n + e];
                        }
                    }
                    for (v, c) in val.iter_mut().zip(&cv) {
                        *v *= c;
                    }
                }
            }
            NodeKind::Mixture { children, .. } => {
                val.fill(0.0);
                dv.fill(0.0);
                for (c, &child) in children.iter().enumerate() {
                    let cs = self.nodes[child].slots.len();
                    let (mut cv, mut cdv) = (vec![0.0; n], vec![0.0; cs * n]);
                    self.eval_node(child, states, cols, &mut cv, &mut cdv);
                    let coef = state.values[c];
                    for (v, x) in val.iter_mut().zip(&cv) {
                        *v += coef * x;
                    }
                    for s in 0..ns {
                        let dc = state.jac[c * ns + s];
                        if dc != 0.0 {
                            for (d, x) in dv[s * n..(s + 1) * n].iter_mut().zip(&cv) {
                                *d += dc * x;
                            }
                        }
                    }
                    for (cslot, &s) in state.child_slots[c].iter().enumerate() {
                        for (d, x) in dv[s * n..(s + 1) * n]
                            .iter_mut()
                            .zip(&cdv[cslot * n..(cslot + 1) * n])
                        {
                            *d += coef * x;
                        }
                    }
                }
            }
        }
    }

    /// This channel's NLL on `events` and its gradient (added into `grad`, indexed by
    /// parameter).
    pub fn nll_grad(&self, events: ChannelView, theta: &[f64], grad: &mut [f64]) -> f64 {
        let states = self.prepare(theta);
        let slots = &self.nodes[self.root].slots;
        let n_chunks = events.len().div_ceil(CHUNK);
        let partial = |c: usize| {
            let range = c * CHUNK..((c + 1) * CHUNK).min(events.len());
            let n = range.len();
            let cols: Vec<&[f64]> = (0..events.dims())
                .map(|i| &events.column(i)[range.clone()])
                .collect();
            let (mut val, mut dv) = (vec![0.0; n], vec![0.0; slots.len() * n]);
            self.eval_node(self.root, &states, &cols, &mut val, &mut dv);
            let weights = events.weights().map(|w| &w[range.clone()]);
            let mut nll = 0.0;
            let mut g = vec![0.0; slots.len()];
            for e in 0..n {
                let w = weights.map_or(1.0, |w| w[e]);
                nll -= w * val[e].ln();
                let f = w / val[e];
                for (s, gs) in g.iter_mut().enumerate() {
                    *gs -= f * dv[s * n + e];
                }
            }
            (nll, g)
        };
        let parts: Vec<(f64, Vec<f64>)> = if n_chunks > 1 {
            (0..n_chunks).into_par_iter().map(partial).collect()
        } else {
            (0..n_chunks).map(partial).collect()
        };
        let mut nll = 0.0;
        for (part, g) in parts {
            nll += part;
            for (s, gs) in g.into_iter().enumerate() {
                grad[slots[s]] += gs;
            }
        }
        if let Some(count) = &self.count {
            let mut dcount = Vec::new();
            nll += count.value_grad(theta, &mut dcount);
            for (&p, d) in count.params().iter().zip(dcount) {
                grad[p] += d;
            }
        }
        nll
    }

    /// The density tree's value at each event (`ν·f` where extended, `f` otherwise).
    pub fn values(&self, events: ChannelView, theta: &[f64]) -> Vec<f64> {
        let states = self.prepare(theta);
        let slots = self.nodes[self.root].slots.len();
        let mut out = vec![0.0; events.len()];
        for (c, chunk) in out.chunks_mut(CHUNK).enumerate() {
            let range = c * CHUNK..c * CHUNK + chunk.len();
            let cols: Vec<&[f64]> = (0..events.dims())
                .map(|i| &events.column(i)[range.clone()])
                .collect();
            let mut dv = vec![0.0; slots * chunk.len()];
            self.eval_node(self.root, &states, &cols, chunk, &mut dv);
        }
        out
    }

    /// Node `i`'s observables (columns), ascending.
    fn columns_of(&self, i: usize, out: &mut Vec<usize>) {
        match &self.nodes[i].kind {
            NodeKind::Leaf { column, .. } => out.push(*column),
            NodeKind::Product(c) | NodeKind::Mixture { children: c, .. } => {
                c.iter().for_each(|&c| self.columns_of(c, out))
            }
        }
    }

    /// One event drawn from node `i` into `x` (one value per observable).
    fn draw(
        &self,
        i: usize,
        samplers: &[Option<crate::shapes::Sampler>],
        coefs: &[Vec<f64>],
        rng: &mut ToyStream,
        x: &mut [f64],
    ) {
        match &self.nodes[i].kind {
            NodeKind::Leaf { column, .. } => {
                x[*column] = samplers[i].as_ref().expect("a sampler per leaf").draw(rng)
            }
            NodeKind::Product(children) => children
                .iter()
                .for_each(|&c| self.draw(c, samplers, coefs, rng, x)),
            NodeKind::Mixture { children, .. } => {
                let total: f64 = coefs[i].iter().sum();
                let mut u = rng.uniform() * total;
                let mut pick = children.len() - 1;
                for (p, &c) in coefs[i].iter().enumerate() {
                    if u < c {
                        pick = p;
                        break;
                    }
                    u -= c;
                }
                self.draw(children[pick], samplers, coefs, rng, x)
            }
        }
    }

    /// Events drawn at `theta`: a Poisson count of mean ν where extended, `n_fixed` otherwise.
    pub fn sample(
        &self,
        theta: &[f64],
        n_fixed: usize,
        rng: &mut ToyStream,
    ) -> Result<ChannelEvents> {
        let states = self.prepare(theta);
        let mut coefs = vec![Vec::new(); self.nodes.len()];
        for (i, node) in self.nodes.iter().enumerate() {
            if let NodeKind::Mixture { .. } = node.kind {
                if let Some(c) = states[i]
                    .values
                    .iter()
                    .find(|c| !(**c >= 0.0 && c.is_finite()))
                {
                    return Err(Error::InvalidInput(format!(
                        "cannot sample events of '{}' in channel '{}': a coefficient is {c} (they must be finite and non-negative)",
                        node.name, self.name
                    )));
                }
                coefs[i] = states[i].values.clone();
            }
        }
        let samplers: Vec<Option<crate::shapes::Sampler>> = self
            .nodes
            .iter()
            .zip(&states)
            .map(|(node, state)| match &node.kind {
                NodeKind::Leaf { shape, column, .. } => {
                    let axis = &self.axes[*column];
                    Some(shape.sampler(&state.values, (axis.lo, axis.hi)))
                }
                _ => None,
            })
            .collect();
        let n = match &self.count {
            Some(count) => {
                let nu = count.value(theta);
                if !(nu >= 0.0 && nu.is_finite()) {
                    return Err(Error::InvalidInput(format!(
                        "cannot sample channel '{}': its expected count is {nu}",
                        self.name
                    )));
                }
                rng.poisson(nu) as usize
            }
            None => n_fixed,
        };
        let dims = self.axes.len();
        let mut columns = vec![Vec::with_capacity(n); dims];
        let mut x = vec![0.0; dims];
        for _ in 0..n {
            self.draw(self.root, &samplers, &coefs, rng, &mut x);
            for (col, &v) in columns.iter_mut().zip(&x) {
                col.push(v);
            }
        }
        Ok(ChannelEvents {
            columns,
            weights: None,
        })
    }

    /// The Asimov events at `theta`: the centres of `bins` cells per observable, weighted by
    /// the expected count in each (value × cell volume, scaled by `n_fixed` where the channel
    /// is not extended), as RooStats' AsymptoticCalculator builds them.
    pub fn asimov(&self, theta: &[f64], bins: usize, n_fixed: f64) -> ChannelEvents {
        let dims = self.axes.len();
        let cells = bins.pow(dims as u32);
        let mut columns = vec![Vec::with_capacity(cells); dims];
        let volume: f64 = self
            .axes
            .iter()
            .map(|a| (a.hi - a.lo) / bins as f64)
            .product();
        for cell in 0..cells {
            let mut rest = cell;
            for (d, axis) in self.axes.iter().enumerate() {
                let i = rest % bins;
                rest /= bins;
                columns[d].push(axis.lo + (i as f64 + 0.5) * (axis.hi - axis.lo) / bins as f64);
            }
        }
        let mut events = ChannelEvents {
            columns,
            weights: None,
        };
        let packed = crate::events::pack(std::slice::from_ref(&events), Vec::new(), 0.0);
        let view = crate::events::views(&packed.main, &[dims]).expect("packed here")[0];
        let scale = if self.count.is_some() { 1.0 } else { n_fixed };
        let weights = self
            .values(view, theta)
            .into_iter()
            .map(|v| v * volume * scale)
            .collect();
        events.weights = Some(weights);
        events
    }

    /// The observables the density tree covers, each once; an error names a node whose
    /// factors share one.
    pub fn check_columns(&self) -> Result<()> {
        for node in &self.nodes {
            if let NodeKind::Product(children) = &node.kind {
                let mut seen = Vec::new();
                for &c in children {
                    let mut cols = Vec::new();
                    self.columns_of(c, &mut cols);
                    cols.sort_unstable();
                    cols.dedup();
                    if let Some(&dup) = cols.iter().find(|c| seen.contains(*c)) {
                        return Err(Error::InvalidModel(format!(
                            "product '{}' has two factors over observable '{}': factors of a product must cover different observables",
                            node.name, self.axes[dup].name
                        )));
                    }
                    seen.extend(cols);
                }
            }
        }
        let mut all = Vec::new();
        self.columns_of(self.root, &mut all);
        for (c, axis) in self.axes.iter().enumerate() {
            if !all.contains(&c) {
                return Err(Error::InvalidModel(format!(
                    "channel '{}': no distribution covers observable '{}' of its data",
                    self.name, axis.name
                )));
            }
        }
        Ok(())
    }
}

/// The whole model's constraint terms at `theta` on global observables `aux`.
pub fn constraints_nll_grad(
    constraints: &[Constraint],
    aux: &[f64],
    theta: &[f64],
    grad: &mut [f64],
) -> f64 {
    constraints
        .iter()
        .map(|c| c.nll_grad(aux[c.aux], theta, grad))
        .sum()
}
