//! The workspace/model options every verb shares, and loading a model from them.

use clap::Args;
use ns_core::{Error, Result};
use ns_source::{Interpolation, ModelRef, PatchsetPatch, PyhfRef, Source};
use ns_xml::Semantics;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Every file this command has read: an output must not replace one of them.
static FILES_READ: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Read a JSON input (`-` is stdin), remembering the file so that no output overwrites it.
pub fn read_json(path: &Path) -> Result<Value> {
    remember(path);
    ns_translate::load::read_json(path)
}

/// The files of a model, read as [`read_json`] does: the reader every verb loads models with.
pub struct Inputs;

impl ns_source::Reader for Inputs {
    fn json(&self, path: &Path) -> Result<Value> {
        read_json(path)
    }
    fn text(&self, path: &Path) -> Option<Result<String>> {
        remember(path);
        Some(ns_translate::load::read_text(path))
    }
    fn head(&self, path: &Path) -> Option<Result<Vec<u8>>> {
        ns_source::file_head(path)
    }
    fn data_files<'a>(&self, base: Option<&'a Path>) -> ns_core::FileAccess<'a> {
        ns_core::FileAccess::Local { base }
    }
}

/// Remember `path` as an input of this command.
pub fn remember(path: &Path) {
    if path.as_os_str() != "-"
        && let Ok(mut read) = FILES_READ.lock()
    {
        read.push(path.to_path_buf());
    }
}

/// The input that `path` would overwrite, if any (compared as files: links and `..` resolved).
pub fn input_at(path: &Path) -> Option<PathBuf> {
    let target = std::fs::canonicalize(path).ok()?;
    let read = FILES_READ.lock().ok()?;
    read.iter()
        .find(|input| std::fs::canonicalize(input).is_ok_and(|p| p == target))
        .cloned()
}

/// A workspace given positionally or with `-i/--input` (the workspace commands).
#[derive(Args, Debug, Clone)]
pub struct WorkspaceArg {
    /// pyhf JSON workspace
    #[arg(value_name = "WORKSPACE")]
    pub workspace: Option<PathBuf>,
    /// pyhf JSON workspace (same as the positional argument)
    #[arg(
        short = 'i',
        long = "input",
        value_name = "WORKSPACE",
        conflicts_with = "workspace"
    )]
    pub input: Option<PathBuf>,
}

impl WorkspaceArg {
    pub fn path(&self) -> Result<PathBuf> {
        given(&self.workspace, &self.input, "WORKSPACE")
    }
}

/// A model given positionally or with `-i/--input` (the inference verbs).
#[derive(Args, Debug, Clone)]
pub struct ModelFileArg {
    /// The model: a pyhf JSON workspace or an HS3 JSON file (told apart by content)
    #[arg(value_name = "MODEL")]
    pub model: Option<PathBuf>,
    /// The model (same as the positional argument)
    #[arg(
        short = 'i',
        long = "input",
        value_name = "MODEL",
        conflicts_with = "model"
    )]
    pub input: Option<PathBuf>,
}

impl ModelFileArg {
    pub fn path(&self) -> Result<PathBuf> {
        given(&self.model, &self.input, "MODEL")
    }
}

/// The file given positionally or with `-i`, or an error saying how to give one.
fn given(positional: &Option<PathBuf>, input: &Option<PathBuf>, what: &str) -> Result<PathBuf> {
    positional.clone().or_else(|| input.clone()).ok_or_else(|| {
        Error::InvalidInput(format!(
            "no {} given: pass {what} or -i/--input {what}",
            what.to_lowercase()
        ))
    })
}

