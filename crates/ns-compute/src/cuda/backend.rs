//! The CUDA backend: a [`CudaSession`] behind the [`Backend`] interface. Datasets live in device
//! memory, many fits run in lockstep or entirely on the device (the device optimizer), and toys
//! are sampled on the device.

use std::sync::atomic::AtomicBool;
use std::sync::{Mutex, MutexGuard};

use ns_core::optim::LbfgsbOptions;
use ns_core::{CompiledModel, Error, Result};
use rayon::prelude::*;

use super::abi::DEVICE_MAX_MEMORY;
use super::session::{CudaSession, DeviceDatasets};
use crate::backend::{
    Backend, Batching, Datasets, DeviceFitOutput, DeviceFitProblem, Resident, SampledToys,
};
use crate::data::PreparedData;
use crate::device::Device;
use crate::toys::ToyEnsembleRates;

/// CUDA device `ordinal` holding one model.
pub struct CudaBackend<'m> {
    model: &'m CompiledModel,
    /// Launches are serialised through the session (one stream, reused buffers).
    session: Mutex<CudaSession>,
}

impl<'m> CudaBackend<'m> {
    /// Open device `ordinal`, load (or compile) the kernels and upload `model`.
    pub fn new(model: &'m CompiledModel, ordinal: usize) -> Result<Self> {
        Ok(CudaBackend {
            model,
            session: Mutex::new(CudaSession::new(model, ordinal)?),
        })
    }

    /// The session; a panic elsewhere cannot leave it half-updated (each call is
    /// self-contained), so a poisoned lock is taken over.
    pub fn session(&self) -> MutexGuard<'_, CudaSession> {
        self.session
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Backend for CudaBackend<'_> {
    fn device(&self) -> Device {
        Device::Cuda
    }

    fn description(&self) -> String {
        let session = self.session();
        let info = session.info();
        format!(
            "{} (sm_{}{}, {} SMs, {:.0} GiB; kernels {:?}); {}",
            info.name,
            info.compute_capability.0,
            info.compute_capability.1,
            info.multiprocessors,
            info.memory_bytes as f64 / (1u64 << 30) as f64,
            info.kernels,
            session.kernel_report()
        )
    }

    fn batching(&self) -> Batching {
        Batching::Lockstep
    }

    fn upload(&self, datasets: &[PreparedData]) -> Result<Resident> {
        let on_device = self
            .session()
            .upload_datasets(&datasets.iter().collect::<Vec<_>>())?;
        Ok(Resident::new(datasets.len(), on_device))
    }

    fn nll_grad_batch(
        &self,
        points: &[f64],
        datasets: Datasets,
        which: &[u32],
        nll: &mut [f64],
        grad: &mut [f64],
        _stop: &AtomicBool,
    ) -> Result<()> {
        let mut session = self.session();
        match datasets {
            Datasets::Resident(r) => {
                session.nll_grad(points, r.storage::<DeviceDatasets>()?, which, nll, grad)
            }
            Datasets::Host(host) => {
                let on_device = session.upload_datasets(&host.iter().collect::<Vec<_>>())?;
                session.nll_grad(points, &on_device, which, nll, grad)
            }
        }
    }

    fn sample_toys(
        &self,
        model: &CompiledModel,
        ensembles: &[ToyEnsembleRates],
        seed: u64,
        first: u32,
        n_toys: usize,
    ) -> Result<SampledToys> {
        if !std::ptr::eq(model, self.model) {
            return Err(Error::InvalidInput(
                "toys requested for a model other than the one on the device".into(),
            ));
        }
        let session = self.session();
        let on_device = session.sample_toys(model, ensembles, seed, first, n_toys)?;
        let (main, aux) = session.download_datasets(&on_device)?;
        drop(session);
        let (n_main, n_aux) = (model.n_main, model.n_aux);
        let host = (0..on_device.len())
            .into_par_iter()
            .map(|t| {
                PreparedData::new(
                    model,
                    main[t * n_main..(t + 1) * n_main].to_vec(),
                    aux[t * n_aux..(t + 1) * n_aux].to_vec(),
                )
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(SampledToys {
            host,
            resident: Some(Resident::new(on_device.len(), on_device)),
        })
    }

    fn device_optimizer_memory(&self) -> Option<usize> {
        Some(DEVICE_MAX_MEMORY)
    }

    fn fit_lbfgsb(
        &self,
        problem: &DeviceFitProblem,
        datasets: &Resident,
        options: LbfgsbOptions,
    ) -> Result<DeviceFitOutput> {
        self.session()
            .fit_lbfgsb(problem, datasets.storage::<DeviceDatasets>()?, options)
    }
}
