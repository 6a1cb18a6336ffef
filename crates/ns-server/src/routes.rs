//! The endpoints. A verb's body is the engine's call JSON (`ns_inference::Call`: `request`,
//! `fit`, `device`, `data`) with the model either inline (`"model": {"workspace": {...}}`, as a
//! saved call has it but with the workspace itself) or by id (`"model": {"id": "..."}` from
//! `POST /v1/models`); the answer is the JSON the CLI prints for the same call.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use ns_api::call::Call;
use ns_api::request::{Outcome, Request};
use ns_compute::Device;
use ns_source::{LoadedModel, ModelRef};
use serde_json::{Value, json};

use crate::device_queue::Task;
use crate::error::ApiError;
use crate::state::{AppState, Job, JobState, model_id};

type Shared = State<Arc<AppState>>;

/// The body as JSON: 413 past the limit, 400 for anything but a JSON object.
fn json_body(
    body: Result<Bytes, BytesRejection>,
) -> Result<serde_json::Map<String, Value>, ApiError> {
    let bytes = body.map_err(|e| {
        let status = e.status();
        ApiError::new(
            status,
            if status == StatusCode::PAYLOAD_TOO_LARGE {
                "too_large"
            } else {
                "invalid_request"
            },
            e.body_text(),
        )
    })?;
    let value: Value = serde_json::from_slice(&bytes).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_json",
            format!("the body is not JSON: {e}"),
        )
    })?;
    match value {
        Value::Object(m) => Ok(m),
        other => Err(ApiError::bad_request(format!(
            "the body must be a JSON object, not {}",
            kind_of(&other)
        ))),
    }
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// A model reference of a request. The server loads it with a reader that opens no file
/// (`ns_source::NoFiles`, after every patch and patchset), so a path is refused there,
/// with one message that says nothing about it.
fn inline_model(value: Value) -> Result<ModelRef, ApiError> {
    serde_json::from_value(value).map_err(|e| ApiError::bad_request(format!("model: {e}")))
}

/// A model by reference: from the cache, or loaded (on a worker) and cached.
async fn model_of(
    state: &Arc<AppState>,
    reference: Value,
) -> Result<(String, Arc<LoadedModel>), ApiError> {
    if let Some(id) = reference.get("id") {
        let id = id
            .as_str()
            .ok_or_else(|| ApiError::bad_request("model.id must be a string"))?
            .to_string();
        let found = state
            .models
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&id);
        return match found {
            Some(m) => {
                state.metrics.cache_hits.fetch_add(1, Ordering::Relaxed);
                Ok((id, m))
            }
            None => Err(ApiError::not_found(format!(
                "no model '{id}' (upload it with POST /v1/models; the cache may have evicted it)"
            ))),
        };
    }
    let source = inline_model(reference)?;
    let id = model_id(&source);
    if let Some(m) = state
        .models
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&id)
    {
        state.metrics.cache_hits.fetch_add(1, Ordering::Relaxed);
        return Ok((id, m));
    }
    state.metrics.cache_misses.fetch_add(1, Ordering::Relaxed);
    let permit = state.worker().await?;
    let loading = source.clone();
    let loader = state.clone();
    let model = tokio::task::spawn_blocking(move || {
        let _permit = permit;
        loader
            .pools
            .interactive
            .install(|| loading.load_model(&ns_source::NoFiles))
    })
    .await
    .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()))??;
    let model = Arc::new(model);
    let bytes = serde_json::to_vec(&source).map_or(0, |v| v.len()) * 4
        + model.likelihood().dataset_size() * 8;
    state
        .models
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(
            id.clone(),
            model.clone(),
            source,
            bytes,
            state.limits.cache_bytes,
        );
    Ok((id, model))
}

/// `POST /v1/models`: a model reference (inline) → its id and shape.
pub async fn upload_model(
    State(state): Shared,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = json_body(body)?;
    let (id, model) = model_of(&state, Value::Object(body)).await?;
    Ok((StatusCode::CREATED, Json(describe(&id, &model))).into_response())
}

