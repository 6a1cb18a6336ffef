//! Events from Parquet, the namespaced HS3 extension `"type": "nextstat:parquet"`:
//! ```json
//! {"name": "obs", "type": "nextstat:parquet", "path": "events.parquet",
//!  "axes": [{"name": "x", "min": 0, "max": 10, "column": "mass"}], "weights": "w"}
//! ```
//! `path` is relative to the HS3 file; `column` defaults to the axis name; `weights` (a column)
//! is optional. Other HS3 readers skip the entry by its type. The axes' ranges select events:
//! a row group whose column statistics lie wholly outside is not decoded (pushdown), and the
//! remaining events outside a range are dropped.
//!
//! The file is memory-mapped and handed to the reader as `bytes::Bytes`; only the observable
//! and weight columns are decoded (projection), row groups in parallel (rayon) and joined in
//! file order, into one f64 column per observable.

use std::path::{Path, PathBuf};

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Decimal128Type, Float16Type, Float32Type, Float64Type, Int8Type, Int16Type, Int32Type,
    Int64Type, UInt8Type, UInt16Type, UInt32Type, UInt64Type,
};
use arrow_array::{Array, RecordBatch};
use arrow_schema::DataType;
use ns_core::contained::contained;
use ns_core::{Error, FileAccess, Result};
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder,
};
use parquet::basic::{Compression, ConvertedType, SortOrder};
use parquet::file::statistics::Statistics;
use parquet::schema::types::ColumnDescriptor;
use rayon::prelude::*;
use serde_json::Value;

use crate::events::ChannelEvents;
use crate::model::Axis;
use ns_hs3::read_axes;

/// The data type of the extension.
pub const TYPE: &str = "nextstat:parquet";

/// How a Parquet file is read.
#[derive(Clone, Debug)]
pub struct ParquetRead {
    pub path: PathBuf,
    /// Per observable: its column and range.
    pub columns: Vec<(String, f64, f64)>,
    pub weights: Option<String>,
    /// Skip row groups whose statistics lie outside a range.
    pub pushdown: bool,
    /// Decode row groups in parallel.
    pub parallel: bool,
}

fn perr(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::InvalidInput(format!("Parquet file {}: {e}", path.display()))
}

/// What a row group's statistics say of a column's range, where they can be trusted: plain
/// floats and signed integers (an unsigned or decimal column's statistics are raw storage). A
/// NaN bound is unknown, never a range.
fn stat_range(column: &ColumnDescriptor, stats: Option<&Statistics>) -> Option<(f64, f64)> {
    let signed_integer = matches!(
        column.converted_type(),
        ConvertedType::NONE
            | ConvertedType::INT_8
            | ConvertedType::INT_16
            | ConvertedType::INT_32
            | ConvertedType::INT_64
    ) && column.sort_order() == SortOrder::SIGNED;
    let (min, max) = match stats? {
        Statistics::Double(s) => (*s.min_opt()?, *s.max_opt()?),
        Statistics::Float(s) => (*s.min_opt()? as f64, *s.max_opt()? as f64),
        Statistics::Int32(s) if signed_integer => (*s.min_opt()? as f64, *s.max_opt()? as f64),
        Statistics::Int64(s) if signed_integer => (*s.min_opt()? as f64, *s.max_opt()? as f64),
        _ => return None,
    };
    (!min.is_nan() && !max.is_nan()).then_some((min, max))
}

/// Whether a row group may hold values of `column` in [lo, hi]: only statistics that say
/// its range lies wholly outside rule it out (absent or NaN statistics are unknown).
fn may_hold(column: &ColumnDescriptor, stats: Option<&Statistics>, lo: f64, hi: f64) -> bool {
    match stat_range(column, stats) {
        Some((min, max)) => max >= lo && min <= hi,
        None => true,
    }
}

/// The compressions this build decompresses (pure-Rust codecs: every target builds them).
const READABLE_CODECS: [Compression; 4] = [
    Compression::UNCOMPRESSED,
    Compression::SNAPPY,
    Compression::LZ4,
    Compression::LZ4_RAW,
];

/// Why a column named by the model is not a leaf of the file: a nested column, or none.
fn missing_column(meta: &ArrowReaderMetadata, name: &str) -> String {
    let schema = meta.schema();
    match schema.field_with_name(name) {
        Ok(field) => format!(
            "column '{name}' holds {}, not numbers (nextstat reads {NUMERIC_TYPES})",
            field.data_type()
        ),
        Err(_) => {
            let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
            format!("no column '{name}' (the file has {})", names.join(", "))
        }
    }
}

