//! The page headers of a Parquet column chunk, checked before the parquet crate decodes them.
//! That crate sizes buffers by what a page header claims — a dictionary page of 1.6·10⁹ values
//! in a file of 8 kB allocates 13 GB — so a damaged or forged header could take memory out of
//! proportion to the file, or abort the process. Each header of a chunk we read is parsed here
//! (Thrift's compact protocol, the fields we check, the rest skipped) and refused where its
//! claims cannot be true: a page past its chunk, an uncompressed size beyond what any codec the
//! reader takes expands to, a dictionary of more values than its page holds.

use parquet::basic::Type as PhysicalType;
use parquet::file::metadata::ColumnChunkMetaData;

/// The largest expansion of a page by Snappy or LZ4 (LZ4's bound, about 255:1), with room.
const MAX_EXPANSION: i64 = 256;
/// Nested structs skipped in a header (Parquet's headers nest two deep).
const MAX_DEPTH: usize = 8;

/// Why the pages of `chunk` (of physical type `physical`, fixed length `type_length`) in `file`
/// cannot be read as their headers claim, or `None`.
pub(crate) fn check_chunk(
    file: &[u8],
    chunk: &ColumnChunkMetaData,
    physical: PhysicalType,
    type_length: i32,
) -> Option<String> {
    let start = chunk
        .dictionary_page_offset()
        .unwrap_or(chunk.data_page_offset());
    let len = chunk.compressed_size();
    let (Ok(start), Ok(len)) = (usize::try_from(start), usize::try_from(len)) else {
        return Some(format!(
            "its pages start at byte {start} and span {len} bytes: not a place in the file"
        ));
    };
    let end = match start.checked_add(len) {
        Some(end) if end <= file.len() => end,
        _ => {
            return Some(format!(
                "its pages span bytes {start} to {} of a file of {} bytes",
                start as u128 + len as u128,
                file.len()
            ));
        }
    };
    // The bits a dictionary value takes at least (a byte array's length prefix for strings).
    let value_bits: i128 = match physical {
        PhysicalType::BOOLEAN => 1,
        PhysicalType::INT32 | PhysicalType::FLOAT | PhysicalType::BYTE_ARRAY => 32,
        PhysicalType::INT64 | PhysicalType::DOUBLE => 64,
        PhysicalType::INT96 => 96,
        PhysicalType::FIXED_LEN_BYTE_ARRAY => 8 * i128::from(type_length.max(1)),
    };
    let mut at = start;
    while at < end {
        let mut reader = Compact {
            bytes: &file[at..end],
            at: 0,
        };
        let header = match reader.page_header() {
            Ok(h) => h,
            Err(why) => return Some(format!("the page header at byte {at}: {why}")),
        };
        let (compressed, uncompressed) = (header.compressed_size, header.uncompressed_size);
        if compressed < 0 || uncompressed < 0 {
            return Some(format!("the page at byte {at} has a negative size"));
        }
        if i64::from(uncompressed) > MAX_EXPANSION * i64::from(compressed.max(1)) {
            return Some(format!(
                "the page at byte {at} claims {uncompressed} bytes from {compressed} compressed"
            ));
        }
        if let Some(values) = header.dictionary_values
            && (values < 0 || i128::from(values) * value_bits > 8 * i128::from(uncompressed))
        {
            return Some(format!(
                "the dictionary page at byte {at} claims {values} values in {uncompressed} bytes"
            ));
        }
        at = match at
            .checked_add(reader.at)
            .and_then(|a| a.checked_add(compressed as usize))
        {
            Some(next) if next <= end => next,
            _ => return Some(format!("the page at byte {at} runs past its column chunk")),
        };
    }
    None
}

/// What a page header says that the checks need.
struct PageHeader {
    uncompressed_size: i32,
    compressed_size: i32,
    dictionary_values: Option<i32>,
}

/// A reader of Thrift's compact protocol over a slice.
struct Compact<'a> {
    bytes: &'a [u8],
    at: usize,
}

/// Compact-protocol field types.
const STOP: u8 = 0;
const TRUE: u8 = 1;
const FALSE: u8 = 2;
const BYTE: u8 = 3;
const I16: u8 = 4;
const I32: u8 = 5;
const I64: u8 = 6;
const DOUBLE: u8 = 7;
const BINARY: u8 = 8;
const LIST: u8 = 9;
const SET: u8 = 10;
const MAP: u8 = 11;
const STRUCT: u8 = 12;