fn describe(id: &str, model: &LoadedModel) -> Value {
    let m = model.likelihood();
    json!({
        "id": id,
        "kind": match model { LoadedModel::Binned { .. } => "binned", LoadedModel::Unbinned(_) => "unbinned", LoadedModel::Joint(_) => "joint" },
        "origin": m.origin(),
        "parameter_names": m.parameter_names(),
        "poi": m.poi().ok().map(|i| m.parameter_names()[i].clone()),
        "pois": m.pois().iter().map(|&i| m.parameter_names()[i].clone()).collect::<Vec<_>>(),
    })
}

pub async fn get_model(
    State(state): Shared,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let cache = state.models.lock().unwrap_or_else(|p| p.into_inner());
    let (m, _) = cache
        .describe(&id)
        .ok_or_else(|| ApiError::not_found(format!("no model '{id}'")))?;
    let mut out = describe(&id, &m.model);
    out["bytes"] = json!(m.bytes);
    out["source"] = serde_json::to_value(&m.source).unwrap_or(Value::Null);
    Ok(Json(out))
}

pub async fn delete_model(
    State(state): Shared,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    if state
        .models
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&id)
    {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::not_found(format!("no model '{id}'")))
    }
}

/// A verb's call from its body: the request's verb filled in from the path (or checked
/// against it), the toy cap applied, the model reference taken out.
fn call_of(
    state: &AppState,
    verb_path: &str,
    mut body: serde_json::Map<String, Value>,
) -> Result<(Value, Call), ApiError> {
    let verb = ns_api::verbs::routed(verb_path)
        .map(|v| v.name)
        .ok_or_else(|| {
            ApiError::not_found(format!(
                "no verb '{verb_path}' (verbs: {})",
                ns_api::verbs::routes().collect::<Vec<_>>().join(", ")
            ))
        })?;
    let model = body.remove("model").ok_or_else(|| {
        ApiError::bad_request(
            "the call names no model: give \"model\": {\"id\": ...} or an inline model",
        )
    })?;
    let request = body.entry("request").or_insert_with(|| json!({}));
    let request = request
        .as_object_mut()
        .ok_or_else(|| ApiError::bad_request("request must be an object"))?;
    match request.get("verb").and_then(Value::as_str) {
        None => {
            request.insert("verb".into(), json!(verb));
        }
        Some(v) if v == verb => {}
        Some(v) => {
            return Err(ApiError::bad_request(format!(
                "the request's verb is '{v}' but the endpoint is /v1/{verb_path}"
            )));
        }
    }
    if let Some(n) = request.get("n_toys").and_then(Value::as_u64)
        && n as usize > state.limits.max_toys
    {
        return Err(ApiError::bad_request(format!(
            "n_toys = {n}: this server runs at most {} toys per request (--max-toys)",
            state.limits.max_toys
        )));
    }
    let call = Call::from_json(Value::Object(body))?;
    call.validate()?;
    Ok((model, call))
}

/// The report JSON of a call's outcome, as the CLI prints it.
pub(crate) fn report(model: &LoadedModel, call: &Call, outcome: Outcome) -> Value {
    let matrices = matches!(
        call.request,
        Request::Fit {
            covariance: true,
            ..
        }
    );
    let mut report = call.report(&outcome, model.likelihood(), matrices);
    model.annotate(&mut report);
    report
}

