//! Maximum-likelihood fits of a likelihood: free, with the POI fixed, or with any set of
//! fixed parameters; uncertainties, covariance and correlations from the Hessian.
//!
//! A [`Fitter`] holds a likelihood ([`ns_compute::Likelihood`]) and the compute backend it opened
//! ([`ns_compute::Backend`]): the CPU, or a device. Single fits, batches of fits and every procedure built on them (scans, limits,
//! ranking, toys) go through it and never name a device.
//!
//! - `config`: what a fit is asked (starting point, box, fixed parameters, optimizer options);
//! - `run`: one fit in progress, as the optimizer's ask/tell machine;
//! - `result`: the result, assembled from where an optimizer (host or device) ended;
//! - `batch`: many fits at once, in parallel, in lockstep or on the device optimizer;
//! - `uncertainty`: variable scaling, Hessian, uncertainties and covariance;
//! - `newton`: the projected-Newton polish of fits L-BFGS-B leaves short of the tolerance;
//! - `kink`, `pinned`: fits that stall at a kink of the likelihood, or against a wall along
//!   single parameters;
//! - `hessian`: the arrow-structured Hessian of large models;
//! - `auto`: which device `auto` runs a batch of fits on.

mod auto;
mod batch;
mod config;
mod hessian;
mod kink;
mod newton;
mod pinned;
mod result;
mod run;
mod uncertainty;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use ns_compute::{
    Backend, Batching, Datasets, Device, Likelihood, Precision, PreparedData, Resident, Workload,
};
use ns_core::optim::{LbfgsbOptions, Termination};
use ns_core::{Error, Result};

pub use auto::AutoChoice;
pub(crate) use batch::{device_fits, device_optimizer_takes};
pub use config::{FitConfig, FitJob};
pub use result::{ALL_AT_BOUND, FitResult, UNBOUNDED_BELOW};
pub(crate) use result::{at_bound, projected_gradient};
pub use run::FitRun;
pub(crate) use uncertainty::STIFF_SCALE_CEILING;

use crate::optimizer::Lbfgsb;

/// Most free parameters for dense Hessians (k² doubles, 2k gradient evaluations): the Newton polish,
/// the covariance matrix and one curvature probe per parameter. Larger models use the sparse
/// structure of the likelihood instead ([`hessian`]).
pub(crate) const DENSE_PARAMETER_LIMIT: usize = 2000;

/// The largest count f32 holds exactly (2²⁴): above it, an f32 fit's end point is not settled
/// in f64 but finished there.
const F32_EXACT_COUNT: f64 = 16_777_216.0;

/// Two fits whose twice_nll differ by more than this ended in different minima
/// ([`Fitter::fit_global`]); fits of one minimum agree to the optimizer's tolerance, far below.
pub const SEVERAL_MINIMA_GAP: f64 = 1e-3;

/// Width, in events, of the smoothed likelihood that tells whether a fit ended next to a kink
/// ([`Fitter::ended_near_kink`]).
const KINK_PROBE_WIDTH: f64 = 1e-2;

/// The gap between the smoothed and the exact objective beyond which a point is next to a kink:
/// at width 10⁻² events, within about 0.16 events of one.
const KINK_PROBE_GAP: f64 = 1e-9;

/// The f64 verdict on a fit's end point ([`Fitter::check_in_f64`]).
struct F64Check {
    twice_nll: f64,
    projected_gradient: f64,
    within: bool,
}

