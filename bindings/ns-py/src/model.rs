//! `nextstat._core.Model`: a HistFactory model, its layout, NLL, gradient and expected data.

use ns_compute::{CpuEvaluator, PreparedData, Scratch};
use ns_translate::HistFactoryModel;
use numpy::{PyArray1, PyArray2, PyReadonlyArray1};
use pyo3::prelude::*;

use crate::{NsResult, invalid, to_py};

/// A HistFactory model with pyhf's parameter layout.
#[pyclass(module = "nextstat._core", name = "Model", frozen)]
pub(crate) struct PyModel {
    pub(crate) model: HistFactoryModel,
    /// Where the model comes from, for calls that name it (`save_call`).
    pub(crate) source: Option<ModelSource>,
}

/// The workspace and settings a model was built from.
pub(crate) struct ModelSource {
    pub(crate) workspace: std::sync::Arc<ns_translate::Workspace>,
    pub(crate) measurement: Option<String>,
    pub(crate) interpolation: ns_source::Interpolation,
}

impl ModelSource {
    /// The model as a call names it: the workspace inline (serialised only when asked).
    pub(crate) fn model_ref(&self) -> ns_source::ModelRef {
        ns_source::ModelRef::ByContent(ns_source::PyhfRef {
            workspace: ns_source::Source::Inline(self.workspace.to_value()),
            patchset: None,
            patches: Vec::new(),
            measurement: self.measurement.clone(),
            interpolation: self.interpolation.clone(),
        })
    }
}

