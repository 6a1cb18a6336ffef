//! The likelihood as a differentiable function of signal yields: what analysis optimisation
//! (neos, INFERNO-style training) needs. A neural network produces the yields of one or more
//! samples ("external" samples, named by channel and sample); they replace those samples' nominal
//! yields, and the session returns the NLL or a profiled test statistic with its exact gradient
//! with respect to the yields.
//!
//! - NLL: ∂NLL/∂s and ∂NLL/∂θ from the backend's reverse pass ([`Backend::nll_grad_signal`]),
//!   on the CPU or on a GPU, where the yields can be read in place from device memory.
//! - Profiled q0, qμ, q̃μ: both fits run (warm-started from the previous call), and by the
//!   envelope theorem dq/ds = 2(∂NLL/∂s at the conditional fit − ∂NLL/∂s at the free fit): the
//!   fitted parameters move with s, but the NLL is stationary in them (or held at a bound whose
//!   position does not depend on s). Where q is clipped to 0 (μ̂ on the other side of the tested
//!   value) q and its gradient are 0.
//! - On Asimov data the data move with s as well: the expected main data at the Asimov
//!   parameters, so dq/ds gains Σ_b ∂q/∂n_b · ∂n_b/∂s with ∂q/∂n_b = 2(ln λ̂_b − ln λ̂̂_b).
//! - The fits of the profiled statistics run on the host (CPU engine), whatever the session's
//!   device: one fit of a small model is faster there than a chain of kernel launches.
//!
//! What "external" means for histosys templates, staterror widths and shapesys is
//! [`ns_compute::signal`]'s.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use ns_compute::backend::{self, Backend, FitSignal, SignalBatch, Values, ValuesMut};
use ns_compute::{CpuEvaluator, Device, ExternalSignal, PreparedData, Resident, Scratch};
use ns_core::{Error, HistFactoryModel, Result};
use rayon::prelude::*;

use crate::checks;
use crate::fit::{FitConfig, FitResult, Fitter, device_fits, device_optimizer_takes};
use crate::hypotest::{TestStatistic, statistic_from_fits};

/// NLL with its gradients.
#[derive(Clone, Debug)]
pub struct NllGradient {
    pub nll: f64,
    /// ∂NLL/∂s over the signal vector.
    pub d_signal: Vec<f64>,
    /// ∂NLL/∂θ over the parameters.
    pub d_pars: Vec<f64>,
}

/// A profiled test statistic with its gradient with respect to the signal yields.
#[derive(Clone, Debug)]
pub struct ProfiledStatistic {
    pub q: f64,
    pub d_signal: Vec<f64>,
    pub free_fit: FitResult,
    pub fixed_fit: FitResult,
}

