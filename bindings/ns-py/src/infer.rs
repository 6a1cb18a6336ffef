//! Inference entry points: one `infer` over the request layer, and the toy-batch functions.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use ns_compute::Likelihood;
use ns_inference::call::{Call, FitOptions};
use ns_inference::{Device, FitConfig, Fitter, Workload, report};
use ns_translate::HistFactoryModel;
use numpy::{PyArray2, PyReadonlyArray2};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::model::PyModel;
use crate::{ComputationError, InvalidInputError, NextStatError, NsResult, to_py};

/// Init, bounds and fixed parameters of a fit from optional Python values, by the call's rules.
pub(crate) fn fit_config(
    model: &HistFactoryModel,
    init: Option<Vec<f64>>,
    bounds: Option<Vec<(f64, f64)>>,
    fixed: Option<Vec<bool>>,
    tolerance: f64,
) -> NsResult<FitConfig> {
    FitOptions::from_lists(tolerance, init, bounds, fixed).config(model)
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
pub(crate) fn run_interruptible<T: Send>(
    py: Python<'_>,
    work: impl FnOnce(&Arc<AtomicBool>) -> NsResult<T> + Send,
) -> PyResult<T> {
    let stop = Arc::new(AtomicBool::new(false));
    run_watched(py, None, &|| stop.store(true, Ordering::Relaxed), || {
        work(&stop)
    })
}

/// A progress bar of a long call: tqdm's, moved by the watching thread to the steps the worker
/// reports in `done`.
pub(crate) struct Progress<'py> {
    bar: Bound<'py, PyAny>,
    done: Arc<AtomicUsize>,
    shown: usize,
}

impl<'py> Progress<'py> {
    /// A tqdm bar (on stderr) of `total` steps labelled `label`; `None` without a label (the
    /// caller asked for none, or the run is not interactive), without steps, or without tqdm.
    fn new(py: Python<'py>, label: Option<&str>, total: u64) -> Option<Self> {
        let label = label.filter(|_| total > 0)?;
        let tqdm = py.import("tqdm.auto").ok()?.getattr("tqdm").ok()?;
        let kwargs = PyDict::new(py);
        kwargs.set_item("total", total).ok()?;
        kwargs.set_item("desc", label).ok()?;
        kwargs.set_item("leave", false).ok()?;
        let bar = tqdm.call((), Some(&kwargs)).ok()?;
        Some(Progress {
            bar,
            done: Arc::new(AtomicUsize::new(0)),
            shown: 0,
        })
    }

    fn show(&mut self) {
        let done = self.done.load(Ordering::Relaxed);
        if done > self.shown {
            let _ = self.bar.call_method1("update", (done - self.shown,));
            self.shown = done;
        }
    }

    fn close(&self) {
        let _ = self.bar.call_method0("close");
    }
}

/// Run `work` on a worker thread while this (the Python) thread, without the GIL, updates the
/// progress bar and watches for signals: on Ctrl-C it calls `interrupt` (which stops the
/// engine), waits for the worker to return and raises KeyboardInterrupt.
pub(crate) fn run_watched<T: Send>(
    py: Python<'_>,
    mut progress: Option<Progress<'_>>,
    interrupt: &(dyn Fn() + Sync),
    work: impl FnOnce() -> NsResult<T> + Send,
) -> PyResult<T> {
    let result = std::thread::scope(|scope| {
        let worker = scope.spawn(work);
        while !worker.is_finished() {
            py.detach(|| std::thread::sleep(Duration::from_millis(20)));
            if let Some(p) = progress.as_mut() {
                p.show();
            }
            if let Err(signal) = py.check_signals() {
                interrupt();
                let _ = py.detach(|| worker.join());
                return Err(signal);
            }
        }
        match py.detach(|| worker.join()) {
            Ok(result) => result.map_err(to_py),
            Err(_) => Err(ComputationError::new_err(
                "the nextstat engine panicked (a bug: please report it)",
            )),
        }
    });
    if let Some(p) = &progress {
        p.close();
    }
    result
}

