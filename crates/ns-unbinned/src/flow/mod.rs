//! Normalizing-flow PDFs: ONNX models exported from PyTorch (or anything that writes ONNX),
//! described by a manifest and run by ONNX Runtime ([`runtime`]).
//!
//! The manifest (JSON):
//! ```json
//! {"type": "nextstat:flow", "observables": [{"name": "mass", "min": 100, "max": 150}],
//!  "context": ["alpha"], "log_prob": "log_prob.onnx", "sample": "sample.onnx",
//!  "normalization": "quadrature"}
//! ```
//! `log_prob.onnx` takes `x` [events, observables] (and `context` [events, len(context)] for a
//! conditional flow) and returns `log_prob` [events]; `sample.onnx` takes `z` [events,
//! observables] of standard-normal draws (and `context`) and returns `x`. Paths are relative to
//! the manifest.
//!
//! Normalisation over the observables' box (a flow lives on ℝᵈ; a likelihood needs its density on
//! the observables' ranges): `"quadrature"` (default) measures the truncation integral
//! Z = ∫_box exp(log_prob) by Gauss–Legendre quadrature on a grid refined for the flow at load
//! ([`quadrature::refined_grid`]; at most three observables) and uses log_prob − ln Z; with a
//! context, the grid refined at the initial context is kept, so ln Z is a smooth function of the
//! context (its central differences are meaningful); `"unit"` declares that the flow maps onto the
//! manifest's box (a final bijection onto it), checked at load by the same quadrature (an error
//! where Z is not 1 within 1e-3), and uses log_prob unchanged on that box.

pub mod quadrature;
pub mod runtime;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ns_compute::rng::ToyStream;
use ns_core::{Error, Result};
use serde_json::Value;

use crate::model::Axis;
use runtime::{Fallback, OnnxModel, Precision};

/// How far a `"unit"` flow's measured integral over its box may be from one.
pub const UNIT_TOLERANCE: f64 = 1e-3;

/// Margin of the flat envelope of accept–reject sampling above the density's largest value on
/// the quadrature grid.
const ENVELOPE_MARGIN: f64 = 1.05;

/// Proposal or draw rounds before sampling gives up (the box holds almost none of the flow).
const MAX_SAMPLE_ROUNDS: usize = 10_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Normalization {
    Quadrature,
    Unit,
}

/// A flow: its manifest and its ONNX models.
pub struct FlowPdf {
    pub manifest: PathBuf,
    pub observables: Vec<Axis>,
    pub context: Vec<String>,
    pub normalization: Normalization,
    log_prob: OnnxModel,
    sample: Option<OnnxModel>,
}

impl std::fmt::Debug for FlowPdf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FlowPdf({})", self.manifest.display())
    }
}

fn manifest_error(path: &Path, msg: impl std::fmt::Display) -> Error {
    Error::InvalidModel(format!("flow manifest {}: {msg}", path.display()))
}

