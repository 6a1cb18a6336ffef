//! Inference entry points: `infer` runs an `ns_api::call::Call` on a model, `call_json`
//! writes it, `run_call` runs a saved one.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use ns_api::call::{Call, DataChoice, FitOptions};
use ns_inference::FitConfig;
use ns_translate::HistFactoryModel;
use numpy::PyReadonlyArray1;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::model::PyModel;
use crate::unbinned::PyUnbinnedModel;
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
    progress: Option<Progress<'_>>,
    interrupt: &(dyn Fn() + Sync),
    work: impl FnOnce() -> NsResult<T> + Send,
) -> PyResult<T> {
    run_cancellable(py, progress, interrupt, None, work)
}

/// [`run_watched`], also calling `interrupt` once `cancelled()` (a Python callable, asked at
/// every tick) is true: how a Dask task whose future was cancelled stops the engine.
pub(crate) fn run_cancellable<T: Send>(
    py: Python<'_>,
    mut progress: Option<Progress<'_>>,
    interrupt: &(dyn Fn() + Sync),
    cancelled: Option<&Bound<'_, PyAny>>,
    work: impl FnOnce() -> NsResult<T> + Send,
) -> PyResult<T> {
    let mut was_cancelled = false;
    let result = std::thread::scope(|scope| {
        // The worker wakes this thread when it is done: a short call returns at once instead of
        // at the next 20 ms tick (each Python call paid up to 20 ms before).
        let watcher = std::thread::current();
        let worker = scope.spawn(move || {
            let result = work();
            watcher.unpark();
            result
        });
        while !worker.is_finished() {
            py.detach(|| std::thread::park_timeout(Duration::from_millis(20)));
            if let Some(p) = progress.as_mut() {
                p.show();
            }
            if let Err(signal) = py.check_signals() {
                interrupt();
                let _ = py.detach(|| worker.join());
                return Err(signal);
            }
            if !was_cancelled
                && let Some(cancelled) = cancelled
                && cancelled
                    .call0()
                    .and_then(|v| v.is_truthy())
                    .unwrap_or(false)
            {
                // The worker returns `Interrupted` at its next check.
                interrupt();
                was_cancelled = true;
            }
        }
        match py.detach(|| worker.join()) {
            // An ordinary exception: a KeyboardInterrupt would take a Dask worker down with it.
            Ok(Err(ns_core::Error::Interrupted)) if was_cancelled => {
                Err(ComputationError::new_err(
                    "cancelled: the engine stopped before the computation finished",
                ))
            }
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

/// The call of a Python verb (`ns_api::call::Call` as JSON, without its model: the
/// model is `model`).
pub(crate) fn call_of(call: &str) -> PyResult<Call> {
    let value: serde_json::Value = serde_json::from_str(call)
        .map_err(|e| InvalidInputError::new_err(format!("bad call: {e}")))?;
    Call::from_json(value).map_err(to_py)
}

/// `call` with its data given as an array beside the JSON (a NumPy array crosses as memory:
/// 10⁵ events written and read back as JSON text took 60 ms a call); finite values only, as the
/// JSON path requires.
fn call_with_data(call: &str, data: Option<PyReadonlyArray1<'_, f64>>) -> PyResult<Call> {
    let mut call = call_of(call)?;
    if let Some(data) = data {
        let values = data.as_slice()?;
        if let Some(i) = values.iter().position(|v| !v.is_finite()) {
            return Err(InvalidInputError::new_err(format!(
                "data[{i}] is {}; give finite numbers",
                values[i]
            )));
        }
        call.data = DataChoice::Values(values.to_vec());
    }
    Ok(call)
}

/// Run an inference call (JSON, e.g. `{"request": {"verb": "hypotest", "mu": 1.0}, "data":
/// {"values": [...]}}`) on `model`; returns the result's report JSON (`ns_api::report`).
/// With a `progress` label, long requests (toys, scans, rankings, limit grids) show a tqdm bar.
#[pyfunction]
#[pyo3(signature = (model, call, progress=None, data=None))]
pub(crate) fn infer(
    py: Python<'_>,
    model: &Bound<'_, PyAny>,
    call: &str,
    progress: Option<&str>,
    data: Option<PyReadonlyArray1<'_, f64>>,
) -> PyResult<String> {
    let call = call_with_data(call, data)?;
    if let Ok(m) = model.cast::<PyModel>() {
        return run_call_on(py, &m.get().model, &call, progress, &|_| {});
    }
    if let Ok(m) = model.cast::<crate::joint::PyJointModel>() {
        return run_call_on(py, m.get().model.as_ref(), &call, progress, &|_| {});
    }
    if let Ok(m) = model.cast::<PyUnbinnedModel>() {
        let unbinned = m.get().model.as_ref();
        return run_call_on(py, unbinned, &call, progress, &|report| {
            ns_source::annotate_unbinned(unbinned, report)
        });
    }
    Err(pyo3::exceptions::PyTypeError::new_err(format!(
        "model must be a nextstat Model, UnbinnedModel or JointModel, not {}",
        model.get_type().name()?
    )))
}

/// The call JSON `infer` would run (the model's workspace inline): what `save_call` writes.
#[pyfunction]
#[pyo3(signature = (model, call, data=None))]
pub(crate) fn call_json(
    model: &Bound<'_, PyAny>,
    call: &str,
    data: Option<PyReadonlyArray1<'_, f64>>,
) -> PyResult<String> {
    let mut call = call_with_data(call, data)?;
    let model_ref = if let Ok(m) = model.cast::<PyUnbinnedModel>() {
        m.get().source.clone()
    } else if let Ok(m) = model.cast::<crate::joint::PyJointModel>() {
        m.get().source.clone()
    } else {
        let m = model.cast::<PyModel>().map_err(|_| {
            pyo3::exceptions::PyTypeError::new_err(
                "model must be a nextstat Model, UnbinnedModel or JointModel",
            )
        })?;
        let Some(source) = &m.get().source else {
            return Err(InvalidInputError::new_err(
                "this model was not built from a workspace, so a call cannot name it",
            ));
        };
        source.model_ref()
    };
    call.model = Some(model_ref);
    call.check_serialisable().map_err(to_py)?;
    serde_json::to_string_pretty(&call.to_json()).map_err(|e| NextStatError::new_err(e.to_string()))
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
    let loaded = model_ref.load_model(&ns_source::Files).map_err(to_py)?;
    let verb = call.request.verb().name.to_string();
    let report = run_call_on(py, loaded.likelihood(), &call, progress, &|report| {
        loaded.annotate(report)
    })?;
    Ok((verb, report))
}

/// Run `call` on `model`: its report, annotated (`annotate`: what the model adds, its flows).
fn run_call_on(
    py: Python<'_>,
    model: &dyn ns_compute::Likelihood,
    call: &Call,
    progress: Option<&str>,
    annotate: &(dyn Fn(&mut serde_json::Value) + Sync),
) -> PyResult<String> {
    let bar = Progress::new(py, progress, call.request.progress_steps(model));
    let done = bar.as_ref().map(|p| p.done.clone());
    let stop = Arc::new(AtomicBool::new(false));
    run_watched(py, bar, &|| stop.store(true, Ordering::Relaxed), || {
        let fitter = call.open(model, stop.clone())?;
        let outcome = call.run_on(&fitter, &|k| {
            if let Some(done) = &done {
                done.fetch_max(k, Ordering::Relaxed);
            }
        })?;
        let mut report = call.report(&outcome, model, true);
        ns_api::report::add_auto(&mut report, fitter.auto_choice());
        annotate(&mut report);
        Ok(json_text(report))
    })
}
