//! The files a HistFactory XML names: paths relative to the base folder, never outside it, read
//! from the disk (as the load's `FileAccess` allows) or from the files sent with the XML, and ROOT
//! files opened once per read (shared by the threads that read the channels).

use std::collections::{BTreeMap, HashMap};
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex};

use ns_core::{Error, FileAccess, Result};
use ns_root::RootFile;

/// Files sent with an XML: each path, relative to the base folder, with its bytes.
pub type SentFiles = BTreeMap<String, Vec<u8>>;

/// Where the files of one read come from.
pub(crate) struct Files<'a> {
    pub(crate) base: PathBuf,
    access: FileAccess<'a>,
    sent: Option<&'a SentFiles>,
    roots: Mutex<HashMap<PathBuf, Arc<RootFile>>>,
}

/// `named` as a path inside the base folder (`./a/../b` → `b`), or why it is not one.
fn inside(named: &str) -> std::result::Result<PathBuf, &'static str> {
    let mut parts: Vec<&std::ffi::OsStr> = Vec::new();
    for part in Path::new(named).components() {
        match part {
            Component::Normal(p) => parts.push(p),
            Component::CurDir => {}
            Component::ParentDir => {
                parts.pop().ok_or("leaves")?;
            }
            Component::RootDir | Component::Prefix(_) => return Err("absolute"),
        }
    }
    Ok(parts.iter().collect())
}

impl<'a> Files<'a> {
    pub(crate) fn new(base: PathBuf, access: FileAccess<'a>, sent: Option<&'a SentFiles>) -> Self {
        Files {
            base,
            access,
            sent,
            roots: Mutex::new(HashMap::new()),
        }
    }

    /// The path of `named` (as an XML writes it, relative to the base folder) inside the base
    /// folder; `place` says where it was named. A path that leaves the base folder is refused.
    pub(crate) fn path(&self, named: &str, place: &str) -> Result<PathBuf> {
        let named = named.trim();
        let relative = inside(named).map_err(|why| {
            Error::InvalidInput(match why {
                "absolute" => format!(
                    "{place}: '{named}' is an absolute path; the files of a HistFactory XML are \
                     named relative to its base folder ({})",
                    self.base.display()
                ),
                _ => format!(
                    "{place}: '{named}' leaves the base folder ({}); the files of a HistFactory \
                     XML must lie inside it",
                    self.base.display()
                ),
            })
        })?;
        if self.sent.is_none() {
            // The load's policy decides whether the disk may be read at all.
            self.access
                .resolve(&self.base.join(&relative).to_string_lossy())?;
        }
        Ok(self.base.join(relative))
    }

    /// The bytes of a sent file, by its path inside the base folder.
    fn sent_bytes(&self, path: &Path, place: &str) -> Option<Result<&'a [u8]>> {
        let sent = self.sent?;
        let key = path.strip_prefix(&self.base).unwrap_or(path);
        Some(
            sent.iter()
                .find(|(name, _)| inside(name).is_ok_and(|p| p == key))
                .map(|(_, bytes)| bytes.as_slice())
                .ok_or_else(|| {
                    Error::InvalidInput(format!(
                        "{place}: '{}' is not among the files sent with the XML ({})",
                        key.display(),
                        sent.keys().cloned().collect::<Vec<_>>().join(", ")
                    ))
                }),
        )
    }

    /// The text of the XML file `named`.
    pub(crate) fn xml(&self, named: &str, place: &str) -> Result<(PathBuf, String)> {
        let path = self.path(named, place)?;
        if let Some(bytes) = self.sent_bytes(&path, place) {
            let text = String::from_utf8(bytes?.to_vec()).map_err(|e| {
                Error::InvalidInput(format!(
                    "{place}: {} is not UTF-8 text (byte {})",
                    path.display(),
                    e.utf8_error().valid_up_to()
                ))
            })?;
            return Ok((path, text));
        }
        let text = ns_translate::load::read_text(&path).map_err(|e| match e {
            Error::Io { source, .. } => {
                Error::InvalidInput(format!("{place}: {}: {source}", path.display()))
            }
            other => other,
        })?;
        Ok((path, text))
    }

    /// The ROOT file `named`, opened once.
    pub(crate) fn root(&self, named: &str, place: &str) -> Result<Arc<RootFile>> {
        let path = self.path(named, place)?;
        // Opened under the lock: two channels of one file open it once.
        let mut roots = self.roots.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(file) = roots.get(&path) {
            return Ok(Arc::clone(file));
        }
        let file = match self.sent_bytes(&path, place) {
            Some(bytes) => RootFile::from_bytes(&path.display().to_string(), bytes?.to_vec())?,
            None => RootFile::open_named(&path, place)?,
        };
        let file = Arc::new(file);
        roots.insert(path, Arc::clone(&file));
        Ok(file)
    }
}