/// Fits one likelihood against datasets on one backend.
pub struct Fitter<'m> {
    model: &'m dyn Likelihood,
    backend: Box<dyn Backend + 'm>,
    /// The likelihood's CPU backend where `backend` is another one: host-side probes (the
    /// optimizer's variable scaling; Hessians of f32 fits) are f64 reference evaluations.
    host: Option<Box<dyn Backend + 'm>>,
    /// Set by the caller to stop: fits check it every iteration, batches between fits (CPU) or
    /// between launches (device), and return `Error::Interrupted`.
    interrupt: Arc<AtomicBool>,
    /// Where `backend` is profiled over analytic parameters ([`Likelihood::open_for_fits`]):
    /// the plain likelihood, for evaluations at a given point.
    plain: Option<Box<dyn Backend + 'm>>,
    /// Whether `backend` evaluates the likelihood with its kinks smoothed
    /// ([`Likelihood::open_smoothed`]): such a fitter is a step of another's kink handling.
    smoothed: bool,
    /// Whether this fitter fits with pinned parameters held for another ([`pinned`]): its
    /// fits do not hold parameters again.
    holding: bool,
    /// On a device: the likelihood smoothed over [`KINK_PROBE_WIDTH`] on the host (`None` where
    /// it has no kinks), which tells whether a device fit ended next to a kink.
    kink_probe: Option<Box<dyn Backend + 'm>>,
    /// Where `Auto` was asked: what it chose and why.
    auto: Option<AutoChoice>,
}

impl<'m> Fitter<'m> {
    /// A fitter that evaluates on the CPU.
    pub fn new(model: &'m dyn Likelihood) -> Self {
        Fitter::on_device(model, Device::Cpu, Workload::Sequential)
            .expect("the CPU backend of a likelihood always opens")
    }

    /// A fitter on an opened backend (of this likelihood).
    pub fn with_backend(model: &'m dyn Likelihood, backend: Box<dyn Backend + 'm>) -> Result<Self> {
        let (host, kink_probe) = match backend.device() {
            Device::Cpu => (None, None),
            _ => (
                Some(model.open_for_fits(Device::Cpu)?),
                model.open_smoothed(KINK_PROBE_WIDTH),
            ),
        };
        let plain = match model.analytic_parameters().is_empty() {
            true => None,
            false => Some(model.open(Device::Cpu)?),
        };
        Ok(Fitter {
            model,
            backend,
            host,
            interrupt: Arc::new(AtomicBool::new(false)),
            plain,
            smoothed: false,
            holding: false,
            kink_probe,
            auto: None,
        })
    }

    /// A fitter on `device`; `Auto` resolves by the workload ([`Fitter::auto_device`]).
    pub fn on_device(
        model: &'m dyn Likelihood,
        device: Device,
        workload: Workload,
    ) -> Result<Self> {
        let auto = (device == Device::Auto).then(|| Fitter::weigh_auto(model, workload));
        let device = auto.as_ref().map_or(device, |choice| choice.device);
        let mut fitter = Fitter::with_backend(model, model.open_for_fits(device)?)?;
        fitter.auto = auto;
        Ok(fitter)
    }

    /// What `Auto` runs `workload` of `model` on, and why ([`Fitter::auto_device`]).
    pub fn weigh_auto(model: &dyn Likelihood, workload: Workload) -> AutoChoice {
        auto::resolve(model, workload)
    }

    /// Where this fitter was opened for `Auto`: what it chose and why.
    pub fn auto_choice(&self) -> Option<&AutoChoice> {
        self.auto.as_ref()
    }

    /// The device a fitter on `device` runs `workload` on: `device` itself, or for `Auto` the
    /// CPU or the first GPU: a batch [`Likelihood::worth_a_gpu`] passes is weighed by a fit of
    /// the observed data timed on the CPU (see `auto`); other work stays on the CPU.
    pub fn auto_device(model: &dyn Likelihood, device: Device, workload: Workload) -> Device {
        match device {
            Device::Auto => auto::resolve(model, workload).device,
            d => d,
        }
    }

    /// The same fitter, stopping with `Error::Interrupted` once `flag` is set.
    pub fn with_interrupt(mut self, flag: Arc<AtomicBool>) -> Self {
        self.interrupt = flag;
        self
    }

    /// The flag that stops this fitter's work.
    pub fn interrupt(&self) -> &Arc<AtomicBool> {
        &self.interrupt
    }

