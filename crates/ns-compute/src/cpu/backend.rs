//! The CPU backend: datasets stay in host memory, batches are evaluated in parallel, and many
//! fits run one per thread.

use std::borrow::Borrow;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use ns_core::{CompiledModel, Error, Result};
use rayon::prelude::*;

use super::{CpuEvaluator, HessianPart, Plan, Scratch};
use crate::backend::{
    Backend, Batching, Datasets, Resident, SignalBatch, Values, ValuesMut, check_batch, not_finite,
};
use crate::data::PreparedData;
use crate::device::Device;
use crate::signal::ExternalSignal;

/// The CPU backend of one model, borrowed (`&CompiledModel`) or owned (`Arc<CompiledModel>`).
pub struct CpuBackend<M> {
    model: M,
    /// What the evaluator derives from the model, once.
    plan: Plan,
    /// Working memory of single evaluations, reused (a fit evaluates point after point): one
    /// slot per thread of the pool, so that parallel fits never wait on each other, and one for
    /// any other thread.
    scratch: Vec<Mutex<Option<Scratch>>>,
    /// Evaluations profiled over the analytic parameters ([`CpuEvaluator::profiled`]).
    profiled: bool,
    /// The width kinks are smoothed over ([`CpuEvaluator::smoothed`]); 0: none.
    kink_width: f64,
}

impl<M: Borrow<CompiledModel>> CpuBackend<M> {
    pub fn new(model: M) -> Self {
        CpuBackend {
            plan: Plan::new(model.borrow()),
            model,
            scratch: (0..=rayon::current_num_threads())
                .map(|_| Mutex::new(None))
                .collect(),
            profiled: false,
            kink_width: 0.0,
        }
    }

    /// The same backend with the model's kinks smoothed over `width` events
    /// ([`CpuEvaluator::smoothed`]): not the likelihood, a path to a kink's minimum.
    pub fn smoothed(mut self, width: f64) -> Self {
        self.kink_width = width;
        self
    }

    /// The same backend, its NLL and gradient profiled over the analytic parameters: a fit's
    /// objective ([`CpuEvaluator::profiled`]).
    pub fn profiled(mut self) -> Self {
        self.profiled = true;
        self
    }

    fn evaluator(&self) -> CpuEvaluator<'_> {
        let eval = CpuEvaluator::with_plan(self.model.borrow(), &self.plan);
        let eval = if self.profiled { eval.profiled() } else { eval };
        if self.kink_width > 0.0 {
            eval.smoothed(self.kink_width)
        } else {
            eval
        }
    }

    /// One evaluation on the calling thread (a fit's step: no hop to the thread pool), with
    /// pooled working memory.
    fn nll_grad_one(
        &self,
        point: &[f64],
        data: &PreparedData,
        grad: &mut [f64],
        stop: &AtomicBool,
    ) -> Result<f64> {
        if stop.load(Ordering::Relaxed) {
            return Err(Error::Interrupted);
        }
        let model = self.model.borrow();
        let others = self.scratch.len() - 1;
        let slot = rayon::current_thread_index()
            .filter(|&i| i < others)
            .unwrap_or(others);
        let eval = self.evaluator();
        match self.scratch[slot].try_lock() {
            Ok(mut held) => {
                let scratch = held.get_or_insert_with(|| Scratch::new(model));
                eval.nll_minus_constant(point, data, scratch, Some(grad))
            }
            // Two threads outside the pool at once (or a poisoned slot): working memory of its own.
            Err(_) => eval.nll_minus_constant(point, data, &mut Scratch::new(model), Some(grad)),
        }
    }
}

/// An attached external signal: its description and a copy of the model that single-row
/// evaluations write the signal into (no copy per call).
struct AttachedSignal {
    external: ExternalSignal,
    work: Mutex<CompiledModel>,
}

/// One row of a signal evaluation on `work` (a copy of `base`): the NLL with the data
/// constant of the model with this signal (its Gaussian widths follow the staterror links).
#[allow(clippy::too_many_arguments)]
fn signal_row(
    external: &ExternalSignal,
    base: &CompiledModel,
    work: &mut CompiledModel,
    signal: &[f64],
    pars: &[f64],
    data: &PreparedData,
    d_signal: &mut [f64],
    d_pars: &mut [f64],
) -> Result<f64> {
    external.apply(work, signal)?;
    let eval = CpuEvaluator::new(work);
    let mut scratch = Scratch::new(work);
    let mut nll = eval.nll_minus_constant(pars, data, &mut scratch, Some(d_pars))? + data.constant;
    for link in external.staterror() {
        let c = link.constraint;
        nll += (work.gaussian[c].sigma / base.gaussian[c].sigma).ln();
    }
    d_signal.copy_from_slice(&external.gradient(&eval, &scratch, pars, data)?);
    Ok(nll)
}

impl<M: Borrow<CompiledModel> + Send + Sync> Backend for CpuBackend<M> {
    fn device(&self) -> Device {
        Device::Cpu
    }

