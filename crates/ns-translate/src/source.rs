//! Where a model comes from, as data: a pyhf workspace (a file or inline JSON), the patches and
//! the patchset patch applied to it, the measurement and the interpolation codes. Part of the
//! serialisable call (`ns_inference::call`); every front door loads models through it.

use std::path::{Path, PathBuf};

use ns_core::{Error, HistFactoryModel, HistosysCode, InterpCodes, NormsysCode, Result};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::load::Reader;
use crate::model::{FromWorkspace, ModelOptions};
use crate::patch::{PatchSet, apply_patch};
use crate::spec::Workspace;

/// A JSON document: the path of a file (`-`: standard input), or the document itself.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Source {
    Path(PathBuf),
    Inline(Value),
}

impl Source {
    /// The document, reading a file through `read` (which may enforce the front door's rules).
    pub fn value(&self, read: &dyn Reader) -> Result<Value> {
        match self {
            Source::Path(path) => read.json(path),
            Source::Inline(value) => Ok(value.clone()),
        }
    }

    fn origin(&self) -> String {
        match self {
            Source::Path(path) => path.display().to_string(),
            Source::Inline(_) => "an inline patch".into(),
        }
    }
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
}

fn pyhf_codes() -> String {
    "pyhf".into()
}

impl Default for Interpolation {
    fn default() -> Self {
        Interpolation {
            defaults: pyhf_codes(),
            codes: None,
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

/// A HistFactory model from a pyhf workspace.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ModelRef {
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

impl ModelRef {
    /// The workspace of a file with every default.
    pub fn file(path: impl Into<PathBuf>) -> Self {
        ModelRef {
            workspace: Source::Path(path.into()),
            patchset: None,
            patches: Vec::new(),
            measurement: None,
            interpolation: Interpolation::default(),
        }
    }

    /// Every document this reference reads.
    pub fn sources_mut(&mut self) -> Vec<&mut Source> {
        let mut sources = vec![&mut self.workspace];
        if let Some(p) = &mut self.patchset {
            sources.push(&mut p.patchset);
        }
        sources.extend(self.patches.iter_mut());
        sources
    }

    fn model_origin(&self) -> String {
        match &self.workspace {
            Source::Path(p) => p.display().to_string(),
            Source::Inline(_) => "the inline model".into(),
        }
    }

    /// Relative file paths read from `base` instead of the current folder.
    pub fn resolve_paths(&mut self, base: &Path) {
        for source in self.sources_mut() {
            if let Source::Path(p) = source
                && p.is_relative()
                && p.as_os_str() != "-"
            {
                *p = base.join(&*p);
            }
        }
    }

    /// The workspace JSON after the patchset patch and the patches.
    pub fn workspace_value(&self, read: &dyn Reader) -> Result<Value> {
        let mut doc = self.workspace.value(read)?;
        if self.patchset.is_some() && ns_unbinned::hs3::is_hs3(&doc) {
            return Err(Error::InvalidInput(format!(
                "{} is an HS3 model: patchsets apply to pyhf workspaces",
                self.model_origin()
            )));
        }
        if let Some(p) = &self.patchset {
            let patchset = PatchSet::from_value(p.patchset.value(read)?)?;
            if !p.skip_verify {
                patchset.verify(&doc)?;
            }
            doc = patchset.apply_unverified(&doc, &p.patch)?;
        }
        for patch in &self.patches {
            apply_patch(&mut doc, &patch.value(read)?, &patch.origin())?;
        }
        Ok(doc)
    }

    /// SHA-256 of the model this names (pyhf's digest of `{"workspace", "measurement",
    /// "interpolation"}`, the workspace after its patches): equal digests, one model, wherever
    /// its files lie. Event files an HS3 model reads are named, not hashed.
    pub fn digest(&self, read: &dyn Reader) -> Result<String> {
        let identity = serde_json::json!({
            "workspace": self.workspace_value(read)?,
            "measurement": self.measurement,
            "interpolation": self.interpolation,
        });
        Ok(crate::pyjson::digest(&identity))
    }

    fn model_of(&self, workspace: &Workspace) -> Result<HistFactoryModel> {
        let options = ModelOptions {
            measurement: self.measurement.clone(),
            codes: self.interpolation.codes()?,
        };
        HistFactoryModel::from_workspace(workspace, &options)
    }

    /// The model, of whichever kind the document is: a pyhf workspace or an HS3 file (told
    /// apart by content). For HS3, `measurement` names the analysis, patches apply to the
    /// document, and data paths are relative to the file.
    pub fn load_model(&self, read: &dyn Reader) -> Result<LoadedModel> {
        let binned = |workspace: Workspace| -> Result<LoadedModel> {
            let model = self.model_of(&workspace)?;
            Ok(LoadedModel::Binned {
                workspace: Box::new(workspace),
                model: Box::new(model),
            })
        };
        let doc = match (&self.workspace, &self.patchset, self.patches.is_empty()) {
            // A file with nothing to apply: straight into the typed workspace where it is one.
            (Source::Path(path), None, true) if let Some(text) = read.text(path) => {
                let text = text?;
                if let Some(workspace) = Workspace::from_json_text_direct(&text) {
                    return binned(workspace);
                }
                crate::load::parse_json(&text, &crate::load::origin_of(path))?
            }
            _ => self.workspace_value(read)?,
        };
        if !ns_unbinned::hs3::is_hs3(&doc) {
            if doc.get("distributions").is_some() && doc.get("channels").is_none() {
                return Err(Error::InvalidModel(format!(
                    "{} has HS3's 'distributions' but no 'likelihoods' (nor metadata.hs3_version): \
                     an HS3 model needs them to say which distributions meet which data; a pyhf \
                     workspace has 'channels' instead",
                    self.model_origin()
                )));
            }
            return binned(Workspace::from_value(doc)?);
        }
        if self.patchset.is_some() {
            return Err(Error::InvalidInput(format!(
                "{} is an HS3 model: patchsets apply to pyhf workspaces",
                self.model_origin()
            )));
        }
        if self.interpolation != Interpolation::default() {
            return Err(Error::InvalidInput(format!(
                "{} is an HS3 model: interpolation codes apply to pyhf workspaces",
                self.model_origin()
            )));
        }
        let base = match &self.workspace {
            Source::Path(p) => p.parent().map(Path::to_path_buf),
            Source::Inline(_) => None,
        };
        let options = ns_unbinned::hs3::ReadOptions {
            analysis: self.measurement.as_deref(),
            files: read.data_files(base.as_deref()),
        };
        let model = ns_unbinned::hs3::read(&doc, &options)?;
        Ok(LoadedModel::Unbinned(Box::new(model)))
    }
}

/// A loaded model: HistFactory (with its workspace) or unbinned.
pub enum LoadedModel {
    Binned {
        workspace: Box<Workspace>,
        model: Box<HistFactoryModel>,
    },
    Unbinned(Box<ns_unbinned::UnbinnedModel>),
}

impl LoadedModel {
    pub fn likelihood(&self) -> &dyn ns_compute::Likelihood {
        match self {
            LoadedModel::Binned { model, .. } => model.as_ref(),
            LoadedModel::Unbinned(model) => model.as_ref(),
        }
    }

    /// What a result reports about the model beyond the verb's numbers: the flow PDFs and
    /// the providers they run on (`"flows"`), added to `report` where the model has any.
    pub fn annotate(&self, report: &mut serde_json::Value) {
        if let LoadedModel::Unbinned(m) = self
            && let Some(flows) = m.flows_json()
            && let Some(object) = report.as_object_mut()
        {
            object.insert("flows".into(), flows);
        }
    }
}
