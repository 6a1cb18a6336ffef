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
use crate::flow::FlowLeaf;
use crate::scalar::{Dual, Real};
use crate::shapes::{MAX_ARGS, Shape};

/// Events per chunk of the reduction: the partition, and so the summation order, never depends
/// on the thread count.
pub const CHUNK: usize = 2048;

/// The largest expected count a toy is drawn for (per channel): beyond, a toy would not fit in
/// memory.
pub const MAX_TOY_EVENTS: f64 = 1e8;

/// An observable and its range.
pub use ns_hs3::Axis;

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
    /// A normalizing flow over some of the channel's observables, `args` its context.
    Flow {
        leaf: Box<FlowLeaf>,
        args: Vec<ParamExpr>,
    },
}

/// A node of a channel's density tree.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    pub name: String,
    pub kind: NodeKind,
}

impl Node {
    /// Renumber parameter `i` as `map[i]`.
    pub fn remap(&mut self, map: &[usize]) {
        let exprs = match &mut self.kind {
            NodeKind::Leaf { args, .. } | NodeKind::Flow { args, .. } => args,
            NodeKind::Mixture { coefs, .. } => coefs,
            NodeKind::Product(_) => &mut Vec::new(),
        };
        for e in exprs.iter_mut() {
            *e = e.remapped(map);
        }
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

/// One node's parameter-dependent state at a point: a leaf's argument values, their gradients
/// in the parameters and its log-normalisation with its gradient in the arguments; a
/// mixture's coefficients and their gradients.
pub(crate) struct NodeState {
    pub(crate) values: Vec<f64>,
    /// Per argument or coefficient: (parameter, derivative) pairs.
    grads: Vec<Vec<(usize, f64)>>,
    pub(crate) log_norm: f64,
    dlog_norm: Vec<f64>,
    /// A flow with context: its unnormalised log-density at every event of the channel and
    /// the derivatives in each context value (argument-major), by central differences.
    flow_events: Option<(Vec<f64>, Vec<f64>)>,
}

fn values_and_gradients(exprs: &[ParamExpr], theta: &[f64]) -> (Vec<f64>, Vec<Vec<(usize, f64)>>) {
    let mut grad = Vec::new();
    exprs
        .iter()
        .map(|e| {
            let v = e.value_grad(theta, &mut grad);
            (
                v,
                e.params()
                    .iter()
                    .copied()
                    .zip(grad.iter().copied())
                    .collect(),
            )
        })
        .unzip()
}

/// Per-chunk buffers: node log-values and log-adjoints (node-major; a log-adjoint is
/// ∂(Σ w·ln v_root)/∂ln vᵢ), each leaf's log-density derivatives in its arguments and each
/// mixture's share per child, cₚ·vₚ/v over cₚ (∂ln v/∂cₚ).
struct Scratch {
    n: usize,
    val: Vec<f64>,
    adj: Vec<f64>,
    dlog: Vec<Vec<f64>>,
    share: Vec<Vec<f64>>,
}

/// Sums over a chunk's events that the gradient needs: per leaf, Σ adj·v·∂ln g/∂aⱼ for each
/// argument then Σ adj·v (the normalisation's share); per mixture, Σ adj·v_child for each
/// coefficient.
pub(crate) type Sums = Vec<Vec<f64>>;

impl Channel {
    /// Every node's parameter-dependent state at `theta`; with `events`, a flow with context is
    /// evaluated at them too (every evaluation: its context moves with the parameters).
    pub(crate) fn prepare(
        &self,
        theta: &[f64],
        events: Option<ChannelView>,
    ) -> Result<Vec<NodeState>> {
        self.nodes
            .iter()
            .map(|node| {
                Ok(match &node.kind {
                    NodeKind::Leaf {
                        shape,
                        column,
                        args,
                    } => {
                        let (values, grads) = values_and_gradients(args, theta);
                        let axis = &self.axes[*column];
                        let mut dnorm = [0.0; MAX_ARGS];
                        let log_norm = shape.log_norm_grad(&values, (axis.lo, axis.hi), &mut dnorm);
                        NodeState {
                            dlog_norm: dnorm[..values.len()].to_vec(),
                            values,
                            grads,
                            log_norm,
                            flow_events: None,
                        }
                    }
                    NodeKind::Product(_) => NodeState {
                        values: Vec::new(),
                        grads: Vec::new(),
                        log_norm: 0.0,
                        dlog_norm: Vec::new(),
                        flow_events: None,
                    },
                    NodeKind::Mixture { coefs, .. } => {
                        let (values, grads) = values_and_gradients(coefs, theta);
                        NodeState {
                            values,
                            grads,
                            log_norm: 0.0,
                            dlog_norm: Vec::new(),
                            flow_events: None,
                        }
                    }
                    NodeKind::Flow { leaf, args } => {
                        let (values, grads) = values_and_gradients(args, theta);
                        self.flow_state(node, leaf, values, grads, events)?
                    }
                })
            })
            .collect()
    }

    /// A flow's state: without context, its log-densities are a column of the data
    /// (normalised when the dataset was made); with context, ln Z and the events' log-densities
    /// at the context and, for the gradient, at context ± h (central differences, step
    /// [`crate::flow::FlowPdf::context_step`]).
    fn flow_state(
        &self,
        node: &Node,
        leaf: &FlowLeaf,
        values: Vec<f64>,
        grads: Vec<Vec<(usize, f64)>>,
        events: Option<ChannelView>,
    ) -> Result<NodeState> {
        let at = |e: Error| match e {
            Error::Computation(m) => Error::Computation(format!(
                "flow '{}' of channel '{}': {m}",
                node.name, self.name
            )),
            other => other,
        };
        if leaf.derived_column.is_some() {
            return Ok(NodeState {
                values,
                grads,
                log_norm: 0.0,
                dlog_norm: Vec::new(),
                flow_events: None,
            });
        }
        let log_norm = leaf.log_norm(&values).map_err(at)?;
        let cols: Option<Vec<&[f64]>> =
            events.map(|ev| (0..self.axes.len()).map(|i| ev.column(i)).collect());
        let rows = cols.as_ref().map(|c| leaf.rows(c));
        let n = events.map_or(0, |e| e.len());
        let log_prob = |ctx: &[f64]| -> Result<Vec<f64>> {
            match &rows {
                Some(r) => leaf.flow.log_prob(n, r, ctx).map_err(at),
                None => Ok(Vec::new()),
            }
        };
        let lp = log_prob(&values)?;
        let mut dlog = Vec::with_capacity(values.len() * n);
        let mut dlog_norm = Vec::with_capacity(values.len());
        for j in 0..values.len() {
            let h = leaf.flow.context_step(values[j]);
            let mut shifted = values.clone();
            shifted[j] = values[j] + h;
            let (up, z_up) = (log_prob(&shifted)?, leaf.log_norm(&shifted).map_err(at)?);
            shifted[j] = values[j] - h;
            let (down, z_down) = (log_prob(&shifted)?, leaf.log_norm(&shifted).map_err(at)?);
            dlog.extend(up.iter().zip(&down).map(|(u, d)| (u - d) / (2.0 * h)));
            dlog_norm.push((z_up - z_down) / (2.0 * h));
        }
        Ok(NodeState {
            values,
            grads,
            log_norm,
            dlog_norm,
            flow_events: events.map(|_| (lp, dlog)),
        })
    }

    fn scratch(&self, states: &[NodeState], n: usize) -> Scratch {
        let rows = |f: fn(&NodeKind, &NodeState) -> usize| {
            states
                .iter()
                .zip(&self.nodes)
                .map(|(s, node)| vec![0.0; f(&node.kind, s) * n])
                .collect()
        };
        Scratch {
            n,
            val: vec![0.0; self.nodes.len() * n],
            adj: vec![0.0; self.nodes.len() * n],
            dlog: rows(|kind, s| match kind {
                NodeKind::Leaf { .. } | NodeKind::Flow { .. } => s.values.len(),
                _ => 0,
            }),
            share: rows(|kind, _| match kind {
                NodeKind::Mixture { children, .. } => children.len(),
                _ => 0,
            }),
        }
    }

    /// Every node's log-value at the chunk's events `cols`, which start at event `start` of
    /// the channel (children precede their parents in the arena, so one pass in order); the
    /// root's is the last row written. Densities stay logarithms throughout: a leaf needs no
    /// exp, a product is a sum, and a mixture of two is one exp and one ln per event.
    fn forward(&self, states: &[NodeState], start: usize, cols: &[&[f64]], s: &mut Scratch) {
        let n = cols.first().map_or(0, |c| c.len());
        s.n = n;
        for (i, node) in self.nodes.iter().enumerate() {
            let (before, rest) = s.val.split_at_mut(i * n);
            let val = &mut rest[..n];
            let state = &states[i];
            match &node.kind {
                NodeKind::Leaf { shape, column, .. } => {
                    let axis = &self.axes[*column];
                    let dlog = &mut s.dlog[i][..state.values.len() * n];
                    shape.log_density_grad(
                        cols[*column],
                        &state.values,
                        (axis.lo, axis.hi),
                        val,
                        dlog,
                    );
                    for v in val.iter_mut() {
                        *v -= state.log_norm;
                    }
                }
                NodeKind::Flow { leaf, .. } => {
                    if let Some(c) = leaf.derived_column {
                        val.copy_from_slice(cols[c]);
                    } else {
                        let (lp, dlp) = state
                            .flow_events
                            .as_ref()
                            .expect("a flow with context is evaluated with its events");
                        let total = lp.len();
                        for (v, l) in val.iter_mut().zip(&lp[start..start + n]) {
                            *v = l - state.log_norm;
                        }
                        for j in 0..state.values.len() {
                            s.dlog[i][j * n..(j + 1) * n]
                                .copy_from_slice(&dlp[j * total + start..j * total + start + n]);
                        }
                    }
                }
                NodeKind::Product(children) => {
                    val.fill(0.0);
                    for &c in children {
                        for (v, x) in val.iter_mut().zip(&before[c * n..(c + 1) * n]) {
                            *v += x;
                        }
                    }
                }
                NodeKind::Mixture { children, .. } => {
                    let logs: Vec<&[f64]> = children
                        .iter()
                        .map(|&c| &before[c * n..(c + 1) * n])
                        .collect();
                    let share = &mut s.share[i][..children.len() * n];
                    crate::simd::log_mixture(&logs, &state.values, val, share);
                }
            }
        }
    }

    /// Reverse pass from the root's log-adjoint (already in `s.adj`): log-adjoints down the
    /// tree and the chunk's [`Sums`].
    fn backward(&self, states: &[NodeState], s: &mut Scratch, sums: &mut Sums) {
        backward_dispatched(self, states, s, sums);
    }

    #[inline(always)]
    fn backward_body(&self, states: &[NodeState], s: &mut Scratch, sums: &mut Sums) {
        let n = s.n;
        for i in (0..self.nodes.len()).rev() {
            // Children precede their parent in the arena: their rows lie below row i.
            let (below, rest) = s.adj.split_at_mut(i * n);
            let adj = &rest[..n];
            match &self.nodes[i].kind {
                NodeKind::Leaf { .. } | NodeKind::Flow { .. } => {
                    let k = states[i].values.len();
                    let acc = &mut sums[i];
                    acc[k] += crate::simd::sum(adj);
                    for j in 0..k {
                        acc[j] += crate::simd::dot(adj, &s.dlog[i][j * n..(j + 1) * n]);
                    }
                }
                NodeKind::Mixture { children, .. } => {
                    for (p, (&c, &coef)) in children.iter().zip(&states[i].values).enumerate() {
                        let share = &s.share[i][p * n..(p + 1) * n];
                        sums[i][p] += crate::simd::dot(adj, share);
                        for ((ac, a), q) in below[c * n..(c + 1) * n].iter_mut().zip(adj).zip(share)
                        {
                            *ac += coef * (a * q);
                        }
                    }
                }
                NodeKind::Product(children) => {
                    for &c in children {
                        for (ac, a) in below[c * n..(c + 1) * n].iter_mut().zip(adj) {
                            *ac += a;
                        }
                    }
                }
            }
        }
    }

    pub(crate) fn empty_sums(&self, states: &[NodeState]) -> Sums {
        self.nodes
            .iter()
            .zip(states)
            .map(|(node, st)| match node.kind {
                NodeKind::Leaf { .. } | NodeKind::Flow { .. } => vec![0.0; st.values.len() + 1],
                NodeKind::Mixture { .. } => vec![0.0; st.values.len()],
                NodeKind::Product(_) => Vec::new(),
            })
            .collect()
    }

    /// This channel's NLL on `events` and its gradient (added into `grad`, indexed by
    /// parameter).
    pub fn nll_grad(&self, events: ChannelView, theta: &[f64], grad: &mut [f64]) -> Result<f64> {
        let states = self.prepare(theta, Some(events))?;
        let (ln_sum, sums) = self.event_sums(&states, events);
        Ok(self.finish(&states, ln_sum, &sums, theta, grad))
    }

    /// Σ w·ln v over the events and the per-node [`Sums`]: the log-values forward, then the
    /// reverse pass with log-adjoint w at the root; chunks reduced in chunk order.
    pub(crate) fn event_sums(&self, states: &[NodeState], events: ChannelView) -> (f64, Sums) {
        let n_chunks = events.len().div_ceil(CHUNK);
        // One scratch per worker, reused chunk after chunk (rows of a shorter chunk use the
        // front of each); only the adjoints, which the reverse pass adds into, start at zero.
        let partial = |s: &mut Scratch, c: usize| {
            let range = c * CHUNK..((c + 1) * CHUNK).min(events.len());
            let n = range.len();
            let cols: Vec<&[f64]> = (0..events.dims())
                .map(|i| &events.column(i)[range.clone()])
                .collect();
            s.adj[..self.nodes.len() * n].fill(0.0);
            self.forward(states, range.start, &cols, s);
            let root = &s.val[self.root * n..(self.root + 1) * n];
            let weights = events.weights().map(|w| &w[range.clone()]);
            let ln_sum = match weights {
                Some(w) => crate::simd::dot(w, root),
                None => crate::simd::sum(root),
            };
            let adj = &mut s.adj[self.root * n..(self.root + 1) * n];
            match weights {
                Some(w) => adj.copy_from_slice(w),
                None => adj.fill(1.0),
            }
            let mut sums = self.empty_sums(states);
            self.backward(states, s, &mut sums);
            (ln_sum, sums)
        };
        let parts: Vec<(f64, Sums)> = if n_chunks > 1 {
            (0..n_chunks)
                .into_par_iter()
                .map_init(|| self.scratch(states, CHUNK), partial)
                .collect()
        } else {
            let mut s = self.scratch(states, events.len());
            (0..n_chunks).map(|c| partial(&mut s, c)).collect()
        };
        let mut ln_sum = 0.0;
        let mut sums = self.empty_sums(states);
        for (part, chunk) in parts {
            ln_sum += part;
            for (total, c) in sums.iter_mut().zip(chunk) {
                for (t, x) in total.iter_mut().zip(c) {
                    *t += x;
                }
            }
        }
        (ln_sum, sums)
    }

    /// The NLL from the event sums (wherever they were summed), its gradient added into `grad`:
    /// ∂NLL/∂θ = −Σ_leaves Σⱼ (Sⱼ − T·∂ln I/∂aⱼ)·∂aⱼ/∂θ − Σ_mixtures Σₚ Cₚ·∂cₚ/∂θ, plus the
    /// expected count where extended.
    pub(crate) fn finish(
        &self,
        states: &[NodeState],
        ln_sum: f64,
        sums: &Sums,
        theta: &[f64],
        grad: &mut [f64],
    ) -> f64 {
        let mut nll = -ln_sum;
        for ((node, state), sum) in self.nodes.iter().zip(states).zip(sums) {
            match node.kind {
                NodeKind::Leaf { .. } | NodeKind::Flow { .. } => {
                    let k = state.values.len();
                    for j in 0..k {
                        let d = sum[j] - sum[k] * state.dlog_norm[j];
                        for &(p, dp) in &state.grads[j] {
                            grad[p] -= d * dp;
                        }
                    }
                }
                NodeKind::Mixture { .. } => {
                    for (c, g) in sum.iter().zip(&state.grads) {
                        for &(p, dp) in g {
                            grad[p] -= c * dp;
                        }
                    }
                }
                NodeKind::Product(_) => {}
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
    pub fn values(&self, events: ChannelView, theta: &[f64]) -> Result<Vec<f64>> {
        let states = self.prepare(theta, Some(events))?;
        let mut out = vec![0.0; events.len()];
        for (c, chunk) in out.chunks_mut(CHUNK).enumerate() {
            let range = c * CHUNK..c * CHUNK + chunk.len();
            let cols: Vec<&[f64]> = (0..events.dims())
                .map(|i| &events.column(i)[range.clone()])
                .collect();
            let mut s = self.scratch(&states, chunk.len());
            self.forward(&states, range.start, &cols, &mut s);
            let n = chunk.len();
            for (v, l) in chunk
                .iter_mut()
                .zip(&s.val[self.root * n..(self.root + 1) * n])
            {
                *v = l.exp();
            }
        }
        Ok(out)
    }

    /// Why event `e`'s density is not a positive finite number at `theta`, naming the node at
    /// fault: an argument or coefficient that is not finite, a distribution that cannot be
    /// normalised over its range, mixture coefficients that sum to nothing, or the first node
    /// (children first) whose density at the event is not positive and finite.
    pub fn diagnose(&self, events: ChannelView, theta: &[f64], e: usize) -> String {
        let states = match self.prepare(theta, Some(events)) {
            Ok(s) => s,
            Err(err) => return err.to_string(),
        };
        let list = |v: &[f64]| v.iter().map(|&x| short(x)).collect::<Vec<_>>().join(", ");
        for (node, state) in self.nodes.iter().zip(&states) {
            let name = &node.name;
            match &node.kind {
                NodeKind::Leaf { column, .. } => {
                    let axis = &self.axes[*column];
                    if state.values.iter().any(|v| !v.is_finite()) {
                        return format!(
                            "distribution '{name}': its arguments are ({}) here, not all finite",
                            list(&state.values)
                        );
                    }
                    if !state.log_norm.is_finite() {
                        return format!(
                            "distribution '{name}' cannot be normalised over [{}, {}] of '{}' with its arguments ({}): its integral there is {}",
                            short(axis.lo),
                            short(axis.hi),
                            axis.name,
                            list(&state.values),
                            short(state.log_norm.exp())
                        );
                    }
                }
                NodeKind::Mixture { .. } => {
                    if state.values.iter().any(|v| !v.is_finite()) {
                        return format!(
                            "mixture '{name}': its coefficients are ({}) here, not all finite",
                            list(&state.values)
                        );
                    }
                    let total: f64 = state.values.iter().sum();
                    if !(total > 0.0) {
                        return format!(
                            "mixture '{name}': its coefficients ({}) sum to {}, so it has no density",
                            list(&state.values),
                            short(total)
                        );
                    }
                }
                NodeKind::Flow { .. } | NodeKind::Product(_) => {}
            }
        }
        let cols: Vec<&[f64]> = (0..events.dims())
            .map(|d| &events.column(d)[e..e + 1])
            .collect();
        let mut s = self.scratch(&states, 1);
        self.forward(&states, e, &cols, &mut s);
        let at: Vec<String> = self
            .axes
            .iter()
            .enumerate()
            .map(|(d, a)| format!("{} = {}", a.name, short(events.column(d)[e])))
            .collect();
        match self.nodes.iter().zip(&s.val).find(|(_, v)| !v.is_finite()) {
            Some((node, v)) => format!(
                "event {e} of channel '{}' ({}): distribution '{}' has density {} there",
                self.name,
                at.join(", "),
                node.name,
                short(v.exp())
            ),
            None => format!(
                "event {e} of channel '{}' ({}) has no finite positive density",
                self.name,
                at.join(", ")
            ),
        }
    }

    /// Columns of the channel's data: its observables, then one per flow without context.
    pub fn data_dims(&self) -> usize {
        self.axes.len() + self.derived_flows().count()
    }

    /// The flows without context, in node order: their log-densities are columns of the data.
    pub fn derived_flows(&self) -> impl Iterator<Item = &FlowLeaf> {
        self.nodes.iter().filter_map(|n| match &n.kind {
            NodeKind::Flow { leaf, .. } if leaf.derived_column.is_some() => Some(&**leaf),
            _ => None,
        })
    }

    /// `events` with the normalised log-density of each flow without context appended as a
    /// column (the flows run once per dataset, not per evaluation).
    pub fn derive(&self, events: &ChannelEvents) -> Result<ChannelEvents> {
        let mut out = events.clone();
        let cols: Vec<&[f64]> = events.columns.iter().map(Vec::as_slice).collect();
        for leaf in self.derived_flows() {
            let lp = leaf.log_density(&cols, &[]).map_err(|e| match e {
                Error::Computation(m) => {
                    Error::Computation(format!("channel '{}': {m}", self.name))
                }
                other => other,
            })?;
            out.columns.push(lp);
        }
        Ok(out)
    }

    /// Each node's observables (columns), ascending: one pass over the arena, children first
    /// (a node shared by several parents is looked at once).
    fn columns(&self) -> Vec<Vec<usize>> {
        let mut out: Vec<Vec<usize>> = Vec::with_capacity(self.nodes.len());
        for node in &self.nodes {
            let mut cols = match &node.kind {
                NodeKind::Leaf { column, .. } => vec![*column],
                NodeKind::Flow { leaf, .. } => leaf.columns.clone(),
                NodeKind::Product(c) | NodeKind::Mixture { children: c, .. } => {
                    c.iter().flat_map(|&c| out[c].iter().copied()).collect()
                }
            };
            cols.sort_unstable();
            cols.dedup();
            out.push(cols);
        }
        out
    }

    /// One event (number `e`) drawn from node `i` into `x` (one value per observable); a flow's
    /// share is left to a batch afterwards (`pending[i]` gets `e`).
    #[allow(clippy::too_many_arguments)]
    fn draw(
        &self,
        i: usize,
        samplers: &[Option<crate::shapes::Sampler>],
        coefs: &[Vec<f64>],
        rng: &mut ToyStream,
        x: &mut [f64],
        e: usize,
        pending: &mut [Vec<usize>],
    ) -> Result<()> {
        match &self.nodes[i].kind {
            NodeKind::Flow { .. } => {
                pending[i].push(e);
                Ok(())
            }
            NodeKind::Leaf { column, .. } => {
                let sampler = samplers[i].as_ref().expect("a sampler per leaf");
                x[*column] = sampler.draw(rng).map_err(|e| {
                    Error::Computation(format!(
                        "cannot sample '{}' in channel '{}': {e}",
                        self.nodes[i].name, self.name
                    ))
                })?;
                Ok(())
            }
            NodeKind::Product(children) => children
                .iter()
                .try_for_each(|&c| self.draw(c, samplers, coefs, rng, x, e, pending)),
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
                self.draw(children[pick], samplers, coefs, rng, x, e, pending)
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
        let states = self.prepare(theta, None)?;
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
                    shape
                        .sampler(&state.values, (axis.lo, axis.hi))
                        .map(Some)
                        .map_err(|e| {
                            Error::Computation(format!(
                                "cannot sample '{}' in channel '{}': {e}",
                                node.name, self.name
                            ))
                        })
                }
                _ => Ok(None),
            })
            .collect::<Result<_>>()?;
        let n = match &self.count {
            Some(count) => {
                let nu = count.value(theta);
                if !(0.0..=MAX_TOY_EVENTS).contains(&nu) {
                    return Err(Error::InvalidInput(format!(
                        "cannot sample channel '{}': its expected count is {nu} (toys are drawn for counts from 0 to {MAX_TOY_EVENTS:e})",
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
        let mut pending = vec![Vec::new(); self.nodes.len()];
        for e in 0..n {
            x.fill(f64::NAN);
            self.draw(self.root, &samplers, &coefs, rng, &mut x, e, &mut pending)?;
            for (col, &v) in columns.iter_mut().zip(&x) {
                col.push(v);
            }
        }
        for (i, events) in pending.iter().enumerate() {
            if let NodeKind::Flow { leaf, .. } = &self.nodes[i].kind
                && !events.is_empty()
            {
                let rows = leaf
                    .sample(events.len(), &states[i].values, rng)
                    .map_err(|e| {
                        Error::Computation(format!(
                            "cannot sample '{}' in channel '{}': {e}",
                            self.nodes[i].name, self.name
                        ))
                    })?;
                for (&e, row) in events.iter().zip(rows.chunks(leaf.columns.len())) {
                    for (&c, &v) in leaf.columns.iter().zip(row) {
                        columns[c][e] = v;
                    }
                }
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
    pub fn asimov(&self, theta: &[f64], bins: usize, n_fixed: f64) -> Result<ChannelEvents> {
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
        let derived = self.derive(&events)?;
        let packed = crate::events::pack(std::slice::from_ref(&derived), Vec::new(), 0.0);
        let view = crate::events::views(&packed.main, &[derived.columns.len()])?[0];
        let scale = if self.count.is_some() { 1.0 } else { n_fixed };
        let weights = self
            .values(view, theta)?
            .into_iter()
            .map(|v| v * volume * scale)
            .collect();
        events.weights = Some(weights);
        Ok(events)
    }

    /// The observables the density tree covers, each once; an error names a node whose
    /// factors share one.
    pub fn check_columns(&self) -> Result<()> {
        let columns = self.columns();
        for node in &self.nodes {
            if let NodeKind::Product(children) = &node.kind {
                let mut seen = Vec::new();
                for &c in children {
                    if let Some(&dup) = columns[c].iter().find(|c| seen.contains(*c)) {
                        return Err(Error::InvalidModel(format!(
                            "product '{}' has two factors over observable '{}': factors of a product must cover different observables",
                            node.name, self.axes[dup].name
                        )));
                    }
                    seen.extend(&columns[c]);
                }
            }
        }
        for (c, axis) in self.axes.iter().enumerate() {
            if !columns[self.root].contains(&c) {
                return Err(Error::InvalidModel(format!(
                    "channel '{}': no distribution covers observable '{}' of its data",
                    self.name, axis.name
                )));
            }
        }
        Ok(())
    }
}

ns_core::simd_dispatched! {
    /// [`Channel::backward`], its loops compiled for each instruction set.
    fn backward_dispatched(
        channel: &Channel,
        states: &[NodeState],
        s: &mut Scratch,
        sums: &mut Sums,
    ) -> () {
        channel.backward_body(states, s, sums)
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

pub(crate) use ns_core::error::short_number as short;
