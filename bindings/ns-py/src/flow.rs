//! `nextstat._core.Flow`: a flow PDF of a manifest, evaluated and sampled outside a model (to
//! compare with the framework it was trained in, or to look at it).

use std::path::PathBuf;

use ns_compute::rng::ToyStream;
use ns_unbinned::flow::{FlowLeaf, FlowPdf};
use numpy::{PyArray1, PyArray2, PyArrayMethods, PyReadonlyArray2};
use pyo3::prelude::*;

use crate::{invalid, to_py};

/// A flow normalised over a box (default: its manifest's observable ranges).
#[pyclass(module = "nextstat._core", name = "Flow", frozen)]
pub(crate) struct PyFlow {
    leaf: FlowLeaf,
}

impl PyFlow {
    fn context<'a>(&self, context: &'a Option<Vec<f64>>) -> PyResult<&'a [f64]> {
        let ctx = context.as_deref().unwrap_or(&[]);
        let want = self.leaf.flow.context.len();
        if ctx.len() != want {
            return Err(to_py(invalid(format!(
                "the flow takes {want} context values ({}); {} were given",
                self.leaf.flow.context.join(", "),
                ctx.len()
            ))));
        }
        Ok(ctx)
    }

    fn rows(&self, x: &PyReadonlyArray2<f64>) -> PyResult<(usize, Vec<f64>)> {
        let a = x.as_array();
        let d = self.leaf.columns.len();
        if a.ncols() != d {
            return Err(to_py(invalid(format!(
                "x has shape {:?}; the flow takes rows of {d} observables",
                a.shape()
            ))));
        }
        Ok((a.nrows(), a.iter().copied().collect()))
    }
}

/// Load the flow of `manifest`, normalised over `bounds` ([(low, high)] per observable; default:
/// the manifest's ranges); `context`: where a unit flow's integral is checked.
#[pyfunction]
#[pyo3(signature = (manifest, bounds=None, context=None))]
pub(crate) fn load_flow(
    manifest: PathBuf,
    bounds: Option<Vec<(f64, f64)>>,
    context: Option<Vec<f64>>,
) -> PyResult<PyFlow> {
    let flow = FlowPdf::load(&manifest).map_err(to_py)?;
    let d = flow.observables.len();
    let bounds = bounds.unwrap_or_else(|| flow.observables.iter().map(|a| (a.lo, a.hi)).collect());
    if bounds.len() != d
        || bounds
            .iter()
            .any(|(lo, hi)| !(lo < hi && lo.is_finite() && hi.is_finite()))
    {
        return Err(to_py(invalid(format!(
            "bounds {bounds:?}: give one finite (low, high) with low < high per observable ({d})"
        ))));
    }
    let ctx = context.unwrap_or_else(|| vec![0.0; flow.context.len()]);
    if ctx.len() != flow.context.len() {
        return Err(to_py(invalid(format!(
            "the flow takes {} context values; {} were given",
            flow.context.len(),
            ctx.len()
        ))));
    }
    let leaf = FlowLeaf::new(flow, (0..d).collect(), bounds, &ctx).map_err(to_py)?;
    Ok(PyFlow { leaf })
}

#[pymethods]
impl PyFlow {
    /// The model's own log_prob at the rows of `x` (not normalised over the box).
    #[pyo3(signature = (x, context=None))]
    fn log_prob<'py>(
        &self,
        py: Python<'py>,
        x: PyReadonlyArray2<f64>,
        context: Option<Vec<f64>>,
    ) -> PyResult<Bound<'py, PyArray1<f64>>> {
        let ctx = self.context(&context)?.to_vec();
        let (n, rows) = self.rows(&x)?;
        let lp = py
            .detach(|| self.leaf.flow.log_prob(n, &rows, &ctx))
            .map_err(to_py)?;
        Ok(PyArray1::from_vec(py, lp))
    }

    /// ln Z: the log of the flow's integral over the box at `context`.
    #[pyo3(signature = (context=None))]
    fn log_norm(&self, py: Python<'_>, context: Option<Vec<f64>>) -> PyResult<f64> {
        let ctx = self.context(&context)?.to_vec();
        py.detach(|| self.leaf.log_norm(&ctx)).map_err(to_py)
    }

    /// `n` events drawn within the box at `context` from stream `seed` (rows of observables).
    #[pyo3(signature = (n, context=None, seed=0))]
    fn sample<'py>(
        &self,
        py: Python<'py>,
        n: usize,
        context: Option<Vec<f64>>,
        seed: u64,
    ) -> PyResult<Bound<'py, PyArray2<f64>>> {
        if n > ns_unbinned::model::MAX_TOY_EVENTS as usize {
            return Err(to_py(invalid(format!(
                "n = {n}: draw at most {:e} events at once",
                ns_unbinned::model::MAX_TOY_EVENTS
            ))));
        }
        let ctx = self.context(&context)?.to_vec();
        let d = self.leaf.columns.len();
        let rows = py
            .detach(|| self.leaf.sample(n, &ctx, &mut ToyStream::new(seed, 0, 0)))
            .map_err(to_py)?;
        PyArray1::from_vec(py, rows).reshape([n, d])
    }

    /// The execution provider the flow runs on (ONNX Runtime's name).
    #[getter]
    fn provider(&self) -> String {
        self.leaf.flow.provider().0.to_string()
    }

    /// Providers tried before it, as (provider, reason).
    #[getter]
    fn fallbacks(&self) -> Vec<(String, String)> {
        self.leaf
            .flow
            .provider()
            .1
            .iter()
            .map(|f| (f.provider.clone(), f.reason.clone()))
            .collect()
    }

    /// "float32" or "float64": the type the ONNX model computes in.
    #[getter]
    fn precision(&self) -> &'static str {
        self.leaf.flow.precision().name()
    }

    #[getter]
    fn context_names(&self) -> Vec<String> {
        self.leaf.flow.context.clone()
    }

    #[getter]
    fn bounds(&self) -> Vec<(f64, f64)> {
        self.leaf.bounds.clone()
    }

    fn __repr__(&self) -> String {
        format!(
            "Flow({}, {} observables, provider {})",
            self.leaf.flow.manifest.display(),
            self.leaf.columns.len(),
            self.leaf.flow.provider().0
        )
    }
}
