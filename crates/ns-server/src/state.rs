//! What the server holds between requests: loaded models (an LRU cache bounded by memory,
//! keyed by the digest of the model and its settings), jobs, the bounded work pool and the
//! counters `/metrics` reports. Nothing here holds a lock while the engine computes.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use ns_compute::{CudaGpus, Device, Inventory};
use ns_source::{LoadedModel, ModelRef};
use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio::sync::Semaphore;

use crate::device_queue::DeviceQueue;
use crate::error::ApiError;

/// The most jobs held at once (running, waiting or finished within the TTL): beyond, 503.
pub const MAX_JOBS: usize = 10_000;

/// The server's limits and settings (from the command line).
#[derive(Clone, Debug)]
pub struct Limits {
    /// Engine computations at once (CPU work; each also uses the engine's thread pool).
    pub workers: usize,
    /// Requests waiting for a worker before new ones get 503.
    pub queue: usize,
    /// Memory the model cache may hold, in bytes (estimated).
    pub cache_bytes: usize,
    /// Wall time of one request or job before it is stopped.
    pub timeout: Duration,
    /// The most toys one request may ask for.
    pub max_toys: usize,
    /// How long a finished job's result is kept.
    pub job_ttl: Duration,
    /// Requests per second per API key (0: no limit).
    pub rate_per_key: f64,
    /// Runner threads per GPU device (batches on one device at once).
    pub gpu_runners: usize,
}

/// A model in the cache.
pub struct CachedModel {
    pub model: Arc<LoadedModel>,
    pub source: ModelRef,
    pub bytes: usize,
    last_used: u64,
}

/// Models by id, least recently used evicted first.
#[derive(Default)]
pub struct ModelCache {
    models: HashMap<String, CachedModel>,
    clock: u64,
    total: usize,
}

/// The id of a model: the digest of its reference (the workspace, patches, measurement and
/// interpolation codes, as canonical JSON: object keys sorted).
pub fn model_id(source: &ModelRef) -> String {
    let canonical = serde_json::to_vec(source).unwrap_or_default();
    let digest = Sha256::digest(&canonical);
    digest[..16].iter().map(|b| format!("{b:02x}")).collect()
}

impl ModelCache {
    pub fn get(&mut self, id: &str) -> Option<Arc<LoadedModel>> {
        self.clock += 1;
        let clock = self.clock;
        self.models.get_mut(id).map(|m| {
            m.last_used = clock;
            m.model.clone()
        })
    }

    pub fn describe(&self, id: &str) -> Option<(&CachedModel, usize)> {
        self.models.get(id).map(|m| (m, self.total))
    }

    /// Insert, evicting the least recently used until the rest fits in `limit` bytes.
    pub fn insert(
        &mut self,
        id: String,
        model: Arc<LoadedModel>,
        source: ModelRef,
        bytes: usize,
        limit: usize,
    ) {
        self.clock += 1;
        if let Some(old) = self.models.remove(&id) {
            self.total -= old.bytes;
        }
        while self.total + bytes > limit && !self.models.is_empty() {
            let oldest = self
                .models
                .iter()
                .min_by_key(|(_, m)| m.last_used)
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest
                && let Some(m) = self.models.remove(&k)
            {
                self.total -= m.bytes;
            }
        }
        self.total += bytes;
        self.models.insert(
            id,
            CachedModel {
                model,
                source,
                bytes,
                last_used: self.clock,
            },
        );
    }

    pub fn remove(&mut self, id: &str) -> bool {
        match self.models.remove(id) {
            Some(m) => {
                self.total -= m.bytes;
                true
            }
            None => false,
        }
    }

    pub fn len(&self) -> usize {
        self.models.len()
    }
}

/// Where a job stands.
#[derive(Clone, Debug, PartialEq)]
pub enum JobState {
    Queued,
    Running,
    Done(Value),
    Failed {
        status: u16,
        kind: &'static str,
        message: String,
    },
    Cancelled,
}

