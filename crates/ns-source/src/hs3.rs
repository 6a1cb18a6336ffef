//! HS3 JSON documents: the reference (document, JSON patches, analysis) and its loading through
//! `ns_unbinned::hs3`. Data files the document names (Parquet events, flow manifests) are
//! opened only as the reader's file policy allows, relative to the document's folder.

use ns_core::Result;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::access::Reader;
use crate::document::{Source, patched};
use crate::pyhf::{Interpolation, PyhfRef};
use crate::{Format, LoadedModel};

/// The HS3 format.
pub struct Hs3;

/// A model from an HS3 document.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Hs3Ref {
    pub document: Source,
    /// RFC 6902 JSON patches, applied in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub patches: Vec<Source>,
    /// The analysis (default: the first, or the one likelihood).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub analysis: Option<String>,
}

impl Format for Hs3 {
    const NAME: &'static str = "hs3";
    type Reference = Hs3Ref;

    /// An HS3 document has a `distributions` list and says which distributions meet which data
    /// (`likelihoods`), or declares itself (`metadata.hs3_version`).
    fn claims(document: &Value) -> bool {
        ns_hs3::is_hs3(document)
    }

    /// The document is the pyhf-shaped reference's workspace; its measurement names the
    /// analysis; a patchset or interpolation codes are refused.
    fn from_untagged(reference: &PyhfRef) -> Result<Hs3Ref> {
        if reference.patchset.is_some() {
            return Err(reference.not_pyhf("patchsets"));
        }
        if reference.interpolation != Interpolation::default() {
            return Err(reference.not_pyhf("interpolation codes"));
        }
        Ok(Hs3Ref {
            document: reference.workspace.clone(),
            patches: reference.patches.clone(),
            analysis: reference.measurement.clone(),
        })
    }

    fn document(reference: &Hs3Ref, read: &dyn Reader) -> Result<Value> {
        patched(&reference.document, &reference.patches, read)
    }

    fn model(reference: &Hs3Ref, document: Value, read: &dyn Reader) -> Result<LoadedModel> {
        // Binned channels (`histfactory_dist`): a pyhf workspace with ROOT's semantics.
        if let Some(binned) = ns_hs3::binned::read(&document, reference.analysis.as_deref())? {
            let workspace = ns_translate::Workspace::from_value(binned.workspace)?;
            let options = ns_translate::ModelOptions {
                codes: binned.codes,
                ..ns_translate::ModelOptions::default()
            };
            return crate::pyhf::binned_model(workspace, &options);
        }
        let options = ns_unbinned::hs3::ReadOptions {
            analysis: reference.analysis.as_deref(),
            files: read.data_files(reference.document.folder()),
        };
        let model = ns_unbinned::hs3::read(&document, &options)?;
        Ok(LoadedModel::Unbinned(Box::new(model)))
    }

    fn sources_mut(reference: &mut Hs3Ref) -> Vec<&mut Source> {
        let mut sources = vec![&mut reference.document];
        sources.extend(reference.patches.iter_mut());
        sources
    }

    fn identity(reference: &Hs3Ref) -> (Option<&str>, Interpolation) {
        (reference.analysis.as_deref(), Interpolation::default())
    }
}
