//! `nextstat._core.JointModel`: an HS3 analysis of binned and unbinned channels, its parameters
//! shared by the file's names ([`ns_compute::joint`]), and its NLL with gradient on the file's
//! data. Every inference function takes it through its HS3 reference.

use std::sync::Arc;

use ns_compute::joint::JointLikelihood;
use ns_compute::{Datasets, Device, Likelihood};
use numpy::{PyArray1, PyReadonlyArray1};
use pyo3::prelude::*;

use crate::{invalid, to_py};

/// A joint likelihood and the HS3 reference it was read from (for saved calls and jobs).
#[pyclass(module = "nextstat._core", name = "JointModel", frozen)]
pub(crate) struct PyJointModel {
    pub(crate) model: Arc<JointLikelihood>,
    pub(crate) source: ns_source::ModelRef,
}

#[pymethods]
impl PyJointModel {
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
    fn suggested_init(&self) -> Vec<f64> {
        self.model.suggested_init()
    }
    fn suggested_bounds(&self) -> Vec<(f64, f64)> {
        self.model.suggested_bounds()
    }
    fn suggested_fixed(&self) -> Vec<bool> {
        self.model.suggested_fixed()
    }
    /// The NLL (RooFit's convention in the unbinned channels, the binned channels' Poisson
    /// terms) and its gradient at `pars`, on the file's data.
    fn nll_grad<'py>(
        &self,
        py: Python<'py>,
        pars: PyReadonlyArray1<'py, f64>,
    ) -> PyResult<(f64, Bound<'py, PyArray1<f64>>)> {
        let pars = pars.as_slice()?.to_vec();
        if pars.len() != self.model.n_params() {
            return Err(to_py(invalid(format!(
                "pars has length {} but the model has {} parameters ({:?})",
                pars.len(),
                self.model.n_params(),
                self.model.parameter_names()
            ))));
        }
        let model = self.model.clone();
        let (nll, grad) = py
            .detach(move || -> ns_core::Result<(f64, Vec<f64>)> {
                let data = model.observed()?;
                let backend = model.open(Device::Cpu)?;
                let (mut nll, mut grad) = ([0.0], vec![0.0; pars.len()]);
                backend.nll_grad_batch(
                    &pars,
                    Datasets::Host(std::slice::from_ref(&data)),
                    &[0],
                    &mut nll,
                    &mut grad,
                    &std::sync::atomic::AtomicBool::new(false),
                )?;
                Ok((nll[0] + data.constant, grad))
            })
            .map_err(to_py)?;
        Ok((nll, PyArray1::from_vec(py, grad)))
    }
    fn __repr__(&self) -> String {
        format!(
            "JointModel({} parameters: {})",
            self.model.n_params(),
            self.model.origin()
        )
    }
}
