//! `nextstat._core.Workspace`: a validated pyhf workspace and the pyhf workspace operations.

use std::collections::HashMap;
use std::sync::Arc;

use ns_core::{HistosysCode, InterpCodes, NormsysCode};
use ns_translate::ops::{Join, Prune, Rename};
use ns_translate::patch::{PatchSet, apply_patch};
use ns_translate::{FromWorkspace, HistFactoryModel, ModelOptions, Workspace};
use pyo3::prelude::*;

use crate::model::{ModelSource, PyModel};
use crate::{NextStatError, to_py};

/// A pyhf workspace (validated).
#[pyclass(module = "nextstat._core", name = "Workspace", frozen)]
pub(crate) struct PyWorkspace {
    /// Shared with the models built from it (a call names their workspace).
    ws: Arc<Workspace>,
}

#[pymethods]
impl PyWorkspace {
    /// Parse a workspace from its JSON text; `origin` (a file name, say) names it in errors.
    #[staticmethod]
    #[pyo3(signature = (text, origin="workspace"))]
    fn from_json(text: &str, origin: &str) -> PyResult<Self> {
        let value = ns_translate::load::parse_json(text, origin).map_err(to_py)?;
        Ok(PyWorkspace {
            ws: Arc::new(Workspace::from_value(value).map_err(|e| match e {
                ns_core::Error::InvalidWorkspace(m) if origin != "workspace" => {
                    to_py(ns_core::Error::InvalidWorkspace(format!("{origin}: {m}")))
                }
                other => to_py(other),
            })?),
        })
    }

    /// The workspace as JSON text.
    fn to_json(&self) -> PyResult<String> {
        serde_json::to_string(&self.ws.to_value())
            .map_err(|e| NextStatError::new_err(e.to_string()))
    }

    /// Build the model of a measurement; `normsys`/`histosys` override the interpolation code of
    /// that modifier type only (pyhf's `modifier_settings`); `clip_negative_yields` clips each
    /// sample's yield at zero as ROOT's HistFactory does.
    #[pyo3(signature = (measurement_name=None, normsys=None, histosys=None, clip_negative_yields=false))]
    fn model(
        &self,
        measurement_name: Option<String>,
        normsys: Option<&str>,
        histosys: Option<&str>,
        clip_negative_yields: bool,
    ) -> PyResult<PyModel> {
        let mut codes = InterpCodes::default();
        let mut overrides = Vec::new();
        if let Some(n) = normsys {
            codes.normsys = NormsysCode::from_name(n).map_err(to_py)?;
            overrides.push(format!("normsys={n}"));
        }
        if let Some(h) = histosys {
            codes.histosys = HistosysCode::from_name(h).map_err(to_py)?;
            overrides.push(format!("histosys={h}"));
        }
        let source = ModelSource {
            workspace: self.ws.clone(),
            measurement: measurement_name.clone(),
            interpolation: ns_source::Interpolation {
                defaults: "pyhf".into(),
                codes: (!overrides.is_empty()).then(|| overrides.join(",")),
                clip_negative_yields,
            },
        };
        let options = ModelOptions {
            measurement: measurement_name,
            codes,
            clip_negative_yields,
        };
        Ok(PyModel {
            model: HistFactoryModel::from_workspace(&self.ws, &options).map_err(to_py)?,
            source: Some(source),
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
            ws: Arc::new(self.ws.prune(&prune).map_err(to_py)?),
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
            ws: Arc::new(self.ws.rename(&rename).map_err(to_py)?),
        })
    }

    fn sorted(&self) -> Self {
        PyWorkspace {
            ws: Arc::new(self.ws.sorted()),
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
            ws: Arc::new(
                Workspace::combine(&left.ws, &right.ws, join, merge_channels).map_err(to_py)?,
            ),
        })
    }

    /// Apply an RFC 6902 JSON patch (JSON text).
    fn apply_patch(&self, patch_json: &str) -> PyResult<Self> {
        let patch = ns_translate::load::parse_json(patch_json, "patch").map_err(to_py)?;
        let mut doc = self.ws.to_value();
        apply_patch(&mut doc, &patch, "patch").map_err(to_py)?;
        Ok(PyWorkspace {
            ws: Arc::new(Workspace::from_value(doc).map_err(to_py)?),
        })
    }
}

/// Check a HEPData patchset's digests (JSON text) of a background-only document (JSON text, any
/// document: pyhf's `PatchSet.verify` digests what it is given).
#[pyfunction]
pub(crate) fn verify_patchset(patchset_json: &str, document_json: &str) -> PyResult<()> {
    let value = ns_translate::load::parse_json(patchset_json, "patchset").map_err(to_py)?;
    let document = ns_translate::load::parse_json(document_json, "workspace").map_err(to_py)?;
    PatchSet::from_value(value)
        .and_then(|patchset| patchset.verify(&document))
        .map_err(to_py)
}