/// The data a profiled statistic is computed on.
#[derive(Clone, Debug)]
pub enum StatisticData<'a> {
    /// Fixed data (e.g. the observed data).
    Fixed(&'a PreparedData),
    /// The expected data (main and auxiliary) of the model with the current signal at
    /// `parameters` (e.g. the suggested init with the POI at 1: the nominal Asimov dataset of
    /// the expected discovery significance); they move with the signal.
    Asimov { parameters: &'a [f64] },
}

/// The best-fit parameters of the last free and conditional fits of one statistic.
type WarmStart = (Option<Vec<f64>>, Option<Vec<f64>>);

/// What a warm start belongs to: the statistic, the tested μ (bits) and whether on Asimov data.
type WarmKey = (u8, u64, bool);

fn warm_key(stat: TestStatistic, mu: f64, data: &StatisticData) -> WarmKey {
    (
        stat as u8,
        mu.to_bits(),
        matches!(data, StatisticData::Asimov { .. }),
    )
}

/// A model whose external samples' yields are inputs.
pub struct DifferentiableSession {
    model: HistFactoryModel,
    external: ExternalSignal,
    /// Evaluates the NLL with the signal (the model uploaded once where it lives on a device).
    backend: Box<dyn Backend>,
    attached: Resident,
    /// Best-fit parameters of the last free and conditional fits of each statistic: the next
    /// call of the same statistic starts there.
    warm: Mutex<std::collections::HashMap<WarmKey, WarmStart>>,
    /// A copy of `model` that the profiled fits write their signal into.
    work: Mutex<HistFactoryModel>,
    /// Set by the caller to stop the profiled fits (every fit checks it each iteration).
    interrupt: Arc<AtomicBool>,
}

impl DifferentiableSession {
    /// A session over `model` with `samples` ((channel, sample) pairs) external, their bins
    /// concatenated in the order given, evaluating on the CPU.
    pub fn new(model: &HistFactoryModel, samples: &[(String, String)]) -> Result<Self> {
        Self::on_device(model, samples, Device::Cpu)
    }

    /// As [`new`](Self::new), the NLL evaluated on `device` (CPU or CUDA).
    pub fn on_device(
        model: &HistFactoryModel,
        samples: &[(String, String)],
        device: Device,
    ) -> Result<Self> {
        // The samples are checked before a device opens.
        let external = ExternalSignal::new(model, samples)?;
        if device == Device::Auto {
            return Err(Error::InvalidInput(
                "a differentiable session needs a named device ('cpu' or 'cuda'), not 'auto'"
                    .into(),
            ));
        }
        let backend = backend::open(device, Arc::new(model.compiled.clone()))?;
        Self::assemble(model, external, backend)
    }

    /// As [`new`](Self::new), on an opened backend (of `model`'s compiled layout, which it must
    /// own or outlive the session).
    pub fn with_backend(
        model: &HistFactoryModel,
        samples: &[(String, String)],
        backend: Box<dyn Backend>,
    ) -> Result<Self> {
        Self::assemble(model, ExternalSignal::new(model, samples)?, backend)
    }

    fn assemble(
        model: &HistFactoryModel,
        external: ExternalSignal,
        backend: Box<dyn Backend>,
    ) -> Result<Self> {
        let attached = backend.attach_signal(&external)?;
        Ok(DifferentiableSession {
            model: model.clone(),
            external,
            backend,
            attached,
            warm: Mutex::new(Default::default()),
            work: Mutex::new(model.clone()),
            interrupt: Arc::new(AtomicBool::new(false)),
        })
    }

    /// Length of the signal vector.
    pub fn n_signal(&self) -> usize {
        self.external.len()
    }

    pub fn model(&self) -> &HistFactoryModel {
        &self.model
    }

    /// The device the NLL is evaluated on.
    pub fn device(&self) -> Device {
        self.backend.device()
    }

    /// The workspace's own yields of the external samples (the signal vector they replace).
    pub fn nominal_signal(&self) -> Vec<f64> {
        self.external.nominal(&self.model.compiled)
    }

    /// Run `f` on the working copy of the model (no copy per call), or on a private copy while
    /// another call holds it: concurrent calls never wait on each other.
    /// The flag that stops this session's fits with `Error::Interrupted` once set (a front door
    /// clears it before a call and sets it on Ctrl-C).
    pub fn interrupt_flag(&self) -> Arc<AtomicBool> {
        self.interrupt.clone()
    }

    fn fitter<'m>(&self, model: &'m HistFactoryModel) -> Fitter<'m> {
        Fitter::new(model).with_interrupt(self.interrupt.clone())
    }

    fn with_work<T>(&self, f: impl FnOnce(&mut HistFactoryModel) -> T) -> T {
        match self.work.try_lock() {
            Ok(mut model) => f(&mut model),
            Err(std::sync::TryLockError::Poisoned(poisoned)) => f(&mut poisoned.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => f(&mut self.model.clone()),
        }
    }

    /// NLL and its gradients at `pars` on `data` with `signal` as the external yields.
    pub fn nll(&self, signal: &[f64], pars: &[f64], data: &PreparedData) -> Result<NllGradient> {
        if signal.len() != self.n_signal() {
            return Err(Error::InvalidInput(format!(
                "the signal has {} yields but the external samples have {} bins",
                signal.len(),
                self.n_signal()
            )));
        }
        Ok(self.nll_batch(signal, pars, data)?.remove(0))
    }

    /// [`nll`](Self::nll) for many signal vectors (rows of `signals`) at once; `pars` holds
    /// one row for all or one per signal.
    pub fn nll_batch(
        &self,
        signals: &[f64],
        pars: &[f64],
        data: &PreparedData,
    ) -> Result<Vec<NllGradient>> {
        let (n, p) = (self.n_signal(), self.model.n_params());
        let rows = self.external.rows(signals.len())?;
        let mut nll = vec![0.0; rows];
        let mut d_signal = vec![0.0; rows * n];
        let mut d_pars = vec![0.0; rows * p];
        self.evaluate(SignalBatch {
            signals: Values::Host(signals),
            pars: Values::Host(pars),
            data,
            nll: ValuesMut::Host(&mut nll),
            d_signal: ValuesMut::Host(&mut d_signal),
            d_pars: ValuesMut::Host(&mut d_pars),
        })?;
        Ok((0..rows)
            .map(|r| NllGradient {
                nll: nll[r],
                d_signal: d_signal[r * n..(r + 1) * n].to_vec(),
                d_pars: d_pars[r * p..(r + 1) * p].to_vec(),
            })
            .collect())
    }

    /// The NLL and its gradients for every row of `batch`, whose inputs and outputs may live
    /// in the memory of the session's device (read and written in place; see [`SignalBatch`]
    /// for when the call returns before the device is done).
    pub fn evaluate(&self, batch: SignalBatch) -> Result<()> {
        self.backend.nll_grad_signal(&self.attached, batch)
    }

    /// A profiled test statistic at `mu` (ignored for q0) and its gradient with respect to the
    /// signal yields. `config` holds the fits' bounds and fixed parameters; each fit starts from
    /// the previous call's solution where that lies within the bounds (training moves the
    /// signal a little per step), else from `config.init`.
    pub fn profiled(
        &self,
        signal: &[f64],
        stat: TestStatistic,
        mu: f64,
        data: StatisticData,
        config: &FitConfig,
    ) -> Result<ProfiledStatistic> {
        let key = warm_key(stat, mu, &data);
        let warm = self.warm_start_of(key);
        let result =
            self.with_work(|model| self.profiled_on(model, signal, stat, mu, &data, config, warm))?;
        self.remember(key, &result);
        Ok(result)
    }

    fn warm_start_of(&self, key: WarmKey) -> WarmStart {
        self.warm
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get(&key)
            .cloned()
            .unwrap_or_default()
    }

    fn remember(&self, key: WarmKey, result: &ProfiledStatistic) {
        self.warm
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(
                key,
                (
                    Some(result.free_fit.parameters.clone()),
                    Some(result.fixed_fit.parameters.clone()),
                ),
            );
    }

    /// [`profiled`](Self::profiled) for many signal vectors (rows of `signals`): on a backend
    /// with its own optimizer (CUDA) every row's two fits run there in one batch, else the rows
    /// are fitted in parallel on the host. Every row starts from the session's last solution of
    /// this statistic, and the first row's solution is kept for the next call (results do not
    /// depend on thread timing).
    pub fn profiled_batch(
        &self,
        signals: &[f64],
        stat: TestStatistic,
        mu: f64,
        data: StatisticData,
        config: &FitConfig,
    ) -> Result<Vec<ProfiledStatistic>> {
        let n = self.n_signal();
        self.external.rows(signals.len())?;
        let key = warm_key(stat, mu, &data);
        let warm = self.warm_start_of(key);
        let results = if self.batch_fits_on_device(config) {
            self.profiled_on_device(signals, stat, mu, &data, config, warm)?
        } else {
            signals
                .par_chunks(n)
                .map_init(
                    || self.model.clone(),
                    |model, s| self.profiled_on(model, s, stat, mu, &data, config, warm.clone()),
                )
                .collect::<Result<Vec<_>>>()?
        };
        self.remember(key, &results[0]);
        Ok(results)
    }

    /// Whether [`profiled_batch`](Self::profiled_batch) runs the fits of `config` on the
    /// backend's own optimizer (a GPU's) rather than on the host: an f64 one (CUDA's). The
    /// rows' fits are completed as f64 fits on the host; an f32 device optimizer's ends would
    /// need the f64 settling of a fit on that backend, so the f32 backend's rows are fitted on
    /// the host.
    pub fn batch_fits_on_device(&self, config: &FitConfig) -> bool {
        self.backend.precision() == ns_compute::Precision::F64
            && device_optimizer_takes(&*self.backend, config.optimizer)
    }

    /// One row on the host: both fits, then the statistic and its gradient.
    #[allow(clippy::too_many_arguments)]
    fn profiled_on(
        &self,
        model: &mut HistFactoryModel,
        signal: &[f64],
        stat: TestStatistic,
        mu: f64,
        data: &StatisticData,
        config: &FitConfig,
        warm: WarmStart,
    ) -> Result<ProfiledStatistic> {
        let row = self.prepare(model, signal, stat, mu, data, config, warm)?;
        let fitter = self.fitter(row.model);
        let free_fit = fitter.fit(&row.data, &row.free_config)?;
        let fixed_fit = fitter.fit(&row.data, &row.fixed_config)?;
        self.conclude(&row, stat, free_fit, fixed_fit)
    }

    /// Every row's two fits by the backend's optimizer in one batch (starts, polish and the
    /// gradients on the host, rows in parallel).
    fn profiled_on_device(
        &self,
        signals: &[f64],
        stat: TestStatistic,
        mu: f64,
        data: &StatisticData,
        config: &FitConfig,
        warm: WarmStart,
    ) -> Result<Vec<ProfiledStatistic>> {
        let n = self.n_signal();
        let mut models: Vec<HistFactoryModel> =
            signals.chunks(n).map(|_| self.model.clone()).collect();
        let rows = models
            .par_iter_mut()
            .zip(signals.par_chunks(n))
            .map(|(model, s)| self.prepare(model, s, stat, mu, data, config, warm.clone()))
            .collect::<Result<Vec<_>>>()?;
        // Fits 2r (free) and 2r + 1 (conditional) belong to row r.
        let runs = rows
            .par_iter()
            .map(|row| {
                let fitter = self.fitter(row.model);
                Ok([
                    fitter.start(&row.data, &row.free_config)?,
                    fitter.start(&row.data, &row.fixed_config)?,
                ])
            })
            .collect::<Result<Vec<_>>>()?
            .into_iter()
            .flatten()
            .collect::<Vec<_>>();
        // Asimov data differ per row; fixed data are one dataset.
        let asimov = matches!(data, StatisticData::Asimov { .. });
        let datasets: Vec<PreparedData> = if asimov {
            rows.iter().map(|r| r.data.clone()).collect()
        } else {
            vec![rows[0].data.clone()]
        };
        let resident = self.backend.upload(&datasets)?;
        let which: Vec<u32> = (0..runs.len())
            .map(|f| if asimov { (f / 2) as u32 } else { 0 })
            .collect();
        let values: Vec<f64> = signals
            .chunks(n)
            .flat_map(|s| s.iter().chain(s))
            .copied()
            .collect();
        let signal = FitSignal {
            attached: &self.attached,
            values: &values,
        };
        let ends = device_fits(
            &*self.backend,
            &runs,
            &which,
            &resident,
            config.optimizer,
            Some(signal),
            &self.interrupt,
        )?;
        rows.par_iter()
            .enumerate()
            .map(|(r, row)| {
                let fitter = self.fitter(row.model);
                let fit = |k: usize, config: &FitConfig| {
                    fitter.complete_device_fit(&runs[k], &ends, k, &row.data, config)
                };
                let free_fit = fit(2 * r, &row.free_config)?;
                let fixed_fit = fit(2 * r + 1, &row.fixed_config)?;
                self.conclude(row, stat, free_fit, fixed_fit)
            })
            .collect()
    }

    /// One row ready to fit: `signal` written into `model`, the data (Asimov data of this
    /// signal, with their Jacobian), the POI and both fits' configurations (warm-started).
    #[allow(clippy::too_many_arguments)]
    fn prepare<'m>(
        &self,
        model: &'m mut HistFactoryModel,
        signal: &[f64],
        stat: TestStatistic,
        mu: f64,
        data: &StatisticData,
        config: &FitConfig,
        (warm_free, warm_fixed): WarmStart,
    ) -> Result<RowProblem<'m>> {
        self.external.apply(&mut model.compiled, signal)?;
        let model = &*model;
        let fitter = self.fitter(model);
        let poi = checks::free_poi(&fitter, config)?;
        let mu = if stat == TestStatistic::Q0 { 0.0 } else { mu };
        checks::value_in_bounds(&fitter, config, poi, mu, "mu")?;
        let (data, jacobian) = match *data {
            // The Gaussian normalisations in the data constant follow the staterror widths, so
            // the fits' twice_nll are those of the model with this signal.
            StatisticData::Fixed(d) if !self.external.staterror().is_empty() => (
                PreparedData::new(&model.compiled, d.main.clone(), d.aux.clone())?,
                None,
            ),
            StatisticData::Fixed(d) => (d.clone(), None),
            StatisticData::Asimov { parameters } => {
                let eval = CpuEvaluator::new(&model.compiled);
                let mut scratch = Scratch::new(&model.compiled);
                let (main, aux) = eval.expected_data(parameters, &mut scratch)?;
                let jacobian = self.external.expected_jacobian(&eval, &scratch)?;
                (
                    PreparedData::new(&model.compiled, main, aux)?,
                    Some(jacobian),
                )
            }
        };
        Ok(RowProblem {
            model,
            data,
            jacobian,
            poi,
            mu,
            free_config: warm_start(config, warm_free),
            fixed_config: warm_start(&config.with_fixed(poi, mu), warm_fixed),
        })
    }

    /// The statistic of a row from its two fits, and its gradient with respect to the signal.
    fn conclude(
        &self,
        row: &RowProblem,
        stat: TestStatistic,
        free_fit: FitResult,
        fixed_fit: FitResult,
    ) -> Result<ProfiledStatistic> {
        let fitter = self.fitter(row.model);
        let data = &row.data;
        checks::started(&fitter, &free_fit, data)?;
        checks::started(&fitter, &fixed_fit, data)?;
        let q = statistic_from_fits(stat, row.mu, row.poi, &fixed_fit, &free_fit);
        let mut d_signal = vec![0.0; self.n_signal()];
        if q > 0.0 {
            let eval = CpuEvaluator::new(&row.model.compiled);
            let mut scratch = Scratch::new(&row.model.compiled);
            let mut at = |pars: &[f64]| -> Result<(Vec<f64>, Vec<f64>)> {
                eval.nll_minus_constant(pars, data, &mut scratch, None)?;
                Ok((
                    self.external.gradient(&eval, &scratch, pars, data)?,
                    scratch.expected_main().to_vec(),
                ))
            };
            let (g_fixed, expected_fixed) = at(&fixed_fit.parameters)?;
            let (g_free, expected_free) = at(&free_fit.parameters)?;
            for (k, d) in d_signal.iter_mut().enumerate() {
                *d = 2.0 * (g_fixed[k] - g_free[k]);
            }
            // Asimov data move with the signal: ∂q/∂n_b = 2(ln λ̂_b − ln λ̂̂_b). A bin where the
            // data do not move (slope 0: the signal is scaled to 0 at the Asimov point) or where
            // a fit expects nothing (q does not depend smoothly on its count there) adds nothing.
            if let Some(jacobian) = &row.jacobian {
                for (d, &(bin, slope)) in d_signal.iter_mut().zip(jacobian) {
                    let (free, fixed) = (expected_free[bin], expected_fixed[bin]);
                    if slope != 0.0 && free > 0.0 && fixed > 0.0 {
                        *d += 2.0 * (free.ln() - fixed.ln()) * slope;
                    }
                }
            }
        }
        Ok(ProfiledStatistic {
            q,
            d_signal,
            free_fit,
            fixed_fit,
        })
    }
}

/// One row of a profiled statistic ready to fit.
struct RowProblem<'m> {
    /// The model with the row's signal.
    model: &'m HistFactoryModel,
    data: PreparedData,
    /// d(Asimov main data)/ds, where the data are the Asimov data of this signal.
    jacobian: Option<Vec<(usize, f64)>>,
    poi: usize,
    mu: f64,
    free_config: FitConfig,
    fixed_config: FitConfig,
}

/// `config` starting from `previous` where every free parameter of it lies within the bounds.
fn warm_start(config: &FitConfig, previous: Option<Vec<f64>>) -> FitConfig {
    let mut c = config.clone();
    if let Some(p) = previous
        && p.len() == c.init.len()
        && (0..p.len()).all(|i| c.fixed[i] || (c.bounds[i].0 <= p[i] && p[i] <= c.bounds[i].1))
    {
        for i in 0..p.len() {
            if !c.fixed[i] {
                c.init[i] = p[i];
            }
        }
        // The variable scaling of the previous start is stale: recompute it.
        c.scale = None;
    }
    c
}
