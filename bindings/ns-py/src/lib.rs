//! `nextstat._core`: the Rust engine for Python. Thin by design — it converts arguments, releases
//! the GIL around every computation and returns results as the JSON documents of
//! `ns_inference::report` (the CLI's key names); `python/nextstat` builds the typed result
//! objects and the pyhf-compatible `nextstat.infer` on top.

use ns_translate::FromWorkspace;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ns_compute::{CpuEvaluator, PreparedData, Scratch};
use ns_core::{HistosysCode, InterpCodes, NormsysCode};
use ns_inference::differentiable::{DifferentiableSession, StatisticData};
use ns_inference::request::Request;
use ns_inference::{Device, FitConfig, Fitter, TestStatistic, Workload, report};
use ns_translate::ops::{Join, Prune, Rename};
use ns_translate::patch::{PatchSet, apply_patch};
use ns_translate::{HistFactoryModel, ModelOptions, Workspace};
use numpy::{PyArray1, PyArray2, PyReadonlyArray1, PyReadonlyArray2};
use pyo3::create_exception;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

create_exception!(
    nextstat,
    NextStatError,
    PyValueError,
    "An error from the nextstat engine: the message says what is wrong and where."
);
create_exception!(
    nextstat,
    InvalidInputError,
    NextStatError,
    "The request cannot be answered as given: a malformed workspace, patch or argument, or a \
     model whose likelihood is undefined. Fix the input."
);
create_exception!(
    nextstat,
    ComputationError,
    NextStatError,
    "A valid request whose computation failed: a GPU error, or fits that failed everywhere."
);

fn to_py(e: ns_core::Error) -> PyErr {
    match e {
        ns_core::Error::Interrupted => {
            pyo3::exceptions::PyKeyboardInterrupt::new_err(e.to_string())
        }
        ns_core::Error::Device(_) | ns_core::Error::Computation(_) => {
            ComputationError::new_err(e.to_string())
        }
        _ => InvalidInputError::new_err(e.to_string()),
    }
}

type NsResult<T> = std::result::Result<T, ns_core::Error>;

fn invalid(message: String) -> ns_core::Error {
    ns_core::Error::InvalidInput(message)
}

/// A pyhf workspace (validated).
#[pyclass(module = "nextstat._core", name = "Workspace", frozen)]
struct PyWorkspace {
    ws: Workspace,
}

#[pymethods]
impl PyWorkspace {
    /// Parse a workspace from its JSON text; `origin` (a file name, say) names it in errors.
    #[staticmethod]
    #[pyo3(signature = (text, origin="workspace"))]
    fn from_json(text: &str, origin: &str) -> PyResult<Self> {
        let value = ns_translate::load::parse_json(text, origin).map_err(to_py)?;
        Ok(PyWorkspace {
            ws: Workspace::from_value(value).map_err(|e| match e {
                ns_core::Error::InvalidWorkspace(m) if origin != "workspace" => {
                    to_py(ns_core::Error::InvalidWorkspace(format!("{origin}: {m}")))
                }
                other => to_py(other),
            })?,
        })
    }

    /// The workspace as JSON text.
    fn to_json(&self) -> PyResult<String> {
        serde_json::to_string(&self.ws.to_value())
            .map_err(|e| NextStatError::new_err(e.to_string()))
    }

    /// Build the model of a measurement; `normsys`/`histosys` override the interpolation code of
    /// that modifier type only (pyhf's `modifier_settings`).
    #[pyo3(signature = (measurement_name=None, normsys=None, histosys=None))]
    fn model(
        &self,
        measurement_name: Option<String>,
        normsys: Option<&str>,
        histosys: Option<&str>,
    ) -> PyResult<PyModel> {
        let mut codes = InterpCodes::default();
        if let Some(n) = normsys {
            codes.normsys = NormsysCode::from_name(n).map_err(to_py)?;
        }
        if let Some(h) = histosys {
            codes.histosys = HistosysCode::from_name(h).map_err(to_py)?;
        }
        let options = ModelOptions {
            measurement: measurement_name,
            codes,
        };
        Ok(PyModel {
            model: HistFactoryModel::from_workspace(&self.ws, &options).map_err(to_py)?,
        })
    }