/// Run `call` on `model` (cached as `model_id`), stopped by `stop`, the timeout or shutdown:
/// on a CPU worker, or through its GPU's queue (merged there with compatible calls). The report
/// JSON as the CLI prints it.
async fn execute(
    state: &Arc<AppState>,
    model_id: String,
    model: Arc<LoadedModel>,
    mut call: Call,
    stop: Arc<AtomicBool>,
    job: Option<Arc<Job>>,
) -> Result<Value, ApiError> {
    let asked = call.validate()?;
    let auto = match asked {
        // `auto` may time fits to weigh a batch (`Fitter::weigh_auto`): off the async threads,
        // on the threads of the pool the batch would run on, holding a CPU worker as the work
        // does (so that probes neither crowd the running work nor time a crowded CPU).
        Device::Auto => {
            let workload = call.request.workload(model.likelihood());
            let permit = state.worker().await?;
            let (state, model) = (state.clone(), model.clone());
            let choice = tokio::task::spawn_blocking(move || {
                let _permit = permit;
                state
                    .pools
                    .for_workload(workload)
                    .install(|| ns_inference::Fitter::weigh_auto(model.likelihood(), workload))
            })
            .await
            .map_err(|e| {
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string())
            })?;
            Some(choice)
        }
        _ => None,
    };
    let device = auto.as_ref().map_or(asked, |choice| choice.device);
    // The timeout counts from when the work starts, not while it waits for a worker or GPU.
    let started = Arc::new(AtomicBool::new(false));
    let timeout = state.limits.timeout;
    let watcher = {
        let (stop, started) = (stop.clone(), started.clone());
        let stopping = state.stopping.clone();
        tokio::spawn(async move {
            let mut deadline = None;
            loop {
                if deadline.is_none() && started.load(Ordering::Relaxed) {
                    deadline = Some(tokio::time::Instant::now() + timeout);
                }
                if stopping.load(Ordering::Relaxed)
                    || deadline.is_some_and(|d| tokio::time::Instant::now() >= d)
                {
                    stop.store(true, Ordering::Relaxed);
                    return;
                }
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        })
    };
    // Resolved once: the run must not weigh `auto` again (nor choose differently).
    call.device = device.spec();
    let result = if device == Device::Cpu {
        on_cpu(state, model, call, stop, started, job).await
    } else {
        let task = Task {
            model_id,
            model,
            call,
            stop,
            started,
            job,
        };
        on_device(state, device, task).await
    };
    watcher.abort();
    result.map(|mut report| {
        ns_api::report::add_auto(&mut report, auto.as_ref());
        report
    })
}

/// A call on a CPU worker.
async fn on_cpu(
    state: &Arc<AppState>,
    model: Arc<LoadedModel>,
    call: Call,
    stop: Arc<AtomicBool>,
    started: Arc<AtomicBool>,
    job: Option<Arc<Job>>,
) -> Result<Value, ApiError> {
    let permit = state.worker().await?;
    if stop.load(Ordering::Relaxed) {
        // Cancelled (or the server stopping) while it waited: nothing to run.
        return Err(crate::error::stopped(state));
    }
    started.store(true, Ordering::Relaxed);
    let start = Instant::now();
    state.running.fetch_add(1, Ordering::SeqCst);
    let pools = state.clone();
    let result = tokio::task::spawn_blocking(move || {
        let _permit = permit;
        let m = model.likelihood();
        if let Some(job) = &job {
            job.total_steps
                .store(call.request.progress_steps(m), Ordering::Relaxed);
            job.set(JobState::Running);
        }
        let pool = pools.pools.for_workload(call.request.workload(m));
        let outcome = pool.install(|| {
            call.run(m, stop, &|k| {
                if let Some(job) = &job {
                    job.done_steps.store(k as u64, Ordering::Relaxed);
                }
            })
        })?;
        Ok::<Value, ns_core::Error>(report(&model, &call, outcome))
    })
    .await;
    state.running.fetch_sub(1, Ordering::SeqCst);
    *state
        .metrics
        .busy_seconds_cpu
        .lock()
        .unwrap_or_else(|p| p.into_inner()) += start.elapsed().as_secs_f64();
    let result = result
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()))?;
    result.map_err(|e| crate::error::engine(e, state))
}

/// A call through its GPU's queue; answered as soon as it stops (timeout, cancellation,
/// shutdown), even while a merged batch it joined runs on for the others.
async fn on_device(state: &Arc<AppState>, device: Device, task: Task) -> Result<Value, ApiError> {
    let queue = state.device_queue(device)?;
    let stop = task.stop.clone();
    let answer = queue.submit(task)?;
    let stopped = async {
        while !stop.load(Ordering::Relaxed) {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    };
    tokio::select! {
        answer = answer => answer.unwrap_or_else(|_| {
            Err(ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                format!("the {} runner ended without an answer", device.spec()),
            ))
        }),
        _ = stopped => Err(crate::error::stopped(state)),
    }
}

/// `POST /v1/{verb}`: run a call and answer its result.
pub async fn verb(
    State(state): Shared,
    Path(verb_path): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let body = json_body(body)?;
    let (model, call) = call_of(&state, &verb_path, body)?;
    let (id, model) = model_of(&state, model).await?;
    let report = execute(
        &state,
        id,
        model,
        call,
        Arc::new(AtomicBool::new(false)),
        None,
    )
    .await?;
    Ok(Json(report))
}