/// A job: its request, progress, stop flag and outcome.
pub struct Job {
    pub verb: String,
    pub state: Mutex<JobState>,
    pub done_steps: AtomicU64,
    pub total_steps: AtomicU64,
    pub stop: Arc<AtomicBool>,
    pub finished_at: Mutex<Option<Instant>>,
}

impl Job {
    pub fn new(verb: String) -> Self {
        Job {
            verb,
            state: Mutex::new(JobState::Queued),
            done_steps: AtomicU64::new(0),
            total_steps: AtomicU64::new(0),
            stop: Arc::new(AtomicBool::new(false)),
            finished_at: Mutex::new(None),
        }
    }

    /// Move to `state`; a cancelled job stays cancelled (a queued job cancelled and then taken
    /// by a worker, or stopped by its cancellation, is not `running` or `failed`).
    pub fn set(&self, state: JobState) {
        let finished = !matches!(state, JobState::Queued | JobState::Running);
        let mut current = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if *current == JobState::Cancelled {
            return;
        }
        *current = state;
        drop(current);
        if finished {
            *self.finished_at.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
        }
    }

    pub fn state(&self) -> JobState {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// Request counters and latencies by route, for `/metrics`.
#[derive(Default)]
pub struct Metrics {
    /// (route, status) → count, latency sum in seconds, and histogram bucket counts.
    pub requests: Mutex<HashMap<(String, u16), RouteStats>>,
    pub cache_hits: AtomicU64,
    pub cache_misses: AtomicU64,
    pub busy_seconds_cpu: Mutex<f64>,
    pub busy_seconds_gpu: Mutex<f64>,
    /// Batches run on GPU devices, and calls that ran in a batch with others.
    pub device_batches: AtomicU64,
    pub merged_calls: AtomicU64,
}

/// Latency buckets of the histogram, seconds.
pub const BUCKETS: [f64; 10] = [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0, 120.0];

#[derive(Default, Clone)]
pub struct RouteStats {
    pub count: u64,
    pub sum: f64,
    pub buckets: [u64; BUCKETS.len()],
}

impl Metrics {
    pub fn observe(&self, route: &str, status: u16, seconds: f64) {
        let mut all = self.requests.lock().unwrap_or_else(|p| p.into_inner());
        let s = all.entry((route.to_string(), status)).or_default();
        s.count += 1;
        s.sum += seconds;
        for (b, &le) in s.buckets.iter_mut().zip(&BUCKETS) {
            if seconds <= le {
                *b += 1;
            }
        }
    }
}

/// The CPU threads computations run on. Batch work (toy ensembles, rankings: many fits) has its
/// own pool, so that its tasks never queue ahead of a short request's: the engine parallelises
/// through rayon, and one process-wide pool filled by a 20,000-toy job made every other
/// request wait for it. The operating system shares the cores between the two pools.
pub struct Pools {
    /// Fits, hypotests, limits, scans, model loading: whatever is not a batch.
    pub interactive: rayon::ThreadPool,
    /// Calls whose workload is a batch of at least [`BULK_FITS`] fits.
    pub bulk: rayon::ThreadPool,
}

/// Fits from which a call runs on the bulk pool.
pub const BULK_FITS: usize = 64;

impl Pools {
    fn new(threads: usize) -> Result<Self, String> {
        let pool = |name: &'static str| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .thread_name(move |i| format!("ns-{name}-{i}"))
                .build()
                .map_err(|e| format!("cannot start the {name} CPU threads: {e}"))
        };
        Ok(Pools {
            interactive: pool("interactive")?,
            bulk: pool("bulk")?,
        })
    }

    /// The pool of a call with this workload.
    pub fn for_workload(&self, workload: ns_compute::Workload) -> &rayon::ThreadPool {
        match workload {
            ns_compute::Workload::Batch { fits } if fits >= BULK_FITS => &self.bulk,
            _ => &self.interactive,
        }
    }
}

/// The server's shared state.
pub struct AppState {
    pub pools: Pools,
    pub limits: Limits,
    pub models: Mutex<ModelCache>,
    pub jobs: Mutex<HashMap<String, Arc<Job>>>,
    pub workers: Arc<Semaphore>,
    pub waiting: AtomicUsize,
    pub running: AtomicUsize,
    pub next_job: AtomicU64,
    pub metrics: Metrics,
    pub keys: Vec<String>,
    /// Per key: (tokens, last refill).
    pub buckets: Mutex<HashMap<usize, (f64, Instant)>>,
    pub started: Instant,
    /// Set at shutdown: running work stops.
    pub stopping: Arc<AtomicBool>,
    /// The queue of each GPU device used so far, by device name.
    pub device_queues: Mutex<HashMap<String, Arc<DeviceQueue>>>,
    /// The machine's devices, probed at the first GPU request.
    inventory: OnceLock<Inventory>,
}

/// Most device queues (device names such as `cuda:0`, `cuda:0,1`, `vulkan`) a server runs.
const MAX_DEVICE_QUEUES: usize = 16;

impl AppState {
    pub fn new(limits: Limits, keys: Vec<String>) -> Result<Self, String> {
        Ok(AppState {
            pools: Pools::new(std::thread::available_parallelism().map_or(1, |n| n.get()))?,
            workers: Arc::new(Semaphore::new(limits.workers.max(1))),
            limits,
            models: Mutex::new(ModelCache::default()),
            jobs: Mutex::new(HashMap::new()),
            waiting: AtomicUsize::new(0),
            running: AtomicUsize::new(0),
            next_job: AtomicU64::new(1),
            metrics: Metrics::default(),
            keys,
            buckets: Mutex::new(HashMap::new()),
            started: Instant::now(),
            stopping: Arc::new(AtomicBool::new(false)),
            device_queues: Mutex::new(HashMap::new()),
            inventory: OnceLock::new(),
        })
    }