    /// Observed data of the model's channels (then its auxiliary data).
    #[pyo3(signature = (model, include_auxdata=true))]
    fn data(&self, model: &PyModel, include_auxdata: bool) -> PyResult<Vec<f64>> {
        self.ws.data(&model.model, include_auxdata).map_err(to_py)
    }

    fn digest(&self) -> String {
        ns_translate::pyjson::digest(&self.ws.to_value())
    }

    #[pyo3(signature = (channels=vec![], samples=vec![], modifiers=vec![], modifier_types=vec![], measurements=vec![]))]
    fn prune(
        &self,
        channels: Vec<String>,
        samples: Vec<String>,
        modifiers: Vec<String>,
        modifier_types: Vec<String>,
        measurements: Vec<String>,
    ) -> PyResult<Self> {
        let prune = Prune {
            channels,
            samples,
            modifiers,
            modifier_types,
            measurements,
        };
        Ok(PyWorkspace {
            ws: self.ws.prune(&prune).map_err(to_py)?,
        })
    }

    #[pyo3(signature = (channels=HashMap::new(), samples=HashMap::new(), modifiers=HashMap::new(), measurements=HashMap::new()))]
    fn rename(
        &self,
        channels: HashMap<String, String>,
        samples: HashMap<String, String>,
        modifiers: HashMap<String, String>,
        measurements: HashMap<String, String>,
    ) -> PyResult<Self> {
        let rename = Rename {
            channels,
            samples,
            modifiers,
            measurements,
        };
        Ok(PyWorkspace {
            ws: self.ws.rename(&rename).map_err(to_py)?,
        })
    }

    fn sorted(&self) -> Self {
        PyWorkspace {
            ws: self.ws.sorted(),
        }
    }

    #[staticmethod]
    #[pyo3(signature = (left, right, join="none", merge_channels=false))]
    fn combine(
        left: &PyWorkspace,
        right: &PyWorkspace,
        join: &str,
        merge_channels: bool,
    ) -> PyResult<Self> {
        let join = Join::from_name(join).map_err(to_py)?;
        Ok(PyWorkspace {
            ws: Workspace::combine(&left.ws, &right.ws, join, merge_channels).map_err(to_py)?,
        })
    }

    /// Apply an RFC 6902 JSON patch (JSON text).
    fn apply_patch(&self, patch_json: &str) -> PyResult<Self> {
        let patch = ns_translate::load::parse_json(patch_json, "patch").map_err(to_py)?;
        let mut doc = self.ws.to_value();
        apply_patch(&mut doc, &patch, "patch").map_err(to_py)?;
        Ok(PyWorkspace {
            ws: Workspace::from_value(doc).map_err(to_py)?,
        })
    }

    /// Apply the patch `name` of a HEPData patchset (JSON text), verifying its digest.
    fn apply_patchset(&self, patchset_json: &str, name: &str) -> PyResult<Self> {
        let value = ns_translate::load::parse_json(patchset_json, "patchset").map_err(to_py)?;
        let patchset = PatchSet::from_value(value).map_err(to_py)?;
        let doc = patchset.apply(&self.ws.to_value(), name).map_err(to_py)?;
        Ok(PyWorkspace {
            ws: Workspace::from_value(doc).map_err(to_py)?,
        })
    }
}

/// A HistFactory model with pyhf's parameter layout.
#[pyclass(module = "nextstat._core", name = "Model", frozen)]
struct PyModel {
    model: HistFactoryModel,
}

impl PyModel {
    fn params(&self, pars: &[f64]) -> NsResult<()> {
        if pars.len() != self.model.n_params() {
            return Err(invalid(format!(
                "pars has length {} but the model has {} parameters ({:?}…)",
                pars.len(),
                self.model.n_params(),
                &self.model.par_names[..self.model.n_params().min(3)]
            )));
        }
        Ok(())
    }

    fn prepared(&self, data: &[f64]) -> NsResult<PreparedData> {
        PreparedData::from_full(&self.model.compiled, data)
    }
}

