//! Many fits at once: one per CPU thread, or all together in lockstep on a device (one batched
//! evaluation per optimizer step), or entirely on the device where the backend has its own
//! optimizer.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use ns_compute::backend::{DeviceFitOutput, DeviceFitProblem, FitSignal};
use ns_compute::{Backend, Batching, Datasets, PreparedData, Resident};
use ns_core::optim::LbfgsbOptions;
use ns_core::optim::Termination;
use ns_core::{Error, Result};
use rayon::prelude::*;

use super::result::{OptimizerEnd, assemble_result};
use super::{FitConfig, FitJob, FitResult, FitRun, Fitter};

/// Fits per launch of the device optimizer (and per chunk of a device batch): several waves of
/// resident blocks (throughput), a fraction of a second on large models (how long an interrupt
/// may wait), and bounded host memory for the fits' state.
const DEVICE_LAUNCH_FITS: usize = 4096;

/// A lockstep batch hands its runs to the CPU once no more than one in this many is left
/// (measured on the H100's Vulkan driver, docs/gpu-f32.md: the last eighth of 4000 toy fits took
/// two thirds of the batch's steps). A single fit never qualifies: it stays on its device.
const LOCKSTEP_TAIL: usize = 8;

impl Fitter<'_> {
    /// Many fits at once, results in job order; each job's error, if any, is its own. On a
    /// parallel backend (CPU) one fit per thread; on a lockstep backend (GPU) the datasets are
    /// uploaded once and the fits advance together.
    pub fn fit_batch(
        &self,
        datasets: &[PreparedData],
        jobs: &[FitJob],
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Vec<Result<FitResult>>> {
        if let Some(job) = jobs.iter().find(|j| j.data >= datasets.len()) {
            return Err(Error::InvalidInput(format!(
                "fit job refers to dataset {} of {}",
                job.data,
                datasets.len()
            )));
        }
        match self.backend.batching() {
            Batching::Parallel => {
                let done = AtomicUsize::new(0);
                let results = jobs
                    .par_iter()
                    .map(|job| {
                        let r = self.fit(&datasets[job.data], &job.config);
                        progress(done.fetch_add(1, Ordering::Relaxed) + 1);
                        r
                    })
                    .collect();
                // An interrupt fails the batch, not only the fits that saw it.
                self.check_interrupt()?;
                Ok(results)
            }
            Batching::Lockstep => {
                let resident = self.backend.upload(datasets)?;
                self.fit_batch_on(&resident, datasets, jobs, progress)
            }
        }
    }

    /// Fit caller-supplied datasets, each with its own starting point and bounds (`init[i]`,
    /// `bounds[i]`; one entry is shared by all), in one batch.
    pub fn fit_datasets(
        &self,
        datasets: &[PreparedData],
        init: &[Vec<f64>],
        bounds: &[Vec<(f64, f64)>],
        config: &FitConfig,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Vec<Result<FitResult>>> {
        let pick = |n: usize, what: &str, i: usize| -> Result<usize> {
            match n {
                1 => Ok(0),
                n if n == datasets.len() => Ok(i),
                n => Err(Error::InvalidInput(format!(
                    "{n} {what} given for {} datasets (give one, or one per dataset)",
                    datasets.len()
                ))),
            }
        };
        let jobs = (0..datasets.len())
            .map(|i| {
                Ok(FitJob {
                    data: i,
                    config: Arc::new(FitConfig {
                        init: init[pick(init.len(), "starting points", i)?].clone(),
                        bounds: bounds[pick(bounds.len(), "sets of bounds", i)?].clone(),
                        ..config.clone()
                    }),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        self.fit_batch(datasets, &jobs, progress)
    }

    /// Lockstep (or device-optimizer) fits against datasets resident on the backend; `host`
    /// holds the same data, for scaling, polish and uncertainties.
    pub(crate) fn fit_batch_on(
        &self,
        resident: &Resident,
        host: &[PreparedData],
        jobs: &[FitJob],
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Vec<Result<FitResult>>> {
        // The device optimizer takes the jobs launch by launch (bounded host memory, an interrupt
        // seen between launches); the host lockstep advances them all together.
        if let Some(on_device) = self.device_optimizer_applies(jobs).then_some(resident) {
            return self.fit_pipelined(on_device, host, jobs, progress);
        }
        self.check_interrupt()?;
        let mut started = self.start_chunk(host, jobs);
        self.drive_lockstep(
            &mut started.runs,
            &started.which,
            Datasets::Resident(resident),
            host,
            progress,
        )?;
        let results = self.complete_chunk(host, jobs, started, None);
        progress(results.len());
        Ok(results)
    }

    /// Device-optimizer fits, launch after launch of [`DEVICE_LAUNCH_FITS`]: while the device
    /// runs one launch, the host completes the previous one and starts the next, so neither waits
    /// for the other.
    fn fit_pipelined(
        &self,
        resident: &Resident,
        host: &[PreparedData],
        jobs: &[FitJob],
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Vec<Result<FitResult>>> {
        let chunks: Vec<&[FitJob]> = jobs.chunks(DEVICE_LAUNCH_FITS).collect();
        let mut results = Vec::with_capacity(jobs.len());
        let mut upcoming = chunks.first().map(|c| self.start_chunk(host, c));
        let mut launched: Option<(&[FitJob], StartedChunk, Option<DeviceEnds>)> = None;
        for k in 0..chunks.len() {
            self.check_interrupt()?;
            let current = upcoming
                .take()
                .expect("each launch is started before it runs");
            let (ends, done, next) = std::thread::scope(|scope| {
                let device = scope.spawn(|| {
                    current.run_on_device(&*self.backend, resident, chunks[k], &self.interrupt)
                });
                let done = launched
                    .take()
                    .map(|(c, started, ends)| self.complete_chunk(host, c, started, ends.as_ref()));
                let next = chunks.get(k + 1).map(|c| self.start_chunk(host, c));
                let ends = device.join().expect("the device launch thread panicked");
                (ends, done, next)
            });
            if let Some(done) = done {
                results.extend(done);
                progress(results.len());
            }
            launched = Some((chunks[k], current, ends?));
            upcoming = next;
        }
        if let Some((c, started, ends)) = launched {
            results.extend(self.complete_chunk(host, c, started, ends.as_ref()));
            progress(results.len());
        }
        Ok(results)
    }

    /// Start every job's fit on the host (scaling, starting point), in parallel.
    fn start_chunk(&self, host: &[PreparedData], jobs: &[FitJob]) -> StartedChunk {
        let started: Vec<Result<FitRun>> = jobs
            .par_iter()
            .map(|job| self.start(&host[job.data], &job.config))
            .collect();
        let mut chunk = StartedChunk {
            runs: Vec::with_capacity(jobs.len()),
            which: Vec::with_capacity(jobs.len()),
            slots: Vec::with_capacity(jobs.len()),
        };
        for (k, r) in started.into_iter().enumerate() {
            match r {
                Ok(run) => {
                    chunk.slots.push(Ok(chunk.runs.len()));
                    chunk.runs.push(run);
                    chunk.which.push(jobs[k].data as u32);
                }
                Err(e) => chunk.slots.push(Err(e)),
            }
        }
        chunk
    }

    /// Each job's result: its fit completed (polish, uncertainties) in parallel, from the device
    /// optimizer's `ends` or from its run driven to the end on the host; or the error it started
    /// with.
    fn complete_chunk(
        &self,
        host: &[PreparedData],
        jobs: &[FitJob],
        started: StartedChunk,
        ends: Option<&DeviceEnds>,
    ) -> Vec<Result<FitResult>> {
        let StartedChunk { runs, slots, .. } = started;
        slots
            .into_par_iter()
            .zip(jobs.par_iter())
            .map(|(slot, job)| {
                let r = slot?;
                let data = &host[job.data];
                match ends {
                    None => self.finish(&runs[r], data, &job.config),
                    Some(ends) => self.complete_device_fit(&runs[r], ends, r, data, &job.config),
                }
            })
            .collect()
    }

    /// Advance every run until all have finished, evaluating the points of all active runs
    /// together (one batch per step); finished runs drop out of the batch. Run `i` evaluates
    /// against `datasets[which[i]]` (`host[which[i]]` on the host). Once no more than one run in
    /// [`LOCKSTEP_TAIL`] is left, the CPU finishes them ([`Self::finish_on_host`]). `progress`
    /// gets the number of finished runs.
    pub(crate) fn drive_lockstep(
        &self,
        runs: &mut [FitRun],
        which: &[u32],
        datasets: Datasets,
        host: &[PreparedData],
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<()> {
        let n = self.model.n_params();
        // Which runs still ask for points; all host work of a step (asks, gathering the points,
        // tells) runs in parallel, so the host keeps up with a device batch of thousands of fits.
        let mut asking = vec![true; runs.len()];
        let (mut points, mut f, mut grad) = (Vec::new(), Vec::new(), Vec::new());
        let mut finished = 0;
        loop {
            self.check_interrupt()?;
            runs.par_iter_mut()
                .zip(asking.par_iter_mut())
                .filter(|(_, asks)| **asks)
                .for_each(|(run, asks)| *asks = run.ask().is_some());
            let active: Vec<usize> = (0..runs.len()).filter(|&r| asking[r]).collect();
            if runs.len() - active.len() > finished {
                finished = runs.len() - active.len();
                progress(finished);
            }
            if active.is_empty() {
                break;
            }
            if active.len() * LOCKSTEP_TAIL <= runs.len() {
                return self.finish_on_host(runs, &active, which, host, progress);
            }
            points.resize(active.len() * n, 0.0);
            let batch_which: Vec<u32> = active.iter().map(|&r| which[r]).collect();
            {
                let runs: &[FitRun] = runs;
                points
                    .par_chunks_mut(n.max(1))
                    .zip(active.par_iter())
                    .for_each(|(point, &r)| point.copy_from_slice(&runs[r].full));
            }
            f.resize(active.len(), 0.0);
            grad.resize(active.len() * n, 0.0);
            self.objective_batch(&points, datasets, &batch_which, &mut f, &mut grad)?;
            // The optimizer steps of many fits are independent: run them in parallel.
            let mut chosen: Vec<&mut FitRun> = Vec::with_capacity(active.len());
            let mut next = active.iter().peekable();
            for (i, run) in runs.iter_mut().enumerate() {
                if next.peek() == Some(&&i) {
                    next.next();
                    chosen.push(run);
                }
            }
            chosen
                .into_par_iter()
                .enumerate()
                .for_each(|(k, run)| run.tell(f[k], &grad[k * n..(k + 1) * n]));
        }
        Ok(())
    }

    /// The tail of a lockstep batch, finished by the CPU: each run continues its own optimizer
    /// with f64 evaluations on the likelihood's CPU backend, one run per thread. A batch's last
    /// fits take as many steps as its first hundreds (its slowest fits set the count), each a
    /// device round trip for a handful of rows; on the CPU they run side by side. The optimizer
    /// state carries over (an f32 run goes on in f64, a finer objective: it only descends).
    fn finish_on_host(
        &self,
        runs: &mut [FitRun],
        active: &[usize],
        which: &[u32],
        host: &[PreparedData],
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<()> {
        let (n, total) = (self.model.n_params(), runs.len());
        let mut chosen: Vec<(&mut FitRun, usize)> = Vec::with_capacity(active.len());
        let mut next = active.iter().peekable();
        for (i, run) in runs.iter_mut().enumerate() {
            if next.peek() == Some(&&i) {
                next.next();
                chosen.push((run, i));
            }
        }
        chosen.into_par_iter().try_for_each(|(run, r)| {
            let data = &host[which[r] as usize];
            let mut grad = vec![0.0; n];
            while let Some(x) = run.ask() {
                self.check_interrupt()?;
                let x = x.to_vec();
                let f = self.objective_on(self.host(), &x, data, &mut grad)?;
                run.tell(f, &grad);
            }
            Ok::<(), Error>(())
        })?;
        progress(total);
        Ok(())
    }

    /// Whether the backend's own optimizer runs these jobs: it runs every fit of a batch with one
    /// set of options and at most its memory of correction pairs; `Settings::gpu_optimizer_on_host`
    /// keeps the optimizer on the host (lockstep, one launch per step) for comparison.
    fn device_optimizer_applies(&self, jobs: &[FitJob]) -> bool {
        let Some(first) = jobs.first() else {
            return false;
        };
        let o = first.config.optimizer;
        device_optimizer_takes(&*self.backend, o) && jobs.iter().all(|j| j.config.optimizer == o)
    }

    /// Complete fit `k` of a device-optimizer launch (run `run`): its result, polished and
    /// with uncertainties where asked.
    pub(crate) fn complete_device_fit(
        &self,
        run: &FitRun,
        ends: &DeviceEnds,
        k: usize,
        data: &PreparedData,
        config: &FitConfig,
    ) -> Result<FitResult> {
        let result = assemble_result(&run.free, &run.scale, config, ends.end(k), data.constant);
        self.complete(result, data, config, run)
    }
}

/// Whether `backend`'s own optimizer can run fits with `options` (`Settings::gpu_optimizer_on_host`
/// keeps the optimizer on the host for comparison).
pub(crate) fn device_optimizer_takes(backend: &dyn Backend, options: LbfgsbOptions) -> bool {
    !ns_core::settings::settings().gpu_optimizer_on_host
        && backend
            .device_optimizer_memory()
            .is_some_and(|max| (1..=max).contains(&options.memory))
}

/// Run prepared fits to completion on `backend`'s optimizer: run `r` against dataset `which[r]`
/// of `datasets`, with its row of `signal` where the model has external yields. Runs with
/// different iteration limits (those capped for the host's handover, `Fitter::handover_cap`,
/// beside others) go in one launch per limit: a fit's end depends on its own run only, never on
/// the other fits of its batch.
pub(crate) fn device_fits(
    backend: &dyn Backend,
    runs: &[FitRun],
    which: &[u32],
    datasets: &Resident,
    options: LbfgsbOptions,
    signal: Option<FitSignal>,
    stop: &AtomicBool,
) -> Result<DeviceEnds> {
    let n = runs.first().map_or(0, |r| r.full.len());
    let mut limits: Vec<usize> = runs.iter().map(FitRun::max_iterations).collect();
    limits.sort_unstable();
    limits.dedup();
    if limits.len() <= 1 {
        let all: Vec<usize> = (0..runs.len()).collect();
        let out = launch(backend, runs, &all, which, datasets, options, signal, stop)?;
        return Ok(DeviceEnds { out, n_params: n });
    }
    let mut out = DeviceFitOutput::zeros(runs.len(), n);
    for limit in limits {
        let members: Vec<usize> = (0..runs.len())
            .filter(|&r| runs[r].max_iterations() == limit)
            .collect();
        let part = launch(
            backend, runs, &members, which, datasets, options, signal, stop,
        )?;
        for (k, &r) in members.iter().enumerate() {
            out.x[r * n..(r + 1) * n].copy_from_slice(&part.x[k * n..(k + 1) * n]);
            out.g[r * n..(r + 1) * n].copy_from_slice(&part.g[k * n..(k + 1) * n]);
            out.f[r] = part.f[k];
            out.iterations[r] = part.iterations[k];
            out.evaluations[r] = part.evaluations[k];
            out.termination[r] = part.termination[k];
        }
    }
    Ok(DeviceEnds { out, n_params: n })
}

/// One launch of the device optimizer over `runs[members]`, which share one iteration limit.
#[allow(clippy::too_many_arguments)]
fn launch(
    backend: &dyn Backend,
    runs: &[FitRun],
    members: &[usize],
    which: &[u32],
    datasets: &Resident,
    options: LbfgsbOptions,
    signal: Option<FitSignal>,
    stop: &AtomicBool,
) -> Result<DeviceFitOutput> {
    let n = runs.first().map_or(0, |r| r.full.len());
    let rows = members.len() * n;
    let (mut init, mut free_index) = (vec![0.0; rows], vec![0u32; rows]);
    let (mut lower, mut upper, mut scale) = (vec![0.0; rows], vec![0.0; rows], vec![1.0; rows]);
    let mut n_free = Vec::with_capacity(members.len());
    for (m, run) in members.iter().map(|&r| &runs[r]).enumerate() {
        let base = m * n;
        // The device starts from init·scale projected into the box, as the host optimizer.
        init[base..base + n].copy_from_slice(&run.full);
        for (k, &i) in run.free.iter().enumerate() {
            free_index[base + k] = i as u32;
            lower[base + k] = run.lower[k];
            upper[base + k] = run.upper[k];
            scale[base + k] = run.scale[k];
        }
        n_free.push(run.free.len() as i32);
    }
    let dataset: Vec<u32> = members.iter().map(|&r| which[r]).collect();
    // The members' rows of the signal (one row of equal length per run).
    let signal_rows: Option<Vec<f64>> = signal.as_ref().map(|s| {
        let width = s.values.len() / runs.len().max(1);
        members
            .iter()
            .flat_map(|&r| &s.values[r * width..(r + 1) * width])
            .copied()
            .collect()
    });
    let problem = DeviceFitProblem {
        init: &init,
        free_index: &free_index,
        n_free: &n_free,
        lower: &lower,
        upper: &upper,
        scale: &scale,
        dataset: &dataset,
        signal: signal
            .zip(signal_rows.as_deref())
            .map(|(s, values)| FitSignal {
                attached: s.attached,
                values,
            }),
    };
    let max_iterations = members
        .first()
        .map_or(options.max_iterations, |&r| runs[r].max_iterations());
    backend.fit_lbfgsb(
        &problem,
        datasets,
        LbfgsbOptions {
            max_iterations,
            ..options
        },
        stop,
    )
}

/// Fits of a launch, started on the host: the runs that started, the dataset of each, and per job
/// its run's index or the error it started with.
struct StartedChunk {
    runs: Vec<FitRun>,
    which: Vec<u32>,
    slots: Vec<Result<usize>>,
}

impl StartedChunk {
    /// Run the started fits to their end on `backend`'s optimizer.
    fn run_on_device(
        &self,
        backend: &dyn Backend,
        datasets: &Resident,
        jobs: &[FitJob],
        stop: &AtomicBool,
    ) -> Result<Option<DeviceEnds>> {
        if self.runs.is_empty() {
            return Ok(None);
        }
        device_fits(
            backend,
            &self.runs,
            &self.which,
            datasets,
            jobs[0].config.optimizer,
            None,
            stop,
        )
        .map(Some)
    }
}

/// End points of fits run by the device optimizer.
pub(crate) struct DeviceEnds {
    out: DeviceFitOutput,
    n_params: usize,
}

impl DeviceEnds {
    fn end(&self, run: usize) -> OptimizerEnd<'_> {
        let row = run * self.n_params..(run + 1) * self.n_params;
        OptimizerEnd {
            x: &self.out.x[row.clone()],
            g: &self.out.g[row],
            f: self.out.f[run],
            iterations: self.out.iterations[run].max(0) as usize,
            evaluations: self.out.evaluations[run].max(0) as usize,
            // A code no reason has would be a kernel bug: report it as a failed start, never
            // as converged.
            termination: Termination::from_device_code(self.out.termination[run])
                .unwrap_or(Termination::NonFiniteStart),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use ns_compute::{Device, ExternalSignal, SignalBatch};

    use super::*;
    use crate::optimizer::Lbfgsb;

    /// A device optimizer that records each launch (fits, iteration limit) and ends every fit
    /// where it started, with its dataset index as its objective and the launch's limit as its
    /// iterations.
    #[derive(Default)]
    struct RecordingOptimizer {
        launches: Mutex<Vec<(usize, usize)>>,
    }

    impl Backend for RecordingOptimizer {
        fn device(&self) -> Device {
            Device::Cpu
        }
        fn description(&self) -> String {
            "recording optimizer".into()
        }
        fn batching(&self) -> Batching {
            Batching::Lockstep
        }
        fn upload(&self, datasets: &[PreparedData]) -> Result<Resident> {
            Ok(Resident::new(datasets.len(), ()))
        }
        fn nll_grad_batch(
            &self,
            _: &[f64],
            _: Datasets,
            _: &[u32],
            _: &mut [f64],
            _: &mut [f64],
            _: &AtomicBool,
        ) -> Result<()> {
            unreachable!("the test launches the device optimizer only")
        }
        fn attach_signal(&self, _: &ExternalSignal) -> Result<Resident> {
            unreachable!("no signal in the test")
        }
        fn nll_grad_signal(&self, _: &Resident, _: SignalBatch) -> Result<()> {
            unreachable!("no signal in the test")
        }
        fn device_optimizer_memory(&self) -> Option<usize> {
            Some(10)
        }
        fn fit_lbfgsb(
            &self,
            problem: &DeviceFitProblem,
            _: &Resident,
            options: LbfgsbOptions,
            _: &AtomicBool,
        ) -> Result<DeviceFitOutput> {
            let fits = problem.dataset.len();
            self.launches
                .lock()
                .unwrap()
                .push((fits, options.max_iterations));
            let mut out = DeviceFitOutput::zeros(fits, problem.init.len() / fits.max(1));
            out.x.copy_from_slice(problem.init);
            for (k, &d) in problem.dataset.iter().enumerate() {
                out.f[k] = d as f64;
                out.iterations[k] = options.max_iterations as i32;
            }
            Ok(out)
        }
    }

    fn run(start: f64, max_iterations: usize) -> FitRun {
        let x = [start, start + 0.5];
        let (lower, upper) = ([-10.0; 2], [10.0; 2]);
        let options = LbfgsbOptions {
            max_iterations,
            ..LbfgsbOptions::default()
        };
        FitRun {
            free: vec![0, 1],
            scale: vec![1.0; 2],
            lower: lower.to_vec(),
            upper: upper.to_vec(),
            full: x.to_vec(),
            bounds: vec![(-10.0, 10.0); 2],
            free_grad: vec![0.0; 2],
            state: Lbfgsb::new(&x, &lower, &upper, options),
        }
    }

    /// Runs capped for the host's handover and runs not go in one launch per limit, and each
    /// result comes back to its own run: a fit's end does not depend on the others in its batch.
    #[test]
    fn runs_with_different_iteration_limits_go_in_separate_launches() {
        let backend = RecordingOptimizer::default();
        let runs = [run(1.0, 100), run(2.0, 2000), run(3.0, 100), run(4.0, 2000)];
        let which = [10, 11, 12, 13];
        let resident = Resident::new(14, ());
        let stop = AtomicBool::new(false);
        let options = LbfgsbOptions::default();
        let ends = device_fits(&backend, &runs, &which, &resident, options, None, &stop).unwrap();
        assert_eq!(*backend.launches.lock().unwrap(), [(2, 100), (2, 2000)]);
        for (r, run) in runs.iter().enumerate() {
            let end = ends.end(r);
            assert_eq!(end.f, which[r] as f64, "run {r}");
            assert_eq!(end.iterations, run.max_iterations(), "run {r}");
            assert_eq!(end.x, &run.full[..], "run {r}");
        }
        // One limit: one launch of every run.
        let same = [run(1.0, 2000), run(2.0, 2000)];
        device_fits(
            &backend,
            &same,
            &which[..2],
            &resident,
            options,
            None,
            &stop,
        )
        .unwrap();
        assert_eq!(backend.launches.lock().unwrap()[2], (2, 2000));
    }
}