    /// The machine's devices, probed once (loading the CUDA driver and asking every adapter
    /// costs more than a request should): what `/v1/devices` lists and the device queues check.
    pub fn inventory(&self) -> &Inventory {
        self.inventory.get_or_init(Inventory::probe)
    }

    /// The queue of a GPU `device`, started at its first use; an error naming what is missing
    /// where the machine lacks the device.
    pub fn device_queue(self: &Arc<Self>, device: Device) -> Result<Arc<DeviceQueue>, ApiError> {
        available(device, self.inventory()).map_err(|why| {
            ApiError::new(
                axum::http::StatusCode::BAD_REQUEST,
                "device",
                format!("device '{}': {why}", device.spec()),
            )
        })?;
        let mut queues = self.device_queues.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(q) = queues.get(&device.spec()) {
            return Ok(q.clone());
        }
        if queues.len() >= MAX_DEVICE_QUEUES {
            return Err(ApiError::bad_request(format!(
                "device '{}': this server already runs {MAX_DEVICE_QUEUES} device queues ({}); \
                 use one of those device names",
                device.spec(),
                queues.keys().cloned().collect::<Vec<_>>().join(", ")
            )));
        }
        let queue = DeviceQueue::start(
            device,
            self.limits.queue,
            self.limits.gpu_runners,
            self.clone(),
        )
        .map_err(|e| {
            ApiError::new(
                axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                format!("cannot start the {} runner: {e}", device.spec()),
            )
        })?;
        queues.insert(device.spec(), queue.clone());
        Ok(queue)
    }

    /// Tasks waiting in every device queue.
    pub fn device_queue_depth(&self) -> usize {
        self.device_queues
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .map(|q| q.depth())
            .sum()
    }