#[pymethods]
impl PyModel {
    #[getter]
    fn par_names(&self) -> Vec<String> {
        self.model.par_names.clone()
    }
    #[getter]
    fn par_order(&self) -> Vec<String> {
        self.model
            .par_order()
            .iter()
            .map(|s| s.to_string())
            .collect()
    }
    #[getter]
    fn poi_index(&self) -> Option<usize> {
        self.model.poi_index()
    }
    #[getter]
    fn poi_name(&self) -> String {
        self.model.poi_name.clone()
    }
    #[getter]
    fn npars(&self) -> usize {
        self.model.n_params()
    }
    #[getter]
    fn channels(&self) -> Vec<String> {
        self.model.channels.iter().map(|c| c.name.clone()).collect()
    }
    #[getter]
    fn channel_nbins(&self) -> Vec<usize> {
        self.model.channels.iter().map(|c| c.n_bins).collect()
    }
    #[getter]
    fn samples(&self) -> Vec<String> {
        self.model.samples.clone()
    }
    #[getter]
    fn auxdata(&self) -> Vec<f64> {
        self.model.auxdata.clone()
    }
    #[getter]
    fn measurement(&self) -> String {
        self.model.measurement.clone()
    }
    fn suggested_init(&self) -> Vec<f64> {
        self.model.suggested_init()
    }
    fn suggested_bounds(&self) -> Vec<(f64, f64)> {
        self.model.suggested_bounds()
    }
    fn suggested_fixed(&self) -> Vec<bool> {
        self.model.suggested_fixed()
    }

    /// NLL and its gradient at `pars` against full data (main, then aux).
    fn nll_grad<'py>(
        &self,
        py: Python<'py>,
        pars: PyReadonlyArray1<f64>,
        data: PyReadonlyArray1<f64>,
    ) -> PyResult<(f64, Bound<'py, PyArray1<f64>>)> {
        let (pars, data) = (pars.as_slice()?.to_vec(), data.as_slice()?.to_vec());
        let (nll, grad) = py
            .detach(|| -> NsResult<(f64, Vec<f64>)> {
                self.params(&pars)?;
                let prepared = self.prepared(&data)?;
                let mut grad = vec![0.0; pars.len()];
                let nll = CpuEvaluator::new(&self.model.compiled).nll_with_gradient(
                    &pars,
                    &prepared,
                    &mut Scratch::new(&self.model.compiled),
                    Some(&mut grad),
                )?;
                Ok((nll, grad))
            })
            .map_err(to_py)?;
        Ok((nll, PyArray1::from_vec(py, grad)))
    }

    /// Expected main data and, if asked, the expected auxiliary data after it.
    #[pyo3(signature = (pars, include_auxdata=true))]
    fn expected_data<'py>(
        &self,
        py: Python<'py>,
        pars: PyReadonlyArray1<f64>,
        include_auxdata: bool,
    ) -> PyResult<Bound<'py, PyArray1<f64>>> {
        let pars = pars.as_slice()?.to_vec();
        self.params(&pars).map_err(to_py)?;
        let (mut main, aux) = CpuEvaluator::new(&self.model.compiled)
            .expected_data(&pars, &mut Scratch::new(&self.model.compiled))
            .map_err(to_py)?;
        if include_auxdata {
            main.extend(aux);
        }
        Ok(PyArray1::from_vec(py, main))
    }
}

/// Init, bounds and fixed parameters of a fit from optional Python values.
fn fit_config(
    model: &HistFactoryModel,
    init: Option<Vec<f64>>,
    bounds: Option<Vec<(f64, f64)>>,
    fixed: Option<Vec<bool>>,
    tolerance: f64,
) -> NsResult<FitConfig> {
    let mut config = FitConfig::suggested(model);
    let n = model.n_params();
    let check = |len: usize, what: &str| {
        if len == n {
            Ok(())
        } else {
            Err(invalid(format!(
                "{what} has {len} entries but the model has {n} parameters"
            )))
        }
    };
    if let Some(v) = init {
        check(v.len(), "init_pars")?;
        config.init = v;
    }
    if let Some(v) = bounds {
        check(v.len(), "par_bounds")?;
        config.bounds = v;
    }
    if let Some(v) = fixed {
        check(v.len(), "fixed_params")?;
        config.fixed = v;
    }
    if !(tolerance > 0.0) {
        return Err(invalid(format!(
            "tolerance must be positive, not {tolerance}"
        )));
    }
    config.optimizer.pg_tol = tolerance;
    Ok(config)
}

