//! `upper-limit BKG.json --patchset PS.json --all`: the limit of every signal point of a HEPData
//! patchset, the points in parallel, as one table (patch name, its metadata values, observed and
//! expected limits) — what `nextstat plot limit` draws as a Brazil band.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use ns_core::{Error, Result};
use ns_inference::request::{Outcome, Request};
use ns_translate::{ModelRef, Source};
use rayon::prelude::*;
use serde_json::{Value, json};

use crate::infer_cmds::{InferArgs, progress};
use crate::input::read_json;
use crate::{emit, to_json};

/// Every patch's limit; a patch whose limit fails is listed under "errors" (and said on stderr),
/// the others stand.
pub fn upper_limits(args: &InferArgs, request: Request) -> Result<()> {
    let path = args
        .model
        .patchset
        .as_ref()
        .ok_or_else(|| Error::InvalidInput("--all needs --patchset PS.json".into()))?;
    // The patchset read and validated once (pyhf's checks); every point applies its patch to the
    // background from it.
    let patchset = ns_translate::patch::PatchSet::from_value(read_json(path)?)
        .map_err(|e| Error::InvalidInput(format!("{}: {e}", path.display())))?;
    let background = read_json(&args.model.ws.path()?)?;
    if patchset.patches.is_empty() {
        return Err(Error::InvalidInput(format!(
            "{}: the patchset has no patches",
            path.display()
        )));
    }
    // The digest is checked once for the whole grid.
    if args.model.skip_verify {
        args.model.warn_unverified();
    } else {
        patchset.verify(&background).map_err(|e| {
            Error::InvalidInput(format!(
                "{}: {e}; --skip-verify applies its patches anyway",
                path.display()
            ))
        })?;
    }
    // The call of every point: the options given, with the patched background inline.
    let mut template_args = args.clone();
    template_args.model.patchset = None;
    let template = template_args.call(request, &[])?;
    let model = template
        .model
        .clone()
        .ok_or_else(|| Error::InvalidInput("no model".into()))?;
    let level = match template.request {
        Request::UpperLimit { level, .. } => level,
        _ => unreachable!("the grid runs upper limits"),
    };
    let bar = progress(patchset.patches.len() as u64, "signal points");
    let done = AtomicUsize::new(0);
    let rows: Vec<std::result::Result<Value, (String, String)>> = patchset
        .patches
        .par_iter()
        .map(|patch| {
            let name = &patch.metadata.name;
            let mut call = template.clone();
            let outcome = patchset
                .apply_unverified(&background, name)
                .and_then(|doc| {
                    let point = ModelRef {
                        workspace: Source::Inline(doc),
                        ..model.clone()
                    };
                    call.model = Some(point.clone());
                    point.load_model(&read_json)
                })
                .and_then(|loaded| {
                    call.run(
                        loaded.likelihood(),
                        Arc::new(AtomicBool::new(false)),
                        &|_| {},
                    )
                });
            bar.set_position(done.fetch_add(1, Ordering::Relaxed) as u64 + 1);
            match outcome {
                Ok(Outcome::UpperLimit { result, level }) => {
                    let mut row = ns_inference::report::upper_limit(&result, level);
                    // The per-μ points of a scan are left out of the table.
                    if let Some(o) = row.as_object_mut() {
                        o.remove("points");
                    }
                    row["patch"] = json!(name);
                    row["values"] = json!(patch.metadata.values);
                    Ok(row)
                }
                Ok(_) => unreachable!("an upper-limit call gives an upper limit"),
                Err(e) => Err((name.clone(), e.to_string())),
            }
        })
        .collect();
    bar.finish_and_clear();
    let mut points = Vec::new();
    let mut errors = Vec::new();
    for row in rows {
        match row {
            Ok(r) => points.push(r),
            Err((patch, message)) => {
                eprintln!("warning: patch '{patch}': {message}");
                errors.push(json!({"patch": patch, "error": message}));
            }
        }
    }
    if points.is_empty() {
        return Err(Error::Computation(format!(
            "no patch of {} gave a limit ({} errors; the first: {})",
            path.display(),
            errors.len(),
            errors[0]["error"]
        )));
    }
    let table = json!({
        "labels": patchset.metadata.labels, "level": level, "points": points, "errors": errors,
    });
    emit(&to_json(&table), args.out.output.as_ref())
}
