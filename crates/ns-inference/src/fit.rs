//! Maximum-likelihood fits of a HistFactory model: free, with the POI fixed, or with any set of
//! fixed parameters; uncertainties, covariance and correlations from the Hessian.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use ns_compute::cuda::{
    CudaSession, DEVICE_MAX_MEMORY, DeviceDatasets, DeviceFitOptions, DeviceFitOutput,
    DeviceFitProblem, DeviceInfo,
};
use ns_compute::{CpuEvaluator, PreparedData, Scratch};
use ns_core::{Error, Result};
use ns_translate::HistFactoryModel;
use rayon::prelude::*;

use crate::device::{BatchData, Device, Workload};

use crate::hessian::{Structure, arrow_variances};
use crate::linalg::{cholesky, cholesky_inverse, inverse};
use crate::optimizer::{Lbfgsb, LbfgsbOptions, Termination};

/// Starting point, box and fixed parameters of a fit (pyhf's `init_pars`, `par_bounds`,
/// `fixed_params`). Fixed parameters are removed from the problem, not clamped.
#[derive(Clone, Debug)]
pub struct FitConfig {
    pub init: Vec<f64>,
    pub bounds: Vec<(f64, f64)>,
    pub fixed: Vec<bool>,
    pub optimizer: LbfgsbOptions,
    /// Compute the Hessian, covariance and uncertainties at the minimum.
    pub uncertainties: bool,
    /// Per-parameter variable scaling of the optimizer (√curvature of twice_nll); computed at
    /// the start of each fit when `None`. Set it once (`Fitter::with_scale`) for many similar
    /// fits — toys, scans, refits — to save one gradient evaluation per parameter each.
    pub scale: Option<Vec<f64>>,
}

impl FitConfig {
    /// The model's suggested init, bounds and fixed parameters.
    pub fn suggested(model: &HistFactoryModel) -> Self {
        FitConfig {
            init: model.suggested_init(),
            bounds: model.suggested_bounds(),
            fixed: model.suggested_fixed(),
            optimizer: LbfgsbOptions::default(),
            uncertainties: false,
            scale: None,
        }
    }

    /// The same configuration with parameter `index` fixed at `value`.
    pub fn with_fixed(&self, index: usize, value: f64) -> Self {
        let mut c = self.clone();
        c.init[index] = value;
        c.fixed[index] = true;
        c
    }
}

/// The result of a fit. Vectors are over all parameters in pyhf order; fixed parameters have
/// zero uncertainty.
#[derive(Clone, Debug)]
pub struct FitResult {
    pub parameters: Vec<f64>,
    pub twice_nll: f64,
    pub converged: bool,
    pub termination: Termination,
    pub iterations: usize,
    pub evaluations: usize,
    /// ‖projected gradient of twice_nll‖∞ at the result.
    pub projected_gradient: f64,
    pub uncertainties: Option<Vec<f64>>,
    /// Covariance (row-major, n×n) of the parameters; zero rows for fixed ones.
    pub covariance: Option<Vec<f64>>,
    /// Parameters within 1e-6 of the bound range of a bound.
    pub at_bound: Vec<bool>,
    /// Set when the Hessian is not positive definite; names the parameters.
    pub warning: Option<String>,
}

/// Most free parameters for dense Hessians (k² doubles, 2k gradient evaluations): the Newton polish,
/// the covariance matrix and one curvature probe per parameter. Larger models use the sparse
/// structure of the likelihood instead ([`crate::hessian`]).
pub(crate) const DENSE_PARAMETER_LIMIT: usize = 2000;

/// Most memory the structured Hessian of a large model may take (probes and blocks).
const MAX_HESSIAN_BYTES: usize = 4 << 30;

/// Said of a fit whose every free parameter ended on a bound.
pub const ALL_AT_BOUND: &str = "every free parameter ended at a bound: the model cannot describe \
     these data within its parameter ranges (pyhf's fit fails here)";

impl FitResult {
    /// Add a warning (several are joined with "; ").
    pub fn warn(&mut self, message: String) {
        self.warning = Some(match self.warning.take() {
            Some(previous) => format!("{previous}; {message}"),
            None => message,
        });
    }

    /// Whether every free parameter ended on a bound (`at_bound` for all of them).
    pub fn all_at_bound(&self, config: &FitConfig) -> bool {
        let mut free = (0..self.parameters.len())
            .filter(|&i| !config.fixed[i])
            .peekable();
        free.peek().is_some() && free.all(|i| self.at_bound[i])
    }