impl FlowPdf {
    /// Read the manifest at `path` and load its models.
    pub fn load(path: &Path) -> Result<Arc<FlowPdf>> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| manifest_error(path, format!("cannot read it: {e}")))?;
        let doc: Value = serde_json::from_str(&text)
            .map_err(|e| manifest_error(path, format!("not JSON: {e}")))?;
        if doc.get("type").and_then(Value::as_str) != Some("nextstat:flow") {
            return Err(manifest_error(
                path,
                "its \"type\" must be \"nextstat:flow\"",
            ));
        }
        let observables = ns_hs3::read_axes_list(
            doc.get("observables")
                .ok_or_else(|| manifest_error(path, "no 'observables'"))?,
            &format!("flow manifest {}", path.display()),
        )?;
        if observables.is_empty() {
            return Err(manifest_error(path, "'observables' is empty"));
        }
        let context: Vec<String> = match doc.get("context") {
            None => Vec::new(),
            Some(v) => v
                .as_array()
                .and_then(|a| {
                    a.iter()
                        .map(|c| c.as_str().map(String::from))
                        .collect::<Option<Vec<_>>>()
                })
                .ok_or_else(|| manifest_error(path, "'context' must be a list of names"))?,
        };
        let normalization = match doc.get("normalization").and_then(Value::as_str) {
            None | Some("quadrature") => Normalization::Quadrature,
            Some("unit") => Normalization::Unit,
            Some(other) => {
                return Err(manifest_error(
                    path,
                    format!("normalization '{other}' is not 'quadrature' or 'unit'"),
                ));
            }
        };
        if observables.len() > quadrature::MAX_DIMS {
            return Err(manifest_error(
                path,
                format!(
                    "{} observables: nextstat measures the normalisation of flows over at most {} (quadrature)",
                    observables.len(),
                    quadrature::MAX_DIMS
                ),
            ));
        }
        let base = path.parent().unwrap_or(Path::new("."));
        let file = |key: &str| -> Result<Option<PathBuf>> {
            match doc.get(key) {
                None => Ok(None),
                Some(Value::String(s)) => Ok(Some(base.join(s))),
                Some(_) => Err(manifest_error(path, format!("'{key}' must be a path"))),
            }
        };
        let log_prob_path =
            file("log_prob")?.ok_or_else(|| manifest_error(path, "no 'log_prob' model"))?;
        let (d, k) = (observables.len(), context.len());
        let mut inputs = vec![("x", d)];
        if k > 0 {
            inputs.push(("context", k));
        }
        let what = format!("flow {}", path.display());
        let log_prob = OnnxModel::load(&log_prob_path, &inputs, "log_prob", &what)?;
        let sample = match file("sample")? {
            Some(p) => {
                inputs[0] = ("z", d);
                Some(OnnxModel::load(&p, &inputs, "x", &what)?)
            }
            None => None,
        };
        Ok(Arc::new(FlowPdf {
            manifest: path.to_path_buf(),
            observables,
            context,
            normalization,
            log_prob,
            sample,
        }))
    }

    pub fn precision(&self) -> Precision {
        self.log_prob.precision
    }

    /// The provider the flow runs on and those tried before it.
    pub fn provider(&self) -> (&str, &[Fallback]) {
        (&self.log_prob.provider, &self.log_prob.fallbacks)
    }

    /// The central-difference step of context value `c`: ε^(1/3)·max(|c|, 1), ε the model's
    /// precision (f64: ~6e-6; f32: ~5e-3).
    pub fn context_step(&self, c: f64) -> f64 {
        let eps = match self.precision() {
            Precision::F64 => f64::EPSILON,
            Precision::F32 => f64::from(f32::EPSILON),
        };
        eps.cbrt() * c.abs().max(1.0)
    }

    /// log_prob at `n` events given row-major (`x`: n × observables) with context `ctx`.
    pub fn log_prob(&self, n: usize, x: &[f64], ctx: &[f64]) -> Result<Vec<f64>> {
        let context: Vec<f64>;
        let mut inputs: Vec<(&str, &[f64])> = vec![("x", x)];
        if !ctx.is_empty() {
            context = ctx.iter().copied().cycle().take(n * ctx.len()).collect();
            inputs.push(("context", &context));
        }
        let lp = self.log_prob.run(n, &inputs, 1).map_err(|e| match e {
            Error::Computation(m) => {
                Error::Computation(format!("flow {}: {m}", self.manifest.display()))
            }
            other => other,
        })?;
        if let Some(i) = lp.iter().position(|v| v.is_nan()) {
            return Err(Error::Computation(format!(
                "flow {} returned log_prob NaN at ({})",
                self.manifest.display(),
                x[i * self.observables.len()..(i + 1) * self.observables.len()]
                    .iter()
                    .map(f64::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        Ok(lp)
    }
}

/// A flow as a node of a channel's density tree: the flow, the channel's columns it reads (in
/// the manifest's observable order), the box it is normalised over, and what depends only on
/// the box (the quadrature grid; for a flow without context, its ln Z).
#[derive(Clone, Debug)]
pub struct FlowLeaf {
    pub flow: Arc<FlowPdf>,
    pub columns: Vec<usize>,
    pub bounds: Vec<(f64, f64)>,
    grid: Arc<(Vec<f64>, Vec<f64>)>,
    /// ln Z of a flow without context (0 for a unit flow on its own box).
    pub fixed_log_norm: Option<f64>,
    /// For a flow without context: the column of the channel's data (after its observables)
    /// that holds each event's normalised log-density, computed once per dataset.
    pub derived_column: Option<usize>,
}

impl PartialEq for FlowLeaf {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.flow, &other.flow)
            && self.columns == other.columns
            && self.bounds == other.bounds
    }
}

impl FlowLeaf {
    /// `flow` over the channel's `columns` with their `bounds`; `init_context`: the context at
    /// the parameters' initial values (where a unit flow's integral is checked).
    pub fn new(
        flow: Arc<FlowPdf>,
        columns: Vec<usize>,
        bounds: Vec<(f64, f64)>,
        init_context: &[f64],
    ) -> Result<Self> {
        let grid = Arc::new(quadrature::refined_grid(&bounds, &mut |x| {
            flow.log_prob(x.len() / bounds.len(), x, init_context)
        })?);
        let mut leaf = FlowLeaf {
            flow,
            columns,
            bounds,
            grid,
            fixed_log_norm: None,
            derived_column: None,
        };
        let measured = leaf.measured_log_norm(init_context)?;
        let own_box = leaf
            .bounds
            .iter()
            .zip(&leaf.flow.observables)
            .all(|(&(lo, hi), a)| lo == a.lo && hi == a.hi);
        if leaf.flow.normalization == Normalization::Unit
            && own_box
            && (measured.exp() - 1.0).abs() > UNIT_TOLERANCE
        {
            return Err(Error::InvalidModel(format!(
                "flow {} declares normalization 'unit' but integrates to {} over its box",
                leaf.flow.manifest.display(),
                measured.exp()
            )));
        }
        if leaf.flow.context.is_empty() {
            leaf.fixed_log_norm = Some(
                if leaf.flow.normalization == Normalization::Unit && own_box {
                    0.0
                } else {
                    measured
                },
            );
        }
        Ok(leaf)
    }

    /// ln ∫_box exp(log_prob) at `ctx`, by quadrature.
    pub fn measured_log_norm(&self, ctx: &[f64]) -> Result<f64> {
        let (points, ln_w) = &*self.grid;
        let lp = self.flow.log_prob(ln_w.len(), points, ctx)?;
        let z = quadrature::log_sum_exp(&lp, ln_w);
        if !z.is_finite() {
            return Err(Error::Computation(format!(
                "flow {}: its integral over the box {:?} is {} (context {ctx:?})",
                self.flow.manifest.display(),
                self.bounds,
                z.exp()
            )));
        }
        Ok(z)
    }

    /// ln Z at `ctx`: the fixed value, 0 for a unit flow on its box, else measured.
    pub fn log_norm(&self, ctx: &[f64]) -> Result<f64> {
        match self.fixed_log_norm {
            Some(z) => Ok(z),
            None if self.flow.normalization == Normalization::Unit
                && self
                    .bounds
                    .iter()
                    .zip(&self.flow.observables)
                    .all(|(&(lo, hi), a)| lo == a.lo && hi == a.hi) =>
            {
                Ok(0.0)
            }
            None => self.measured_log_norm(ctx),
        }
    }

    /// The events' rows (one per event: the leaf's columns in manifest order).
    pub fn rows(&self, cols: &[&[f64]]) -> Vec<f64> {
        let n = cols.first().map_or(0, |c| c.len());
        let mut rows = Vec::with_capacity(n * self.columns.len());
        for e in 0..n {
            for &c in &self.columns {
                rows.push(cols[c][e]);
            }
        }
        rows
    }

    /// The normalised log-density at the events (`cols`: the channel's columns).
    pub fn log_density(&self, cols: &[&[f64]], ctx: &[f64]) -> Result<Vec<f64>> {
        let n = cols.first().map_or(0, |c| c.len());
        let z = self.log_norm(ctx)?;
        let mut lp = self.flow.log_prob(n, &self.rows(cols), ctx)?;
        for v in &mut lp {
            *v -= z;
        }
        Ok(lp)
    }

    /// `n` events drawn at `ctx` (rows as [`FlowLeaf::rows`]), within the box: through
    /// `sample.onnx` from standard-normal draws, redrawing those outside the box; without it,
    /// accept–reject under a flat envelope 5 % above the density's largest value on the
    /// quadrature grid.
    pub fn sample(&self, n: usize, ctx: &[f64], rng: &mut ToyStream) -> Result<Vec<f64>> {
        let d = self.columns.len();
        let inside = |row: &[f64]| {
            row.iter()
                .zip(&self.bounds)
                .all(|(x, &(lo, hi))| (lo..=hi).contains(x))
        };
        let mut out = Vec::with_capacity(n * d);
        enum Method<'m> {
            Sampler(&'m OnnxModel),
            Envelope(f64),
        }
        let method = match &self.flow.sample {
            Some(model) => Method::Sampler(model),
            None => {
                let (points, ln_w) = &*self.grid;
                let lp = self.flow.log_prob(ln_w.len(), points, ctx)?;
                let top = lp.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                Method::Envelope(top + ENVELOPE_MARGIN.ln())
            }
        };
        for _ in 0..MAX_SAMPLE_ROUNDS {
            let missing = n - out.len() / d;
            if missing == 0 {
                return Ok(out);
            }
            let batch = missing.max(64);
            match method {
                Method::Sampler(model) => {
                    let z: Vec<f64> = (0..batch * d).map(|_| rng.normal()).collect();
                    let context: Vec<f64> = ctx
                        .iter()
                        .copied()
                        .cycle()
                        .take(batch * ctx.len())
                        .collect();
                    let mut inputs: Vec<(&str, &[f64])> = vec![("z", &z)];
                    if !ctx.is_empty() {
                        inputs.push(("context", &context));
                    }
                    let x = model.run(batch, &inputs, d)?;
                    if let Some(bad) = x.iter().find(|v| !v.is_finite()) {
                        return Err(Error::Computation(format!(
                            "cannot sample flow {}: its sampler (sample.onnx) returned {bad} for an event; a sampler must return finite values",
                            self.flow.manifest.display()
                        )));
                    }
                    for row in x.chunks(d).filter(|r| inside(r)).take(missing) {
                        out.extend_from_slice(row);
                    }
                }
                Method::Envelope(top) => {
                    let x: Vec<f64> = (0..batch)
                        .flat_map(|_| {
                            self.bounds
                                .iter()
                                .map(|&(lo, hi)| lo + rng.uniform() * (hi - lo))
                                .collect::<Vec<_>>()
                        })
                        .collect();
                    let lp = self.flow.log_prob(batch, &x, ctx)?;
                    for (row, &l) in x.chunks(d).zip(&lp) {
                        if l > top {
                            return Err(Error::Computation(format!(
                                "cannot sample flow {}: its density at {row:?} is above the envelope taken from the quadrature grid (give the manifest a sample.onnx)",
                                self.flow.manifest.display()
                            )));
                        }
                        if out.len() / d < n && rng.uniform().ln() < l - top {
                            out.extend_from_slice(row);
                        }
                    }
                }
            }
        }
        Err(Error::Computation(format!(
            "cannot sample flow {}: after {MAX_SAMPLE_ROUNDS} rounds only {} of {n} events fell in the box {:?}",
            self.flow.manifest.display(),
            out.len() / d,
            self.bounds
        )))
    }
}
