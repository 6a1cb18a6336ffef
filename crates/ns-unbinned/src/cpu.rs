//! The CPU backend of unbinned models: every evaluation runs over the events in fixed chunks
//! (rayon), reduced in chunk order.

use std::sync::atomic::{AtomicBool, Ordering};

use ns_compute::{
    Backend, Batching, Datasets, Device, ExternalSignal, PreparedData, Resident, SignalBatch,
};
use ns_core::{Error, Result};

use crate::UnbinnedModel;

pub struct UnbinnedCpu<'m> {
    model: &'m UnbinnedModel,
}

impl<'m> UnbinnedCpu<'m> {
    pub fn new(model: &'m UnbinnedModel) -> Self {
        UnbinnedCpu { model }
    }
}

pub(crate) fn no_signals() -> Error {
    Error::InvalidInput("external signal yields apply to binned (HistFactory) models".into())
}

impl Backend for UnbinnedCpu<'_> {
    fn device(&self) -> Device {
        Device::Cpu
    }

    fn description(&self) -> String {
        format!("CPU ({} threads, unbinned)", rayon::current_num_threads())
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
        let host: &[PreparedData] = match datasets {
            Datasets::Host(h) => h,
            Datasets::Resident(r) => r.storage::<Vec<PreparedData>>()?,
        };
        let n = self.model.parameter_count();
        ns_compute::backend::check_batch(points, which, nll, grad, n, host.len())?;
        for (row, &d) in which.iter().enumerate() {
            if stop.load(Ordering::Relaxed) {
                return Err(Error::Interrupted);
            }
            let data = &host[d as usize];
            nll[row] = self.model.nll_grad(
                data,
                &points[row * n..(row + 1) * n],
                &mut grad[row * n..(row + 1) * n],
            )?;
        }
        Ok(())
    }

    fn attach_signal(&self, _: &ExternalSignal) -> Result<Resident> {
        Err(no_signals())
    }

    fn nll_grad_signal(&self, _: &Resident, _: SignalBatch) -> Result<()> {
        Err(no_signals())
    }
}