    /// Correlation matrix from the covariance.
    pub fn correlation(&self) -> Option<Vec<f64>> {
        let cov = self.covariance.as_ref()?;
        let n = self.parameters.len();
        let mut corr = vec![0.0; n * n];
        for i in 0..n {
            for j in 0..n {
                let d = (cov[i * n + i] * cov[j * n + j]).sqrt();
                corr[i * n + j] = if i == j {
                    if cov[i * n + i] > 0.0 { 1.0 } else { 0.0 }
                } else if d > 0.0 {
                    cov[i * n + j] / d
                } else {
                    0.0
                };
            }
        }
        Some(corr)
    }
}

/// Where a [`Fitter`] evaluates the likelihood.
pub(crate) enum Engine {
    Cpu,
    /// A CUDA session holding the uploaded model; evaluations are serialised through it.
    Cuda(Box<Mutex<CudaSession>>),
}

/// Fits one model against datasets, on the CPU or on a CUDA device.
pub struct Fitter<'m> {
    model: &'m HistFactoryModel,
    eval: CpuEvaluator<'m>,
    pub(crate) engine: Engine,
    /// Set by the caller to stop: fits check it every iteration, batches between fits (CPU) or
    /// between launches (GPU), and return `Error::Interrupted`.
    interrupt: Option<Arc<AtomicBool>>,
}

/// One fit in progress: the L-BFGS-B machine over the free parameters in scaled coordinates,
/// driven by whoever evaluates the points it asks for — the CPU loop of [`Fitter::fit`], or a
/// lockstep batch of many fits on a GPU ([`Fitter::fit_batch`]).
pub struct FitRun {
    free: Vec<usize>,
    scale: Vec<f64>,
    /// The optimizer's box, in scaled coordinates.
    lower: Vec<f64>,
    upper: Vec<f64>,
    full: Vec<f64>,
    free_grad: Vec<f64>,
    state: Lbfgsb,
}

impl FitRun {
    /// The full parameter vector to evaluate next, or `None` once finished.
    pub fn ask(&mut self) -> Option<&[f64]> {
        let y = self.state.ask()?;
        for (k, &i) in self.free.iter().enumerate() {
            self.full[i] = y[k] / self.scale[k];
        }
        Some(&self.full)
    }

    /// The objective (twice_nll minus its data constant) and its full gradient at the point
    /// from [`ask`](Self::ask).
    pub fn tell(&mut self, f: f64, grad: &[f64]) {
        for (k, &i) in self.free.iter().enumerate() {
            self.free_grad[k] = grad[i] / self.scale[k];
        }
        self.state.tell(f, &self.free_grad);
    }

    /// The result without uncertainties. The projected gradient comes from the optimizer's
    /// last gradient, so finishing costs no evaluation.
    fn result(&self, config: &FitConfig, constant: f64) -> FitResult {
        assemble_result(
            &self.free,
            &self.scale,
            config,
            OptimizerEnd {
                x: self.state.x(),
                g: self.state.gradient(),
                f: self.state.f(),
                iterations: self.state.iterations(),
                evaluations: self.state.evaluations(),
                termination: self
                    .state
                    .termination()
                    .unwrap_or(Termination::MaxIterations),
            },
            constant,
        )
    }
}

/// Where an optimizer run ended, in its scaled coordinates.
struct OptimizerEnd<'a> {
    x: &'a [f64],
    g: &'a [f64],
    f: f64,
    iterations: usize,
    evaluations: usize,
    termination: Termination,
}

/// A fit result from the optimizer's end point (host or device optimizer alike).
fn assemble_result(
    free: &[usize],
    scale: &[f64],
    config: &FitConfig,
    end: OptimizerEnd,
    constant: f64,
) -> FitResult {
    let n = config.init.len();
    let mut parameters = config.init.clone();
    let mut grad = vec![0.0; n];
    for (k, &i) in free.iter().enumerate() {
        parameters[i] = end.x[k] / scale[k];
        grad[i] = end.g[k] * scale[k];
    }
    FitResult {
        twice_nll: end.f + 2.0 * constant,
        converged: end.termination == Termination::Converged,
        termination: end.termination,
        iterations: end.iterations,
        evaluations: end.evaluations,
        projected_gradient: projected_gradient(&parameters, &grad, config, free),
        uncertainties: None,
        covariance: None,
        at_bound: at_bound(&parameters, config),
        warning: None,
        parameters,
    }
}

