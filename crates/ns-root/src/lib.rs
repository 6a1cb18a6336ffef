//! A reader of ROOT files for what likelihoods are built from: histograms (TH1 and TH2 with
//! double, float, int, short or char contents, their axes, sums of squared weights and under-
//! and overflow), in directories, in every compression ROOT writes (zlib, lzma, lz4, zstd) or
//! none, without ROOT. Files are memory-mapped; every malformed file is an error that names the
//! file, the key and the byte offset, never a panic.
//!
//! ```no_run
//! let file = ns_root::RootFile::open(std::path::Path::new("data.root"))?;
//! let h = file.histogram("SR/signal")?; // its first cycle listed (ROOT's Get); "SR/signal;1" names one
//! println!("{:?}", h.values());
//! # Ok::<(), ns_core::Error>(())
//! ```

mod bytes;
mod compression;
mod file;
mod hist;

pub use file::Key;
pub use hist::{Axis, Histogram};

use std::path::Path;

use ns_core::{Error, Result};

use bytes::{Cursor, Origin};

/// The deepest directory path followed (a bound on the walk, far beyond real files).
const MAX_DEPTH: usize = 64;

/// An open ROOT file.
pub struct RootFile {
    name: String,
    data: Data,
    /// The keys of each directory read so far (by path): a model reads hundreds of histograms
    /// from a few directories.
    directories: std::sync::Mutex<std::collections::HashMap<String, std::sync::Arc<Vec<Key>>>>,
}