/// Options that select and patch the workspace and configure the model.
#[derive(Args, Debug, Clone)]
pub struct ModelArgs {
    #[command(flatten)]
    pub ws: ModelFileArg,
    /// Measurement (pyhf) or analysis (HS3) to use (default: the first)
    #[arg(long)]
    pub measurement: Option<String>,
    /// RFC 6902 JSON patch applied to the workspace (repeatable, applied in order)
    #[arg(short = 'p', long = "patch", value_name = "PATCH")]
    pub patches: Vec<PathBuf>,
    /// HEPData patchset; the patch named by --patch-name is applied after verifying the digest
    /// (`upper-limit --all`: every patch)
    #[arg(long)]
    pub patchset: Option<PathBuf>,
    /// Name of the patch in --patchset
    #[arg(long, requires = "patchset")]
    pub patch_name: Option<String>,
    /// Apply --patchset's patches without checking its digest of the background-only workspace
    /// (published patchsets sometimes carry another file's), with a warning
    #[arg(long, requires = "patchset")]
    pub skip_verify: bool,
    /// Interpolation codes per modifier type, e.g. normsys=code1,histosys=code0 (types not named keep the default)
    #[arg(long, value_name = "TYPE=CODE,...")]
    pub interp_codes: Option<String>,
    /// Base set of interpolation codes: pyhf (normsys=code4, histosys=code4p) or legacy (code1, code0)
    #[arg(long, value_name = "SET", default_value = "pyhf")]
    pub interp_defaults: String,
    /// Clip each sample's yield at zero as ROOT's HistFactory does, where pyhf lets it turn
    /// negative, and give an empty bin expecting a negative count a wall (a model whose yields
    /// can turn negative in an empty bin then has a minimum); see docs/pyhf-semantics.md
    #[arg(long)]
    pub clip_negative_yields: bool,
    /// HistFactory XML read as ROOT's hist2workspace builds it (root, the default) or as
    /// pyhf.readxml reads it (pyhf); see docs/histfactory-xml.md
    #[arg(long, value_name = "root|pyhf")]
    pub semantics: Option<String>,
    /// The mass $MASS stands for in a CMS Combine datacard's template names (text2workspace's
    /// -m); see docs/combine.md
    #[arg(long, short = 'm', value_name = "MASS")]
    pub mass: Option<String>,
    /// A physics-model option of a CMS Combine datacard, as text2workspace's --PO for
    /// multiSignalModel: 'map=BIN/PROCESS[,…]:POI[init,min,max]' (or :1, :0) or
    /// 'turnoff=PROCESS[,…]'; repeat for several (see docs/combine.md)
    #[arg(long = "po", visible_alias = "PO", value_name = "OPTION")]
    pub physics: Vec<String>,
}

impl ModelArgs {
    /// The model these options name, as the serialisable call holds it.
    pub fn model_ref(&self) -> Result<ModelRef> {
        let reference = self.pyhf_ref()?;
        let reference = match &self.semantics {
            Some(name) => reference.with_xml_semantics(Semantics::from_name(name)?, &Inputs)?,
            None => reference,
        };
        let reference = match &self.mass {
            Some(mass) => reference.with_datacard_mass(mass, &Inputs)?,
            None => reference,
        };
        match self.physics.is_empty() {
            true => Ok(reference),
            false => reference.with_datacard_physics(&self.physics, &Inputs),
        }
    }

    /// The background model of a patchset grid: the file with `--semantics`, nothing applied.
    pub fn background_ref(&self) -> Result<ModelRef> {
        let reference = ModelRef::file(self.ws.path()?);
        match &self.semantics {
            Some(name) => reference.with_xml_semantics(Semantics::from_name(name)?, &Inputs),
            None => Ok(reference),
        }
    }

    /// The reference without a format (told by the file's head or content).
    fn pyhf_ref(&self) -> Result<ModelRef> {
        Ok(ModelRef::ByContent(PyhfRef {
            workspace: Source::Path(self.ws.path()?),
            patchset: match (&self.patchset, &self.patch_name) {
                (Some(path), Some(name)) => {
                    self.warn_unverified();
                    Some(PatchsetPatch {
                        patchset: Source::Path(path.clone()),
                        patch: name.clone(),
                        skip_verify: self.skip_verify,
                    })
                }
                (Some(path), None) => {
                    return Err(Error::InvalidInput(format!(
                        "--patchset {}: name the patch with --patch-name NAME (upper-limit \
                         takes --all for every patch)",
                        path.display()
                    )));
                }
                _ => None,
            },
            patches: self.patches.iter().cloned().map(Source::Path).collect(),
            measurement: self.measurement.clone(),
            interpolation: Interpolation {
                defaults: self.interp_defaults.clone(),
                codes: self.interp_codes.clone(),
                clip_negative_yields: self.clip_negative_yields,
            },
        }))
    }

    /// `--skip-verify` is said once on stderr: the result stands on a patch applied to a
    /// background file the patchset may not have been made for.
    pub fn warn_unverified(&self) {
        static SAID: std::sync::Once = std::sync::Once::new();
        if self.skip_verify {
            SAID.call_once(|| {
                eprintln!(
                    "warning: --skip-verify: the patchset's digest of the background-only \
                     workspace is not checked"
                )
            });
        }
    }

    /// The workspace JSON after the patchset patch and the `-p` patches.
    pub fn workspace_value(&self) -> Result<Value> {
        self.model_ref()?.document(&Inputs)
    }
}
