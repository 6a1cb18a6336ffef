//! Which files a model may read beyond the documents it was given: the Parquet event sources and
//! flow manifests an HS3 model names. A front door chooses the policy; a reader opens a file only
//! through [`FileAccess::resolve`], so a loader given [`FileAccess::Denied`] has no way to open one
//! (the server's, whatever a patch adds to the model).

use std::path::{Path, PathBuf};

use crate::{Error, Result};

/// The one message of a refused file, whichever way it was named. It says nothing of the path:
/// an answer that differed by path would tell a client which files exist.
pub const NO_FILES: &str = "the model names a file (a workspace, patch, patchset, Parquet event \
     source or flow manifest): the server reads no files for its clients; send every document \
     inline";

/// The file policy of one model load.
#[derive(Clone, Copy, Debug)]
pub enum FileAccess<'a> {
    /// Files on this machine; relative paths start at `base` (the model file's folder).
    Local { base: Option<&'a Path> },
    /// No file is opened.
    Denied,
}

impl FileAccess<'_> {
    /// The path to open for a file the model names, or [`NO_FILES`].
    pub fn resolve(&self, named: &str) -> Result<PathBuf> {
        match self {
            FileAccess::Local { base } => Ok(base.map_or(PathBuf::from(named), |b| b.join(named))),
            FileAccess::Denied => Err(Error::InvalidInput(NO_FILES.into())),
        }
    }
}
