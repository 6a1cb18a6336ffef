//! GPU work: one queue per device, drained by that device's runner threads (`--gpu-runners`).
//! A runner takes the oldest task and every queued task that may share its batch — the same
//! model and the same [`MergeKey`]: toy tests or rankings on that device with one tolerance —
//! and runs them as one device batch ([`run_merged`]); each answer is the bits the task gets
//! alone. A runner keeps its device session (the model on the GPU, its kernels loaded) open
//! while the next batch is of the same model, and closes it after [`SESSION_IDLE`] without work.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use ns_api::call::Call;
use ns_api::merge::{MergeKey, merge_key, run_merged};
use ns_compute::{Device, Workload};
use ns_inference::Fitter;
use ns_source::LoadedModel;
use serde_json::Value;
use tokio::sync::oneshot;

use crate::error::ApiError;
use crate::state::{AppState, Job, JobState};

/// How long a runner keeps an idle device session open for another batch of its model.
const SESSION_IDLE: Duration = Duration::from_secs(60);

/// Most progress steps (two per toy, one per ranking refit) a merged batch gathers: ~16 000 toys
/// per hypothesis, or ~40 rankings of a 200-parameter model — a few device launches, so that a
/// small request does not wait for a huge one. A task larger than this runs alone.
pub const MERGE_STEPS: u64 = 1 << 15;

/// One call waiting for its device.
pub struct Task {
    pub model_id: String,
    pub model: Arc<LoadedModel>,
    pub call: Call,
    /// Set on timeout, cancellation or shutdown.
    pub stop: Arc<AtomicBool>,
    /// Set when the task's batch starts (its timeout counts from then).
    pub started: Arc<AtomicBool>,
    pub job: Option<Arc<Job>>,
}

/// A task in the queue, with where its answer goes.
struct Queued {
    task: Task,
    reply: oneshot::Sender<Result<Value, ApiError>>,
}

impl Task {
    /// Tasks of one group may share a batch.
    fn group(&self) -> Option<(String, MergeKey)> {
        merge_key(&self.call).map(|k| (self.model_id.clone(), k))
    }

    fn steps(&self) -> u64 {
        self.call.request.progress_steps(self.model.likelihood())
    }
}

impl Queued {
    fn answer(self, answer: Result<Value, ApiError>) {
        // The caller may have stopped waiting (timeout, shutdown): nobody to answer then.
        let _ = self.reply.send(answer);
    }
}

/// The queue of one device.
pub struct DeviceQueue {
    device: Device,
    pending: Mutex<VecDeque<Queued>>,
    ready: Condvar,
    capacity: usize,
}

impl DeviceQueue {
    /// A queue for `device` holding at most `capacity` waiting tasks, and its `runners` threads.
    pub fn start(
        device: Device,
        capacity: usize,
        runners: usize,
        state: Arc<AppState>,
    ) -> std::io::Result<Arc<DeviceQueue>> {
        let queue = Arc::new(DeviceQueue {
            device,
            pending: Mutex::new(VecDeque::new()),
            ready: Condvar::new(),
            capacity,
        });
        for i in 0..runners.max(1) {
            let (queue, state) = (queue.clone(), state.clone());
            std::thread::Builder::new()
                .name(format!("{}-runner-{i}", device.spec()))
                .spawn(move || runner(&queue, &state))?;
        }
        Ok(queue)
    }

    /// Queue a task: where its answer will come, or 503 when the queue is full.
    pub fn submit(
        &self,
        task: Task,
    ) -> Result<oneshot::Receiver<Result<Value, ApiError>>, ApiError> {
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        if pending.len() >= self.capacity {
            return Err(ApiError::busy(
                format!(
                    "{} requests are waiting for {}: try again shortly",
                    pending.len(),
                    self.device.spec()
                ),
                1,
            ));
        }
        let (reply, answer) = oneshot::channel();
        pending.push_back(Queued { task, reply });
        drop(pending);
        self.ready.notify_one();
        Ok(answer)
    }

    /// Tasks waiting.
    pub fn depth(&self) -> usize {
        self.pending.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// The next batch: waits for work, at most `idle` when given (then `None`).
    fn next_batch(&self, idle: Option<Duration>) -> Option<Vec<Queued>> {
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if !pending.is_empty() {
                return Some(take_batch(
                    &mut pending,
                    |q| q.task.group(),
                    |q| q.task.steps(),
                    MERGE_STEPS,
                ));
            }
            match idle {
                None => pending = self.ready.wait(pending).unwrap_or_else(|p| p.into_inner()),
                Some(limit) => {
                    let (p, waited) = self
                        .ready
                        .wait_timeout(pending, limit)
                        .unwrap_or_else(|p| p.into_inner());
                    pending = p;
                    if waited.timed_out() && pending.is_empty() {
                        return None;
                    }
                }
            }
        }
    }
}

/// The oldest entry and every later one of its group (in queue order) while the batch's steps
/// stay within `budget`; an entry without a group goes alone. The rest keep their order.
fn take_batch<T, G: PartialEq>(
    pending: &mut VecDeque<T>,
    group: impl Fn(&T) -> Option<G>,
    steps: impl Fn(&T) -> u64,
    budget: u64,
) -> Vec<T> {
    let Some(first) = pending.pop_front() else {
        return Vec::new();
    };
    let Some(wanted) = group(&first) else {
        return vec![first];
    };
    let mut total = steps(&first);
    let mut batch = vec![first];
    let mut i = 0;
    while i < pending.len() {
        let cost = steps(&pending[i]);
        if total.saturating_add(cost) <= budget && group(&pending[i]).as_ref() == Some(&wanted) {
            total += cost;
            batch.extend(pending.remove(i));
        } else {
            i += 1;
        }
    }
    batch
}

