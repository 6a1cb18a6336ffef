//! Patchset grids: the upper limit (or asymptotic CLs) of every signal point of a HEPData
//! patchset, the points in parallel, as one table — patch name, its metadata values (masses),
//! observed and expected limits or CLs — what a contour or Brazil-band plot reads. The points are
//! the units of a sharded grid (`shard.rs`): a part computes its share of the patches.

use std::ops::Range;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use ns_compute::Device;
use ns_core::{Error, Result};
use ns_translate::patch::PatchSet;
use rayon::prelude::*;
use serde_json::{Value, json};

use crate::call::Call;
use crate::request::{Outcome, Request};
use crate::shard::{Job, Part};

/// A patchset grid: the background-only workspace, the patchset (validated), and the call every
/// point runs (its model names the background and the `-p` patches; each point's patch is applied
/// first, as a patchset patch is).
pub struct Grid<'a> {
    pub background: &'a Value,
    pub patchset: &'a PatchSet,
    pub template: &'a Call,
}

impl Grid<'_> {
    /// Refuse requests a grid does not run and empty patchsets.
    pub fn check(&self) -> Result<()> {
        if !matches!(
            self.template.request,
            Request::UpperLimit { .. } | Request::Hypotest { .. }
        ) {
            return Err(Error::InvalidInput(
                "a patchset grid computes upper limits or asymptotic hypotests".into(),
            ));
        }
        if let Request::UpperLimit {
            n_toys: Some(_), ..
        } = self.template.request
        {
            return Err(Error::InvalidInput(
                "a patchset grid computes asymptotic limits; a toy-based limit runs one signal \
                 point at a time (--patch-name)"
                    .into(),
            ));
        }
        if self.patchset.patches.is_empty() {
            return Err(Error::InvalidInput("the patchset has no patches".into()));
        }
        self.template.validate()?;
        Ok(())
    }

    /// The job of this grid split into `shards` (the background by `model_digest`, the model's
    /// `-p` patches, measurement and codes included).
    pub fn job(&self, model_digest: String, patchset: &Value, shards: usize) -> Result<Job> {
        let device = match Device::from_name(&self.template.device)? {
            // Each point is one sequence of fits: `auto` runs them on the CPU.
            Device::Auto => Device::Cpu,
            other => other,
        };
        let mut job = Job::of_call(
            self.template,
            model_digest,
            device,
            shards,
            self.patchset.patches.len(),
        )?;
        job.patchset = Some(ns_translate::pyjson::digest(patchset));
        Ok(job)
    }

    /// The points of `share` of the patches (in parallel), stopping once `stop` is set. A point
    /// whose patch or computation fails is listed under `errors`; the others stand. `read` reads
    /// the template's `-p` patch files.
    pub fn run_part(
        &self,
        share: Range<usize>,
        read: &(dyn ns_source::Reader + Sync),
        stop: &Arc<AtomicBool>,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Part> {
        self.check()?;
        if share.start > share.end || share.end > self.patchset.patches.len() {
            return Err(Error::InvalidInput(format!(
                "signal points {}..{} of a patchset of {}",
                share.start,
                share.end,
                self.patchset.patches.len()
            )));
        }
        let model = self
            .template
            .model
            .clone()
            .ok_or_else(|| Error::InvalidInput("the grid's call names no model".into()))?;
        let done = AtomicUsize::new(0);
        // Per point: its row, or its error's entry; an interrupt stops the whole part.
        let rows: Vec<std::result::Result<Value, Value>> = self.patchset.patches[share]
            .par_iter()
            .map(|patch| -> Result<std::result::Result<Value, Value>> {
                let name = &patch.metadata.name;
                let outcome = self
                    .patchset
                    .apply_unverified(self.background, name)
                    .and_then(|doc| model.with_workspace(doc)?.load_model(read))
                    .and_then(|loaded| {
                        self.template
                            .run(loaded.likelihood(), stop.clone(), &|_| {})
                    });
                progress(done.fetch_add(1, Ordering::Relaxed) + 1);
                let mut row = match outcome {
                    Ok(Outcome::UpperLimit { result, level }) => {
                        let mut row = crate::report::upper_limit(&result, level);
                        // The per-μ CLs values stay out of the table.
                        row.as_object_mut().map(|o| o.remove("points"));
                        row
                    }
                    Ok(Outcome::Hypotest { test_stat, result }) => {
                        let mut row = crate::report::hypotest(test_stat.name(), &result);
                        row.as_object_mut().map(|o| o.remove("fitted_pars"));
                        row
                    }
                    Ok(_) => unreachable!("a grid runs limits and hypotests"),
                    Err(Error::Interrupted) => return Err(Error::Interrupted),
                    Err(e) => return Ok(Err(json!({"patch": name, "error": e.to_string()}))),
                };
                row["patch"] = json!(name);
                row["values"] = json!(patch.metadata.values);
                Ok(Ok(row))
            })
            .collect::<Result<_>>()?;
        let (mut points, mut errors) = (Vec::new(), Vec::new());
        for row in rows {
            match row {
                Ok(r) => points.push(r),
                Err(e) => errors.push(e),
            }
        }
        let mut shared = json!({"labels": self.patchset.metadata.labels});
        match &self.template.request {
            Request::UpperLimit { level, .. } => shared["level"] = json!(level),
            Request::Hypotest { mu, test_stat } => {
                shared["mu"] = json!(mu);
                shared["test_stat"] = json!(test_stat.name());
            }
            _ => {}
        }
        Ok(Part {
            shared,
            result: json!({"points": points, "errors": errors}),
        })
    }

    /// The whole grid in this process: the table a merge of its shards gives.
    pub fn run(
        &self,
        read: &(dyn ns_source::Reader + Sync),
        stop: &Arc<AtomicBool>,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Value> {
        let part = self.run_part(0..self.patchset.patches.len(), read, stop, progress)?;
        merge_grid(&part.shared, &[part.result])
    }
}

/// The table of a grid from its parts' results (in shard order): every point and every error.
pub(crate) fn merge_grid(shared: &Value, results: &[Value]) -> Result<Value> {
    let (mut points, mut errors) = (Vec::new(), Vec::new());
    for (i, r) in results.iter().enumerate() {
        let (Some(p), Some(e)) = (r["points"].as_array(), r["errors"].as_array()) else {
            return Err(Error::InvalidInput(format!(
                "shard {i}: its result has no \"points\" and \"errors\" lists"
            )));
        };
        points.extend(p.iter().cloned());
        errors.extend(e.iter().cloned());
    }
    if points.is_empty() {
        return Err(Error::Computation(format!(
            "no patch gave a result ({} errors; the first: {})",
            errors.len(),
            errors.first().map_or(Value::Null, |e| e["error"].clone())
        )));
    }
    let mut table = shared.clone();
    table["points"] = Value::Array(points);
    table["errors"] = Value::Array(errors);
    Ok(table)
}
