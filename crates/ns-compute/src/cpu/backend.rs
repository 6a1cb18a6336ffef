//! The CPU backend: datasets stay in host memory, batches are evaluated in parallel, and many
//! fits run one per thread.

use std::sync::atomic::{AtomicBool, Ordering};

use ns_core::{CompiledModel, Error, Result};
use rayon::prelude::*;

use super::{CpuEvaluator, Scratch};
use crate::backend::{Backend, Batching, Datasets, Resident};
use crate::data::PreparedData;
use crate::device::Device;

/// The CPU backend of one model.
pub struct CpuBackend<'m> {
    model: &'m CompiledModel,
    eval: CpuEvaluator<'m>,
}

impl<'m> CpuBackend<'m> {
    pub fn new(model: &'m CompiledModel) -> Self {
        CpuBackend {
            model,
            eval: CpuEvaluator::new(model),
        }
    }
}

impl Backend for CpuBackend<'_> {
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
        let n = self.model.n_params;
        let rows = which.len();
        if points.len() != rows * n || nll.len() != rows || grad.len() != rows * n {
            return Err(Error::InvalidInput(format!(
                "batch of {rows} evaluations needs {} parameters, {rows} NLL and {} gradient slots",
                rows * n,
                rows * n
            )));
        }
        let host: &[PreparedData] = match datasets {
            Datasets::Host(h) => h,
            Datasets::Resident(r) => r.storage::<Vec<PreparedData>>()?,
        };
        nll.par_iter_mut()
            .zip(grad.par_chunks_mut(n.max(1)))
            .zip(points.par_chunks(n.max(1)))
            .zip(which.par_iter())
            .try_for_each_init(
                || Scratch::new(self.model),
                |scratch, (((value, g), p), &d)| {
                    // Hessian probes of large models are thousands of evaluations: stay
                    // interruptible between them.
                    if stop.load(Ordering::Relaxed) {
                        return Err(Error::Interrupted);
                    }
                    let data = host.get(d as usize).ok_or_else(|| {
                        Error::InvalidInput(format!(
                            "dataset index {d} out of range: {} datasets given",
                            host.len()
                        ))
                    })?;
                    *value = self.eval.nll_minus_constant(p, data, scratch, Some(g))?;
                    Ok(())
                },
            )
    }
}
