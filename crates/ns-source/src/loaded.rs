//! A loaded model, of whichever kind its format reads.

use ns_compute::Likelihood;
use ns_compute::joint::JointLikelihood;
use ns_core::HistFactoryModel;
use ns_translate::Workspace;
use serde_json::Value;

/// A loaded model: HistFactory (with the pyhf workspace it was built from, the canonical spec of
/// every binned format) or unbinned.
pub enum LoadedModel {
    Binned {
        /// The pyhf workspace it was built from (`None`: a format of its own, a datacard).
        workspace: Option<Box<Workspace>>,
        model: Box<HistFactoryModel>,
        /// Whose reading of a HistFactory XML built it (`None`: not read from XML).
        xml_semantics: Option<ns_xml::Semantics>,
    },
    Unbinned(Box<ns_unbinned::UnbinnedModel>),
    /// Binned and unbinned channels in one likelihood (an HS3 analysis of both).
    Joint(Box<JointLikelihood>),
}

impl LoadedModel {
    pub fn likelihood(&self) -> &dyn Likelihood {
        match self {
            LoadedModel::Binned { model, .. } => model.as_ref(),
            LoadedModel::Unbinned(model) => model.as_ref(),
            LoadedModel::Joint(model) => model.as_ref(),
        }
    }

    /// What a result reports about the model beyond the verb's numbers, added to `report`:
    /// the flow PDFs and the providers they run on (`"flows"`) where the model has any; whose
    /// semantics built a HistFactory model read from XML (`"semantics"`: `root` or `pyhf`).
    pub fn annotate(&self, report: &mut Value) {
        match self {
            LoadedModel::Unbinned(m) => annotate_unbinned(m, report),
            LoadedModel::Joint(_) => {}
            LoadedModel::Binned {
                workspace,
                xml_semantics,
                ..
            } => {
                let semantics = match xml_semantics {
                    Some(s) => s.name(),
                    None if workspace
                        .as_ref()
                        .is_some_and(|w| w.root_semantics.is_some()) =>
                    {
                        ns_xml::Semantics::Root.name()
                    }
                    None => return,
                };
                if let Some(object) = report.as_object_mut() {
                    object.insert("semantics".into(), semantics.into());
                }
            }
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
