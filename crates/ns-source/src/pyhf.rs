//! pyhf JSON workspaces: the reference (workspace, HEPData patchset patch, JSON patches,
//! measurement, interpolation codes) and its loading through `ns_translate`.

use ns_core::{Error, HistFactoryModel, HistosysCode, InterpCodes, NormsysCode, Result};
use ns_translate::load::{origin_of, parse_json};
use ns_translate::patch::PatchSet;
use ns_translate::{FromWorkspace, ModelOptions, Workspace};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::access::Reader;
use crate::document::Source;
use crate::{Format, LoadedModel};

/// The pyhf format.
pub struct Pyhf;

/// A HistFactory model from a pyhf workspace.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PyhfRef {
    pub workspace: Source,
    /// A patch of a HEPData patchset, applied first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patchset: Option<PatchsetPatch>,
    /// RFC 6902 JSON patches, applied in order after the patchset's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub patches: Vec<Source>,
    /// The measurement (default: the first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measurement: Option<String>,
    #[serde(default)]
    pub interpolation: Interpolation,
}

/// The HistFactory model of a workspace, the workspace kept beside it.
pub(crate) fn binned_model(workspace: Workspace, options: &ModelOptions) -> Result<LoadedModel> {
    let model = HistFactoryModel::from_workspace(&workspace, options)?;
    Ok(LoadedModel::Binned {
        workspace: Some(Box::new(workspace)),
        model: Box::new(model),
        xml_semantics: None,
    })
}

/// One patch of a HEPData patchset, applied after checking the patchset's digest of the
/// background-only workspace (pyhf's `PatchSet.apply`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PatchsetPatch {
    pub patchset: Source,
    pub patch: String,
    /// Apply the patch without checking the digest, as pyhf's `Workspace.model(patches=…)`
    /// does (published patchsets sometimes carry the digest of another background file).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub skip_verify: bool,
}

/// The interpolation codes: a base set and per-type overrides.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Interpolation {
    /// `pyhf` (normsys code4, histosys code4p) or `legacy` (code1, code0).
    #[serde(default = "pyhf_codes")]
    pub defaults: String,
    /// Overrides as `TYPE=CODE,...` (e.g. `normsys=code1,histosys=code0`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub codes: Option<String>,
    /// Clip each sample's yield at zero as ROOT's HistFactory does (its histosys sum and its
    /// product of normsys factors), where pyhf lets them turn negative: the likelihood of a
    /// model whose yields can turn negative in an empty bin then has a minimum.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub clip_negative_yields: bool,
}

fn pyhf_codes() -> String {
    "pyhf".into()
}

impl Default for Interpolation {
    fn default() -> Self {
        Interpolation {
            defaults: pyhf_codes(),
            codes: None,
            clip_negative_yields: false,
        }
    }
}

impl Interpolation {
    /// The model's codes; an error names the entry that is wrong.
    pub fn codes(&self) -> Result<InterpCodes> {
        let mut codes = match self.defaults.as_str() {
            "pyhf" => InterpCodes::default(),
            "legacy" => InterpCodes::legacy(),
            other => {
                return Err(Error::InvalidInput(format!(
                    "interpolation defaults must be 'pyhf' or 'legacy', not '{other}'"
                )));
            }
        };
        let mut named: Vec<&str> = Vec::new();
        for item in self
            .codes
            .as_deref()
            .unwrap_or("")
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
        {
            let (kind, code) = item.split_once('=').ok_or_else(|| {
                Error::InvalidInput(format!(
                    "interpolation code entry '{item}' must look like TYPE=CODE"
                ))
            })?;
            let kind = kind.trim();
            if named.contains(&kind) {
                return Err(Error::InvalidInput(format!(
                    "interpolation codes: '{}' names '{kind}' twice: give one code per modifier \
                     type",
                    self.codes.as_deref().unwrap_or("")
                )));
            }
            named.push(kind);
            match kind {
                "normsys" => codes.normsys = NormsysCode::from_name(code)?,
                "histosys" => codes.histosys = HistosysCode::from_name(code)?,
                other => {
                    return Err(Error::InvalidInput(format!(
                        "interpolation codes: '{other}' has no interpolation code (only normsys \
                         and histosys do)"
                    )));
                }
            }
        }
        Ok(codes)
    }
}

impl PyhfRef {
    /// The workspace of a file with every default.
    pub fn file(path: impl Into<std::path::PathBuf>) -> Self {
        PyhfRef {
            workspace: Source::Path(path.into()),
            patchset: None,
            patches: Vec::new(),
            measurement: None,
            interpolation: Interpolation::default(),
        }
    }

    /// The document after the patchset patch and the patches (`hs3`: the document is HS3,
    /// where a patchset is refused).
    pub(crate) fn patched(&self, read: &dyn Reader) -> Result<Value> {
        self.patch(self.workspace.value(read)?, read)
    }

