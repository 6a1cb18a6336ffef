//! Unbinned data entries: events inline or from a Parquet file, checked against their axes.

use ns_core::{FileAccess, Result};
use serde_json::Value;

use crate::events::{ChannelEvents, check_events};
use crate::model::Axis;
use ns_hs3::{invalid, number, read_axes};

/// The events of an unbinned data entry, checked against its axes.
pub(super) fn read_events(
    entry: &Value,
    name: &str,
    files: FileAccess,
) -> Result<(Vec<Axis>, ChannelEvents)> {
    let kind = entry.get("type").and_then(Value::as_str).unwrap_or("");
    match kind {
        "unbinned" => {}
        crate::parquet::TYPE => return crate::parquet::read_entry(entry, name, files),
        "binned" => {
            return Err(invalid(format!(
                "data '{name}' is binned, and the distribution it meets is not: binned data \
                 meet a histfactory_dist (an unbinned distribution takes 'unbinned' or '{}' data)",
                crate::parquet::TYPE
            )));
        }
        other => {
            return Err(invalid(format!(
                "data '{name}' has type '{other}'; nextstat reads 'unbinned' and '{}'",
                crate::parquet::TYPE
            )));
        }
    }
    let axes = read_axes(entry, name)?;
    let rows = entry
        .get("entries")
        .and_then(Value::as_array)
        .ok_or_else(|| invalid(format!("data '{name}' has no list 'entries'")))?;
    let mut columns = vec![Vec::with_capacity(rows.len()); axes.len()];
    for (i, row) in rows.iter().enumerate() {
        let row = row
            .as_array()
            .filter(|r| r.len() == axes.len())
            .ok_or_else(|| {
                invalid(format!(
                    "data '{name}' entry {i} must be a list of {} numbers (one per axis)",
                    axes.len()
                ))
            })?;
        for (d, v) in row.iter().enumerate() {
            columns[d].push(v.as_f64().ok_or_else(|| {
                invalid(format!("data '{name}' entry {i} holds {v}, not a number"))
            })?);
        }
    }
    let weights = match entry.get("weights") {
        None | Some(Value::Null) => None,
        Some(w) => Some(
            w.as_array()
                .ok_or_else(|| invalid(format!("data '{name}' weights must be a list")))?
                .iter()
                .map(|x| number(x, &format!("data '{name}' weight")))
                .collect::<Result<Vec<_>>>()?,
        ),
    };
    let events = ChannelEvents { columns, weights };
    check_events(&events, &axes, &format!("data '{name}'"))?;
    Ok((axes, events))
}
