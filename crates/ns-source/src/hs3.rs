//! HS3 JSON documents: the reference (document, JSON patches, analysis) and its loading through
//! `ns_unbinned::hs3`. Data files the document names (Parquet events, flow manifests) are
//! opened only as the reader's file policy allows, relative to the document's folder.

use std::collections::BTreeMap;

use ns_compute::Likelihood;
use ns_compute::joint::JointLikelihood;
use ns_core::{HistFactoryModel, Result};
use ns_translate::FromWorkspace;
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
        let options = ns_unbinned::hs3::ReadOptions {
            analysis: reference.analysis.as_deref(),
            files: read.data_files(reference.document.folder()),
        };
        // Binned channels (`histfactory_dist`): a pyhf workspace with ROOT's semantics.
        let Some(binned) = ns_hs3::binned::read(&document, reference.analysis.as_deref())? else {
            let model = ns_unbinned::hs3::read(&document, &options)?;
            return Ok(LoadedModel::Unbinned(Box::new(model)));
        };
        let workspace = ns_translate::Workspace::from_value(binned.workspace)?;
        let model_options = ns_translate::ModelOptions {
            codes: binned.codes,
            ..ns_translate::ModelOptions::default()
        };
        let Some(unbinned) = binned.unbinned else {
            let mut loaded = crate::pyhf::binned_model(workspace, &model_options)?;
            // An analysis listing several POIs declares them all; its first is the POI.
            if let (LoadedModel::Binned { model, .. }, [_, _, ..]) = (&mut loaded, &binned.pois[..])
            {
                let names: Vec<&str> = binned.pois.iter().map(String::as_str).collect();
                model.set_pois(&names)?;
            }
            return Ok(loaded);
        };
        // Binned and unbinned channels: one likelihood of both, parameters shared under the
        // file's names (the binned reader's nextstat names mapped back).
        let histfactory = HistFactoryModel::from_workspace(&workspace, &model_options)?;
        let file_names: BTreeMap<&str, &str> = binned
            .names
            .iter()
            .map(|(theirs, ours)| (ours.as_str(), theirs.as_str()))
            .collect();
        let binned_names = histfactory
            .par_names
            .iter()
            .map(|n| {
                file_names
                    .get(n.as_str())
                    .map_or(n.clone(), |t| t.to_string())
            })
            .collect();
        let unbinned = ns_unbinned::hs3::read(&unbinned, &options)?;
        let unbinned_names = unbinned.parameter_names().to_vec();
        let origin = format!(
            "HS3 analysis '{}' (binned and unbinned channels)",
            histfactory.measurement
        );
        let joint = JointLikelihood::new(
            origin,
            vec![
                (Box::new(histfactory) as Box<dyn Likelihood>, binned_names),
                (Box::new(unbinned), unbinned_names),
            ],
            binned.poi.as_deref(),
        )?;
        Ok(LoadedModel::Joint(Box::new(joint)))
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