    /// A worker for one computation: waits in the queue, or 503 when the queue is full.
    pub async fn worker(&self) -> Result<tokio::sync::OwnedSemaphorePermit, ApiError> {
        if let Ok(p) = self.workers.clone().try_acquire_owned() {
            return Ok(p);
        }
        let queued = self.waiting.fetch_add(1, Ordering::SeqCst);
        if queued >= self.limits.queue {
            self.waiting.fetch_sub(1, Ordering::SeqCst);
            return Err(ApiError::busy(
                format!(
                    "{queued} requests are waiting for the {} workers: try again shortly",
                    self.limits.workers
                ),
                1,
            ));
        }
        let permit = self.workers.clone().acquire_owned().await;
        self.waiting.fetch_sub(1, Ordering::SeqCst);
        permit.map_err(|_| ApiError::busy("the server is shutting down", 5))
    }

    /// Drop finished jobs older than the TTL.
    pub fn expire_jobs(&self) {
        let ttl = self.limits.job_ttl;
        self.jobs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|_, j| {
                j.finished_at
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .is_none_or(|t| t.elapsed() < ttl)
            });
    }
}

/// Whether the machine has `device`: the reason where it does not.
fn available(device: Device, inventory: &Inventory) -> Result<(), String> {
    match device {
        Device::Cuda(gpus) => {
            let names = inventory.cuda.as_ref().map_err(String::clone)?;
            match gpus {
                CudaGpus::All if names.is_empty() => Err("this machine has no CUDA GPU".into()),
                CudaGpus::All => Ok(()),
                CudaGpus::Set(bits) => {
                    let highest = 63 - bits.leading_zeros() as usize;
                    if highest < names.len() {
                        Ok(())
                    } else {
                        Err(format!(
                            "GPU {highest} is asked for but this machine has {} CUDA GPU(s)",
                            names.len()
                        ))
                    }
                }
            }
        }
        Device::Vulkan | Device::Metal => match &inventory.adapters {
            Ok(adapters) if !adapters.is_empty() => Ok(()),
            Ok(_) => Err("no Vulkan or Metal adapter is found".into()),
            Err(why) => Err(why.clone()),
        },
        Device::Cpu | Device::Auto => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(text: &str) -> ModelRef {
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn model_ids_are_digests_of_the_canonical_reference() {
        let a = reference(r#"{"workspace": {"b": 1, "a": [1, 2]}}"#);
        let b = reference(r#"{"workspace": {"a": [1, 2], "b": 1}}"#);
        let c = reference(r#"{"workspace": {"a": [1, 2], "b": 1}, "measurement": "m"}"#);
        assert_eq!(model_id(&a), model_id(&b));
        assert_ne!(model_id(&a), model_id(&c));
        assert_eq!(model_id(&a).len(), 32);
    }

    #[test]
    fn the_cache_evicts_the_least_recently_used_within_its_bound() {
        let source = reference(r#"{"workspace": {}}"#);
        // Entries need a loaded model: use a small binned one.
        let ws = serde_json::json!({
            "channels": [{"name": "c", "samples": [{"name": "s", "data": [1.0],
                "modifiers": [{"name": "mu", "type": "normfactor", "data": null}]}]}],
            "observations": [{"name": "c", "data": [1.0]}],
            "measurements": [{"name": "m", "config": {"poi": "mu", "parameters": []}}],
            "version": "1.0.0"
        });
        let loaded = Arc::new(
            ModelRef::ByContent(ns_source::PyhfRef {
                workspace: ns_source::Source::Inline(ws),
                ..ns_source::PyhfRef::file("unused")
            })
            .load_model(
                &|_: &std::path::Path| -> ns_core::Result<serde_json::Value> {
                    unreachable!("inline")
                },
            )
            .unwrap(),
        );
        let mut cache = ModelCache::default();
        cache.insert("a".into(), loaded.clone(), source.clone(), 40, 100);
        cache.insert("b".into(), loaded.clone(), source.clone(), 40, 100);
        assert!(cache.get("a").is_some()); // a is now the more recent
        cache.insert("c".into(), loaded.clone(), source.clone(), 40, 100);
        assert!(cache.get("b").is_none(), "b was the least recently used");
        assert!(cache.get("a").is_some() && cache.get("c").is_some());
        assert!(cache.remove("a") && !cache.remove("a"));
        assert_eq!(cache.len(), 1);
    }
}