fn json_text(value: serde_json::Value) -> String {
    value.to_string()
}

/// The call of a Python verb (`ns_inference::call::Call` as JSON, without its model: the
/// model is `model`, whose source is filled in).
fn call_of(model: &PyModel, call: &str) -> PyResult<Call> {
    let value: serde_json::Value = serde_json::from_str(call)
        .map_err(|e| InvalidInputError::new_err(format!("bad call: {e}")))?;
    let mut call = Call::from_json(value).map_err(to_py)?;
    if call.model.is_none() {
        call.model = model.source.clone();
    }
    Ok(call)
}

/// Run an inference call (JSON, e.g. `{"request": {"verb": "hypotest", "mu": 1.0}, "data":
/// {"values": [...]}}`) on `model`; returns the result's report JSON (`ns_inference::report`).
/// With a `progress` label, long requests (toys, scans, rankings, limit grids) show a tqdm bar.
#[pyfunction]
#[pyo3(signature = (model, call, progress=None))]
pub(crate) fn infer(
    py: Python<'_>,
    model: &PyModel,
    call: &str,
    progress: Option<&str>,
) -> PyResult<String> {
    let call = call_of(model, call)?;
    run_call_on(py, &model.model, &call, progress)
}

/// The call JSON `infer` would run (the model's workspace inline): what `save_call` writes.
#[pyfunction]
pub(crate) fn call_json(model: &PyModel, call: &str) -> PyResult<String> {
    let call = call_of(model, call)?;
    if call.model.is_none() {
        return Err(InvalidInputError::new_err(
            "this model was not built from a workspace, so a call cannot name it",
        ));
    }
    serde_json::to_string_pretty(&call.to_json())
        .map_err(|e| NextStatError::new_err(e.to_string()))
}

/// Run a saved call (JSON text; relative paths read from `base`): (verb, report JSON).
#[pyfunction]
#[pyo3(signature = (call, base=None, progress=None))]
pub(crate) fn run_call(
    py: Python<'_>,
    call: &str,
    base: Option<std::path::PathBuf>,
    progress: Option<&str>,
) -> PyResult<(String, String)> {
    let value: serde_json::Value = serde_json::from_str(call)
        .map_err(|e| InvalidInputError::new_err(format!("bad call: {e}")))?;
    let mut call = Call::from_json(value).map_err(to_py)?;
    let Some(model_ref) = call.model.as_mut() else {
        return Err(InvalidInputError::new_err("the call names no model"));
    };
    if let Some(base) = base {
        model_ref.resolve_paths(&base);
    }
    let (_, model) = model_ref
        .load(&ns_translate::load::read_json)
        .map_err(to_py)?;
    let verb = serde_json::to_value(&call.request)
        .ok()
        .and_then(|v| v["verb"].as_str().map(String::from))
        .unwrap_or_default();
    Ok((verb, run_call_on(py, &model, &call, progress)?))
}

fn run_call_on(
    py: Python<'_>,
    model: &HistFactoryModel,
    call: &Call,
    progress: Option<&str>,
) -> PyResult<String> {
    let bar = Progress::new(py, progress, call.request.progress_steps(model));
    let done = bar.as_ref().map(|p| p.done.clone());
    let stop = Arc::new(AtomicBool::new(false));
    run_watched(py, bar, &|| stop.store(true, Ordering::Relaxed), || {
        let outcome = call.run(model, stop.clone(), &|k| {
            if let Some(done) = &done {
                done.fetch_max(k, Ordering::Relaxed);
            }
        })?;
        Ok(json_text(outcome.report(model, true)))
    })
}

/// Draw `n_toys` toys at `params` and fit each on `device`: (toy data rows, fit report JSONs).
#[pyfunction]
#[pyo3(signature = (model, params, n_toys, seed=0, tolerance=1e-6, device="cuda"))]
pub(crate) fn fit_toys<'py>(
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
        let config = f.with_scale(&m.asimov(&params)?, &config)?;
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
pub(crate) fn fit_from_data(
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