/// The column types read, as a message lists them.
const NUMERIC_TYPES: &str = "floats (64, 32, 16 bits), signed and unsigned integers, decimals, \
     and dictionary-encoded columns of these";

/// An array's values as f64 appended to `out`, or `None` for a type that holds no numbers
/// (`out` then unchanged).
fn append_numbers(array: &dyn Array, out: &mut Vec<f64>) -> Option<()> {
    macro_rules! each {
        ($t:ty) => {
            out.extend(
                array
                    .as_primitive::<$t>()
                    .values()
                    .iter()
                    .map(|&v| v as f64),
            )
        };
    }
    match array.data_type() {
        DataType::Float64 => out.extend_from_slice(array.as_primitive::<Float64Type>().values()),
        DataType::Float32 => each!(Float32Type),
        DataType::Float16 => out.extend(
            array
                .as_primitive::<Float16Type>()
                .values()
                .iter()
                .map(|v| v.to_f64()),
        ),
        DataType::Int8 => each!(Int8Type),
        DataType::Int16 => each!(Int16Type),
        DataType::Int32 => each!(Int32Type),
        DataType::Int64 => each!(Int64Type),
        DataType::UInt8 => each!(UInt8Type),
        DataType::UInt16 => each!(UInt16Type),
        DataType::UInt32 => each!(UInt32Type),
        DataType::UInt64 => each!(UInt64Type),
        DataType::Decimal128(_, scale) => {
            let unit = 10f64.powi(-i32::from(*scale));
            out.extend(
                array
                    .as_primitive::<Decimal128Type>()
                    .values()
                    .iter()
                    .map(|&v| v as f64 * unit),
            )
        }
        DataType::Dictionary(_, _) => {
            let dictionary = array.as_any_dictionary();
            let mut values = Vec::new();
            append_numbers(dictionary.values().as_ref(), &mut values)?;
            out.extend(dictionary.normalized_keys().into_iter().map(|k| values[k]))
        }
        _ => return None,
    }
    Some(())
}

/// A numeric column of a batch as f64.
fn column_values(batch: &RecordBatch, name: &str, path: &Path, out: &mut Vec<f64>) -> Result<()> {
    let col = batch
        .column_by_name(name)
        .ok_or_else(|| perr(path, format!("no column '{name}'")))?;
    if col.null_count() > 0 {
        return Err(perr(
            path,
            format!("column '{name}' has missing values (nulls)"),
        ));
    }
    append_numbers(col.as_ref(), out).ok_or_else(|| {
        perr(
            path,
            format!(
                "column '{name}' holds {}, not numbers (nextstat reads {NUMERIC_TYPES})",
                col.data_type()
            ),
        )
    })
}

impl ParquetRead {
    /// The events of the file's columns. The parquet crate asserts on some malformed contents
    /// instead of returning an error; its calls run [`contained`] (on every thread that decodes),
    /// so a damaged file is an input error that names it, never a crash.
    pub fn read(&self) -> Result<ChannelEvents> {
        contained(|| self.read_contained())
            .unwrap_or_else(|panic| Err(self.damaged("the file", panic)))
    }

    fn damaged(&self, what: &str, panic: String) -> Error {
        perr(
            &self.path,
            format!("{what} is damaged (the Parquet reader stopped: {panic})"),
        )
    }