/// ‖P(x − g) − x‖∞ of twice_nll over the free parameters, in the original parameters.
pub(crate) fn projected_gradient(
    parameters: &[f64],
    grad: &[f64],
    config: &FitConfig,
    free: &[usize],
) -> f64 {
    free.iter()
        .map(|&i| {
            ((parameters[i] - grad[i]).clamp(config.bounds[i].0, config.bounds[i].1)
                - parameters[i])
                .abs()
        })
        .fold(0.0, f64::max)
}

/// Free parameters within 1e-6 of the bound range of a bound (of max(1, |θ|) where the range is
/// unbounded).
pub(crate) fn at_bound(parameters: &[f64], config: &FitConfig) -> Vec<bool> {
    (0..parameters.len())
        .map(|i| {
            let (lo, hi) = config.bounds[i];
            let range = hi - lo;
            let scale = if range.is_finite() {
                range
            } else {
                parameters[i].abs()
            };
            let tol = 1e-6 * scale.max(1.0);
            !config.fixed[i] && (parameters[i] - lo <= tol || hi - parameters[i] <= tol)
        })
        .collect()
}

/// One fit of a batch: dataset `data` (an index into the batch's datasets) with `config`
/// (shared: thousands of toy fits use one configuration).
#[derive(Clone, Debug)]
pub struct FitJob {
    pub data: usize,
    pub config: Arc<FitConfig>,
}

impl<'m> Fitter<'m> {
    /// A fitter that evaluates on the CPU.
    pub fn new(model: &'m HistFactoryModel) -> Self {
        Fitter {
            model,
            eval: CpuEvaluator::new(&model.compiled),
            engine: Engine::Cpu,
            interrupt: None,
        }
    }

    /// The same fitter, stopping with `Error::Interrupted` once `flag` is set.
    pub fn with_interrupt(mut self, flag: Arc<AtomicBool>) -> Self {
        self.interrupt = Some(flag);
        self
    }

    fn check_interrupt(&self) -> Result<()> {
        match &self.interrupt {
            Some(flag) if flag.load(Ordering::Relaxed) => Err(Error::Interrupted),
            _ => Ok(()),
        }
    }

    /// A fitter whose evaluations run on CUDA device `ordinal` (the model is uploaded once).
    pub fn cuda(model: &'m HistFactoryModel, ordinal: usize) -> Result<Self> {
        Ok(Fitter {
            engine: Engine::Cuda(Box::new(Mutex::new(CudaSession::new(
                &model.compiled,
                ordinal,
            )?))),
            ..Fitter::new(model)
        })
    }

    /// A fitter on `device`; `Auto` resolves by the workload (see [`Device::resolve`]).
    pub fn on_device(
        model: &'m HistFactoryModel,
        device: Device,
        workload: Workload,
    ) -> Result<Self> {
        match device.resolve(model, workload) {
            Device::Cuda => Fitter::cuda(model, 0),
            _ => Ok(Fitter::new(model)),
        }
    }

    /// The device this fitter evaluates on (never `Auto`).
    pub fn device(&self) -> Device {
        match self.engine {
            Engine::Cpu => Device::Cpu,
            Engine::Cuda(_) => Device::Cuda,
        }
    }

    /// The CUDA session's device, if this fitter runs on one.
    pub fn cuda_device(&self) -> Option<DeviceInfo> {
        match &self.engine {
            Engine::Cuda(session) => Some(lock(session).info().clone()),
            Engine::Cpu => None,
        }
    }

