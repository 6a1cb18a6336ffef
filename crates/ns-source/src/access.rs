//! The file-access policy of one model load: how the documents a reference names are read, and
//! which data files (Parquet events, flow manifests) the model may open. A front door picks the
//! policy — the CLI and Python read local files ([`Files`]), the server none ([`NoFiles`]) — and
//! a format reads only through it, so a loader given [`NoFiles`] has no way to open a file,
//! whatever a patch adds to the model.

use std::path::Path;

use ns_core::{Error, FileAccess, Result};
use ns_translate::load::{read_json, read_text};
use serde_json::Value;

/// How a front door reads the files a model names: the JSON documents (as parsed documents, and
/// — where it can — as text, which lets a plain workspace be parsed straight into its typed form,
/// without a JSON tree: the larger part of loading a published likelihood) and the policy for the
/// data files a model names. Any `Fn(&Path) -> Result<Value>` is a reader of documents without
/// text that opens no data files.
pub trait Reader {
    fn json(&self, path: &Path) -> Result<Value>;
    /// The file's text; `None` where this reader gives documents only.
    fn text(&self, _path: &Path) -> Option<Result<String>> {
        None
    }
    /// The data files a model read from `base` (its file's folder) may open.
    fn data_files<'a>(&self, base: Option<&'a Path>) -> FileAccess<'a>;
}

impl<F: Fn(&Path) -> Result<Value>> Reader for F {
    fn json(&self, path: &Path) -> Result<Value> {
        self(path)
    }
    fn data_files<'a>(&self, _base: Option<&'a Path>) -> FileAccess<'a> {
        FileAccess::Denied
    }
}

/// Files as they are: documents through `ns_translate::load` (size limit, encoding checks) and
/// the data files a model names, relative to its file.
pub struct Files;

impl Reader for Files {
    fn json(&self, path: &Path) -> Result<Value> {
        read_json(path)
    }
    fn text(&self, path: &Path) -> Option<Result<String>> {
        Some(read_text(path))
    }
    fn data_files<'a>(&self, base: Option<&'a Path>) -> FileAccess<'a> {
        FileAccess::Local { base }
    }
}

/// No file at all: every document inline, every file a model names refused with one message
/// ([`ns_core::files::NO_FILES`]) — the server's reader.
pub struct NoFiles;

impl Reader for NoFiles {
    fn json(&self, _path: &Path) -> Result<Value> {
        Err(Error::InvalidInput(ns_core::files::NO_FILES.into()))
    }
    fn data_files<'a>(&self, _base: Option<&'a Path>) -> FileAccess<'a> {
        FileAccess::Denied
    }
}