/// A runner: batch after batch, the device session kept while the model stays the same.
fn runner(queue: &DeviceQueue, state: &AppState) {
    let mut carried: Option<Vec<Queued>> = None;
    loop {
        let Some(mut batch) = carried.take().or_else(|| queue.next_batch(None)) else {
            continue;
        };
        let model = batch[0].task.model.clone();
        let model_id = batch[0].task.model_id.clone();
        let mut fitter =
            match Fitter::on_device(model.likelihood(), queue.device, Workload::Sequential) {
                Ok(f) => f,
                Err(e) => {
                    let error = ApiError::from(e);
                    for queued in batch {
                        queued.answer(Err(error.clone()));
                    }
                    continue;
                }
            };
        loop {
            fitter = run_batch(state, fitter, &model, batch);
            match queue.next_batch(Some(SESSION_IDLE)) {
                Some(next) if next[0].task.model_id == model_id => batch = next,
                next => {
                    carried = next;
                    break;
                }
            }
        }
    }
}

/// Run one batch on `fitter` (of `model`, the batch's model) and answer its tasks; the fitter
/// comes back for the next batch. The batch stops once every one of its tasks has stopped.
fn run_batch<'m>(
    state: &AppState,
    fitter: Fitter<'m>,
    model: &LoadedModel,
    batch: Vec<Queued>,
) -> Fitter<'m> {
    // Tasks stopped while they waited are answered without running.
    let (batch, stopped): (Vec<Queued>, Vec<Queued>) = batch
        .into_iter()
        .partition(|q| !q.task.stop.load(Ordering::Relaxed));
    for queued in stopped {
        queued.answer(Err(crate::error::stopped(state)));
    }
    if batch.is_empty() {
        return fitter;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let fitter = fitter.with_interrupt(stop.clone());
    state.running.fetch_add(1, Ordering::SeqCst);
    let start = Instant::now();
    let tasks: Vec<&Task> = batch.iter().map(|q| &q.task).collect();
    let steps: Vec<u64> = tasks.iter().map(|t| t.steps()).collect();
    let total = steps.iter().sum::<u64>().max(1);
    for (task, &own) in tasks.iter().zip(&steps) {
        task.started.store(true, Ordering::Relaxed);
        if let Some(job) = &task.job {
            job.total_steps.store(own, Ordering::Relaxed);
            job.set(JobState::Running);
        }
    }
    // A merged batch reports its steps over all tasks: each job gets its share.
    let progress = |done: usize| {
        for (task, &own) in tasks.iter().zip(&steps) {
            if let Some(job) = &task.job {
                let share = (done as u64).saturating_mul(own) / total;
                job.done_steps.store(share.min(own), Ordering::Relaxed);
            }
        }
    };
    let finished = AtomicBool::new(false);
    let answers: Vec<Result<Value, ApiError>> = std::thread::scope(|scope| {
        scope.spawn(|| {
            while !finished.load(Ordering::Relaxed) {
                if tasks.iter().all(|t| t.stop.load(Ordering::Relaxed)) {
                    stop.store(true, Ordering::Relaxed);
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        let outcomes = if let [task] = tasks.as_slice() {
            Ok(vec![task.call.run_on(&fitter, &progress)])
        } else {
            let calls: Vec<&Call> = tasks.iter().map(|t| &t.call).collect();
            run_merged(&calls, &fitter, &progress)
        };
        finished.store(true, Ordering::Relaxed);
        match outcomes {
            Ok(outcomes) => outcomes
                .into_iter()
                .zip(&tasks)
                .map(|(outcome, task)| {
                    outcome
                        .map(|o| crate::routes::report(model, &task.call, o))
                        .map_err(|e| crate::error::engine(e, state))
                })
                .collect(),
            Err(e) => {
                let error = crate::error::engine(e, state);
                tasks.iter().map(|_| Err(error.clone())).collect()
            }
        }
    });
    let metrics = &state.metrics;
    *metrics
        .busy_seconds_gpu
        .lock()
        .unwrap_or_else(|p| p.into_inner()) += start.elapsed().as_secs_f64();
    metrics.device_batches.fetch_add(1, Ordering::Relaxed);
    if batch.len() > 1 {
        metrics
            .merged_calls
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
    }
    state.running.fetch_sub(1, Ordering::SeqCst);
    for (queued, answer) in batch.into_iter().zip(answers) {
        queued.answer(answer);
    }
    fitter
}

#[cfg(test)]
mod tests {
    use super::take_batch;
    use std::collections::VecDeque;

    /// (name, group, steps)
    fn take(
        pending: &mut VecDeque<(&'static str, Option<u8>, u64)>,
        budget: u64,
    ) -> Vec<&'static str> {
        take_batch(pending, |t| t.1, |t| t.2, budget)
            .into_iter()
            .map(|t| t.0)
            .collect()
    }

    #[test]
    fn a_batch_gathers_the_oldest_tasks_group_within_the_budget_and_keeps_the_rest_in_order() {
        let mut pending = VecDeque::from([
            ("a", Some(1), 10),
            ("b", Some(2), 10),
            ("c", Some(1), 10),
            ("d", None, 10),
            ("e", Some(1), 100),
            ("f", Some(1), 5),
        ]);
        // e would pass the budget; f still fits after it.
        assert_eq!(take(&mut pending, 30), ["a", "c", "f"]);
        assert_eq!(take(&mut pending, 30), ["b"]);
        assert_eq!(
            take(&mut pending, 30),
            ["d"],
            "a task without a group goes alone"
        );
        assert_eq!(
            take(&mut pending, 30),
            ["e"],
            "a task over the budget goes alone"
        );
        assert!(take(&mut pending, 30).is_empty());
    }
}