    pub fn model(&self) -> &'m HistFactoryModel {
        self.model
    }

    /// twice_nll and its gradient at a full parameter vector.
    pub fn twice_nll_and_gradient(
        &self,
        params: &[f64],
        data: &PreparedData,
        scratch: &mut Scratch,
        grad: &mut [f64],
    ) -> Result<f64> {
        Ok(2.0 * data.constant + self.objective(params, data, scratch, grad)?)
    }

    /// twice_nll minus its data-only constant, with its gradient: the optimizer's objective
    /// (same minimizer, far finer resolution near the minimum on large models).
    fn objective(
        &self,
        params: &[f64],
        data: &PreparedData,
        scratch: &mut Scratch,
        grad: &mut [f64],
    ) -> Result<f64> {
        let nll = self
            .eval
            .nll_minus_constant(params, data, scratch, Some(grad))?;
        for g in grad.iter_mut() {
            *g *= 2.0;
        }
        Ok(2.0 * nll)
    }

    /// The objective and gradient at many points (rows of `points`), point `i` against
    /// `datasets[which[i]]`: one launch on CUDA, a parallel loop on the CPU.
    pub(crate) fn objective_batch(
        &self,
        points: &[f64],
        datasets: &BatchData,
        which: &[u32],
        f: &mut [f64],
        grad: &mut [f64],
    ) -> Result<()> {
        let n = self.model.n_params();
        match (&self.engine, datasets) {
            (Engine::Cuda(session), BatchData::Device(device)) => {
                lock(session).nll_grad(points, device, which, f, grad)?;
            }
            (Engine::Cuda(session), BatchData::Host(host)) => {
                let mut session = lock(session);
                let device = session.upload_datasets(&host.iter().collect::<Vec<_>>())?;
                session.nll_grad(points, &device, which, f, grad)?;
            }
            (Engine::Cpu, data) => {
                f.par_iter_mut()
                    .zip(grad.par_chunks_mut(n))
                    .zip(points.par_chunks(n))
                    .zip(which.par_iter())
                    .try_for_each_init(
                        || Scratch::new(&self.model.compiled),
                        |scratch, (((value, g), p), &d)| {
                            // Hessian probes of large models are thousands of evaluations: stay
                            // interruptible between them.
                            self.check_interrupt()?;
                            *value = self.eval.nll_minus_constant(
                                p,
                                data.host(d as usize)?,
                                scratch,
                                Some(g),
                            )?;
                            Ok::<(), Error>(())
                        },
                    )?;
            }
        }
        for v in f.iter_mut().chain(grad.iter_mut()) {
            *v *= 2.0;
        }
        Ok(())
    }

    pub fn twice_nll(&self, params: &[f64], data: &PreparedData) -> Result<f64> {
        Ok(2.0
            * self
                .eval
                .nll(params, data, &mut Scratch::new(&self.model.compiled))?)
    }

    fn check(&self, config: &FitConfig) -> Result<()> {
        let n = self.model.n_params();
        if config.init.len() != n || config.bounds.len() != n || config.fixed.len() != n {
            return Err(Error::InvalidInput(format!(
                "fit configuration has {} init values, {} bounds and {} fixed flags for a model of {n} parameters",
                config.init.len(),
                config.bounds.len(),
                config.fixed.len()
            )));
        }
        for i in 0..n {
            let (lo, hi) = config.bounds[i];
            let name = &self.model.par_names[i];
            if lo.is_nan() || hi.is_nan() {
                return Err(Error::InvalidInput(format!(
                    "bounds of '{name}' are [{lo}, {hi}]: a bound is not a number"
                )));
            }
            if lo > hi {
                return Err(Error::InvalidInput(format!(
                    "bounds of '{name}' are [{lo}, {hi}]: low must not exceed high"
                )));
            }
            let x = config.init[i];
            if !(x.is_finite() && lo <= x && x <= hi) {
                let how = if config.fixed[i] {
                    "is fixed at"
                } else {
                    "starts at"
                };
                return Err(Error::InvalidInput(format!(
                    "'{name}' {how} {x}, outside its bounds [{lo}, {hi}]"
                )));
            }
        }
        Ok(())
    }

    /// Set up a fit: free parameters, variable scaling, the optimizer in scaled coordinates.
    pub fn start(&self, data: &PreparedData, config: &FitConfig) -> Result<FitRun> {
        self.check(config)?;
        let n = self.model.n_params();
        let free: Vec<usize> = (0..n).filter(|&i| !config.fixed[i]).collect();
        // Diagonal preconditioning: optimize y = x·s with s² the curvature of twice_nll along each
        // free parameter at the start, so that normfactors (curvature ~ Σν) and nuisance
        // parameters (~1) look alike to the quasi-Newton model.
        let scale = match &config.scale {
            Some(all) if all.len() == n => free.iter().map(|&i| all[i]).collect(),
            _ => self.curvature_scale(
                &config.init,
                &free,
                &config.bounds,
                data,
                &mut Scratch::new(&self.model.compiled),
            )?,
        };
        let scaled = |v: &dyn Fn(usize) -> f64| -> Vec<f64> {
            free.iter().zip(&scale).map(|(&i, s)| v(i) * s).collect()
        };
        let lower = scaled(&|i| config.bounds[i].0);
        let upper = scaled(&|i| config.bounds[i].1);
        let y0 = scaled(&|i| config.init[i]);
        let state =
            Lbfgsb::new(&y0, &lower, &upper, config.optimizer).with_gradient_scale(scale.clone());
        Ok(FitRun {
            free_grad: vec![0.0; free.len()],
            full: config.init.clone(),
            free,
            scale,
            lower,
            upper,
            state,
        })
    }

    /// Minimize twice_nll over the free parameters.
    pub fn fit(&self, data: &PreparedData, config: &FitConfig) -> Result<FitResult> {
        let mut run = self.start(data, config)?;
        match &self.engine {
            Engine::Cpu => {
                let mut scratch = Scratch::new(&self.model.compiled);
                let mut grad = vec![0.0; self.model.n_params()];
                while let Some(x) = run.ask() {
                    self.check_interrupt()?;
                    let x = x.to_vec();
                    let f = self.objective(&x, data, &mut scratch, &mut grad)?;
                    run.tell(f, &grad);
                }
            }
            Engine::Cuda(_) => {
                // One fused launch per iteration, the dataset uploaded once.
                let device = BatchData::Device(lock_cuda(&self.engine).upload_datasets(&[data])?);
                self.drive_lockstep(std::slice::from_mut(&mut run), &[0], &device, &|_| {})?;
            }
        }
        self.finish(&run, data, config)
    }

    fn finish(&self, run: &FitRun, data: &PreparedData, config: &FitConfig) -> Result<FitResult> {
        self.complete(run.result(config, data.constant), data, config, &run.free)
    }

    /// What every fit does after its optimizer stops (host or device): a Newton polish where
    /// L-BFGS-B stopped short of the tolerance, then the uncertainties if asked for.
    fn complete(
        &self,
        result: FitResult,
        data: &PreparedData,
        config: &FitConfig,
        free: &[usize],
    ) -> Result<FitResult> {
        let mut result = if crate::newton::applies(&result, free.len()) {
            crate::newton::polish(self, result, data, config, free)?
        } else {
            result
        };
        if result.all_at_bound(config) {
            result.warn(ALL_AT_BOUND.into());
        }
        if config.uncertainties && result.termination != Termination::NonFiniteStart {
            self.add_uncertainties(&mut result, data, free)?;
        }
        Ok(result)
    }

    /// Advance every run until all have finished, evaluating the points of all active runs
    /// together (one batch per step); finished runs drop out of the batch. Run `i` evaluates
    /// against `datasets[which[i]]`. `progress` gets the number of finished runs.
    pub(crate) fn drive_lockstep(
        &self,
        runs: &mut [FitRun],
        which: &[u32],
        datasets: &BatchData,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<()> {
        let n = self.model.n_params();
        let mut active: Vec<usize> = (0..runs.len()).collect();
        let (mut points, mut f, mut grad, mut batch_which) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        while !active.is_empty() {
            self.check_interrupt()?;
            points.clear();
            batch_which.clear();
            let mut still = Vec::with_capacity(active.len());
            for &r in &active {
                if let Some(x) = runs[r].ask() {
                    points.extend_from_slice(x);
                    batch_which.push(which[r]);
                    still.push(r);
                }
            }
            if still.len() < active.len() {
                progress(runs.len() - still.len());
            }
            active = still;
            if active.is_empty() {
                break;
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
                .zip(f.par_iter())
                .zip(grad.par_chunks(n))
                .for_each(|((run, &value), g)| run.tell(value, g));
        }
        Ok(())
    }

    /// Many fits at once. On CUDA they run in lockstep (one launch per step for all active fits);
    /// on the CPU in parallel, one fit per thread. Results are in job order; each job's error, if
    /// any, is its own.
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
        match &self.engine {
            Engine::Cpu => {
                let done = std::sync::atomic::AtomicUsize::new(0);
                let results = jobs
                    .par_iter()
                    .map(|job| {
                        let r = self.fit(&datasets[job.data], &job.config);
                        progress(done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1);
                        r
                    })
                    .collect();
                // An interrupt fails the batch, not only the fits that saw it.
                self.check_interrupt()?;
                Ok(results)
            }
            Engine::Cuda(_) => {
                let device = BatchData::Device(
                    lock_cuda(&self.engine)
                        .upload_datasets(&datasets.iter().collect::<Vec<_>>())?,
                );
                self.fit_batch_on(&device, datasets, jobs, progress)
            }
        }
    }

    /// Lockstep fits against datasets already in `device` (`host` holds the same data, for
    /// scaling and uncertainties).
    pub(crate) fn fit_batch_on(
        &self,
        device: &BatchData,
        host: &[PreparedData],
        jobs: &[FitJob],
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Vec<Result<FitResult>>> {
        // The device optimizer takes the jobs launch by launch (bounded host memory, an interrupt
        // seen between launches); the host lockstep advances them all together.
        let on_device = match device {
            BatchData::Device(d) if device_optimizer_applies(jobs) => Some(d),
            _ => None,
        };
        let chunk = if on_device.is_some() {
            DEVICE_LAUNCH_FITS
        } else {
            jobs.len().max(1)
        };
        let mut results = Vec::with_capacity(jobs.len());
        for job_chunk in jobs.chunks(chunk) {
            self.check_interrupt()?;
            results.extend(self.fit_chunk(device, on_device, host, job_chunk, progress)?);
            progress(results.len());
        }
        Ok(results)
    }

    fn fit_chunk(
        &self,
        device: &BatchData,
        on_device: Option<&DeviceDatasets>,
        host: &[PreparedData],
        jobs: &[FitJob],
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Vec<Result<FitResult>>> {
        let started: Vec<Result<FitRun>> = jobs
            .par_iter()
            .map(|job| self.start(&host[job.data], &job.config))
            .collect();
        let mut runs = Vec::with_capacity(jobs.len());
        let mut which = Vec::with_capacity(jobs.len());
        let mut slots = Vec::with_capacity(jobs.len());
        for (k, r) in started.into_iter().enumerate() {
            match r {
                Ok(run) => {
                    slots.push(Ok(runs.len()));
                    runs.push(run);
                    which.push(jobs[k].data as u32);
                }
                Err(e) => slots.push(Err(e)),
            }
        }
        let device_ends = match on_device {
            Some(datasets) if !runs.is_empty() => {
                Some(self.run_on_device(&runs, &which, datasets, &jobs[0].config)?)
            }
            _ => {
                self.drive_lockstep(&mut runs, &which, device, progress)?;
                None
            }
        };
        let run_jobs: Vec<usize> = (0..jobs.len()).collect();
        slots
            .into_par_iter()
            .zip(run_jobs.into_par_iter())
            .map(|(slot, j)| {
                let (job, r) = (&jobs[j], slot?);
                let data = &host[job.data];
                match &device_ends {
                    None => self.finish(&runs[r], data, &job.config),
                    Some(ends) => {
                        let run = &runs[r];
                        let result = assemble_result(
                            &run.free,
                            &run.scale,
                            &job.config,
                            ends.end(r),
                            data.constant,
                        );
                        self.complete(result, data, &job.config, &run.free)
                    }
                }
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(Ok)
            .collect::<Result<Vec<_>>>()
    }

    /// √(∂²twice_nll/∂x_j²) at `x` for each free parameter, by a one-sided difference of the
    /// analytic gradient (stepping away from the nearer bound); 1 where it is not positive.
    fn curvature_scale(
        &self,
        x: &[f64],
        free: &[usize],
        bounds: &[(f64, f64)],
        data: &PreparedData,
        scratch: &mut Scratch,
    ) -> Result<Vec<f64>> {
        let n = x.len();
        let (mut g0, mut g1) = (vec![0.0; n], vec![0.0; n]);
        self.twice_nll_and_gradient(x, data, scratch, &mut g0)?;
        // One probe per parameter; on large models the per-bin parameters of different bins share
        // probes (their gradients do not see each other), so the cost stays a few evaluations.
        let columns: Vec<Vec<usize>> = if free.len() <= DENSE_PARAMETER_LIMIT {
            free.iter().map(|&j| vec![j]).collect()
        } else {
            Structure::of(&self.model.compiled, free).columns()
        };
        let step = |j: usize| {
            let (lo, hi) = bounds[j];
            let h = 1e-4 * x[j].abs().max(1.0);
            if x[j] + h <= hi || x[j] - h < lo {
                h
            } else {
                -h
            }
        };
        let mut curvature = vec![f64::NAN; n];
        let mut probe = x.to_vec();
        for column in &columns {
            for &j in column {
                probe[j] = x[j] + step(j);
            }
            let finite = matches!(
                self.twice_nll_and_gradient(&probe, data, scratch, &mut g1),
                Ok(f) if f.is_finite()
            );
            for &j in column {
                if finite {
                    curvature[j] = (g1[j] - g0[j]) / step(j);
                }
                probe[j] = x[j];
            }
        }
        Ok(free
            .iter()
            .map(|&j| {
                let c = curvature[j];
                if c.is_finite() && c > 0.0 {
                    c.sqrt().clamp(1e-3, 1e6)
                } else {
                    1.0
                }
            })
            .collect())
    }

    /// Uncertainties of a large model from the arrow structure of its Hessian
    /// ([`crate::hessian`]): no dense n×n matrix, so no covariance either.
    fn add_structured_uncertainties(
        &self,
        result: &mut FitResult,
        data: &PreparedData,
        free: &[usize],
    ) -> Result<()> {
        let structure = Structure::of(&self.model.compiled, free);
        let bytes = structure.memory_bytes(self.model.n_params());
        if bytes > MAX_HESSIAN_BYTES {
            result.warn(format!(
                "no uncertainties: {} of the {} free parameters act on several bins, and their \
                 Hessian would need {:.1} GB (at most {:.1} GB)",
                structure.globals.len(),
                free.len(),
                bytes as f64 * 1e-9,
                MAX_HESSIAN_BYTES as f64 * 1e-9
            ));
            return Ok(());
        }
        match arrow_variances(self, &result.parameters, data, free, &structure) {
            Ok(variances) => {
                let mut sigma = vec![0.0; self.model.n_params()];
                for (&p, v) in free.iter().zip(variances) {
                    sigma[p] = v.max(0.0).sqrt();
                }
                result.uncertainties = Some(sigma);
            }
            Err(e) => result.warn(e.to_string()),
        }
        Ok(())
    }

    /// `config` with the optimizer's variable scaling computed once, at `config.init` on `data`.
    pub fn with_scale(&self, data: &PreparedData, config: &FitConfig) -> Result<FitConfig> {
        let n = self.model.n_params();
        let all: Vec<usize> = (0..n).collect();
        let scale = self.curvature_scale(
            &config.init,
            &all,
            &config.bounds,
            data,
            &mut Scratch::new(&self.model.compiled),
        )?;
        Ok(FitConfig {
            scale: Some(scale),
            ..config.clone()
        })
    }

    /// Fit with the POI fixed at `mu` (pyhf's `fixed_poi_fit`).
    pub fn fixed_poi_fit(
        &self,
        mu: f64,
        data: &PreparedData,
        config: &FitConfig,
    ) -> Result<FitResult> {
        let poi = self.model.poi()?;
        self.fit(data, &config.with_fixed(poi, mu))
    }

    /// Hessian of twice_nll over the `free` parameters at `point` (k×k, row-major, symmetrised)
    /// by central differences of the analytic gradient, all 2k probes in one batch: one launch
    /// on CUDA, parallel on the CPU.
    pub(crate) fn hessian(
        &self,
        point: &[f64],
        data: &PreparedData,
        free: &[usize],
    ) -> Result<Vec<f64>> {
        let n = self.model.n_params();
        let k = free.len();
        let steps: Vec<f64> = free
            .iter()
            .map(|&j| 1e-5 * point[j].abs().max(1.0))
            .collect();
        let mut points = Vec::with_capacity(2 * k * n);
        for (col, &j) in free.iter().enumerate() {
            for sign in [1.0, -1.0] {
                let mut x = point.to_vec();
                x[j] += sign * steps[col];
                points.extend_from_slice(&x);
            }
        }
        let (mut f, mut grads) = (vec![0.0; 2 * k], vec![0.0; 2 * k * n]);
        let host = BatchData::Host(std::slice::from_ref(data));
        self.objective_batch(&points, &host, &vec![0; 2 * k], &mut f, &mut grads)?;
        let mut hessian = vec![0.0; k * k];
        for col in 0..k {
            let (gp, gm) = (&grads[2 * col * n..], &grads[(2 * col + 1) * n..]);
            for (row, &i) in free.iter().enumerate() {
                hessian[row * k + col] = (gp[i] - gm[i]) / (2.0 * steps[col]);
            }
        }
        for r in 0..k {
            for c in 0..r {
                let avg = 0.5 * (hessian[r * k + c] + hessian[c * k + r]);
                hessian[r * k + c] = avg;
                hessian[c * k + r] = avg;
            }
        }
        Ok(hessian)
    }

    /// Uncertainties from the Hessian of twice_nll at the minimum: C = 2·H⁻¹ (the inverse
    /// Hessian of the NLL).
    fn add_uncertainties(
        &self,
        result: &mut FitResult,
        data: &PreparedData,
        free: &[usize],
    ) -> Result<()> {
        let n = self.model.n_params();
        let k = free.len();
        if k > DENSE_PARAMETER_LIMIT {
            return self.add_structured_uncertainties(result, data, free);
        }
        let hessian = self.hessian(&result.parameters, data, free)?;
        let inverse_hessian = match cholesky(&hessian, k) {
            Ok(l) => Some(cholesky_inverse(&l, k)),
            Err(pivot) => {
                let negative: Vec<&str> = (0..k)
                    .filter(|&i| !(hessian[i * k + i] > 0.0))
                    .map(|i| self.model.par_names[free[i]].as_str())
                    .collect();
                result.warn(format!(
                    "the Hessian is not positive definite (Cholesky fails at '{}'{}); uncertainties come from a general inverse and may be unreliable",
                    self.model.par_names[free[pivot]],
                    if negative.is_empty() {
                        String::new()
                    } else {
                        format!("; non-positive curvature for {}", negative.join(", "))
                    }
                ));
                inverse(&hessian, k)
            }
        };
        let Some(inv) = inverse_hessian else {
            result.warn("the Hessian is singular: no uncertainties".into());
            return Ok(());
        };
        let mut covariance = vec![0.0; n * n];
        for (r, &i) in free.iter().enumerate() {
            for (c, &j) in free.iter().enumerate() {
                covariance[i * n + j] = 2.0 * inv[r * k + c];
            }
        }
        result.uncertainties = Some(
            (0..n)
                .map(|i| covariance[i * n + i].max(0.0).sqrt())
                .collect(),
        );
        result.covariance = Some(covariance);
        Ok(())
    }
}

/// The device optimizer runs every fit of a batch with one set of options, at most
/// `DEVICE_MAX_MEMORY` correction pairs; `NEXTSTAT_GPU_OPTIMIZER=host` keeps the optimizer on the
/// host (lockstep, one launch per step) for comparison.
fn device_optimizer_applies(jobs: &[FitJob]) -> bool {
    let host_requested = std::env::var("NEXTSTAT_GPU_OPTIMIZER").is_ok_and(|v| v == "host");
    let options = jobs.first().map(|j| j.config.optimizer);
    !host_requested
        && options.is_some_and(|o| {
            o.memory >= 1
                && o.memory <= DEVICE_MAX_MEMORY
                && jobs.iter().all(|j| {
                    let p = j.config.optimizer;
                    p.memory == o.memory
                        && p.pg_tol == o.pg_tol
                        && p.max_iterations == o.max_iterations
                        && p.max_evaluations == o.max_evaluations
                })
        })
}

/// Fits per launch of the device optimizer (and per chunk of a device batch): several waves of
/// resident blocks (throughput), a fraction of a second on large models (how long an interrupt
/// may wait), and bounded host memory for the fits' state.
const DEVICE_LAUNCH_FITS: usize = 4096;

/// End points of fits run by the device optimizer.
struct DeviceEnds {
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
            termination: match self.out.termination[run] {
                0 => Termination::Converged,
                1 => Termination::MaxIterations,
                2 => Termination::MaxEvaluations,
                3 => Termination::LineSearchFailed,
                _ => Termination::NonFiniteStart,
            },
        }
    }
}

impl Fitter<'_> {
    /// Run prepared fits to completion on the device (optimizer and evaluations on the GPU).
    fn run_on_device(
        &self,
        runs: &[FitRun],
        which: &[u32],
        datasets: &DeviceDatasets,
        config: &FitConfig,
    ) -> Result<DeviceEnds> {
        let n = self.model.n_params();
        let options = DeviceFitOptions {
            memory: config.optimizer.memory,
            pg_tol: config.optimizer.pg_tol,
            max_iterations: config.optimizer.max_iterations,
            max_evaluations: config.optimizer.max_evaluations,
        };
        let rows = runs.len() * n;
        let (mut init, mut free_index) = (vec![0.0; rows], vec![0u32; rows]);
        let (mut lower, mut upper, mut scale) = (vec![0.0; rows], vec![0.0; rows], vec![1.0; rows]);
        let mut n_free = Vec::with_capacity(runs.len());
        for (r, run) in runs.iter().enumerate() {
            let base = r * n;
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
        let problem = DeviceFitProblem {
            init: &init,
            free_index: &free_index,
            n_free: &n_free,
            lower: &lower,
            upper: &upper,
            scale: &scale,
            dataset: which,
        };
        let out = lock_cuda(&self.engine).fit_lbfgsb(&problem, datasets, options)?;
        Ok(DeviceEnds { out, n_params: n })
    }
}

/// The session behind a lock; a panic elsewhere cannot leave it half-updated (each call is
/// self-contained), so a poisoned lock is taken over.
fn lock(session: &Mutex<CudaSession>) -> MutexGuard<'_, CudaSession> {
    session
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

pub(crate) fn lock_cuda(engine: &Engine) -> MutexGuard<'_, CudaSession> {
    match engine {
        Engine::Cuda(session) => lock(session),
        Engine::Cpu => unreachable!("only called on the CUDA engine"),
    }
}