fn fitter<'m>(
    model: &'m HistFactoryModel,
    device: &str,
    workload: Workload,
    stop: &Arc<AtomicBool>,
) -> NsResult<Fitter<'m>> {
    Ok(
        Fitter::on_device(model, Device::from_name(device)?, workload)?
            .with_interrupt(stop.clone()),
    )
}

/// Run `work` on a worker thread while this (the Python) thread, without the GIL, watches for
/// signals: Ctrl-C sets the interrupt flag, waits for the engine to stop at its next check, and
/// raises KeyboardInterrupt.
fn run_interruptible<T: Send>(
    py: Python<'_>,
    work: impl FnOnce(&Arc<AtomicBool>) -> NsResult<T> + Send,
) -> PyResult<T> {
    let stop = Arc::new(AtomicBool::new(false));
    std::thread::scope(|scope| {
        let worker = scope.spawn(|| work(&stop));
        while !worker.is_finished() {
            py.detach(|| std::thread::sleep(Duration::from_millis(20)));
            if let Err(interrupt) = py.check_signals() {
                stop.store(true, Ordering::Relaxed);
                let _ = py.detach(|| worker.join());
                return Err(interrupt);
            }
        }
        match py.detach(|| worker.join()) {
            Ok(result) => result.map_err(to_py),
            Err(_) => Err(ComputationError::new_err(
                "the nextstat engine panicked (a bug: please report it)",
            )),
        }
    })
}

fn json_text(value: serde_json::Value) -> String {
    value.to_string()
}

/// The fit configuration and device of an inference call, as the Python layer sends them (JSON);
/// the verb and its own arguments travel separately as an `ns_inference::request::Request`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Options {
    init: Option<Vec<f64>>,
    bounds: Option<Vec<(f64, f64)>>,
    fixed: Option<Vec<bool>>,
    #[serde(default = "default_tolerance")]
    tolerance: f64,
    #[serde(default = "default_device")]
    device: String,
}

fn default_tolerance() -> f64 {
    1e-6
}
fn default_device() -> String {
    "cpu".into()
}

/// Run an inference request (JSON, e.g. `{"verb": "hypotest", "mu": 1.0}`) on `data` with the
/// JSON `options`; returns the result's report JSON (`ns_inference::report`).
#[pyfunction]
fn infer(
    py: Python<'_>,
    model: &PyModel,
    data: Vec<f64>,
    options: &str,
    request: &str,
) -> PyResult<String> {
    let o: Options = serde_json::from_str(options)
        .map_err(|e| InvalidInputError::new_err(format!("bad options: {e}")))?;
    let request: Request = serde_json::from_str(request)
        .map_err(|e| InvalidInputError::new_err(format!("bad request: {e}")))?;
    run_interruptible(py, |stop| {
        let m = &model.model;
        let config = fit_config(
            m,
            o.init.clone(),
            o.bounds.clone(),
            o.fixed.clone(),
            o.tolerance,
        )?;
        let prepared = model.prepared(&data)?;
        let f = fitter(m, &o.device, request.workload(m), stop)?;
        let outcome = request.run(&f, &prepared, &config, &|_| {})?;
        Ok(json_text(outcome.report(m, true)))
    })
}

/// Draw `n_toys` toys at `params` and fit each on `device`: (toy data rows, fit report JSONs).
#[pyfunction]
#[pyo3(signature = (model, params, n_toys, seed=0, tolerance=1e-6, device="cuda"))]
fn fit_toys<'py>(
    py: Python<'py>,
    model: &PyModel,
    params: Vec<f64>,
    n_toys: usize,
    seed: u64,
    tolerance: f64,
    device: &str,
) -> PyResult<(Bound<'py, PyArray2<f64>>, Vec<String>)> {
    let (rows, fits) = run_interruptible(py, |stop| -> NsResult<(Vec<Vec<f64>>, Vec<String>)> {
        let m = &model.model;
        model.params(&params)?;
        let config = fit_config(m, None, None, None, tolerance)?;
        let f = fitter(m, device, Workload::Batch { fits: n_toys }, stop)?;
        // The optimizer's variable scaling, once for all toys: at the Asimov data of `params`.
        let (main, aux) = CpuEvaluator::new(&m.compiled)
            .expected_data(&params, &mut Scratch::new(&m.compiled))?;
        let config = f.with_scale(&PreparedData::new(&m.compiled, main, aux)?, &config)?;
        let (toys, results) = ns_inference::fit_toys(&f, &params, n_toys, seed, &config, &|_| {})?;
        let rows = toys
            .iter()
            .map(|t| t.main.iter().chain(&t.aux).copied().collect())
            .collect();
        let fits = results
            .into_iter()
            .map(|r| r.map(|fit| json_text(report::fit(m, &fit, true))))
            .collect::<NsResult<Vec<_>>>()?;
        Ok((rows, fits))
    })?;
    let array =
        PyArray2::from_vec2(py, &rows).map_err(|e| NextStatError::new_err(e.to_string()))?;
    Ok((array, fits))
}