    /// [`Self::patched`] of a reference used once: an inline document is moved, not copied
    /// (an XML model's workspace, read just before).
    pub(crate) fn into_patched(mut self, read: &dyn Reader) -> Result<Value> {
        let doc = match &mut self.workspace {
            Source::Inline(value) => std::mem::take(value),
            Source::Path(_) => self.workspace.value(read)?,
        };
        self.patch(doc, read)
    }

    /// The patchset patch and the patches applied to `doc`, this reference's document.
    fn patch(&self, mut doc: Value, read: &dyn Reader) -> Result<Value> {
        if self.patchset.is_some() && crate::hs3::Hs3::claims(&doc) {
            return Err(self.not_pyhf("patchsets"));
        }
        if let Some(p) = &self.patchset {
            let patchset = PatchSet::from_value(p.patchset.value(read)?)?;
            if !p.skip_verify {
                patchset.verify(&doc)?;
            }
            doc = patchset.apply_unverified(&doc, &p.patch)?;
        }
        crate::document::apply_patches(&mut doc, &self.patches, read)?;
        Ok(doc)
    }

    /// An HS3 document given where a pyhf option (`what`) was set.
    pub(crate) fn not_pyhf(&self, what: &str) -> Error {
        Error::InvalidInput(format!(
            "{} is an HS3 model: {what} apply to pyhf workspaces",
            self.workspace.model_origin()
        ))
    }

    pub(crate) fn binned(&self, workspace: Workspace) -> Result<LoadedModel> {
        let options = ModelOptions {
            measurement: self.measurement.clone(),
            codes: self.interpolation.codes()?,
            clip_negative_yields: self.interpolation.clip_negative_yields,
        };
        binned_model(workspace, &options)
    }

    /// The model document: a file with nothing to apply is parsed straight into the typed
    /// workspace where it is one (`Ok(Err(workspace))`); otherwise the JSON document.
    pub(crate) fn document_or_workspace(
        &self,
        read: &dyn Reader,
    ) -> Result<std::result::Result<Value, Workspace>> {
        if let (Source::Path(path), None, true) =
            (&self.workspace, &self.patchset, self.patches.is_empty())
            && let Some(text) = read.text(path)
        {
            let text = text?;
            if let Some(workspace) = Workspace::from_json_text_direct(&text) {
                return Ok(Err(workspace));
            }
            return parse_json(&text, &origin_of(path)).map(Ok);
        }
        self.patched(read).map(Ok)
    }

    /// The workspace from a document that is not HS3, naming a document that looks like an HS3
    /// model but lacks what makes one.
    pub(crate) fn workspace_of(&self, doc: Value) -> Result<Workspace> {
        if doc.get("distributions").is_some() && doc.get("channels").is_none() {
            return Err(Error::InvalidModel(format!(
                "{} has HS3's 'distributions' but no 'likelihoods' (nor metadata.hs3_version): \
                 an HS3 model needs them to say which distributions meet which data; a pyhf \
                 workspace has 'channels' instead",
                self.workspace.model_origin()
            )));
        }
        Workspace::from_value(doc)
    }
}

impl Format for Pyhf {
    const NAME: &'static str = "pyhf";
    type Reference = PyhfRef;

    /// A pyhf workspace has `channels` (and `measurements`, `observations`, `version`).
    fn claims(document: &Value) -> bool {
        document.get("channels").is_some()
    }

    fn from_untagged(reference: &PyhfRef) -> Result<PyhfRef> {
        Ok(reference.clone())
    }

    fn document(reference: &PyhfRef, read: &dyn Reader) -> Result<Value> {
        reference.patched(read)
    }

    fn model(reference: &PyhfRef, document: Value, _read: &dyn Reader) -> Result<LoadedModel> {
        if crate::hs3::Hs3::claims(&document) {
            return Err(Error::InvalidModel(format!(
                "{} is an HS3 model, not a pyhf workspace: name its format \"hs3\" (or leave \
                 the format out)",
                reference.workspace.model_origin()
            )));
        }
        reference.binned(reference.workspace_of(document)?)
    }

    /// A file with nothing to apply goes straight into the typed workspace where it is one.
    fn load(reference: &PyhfRef, read: &dyn Reader) -> Result<LoadedModel> {
        match reference.document_or_workspace(read)? {
            Err(workspace) => reference.binned(workspace),
            Ok(document) => Self::model(reference, document, read),
        }
    }

    fn sources_mut(reference: &mut PyhfRef) -> Vec<&mut Source> {
        let mut sources = vec![&mut reference.workspace];
        if let Some(p) = &mut reference.patchset {
            sources.push(&mut p.patchset);
        }
        sources.extend(reference.patches.iter_mut());
        sources
    }

    fn identity(reference: &PyhfRef) -> (Option<&str>, Interpolation) {
        (
            reference.measurement.as_deref(),
            reference.interpolation.clone(),
        )
    }
}
