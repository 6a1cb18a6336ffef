//! Sharded work: a batch-shaped request split into N parts that run anywhere — an HTCondor or
//! Slurm array job, Dask workers — and merge into the result one process gives, bit for bit.
//!
//! A sharded request's work is a list of independent units: the toys of a toy hypotest, the
//! values of a profile scan, the ranked parameters of a ranking, the μ values of a CLs-scan
//! limit, the signal points of a patchset grid (`grid.rs`). Shard I of N takes the units
//! `[I·U/N, (I+1)·U/N)`. Each unit's fits depend on its own job only — toy i of a seed is the same
//! dataset anywhere, and on the CPU and CUDA a fit's result does not depend on the batch it runs
//! in — so the units' results are the same in any shard. The values every shard recomputes (the
//! baseline fits' statistic, the best fit) are recorded and must agree when the parts merge.
//!
//! A part is a JSON document: `{"format": "nextstat-partial/2", "version", "job", "shard",
//! "units", "shared", "result", "digest"}`; `digest` is the SHA-256 of the rest, so a part edited
//! after it was written is refused by name. [`merge`] checks that the parts are of one job, are
//! unedited and cover it exactly once, that every value they carry is one the computation can
//! give (finite, test statistics ≥ 0, toy counts that add up), and builds the result from the
//! units' results with the same code that builds it in one process.

use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use ns_compute::{Device, Likelihood, Workload};
use ns_core::{Error, Result};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::call::{Call, DataChoice, FitOptions};
use crate::request::{Request, contour_levels, parameter_indices};
use ns_inference::AutoChoice;
use ns_inference::fit::FitResult;
use ns_inference::fit::Fitter;
use ns_inference::grid_scan::grid_points;
use ns_inference::hypotest::TestStatistic;
use ns_inference::limits::{ClsPoint, UpperLimit, check_scan, cls_scan_points};
use ns_inference::params::{number_json, number_of};
use ns_inference::posterior::{ChainReport, Posterior, PosteriorChains, posterior_chains};
use ns_inference::ranking::{impact_key, impact_order, ranked, ranking_share};
use ns_inference::scan::{profile_points, profile_scan};
use ns_inference::toy_limit::{ToyLimitSpec, ToyUpperLimit, at_mu};
use ns_inference::toys::{ToyEnsemble, ToyEnsembles, ToyHypotest, ToyTest, toy_ensembles_batch};

/// The `format` of a part document.
pub const PARTIAL_FORMAT: &str = "nextstat-partial/2";

/// Most shards of one job.
pub const MAX_SHARDS: usize = 1_000_000;

/// Shard `index` of `count` (0-based: `--shard 0/4` … `--shard 3/4`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    pub index: usize,
    pub count: usize,
}

impl Shard {
    /// The whole job as one shard.
    pub const WHOLE: Shard = Shard { index: 0, count: 1 };

    pub fn new(index: usize, count: usize) -> Result<Shard> {
        if count == 0 || count > MAX_SHARDS || index >= count {
            return Err(Error::InvalidInput(format!(
                "shard {index}/{count}: give I/N with N from 1 to {MAX_SHARDS} and I from 0 to \
                 N − 1 (shards count from 0, as Slurm's and HTCondor's array indices)"
            )));
        }
        Ok(Shard { index, count })
    }

    /// `I/N`, as `--shard` takes it.
    pub fn parse(text: &str) -> Result<Shard> {
        let bad = || {
            Error::InvalidInput(format!(
                "shard '{text}' must look like I/N (shard I of N, I from 0 to N − 1), e.g. 0/4"
            ))
        };
        let (i, n) = text.split_once('/').ok_or_else(bad)?;
        let index = i.trim().parse().map_err(|_| bad())?;
        let count = n.trim().parse().map_err(|_| bad())?;
        Shard::new(index, count)
    }

    /// This shard's units of a job of `units`: contiguous, the shards' shares in order.
    pub fn share(&self, units: usize) -> Range<usize> {
        let at = |i: usize| (units as u128 * i as u128 / self.count as u128) as usize;
        at(self.index)..at(self.index + 1)
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// What every part of a job shares and [`merge`] compares: the model (by digest), the patchset
/// of a grid (by digest), the request, the fit options, the data, the kind of device and the
/// split.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Job {
    /// SHA-256 of the model: the workspace after its patches, the measurement and the
    /// interpolation codes (`ModelRef::digest`); of the background-only workspace for a grid.
    pub model: String,
    /// SHA-256 of the patchset of a grid (pyhf's digest of its JSON).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patchset: Option<String>,
    pub request: Request,
    pub fit: FitOptions,
    pub data: DataChoice,
    /// `cpu` or `cuda`: fits agree bit for bit on one kind of device, not across kinds.
    pub device: String,
    pub shards: usize,
    pub units: usize,
}

impl Job {
    /// The job of `call` on the model of digest `model`, run on `device`, split into `shards`
    /// parts of a job of `units`. Refused on the f32 devices, where a fit's result depends on
    /// the batch it runs in.
    pub fn of_call(
        call: &Call,
        model: String,
        device: Device,
        shards: usize,
        units: usize,
    ) -> Result<Job> {
        let device = match device {
            Device::Cpu => "cpu",
            Device::Cuda(_) => "cuda",
            other => {
                return Err(Error::InvalidInput(format!(
                    "sharded work runs on the CPU or CUDA (f64), not {}: on the f32 backends a \
                     fit's result depends on the batch it runs in, so shards would not merge \
                     into one process's result",
                    other.name()
                )));
            }
        };
        Ok(Job {
            model,
            patchset: None,
            request: call.request.clone(),
            fit: call.fit.clone(),
            data: call.data.clone(),
            device: device.into(),
            shards,
            units,
        })
    }

