//! A loaded model, of whichever kind its format reads.

use ns_compute::Likelihood;
use ns_core::HistFactoryModel;
use ns_translate::Workspace;
use serde_json::Value;

/// A loaded model: HistFactory (with the pyhf workspace it was built from, the canonical spec of
/// every binned format) or unbinned.
pub enum LoadedModel {
    Binned {
        workspace: Box<Workspace>,
        model: Box<HistFactoryModel>,
    },
    Unbinned(Box<ns_unbinned::UnbinnedModel>),
}

impl LoadedModel {
    pub fn likelihood(&self) -> &dyn Likelihood {
        match self {
            LoadedModel::Binned { model, .. } => model.as_ref(),
            LoadedModel::Unbinned(model) => model.as_ref(),
        }
    }

    /// What a result reports about the model beyond the verb's numbers: the flow PDFs and
    /// the providers they run on (`"flows"`), added to `report` where the model has any.
    pub fn annotate(&self, report: &mut Value) {
        if let LoadedModel::Unbinned(m) = self {
            annotate_unbinned(m, report);
        }
    }
}

/// [`LoadedModel::annotate`] of an unbinned model held elsewhere (a Python `UnbinnedModel`).
pub fn annotate_unbinned(model: &ns_unbinned::UnbinnedModel, report: &mut Value) {
    if let Some(flows) = model.flows_json()
        && let Some(object) = report.as_object_mut()
    {
        object.insert("flows".into(), flows);
    }
}
