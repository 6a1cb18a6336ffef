//! ROOT's compressed objects: a sequence of blocks, each a 9-byte header — a 2-byte algorithm tag
//! (`ZL` zlib, `XZ` lzma, `L4` lz4 with an 8-byte checksum first, `ZS` zstd), a method byte, and
//! the compressed and uncompressed sizes as 3-byte little-endian integers — and its payload,
//! until the object's length is reached.

use std::borrow::Cow;
use std::io::Read;

use ns_core::Result;

use crate::bytes::{Cursor, Origin};

thread_local! {
    /// One zlib inflater per thread, reset for each block: a fresh one allocates its 32 kB
    /// window every time, most of the cost of a small histogram.
    static INFLATE: std::cell::RefCell<flate2::Decompress> =
        std::cell::RefCell::new(flate2::Decompress::new(true));
}

/// The object's bytes: `raw` itself when stored uncompressed, else its blocks decompressed into
/// exactly `objlen` bytes.
pub(crate) fn object_bytes<'a>(
    raw: &'a [u8],
    objlen: usize,
    origin: &Origin,
) -> Result<Cow<'a, [u8]>> {
    if raw.len() == objlen {
        return Ok(Cow::Borrowed(raw));
    }
    if raw.len() > objlen {
        return Err(origin.error(
            0,
            format!(
                "the key stores {} bytes for an object of {objlen}",
                raw.len()
            ),
        ));
    }
    // Reserved as blocks expand: a damaged key's length alone does not allocate.
    let mut out = Vec::with_capacity(objlen.min(raw.len().saturating_mul(16)));
    let mut cursor = Cursor::new(raw, 0, origin);
    while out.len() < objlen {
        let start = cursor.pos;
        let header = cursor.take(9, "a compression block header")?;
        let tag = [header[0], header[1]];
        let size = |b: &[u8]| b[0] as usize | (b[1] as usize) << 8 | (b[2] as usize) << 16;
        let (compressed, expanded) = (size(&header[3..6]), size(&header[6..9]));
        if out.len() + expanded > objlen {
            return Err(origin.error(
                start,
                format!(
                    "a compression block expands to {expanded} bytes, beyond the object's {objlen}"
                ),
            ));
        }
        let payload = cursor.take(compressed, "a compression block")?;
        let before = out.len();
        let failed = |e: String| origin.error(start, format!("{} block: {e}", name(tag)));
        match &tag {
            b"ZL" => {
                // One call into room for exactly the block: no stream buffers per block (an XML
                // model reads thousands of small histograms).
                out.reserve(expanded);
                let status = INFLATE
                    .with_borrow_mut(|inflate| {
                        inflate.reset(true);
                        inflate.decompress_vec(payload, &mut out, flate2::FlushDecompress::Finish)
                    })
                    .map_err(|e| failed(e.to_string()))?;
                if status != flate2::Status::StreamEnd {
                    return Err(failed(
                        "the zlib stream does not end within the block".into(),
                    ));
                }
            }
            b"XZ" => {
                let mut input = payload;
                let mut bounded = Bounded {
                    out: &mut out,
                    room: expanded,
                };
                lzma_rs::xz_decompress(&mut input, &mut bounded)
                    .map_err(|e| failed(format!("{e:?}")))?;
            }
            b"L4" => {
                // An xxhash64 checksum of the compressed bytes precedes the lz4 block.
                let block = payload
                    .get(8..)
                    .ok_or_else(|| failed("shorter than its checksum".into()))?;
                let expanded_bytes = lz4_flex::block::decompress(block, expanded)
                    .map_err(|e| failed(e.to_string()))?;
                out.extend_from_slice(&expanded_bytes);
            }
            b"ZS" => {
                let mut decoder = ruzstd::decoding::StreamingDecoder::new(payload)
                    .map_err(|e| failed(e.to_string()))?;
                (&mut decoder)
                    .take(expanded as u64)
                    .read_to_end(&mut out)
                    .map_err(|e| failed(e.to_string()))?;
            }
            other => {
                return Err(origin.error(
                    start,
                    format!(
                        "compression algorithm '{}' is not one ROOT writes today (ZL, XZ, L4, ZS); \
                         the file may be damaged or from a ROOT older than 6",
                        String::from_utf8_lossy(other)
                    ),
                ));
            }
        }
        if out.len() - before != expanded {
            return Err(origin.error(
                start,
                format!(
                    "{} block gives {} bytes where its header says {expanded}",
                    name(tag),
                    out.len() - before
                ),
            ));
        }
        if expanded == 0 {
            return Err(origin.error(start, "an empty compression block".to_string()));
        }
    }
    Ok(Cow::Owned(out))
}

/// A writer that takes at most `room` bytes: a block that expands beyond its header's size
/// stops there instead of filling memory.
struct Bounded<'a> {
    out: &'a mut Vec<u8>,
    room: usize,
}

impl std::io::Write for Bounded<'_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        if bytes.len() > self.room {
            return Err(std::io::Error::other(
                "the block expands beyond the size its header gives",
            ));
        }
        self.room -= bytes.len();
        self.out.extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn name(tag: [u8; 2]) -> &'static str {
    match &tag {
        b"ZL" => "a zlib",
        b"XZ" => "an lzma",
        b"L4" => "an lz4",
        b"ZS" => "a zstd",
        _ => "a",
    }
}