/// Fit caller-supplied datasets (rows of full data) in one batch on `device`, each with its own
/// init and bounds (or one of each for all).
#[pyfunction]
#[pyo3(signature = (model, data, init=None, bounds=None, tolerance=1e-6, device="cuda"))]
fn fit_from_data(
    py: Python<'_>,
    model: &PyModel,
    data: PyReadonlyArray2<f64>,
    init: Option<Vec<Vec<f64>>>,
    bounds: Option<Vec<Vec<(f64, f64)>>>,
    tolerance: f64,
    device: &str,
) -> PyResult<Vec<String>> {
    let rows: Vec<Vec<f64>> = data.as_array().outer_iter().map(|r| r.to_vec()).collect();
    run_interruptible(py, |stop| -> NsResult<Vec<String>> {
        let m = &model.model;
        let datasets = rows
            .iter()
            .map(|r| model.prepared(r))
            .collect::<NsResult<Vec<_>>>()?;
        let base = fit_config(m, None, None, None, tolerance)?;
        let init = init.unwrap_or_else(|| vec![base.init.clone()]);
        let bounds = bounds.unwrap_or_else(|| vec![base.bounds.clone()]);
        let f = fitter(
            m,
            device,
            Workload::Batch {
                fits: datasets.len(),
            },
            stop,
        )?;
        f.fit_datasets(&datasets, &init, &bounds, &base, &|_| {})?
            .into_iter()
            .map(|r| r.map(|fit| json_text(report::fit(m, &fit, true))))
            .collect()
    })
}

/// A model whose named samples' yields are differentiable inputs
/// (`ns_inference::differentiable`): NLL and profiled test statistics with their gradients with
/// respect to the yields, batched over rows.
#[pyclass(name = "DifferentiableSession", module = "nextstat._core", frozen)]
struct PyDifferentiable {
    session: DifferentiableSession,
}

/// One value per row, and rows of values, as NumPy arrays.
type Values<'py> = Bound<'py, PyArray1<f64>>;
type Rows<'py> = Bound<'py, PyArray2<f64>>;

/// Rows of a 2-d array, each `width` long.
fn rows_of(array: &PyReadonlyArray2<f64>, width: usize, what: &str) -> NsResult<Vec<f64>> {
    let a = array.as_array();
    if a.ncols() != width || a.nrows() == 0 {
        return Err(invalid(format!(
            "{what} has shape {:?}; it needs rows of {width} values",
            a.shape()
        )));
    }
    Ok(a.iter().copied().collect())
}

#[pymethods]
impl PyDifferentiable {
    #[new]
    fn new(model: &PyModel, samples: Vec<(String, String)>) -> PyResult<Self> {
        Ok(PyDifferentiable {
            session: DifferentiableSession::new(&model.model, &samples).map_err(to_py)?,
        })
    }

    #[getter]
    fn n_signal(&self) -> usize {
        self.session.n_signal()
    }

    fn nominal_signal(&self) -> Vec<f64> {
        self.session.nominal_signal()
    }