enum Data {
    Mapped(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl RootFile {
    /// [`RootFile::open`] for a file a model names at `place` (an XML element, a datacard's
    /// shapes line): a file that cannot be opened is that input's error, saying where.
    pub fn open_named(path: &Path, place: &str) -> Result<RootFile> {
        RootFile::open(path).map_err(|e| match e {
            Error::Io { source, .. } => Error::InvalidInput(format!(
                "{place}: the ROOT file {}: {source}",
                path.display()
            )),
            other => other,
        })
    }

    /// [`RootFile::histogram`] for a histogram a model names at `place`, its errors saying where.
    pub fn histogram_named(&self, path: &str, place: &str) -> Result<Histogram> {
        self.histogram(path).map_err(|e| match e {
            Error::InvalidInput(m) => Error::InvalidInput(format!("{place}: {m}")),
            other => other,
        })
    }

    /// Open and memory-map `path`.
    pub fn open(path: &Path) -> Result<RootFile> {
        let name = path.display().to_string();
        let file = std::fs::File::open(path).map_err(|e| Error::io(&name, e))?;
        let meta = file.metadata().map_err(|e| Error::io(&name, e))?;
        if !meta.is_file() {
            return Err(Error::InvalidInput(format!(
                "{name}: not a file (a ROOT file is expected)"
            )));
        }
        // SAFETY: the map is read only; a file changed underneath while it is read gives wrong
        // bytes (caught by the reader's checks), as a read would, not undefined behaviour in
        // this process's own memory.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| Error::io(&name, e))?;
        RootFile::with_data(name, Data::Mapped(map))
    }

    /// A file held in memory (`name` names it in messages).
    pub fn from_bytes(name: &str, bytes: Vec<u8>) -> Result<RootFile> {
        RootFile::with_data(name.to_string(), Data::Owned(bytes))
    }

    fn with_data(name: String, data: Data) -> Result<RootFile> {
        let file = RootFile {
            name,
            data,
            directories: Default::default(),
        };
        file.top_keys()?;
        Ok(file)
    }

    fn bytes(&self) -> &[u8] {
        match &self.data {
            Data::Mapped(m) => m,
            Data::Owned(v) => v,
        }
    }

    fn origin(&self, what: &str, file_offset: Option<u64>) -> Origin {
        Origin {
            file: self.name.clone(),
            what: what.to_string(),
            file_offset,
        }
    }

    fn top_keys(&self) -> Result<Vec<Key>> {
        let origin = self.origin("the file header", Some(0));
        let dir = file::top_directory(self.bytes(), &origin)?;
        file::keys(
            self.bytes(),
            &dir,
            &self.origin("the top directory", Some(0)),
        )
    }

    /// The keys of the directory at `path` (`""`: the top directory; `"a/b"`: nested), every
    /// cycle listed.
    pub fn keys(&self, path: &str) -> Result<Vec<Key>> {
        Ok(self.directory(path)?.as_ref().clone())
    }

    /// The keys of a directory, read once.
    fn directory(&self, path: &str) -> Result<std::sync::Arc<Vec<Key>>> {
        let path = path.trim_matches('/');
        if let Some(keys) = self.cached(path) {
            return Ok(keys);
        }
        let keys = std::sync::Arc::new(self.read_directory(path)?);
        if let Ok(mut cache) = self.directories.lock() {
            cache.insert(path.to_string(), keys.clone());
        }
        Ok(keys)
    }

    fn cached(&self, path: &str) -> Option<std::sync::Arc<Vec<Key>>> {
        self.directories.lock().ok()?.get(path).cloned()
    }

    /// Whether the file holds an object at `path` (`"dir/name"`, `"name;cycle"`).
    pub fn contains(&self, path: &str) -> bool {
        let (dir, name) = path.rsplit_once('/').unwrap_or(("", path));
        let (name, cycle) = split_cycle(name);
        self.directory(dir).is_ok_and(|keys| {
            keys.iter()
                .any(|k| k.name == name && cycle.is_none_or(|c| k.cycle == c))
        })
    }

    /// The keys of the directory at `path` (trimmed of slashes), its parent's taken from the
    /// cache: each directory of the file is read once however many paths name it. The depth
    /// is checked before the parents are walked.
    fn read_directory(&self, path: &str) -> Result<Vec<Key>> {
        if path.is_empty() {
            return self.top_keys();
        }
        if path.split('/').filter(|p| !p.is_empty()).count() > MAX_DEPTH {
            return Err(Error::InvalidInput(format!(
                "{}: '{path}' is deeper than {MAX_DEPTH} directories",
                self.name
            )));
        }
        let (parent, part) = path.rsplit_once('/').unwrap_or(("", path));
        let keys = self.directory(parent)?;
        let walked = if parent.is_empty() {
            String::new()
        } else {
            format!("{parent}/")
        };
        let key = self.find(&keys, part, &walked)?;
        if !key.is_directory() {
            return Err(Error::InvalidInput(format!(
                "{}: '{walked}{part}' is a {}, not a directory",
                self.name, key.class
            )));
        }
        let what = format!("directory '{walked}{part}'");
        let bytes = self.object(&key, &what)?;
        let origin = self.origin(&what, None);
        let dir = file::directory(&bytes, 0, &origin)?;
        file::keys(self.bytes(), &dir, &self.origin(&what, Some(0)))
    }

    /// The key named `name` in `keys`: `name;cycle` names one cycle; a plain name is the first
    /// key of that name in the directory's list, as ROOT's `TDirectoryFile::Get` reads it (the
    /// highest cycle in files ROOT writes, which list the newest first; not in every file).
    fn find(&self, keys: &[Key], name: &str, dir: &str) -> Result<Key> {
        let (name, cycle) = split_cycle(name);
        keys.iter()
            .find(|k| k.name == name && cycle.is_none_or(|c| k.cycle == c))
            .cloned()
            .ok_or_else(|| {
                let mut names: Vec<&str> = keys.iter().map(|k| k.name.as_str()).collect();
                names.dedup();
                let shown = names
                    .iter()
                    .take(20)
                    .copied()
                    .collect::<Vec<_>>()
                    .join(", ");
                let more = if names.len() > 20 {
                    format!(" and {} more", names.len() - 20)
                } else {
                    String::new()
                };
                let dir = dir.trim_end_matches('/');
                let place = if dir.is_empty() {
                    "the file".to_string()
                } else {
                    format!("directory '{dir}'")
                };
                let cycle = cycle.map_or(String::new(), |c| format!(" with cycle {c}"));
                Error::InvalidInput(format!(
                    "{}: no object '{name}'{cycle} in {place} (it holds: {shown}{more})",
                    self.name
                ))
            })
    }

    /// The object bytes of `key`, decompressed.
    fn object(&self, key: &Key, what: &str) -> Result<std::borrow::Cow<'_, [u8]>> {
        let data = self.bytes();
        let start = key.seek_key as usize + key.keylen as usize;
        let end = key.seek_key as usize + key.nbytes as usize;
        let origin = self.origin(what, Some(start as u64));
        if key.keylen as u32 > key.nbytes || end > data.len() {
            return Err(self.origin(what, Some(0)).error(
                key.seek_key as usize,
                format!(
                    "the key says its object spans bytes {start}..{end}, beyond the file's {}",
                    data.len()
                ),
            ));
        }
        compression::object_bytes(&data[start..end], key.objlen as usize, &origin)
    }

    /// The histogram at `path` (`"name"`, `"dir/sub/name"`, `"name;cycle"`).
    pub fn histogram(&self, path: &str) -> Result<Histogram> {
        let (dir, name) = path.rsplit_once('/').unwrap_or(("", path));
        let keys = self.directory(dir)?;
        let key = self.find(&keys, name, dir)?;
        let what = format!("{} '{path}'", key.class);
        if !hist::is_histogram(&key.class) {
            return Err(Error::InvalidInput(format!(
                "{}: '{path}' is a {}, not a histogram ({})",
                self.name,
                key.class,
                hist::classes()
            )));
        }
        let bytes = self.object(&key, &what)?;
        let origin = self.origin(&what, None);
        let mut cursor = Cursor::new(&bytes, 0, &origin);
        hist::read(&mut cursor, &key.class)
    }
}

/// `name;cycle` → (name, Some(cycle)); a name without a numeric cycle → (name, None).
fn split_cycle(name: &str) -> (&str, Option<i16>) {
    match name.rsplit_once(';') {
        Some((n, c)) => match c.parse::<i16>() {
            Ok(c) => (n, Some(c)),
            Err(_) => (name, None),
        },
        None => (name, None),
    }
}
