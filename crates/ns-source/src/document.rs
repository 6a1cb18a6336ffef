//! One JSON document a model reference names: a file, or the document itself.

use std::path::{Path, PathBuf};

use ns_core::Result;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::access::Reader;

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

    /// How an error names this document when it is a patch.
    pub(crate) fn patch_origin(&self) -> String {
        match self {
            Source::Path(path) => path.display().to_string(),
            Source::Inline(_) => "an inline patch".into(),
        }
    }

    /// How an error names this document when it is the model.
    pub(crate) fn model_origin(&self) -> String {
        match self {
            Source::Path(p) => p.display().to_string(),
            Source::Inline(_) => "the inline model".into(),
        }
    }

    /// The folder a model file's relative data paths start from (none for an inline document).
    pub(crate) fn folder(&self) -> Option<&Path> {
        match self {
            Source::Path(p) => p.parent(),
            Source::Inline(_) => None,
        }
    }

    /// A relative file path read from `base` instead of the current folder.
    pub(crate) fn resolve_from(&mut self, base: &Path) {
        if let Source::Path(p) = self
            && p.is_relative()
            && p.as_os_str() != "-"
        {
            *p = base.join(&*p);
        }
    }
}

/// The document after RFC 6902 patches, applied in order.
pub(crate) fn patched(document: &Source, patches: &[Source], read: &dyn Reader) -> Result<Value> {
    let mut doc = document.value(read)?;
    apply_patches(&mut doc, patches, read)?;
    Ok(doc)
}

/// Apply RFC 6902 patches to `doc`, in order; an error names the patch.
pub(crate) fn apply_patches(doc: &mut Value, patches: &[Source], read: &dyn Reader) -> Result<()> {
    for patch in patches {
        ns_translate::patch::apply_patch(doc, &patch.value(read)?, &patch.patch_origin())?;
    }
    Ok(())
}
