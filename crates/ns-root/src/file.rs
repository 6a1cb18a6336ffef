//! The file's structure: its header, directories and keys.

use ns_core::Result;

use crate::bytes::{Cursor, Origin};

/// A key: one object of a directory.
#[derive(Clone, Debug)]
pub struct Key {
    pub class: String,
    pub name: String,
    pub title: String,
    pub cycle: i16,
    /// Bytes of the key header and the stored object.
    pub nbytes: u32,
    pub keylen: u16,
    /// The object's uncompressed length.
    pub objlen: u32,
    /// Where the key starts in the file.
    pub seek_key: u64,
}

impl Key {
    /// Whether the object is a directory.
    pub fn is_directory(&self) -> bool {
        self.class == "TDirectoryFile"
    }
}

/// Where a directory's list of keys lies.
pub(crate) struct Directory {
    pub(crate) seek_keys: u64,
}

/// The file header: where the top directory lies.
pub(crate) fn top_directory(data: &[u8], origin: &Origin) -> Result<Directory> {
    let mut c = Cursor::new(data, 0, origin);
    if c.take(4, "the file's magic")? != b"root" {
        return Err(origin.error(0, "not a ROOT file: it does not start with \"root\""));
    }
    let version = c.i32("the file's version")?;
    let begin = c.i32("fBEGIN")?;
    // Large files (version ≥ 1000000) have 64-bit offsets; the small header is read either way
    // up to fNbytesName, which is what locates the top directory.
    let large = version >= 1_000_000;
    if large {
        c.i64("fEND")?;
        c.i64("fSeekFree")?;
    } else {
        c.i32("fEND")?;
        c.i32("fSeekFree")?;
    }
    c.i32("fNbytesFree")?;
    c.i32("nfree")?;
    let nbytes_name = c.i32("fNbytesName")?;
    let at = usize::try_from(begin)
        .ok()
        .zip(usize::try_from(nbytes_name).ok())
        .and_then(|(b, n)| b.checked_add(n))
        .filter(|&at| at < data.len())
        .ok_or_else(|| {
            origin.error(
                8,
                format!("fBEGIN {begin} + fNbytesName {nbytes_name} lies outside the file"),
            )
        })?;
    directory(data, at, origin)
}

/// A directory record at `at`.
pub(crate) fn directory(data: &[u8], at: usize, origin: &Origin) -> Result<Directory> {
    let mut c = Cursor::new(data, at, origin);
    let version = c.i16("the directory's version")?;
    c.u32("fDatimeC")?;
    c.u32("fDatimeM")?;
    c.i32("fNbytesKeys")?;
    c.i32("fNbytesName")?;
    let seek_keys = if version > 1000 {
        c.i64("fSeekDir")?;
        c.i64("fSeekParent")?;
        c.i64("fSeekKeys")?
    } else {
        c.i32("fSeekDir")?;
        c.i32("fSeekParent")?;
        i64::from(c.i32("fSeekKeys")?)
    };
    let seek_keys = u64::try_from(seek_keys)
        .map_err(|_| origin.error(at, format!("fSeekKeys is {seek_keys}")))?;
    Ok(Directory { seek_keys })
}

/// One key header at the cursor.
fn key(c: &mut Cursor) -> Result<Key> {
    let nbytes = c.i32("the key's fNbytes")?;
    let version = c.i16("the key's version")?;
    let objlen = c.i32("the key's fObjlen")?;
    c.u32("the key's fDatime")?;
    let keylen = c.i16("the key's fKeylen")?;
    let cycle = c.i16("the key's fCycle")?;
    let seek_key = if version > 1000 {
        let s = c.i64("the key's fSeekKey")?;
        c.i64("the key's fSeekPdir")?;
        s
    } else {
        let s = c.i32("the key's fSeekKey")?;
        c.i32("the key's fSeekPdir")?;
        i64::from(s)
    };
    let mut class = c.string("the key's class name")?;
    // ROOT writes directories' keys as TDirectory and reads them as TDirectoryFile.
    if class == "TDirectory" {
        class = "TDirectoryFile".into();
    }
    let name = c.string("the key's name")?;
    let title = c.string("the key's title")?;
    let (Ok(nbytes), Ok(objlen), Ok(keylen), Ok(seek_key)) = (
        u32::try_from(nbytes),
        u32::try_from(objlen),
        u16::try_from(keylen),
        u64::try_from(seek_key),
    ) else {
        return Err(c.error(format!(
            "key '{name}' has negative sizes or offsets (fNbytes {nbytes}, fObjlen {objlen}, \
             fKeylen {keylen}, fSeekKey {seek_key})"
        )));
    };
    Ok(Key {
        class,
        name,
        title,
        cycle,
        nbytes,
        keylen,
        objlen,
        seek_key,
    })
}

/// The keys of a directory.
pub(crate) fn keys(data: &[u8], dir: &Directory, origin: &Origin) -> Result<Vec<Key>> {
    let at = usize::try_from(dir.seek_keys)
        .ok()
        .filter(|&at| at < data.len())
        .ok_or_else(|| {
            ns_core::Error::InvalidInput(format!(
                "{}: {}: its list of keys at byte {} lies beyond the end of the file ({} bytes): \
                 the file is truncated or damaged",
                origin.file,
                origin.what,
                dir.seek_keys,
                data.len()
            ))
        })?;
    let mut c = Cursor::new(data, at, origin);
    // The list starts with a key header of its own, then the number of keys.
    let own = key(&mut c)?;
    c.seek(at + own.keylen as usize, at, "the list of keys' header")?;
    // A key header is at least 26 bytes.
    let n = c.count("the number of keys", 26)?;
    (0..n).map(|_| key(&mut c)).collect()
}
