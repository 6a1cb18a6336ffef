//! `nextstat._core.DifferentiableSession`: the engine behind `nextstat.torch`.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use ns_compute::{Device, DeviceSlice, PreparedData, SignalBatch, Values, ValuesMut};
use ns_inference::TestStatistic;
use ns_inference::differentiable::{DifferentiableSession, StatisticData};
use numpy::{PyArray1, PyArray2, PyReadonlyArray2};
use pyo3::prelude::*;

use crate::infer::{fit_config, run_watched};
use crate::model::PyModel;
use crate::{NextStatError, NsResult, invalid, to_py};

/// A model whose named samples' yields are differentiable inputs
/// (`ns_inference::differentiable`): NLL and profiled test statistics with their gradients with
/// respect to the yields, batched over rows.
#[pyclass(name = "DifferentiableSession", module = "nextstat._core", frozen)]
pub(crate) struct PyDifferentiable {
    session: DifferentiableSession,
    /// The session's stop flag serves one call at a time: profiled calls take turns (on their
    /// worker threads, without the GIL), and a Ctrl-C reaches the session only while its own
    /// call runs (`running` holds that call's number).
    calls: Mutex<()>,
    running: AtomicU64,
    next_call: AtomicU64,
    /// The data of the last NLL call, prepared (a training loop passes the same data each step).
    data: Mutex<Option<PreparedData>>,
}

/// One value per row, and rows of values, as NumPy arrays.
type Column<'py> = Bound<'py, PyArray1<f64>>;
type Rows<'py> = Bound<'py, PyArray2<f64>>;

/// Rows of a 2-d array, each `width` long.
fn rows_of(array: &PyReadonlyArray2<f64>, width: usize, what: &str) -> NsResult<Vec<f64>> {
    let a = array.as_array();
    if a.nrows() == 0 {
        return Err(invalid(format!(
            "{what} has no rows (shape {:?}): give at least one row of {width} values",
            a.shape()
        )));
    }
    if a.ncols() != width {
        return Err(invalid(format!(
            "{what} has shape {:?}; it needs rows of {width} values",
            a.shape()
        )));
    }
    Ok(a.iter().copied().collect())
}

impl PyDifferentiable {
    /// `data` (full data) prepared, reusing the last call's when it is the same.
    fn prepared(&self, data: &[f64]) -> NsResult<PreparedData> {
        let mut last = self
            .data
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(p) = last.as_ref()
            && p.main.len() + p.aux.len() == data.len()
            && p.main.iter().chain(&p.aux).eq(data.iter())
        {
            return Ok(p.clone());
        }
        let p = PreparedData::from_full(&self.session.model().compiled, data)?;
        *last = Some(p.clone());
        Ok(p)
    }
}

#[pymethods]
impl PyDifferentiable {
    #[new]
    #[pyo3(signature = (model, samples, device="cpu"))]
    fn new(model: &PyModel, samples: Vec<(String, String)>, device: &str) -> PyResult<Self> {
        let device = Device::from_name(device).map_err(to_py)?;
        Ok(PyDifferentiable {
            session: DifferentiableSession::on_device(&model.model, &samples, device)
                .map_err(to_py)?,
            data: Mutex::new(None),
            calls: Mutex::new(()),
            running: AtomicU64::new(0),
            next_call: AtomicU64::new(1),
        })
    }

    #[getter]
    fn device(&self) -> &'static str {
        self.session.device().name()
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
    ) -> PyResult<(Column<'py>, Rows<'py>, Rows<'py>)> {
        let s = &self.session;
        let (n, p) = (s.n_signal(), s.model().n_params());
        let signals = rows_of(&signal, n, "signal").map_err(to_py)?;
        let pars = rows_of(&pars, p, "pars").map_err(to_py)?;
        let prepared = self.prepared(&data).map_err(to_py)?;
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

    /// The NLL and its gradients for signal rows and parameters read in place from the session's
    /// device, written in place: each argument is (address, number of float64 values) of
    /// contiguous device memory (a CUDA tensor's `data_ptr()` and `numel()`); `nll` has one value
    /// per row. The work is queued on the device's default stream and the call returns before it
    /// is done (torch operations on that stream see the results); a non-finite row gives NaN. The
    /// caller keeps the memory alive; the driver confirms each range lies in one allocation on the
    /// session's device.
    #[allow(clippy::too_many_arguments)]
    fn nll_in_place(
        &self,
        py: Python<'_>,
        signal: (u64, usize),
        pars: (u64, usize),
        data: Vec<f64>,
        nll: (u64, usize),
        d_signal: (u64, usize),
        d_pars: (u64, usize),
    ) -> PyResult<()> {
        let s = &self.session;
        let prepared = self.prepared(&data).map_err(to_py)?;
        // SAFETY: the contract above (live device memory of the given lengths, written by nothing
        // else meanwhile) is the caller's; the backend checks every range against the driver's
        // allocations before use.
        let [signal, pars, nll, d_signal, d_pars] = [signal, pars, nll, d_signal, d_pars]
            .map(|(ptr, len)| unsafe { DeviceSlice::new(ptr, len) });
        py.detach(|| {
            s.evaluate(SignalBatch {
                signals: Values::Device(signal),
                pars: Values::Device(pars),
                data: &prepared,
                nll: ValuesMut::Device(nll),
                d_signal: ValuesMut::Device(d_signal),
                d_pars: ValuesMut::Device(d_pars),
            })
        })
        .map_err(to_py)
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
    ) -> PyResult<(Column<'py>, Rows<'py>)> {
        let s = &self.session;
        let model = s.model();
        let signals = rows_of(&signal, s.n_signal(), "signal").map_err(to_py)?;
        let stat = TestStatistic::from_name(stat).map_err(to_py)?;
        let config = fit_config(model, init, bounds, fixed, tolerance).map_err(to_py)?;
        let prepared = data
            .map(|d| PreparedData::from_full(&model.compiled, &d))
            .transpose()
            .map_err(to_py)?;
        // On a worker thread, so that Ctrl-C stops the fits at their next iteration; the
        // session's flag stops only this call (see `calls`).
        let (call, cancelled, flag) = (
            self.next_call.fetch_add(1, Ordering::Relaxed),
            AtomicBool::new(false),
            s.interrupt_flag(),
        );
        let interrupt = || {
            cancelled.store(true, Ordering::SeqCst);
            if self.running.load(Ordering::SeqCst) == call {
                flag.store(true, Ordering::SeqCst);
            }
        };
        let (q, dq) = run_watched(
            py,
            None,
            &interrupt,
            || -> NsResult<(Vec<f64>, Vec<Vec<f64>>)> {
                let _turn = self.calls.lock().unwrap_or_else(|p| p.into_inner());
                // Cleared before this call is named running, checked after: a Ctrl-C lands
                // either in `cancelled` (seen here) or in the flag (seen by the fits).
                flag.store(false, Ordering::SeqCst);
                self.running.store(call, Ordering::SeqCst);
                if cancelled.load(Ordering::SeqCst) {
                    return Err(ns_core::Error::Interrupted);
                }
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
            },
        )?;
        let dq = PyArray2::from_vec2(py, &dq).map_err(|e| NextStatError::new_err(e.to_string()))?;
        Ok((PyArray1::from_vec(py, q), dq))
    }
}