impl Compact<'_> {
    fn byte(&mut self) -> Result<u8, String> {
        let b = *self
            .bytes
            .get(self.at)
            .ok_or("it ends inside the header")?;
        self.at += 1;
        Ok(b)
    }

    fn varint(&mut self) -> Result<u64, String> {
        let mut value = 0u64;
        for shift in (0..70).step_by(7) {
            let b = self.byte()?;
            value |= u64::from(b & 0x7f) << shift.min(63);
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err("a number runs on past ten bytes".into())
    }

    fn i32(&mut self) -> Result<i32, String> {
        let v = self.varint()?;
        let zigzag = ((v >> 1) as i64) ^ -((v & 1) as i64);
        i32::try_from(zigzag).map_err(|_| format!("{zigzag} is not a 32-bit number"))
    }

    /// The next field's (id, type); id 0 with type STOP ends the struct.
    fn field(&mut self, last: i16) -> Result<(i16, u8), String> {
        let b = self.byte()?;
        let kind = b & 0x0f;
        if kind == STOP {
            return Ok((0, STOP));
        }
        let delta = i16::from(b >> 4);
        let id = if delta == 0 {
            self.i32()? as i16
        } else {
            last.wrapping_add(delta)
        };
        Ok((id, kind))
    }

    fn skip(&mut self, kind: u8, depth: usize) -> Result<(), String> {
        if depth > MAX_DEPTH {
            return Err("it nests too deep".into());
        }
        match kind {
            TRUE | FALSE => {}
            BYTE => {
                self.byte()?;
            }
            I16 | I32 | I64 => {
                self.varint()?;
            }
            DOUBLE => self.advance(8)?,
            BINARY => {
                let n = self.varint()?;
                self.advance(usize::try_from(n).map_err(|_| "a string longer than memory")?)?;
            }
            LIST | SET => {
                let b = self.byte()?;
                let n = match b >> 4 {
                    15 => self.varint()?,
                    n => u64::from(n),
                };
                // Every element takes at least a byte, so a forged count ends with the bytes.
                for _ in 0..n {
                    self.skip_element(b & 0x0f, depth + 1)?;
                }
            }
            MAP => {
                let n = self.varint()?;
                if n > 0 {
                    let types = self.byte()?;
                    for _ in 0..n {
                        self.skip_element(types >> 4, depth + 1)?;
                        self.skip_element(types & 0x0f, depth + 1)?;
                    }
                }
            }
            STRUCT => self.skip_struct(depth + 1)?,
            other => return Err(format!("field type {other} is not Thrift's")),
        }
        Ok(())
    }

    /// An element of a list, set or map: a boolean there is a byte of its own (in a struct
    /// it lives in its field's type).
    fn skip_element(&mut self, kind: u8, depth: usize) -> Result<(), String> {
        match kind {
            TRUE | FALSE => self.byte().map(|_| ()),
            kind => self.skip(kind, depth),
        }
    }

    fn advance(&mut self, n: usize) -> Result<(), String> {
        match self.at.checked_add(n) {
            Some(at) if at <= self.bytes.len() => {
                self.at = at;
                Ok(())
            }
            _ => Err("it ends inside the header".into()),
        }
    }

    fn skip_struct(&mut self, depth: usize) -> Result<(), String> {
        let mut last = 0;
        loop {
            let (id, kind) = self.field(last)?;
            if kind == STOP {
                return Ok(());
            }
            self.skip(kind, depth)?;
            last = id;
        }
    }

    fn page_header(&mut self) -> Result<PageHeader, String> {
        let (mut uncompressed, mut compressed, mut dictionary) = (None, None, None);
        let mut last = 0;
        loop {
            let (id, kind) = self.field(last)?;
            match (id, kind) {
                (_, STOP) => break,
                (2, I32) => uncompressed = Some(self.i32()?),
                (3, I32) => compressed = Some(self.i32()?),
                (7, STRUCT) => dictionary = Some(self.dictionary_values()?),
                (_, kind) => self.skip(kind, 1)?,
            }
            last = id;
        }
        Ok(PageHeader {
            uncompressed_size: uncompressed.ok_or("it has no uncompressed size")?,
            compressed_size: compressed.ok_or("it has no compressed size")?,
            dictionary_values: dictionary,
        })
    }

    /// A dictionary page header's number of values.
    fn dictionary_values(&mut self) -> Result<i32, String> {
        let mut values = None;
        let mut last = 0;
        loop {
            let (id, kind) = self.field(last)?;
            match (id, kind) {
                (_, STOP) => break,
                (1, I32) => values = Some(self.i32()?),
                (_, kind) => self.skip(kind, 2)?,
            }
            last = id;
        }
        values.ok_or_else(|| "its dictionary header has no number of values".into())
    }
}
