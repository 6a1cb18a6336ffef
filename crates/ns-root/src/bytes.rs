//! A big-endian cursor over a buffer whose errors name where they happened: the file, the object
//! and the byte offset in the file (or in the object's uncompressed bytes).

use ns_core::{Error, Result};

/// What a buffer is, for messages: the file, the object, and where its byte 0 lies.
#[derive(Clone, Debug)]
pub(crate) struct Origin {
    pub(crate) file: String,
    /// The key read (`dir/name;cycle`), or the file's own structure.
    pub(crate) what: String,
    /// The file offset of byte 0 of the buffer; `None` for decompressed bytes (their offsets
    /// are within the object).
    pub(crate) file_offset: Option<u64>,
}

impl Origin {
    pub(crate) fn error(&self, at: usize, message: impl std::fmt::Display) -> Error {
        let place = match self.file_offset {
            Some(base) => format!("at byte {} of the file", base + at as u64),
            None => format!("at byte {at} of the object (uncompressed)"),
        };
        Error::InvalidInput(format!("{}: {} {place}: {message}", self.file, self.what))
    }
}

pub(crate) struct Cursor<'a> {
    pub(crate) data: &'a [u8],
    pub(crate) pos: usize,
    pub(crate) origin: &'a Origin,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(data: &'a [u8], pos: usize, origin: &'a Origin) -> Self {
        Cursor { data, pos, origin }
    }

    pub(crate) fn error(&self, message: impl std::fmt::Display) -> Error {
        self.origin.error(self.pos, message)
    }

    pub(crate) fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.data.len());
        let Some(end) = end else {
            return Err(self.error(format!(
                "{what} needs {n} bytes but {} remain (a truncated or damaged file)",
                self.data.len().saturating_sub(self.pos)
            )));
        };
        let bytes = &self.data[self.pos..end];
        self.pos = end;
        Ok(bytes)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        let bytes = self.take(N, what)?;
        let mut out = [0u8; N];
        out.copy_from_slice(bytes);
        Ok(out)
    }

    pub(crate) fn u8(&mut self, what: &str) -> Result<u8> {
        Ok(self.array::<1>(what)?[0])
    }
    pub(crate) fn u16(&mut self, what: &str) -> Result<u16> {
        Ok(u16::from_be_bytes(self.array(what)?))
    }
    pub(crate) fn i16(&mut self, what: &str) -> Result<i16> {
        Ok(i16::from_be_bytes(self.array(what)?))
    }
    pub(crate) fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_be_bytes(self.array(what)?))
    }
    pub(crate) fn i32(&mut self, what: &str) -> Result<i32> {
        Ok(i32::from_be_bytes(self.array(what)?))
    }
    pub(crate) fn i64(&mut self, what: &str) -> Result<i64> {
        Ok(i64::from_be_bytes(self.array(what)?))
    }
    pub(crate) fn f64(&mut self, what: &str) -> Result<f64> {
        Ok(f64::from_be_bytes(self.array(what)?))
    }

    /// A non-negative 32-bit count, at most `limit` (what the remaining bytes can hold).
    pub(crate) fn count(&mut self, what: &str, item_bytes: usize) -> Result<usize> {
        let at = self.pos;
        let n = self.i32(what)?;
        let remaining = self.data.len().saturating_sub(self.pos);
        match usize::try_from(n) {
            Ok(n) if n.saturating_mul(item_bytes) <= remaining => Ok(n),
            _ => Err(self.origin.error(
                at,
                format!("{what} is {n}, more than the {remaining} bytes left can hold"),
            )),
        }
    }

    /// ROOT's TString: a length byte (255: a 32-bit length follows) and the bytes.
    pub(crate) fn string(&mut self, what: &str) -> Result<String> {
        let short = self.u8(what)?;
        let n = if short == 255 {
            self.count(what, 1)?
        } else {
            short as usize
        };
        let bytes = self.take(n, what)?;
        Ok(String::from_utf8_lossy(bytes).into_owned())
    }

    /// Move to `pos` (the end of an object by its byte count), which must lie in the buffer and
    /// not before the cursor's object start `start`.
    pub(crate) fn seek(&mut self, pos: usize, start: usize, what: &str) -> Result<()> {
        if pos > self.data.len() || pos < start {
            return Err(self.error(format!(
                "{what} ends at byte {pos}, outside the {} bytes of the object",
                self.data.len()
            )));
        }
        self.pos = pos;
        Ok(())
    }
}
