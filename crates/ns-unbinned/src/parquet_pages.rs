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
/// cannot be read — headers whose claims cannot be true (the file is damaged), or an encoding
/// not read — or `None`.
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
            "its pages start at byte {start} and span {len} bytes: not a place in the file \
             (the file is damaged)"
        ));
    };
    let end = match start.checked_add(len) {
        Some(end) if end <= file.len() => end,
        _ => {
            return Some(format!(
                "its pages span bytes {start} to {} of a file of {} bytes (the file is damaged)",
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
            Err(why) => {
                return Some(format!(
                    "the page header at byte {at}: {why} (the file is damaged)"
                ));
            }
        };
        let (compressed, uncompressed) = (header.compressed_size, header.uncompressed_size);
        if compressed < 0 || uncompressed < 0 {
            return Some(format!(
                "the page at byte {at} has a negative size (the file is damaged)"
            ));
        }
        if i64::from(uncompressed) > MAX_EXPANSION * i64::from(compressed.max(1)) {
            return Some(format!(
                "the page at byte {at} claims {uncompressed} bytes from {compressed} compressed \
                 (the file is damaged)"
            ));
        }
        if let Some(encoding) = header.encoding
            && UNBOUNDED_ENCODINGS.contains(&encoding)
        {
            return Some(format!(
                "the page at byte {at} is encoded with {} (Parquet's encoding {encoding}), \
                 which nextstat does not read; write the column with plain or dictionary encoding",
                if encoding == 6 {
                    "DELTA_LENGTH_BYTE_ARRAY"
                } else {
                    "DELTA_BYTE_ARRAY"
                }
            ));
        }
        if let Some(values) = header.dictionary_values
            && (values < 0 || i128::from(values) * value_bits > 8 * i128::from(uncompressed))
        {
            return Some(format!(
                "the dictionary page at byte {at} claims {values} values in {uncompressed} bytes \
                 (the file is damaged)"
            ));
        }
        at = match at
            .checked_add(reader.at)
            .and_then(|a| a.checked_add(compressed as usize))
        {
            Some(next) if next <= end => next,
            _ => {
                return Some(format!(
                    "the page at byte {at} runs past its column chunk (the file is damaged)"
                ));
            }
        };
    }
    None
}

/// What a page header says that the checks need.
struct PageHeader {
    uncompressed_size: i32,
    compressed_size: i32,
    dictionary_values: Option<i32>,
    /// The value encoding of a data page (v1 or v2).
    encoding: Option<i32>,
}

/// A field's type as the parquet crate reads it: it takes a known field by its id as this type
/// whatever the header declares, so a declared type that differs is refused here (else the two
/// readers would see different values, or lose step).
#[derive(Clone, Copy)]
enum Expect {
    I32,
    I64,
    Bool,
    Binary,
    Struct(&'static [(i16, Expect)]),
}

/// Parquet's `Statistics`, `DataPageHeader`, `IndexPageHeader`, `DictionaryPageHeader`,
/// `DataPageHeaderV2` and `PageHeader`, by field id.
const STATISTICS: &[(i16, Expect)] = &[
    (1, Expect::Binary),
    (2, Expect::Binary),
    (3, Expect::I64),
    (4, Expect::I64),
    (5, Expect::Binary),
    (6, Expect::Binary),
    (7, Expect::Bool),
    (8, Expect::Bool),
];
const DATA_PAGE: &[(i16, Expect)] = &[
    (1, Expect::I32),
    (2, Expect::I32),
    (3, Expect::I32),
    (4, Expect::I32),
    (5, Expect::Struct(STATISTICS)),
];
const INDEX_PAGE: &[(i16, Expect)] = &[];
const DICTIONARY_PAGE: &[(i16, Expect)] = &[(1, Expect::I32), (2, Expect::I32), (3, Expect::Bool)];
const DATA_PAGE_V2: &[(i16, Expect)] = &[
    (1, Expect::I32),
    (2, Expect::I32),
    (3, Expect::I32),
    (4, Expect::I32),
    (5, Expect::I32),
    (6, Expect::I32),
    (7, Expect::Bool),
    (8, Expect::Struct(STATISTICS)),
];
const PAGE: &[(i16, Expect)] = &[
    (1, Expect::I32),
    (2, Expect::I32),
    (3, Expect::I32),
    (4, Expect::I32),
    (5, Expect::Struct(DATA_PAGE)),
    (6, Expect::Struct(INDEX_PAGE)),
    (7, Expect::Struct(DICTIONARY_PAGE)),
    (8, Expect::Struct(DATA_PAGE_V2)),
];

/// Parquet's encodings whose decoders size a buffer by a count in the page's data, unchecked:
/// DELTA_LENGTH_BYTE_ARRAY and DELTA_BYTE_ARRAY.
const UNBOUNDED_ENCODINGS: [i32; 2] = [6, 7];

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
        let b = *self.bytes.get(self.at).ok_or("it ends inside the header")?;
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

    /// The next field's (id, type); type STOP ends the struct.
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
            // A struct of no known fields: each skipped by its declared type.
            STRUCT => self.typed_struct(&[], 0, depth, &mut Vec::new())?,
            other => return Err(format!("field type {other} is not Thrift's")),
        }
        Ok(())
    }

    /// An element of a list, set or map. No page header holds booleans there, and readers
    /// differ on their size (a byte each, or none), so they are refused.
    fn skip_element(&mut self, kind: u8, depth: usize) -> Result<(), String> {
        match kind {
            TRUE | FALSE => Err("it holds a collection of booleans".into()),
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

    /// A struct of `fields` (unknown ids skipped by their declared type, as the crate skips
    /// them), its 32-bit numbers recorded as ((enclosing field, field), value).
    fn typed_struct(
        &mut self,
        fields: &[(i16, Expect)],
        outer: i16,
        depth: usize,
        numbers: &mut Vec<((i16, i16), i32)>,
    ) -> Result<(), String> {
        if depth > MAX_DEPTH {
            return Err("it nests too deep".into());
        }
        let mut last = 0;
        loop {
            let (id, kind) = self.field(last)?;
            if kind == STOP {
                return Ok(());
            }
            match fields.iter().find(|(known, _)| *known == id).map(|f| f.1) {
                None => self.skip(kind, depth + 1)?,
                Some(expect) => {
                    let fits = matches!(
                        (expect, kind),
                        (Expect::I32, I32)
                            | (Expect::I64, I64)
                            | (Expect::Bool, TRUE | FALSE)
                            | (Expect::Binary, BINARY)
                            | (Expect::Struct(_), STRUCT)
                    );
                    if !fits {
                        return Err(format!("its field {id} is of type {kind}, not Parquet's"));
                    }
                    match expect {
                        Expect::I32 => numbers.push(((outer, id), self.i32()?)),
                        Expect::Struct(inner) => {
                            self.typed_struct(inner, id, depth + 1, numbers)?
                        }
                        _ => self.skip(kind, depth + 1)?,
                    }
                }
            }
            last = id;
        }
    }

    fn page_header(&mut self) -> Result<PageHeader, String> {
        let mut numbers = Vec::new();
        self.typed_struct(PAGE, 0, 0, &mut numbers)?;
        // A field given twice counts as its last value, as the crate reads it.
        let get = |key: (i16, i16)| numbers.iter().rev().find(|(k, _)| *k == key).map(|n| n.1);
        Ok(PageHeader {
            uncompressed_size: get((0, 2)).ok_or("it has no uncompressed size")?,
            compressed_size: get((0, 3)).ok_or("it has no compressed size")?,
            dictionary_values: get((7, 1)),
            encoding: get((5, 2)).or(get((8, 4))),
        })
    }
}
