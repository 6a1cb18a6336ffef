//! `nextstat._core.mixture_nll*`: the extended mixture NLL from per-event log-probabilities, on
//! the CPU or a CUDA GPU, from host arrays or from a device pointer (a PyTorch CUDA tensor,
//! read in place).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use ns_core::Result as NsResult;
use ns_unbinned::flow::runtime::Precision;
use ns_unbinned::reduce::cuda::{DeviceLogProbs, MixtureReducer, Weights};
use ns_unbinned::reduce::{GaussConstraint, MixtureLayout, MixtureNll, mixture_nll};
use numpy::{PyArray1, PyArray2, PyArrayMethods, PyReadonlyArray1, PyReadonlyArray2};
use pyo3::prelude::*;

use crate::{invalid, to_py};

type Out<'py> = (Bound<'py, PyArray1<f64>>, Bound<'py, PyArray2<f64>>);

/// One reducer per GPU, kept: its kernels compile once.
fn reducer(ordinal: usize) -> NsResult<Arc<MixtureReducer>> {
    static ALL: OnceLock<Mutex<HashMap<usize, Arc<MixtureReducer>>>> = OnceLock::new();
    let mut all = ALL
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    if let Some(r) = all.get(&ordinal) {
        return Ok(r.clone());
    }
    let r = Arc::new(MixtureReducer::new(ordinal)?);
    all.insert(ordinal, r.clone());
    Ok(r)
}

fn layout(
    processes: usize,
    events: usize,
    offsets: Option<Vec<usize>>,
    constraints: Option<Vec<(f64, f64)>>,
) -> MixtureLayout {
    MixtureLayout {
        processes,
        offsets: offsets.unwrap_or_else(|| vec![0, events]),
        constraints: constraints
            .unwrap_or_default()
            .into_iter()
            .map(|(mean, sigma)| GaussConstraint { mean, sigma })
            .collect(),
    }
}

fn output<'py>(py: Python<'py>, results: Vec<MixtureNll>, width: usize) -> PyResult<Out<'py>> {
    let nll: Vec<f64> = results.iter().map(|r| r.nll).collect();
    let n = results.len();
    let grad: Vec<f64> = results.into_iter().flat_map(|r| r.grad).collect();
    Ok((
        PyArray1::from_vec(py, nll),
        PyArray1::from_vec(py, grad).reshape([n, width])?,
    ))
}

fn ordinal_of(device: &str) -> PyResult<Option<usize>> {
    match device {
        "cpu" => Ok(None),
        "cuda" => Ok(Some(0)),
        d => d
            .strip_prefix("cuda:")
            .and_then(|n| n.parse().ok())
            .map(Some)
            .ok_or_else(|| {
                to_py(invalid(format!(
                    "device '{d}': the mixture reduction runs on 'cpu', 'cuda' or 'cuda:N'"
                )))
            }),
    }
}

/// From host arrays: `logp` [processes, events] (f64), `yields` [datasets, processes],
/// `values` [datasets, constraints]; on `device` ("cpu", "cuda", "cuda:N").
#[pyfunction]
#[pyo3(signature = (logp, yields, offsets=None, weights=None, constraints=None, values=None, device="cpu"))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn mixture_nll_host<'py>(
    py: Python<'py>,
    logp: PyReadonlyArray2<f64>,
    yields: PyReadonlyArray2<f64>,
    offsets: Option<Vec<usize>>,
    weights: Option<PyReadonlyArray1<f64>>,
    constraints: Option<Vec<(f64, f64)>>,
    values: Option<PyReadonlyArray2<f64>>,
    device: &str,
) -> PyResult<Out<'py>> {
    let a = logp.as_array();
    let (p, n) = (a.nrows(), a.ncols());
    let layout = layout(p, n, offsets, constraints);
    let logp: Vec<f64> = a.iter().copied().collect();
    let yields: Vec<f64> = yields.as_array().iter().copied().collect();
    let values: Vec<f64> = values.map_or_else(Vec::new, |v| v.as_array().iter().copied().collect());
    let weights: Option<Vec<f64>> = weights.map(|w| w.as_array().iter().copied().collect());
    let ordinal = ordinal_of(device)?;
    let results = py
        .detach(|| match ordinal {
            None => mixture_nll(&layout, &logp, weights.as_deref(), &yields, &values),
            Some(o) => reducer(o)?.reduce_host(
                &layout,
                &logp,
                weights.as_deref().map_or(Weights::None, Weights::Host),
                &yields,
                &values,
            ),
        })
        .map_err(to_py)?;
    output(py, results, p + layout.constraints.len())
}

/// From device memory at `address` on GPU `ordinal` (`dtype` "float32" or "float64",
/// [processes, events] contiguous); the caller has finished writing it.
#[pyfunction]
#[pyo3(signature = (address, dtype, processes, events, ordinal, yields, offsets=None, weights=None, constraints=None, values=None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn mixture_nll_device<'py>(
    py: Python<'py>,
    address: u64,
    dtype: &str,
    processes: usize,
    events: usize,
    ordinal: usize,
    yields: PyReadonlyArray2<f64>,
    offsets: Option<Vec<usize>>,
    weights: Option<PyReadonlyArray1<f64>>,
    constraints: Option<Vec<(f64, f64)>>,
    values: Option<PyReadonlyArray2<f64>>,
) -> PyResult<Out<'py>> {
    let precision = match dtype {
        "float32" => Precision::F32,
        "float64" => Precision::F64,
        other => {
            return Err(to_py(invalid(format!(
                "log-probabilities of dtype {other}: give float32 or float64"
            ))));
        }
    };
    let layout = layout(processes, events, offsets, constraints);
    let yields: Vec<f64> = yields.as_array().iter().copied().collect();
    let values: Vec<f64> = values.map_or_else(Vec::new, |v| v.as_array().iter().copied().collect());
    let weights: Option<Vec<f64>> = weights.map(|w| w.as_array().iter().copied().collect());
    let results = py
        .detach(|| {
            reducer(ordinal)?.reduce(
                &layout,
                DeviceLogProbs::Pointer { address, precision },
                weights.as_deref().map_or(Weights::None, Weights::Host),
                &yields,
                &values,
            )
        })
        .map_err(to_py)?;
    output(py, results, processes + layout.constraints.len())
}