    /// The part document of `shard` of this job, sealed.
    pub fn partial(&self, shard: Shard, part: Part) -> Value {
        let mut doc = self.unsealed(shard, part);
        seal(&mut doc);
        doc
    }

    /// The part document before its seal (a front end's notes still to be added).
    fn unsealed(&self, shard: Shard, part: Part) -> Value {
        let share = shard.share(self.units);
        json!({
            "format": PARTIAL_FORMAT,
            "version": env!("CARGO_PKG_VERSION"),
            "job": self,
            "shard": shard.index,
            "units": [share.start, share.end],
            "shared": part.shared,
            "result": part.result,
        })
    }
}

/// A shard's results: `shared` — values every shard computes and must agree on — and `result`,
/// the results of its units.
#[derive(Clone, Debug, PartialEq)]
pub struct Part {
    pub shared: Value,
    pub result: Value,
}

/// The number of units the work of `request` splits into on `model` under the fit options of
/// `call`; an error for requests that are one computation.
pub fn units(call: &Call, model: &dyn Likelihood) -> Result<usize> {
    if let Request::ProfileScan { refine, .. } = &call.request
        && *refine > 0
    {
        return Err(Error::InvalidInput(
            "a grid refined near its contours does not split into shards: each round's points \
             depend on the last round's results (shard the grid without --refine)"
                .into(),
        ));
    }
    Ok(match &call.request {
        Request::HypotestToys { n_toys, .. } => *n_toys,
        Request::ProfileScan { values, grid, .. } => {
            if call.request.is_grid_scan()? {
                grid.iter().map(Vec::len).product()
            } else {
                values.len()
            }
        }
        Request::UpperLimit {
            scan: Some(grid),
            n_toys,
            ..
        } => grid.len().saturating_mul(n_toys.unwrap_or(1)),
        Request::Ranking => ranked(model, &call.fit_config(model)?)?,
        Request::Posterior { chains, .. } => *chains,
        other => {
            return Err(Error::InvalidInput(format!(
                "'{}' is one computation and does not split into shards; toy hypotests, profile scans, \
                 rankings, upper limits over a scan, posteriors and patchset grids do",
                other.verb().name
            )));
        }
    })
}

/// Refuse a shard without units: its part would say nothing, and a split with empty parts is
/// almost always a mistake in the array job.
pub fn check_share(shard: Shard, units: usize, what: &str) -> Result<Range<usize>> {
    let share = shard.share(units);
    // A job without units (a ranking of a model without nuisance parameters) is one empty shard.
    if share.is_empty() && !(units == 0 && shard.count == 1) {
        return Err(Error::InvalidInput(format!(
            "shard {shard}: {units} {what} split into {} shards leave this one empty; use at \
             most {units} shards",
            shard.count
        )));
    }
    Ok(share)
}

/// Shard `shard` of `call` on `model`, as every front end writes it: the part document — the job
/// (the model named by `model_digest`, the device the fits ran on), this share's results, what
/// `auto` chose and why, and what `annotate` adds (the model's own notes) — sealed.
/// `progress` receives the share's total steps and the steps done; `stop` interrupts the fits.
pub fn shard_part(
    call: &Call,
    model: &dyn Likelihood,
    model_digest: String,
    shard: Shard,
    stop: Option<Arc<AtomicBool>>,
    progress: &(dyn Fn(u64, usize) + Sync),
    annotate: &dyn Fn(&mut Value),
) -> Result<Value> {
    let workload = call.request.workload(model);
    let asked = call.validate()?;
    // `auto` for a job of several shards by size alone: every shard must choose alike to merge
    // (a timed choice could differ between shards near its break-even). A whole job in one
    // shard is weighed as one process weighs it.
    let by_size = (asked == Device::Auto && shard.count > 1).then(|| {
        let device = model.resolve(asked, workload);
        let size = match (workload, model.worth_a_gpu(workload), device) {
            (Workload::Sequential, ..) => "one fit at a time is fastest on the CPU".to_string(),
            (Workload::Batch { fits }, false, _) => {
                format!("{fits} fits of this model are too few for a GPU to repay opening it")
            }
            (Workload::Batch { fits }, true, Device::Cpu) => {
                format!("{fits} fits of this model are enough for a GPU, but none is usable here")
            }
            (Workload::Batch { fits }, true, _) => {
                format!("{fits} fits of this model are enough for a GPU")
            }
        };
        AutoChoice {
            device,
            reason: format!(
                "a job in {} shards chooses by the batch's size alone, so that its shards agree: \
                 {size}",
                shard.count
            ),
        }
    });
    let device = by_size.as_ref().map_or(asked, |choice| choice.device);
    let units = units(call, model)?;
    let mut fitter = Fitter::on_device(model, device, workload)?;
    if let Some(stop) = stop {
        fitter = fitter.with_interrupt(stop);
    }
    let job = Job::of_call(call, model_digest, fitter.device(), shard.count, units)?;
    let total = progress_steps(&call.request, shard.share(units).len());
    let part = run_part(call, &fitter, shard, &|done| progress(total, done))?;
    let mut doc = job.unsealed(shard, part);
    crate::report::add_auto(&mut doc, by_size.as_ref().or(fitter.auto_choice()));
    annotate(&mut doc);
    seal(&mut doc);
    Ok(doc)
}

/// Run `shard`'s share of `call` with `fitter` (of the call's model, on its device). `progress`
/// receives the steps done, of [`progress_steps`] of the share.
pub fn run_part(
    call: &Call,
    fitter: &Fitter,
    shard: Shard,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<Part> {
    call.validate()?;
    let model = fitter.model();
    let units = units(call, model)?;
    let share = check_share(shard, units, unit_name(&call.request))?;
    let prepared = call.prepare_on(fitter)?;
    let (data, config) = (&prepared.data, &prepared.config);
    let mut part = match &call.request {
        Request::HypotestToys {
            mu,
            test_stat,
            n_toys,
            seed,
            ..
        } => {
            let test = ToyTest {
                mu: *mu,
                data,
                config,
                stat: *test_stat,
                n_toys: *n_toys,
                seed: *seed,
                toys: share,
            };
            let ensembles = toy_ensembles_batch(fitter, &[test], progress)?
                .pop()
                .expect("one test")?;
            Part {
                shared: json!({"teststat_obs": number_json(ensembles.observed)}),
                result: json!({
                    "signal_plus_background": ensemble_json(&ensembles.signal),
                    "background_only": ensemble_json(&ensembles.background),
                }),
            }
        }
        Request::ProfileScan {
            parameters, grid, ..
        } if call.request.is_grid_scan()? => {
            let indices = parameter_indices(model, parameters)?;
            // Every value is checked, so that each shard refuses a grid the whole would refuse,
            // and in the order one process checks them.
            ns_inference::scan::check_scanned(fitter, config, &indices)?;
            for (&index, axis) in indices.iter().zip(grid) {
                for &v in axis {
                    ns_inference::checks::value_in_bounds(
                        fitter,
                        config,
                        index,
                        v,
                        "the scan value",
                    )?;
                }
            }
            let points = grid_points(grid);
            let (fits, free_fit) =
                profile_points(fitter, &indices, &points[share], data, config, progress)?;
            let numbers = |f: &dyn Fn(&FitResult) -> f64| {
                fits.iter().map(|r| number_json(f(r))).collect::<Vec<_>>()
            };
            Part {
                shared: json!({"bestfit_twice_nll": number_json(free_fit.twice_nll)}),
                result: json!({
                    "twice_nll": numbers(&|r| r.twice_nll),
                    "delta_twice_nll": numbers(&|r| r.twice_nll - free_fit.twice_nll),
                    "converged": fits.iter().map(|r| r.converged).collect::<Vec<_>>(),
                }),
            }
        }
        Request::ProfileScan {
            parameter, values, ..
        } => {
            let index = match parameter {
                Some(name) => model.parameter_index(name).map_err(Error::InvalidInput)?,
                None => config.poi(model)?,
            };
            // Every value is checked, so that each shard refuses a scan the whole would refuse.
            for &v in values {
                ns_inference::checks::value_in_bounds(fitter, config, index, v, "the scan value")?;
            }
            let scan = profile_scan(fitter, index, &values[share], data, config, progress)?;
            split(
                crate::report::scan(&scan),
                &["parameter", "bestfit_twice_nll"],
            )
        }
        Request::UpperLimit {
            level,
            scan: Some(grid),
            n_toys: Some(n_toys),
            seed,
        } => {
            check_scan(fitter, config, *level, grid)?;
            let spec = ToyLimitSpec {
                level: *level,
                n_toys: *n_toys,
                seed: *seed,
            };
            spec.check_points(grid.len())?;
            let pieces = toy_limit_pieces(share, *n_toys);
            let tests: Vec<ToyTest> = pieces
                .iter()
                .map(|(k, toys)| spec.test(grid[*k], toys.clone(), data, config))
                .collect();
            let ensembles = toy_ensembles_batch(fitter, &tests, progress)?;
            let mut results = Vec::with_capacity(pieces.len());
            for ((k, toys), e) in pieces.into_iter().zip(ensembles) {
                let e = e?;
                results.push(json!({
                    "mu_index": k,
                    "toys": [toys.start, toys.end],
                    "teststat_obs": number_json(e.observed),
                    "signal_plus_background": ensemble_json(&e.signal),
                    "background_only": ensemble_json(&e.background),
                }));
            }
            Part {
                shared: json!({}),
                result: json!({ "pieces": results }),
            }
        }
        Request::UpperLimit {
            level,
            scan: Some(grid),
            n_toys: None,
            ..
        } => {
            check_scan(fitter, config, *level, grid)?;
            let mut step = |k: usize| progress(k);
            let points = cls_scan_points(fitter, data, config, &grid[share], &mut step)?;
            Part {
                shared: json!({}),
                result: json!({"points": points.iter().map(point_json).collect::<Vec<_>>()}),
            }
        }
        Request::Ranking => {
            let ranking = ranking_share(fitter, data, config, share, progress)?;
            let mut part = split(
                crate::report::ranking(&ranking),
                &["poi", "poi_bestfit", "poi_uncertainty"],
            );
            // The sort key of each entry, exactly (the report writes non-finite impacts as null).
            part.result["order"] = ranking
                .entries
                .iter()
                .map(|e| {
                    let key = impact_key(e.impact_postfit_up, e.impact_postfit_down);
                    json!([number_json(key), e.index])
                })
                .collect();
            part
        }
        Request::Posterior { .. } => {
            let spec = call.request.posterior_spec().expect("a posterior request");
            let part = posterior_chains(fitter, data, config, &spec, share, progress)?;
            let bounds: Vec<Value> = part
                .bounds
                .iter()
                .map(|&(lo, hi)| json!([number_json(lo), number_json(hi)]))
                .collect();
            Part {
                shared: json!({"names": part.names, "bounds": bounds, "sampled_poi": part.poi}),
                result: json!({
                    "draws": part.draws,
                    "sampler": part.chains.iter().map(|c| json!({
                        "divergences": c.divergences, "max_depth_hits": c.max_depth_hits,
                        "step_size": number_json(c.step_size),
                        "mean_tree_depth": number_json(c.mean_tree_depth),
                        "mean_accept": number_json(c.mean_accept),
                    })).collect::<Vec<_>>(),
                }),
            }
        }
        _ => unreachable!("units() admits the sharded requests only"),
    };
    // The POI a test tests, named in the merged result as in one process's.
    if let (true, Some(shared)) = (call.request.tests_poi(), part.shared.as_object_mut()) {
        let name = &model.parameter_names()[config.poi(model)?];
        shared.insert("poi".into(), Value::from(name.as_str()));
    }
    Ok(part)
}

/// Steps the progress callback of [`run_part`] counts up to for a share of `share` units.
pub fn progress_steps(request: &Request, share: usize) -> u64 {
    request.shard_unit().1 * share as u64
}

/// What a request's units are, in words.
fn unit_name(request: &Request) -> &'static str {
    request.shard_unit().0
}

/// A toy-based limit's units are its toys, μ after μ (unit `u` is toy `u mod n_toys` of the
/// `u div n_toys`-th μ): a share's pieces, as (μ index, its toys in the share).
fn toy_limit_pieces(share: Range<usize>, n_toys: usize) -> Vec<(usize, Range<usize>)> {
    if share.is_empty() {
        return Vec::new();
    }
    (share.start / n_toys..=(share.end - 1) / n_toys)
        .map(|k| {
            let first = k * n_toys;
            (
                k,
                share.start.max(first) - first..share.end.min(first + n_toys) - first,
            )
        })
        .collect()
}

/// A report split into the values every shard shares (`shared_keys`) and its per-unit lists.
fn split(report: Value, shared_keys: &[&str]) -> Part {
    let mut result = match report {
        Value::Object(map) => map,
        other => {
            return Part {
                shared: json!({}),
                result: other,
            };
        }
    };
    let mut shared = Map::new();
    for key in shared_keys {
        if let Some(v) = result.remove(*key) {
            shared.insert(key.to_string(), v);
        }
    }
    Part {
        shared: Value::Object(shared),
        result: Value::Object(result),
    }
}

/// The number [`number_json`] wrote (finite ones as numbers, NaN and ±∞ as strings).
fn float_of(value: &Value, place: &str) -> Result<f64> {
    number_of(value, None)
        .ok_or_else(|| Error::InvalidInput(format!("{place}: {value} is not a number")))
}

fn ensemble_json(e: &ToyEnsemble) -> Value {
    json!({
        "teststats": e.teststats.iter().map(|&t| number_json(t)).collect::<Vec<_>>(),
        "n_failed": e.n_failed,
        "failures": e.failures,
    })
}

fn point_json(p: &ClsPoint) -> Value {
    json!([number_json(p.0), number_json(p.1), p.2.map(number_json)])
}

/// Parts read from their documents, checked to be of one job and to cover it exactly once, in
/// shard order.
struct Parts {
    job: Job,
    shared: Value,
    results: Vec<Value>,
    /// Values of the first part that are not checked (the flow PDFs' providers, which name the
    /// machine's hardware).
    first: Value,
}

/// One part document, read: (job, shard, units, shared, result).
/// Set a part's `digest` to that of its contents: what a shard does when it writes the part.
pub fn seal(doc: &mut Value) {
    doc["digest"] = json!(part_digest(doc));
}

/// SHA-256 of a part's document without its `digest` (canonical JSON: key order and number
/// spelling do not matter).
fn part_digest(doc: &Value) -> String {
    let mut body = doc.clone();
    if let Some(object) = body.as_object_mut() {
        object.remove("digest");
    }
    ns_translate::pyjson::digest(&body)
}

fn read_part(name: &str, doc: &Value) -> Result<(Job, usize, [usize; 2], Value, Value)> {
    let bad = |what: String| Error::InvalidInput(format!("{name}: {what}"));
    match doc.get("digest").and_then(Value::as_str) {
        None => return Err(bad("it has no \"digest\" of its results".into())),
        Some(d) if d != part_digest(doc) => {
            return Err(bad(
                "its contents do not match its digest: the part was edited after its shard \
                 wrote it; run that shard again"
                    .into(),
            ));
        }
        Some(_) => {}
    }
    let job: Job = serde_json::from_value(doc["job"].clone())
        .map_err(|e| bad(format!("its \"job\" is malformed: {e}")))?;
    let shard = doc["shard"]
        .as_u64()
        .ok_or_else(|| bad("its \"shard\" is not a whole number".into()))? as usize;
    let units: [usize; 2] = serde_json::from_value(doc["units"].clone())
        .map_err(|_| bad("its \"units\" is not [first, end]".into()))?;
    Ok((
        job,
        shard,
        units,
        doc["shared"].clone(),
        doc["result"].clone(),
    ))
}

/// The first field in which two jobs differ, in words.
fn difference(a: &Job, b: &Job) -> String {
    if a.model != b.model {
        "another model (its workspace, patches, measurement or interpolation codes differ)".into()
    } else if a.patchset != b.patchset {
        "another patchset".into()
    } else if a.request.verb().name != b.request.verb().name {
        format!(
            "another verb ({}, not {})",
            b.request.verb().name,
            a.request.verb().name
        )
    } else if a.request != b.request {
        format!(
            "another request ({} against {})",
            serde_json::to_string(&b.request).unwrap_or_default(),
            serde_json::to_string(&a.request).unwrap_or_default()
        )
    } else if a.fit != b.fit {
        "other fit options (init, bounds, fixed parameters or tolerance)".into()
    } else if a.data != b.data {
        "other data".into()
    } else if a.device != b.device {
        format!(
            "another kind of device ({} against {}: fits agree bit for bit on one kind only)",
            b.device, a.device
        )
    } else {
        format!("another split ({} shards against {})", b.shards, a.shards)
    }
}

fn check_parts(docs: &[(String, Value)]) -> Result<Parts> {
    if docs.is_empty() {
        return Err(Error::InvalidInput("merge needs the parts of a job".into()));
    }
    // Format and version first: a part of another release may hold fields this one cannot read.
    let (first_name, first_doc) = &docs[0];
    for (name, doc) in docs {
        match doc.get("format").and_then(Value::as_str) {
            Some(PARTIAL_FORMAT) => {}
            Some(other) if other.starts_with("nextstat-partial/") => {
                return Err(Error::InvalidInput(format!(
                    "{name}: a part in the format {other}, written by an earlier nextstat; this \
                     one merges {PARTIAL_FORMAT} (run the shards again)"
                )));
            }
            _ => {
                return Err(Error::InvalidInput(format!(
                    "{name}: not a part of a sharded job (no \"format\": \"{PARTIAL_FORMAT}\"); \
                     parts are written by the shards of a sharded run"
                )));
            }
        }
        if doc["version"] != first_doc["version"] {
            return Err(Error::InvalidInput(format!(
                "{name} was computed by nextstat {} and {first_name} by {}: merge parts of one \
                 version",
                doc["version"], first_doc["version"]
            )));
        }
    }
    let mut read = Vec::with_capacity(docs.len());
    for (name, doc) in docs {
        read.push((name.as_str(), read_part(name, doc)?));
    }
    let job = read[0].1.0.clone();
    // The split is checked before anything is sized by it.
    Shard::new(0, job.shards).map_err(|e| {
        Error::InvalidInput(format!("{first_name}: its job's split is malformed ({e})"))
    })?;
    let mut by_shard: Vec<Option<usize>> = vec![None; job.shards];
    for (k, (name, (other, shard, units, _, _))) in read.iter().enumerate() {
        if *other != job {
            return Err(Error::InvalidInput(format!(
                "{name} is not a part of the job of {first_name}: it is of {}",
                difference(&job, other)
            )));
        }
        let Some(slot) = by_shard.get_mut(*shard) else {
            return Err(Error::InvalidInput(format!(
                "{name}: shard {shard} of a job of {} shards",
                job.shards
            )));
        };
        if let Some(earlier) = *slot {
            return Err(Error::InvalidInput(format!(
                "{} and {name} are both shard {shard}/{}: give each part once",
                read[earlier].0, job.shards
            )));
        }
        let share = Shard::new(*shard, job.shards)?.share(job.units);
        if *units != [share.start, share.end] {
            return Err(Error::InvalidInput(format!(
                "{name}: shard {shard}/{} covers units {}..{} of {}, but the part says {}..{}",
                job.shards, share.start, share.end, job.units, units[0], units[1]
            )));
        }
        *slot = Some(k);
    }
    let missing: Vec<String> = by_shard
        .iter()
        .enumerate()
        .filter(|(_, s)| s.is_none())
        .map(|(i, _)| format!("{i}/{}", job.shards))
        .collect();
    if !missing.is_empty() {
        const LISTED: usize = 20;
        let more = if missing.len() > LISTED {
            format!(" and {} more", missing.len() - LISTED)
        } else {
            String::new()
        };
        return Err(Error::InvalidInput(format!(
            "the job has {} shards and {} {} missing: {}{more}",
            job.shards,
            missing.len(),
            if missing.len() == 1 { "is" } else { "are" },
            missing[..missing.len().min(LISTED)].join(", ")
        )));
    }
    let order: Vec<usize> = by_shard.into_iter().map(|s| s.expect("checked")).collect();
    let shared = read[order[0]].1.3.clone();
    for &k in &order {
        let (name, (_, _, _, other, _)) = &read[k];
        if *other != shared {
            return Err(Error::InvalidInput(format!(
                "{name} and {} computed different shared values ({} against {}): the same job \
                 gave other fits, so the parts were not computed alike (another CPU or GPU \
                 arithmetic?) and do not merge",
                read[order[0]].0, other, shared
            )));
        }
    }
    Ok(Parts {
        job,
        shared,
        results: order.iter().map(|&k| read[k].1.4.clone()).collect(),
        first: docs[order[0]].1.clone(),
    })
}

/// Lists of the parts' results under `key`, concatenated in shard order.
fn concatenated(results: &[Value], key: &str) -> Result<Vec<Value>> {
    let mut all = Vec::new();
    for (i, r) in results.iter().enumerate() {
        let list = r[key].as_array().ok_or_else(|| {
            Error::InvalidInput(format!("shard {i}: its result has no list \"{key}\""))
        })?;
        all.extend(list.iter().cloned());
    }
    Ok(all)
}

/// A report made of the shared values and the parts' lists concatenated, key by key.
fn joined(parts: &Parts) -> Result<Map<String, Value>> {
    let mut report = match &parts.shared {
        Value::Object(m) => m.clone(),
        _ => Map::new(),
    };
    let keys: Vec<String> = match &parts.results[0] {
        Value::Object(m) => m.keys().cloned().collect(),
        _ => Vec::new(),
    };
    for key in keys {
        report.insert(
            key.clone(),
            Value::Array(concatenated(&parts.results, &key)?),
        );
    }
    Ok(report)
}

/// A part's toy ensemble of `toys` toys, every value checked: test statistics finite and ≥ 0
/// (as every statistic here is), fitted and failed toys adding up to the share, the failures'
/// reasons adding up to the failed.
fn ensemble_of(value: &Value, place: &str, toys: usize) -> Result<ToyEnsemble> {
    let bad = |what: String| Error::InvalidInput(format!("{place}: {what}"));
    let teststats = value["teststats"]
        .as_array()
        .ok_or_else(|| bad("no list of test statistics".into()))?
        .iter()
        .enumerate()
        .map(|(k, t)| match t.as_f64() {
            Some(q) if q.is_finite() && q >= 0.0 => Ok(q),
            _ => Err(bad(format!(
                "test statistic {k} is {t}: a test statistic is a finite number ≥ 0"
            ))),
        })
        .collect::<Result<Vec<f64>>>()?;
    let n_failed = value["n_failed"]
        .as_u64()
        .ok_or_else(|| bad("\"n_failed\" is not a whole number".into()))?
        as usize;
    let failures: std::collections::BTreeMap<String, usize> =
        serde_json::from_value(value["failures"].clone())
            .map_err(|_| bad("\"failures\" is not a count per reason".into()))?;
    if teststats.len().checked_add(n_failed) != Some(toys) {
        return Err(bad(format!(
            "{} test statistics and {n_failed} failed toys for its {toys} toys",
            teststats.len()
        )));
    }
    let reasons: usize = failures.values().sum();
    if reasons != n_failed {
        return Err(bad(format!(
            "its failures' reasons count {reasons} toys, not its {n_failed} failed"
        )));
    }
    Ok(ToyEnsemble {
        teststats,
        n_failed,
        failures: failures.into_iter().collect(),
    })
}

/// Two ensembles, the second's toys after the first's.
fn append(mut a: ToyEnsemble, b: ToyEnsemble) -> ToyEnsemble {
    a.teststats.extend(b.teststats);
    a.n_failed += b.n_failed;
    for (reason, count) in b.failures {
        *a.failures.entry(reason).or_insert(0) += count;
    }
    a
}

/// The result of a sharded job from its parts (`(name, document)`, in any order): the JSON one
/// process gives for the job's request. Parts of other jobs, missing or repeated shards, and
/// parts whose shared values differ are refused, naming the part.
pub fn merge(docs: &[(String, Value)]) -> Result<Value> {
    let parts = check_parts(docs)?;
    check_request(&parts.job.request)?;
    check_counts(&parts)?;
    if parts.job.patchset.is_some() {
        return crate::grid::merge_grid(&parts.shared, &parts.results);
    }
    let mut report = match &parts.job.request {
        Request::HypotestToys {
            mu,
            test_stat,
            n_toys,
            seed,
            teststats,
        } => {
            let observed = float_of(&parts.shared["teststat_obs"], "teststat_obs")?;
            if !(observed.is_finite() && observed >= 0.0) {
                return Err(Error::InvalidInput(format!(
                    "the parts' observed test statistic is {observed}: a test statistic is a \
                     finite number ≥ 0"
                )));
            }
            let mut signal = ToyEnsemble::default();
            let mut background = ToyEnsemble::default();
            for (i, r) in parts.results.iter().enumerate() {
                let toys = Shard::new(i, parts.job.shards)?
                    .share(parts.job.units)
                    .len();
                let place = |which: &str| format!("shard {i}/{} ({which})", parts.job.shards);
                let sb = place("signal_plus_background");
                let b = place("background_only");
                signal = append(
                    signal,
                    ensemble_of(&r["signal_plus_background"], &sb, toys)?,
                );
                background = append(background, ensemble_of(&r["background_only"], &b, toys)?);
            }
            let result = ToyHypotest::from_ensembles(
                *mu,
                *test_stat,
                *n_toys,
                *seed,
                ToyEnsembles {
                    observed,
                    signal,
                    background,
                },
            )?;
            crate::report::hypotest_toys(test_stat.name(), &result, *teststats)
        }
        Request::ProfileScan {
            parameters,
            grid,
            cl,
            ..
        } if parts.job.request.is_grid_scan()? => {
            let report = joined(&parts)?;
            let numbers = |key: &str| -> Result<Vec<f64>> {
                report[key]
                    .as_array()
                    .map_or(&[][..], Vec::as_slice)
                    .iter()
                    .map(|v| float_of(v, key))
                    .collect()
            };
            let converged: Vec<bool> = report["converged"]
                .as_array()
                .map_or(&[][..], Vec::as_slice)
                .iter()
                .map(|v| {
                    v.as_bool().ok_or_else(|| {
                        Error::InvalidInput(format!("converged: {v} is not true or false"))
                    })
                })
                .collect::<Result<_>>()?;
            let bestfit_twice_nll = float_of(&report["bestfit_twice_nll"], "bestfit_twice_nll")?;
            let (twice_nll, delta_twice_nll) = (numbers("twice_nll")?, numbers("delta_twice_nll")?);
            if let Some((t, d)) = twice_nll
                .iter()
                .zip(&delta_twice_nll)
                .find(|(t, d)| (*t - bestfit_twice_nll).to_bits() != d.to_bits())
            {
                return Err(Error::InvalidInput(format!(
                    "a grid point's delta_twice_nll {d} is not its twice_nll {t} minus the parts' \
                     bestfit_twice_nll {bestfit_twice_nll}"
                )));
            }
            crate::report::grid_scan(
                &crate::report::GridPoints {
                    parameters,
                    axes: grid,
                    twice_nll: &twice_nll,
                    delta_twice_nll: &delta_twice_nll,
                    converged: &converged,
                    bestfit_twice_nll,
                },
                &contour_levels(cl.as_deref(), parameters.len())?,
            )
        }
        Request::ProfileScan { values, .. } => {
            let report = joined(&parts)?;
            if report.get("values") != Some(&json!(values)) {
                return Err(Error::InvalidInput(
                    "the parts' scan values are not the request's".into(),
                ));
            }
            Value::Object(report)
        }
        Request::Ranking => {
            let mut report = joined(&parts)?;
            let order = report.remove("order").unwrap_or(Value::Null);
            let entries = report.remove("entries").unwrap_or(Value::Null);
            let (Some(order), Some(entries)) = (order.as_array(), entries.as_array()) else {
                return Err(Error::InvalidInput(
                    "the parts hold no ranking entries".into(),
                ));
            };
            let mut keyed = Vec::with_capacity(entries.len());
            for (o, entry) in order.iter().zip(entries) {
                let index = o[1].as_u64().ok_or_else(|| {
                    Error::InvalidInput(format!("ranking order {o} is not [key, index]"))
                })? as usize;
                keyed.push(((float_of(&o[0], "a ranking key")?, index), entry.clone()));
            }
            keyed.sort_by(|a, b| impact_order(a.0, b.0));
            report.insert(
                "entries".into(),
                Value::Array(keyed.into_iter().map(|(_, e)| e).collect()),
            );
            Value::Object(report)
        }
        Request::UpperLimit {
            level,
            scan: Some(grid),
            n_toys: Some(n_toys),
            seed,
        } => {
            let tests = merged_toy_tests(&parts, grid, *n_toys, *seed)?;
            crate::report::upper_limit_toys(&ToyUpperLimit::from_tests(*level, tests)?)
        }
        Request::UpperLimit {
            level,
            scan: Some(grid),
            n_toys: None,
            ..
        } => {
            let mut points: Vec<ClsPoint> = Vec::new();
            for p in concatenated(&parts.results, "points")? {
                let place = "a CLs point";
                let exp = p[2].as_array().filter(|e| e.len() == 5).ok_or_else(|| {
                    Error::InvalidInput(format!("{place}: {p} is not [mu, obs, [5 expected]]"))
                })?;
                let mut expected = [0.0; 5];
                for (e, v) in expected.iter_mut().zip(exp) {
                    *e = float_of(v, place)?;
                }
                let (mu, observed) = (float_of(&p[0], place)?, float_of(&p[1], place)?);
                if let Some(cls) = std::iter::once(observed)
                    .chain(expected)
                    .find(|c| !(0.0..=1.0).contains(c))
                {
                    return Err(Error::InvalidInput(format!(
                        "{place} at μ = {mu} holds CLs = {cls}: a CLs lies in [0, 1]"
                    )));
                }
                points.push((mu, observed, expected));
            }
            if !points.iter().map(|p| p.0).eq(grid.iter().copied()) {
                return Err(Error::InvalidInput(
                    "the parts' CLs points are not at the request's μ values".into(),
                ));
            }
            crate::report::upper_limit(&UpperLimit::from_scan(*level, points)?, *level)
        }
        Request::Posterior { keep_draws, .. } => {
            let spec = parts
                .job
                .request
                .posterior_spec()
                .expect("a posterior request");
            crate::report::posterior(
                &Posterior::of_chains(&spec, merged_chains(&parts)?)?,
                *keep_draws,
            )
        }
        other => {
            return Err(Error::InvalidInput(format!(
                "parts of a '{}' request: that request does not split into shards",
                other.verb().name
            )));
        }
    };
    // The model's notes, as one process's report carries them.
    for note in ["flows", "semantics"] {
        if let (Some(value), Some(object)) = (parts.first.get(note), report.as_object_mut()) {
            object.insert(note.into(), value.clone());
        }
    }
    if let (Some(poi), Some(object)) = (parts.shared.get("poi"), report.as_object_mut()) {
        object.insert("poi".into(), poi.clone());
    }
    Ok(report)
}

/// A posterior's chains from its parts, in chain order: every number a finite one, every
/// chain's sampler counts whole.
fn merged_chains(parts: &Parts) -> Result<PosteriorChains> {
    let strings = |key: &str| -> Result<Vec<String>> {
        parts.shared[key]
            .as_array()
            .map_or(&[][..], Vec::as_slice)
            .iter()
            .map(|v| {
                v.as_str().map(str::to_string).ok_or_else(|| {
                    Error::InvalidInput(format!("{key}: {v} is not a parameter name"))
                })
            })
            .collect()
    };
    let finite = |v: &Value, place: &str| -> Result<f64> {
        let x = float_of(v, place)?;
        if x.is_finite() {
            Ok(x)
        } else {
            Err(Error::InvalidInput(format!(
                "{place}: {x} is not a finite number"
            )))
        }
    };
    let bounds = parts.shared["bounds"]
        .as_array()
        .map_or(&[][..], Vec::as_slice)
        .iter()
        .map(|b| Ok((float_of(&b[0], "bounds")?, float_of(&b[1], "bounds")?)))
        .collect::<Result<Vec<_>>>()?;
    let draws = concatenated(&parts.results, "draws")?
        .iter()
        .map(|chain| {
            chain
                .as_array()
                .map_or(&[][..], Vec::as_slice)
                .iter()
                .map(|draw| {
                    draw.as_array()
                        .map_or(&[][..], Vec::as_slice)
                        .iter()
                        .map(|v| finite(v, "a draw"))
                        .collect::<Result<Vec<f64>>>()
                })
                .collect::<Result<Vec<_>>>()
        })
        .collect::<Result<Vec<_>>>()?;
    let count = |s: &Value, key: &str| {
        s[key]
            .as_u64()
            .map(|v| v as usize)
            .ok_or_else(|| Error::InvalidInput(format!("sampler {key}: {} is not a count", s[key])))
    };
    let chains = concatenated(&parts.results, "sampler")?
        .iter()
        .map(|s| {
            Ok(ChainReport {
                divergences: count(s, "divergences")?,
                max_depth_hits: count(s, "max_depth_hits")?,
                step_size: finite(&s["step_size"], "sampler step_size")?,
                mean_tree_depth: finite(&s["mean_tree_depth"], "sampler mean_tree_depth")?,
                mean_accept: finite(&s["mean_accept"], "sampler mean_accept")?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(PosteriorChains {
        poi: parts.shared["sampled_poi"]
            .as_str()
            .ok_or_else(|| Error::InvalidInput("the parts name no sampled POI".into()))?
            .to_string(),
        names: strings("names")?,
        bounds,
        draws,
        chains,
    })
}

/// The toy tests of a toy-based limit from its parts: each part's pieces must be those of its
/// share, each μ's observed statistic the same in every piece, and each ensemble's toys counted.
fn merged_toy_tests(
    parts: &Parts,
    grid: &[f64],
    n_toys: usize,
    seed: u64,
) -> Result<Vec<ToyHypotest>> {
    let mut observed: Vec<Option<f64>> = vec![None; grid.len()];
    let mut signal: Vec<ToyEnsemble> = vec![ToyEnsemble::default(); grid.len()];
    let mut background: Vec<ToyEnsemble> = vec![ToyEnsemble::default(); grid.len()];
    for (i, r) in parts.results.iter().enumerate() {
        let shard = Shard::new(i, parts.job.shards)?;
        let expected = toy_limit_pieces(shard.share(parts.job.units), n_toys);
        let held = r["pieces"].as_array().map_or(&[][..], Vec::as_slice);
        if held.len() != expected.len() {
            return Err(Error::InvalidInput(format!(
                "shard {shard}: its result holds {} pieces of μ values, its share has {}",
                held.len(),
                expected.len()
            )));
        }
        for (piece, (k, toys)) in held.iter().zip(expected) {
            let place = |which: &str| format!("shard {shard}, μ = {} ({which})", grid[k]);
            if piece["mu_index"] != json!(k) || piece["toys"] != json!([toys.start, toys.end]) {
                return Err(Error::InvalidInput(format!(
                    "{}: the piece is not of toys {}..{} of μ index {k}",
                    place("toys"),
                    toys.start,
                    toys.end
                )));
            }
            let t = float_of(&piece["teststat_obs"], &place("teststat_obs"))?;
            if !(t.is_finite() && t >= 0.0) {
                return Err(Error::InvalidInput(format!(
                    "{}: {t} is not a test statistic (a finite number ≥ 0)",
                    place("teststat_obs")
                )));
            }
            match observed[k] {
                Some(o) if o.to_bits() != t.to_bits() => {
                    return Err(Error::InvalidInput(format!(
                        "{}: {t}, where an earlier shard has {o}: the parts disagree",
                        place("teststat_obs")
                    )));
                }
                _ => observed[k] = Some(t),
            }
            let sb = ensemble_of(
                &piece["signal_plus_background"],
                &place("signal_plus_background"),
                toys.len(),
            )?;
            let b = ensemble_of(
                &piece["background_only"],
                &place("background_only"),
                toys.len(),
            )?;
            signal[k] = append(std::mem::take(&mut signal[k]), sb);
            background[k] = append(std::mem::take(&mut background[k]), b);
        }
    }
    grid.iter()
        .zip(observed)
        .zip(signal.into_iter().zip(background))
        .map(|((&mu, observed), (signal, background))| {
            let observed = observed.ok_or_else(|| {
                Error::InvalidInput(format!("no part holds the toys of μ = {mu}"))
            })?;
            ToyHypotest::from_ensembles(
                mu,
                TestStatistic::QTilde,
                n_toys,
                seed,
                ToyEnsembles {
                    observed,
                    signal,
                    background,
                },
            )
            .map_err(|e| at_mu(e, mu))
        })
        .collect()
}

/// The request of parts holds what one process would accept of it (a grid within its size, a
/// toy limit within its toys), so that nothing derived from it overflows.
fn check_request(request: &Request) -> Result<()> {
    match request {
        Request::UpperLimit {
            level,
            scan: Some(grid),
            n_toys: Some(n_toys),
            seed,
        } => ToyLimitSpec {
            level: *level,
            n_toys: *n_toys,
            seed: *seed,
        }
        .check_points(grid.len()),
        Request::ProfileScan { .. } => request.is_grid_scan().map(drop),
        _ => Ok(()),
    }
}

/// Every part holds one result per unit of its share, and the job's units are its request's.
fn check_counts(parts: &Parts) -> Result<()> {
    let job = &parts.job;
    let (request_units, lists): (Option<usize>, &[&str]) = match &job.request {
        _ if job.patchset.is_some() => (None, &["points", "errors"]),
        Request::HypotestToys { n_toys, .. } => (Some(*n_toys), &[]),
        Request::ProfileScan { grid, .. } if !grid.is_empty() => (
            Some(grid.iter().map(Vec::len).fold(1, usize::saturating_mul)),
            &["twice_nll", "delta_twice_nll", "converged"],
        ),
        Request::ProfileScan { values, .. } => (
            Some(values.len()),
            &["values", "twice_nll", "delta_twice_nll", "converged"],
        ),
        Request::Ranking => (None, &["entries", "order"]),
        Request::UpperLimit {
            scan: Some(grid),
            n_toys: Some(n_toys),
            ..
        } => (Some(grid.len().saturating_mul(*n_toys)), &[]),
        Request::UpperLimit {
            scan: Some(grid), ..
        } => (Some(grid.len()), &["points"]),
        Request::Posterior { chains, .. } => (Some(*chains), &["draws", "sampler"]),
        _ => (None, &[]),
    };
    if let Some(n) = request_units
        && n != job.units
    {
        return Err(Error::InvalidInput(format!(
            "the parts' job has {} units, but its request has {n}",
            job.units
        )));
    }
    // Grids: points and errors together; the other lists each hold one entry per unit.
    let together = job.patchset.is_some();
    for (i, r) in parts.results.iter().enumerate() {
        let share = Shard::new(i, job.shards)?.share(job.units).len();
        let count = |key: &str| r[key].as_array().map_or(0, Vec::len);
        let held: Vec<usize> = if together {
            vec![lists.iter().map(|k| count(k)).sum()]
        } else {
            lists.iter().map(|k| count(k)).collect()
        };
        if let Some(h) = held.iter().find(|&&h| h != share) {
            return Err(Error::InvalidInput(format!(
                "shard {i}/{}: its result holds {h} of its {share} units ({})",
                job.shards,
                lists.join(", ")
            )));
        }
    }
    Ok(())
}
