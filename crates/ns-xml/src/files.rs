//! The files a HistFactory XML names: paths relative to the base folder, never outside it, and
//! ROOT files opened once per read.

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};

use ns_core::{Error, FileAccess, Result};
use ns_root::RootFile;

/// Where the files of one read come from.
pub(crate) struct Files<'a> {
    pub(crate) base: PathBuf,
    pub(crate) access: FileAccess<'a>,
    roots: HashMap<PathBuf, RootFile>,
}

impl<'a> Files<'a> {
    pub(crate) fn new(base: PathBuf, access: FileAccess<'a>) -> Self {
        Files {
            base,
            access,
            roots: HashMap::new(),
        }
    }

    /// The path of `named` (as an XML writes it, relative to the base folder); `place` says
    /// where it was named. A path that leaves the base folder is refused.
    pub(crate) fn path(&self, named: &str, place: &str) -> Result<PathBuf> {
        let named = named.trim();
        let relative = Path::new(named);
        let mut depth = 0i32;
        for part in relative.components() {
            match part {
                Component::Normal(_) => depth += 1,
                Component::CurDir => {}
                Component::ParentDir => depth -= 1,
                Component::RootDir | Component::Prefix(_) => {
                    return Err(Error::InvalidInput(format!(
                        "{place}: '{named}' is an absolute path; the files of a HistFactory \
                         XML are named relative to its base folder ({})",
                        self.base.display()
                    )));
                }
            }
            if depth < 0 {
                return Err(Error::InvalidInput(format!(
                    "{place}: '{named}' leaves the base folder ({}); the files of a HistFactory \
                     XML must lie inside it",
                    self.base.display()
                )));
            }
        }
        let base = self.base.to_string_lossy();
        self.access.resolve(&format!("{base}/{named}"))?;
        Ok(self.base.join(relative))
    }

    /// The text of the XML file `named`.
    pub(crate) fn xml(&self, named: &str, place: &str) -> Result<(PathBuf, String)> {
        let path = self.path(named, place)?;
        let text = ns_translate::load::read_text(&path).map_err(|e| match e {
            Error::Io { source, .. } => {
                Error::InvalidInput(format!("{place}: {}: {source}", path.display()))
            }
            other => other,
        })?;
        Ok((path, text))
    }

    /// The ROOT file `named`, opened once.
    pub(crate) fn root(&mut self, named: &str, place: &str) -> Result<&RootFile> {
        let path = self.path(named, place)?;
        if !self.roots.contains_key(&path) {
            let file = RootFile::open(&path).map_err(|e| match e {
                Error::Io { source, .. } => Error::InvalidInput(format!(
                    "{place}: the ROOT file {}: {source}",
                    path.display()
                )),
                other => other,
            })?;
            self.roots.insert(path.clone(), file);
        }
        Ok(&self.roots[&path])
    }
}