impl PyModel {
    pub(crate) fn params(&self, pars: &[f64]) -> NsResult<()> {
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

    pub(crate) fn prepared(&self, data: &[f64]) -> NsResult<PreparedData> {
        PreparedData::from_full(&self.model.compiled, data)
    }
}

#[pymethods]
impl PyModel {
    /// The model as an HS3 document (JSON text) in ROOT 6.40's HistFactory dialect, which ROOT
    /// imports as the same likelihood (docs/hs3-binned.md).
    fn to_hs3(&self) -> PyResult<String> {
        let source = self.source.as_ref().ok_or_else(|| {
            to_py(invalid(
                "a model read from a CMS Combine datacard is not written as HS3 yet: Combine's \
                 lnN, shape and autoMCStats terms have no HistFactory form that ROOT reads as \
                 the same likelihood"
                    .into(),
            ))
        })?;
        let document = ns_hs3::binned::write(&source.workspace, &self.model).map_err(to_py)?;
        Ok(document.to_string())
    }
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
    /// The model with `name` as its POI (pyhf's `config.set_poi`), in the model and in the
    /// workspace a saved call names it by, so every verb and every call of it tests that
    /// parameter.
    fn with_poi(&self, name: &str) -> PyResult<PyModel> {
        let mut model = self.model.clone();
        model.set_poi(name).map_err(to_py)?;
        let source = self.source.as_ref().map(|source| {
            let mut workspace = (*source.workspace).clone();
            let chosen = source.measurement.as_deref().unwrap_or(&model.measurement);
            if let Some(m) = workspace.measurements.iter_mut().find(|m| m.name == chosen) {
                m.config.poi = name.to_string();
            }
            ModelSource {
                workspace: std::sync::Arc::new(workspace),
                measurement: source.measurement.clone(),
                interpolation: source.interpolation.clone(),
            }
        });
        Ok(PyModel { model, source })
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
    /// The observed main data the model was read with (a datacard's counts), or None.
    #[getter]
    fn observations(&self) -> Option<Vec<f64>> {
        self.model.observations.clone().ok()
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

    /// The parameter sets in pyhf's order as JSON text: name, modifier type, offset,
    /// n_parameters, is_scalar, constraint (null, "normal" or "poisson"), auxdata, sigmas,
    /// factors (`model.config.param_set`; inits, bounds and fixed come from the suggested_*
    /// lists by offset).
    fn parameter_sets_json(&self) -> String {
        use ns_translate::Constraint;
        let sets: Vec<serde_json::Value> = self
            .model
            .parameter_sets
            .iter()
            .map(|s| {
                let constraint = match s.constraint {
                    Constraint::None => serde_json::Value::Null,
                    Constraint::Gaussian => "normal".into(),
                    Constraint::Poisson => "poisson".into(),
                };
                serde_json::json!({
                    "name": s.name, "modifier_type": s.modifier_type, "offset": s.offset,
                    "n_parameters": s.n_parameters, "is_scalar": s.is_scalar,
                    "constraint": constraint, "auxdata": s.auxdata, "sigmas": s.sigmas,
                    "factors": s.factors,
                })
            })
            .collect();
        serde_json::Value::Array(sets).to_string()
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

    /// The expected main data of each sample: one row per sample (in `samples` order), one
    /// column per main bin (channels in order); zero where a channel has no such sample.
    fn expected_by_sample<'py>(
        &self,
        py: Python<'py>,
        pars: PyReadonlyArray1<f64>,
    ) -> PyResult<Bound<'py, PyArray2<f64>>> {
        use ns_compute::Likelihood;
        let pars = pars.as_slice()?.to_vec();
        self.params(&pars).map_err(to_py)?;
        let m = &self.model;
        let n_main: usize = m.channels.iter().map(|c| c.n_bins).sum();
        let mut rows = vec![vec![0.0; n_main]; m.samples.len()];
        for (channel, yields) in m
            .channels
            .iter()
            .zip(m.sample_yields(&pars).map_err(to_py)?)
        {
            for (name, values) in yields.samples {
                let row = m.samples.iter().position(|s| *s == name).ok_or_else(|| {
                    to_py(invalid(format!(
                        "sample '{name}' of channel '{}' is not a model sample",
                        channel.name
                    )))
                })?;
                rows[row][channel.bin_start..channel.bin_start + values.len()]
                    .copy_from_slice(&values);
            }
        }
        PyArray2::from_vec2(py, &rows).map_err(|e| to_py(invalid(e.to_string())))
    }

    /// `n` datasets (main data, then auxiliary data in pyhf's order) drawn at `pars` by the
    /// engine's toy generator from `seed`: the toys every verb fits, the same on every device.
    fn sample_toys<'py>(
        &self,
        py: Python<'py>,
        pars: PyReadonlyArray1<f64>,
        n: usize,
        seed: u64,
    ) -> PyResult<Bound<'py, PyArray2<f64>>> {
        /// The most values one call returns (0.8 GB of f64).
        const MAX_VALUES: usize = 100_000_000;
        let pars = pars.as_slice()?.to_vec();
        self.params(&pars).map_err(to_py)?;
        let compiled = &self.model.compiled;
        let width = compiled.n_main + compiled.n_aux;
        if n > u32::MAX as usize || n.saturating_mul(width.max(1)) > MAX_VALUES {
            return Err(to_py(invalid(format!(
                "{n} toy datasets of {width} values each: at most {MAX_VALUES} values are drawn at once"
            ))));
        }
        let rates = ns_compute::ToyEnsembleRates::at(compiled, &pars, 0).map_err(to_py)?;
        let sampler = rates.sampler(compiled).map_err(to_py)?;
        let rows = py
            .detach(|| {
                (0..n as u32)
                    .map(|i| {
                        sampler.sample(seed, i).map(|toy| {
                            let mut row = toy.main;
                            row.extend(toy.aux);
                            row
                        })
                    })
                    .collect::<NsResult<Vec<Vec<f64>>>>()
            })
            .map_err(to_py)?;
        if rows.is_empty() {
            return Ok(PyArray2::zeros(py, [0, width], false));
        }
        PyArray2::from_vec2(py, &rows).map_err(|e| to_py(invalid(e.to_string())))
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
