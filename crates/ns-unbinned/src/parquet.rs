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
use arrow_array::types::{Float32Type, Float64Type, Int32Type, Int64Type};
use arrow_array::{Array, RecordBatch};
use arrow_schema::DataType;
use ns_core::{Error, Result};
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder,
};
use parquet::file::statistics::Statistics;
use rayon::prelude::*;
use serde_json::Value;

use crate::events::ChannelEvents;
use crate::hs3::read_axes;
use crate::model::Axis;

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

fn stat_range(stats: Option<&Statistics>) -> Option<(f64, f64)> {
    match stats? {
        Statistics::Double(s) => Some((*s.min_opt()?, *s.max_opt()?)),
        Statistics::Float(s) => Some((*s.min_opt()? as f64, *s.max_opt()? as f64)),
        Statistics::Int32(s) => Some((*s.min_opt()? as f64, *s.max_opt()? as f64)),
        Statistics::Int64(s) => Some((*s.min_opt()? as f64, *s.max_opt()? as f64)),
        _ => None,
    }
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
    match col.data_type() {
        DataType::Float64 => out.extend(col.as_primitive::<Float64Type>().values().iter().copied()),
        DataType::Float32 => out.extend(
            col.as_primitive::<Float32Type>()
                .values()
                .iter()
                .map(|&v| v as f64),
        ),
        DataType::Int32 => out.extend(
            col.as_primitive::<Int32Type>()
                .values()
                .iter()
                .map(|&v| v as f64),
        ),
        DataType::Int64 => out.extend(
            col.as_primitive::<Int64Type>()
                .values()
                .iter()
                .map(|&v| v as f64),
        ),
        other => {
            return Err(perr(
                path,
                format!("column '{name}' holds {other}, not numbers"),
            ));
        }
    }
    Ok(())
}

impl ParquetRead {
    pub fn read(&self) -> Result<ChannelEvents> {
        let file = std::fs::File::open(&self.path).map_err(|e| perr(&self.path, e))?;
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
                .ok_or_else(|| perr(&self.path, format!("no column '{name}'")))?;
            leaves.push(i);
        }
        let metadata = meta.metadata().clone();
        let groups: Vec<usize> = (0..metadata.num_row_groups())
            .filter(|&g| {
                !self.pushdown
                    || self.columns.iter().zip(&leaves).all(
                        |((_, lo, hi), &leaf)| match stat_range(
                            metadata.row_group(g).column(leaf).statistics(),
                        ) {
                            Some((min, max)) => max >= *lo && min <= *hi,
                            None => true,
                        },
                    )
            })
            .collect();
        let decode = |g: usize| -> Result<ChannelEvents> {
            let reader =
                ParquetRecordBatchReaderBuilder::new_with_metadata(bytes.clone(), meta.clone())
                    .with_projection(ProjectionMask::leaves(schema, leaves.iter().copied()))
                    .with_row_groups(vec![g])
                    .with_batch_size(65_536)
                    .build()
                    .map_err(|e| perr(&self.path, e))?;
            let mut columns = vec![Vec::new(); self.columns.len()];
            let mut weights = self.weights.as_ref().map(|_| Vec::new());
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
        let parts: Vec<ChannelEvents> = if self.parallel {
            groups
                .par_iter()
                .map(|&g| decode(g))
                .collect::<Result<_>>()?
        } else {
            groups.iter().map(|&g| decode(g)).collect::<Result<_>>()?
        };
        let mut events = ChannelEvents {
            columns: vec![Vec::new(); self.columns.len()],
            weights: self.weights.as_ref().map(|_| Vec::new()),
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
    base: Option<&Path>,
) -> Result<(Vec<Axis>, ChannelEvents)> {
    let axes = read_axes(entry, name)?;
    let path = entry
        .get("path")
        .and_then(Value::as_str)
        .ok_or_else(|| Error::InvalidModel(format!("data '{name}' ({TYPE}) has no \"path\"")))?;
    let path = match base {
        Some(b) if Path::new(path).is_relative() => b.join(path),
        _ => PathBuf::from(path),
    };
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
    crate::hs3::check_events(&events, &axes, &format!("data '{name}'"))?;
    Ok((axes, events))
}