    /// (nll (B,), dNLL/ds (B, n), dNLL/dθ (B, P)) for signal rows (B, n) and parameter rows
    /// (1 or B, P) on the full data (main then aux).
    fn nll<'py>(
        &self,
        py: Python<'py>,
        signal: PyReadonlyArray2<f64>,
        pars: PyReadonlyArray2<f64>,
        data: Vec<f64>,
    ) -> PyResult<(Values<'py>, Rows<'py>, Rows<'py>)> {
        let s = &self.session;
        let (n, p) = (s.n_signal(), s.model().n_params());
        let signals = rows_of(&signal, n, "signal").map_err(to_py)?;
        let pars = rows_of(&pars, p, "pars").map_err(to_py)?;
        let prepared = PreparedData::from_full(&s.model().compiled, &data).map_err(to_py)?;
        let rows = py
            .detach(|| s.nll_batch(&signals, &pars, &prepared))
            .map_err(to_py)?;
        let nll: Vec<f64> = rows.iter().map(|r| r.nll).collect();
        let ds: Vec<Vec<f64>> = rows.iter().map(|r| r.d_signal.clone()).collect();
        let dp: Vec<Vec<f64>> = rows.iter().map(|r| r.d_pars.clone()).collect();
        let array2 = |v: &[Vec<f64>]| {
            PyArray2::from_vec2(py, v).map_err(|e| NextStatError::new_err(e.to_string()))
        };
        Ok((PyArray1::from_vec(py, nll), array2(&ds)?, array2(&dp)?))
    }

    /// (q (B,), dq/ds (B, n)) of test statistic `stat` at `mu` for each signal row, on `data`
    /// (full data) or, when `data` is None, on the Asimov data at `asimov_pars`.
    #[pyo3(signature = (signal, stat, mu, data=None, asimov_pars=None, init=None, bounds=None, fixed=None, tolerance=1e-9))]
    #[allow(clippy::too_many_arguments)]
    fn profiled<'py>(
        &self,
        py: Python<'py>,
        signal: PyReadonlyArray2<f64>,
        stat: &str,
        mu: f64,
        data: Option<Vec<f64>>,
        asimov_pars: Option<Vec<f64>>,
        init: Option<Vec<f64>>,
        bounds: Option<Vec<(f64, f64)>>,
        fixed: Option<Vec<bool>>,
        tolerance: f64,
    ) -> PyResult<(Values<'py>, Rows<'py>)> {
        let s = &self.session;
        let model = s.model();
        let signals = rows_of(&signal, s.n_signal(), "signal").map_err(to_py)?;
        let stat = TestStatistic::from_name(stat).map_err(to_py)?;
        let config = fit_config(model, init, bounds, fixed, tolerance).map_err(to_py)?;
        let prepared = data
            .map(|d| PreparedData::from_full(&model.compiled, &d))
            .transpose()
            .map_err(to_py)?;
        let (q, dq) = py
            .detach(|| -> NsResult<(Vec<f64>, Vec<Vec<f64>>)> {
                let on = match (&prepared, &asimov_pars) {
                    (Some(d), _) => StatisticData::Fixed(d),
                    (None, Some(p)) => StatisticData::Asimov { parameters: p },
                    (None, None) => {
                        return Err(invalid(
                            "give the data, or the parameters of the Asimov data".into(),
                        ));
                    }
                };
                let rows = if signals.len() == s.n_signal() {
                    vec![s.profiled(&signals, stat, mu, on, &config)?]
                } else {
                    s.profiled_batch(&signals, stat, mu, on, &config)?
                };
                Ok(rows.into_iter().map(|r| (r.q, r.d_signal)).unzip())
            })
            .map_err(to_py)?;
        let dq = PyArray2::from_vec2(py, &dq).map_err(|e| NextStatError::new_err(e.to_string()))?;
        Ok((PyArray1::from_vec(py, q), dq))
    }
}

/// Whether a CUDA driver and device are present (never raises).
#[pyfunction]
fn has_cuda() -> bool {
    ns_compute::cuda::has_cuda()
}

/// Whether the Metal backend is available (not in this build).
#[pyfunction]
fn has_metal() -> bool {
    false
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("NextStatError", m.py().get_type::<NextStatError>())?;
    m.add("InvalidInputError", m.py().get_type::<InvalidInputError>())?;
    m.add("ComputationError", m.py().get_type::<ComputationError>())?;
    m.add_class::<PyWorkspace>()?;
    m.add_class::<PyModel>()?;
    m.add_class::<PyDifferentiable>()?;
    for f in [
        wrap_pyfunction!(infer, m)?,
        wrap_pyfunction!(fit_toys, m)?,
        wrap_pyfunction!(fit_from_data, m)?,
        wrap_pyfunction!(has_cuda, m)?,
        wrap_pyfunction!(has_metal, m)?,
    ] {
        m.add_function(f)?;
    }
    Ok(())
}
