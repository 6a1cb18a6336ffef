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
    /// The first bytes of the file (at most [`HEAD_BYTES`]), by which formats whose files are
    /// not JSON are told apart; `None` where this reader does not look into files (standard
    /// input is read once, as a document).
    fn head(&self, _path: &Path) -> Option<Result<Vec<u8>>> {
        None
    }
    /// The data files a model read from `base` (its file's folder) may open.
    fn data_files<'a>(&self, base: Option<&'a Path>) -> FileAccess<'a>;
}

/// How many bytes of a file [`Reader::head`] gives.
pub const HEAD_BYTES: u64 = 4096;

/// The first [`HEAD_BYTES`] of a local file (none of standard input).
pub fn file_head(path: &Path) -> Option<Result<Vec<u8>>> {
    if path.as_os_str() == "-" {
        return None;
    }
    let read = || -> std::io::Result<Vec<u8>> {
        let mut head = Vec::new();
        std::io::Read::read_to_end(
            &mut std::io::Read::take(std::fs::File::open(path)?, HEAD_BYTES),
            &mut head,
        )?;
        Ok(head)
    };
    Some(read().map_err(|e| Error::io(path.display().to_string(), e)))
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
    fn head(&self, path: &Path) -> Option<Result<Vec<u8>>> {
        file_head(path)
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