    pub(crate) fn check_interrupt(&self) -> Result<()> {
        if self.interrupt.load(Ordering::Relaxed) {
            Err(Error::Interrupted)
        } else {
            Ok(())
        }
    }

    /// Whether many fits run together on a device (lockstep or its own optimizer) rather than
    /// one per CPU thread: independent fits are then cheapest as one batch.
    pub fn batches_on_device(&self) -> bool {
        self.backend.batching() == Batching::Lockstep
    }

    /// The device this fitter evaluates on (never `Auto`).
    pub fn device(&self) -> Device {
        self.backend.device()
    }

    /// The backend's hardware, in words.
    pub fn backend_description(&self) -> String {
        self.backend.description()
    }

    pub(crate) fn backend(&self) -> &dyn Backend {
        self.backend.as_ref()
    }

    /// The f64 CPU backend of the likelihood (the fitter's own backend where that is the CPU).
    pub(crate) fn host(&self) -> &dyn Backend {
        self.host.as_deref().unwrap_or(self.backend.as_ref())
    }

    pub fn model(&self) -> &'m dyn Likelihood {
        self.model
    }

    /// twice_nll minus its data-only constant, with its gradient, at one point on `backend`:
    /// the optimizer's objective (same minimizer, far finer resolution near the minimum on
    /// large models).
    fn objective_on(
        &self,
        backend: &dyn Backend,
        params: &[f64],
        data: &PreparedData,
        grad: &mut [f64],
    ) -> Result<f64> {
        let mut f = [0.0];
        self.objective_batch_on(
            backend,
            params,
            Datasets::Host(std::slice::from_ref(data)),
            &[0],
            &mut f,
            grad,
        )?;
        Ok(f[0])
    }

    /// The objective and gradient at many points (rows of `points`), point `i` against
    /// `datasets[which[i]]`, on the backend.
    pub(crate) fn objective_batch(
        &self,
        points: &[f64],
        datasets: Datasets,
        which: &[u32],
        f: &mut [f64],
        grad: &mut [f64],
    ) -> Result<()> {
        self.objective_batch_on(&*self.backend, points, datasets, which, f, grad)
    }

    /// [`objective_batch`](Self::objective_batch) in f64 whatever the backend: finite
    /// differences of gradients (Hessians, the Newton polish) divide rounding noise by small
    /// steps, so on an f32 backend these probes run on the CPU (datasets on the host). On an
    /// f64 device only batches of points go to the device: a single point (a polish step, the
    /// f64 check of an end point) is a whole launch and synchronisation there, and the host
    /// completes a launch's fits on all its threads at once while the device takes them one at
    /// a time (3L eRJR's 8000 toy fits: 9.2 s of polish on CUDA, against 1.2 s for the CPU's
    /// whole fits).
    pub(crate) fn probe_batch(
        &self,
        points: &[f64],
        datasets: Datasets,
        which: &[u32],
        f: &mut [f64],
        grad: &mut [f64],
    ) -> Result<()> {
        if self.backend.precision() == Precision::F64 && which.len() > 1 {
            return self.objective_batch(points, datasets, which, f, grad);
        }
        self.objective_batch_on(self.host(), points, datasets, which, f, grad)
    }

    fn objective_batch_on(
        &self,
        backend: &dyn Backend,
        points: &[f64],
        datasets: Datasets,
        which: &[u32],
        f: &mut [f64],
        grad: &mut [f64],
    ) -> Result<()> {
        backend.nll_grad_batch(points, datasets, which, f, grad, &self.interrupt)?;
        // On this thread: a fit evaluates one point at a time, and a hop to the pool per
        // evaluation costs more than the doubling (futex wake-ups, measured).
        for v in f.iter_mut().chain(grad.iter_mut()) {
            *v *= 2.0;
        }
        Ok(())
    }

    /// twice_nll (with its data-only constant) at a full parameter vector, on the fitter's
    /// backend (in f32 on an f32 backend).
    pub fn twice_nll(&self, params: &[f64], data: &PreparedData) -> Result<f64> {
        let mut grad = vec![0.0; self.model.n_params()];
        let f = self.objective_on(self.plain(), params, data, &mut grad)?;
        Ok(2.0 * data.constant + f)
    }

    /// twice_nll at a full parameter vector in f64 on the likelihood's CPU backend.
    pub(crate) fn twice_nll_on_host(&self, params: &[f64], data: &PreparedData) -> Result<f64> {
        let mut grad = vec![0.0; self.model.n_params()];
        Ok(2.0 * data.constant + self.objective_on(self.host(), params, data, &mut grad)?)
    }

    /// twice_nll and its gradient at a full parameter vector, on the backend.
    pub fn twice_nll_and_gradient(
        &self,
        params: &[f64],
        data: &PreparedData,
        grad: &mut [f64],
    ) -> Result<f64> {
        Ok(2.0 * data.constant + self.objective_on(self.plain(), params, data, grad)?)
    }

    /// `data` uploaded to the backend of [`twice_nll_rows`](Self::twice_nll_rows), for many
    /// batches against it.
    pub fn upload_for_rows(&self, data: &PreparedData) -> Result<Resident> {
        self.plain().upload(std::slice::from_ref(data))
    }

    /// twice_nll and its gradient at many points (rows of `points`) against one dataset (held
    /// by `resident` where [`upload_for_rows`](Self::upload_for_rows) uploaded it), on the
    /// backend of [`twice_nll_and_gradient`](Self::twice_nll_and_gradient): one batch (one
    /// launch on a device), each row's values its own.
    pub fn twice_nll_rows(
        &self,
        points: &[f64],
        data: &PreparedData,
        resident: Option<&Resident>,
        f: &mut [f64],
        grad: &mut [f64],
    ) -> Result<()> {
        let which = vec![0; f.len()];
        let datasets = match resident {
            Some(r) => Datasets::Resident(r),
            None => Datasets::Host(std::slice::from_ref(data)),
        };
        self.objective_batch_on(self.plain(), points, datasets, &which, f, grad)?;
        for v in f.iter_mut() {
            *v += 2.0 * data.constant;
        }
        Ok(())
    }

    /// The backend of evaluations at a given point: the likelihood itself, not a fit's
    /// objective profiled over analytic parameters.
    fn plain(&self) -> &dyn Backend {
        self.plain.as_deref().unwrap_or(&*self.backend)
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
            let name = &self.model.parameter_names()[i];
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

    /// The optimizer's options for `config` on this backend: the tolerance no finer than its
    /// arithmetic resolves (f32 backends stop at their noise floor).
    pub(crate) fn optimizer_options(&self, config: &FitConfig) -> LbfgsbOptions {
        let mut options = config.optimizer;
        options.pg_tol = options.pg_tol.max(self.backend.precision().pg_tol_floor());
        options
    }

    /// On an f64 device: the iterations after which a device fit stops, to be fitted on the
    /// host if it has not converged ([`stopped_for_handover`](Self::stopped_for_handover)). The
    /// CPU's fit is plain L-BFGS-B until then and may hand over to Newton there
    /// ([`newton::Handover`]); a device fit that went on alone took another path, and where a
    /// likelihood has several minima or nearly flat valleys the path decides where a fit ends:
    /// fixed-μ fits of 33 of 2000 toys of the published tt̄ ℓ+jets likelihood under ROOT's
    /// clipping ended 0.1–3 higher in twice_nll on CUDA than on the CPU, and two toys of the
    /// compressed EWKinos likelihood under pyhf's semantics differed by 10⁻³ in q.
    fn handover_cap(&self, config: &FitConfig, n_free: usize) -> Option<usize> {
        (self.refits_on_host() && newton::caps_device_fits(config, n_free))
            .then_some(newton::HANDOVER_AFTER)
    }

    /// Whether a device fit stopped at an iteration cap below its own
    /// ([`handover_cap`](Self::handover_cap)), short of convergence.
    fn stopped_for_handover(&self, result: &FitResult, config: &FitConfig) -> bool {
        self.refits_on_host()
            && result.termination == Termination::MaxIterations
            && result.iterations < config.optimizer.max_iterations
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
                uncertainty::SCALE_CEILING,
            )?,
        };
        let scaled = |v: &dyn Fn(usize) -> f64| -> Vec<f64> {
            free.iter().zip(&scale).map(|(&i, s)| v(i) * s).collect()
        };
        let lower = scaled(&|i| config.bounds[i].0);
        let upper = scaled(&|i| config.bounds[i].1);
        let y0 = scaled(&|i| config.init[i]);
        let mut options = self.optimizer_options(config);
        if let Some(cap) = self.handover_cap(config, free.len()) {
            options.max_iterations = cap;
        }
        let mut state =
            Lbfgsb::new(&y0, &lower, &upper, options).with_gradient_scale(scale.clone());
        if let Some(noise) = self.backend.precision().objective_noise() {
            state = state.with_objective_noise(noise);
        }
        Ok(FitRun {
            bounds: free.iter().map(|&i| config.bounds[i]).collect(),
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
        let result = match self.backend.batching() {
            Batching::Parallel => {
                let mut grad = vec![0.0; self.model.n_params()];
                let mut handover = newton::Handover::new(config, run.free.len());
                while let Some(x) = run.ask() {
                    self.check_interrupt()?;
                    let x = x.to_vec();
                    let f = self.objective_on(&*self.backend, &x, data, &mut grad)?;
                    run.tell(f, &grad);
                    if let Some(finished) = handover.try_finish(self, &run, data, config)? {
                        return self.complete(finished, data, config, &run);
                    }
                }
                let mut result = run.result(config, data.constant);
                result.evaluations += handover.spent_evaluations;
                result
            }
            Batching::Lockstep => {
                // One batched evaluation per iteration, the dataset uploaded once.
                let resident = self.backend.upload(std::slice::from_ref(data))?;
                self.drive_lockstep(
                    std::slice::from_mut(&mut run),
                    &[0],
                    Datasets::Resident(&resident),
                    std::slice::from_ref(data),
                    &|_| {},
                )?;
                run.result(config, data.constant)
            }
        };
        self.complete(result, data, config, &run)
    }

    /// The fit from `config`'s start and, where the point with its free histosys parameters
    /// mirrored (α → −α) lies lower than where it ended, a second fit from there: a HistoSys
    /// interpolation joins two extrapolations at α = 0, and the likelihood can have a minimum on
    /// each side, of which a fit finds the one its start leads to (RooFit and pyhf stop in the
    /// higher one of the coupled-histosys validation model). The lower minimum is returned;
    /// where the two differ by more than [`SEVERAL_MINIMA_GAP`] in twice_nll, with a warning
    /// that names both. The check costs one evaluation; the uncertainties are computed once, at
    /// the minimum returned.
    pub fn fit_global(&self, data: &PreparedData, config: &FitConfig) -> Result<FitResult> {
        let single = FitConfig {
            uncertainties: false,
            ..config.clone()
        };
        let first = self.fit(data, &single)?;
        let model = self.model;
        let mirrored: Vec<f64> = first
            .parameters
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                if !config.fixed[i] && model.parameter_kind(i) == "histosys" {
                    -v
                } else {
                    v
                }
            })
            .collect();
        let moved = mirrored
            .iter()
            .zip(&first.parameters)
            .any(|(a, b)| (a - b).abs() > 1e-3);
        let mut best = first;
        let mirrored = single.starting_at(&mirrored);
        // One evaluation decides: the second fit runs where the mirrored point already lies
        // below the first minimum (so a lower one exists), not on every model.
        let lower_there = moved
            && best.converged
            && self
                .twice_nll(&mirrored.init, data)
                .is_ok_and(|v| v < best.twice_nll - SEVERAL_MINIMA_GAP);
        if lower_there {
            let second = self.fit(data, &mirrored)?;
            let gap = best.twice_nll - second.twice_nll;
            if second.converged && gap.abs() > SEVERAL_MINIMA_GAP {
                let (low, high) = if gap > 0.0 {
                    (second, best)
                } else {
                    (best, second)
                };
                let poi = |fit: &FitResult| {
                    config
                        .poi
                        .map(|p| format!(", POI {:.6}", fit.parameters[p]))
                        .unwrap_or_default()
                };
                best = low;
                let message = format!(
                    "the likelihood has several minima: fits from the start and from its \
                     histosys parameters mirrored (α → −α) ended at twice_nll {:.6}{} and \
                     {:.6}{}; the lower is reported",
                    best.twice_nll,
                    poi(&best),
                    high.twice_nll,
                    poi(&high)
                );
                best.warn(message);
            }
        }
        if config.uncertainties && best.termination != Termination::NonFiniteStart {
            let free: Vec<usize> = (0..config.fixed.len())
                .filter(|&i| !config.fixed[i])
                .collect();
            self.add_uncertainties(&mut best, data, &free)?;
        }
        Ok(best)
    }

    fn finish(&self, run: &FitRun, data: &PreparedData, config: &FitConfig) -> Result<FitResult> {
        self.complete(run.result(config, data.constant), data, config, run)
    }

    /// What every fit does after its optimizer stops (host or device): on an f32 backend, the
    /// f64 verdict on where it ended ([`settle_f32`](Self::settle_f32)); otherwise a Newton
    /// polish where L-BFGS-B stopped short of the tolerance and the scaled convergence test
    /// where neither could go further; then the uncertainties if asked for.
    pub(crate) fn complete(
        &self,
        result: FitResult,
        data: &PreparedData,
        config: &FitConfig,
        run: &FitRun,
    ) -> Result<FitResult> {
        if self.stopped_for_handover(&result, config) {
            return self.refit_on_host(&result, data, config);
        }
        let free = &run.free;
        let mut result =
            if self.backend.precision() != Precision::F64 && result.twice_nll.is_finite() {
                self.settle_f32(result, data, config, run)?
            } else if newton::applies(&result, free.len()) {
                newton::polish(self, result, data, config, free)?
            } else {
                result
            };
        if newton::stalled(&result) {
            let tolerance = self.optimizer_options(config).pg_tol;
            let check = self.check_in_f64(&result.parameters, data, config, run, tolerance)?;
            if check.within {
                result.converged = true;
                result.termination = Termination::ConvergedScaled;
            } else if self.refits_on_host() {
                return self.refit_on_host(&result, data, config);
            } else {
                result = self.follow_smoothed_kinks(result, data, config, run, tolerance)?;
                if !result.converged {
                    result = self.descend_at_kinks(result, data, config, run, tolerance)?;
                }
                if !result.converged {
                    result = self.hold_pinned(result, data, config, run, tolerance)?;
                }
            }
        }
        if result.converged && self.refits_on_host() && self.ended_near_kink(&result, data)? {
            return self.refit_on_host(&result, data, config);
        }
        // The analytic parameters where the objective set them at the end point.
        self.model.profile_analytic(&mut result.parameters, data)?;
        if result.all_at_bound(config) {
            result.warn(ALL_AT_BOUND.into());
        }
        if let Some(negative) = self.model.negative_empty_bins(&result.parameters, data) {
            let (bin, lambda) = negative.first;
            result.warn(format!(
                "{UNBOUNDED_BELOW}: main bin {bin} (in channel order) is observed empty and \
                 expects {lambda:.4e} events (empty bins with negative expectations lower \
                 twice_nll by {:.4e} here)",
                negative.gain
            ));
        }
        if config.uncertainties && result.termination != Termination::NonFiniteStart {
            self.add_uncertainties(&mut result, data, free)?;
        }
        Ok(result)
    }

    /// Whether this fitter's fits that stall short of the gradient test, or converge next to a
    /// kink of the likelihood, are fitted again on the host ([`refit_on_host`](Self::refit_on_host)):
    /// on f64 devices; not on the CPU, on f32 devices (which settle their end points in f64) or
    /// inside kink handling.
    fn refits_on_host(&self) -> bool {
        self.host.is_some() && !self.smoothed && self.backend.precision() == Precision::F64
    }

    /// The fit fitted again on the host from the same start, as the CPU fits it. Where a
    /// likelihood has kinks (yields clipped at zero, template floors), a fit that stalls goes on
    /// from where its optimizer stopped (the smoothed path, gradient sampling), and one that
    /// converges beside a kink has stopped on one side of it: in both, where it ends depends on
    /// that point's last bits, and a toy fitted on a device ended at another kink point than on
    /// the CPU (q 1.89 against 3.21 on a published likelihood). Fitted again on the host, every
    /// device's such fits end where the CPU's do.
    fn refit_on_host(
        &self,
        device_fit: &FitResult,
        data: &PreparedData,
        config: &FitConfig,
    ) -> Result<FitResult> {
        let host = Fitter::with_backend(self.model, self.model.open_for_fits(Device::Cpu)?)?
            .with_interrupt(self.interrupt.clone());
        let mut refit = host.fit(data, config)?;
        refit.iterations += device_fit.iterations;
        refit.evaluations += device_fit.evaluations;
        Ok(refit)
    }

    /// Whether `result` ended within about 0.16 events of a kink of the likelihood or below an
    /// empty bin's wall (the likelihood smoothed over [`KINK_PROBE_WIDTH`] events differs there
    /// from the exact one: a softplus of width w departs from max(d, 0) by about w·e^−|d|/w;
    /// the wall's parabola differs below zero only), or with a yield clipped from below zero
    /// however far past its kink: such a sample is flat in its parameters, and toys of the
    /// published tt̄ likelihood ended at minima up to 4.2 apart in q on the CPU and on CUDA
    /// there. Always false where the likelihood has no kinks; up to three host evaluations
    /// where it has.
    fn ended_near_kink(&self, result: &FitResult, data: &PreparedData) -> Result<bool> {
        let Some(smoothed) = self.kink_probe.as_deref() else {
            return Ok(false);
        };
        if self.model.held_at_kinks(&result.parameters)? {
            return Ok(true);
        }
        let mut grad = vec![0.0; self.model.n_params()];
        let exact = self.objective_on(self.host(), &result.parameters, data, &mut grad)?;
        let near = self.objective_on(smoothed, &result.parameters, data, &mut grad)?;
        Ok((near - exact).abs() > KINK_PROBE_GAP)
    }

    /// twice_nll in f64 at `parameters`, its projected gradient, and whether that gradient is
    /// below `tolerance` in the optimizer's curvature-scaled parameters (y = x·s, s² the
    /// curvature of twice_nll): component i within `tolerance · max(1, s_i)`.
    ///
    /// Why scaled: a parameter with curvature s² ≫ 1 — the γ of a shapesys with τ = 10¹², a
    /// normalisation of 10⁹ events — has a gradient whose rounding noise (~ε·s²) exceeds any
    /// absolute tolerance, while the objective it could still gain, g²/2s², is below 1e-12.
    /// Parameters of curvature ≤ 1 keep the absolute test.
    fn check_in_f64(
        &self,
        parameters: &[f64],
        data: &PreparedData,
        config: &FitConfig,
        run: &FitRun,
        tolerance: f64,
    ) -> Result<F64Check> {
        let mut f = [0.0];
        let mut grad = vec![0.0; self.model.n_params()];
        self.probe_batch(
            parameters,
            Datasets::Host(std::slice::from_ref(data)),
            &[0],
            &mut f,
            &mut grad,
        )?;
        let within = run.free.iter().zip(&run.scale).all(|(&i, &s)| {
            let (lo, hi) = config.bounds[i];
            let x = parameters[i];
            let step = ((x - grad[i]).clamp(lo, hi) - x).abs();
            step <= tolerance * s.max(1.0)
        });
        Ok(F64Check {
            twice_nll: f[0] + 2.0 * data.constant,
            projected_gradient: projected_gradient(parameters, &grad, config, &run.free),
            within: within && f[0].is_finite(),
        })
    }

    /// An f32 fit ends where f32 arithmetic stops resolving its objective: converged at the f32
    /// floor, or with its line search stalled. One f64 evaluation there decides. Where the f64
    /// projected gradient is below [`Precision::settle_pg_tol`] in the scaled parameters, the
    /// fit stands, with the f64 twice_nll (so differences of fits — test statistics — carry no
    /// f32 rounding); otherwise L-BFGS-B finishes it in f64 on the CPU from there, with the
    /// fit's own variable scaling (a few iterations of one gradient each). Either way the
    /// result is the f64 objective at an f64-checked point: what toys, scans and rankings
    /// report; docs/gpu-f32.md measures how close it is to the f64 fit.
    fn settle_f32(
        &self,
        mut result: FitResult,
        data: &PreparedData,
        config: &FitConfig,
        run: &FitRun,
    ) -> Result<FitResult> {
        let tolerance = self
            .backend
            .precision()
            .settle_pg_tol()
            .max(self.optimizer_options(config).pg_tol);
        let check = self.check_in_f64(&result.parameters, data, config, run, tolerance)?;
        // Counts beyond f32's exact integers (2²⁴) reach the f32 objective rounded, so its end
        // point need not be near the f64 minimum, while on such stiff, correlated parameters a
        // small scaled gradient no longer bounds the gap: those fits always finish in f64.
        let representable = data
            .main
            .iter()
            .chain(&data.aux)
            .all(|n| n.abs() <= F32_EXACT_COUNT);
        if !check.within || !representable {
            // Where f32 rounding kept a yield positive that is zero or negative in f64 (an
            // edge of the model's domain), the end point is no start for an f64 fit: it starts
            // again from the fit's own starting point.
            let from = if check.twice_nll.is_finite() {
                result.parameters.clone()
            } else {
                config.init.clone()
            };
            return self.refine_in_f64(result, from, data, config, run);
        }
        result.twice_nll = check.twice_nll;
        result.projected_gradient = check.projected_gradient;
        if !result.converged {
            result.converged = true;
            result.termination = Termination::ConvergedScaled;
        }
        Ok(result)
    }

    /// An f32 fit finished by L-BFGS-B in f64 on the CPU from `from` (where it stopped), in the
    /// fit's own scaled variables: a few iterations of one gradient each, where a Newton polish
    /// would need a Hessian (many gradients) per fit.
    fn refine_in_f64(
        &self,
        stalled: FitResult,
        from: Vec<f64>,
        data: &PreparedData,
        config: &FitConfig,
        run: &FitRun,
    ) -> Result<FitResult> {
        let from_there = FitConfig {
            init: from,
            scale: Some(run.full_scale(self.model.n_params())),
            uncertainties: false,
            ..config.clone()
        };
        // The f64 fit starts where the f32 one stopped, so it only descends (the f32 twice_nll
        // is not comparable: it carries the f32 rounding).
        let host = Fitter::with_backend(self.model, self.model.open_for_fits(Device::Cpu)?)?
            .with_interrupt(self.interrupt.clone());
        let mut refined = host.fit(data, &from_there)?;
        refined.iterations += stalled.iterations;
        refined.evaluations += stalled.evaluations;
        Ok(refined)
    }

    /// Fit with the POI fixed at `mu` (pyhf's `fixed_poi_fit`).
    pub fn fixed_poi_fit(
        &self,
        mu: f64,
        data: &PreparedData,
        config: &FitConfig,
    ) -> Result<FitResult> {
        let poi = config.poi(self.model)?;
        self.fit(data, &config.with_fixed(poi, mu))
    }
}