    fn read_contained(&self) -> Result<ChannelEvents> {
        let file = std::fs::File::open(&self.path).map_err(|e| perr(&self.path, e))?;
        if !file.metadata().is_ok_and(|m| m.is_file()) {
            return Err(perr(&self.path, "not a file (a folder or a device)"));
        }
        // SAFETY: the map is read-only; a file changed underneath while reading is the
        // caller's to avoid, as for any reader of a file in place.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| perr(&self.path, e))?;
        let bytes = bytes::Bytes::from_owner(map);
        let meta = ArrowReaderMetadata::load(&bytes, ArrowReaderOptions::default())
            .map_err(|e| perr(&self.path, e))?;
        let schema = meta.parquet_schema();
        let mut wanted: Vec<&str> = self.columns.iter().map(|c| c.0.as_str()).collect();
        wanted.extend(self.weights.as_deref());
        let mut leaves = Vec::new();
        for name in &wanted {
            let i = schema
                .columns()
                .iter()
                .position(|c| c.path().string() == *name)
                .ok_or_else(|| perr(&self.path, missing_column(&meta, name)))?;
            leaves.push(i);
        }
        let metadata = meta.metadata().clone();
        for (name, &leaf) in wanted.iter().zip(&leaves) {
            if let Some(codec) = (0..metadata.num_row_groups())
                .map(|g| metadata.row_group(g).column(leaf).compression())
                .find(|c| !READABLE_CODECS.contains(c))
            {
                return Err(perr(
                    &self.path,
                    format!(
                        "column '{name}' is compressed with {codec}, which nextstat does not \
                         decompress; write the file with snappy or LZ4 compression, or none"
                    ),
                ));
            }
            // After the codec: a file of a codec not read is named so, not called damaged.
            let column = schema.column(leaf);
            if let Some((g, why)) = (0..metadata.num_row_groups()).find_map(|g| {
                crate::parquet_pages::check_chunk(
                    &bytes,
                    metadata.row_group(g).column(leaf),
                    column.physical_type(),
                    column.type_length(),
                )
                .map(|why| (g, why))
            }) {
                return Err(perr(
                    &self.path,
                    format!("column '{name}' of row group {g}: {why}"),
                ));
            }
        }
        let groups: Vec<usize> = (0..metadata.num_row_groups())
            .filter(|&g| {
                !self.pushdown
                    || self
                        .columns
                        .iter()
                        .zip(&leaves)
                        .all(|((_, lo, hi), &leaf)| {
                            may_hold(
                                schema.column(leaf).as_ref(),
                                metadata.row_group(g).column(leaf).statistics(),
                                *lo,
                                *hi,
                            )
                        })
            })
            .collect();
        let decode_group = |g: usize| -> Result<ChannelEvents> {
            let reader =
                ParquetRecordBatchReaderBuilder::new_with_metadata(bytes.clone(), meta.clone())
                    .with_projection(ProjectionMask::leaves(schema, leaves.iter().copied()))
                    .with_row_groups(vec![g])
                    .with_batch_size(65_536)
                    .build()
                    .map_err(|e| perr(&self.path, e))?;
            // The row group's rows, as its metadata claims them, but no more than its share of
            // the file's bytes: forged counts must not reserve memory out of proportion to the
            // file (all the groups' vectors live until they are joined).
            let rows = usize::try_from(metadata.row_group(g).num_rows())
                .unwrap_or(0)
                .min(bytes.len() / groups.len().max(1));
            let column = || Vec::with_capacity(rows);
            let mut columns: Vec<Vec<f64>> = self.columns.iter().map(|_| column()).collect();
            let mut weights = self.weights.as_ref().map(|_| column());
            for batch in reader {
                let batch = batch.map_err(|e| perr(&self.path, e))?;
                for (col, (name, _, _)) in columns.iter_mut().zip(&self.columns) {
                    column_values(&batch, name, &self.path, col)?;
                }
                if let (Some(w), Some(name)) = (&mut weights, &self.weights) {
                    column_values(&batch, name, &self.path, w)?;
                }
            }
            Ok(select(ChannelEvents { columns, weights }, &self.columns))
        };
        // Contained on the thread that decodes it.
        let decode = |g: usize| -> Result<ChannelEvents> {
            contained(|| decode_group(g))
                .unwrap_or_else(|panic| Err(self.damaged(&format!("row group {g}"), panic)))
        };
        let mut parts: Vec<ChannelEvents> = if self.parallel {
            groups
                .par_iter()
                .map(|&g| decode(g))
                .collect::<Result<_>>()?
        } else {
            groups.iter().map(|&g| decode(g)).collect::<Result<_>>()?
        };
        if parts.len() == 1
            && let Some(only) = parts.pop()
        {
            return Ok(only);
        }
        let total: usize = parts.iter().map(ChannelEvents::len).sum();
        let column = || Vec::with_capacity(total);
        let mut events = ChannelEvents {
            columns: self.columns.iter().map(|_| column()).collect(),
            weights: self.weights.as_ref().map(|_| column()),
        };
        for part in parts {
            for (all, col) in events.columns.iter_mut().zip(part.columns) {
                all.extend(col);
            }
            if let (Some(all), Some(w)) = (&mut events.weights, part.weights) {
                all.extend(w);
            }
        }
        Ok(events)
    }
}