    fn description(&self) -> String {
        format!("CPU, {} threads", rayon::current_num_threads())
    }

    fn batching(&self) -> Batching {
        Batching::Parallel
    }

    fn upload(&self, datasets: &[PreparedData]) -> Result<Resident> {
        Ok(Resident::new(datasets.len(), datasets.to_vec()))
    }

    fn nll_grad_batch(
        &self,
        points: &[f64],
        datasets: Datasets,
        which: &[u32],
        nll: &mut [f64],
        grad: &mut [f64],
        stop: &AtomicBool,
    ) -> Result<()> {
        let model = self.model.borrow();
        let eval = self.evaluator();
        let n = model.n_params;
        let host: &[PreparedData] = match datasets {
            Datasets::Host(h) => h,
            Datasets::Resident(r) => r.storage::<Vec<PreparedData>>()?,
        };
        check_batch(points, which, nll, grad, n, host.len())?;
        if rayon::current_num_threads() == 1 {
            // One thread (`--threads 1`): the rows on the calling thread, no hop to the pool.
            for (((value, g), p), &d) in nll
                .iter_mut()
                .zip(grad.chunks_mut(n.max(1)))
                .zip(points.chunks(n.max(1)))
                .zip(which)
            {
                *value = self.nll_grad_one(p, &host[d as usize], g, stop)?;
            }
            return Ok(());
        }
        if let [d] = *which {
            nll[0] = self.nll_grad_one(points, &host[d as usize], grad, stop)?;
            return Ok(());
        }
        nll.par_iter_mut()
            .zip(grad.par_chunks_mut(n.max(1)))
            .zip(points.par_chunks(n.max(1)))
            .zip(which.par_iter())
            .try_for_each_init(
                || Scratch::new(model),
                |scratch, (((value, g), p), &d)| {
                    // Hessian probes of large models are thousands of evaluations: stay
                    // interruptible between them.
                    if stop.load(Ordering::Relaxed) {
                        return Err(Error::Interrupted);
                    }
                    *value = eval.nll_minus_constant(p, &host[d as usize], scratch, Some(g))?;
                    Ok(())
                },
            )
    }

    fn nll_hessian(
        &self,
        point: &[f64],
        data: &PreparedData,
        part: HessianPart,
    ) -> Result<Option<Vec<f64>>> {
        let model = self.model.borrow();
        self.evaluator()
            .nll_hessian(point, data, &mut Scratch::new(model), part)
    }

    fn attach_signal(&self, external: &ExternalSignal) -> Result<Resident> {
        Ok(Resident::new(
            0,
            AttachedSignal {
                external: external.clone(),
                work: Mutex::new(self.model.borrow().clone()),
            },
        ))
    }

    fn nll_grad_signal(&self, attached: &Resident, batch: SignalBatch) -> Result<()> {
        let AttachedSignal { external, work } = attached.storage::<AttachedSignal>()?;
        let base = self.model.borrow();
        let (n, p) = (external.len(), base.n_params);
        let (rows, shared) = batch.rows(n, p)?;
        let host_only =
            || Error::InvalidInput("the CPU backend reads and writes host memory only".into());
        let (Values::Host(signals), Values::Host(pars)) = (batch.signals, batch.pars) else {
            return Err(host_only());
        };
        let (ValuesMut::Host(nll), ValuesMut::Host(d_signal), ValuesMut::Host(d_pars)) =
            (batch.nll, batch.d_signal, batch.d_pars)
        else {
            return Err(host_only());
        };
        let data = batch.data;
        let pars_of = |r: usize| {
            if shared {
                pars
            } else {
                &pars[r * p..(r + 1) * p]
            }
        };
        if rows == 1 {
            // A training step evaluates one histogram: reuse the working copy unless another
            // call holds it (concurrent calls never wait on each other).
            let mut row = |work: &mut CompiledModel| {
                signal_row(external, base, work, signals, pars, data, d_signal, d_pars)
            };
            nll[0] = match work.try_lock() {
                Ok(mut w) => row(&mut w)?,
                Err(std::sync::TryLockError::Poisoned(poisoned)) => {
                    row(&mut poisoned.into_inner())?
                }
                Err(std::sync::TryLockError::WouldBlock) => row(&mut base.clone())?,
            };
        } else {
            nll.par_iter_mut()
                .zip(d_signal.par_chunks_mut(n))
                .zip(d_pars.par_chunks_mut(p.max(1)))
                .enumerate()
                .try_for_each_init(
                    || base.clone(),
                    |work, (r, ((nll, ds), dp))| {
                        let s = &signals[r * n..(r + 1) * n];
                        *nll = signal_row(external, base, work, s, pars_of(r), data, ds, dp)?;
                        Ok::<_, Error>(())
                    },
                )?;
        }
        if let Some(r) = nll.iter().position(|v| !v.is_finite()) {
            return Err(not_finite(r));
        }
        Ok(())
    }
}