/// `POST /v1/jobs`: `{"verb": "hypotest-toys", ...call}` → 202 with the job's id; the work
/// runs in the background.
pub async fn submit_job(
    State(state): Shared,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let mut body = json_body(body)?;
    let verb_path = body
        .remove("verb")
        .and_then(|v| v.as_str().map(String::from))
        .ok_or_else(|| {
            ApiError::bad_request("a job names its \"verb\" (fit, hypotest-toys, upper-limit, ...)")
        })?;
    let (model, call) = call_of(&state, &verb_path, body)?;
    let (model_id, model) = model_of(&state, model).await?;
    state.expire_jobs();
    let (held, active) = {
        let jobs = state.jobs.lock().unwrap_or_else(|p| p.into_inner());
        let active = jobs
            .values()
            .filter(|j| matches!(j.state(), JobState::Queued | JobState::Running))
            .count();
        (jobs.len(), active)
    };
    // A job the workers and their queue cannot hold is refused now, not failed later.
    let capacity = state.limits.workers + state.limits.queue;
    if active >= capacity {
        return Err(ApiError::busy(
            format!(
                "{active} jobs are queued or running, as many as the {} workers and the queue of {} hold: try again once some finish",
                state.limits.workers, state.limits.queue
            ),
            5,
        ));
    }
    if held >= crate::state::MAX_JOBS {
        return Err(ApiError::busy(
            format!(
                "{held} jobs are held (running, waiting, or finished within --job-ttl): collect or delete some"
            ),
            5,
        ));
    }
    let id = format!("job-{}", state.next_job.fetch_add(1, Ordering::SeqCst));
    let job = Arc::new(Job::new(verb_path));
    state
        .jobs
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(id.clone(), job.clone());
    let background = state.clone();
    tokio::spawn(async move {
        let stop = job.stop.clone();
        let result = execute(
            &background,
            model_id,
            model,
            call,
            stop.clone(),
            Some(job.clone()),
        )
        .await;
        // A cancelled job stays cancelled (`Job::set`), whatever its computation answered.
        job.set(match result {
            Ok(report) => JobState::Done(report),
            Err(e) => JobState::Failed {
                status: e.status.as_u16(),
                kind: e.kind,
                message: e.message,
            },
        });
    });
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({"id": id, "status": "queued"})),
    )
        .into_response())
}

fn job_json(id: &str, job: &Job) -> Value {
    let (status, result, error) = match job.state() {
        JobState::Queued => ("queued", Value::Null, Value::Null),
        JobState::Running => ("running", Value::Null, Value::Null),
        JobState::Done(r) => ("done", r, Value::Null),
        JobState::Failed {
            status,
            kind,
            message,
        } => (
            "failed",
            Value::Null,
            json!({"status": status, "kind": kind, "message": message}),
        ),
        JobState::Cancelled => ("cancelled", Value::Null, Value::Null),
    };
    json!({
        "id": id, "verb": job.verb, "status": status,
        "progress": {"done": job.done_steps.load(Ordering::Relaxed), "total": job.total_steps.load(Ordering::Relaxed)},
        "result": result, "error": error,
    })
}

fn find_job(state: &AppState, id: &str) -> Result<Arc<Job>, ApiError> {
    state.expire_jobs();
    state
        .jobs
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(id)
        .cloned()
        .ok_or_else(|| {
            ApiError::not_found(format!(
                "no job '{id}' (finished jobs are kept for --job-ttl)"
            ))
        })
}

pub async fn get_job(
    State(state): Shared,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let job = find_job(&state, &id)?;
    Ok(Json(job_json(&id, &job)))
}

/// `DELETE /v1/jobs/{id}`: a queued or running job is cancelled (the engine's stop flag); a
/// finished one is forgotten.
pub async fn cancel_job(
    State(state): Shared,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let job = find_job(&state, &id)?;
    match job.state() {
        JobState::Queued | JobState::Running => {
            job.set(JobState::Cancelled);
            job.stop.store(true, Ordering::Relaxed);
        }
        _ => {
            state
                .jobs
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&id);
        }
    }
    Ok(Json(job_json(&id, &job)))
}

/// The most patches one `/v1/batch` runs (docs/errors.md).
pub const MAX_BATCH_PATCHES: usize = 10_000;