/// The events inside every range (NaN is outside).
fn select(events: ChannelEvents, ranges: &[(String, f64, f64)]) -> ChannelEvents {
    let n = events.len();
    let keep: Vec<bool> = (0..n)
        .map(|e| {
            events
                .columns
                .iter()
                .zip(ranges)
                .all(|(c, (_, lo, hi))| c[e] >= *lo && c[e] <= *hi)
        })
        .collect();
    if keep.iter().all(|&k| k) {
        return events;
    }
    let filter = |v: Vec<f64>| {
        v.into_iter()
            .zip(&keep)
            .filter(|(_, k)| **k)
            .map(|(x, _)| x)
            .collect()
    };
    ChannelEvents {
        columns: events.columns.into_iter().map(filter).collect(),
        weights: events.weights.map(filter),
    }
}

/// The events of a `nextstat:parquet` data entry.
pub fn read_entry(
    entry: &Value,
    name: &str,
    files: FileAccess,
) -> Result<(Vec<Axis>, ChannelEvents)> {
    let axes = read_axes(entry, name)?;
    let path = entry
        .get("path")
        .and_then(Value::as_str)
        .ok_or_else(|| Error::InvalidModel(format!("data '{name}' ({TYPE}) has no \"path\"")))?;
    let path = files.resolve(path)?;
    let list = entry
        .get("axes")
        .and_then(Value::as_array)
        .expect("read_axes checked them");
    let columns = axes
        .iter()
        .zip(list)
        .map(|(a, v)| {
            let column = v
                .get("column")
                .and_then(Value::as_str)
                .unwrap_or(&a.name)
                .to_string();
            (column, a.lo, a.hi)
        })
        .collect();
    let weights = match entry.get("weights") {
        None | Some(Value::Null) => None,
        Some(Value::String(w)) => Some(w.clone()),
        Some(other) => {
            return Err(Error::InvalidModel(format!(
                "data '{name}' ({TYPE}): \"weights\" names a column, not {other}"
            )));
        }
    };
    let read = ParquetRead {
        path,
        columns,
        weights,
        pushdown: true,
        parallel: true,
    };
    let events = read.read()?;
    crate::events::check_events(&events, &axes, &format!("data '{name}'"))?;
    Ok((axes, events))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use parquet::basic::Type as PhysicalType;
    use parquet::schema::types::{ColumnPath, Type};

    use super::*;

    fn column(physical: PhysicalType, converted: ConvertedType) -> ColumnDescriptor {
        let t = Type::primitive_type_builder("x", physical)
            .with_converted_type(converted)
            .build()
            .unwrap();
        ColumnDescriptor::new(Arc::new(t), 0, 0, ColumnPath::from("x"))
    }

    #[test]
    fn only_statistics_that_are_known_rule_a_row_group_out() {
        let double = column(PhysicalType::DOUBLE, ConvertedType::NONE);
        let stats =
            |min: f64, max: f64| Statistics::double(Some(min), Some(max), None, Some(0), false);
        // Known and outside [0, 10]: skipped; known and overlapping: read.
        assert!(!may_hold(&double, Some(&stats(11.0, 20.0)), 0.0, 10.0));
        assert!(may_hold(&double, Some(&stats(5.0, 20.0)), 0.0, 10.0));
        // NaN bounds and absent statistics say nothing: read.
        for s in [
            stats(f64::NAN, 5.0),
            stats(1.0, f64::NAN),
            stats(f64::NAN, f64::NAN),
        ] {
            assert!(may_hold(&double, Some(&s), 0.0, 10.0), "{s:?}");
        }
        assert!(may_hold(&double, None, 0.0, 10.0));
        // An unsigned column's statistics are its storage's (u32 4e9 stored as a negative i32):
        // not trusted.
        let unsigned = column(PhysicalType::INT32, ConvertedType::UINT_32);
        let raw = Statistics::int32(Some(-100), Some(-5), None, Some(0), false);
        assert!(may_hold(&unsigned, Some(&raw), 0.0, 10.0));
        let signed = column(PhysicalType::INT32, ConvertedType::NONE);
        assert!(!may_hold(&signed, Some(&raw), 0.0, 10.0));
    }
}
