//! The CUDA backend: a [`CudaSession`] behind the [`Backend`] interface. Datasets live in device
//! memory, many fits run in lockstep or entirely on the device (the device optimizer), and toys
//! are sampled on the device.

use std::sync::atomic::AtomicBool;
use std::sync::{Mutex, MutexGuard};

use ns_core::optim::LbfgsbOptions;
use ns_core::{CompiledModel, Error, Result};
use rayon::prelude::*;

use super::abi::DEVICE_MAX_MEMORY;
use super::session::{CudaSession, DeviceDatasets, DeviceSignal};
use crate::backend::{
    Backend, Batching, Datasets, DeviceFitOutput, DeviceFitProblem, Objective, Resident,
    SampledToys, SignalBatch, Values,
};
use crate::data::PreparedData;
use crate::device::{CudaGpus, Device};
use crate::signal::ExternalSignal;
use crate::toys::ToyEnsembleRates;

/// CUDA device `ordinal` holding one model.
pub struct CudaBackend {
    ordinal: usize,
    /// The address of the model uploaded (toys are sampled from the device's copy, so a request
    /// for another model is refused).
    model_address: usize,
    /// Launches are serialised through the session (one stream, reused buffers).
    session: Mutex<CudaSession>,
}

impl CudaBackend {
    /// Open device `ordinal`, load (or compile) the kernels and upload `model`, evaluating
    /// `objective`.
    pub fn new(model: &CompiledModel, ordinal: usize, objective: Objective) -> Result<Self> {
        Ok(CudaBackend {
            ordinal,
            model_address: model as *const CompiledModel as usize,
            session: Mutex::new(CudaSession::new(model, ordinal, objective)?),
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

impl Backend for CudaBackend {
    fn device(&self) -> Device {
        Device::Cuda(CudaGpus::Set(1 << self.ordinal))
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
        stop: &AtomicBool,
    ) -> Result<()> {
        let mut session = self.session();
        match datasets {
            Datasets::Resident(r) => session.nll_grad(
                points,
                r.storage::<DeviceDatasets>()?,
                which,
                nll,
                grad,
                stop,
            ),
            Datasets::Host(host) => {
                let on_device = session.upload_datasets(&host.iter().collect::<Vec<_>>())?;
                session.nll_grad(points, &on_device, which, nll, grad, stop)
            }
        }
    }

    fn attach_signal(&self, external: &ExternalSignal) -> Result<Resident> {
        let on_device = self.session().upload_signal(external)?;
        Ok(Resident::new(0, (external.clone(), on_device)))
    }

    fn nll_grad_signal(&self, attached: &Resident, batch: SignalBatch) -> Result<()> {
        let (external, on_device) = attached.storage::<(ExternalSignal, DeviceSignal)>()?;
        // Yields on the host are checked here, each with its own message; yields read in place
        // reach the kernel unchecked, and a bad one shows as a non-finite NLL.
        if let Values::Host(signals) = batch.signals {
            for row in signals.chunks(external.len().max(1)) {
                external.check(row)?;
            }
        }
        self.session().nll_grad_signal(on_device, batch)
    }

    fn sample_toys(
        &self,
        model: &CompiledModel,
        ensembles: &[ToyEnsembleRates],
        seed: u64,
        first: u32,
        n_toys: usize,
    ) -> Result<SampledToys> {
        if model as *const CompiledModel as usize != self.model_address {
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
        stop: &AtomicBool,
    ) -> Result<DeviceFitOutput> {
        let signal = match &problem.signal {
            Some(fs) => {
                let (_, on_device) = fs.attached.storage::<(ExternalSignal, DeviceSignal)>()?;
                Some((on_device, fs.values))
            }
            None => None,
        };
        self.session().fit_lbfgsb(
            problem,
            datasets.storage::<DeviceDatasets>()?,
            options,
            signal,
            stop,
        )
    }
}