/// `POST /v1/batch`: one request over many signal points of a patchset, `{"model": {...background
/// and "patchset" inline...}, "patches": [names] (default: all), "request": {...}, ...}` → one
/// result per patch, in the patchset's order.
pub async fn batch(
    State(state): Shared,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let mut body = json_body(body)?;
    let model = body.remove("model").ok_or_else(|| {
        ApiError::bad_request("a batch names its background model and patchset in \"model\"")
    })?;
    let patchset = model
        .pointer("/patchset/patchset")
        .cloned()
        .ok_or_else(|| {
            ApiError::bad_request("model.patchset.patchset: give the patchset inline")
        })?;
    let in_patchset: Vec<&str> = patchset
        .get("patches")
        .and_then(Value::as_array)
        .map(|ps| {
            ps.iter()
                .filter_map(|p| p.pointer("/metadata/name").and_then(Value::as_str))
                .collect()
        })
        .unwrap_or_default();
    let names: Vec<String> = match body.remove("patches") {
        Some(v) => {
            serde_json::from_value(v).map_err(|e| ApiError::bad_request(format!("patches: {e}")))?
        }
        None => in_patchset.iter().map(|n| n.to_string()).collect(),
    };
    if names.is_empty() {
        return Err(ApiError::bad_request("the batch has no patches"));
    }
    if names.len() > MAX_BATCH_PATCHES {
        return Err(ApiError::bad_request(format!(
            "the batch names {} patches; a batch runs at most {MAX_BATCH_PATCHES} (send several)",
            names.len()
        )));
    }
    let mut seen = std::collections::HashSet::new();
    for name in &names {
        if !in_patchset.contains(&name.as_str()) {
            return Err(ApiError::bad_request(format!(
                "patches: the patchset has no patch '{name}'"
            )));
        }
        if !seen.insert(name.as_str()) {
            return Err(ApiError::bad_request(format!(
                "patches: '{name}' is named twice"
            )));
        }
    }
    let verb_path = body
        .remove("verb")
        .and_then(|v| v.as_str().map(String::from))
        .unwrap_or_else(|| "upper-limit".into());
    // Each point's call is made when its round starts: the model is not copied once per patch
    // up front.
    let call_for = |name: &str| {
        let mut m = model.clone();
        m["patchset"]["patch"] = json!(name);
        let mut b = body.clone();
        b.insert("model".into(), m);
        call_of(&state, &verb_path, b)
    };
    // The points' calls differ only in the patch's name: the first one's checks stand for all,
    // before any runs.
    call_for(&names[0])?;
    // As many patches at once as there are workers: a batch shares the pool with other
    // requests, and never fills the queue by itself.
    let mut results = Vec::with_capacity(names.len());
    let mut pending = names.iter();
    loop {
        let round: Vec<_> = pending
            .by_ref()
            .take(state.limits.workers)
            .map(|name| {
                let (model, call) = call_for(name)?;
                let state = state.clone();
                let task = tokio::spawn(async move {
                    let (id, model) = model_of(&state, model).await?;
                    execute(
                        &state,
                        id,
                        model,
                        call,
                        Arc::new(AtomicBool::new(false)),
                        None,
                    )
                    .await
                });
                Ok((name, task))
            })
            .collect::<Result<_, ApiError>>()?;
        if round.is_empty() {
            break;
        }
        for (name, task) in round {
            let r = task
                .await
                .map_err(|e| {
                    ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string())
                })?
                .map_err(|e| ApiError {
                    message: format!("patch '{name}': {}", e.message),
                    ..e
                })?;
            results.push(json!({"patch": name, "result": r}));
        }
    }
    Ok(Json(json!({"verb": verb_path, "results": results})))
}

pub async fn health(State(state): Shared) -> Json<Value> {
    Json(json!({
        "status": "ok",
        "version": env!("CARGO_PKG_VERSION"),
        "uptime_s": state.started.elapsed().as_secs_f64(),
        "models": state.models.lock().unwrap_or_else(|p| p.into_inner()).len(),
        "running": state.running.load(Ordering::Relaxed),
        "waiting": state.waiting.load(Ordering::Relaxed),
    }))
}

pub async fn devices(State(state): Shared) -> Json<Value> {
    Json(ns_api::report::devices(state.inventory()))
}
