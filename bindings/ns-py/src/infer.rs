//! Inference entry points: one `infer` over the request layer, and the toy-batch functions.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use ns_compute::{CpuEvaluator, PreparedData, Scratch};
use ns_inference::request::Request;
use ns_inference::{Device, FitConfig, Fitter, Workload, report};
use ns_translate::HistFactoryModel;
use numpy::{PyArray2, PyReadonlyArray2};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::model::PyModel;
use crate::{ComputationError, InvalidInputError, NextStatError, NsResult, invalid, to_py};

/// Init, bounds and fixed parameters of a fit from optional Python values.
pub(crate) fn fit_config(
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
/// JSON `options`; returns the result's report JSON (`ns_inference::report`). With a
/// `progress` label, long requests (toys, scans, rankings, limit grids) show a tqdm bar.
#[pyfunction]
#[pyo3(signature = (model, data, options, request, progress=None))]
pub(crate) fn infer(
    py: Python<'_>,
    model: &PyModel,
    data: Vec<f64>,
    options: &str,
    request: &str,
    progress: Option<&str>,
) -> PyResult<String> {
    let o: Options = serde_json::from_str(options)
        .map_err(|e| InvalidInputError::new_err(format!("bad options: {e}")))?;
    let request: Request = serde_json::from_str(request)
        .map_err(|e| InvalidInputError::new_err(format!("bad request: {e}")))?;
    let bar = Progress::new(py, progress, request.progress_steps(&model.model));
    let done = bar.as_ref().map(|p| p.done.clone());
    let stop = Arc::new(AtomicBool::new(false));
    run_watched(py, bar, &|| stop.store(true, Ordering::Relaxed), || {
        let m = &model.model;
        let config = fit_config(
            m,
            o.init.clone(),
            o.bounds.clone(),
            o.fixed.clone(),
            o.tolerance,
        )?;
        let prepared = model.prepared(&data)?;
        let f = fitter(m, &o.device, request.workload(m), &stop)?;
        let outcome = request.run(&f, &prepared, &config, &|k| {
            if let Some(done) = &done {
                done.fetch_max(k, Ordering::Relaxed);
            }
        })?;
        Ok(json_text(outcome.report(m, true)))
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
