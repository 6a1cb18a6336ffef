//! `nextstat._core.UnbinnedModel`: an event-level model read from HS3, its parameters and its
//! NLL with gradient on the observed events or on events given as an array.

use std::path::PathBuf;
use std::sync::Arc;

use ns_compute::Likelihood;
use ns_unbinned::UnbinnedModel;
use numpy::{PyArray1, PyReadonlyArray1};
use pyo3::prelude::*;

use crate::{invalid, to_py};

/// An unbinned model and the HS3 reference it was read from (for saved calls).
#[pyclass(module = "nextstat._core", name = "UnbinnedModel", frozen)]
pub(crate) struct PyUnbinnedModel {
    pub(crate) model: Arc<UnbinnedModel>,
    pub(crate) source: ns_source::ModelRef,
}

impl PyUnbinnedModel {
    fn check(&self, pars: &[f64]) -> PyResult<()> {
        if pars.len() != self.model.n_params() {
            return Err(to_py(invalid(format!(
                "pars has length {} but the model has {} parameters ({:?})",
                pars.len(),
                self.model.n_params(),
                self.model.parameter_names()
            ))));
        }
        Ok(())
    }
}

/// Read an HS3 model: `path` (a file; Parquet data paths relative to it) or `text` (the JSON),
/// and the analysis to take (default: the first).
#[pyfunction]
#[pyo3(signature = (path=None, text=None, analysis=None))]
pub(crate) fn load_unbinned(
    path: Option<PathBuf>,
    text: Option<&str>,
    analysis: Option<String>,
) -> PyResult<PyUnbinnedModel> {
    let workspace = match (path, text) {
        // Absolute, so that a call saved elsewhere still finds the file.
        (Some(p), None) => ns_source::Source::Path(std::path::absolute(&p).unwrap_or(p)),
        (None, Some(t)) => ns_source::Source::Inline(
            ns_translate::load::parse_json(t, "the HS3 text").map_err(to_py)?,
        ),
        _ => {
            return Err(to_py(invalid(
                "give an HS3 file path or its JSON text".into(),
            )));
        }
    };
    // Told apart by content, so that a pyhf workspace is named as one.
    let source = ns_source::ModelRef::ByContent(ns_source::PyhfRef {
        workspace,
        measurement: analysis,
        ..ns_source::PyhfRef::file("")
    });
    match source.load_model(&ns_source::Files).map_err(to_py)? {
        ns_source::LoadedModel::Unbinned(model) => Ok(PyUnbinnedModel {
            model: Arc::from(model),
            source,
        }),
        ns_source::LoadedModel::Binned { .. } => Err(to_py(invalid(
            "this is a pyhf workspace, not an HS3 model: read it with nextstat.Workspace".into(),
        ))),
        ns_source::LoadedModel::Joint(_) => Err(to_py(invalid(
            "this HS3 analysis joins binned and unbinned channels: read it with \
             nextstat.load_hs3, which gives a JointModel"
                .into(),
        ))),
    }
}

#[pymethods]
impl PyUnbinnedModel {
    #[getter]
    fn par_names(&self) -> Vec<String> {
        self.model.parameter_names().to_vec()
    }
    #[getter]
    fn npars(&self) -> usize {
        self.model.n_params()
    }
    #[getter]
    fn poi_index(&self) -> Option<usize> {
        self.model.poi_index()
    }
    #[getter]
    fn poi_name(&self) -> Option<String> {
        self.model
            .poi_index()
            .map(|i| self.model.parameter_names()[i].clone())
    }
    #[getter]
    fn channels(&self) -> Vec<String> {
        self.model
            .channels()
            .iter()
            .map(|c| c.name.clone())
            .collect()
    }
    #[getter]
    fn observables(&self) -> Vec<Vec<(String, f64, f64)>> {
        self.model
            .channels()
            .iter()
            .map(|c| {
                c.axes
                    .iter()
                    .map(|a| (a.name.clone(), a.lo, a.hi))
                    .collect()
            })
            .collect()
    }
    /// The observed events per channel: one array per observable.
    fn observed_events<'py>(&self, py: Python<'py>) -> Vec<Vec<Bound<'py, PyArray1<f64>>>> {
        self.model
            .observed_events()
            .iter()
            .map(|c| {
                c.columns
                    .iter()
                    .map(|col| PyArray1::from_slice(py, col))
                    .collect()
            })
            .collect()
    }
    /// The model's flows and the providers they run on, as JSON text (`None` without flows).
    fn flows_json(&self) -> Option<String> {
        self.model.flows_json().map(|v| v.to_string())
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
    /// The NLL (RooFit's convention) and its gradient at `pars`, on the observed events or on
    /// `events` (one channel with one observable).
    #[pyo3(signature = (pars, events=None))]
    fn nll_grad<'py>(
        &self,
        py: Python<'py>,
        pars: PyReadonlyArray1<'py, f64>,
        events: Option<PyReadonlyArray1<'py, f64>>,
    ) -> PyResult<(f64, Bound<'py, PyArray1<f64>>)> {
        let pars = pars.as_slice()?.to_vec();
        self.check(&pars)?;
        let data = match events {
            None => self.model.observed(),
            Some(e) => self.model.dataset(e.as_slice()?),
        }
        .map_err(to_py)?;
        let model = self.model.clone();
        let (nll, grad) = py
            .detach(move || {
                let mut grad = vec![0.0; pars.len()];
                model
                    .nll_grad(&data, &pars, &mut grad)
                    .map(|nll| (nll + data.constant, grad))
            })
            .map_err(to_py)?;
        Ok((nll, PyArray1::from_vec(py, grad)))
    }
    fn __repr__(&self) -> String {
        format!(
            "UnbinnedModel({} parameters, {} channel(s): {})",
            self.model.n_params(),
            self.model.channels().len(),
            self.channels().join(", ")
        )
    }
}
