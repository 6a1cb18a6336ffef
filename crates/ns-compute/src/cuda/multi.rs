//! Several CUDA GPUs of one host behind one [`Backend`]: every GPU holds the model and a copy of
//! every dataset (toys are sampled on each, bit for bit the same), and each batch — evaluations
//! or whole device fits — is cut into contiguous shares, one per GPU, run at the same time and
//! put back in order. A row's result does not depend on which GPU ran it, so the results are the
//! bits one GPU gives.

use std::ops::Range;
use std::sync::atomic::AtomicBool;

use ns_core::optim::LbfgsbOptions;
use ns_core::{CompiledModel, Error, Result};

use super::abi::DEVICE_MAX_MEMORY;
use super::backend::CudaBackend;
use crate::backend::{
    Backend, Batching, Datasets, DeviceFitOutput, DeviceFitProblem, FitSignal, Objective, Resident,
    SampledToys, SignalBatch, check_batch,
};
use crate::data::PreparedData;
use crate::device::{CudaGpus, Device};
use crate::signal::ExternalSignal;
use crate::toys::ToyEnsembleRates;

/// One backend per GPU, sharing each batch.
pub struct MultiCudaBackend {
    gpus: Vec<CudaBackend>,
    set: CudaGpus,
    n_params: usize,
}

/// What a multi-GPU [`Resident`] holds: one per GPU, in GPU order.
struct Replicas(Vec<Resident>);

/// `n` rows cut into `parts` contiguous shares, the first ones a row longer where `n` does not
/// divide evenly.
fn shares(n: usize, parts: usize) -> Vec<Range<usize>> {
    let (base, extra) = (n / parts, n % parts);
    let mut start = 0;
    (0..parts)
        .map(|k| {
            let end = start + base + usize::from(k < extra);
            let share = start..end;
            start = end;
            share
        })
        .collect()
}

/// Rows `rows` of `values`, rows of `width`.
fn rows_of<'v, T>(values: &'v [T], rows: &Range<usize>, width: usize) -> &'v [T] {
    &values[rows.start * width..rows.end * width]
}

/// Run `work` for every GPU, with its own one of `inputs`, on its own thread; the results in GPU
/// order, or the first error.
fn on_every_gpu<I: Send, T: Send>(
    gpus: &[CudaBackend],
    inputs: Vec<I>,
    work: impl Fn(&CudaBackend, I) -> Result<T> + Sync,
) -> Result<Vec<T>> {
    std::thread::scope(|scope| {
        let work = &work;
        let jobs: Vec<_> = gpus
            .iter()
            .zip(inputs)
            .map(|(gpu, input)| scope.spawn(move || work(gpu, input)))
            .collect();
        jobs.into_iter()
            .map(|job| job.join().expect("a GPU worker thread panicked"))
            .collect()
    })
}

impl MultiCudaBackend {
    /// Open every GPU of `ordinals` (at the same time) and upload `model` to each. `set` is the
    /// name the backend reports. The same ordinal may repeat (two sessions on one GPU), which
    /// tests the sharding where a host has one GPU.
    pub fn new(
        model: &CompiledModel,
        ordinals: &[usize],
        set: CudaGpus,
        objective: Objective,
    ) -> Result<Self> {
        if ordinals.is_empty() {
            return Err(Error::InvalidInput("no CUDA GPU was named".into()));
        }
        let gpus = std::thread::scope(|scope| {
            let jobs: Vec<_> = ordinals
                .iter()
                .map(|&i| scope.spawn(move || CudaBackend::new(model, i, objective)))
                .collect();
            jobs.into_iter()
                .map(|job| job.join().expect("a GPU opening thread panicked"))
                .collect::<Result<Vec<_>>>()
        })?;
        Ok(MultiCudaBackend {
            gpus,
            set,
            n_params: model.n_params,
        })
    }

    pub fn gpu_count(&self) -> usize {
        self.gpus.len()
    }

    fn indices(&self) -> Vec<usize> {
        (0..self.gpus.len()).collect()
    }

    fn replicas<'r>(&self, resident: &'r Resident) -> Result<&'r [Resident]> {
        let Replicas(per_gpu) = resident.storage::<Replicas>()?;
        Ok(per_gpu)
    }
}

impl Backend for MultiCudaBackend {
    fn device(&self) -> Device {
        Device::Cuda(self.set)
    }

    fn description(&self) -> String {
        let each: Vec<String> = self.gpus.iter().map(|g| g.description()).collect();
        format!("{} GPUs: {}", self.gpus.len(), each.join(" | "))
    }

    fn batching(&self) -> Batching {
        Batching::Lockstep
    }

    fn upload(&self, datasets: &[PreparedData]) -> Result<Resident> {
        let per_gpu = on_every_gpu(&self.gpus, self.indices(), |gpu, _| gpu.upload(datasets))?;
        Ok(Resident::new(datasets.len(), Replicas(per_gpu)))
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
        let n_params = self.n_params;
        let held = match datasets {
            Datasets::Host(host) => host.len(),
            Datasets::Resident(r) => r.len(),
        };
        check_batch(points, which, nll, grad, n_params, held)?;
        let replicas = match datasets {
            Datasets::Resident(r) => Some(self.replicas(r)?),
            Datasets::Host(_) => None,
        };
        // Each GPU gets its rows and its own disjoint piece of the outputs.
        let mut shares_of_outputs = Vec::with_capacity(self.gpus.len());
        let (mut nll_rest, mut grad_rest) = (nll, grad);
        for (k, rows) in shares(which.len(), self.gpus.len()).into_iter().enumerate() {
            let (nll_share, n_tail) = std::mem::take(&mut nll_rest).split_at_mut(rows.len());
            let (grad_share, g_tail) =
                std::mem::take(&mut grad_rest).split_at_mut(rows.len() * n_params);
            (nll_rest, grad_rest) = (n_tail, g_tail);
            shares_of_outputs.push((k, rows, nll_share, grad_share));
        }
        on_every_gpu(
            &self.gpus,
            shares_of_outputs,
            |gpu, (k, rows, nll_share, grad_share)| {
                let data = match replicas {
                    Some(per_gpu) => Datasets::Resident(&per_gpu[k]),
                    None => datasets,
                };
                gpu.nll_grad_batch(
                    rows_of(points, &rows, n_params),
                    data,
                    &which[rows],
                    nll_share,
                    grad_share,
                    stop,
                )
            },
        )?;
        Ok(())
    }

    fn attach_signal(&self, external: &ExternalSignal) -> Result<Resident> {
        let per_gpu = on_every_gpu(&self.gpus, self.indices(), |gpu, _| {
            gpu.attach_signal(external)
        })?;
        Ok(Resident::new(0, Replicas(per_gpu)))
    }

    /// On the first GPU of the set: device memory given in place lives on one GPU.
    fn nll_grad_signal(&self, attached: &Resident, batch: SignalBatch) -> Result<()> {
        self.gpus[0].nll_grad_signal(&self.replicas(attached)?[0], batch)
    }

    /// Every GPU samples every toy (the same bits: toy `i` of seed `s` is one dataset wherever it
    /// is drawn), so any fit can run on any GPU; the host copies come from the first.
    fn sample_toys(
        &self,
        model: &CompiledModel,
        ensembles: &[ToyEnsembleRates],
        seed: u64,
        first: u32,
        n_toys: usize,
    ) -> Result<SampledToys> {
        let sampled = on_every_gpu(&self.gpus, self.indices(), |gpu, k| {
            if k == 0 {
                gpu.sample_toys(model, ensembles, seed, first, n_toys)
                    .map(|toys| (Some(toys.host), toys.resident))
            } else {
                let on_device = gpu
                    .session()
                    .sample_toys(model, ensembles, seed, first, n_toys)?;
                Ok((None, Some(Resident::new(on_device.len(), on_device))))
            }
        })?;
        let count = n_toys * ensembles.len();
        let mut host = None;
        let mut per_gpu = Vec::with_capacity(sampled.len());
        for (h, resident) in sampled {
            host = host.or(h);
            per_gpu.push(resident.ok_or_else(|| {
                Error::Device("a GPU kept no copy of the toys it sampled".into())
            })?);
        }
        Ok(SampledToys {
            host: host.unwrap_or_default(),
            resident: Some(Resident::new(count, Replicas(per_gpu))),
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
        let (n_fits, np) = (problem.dataset.len(), self.n_params);
        problem.check_rows(np)?;
        // Each GPU checks its share of signal rows against the signal's length; here they only
        // need to be whole rows.
        let width = problem
            .signal
            .map_or(0, |fs| fs.values.len().checked_div(n_fits).unwrap_or(0));
        if let Some(fs) = problem.signal
            && fs.values.len() != n_fits * width
        {
            return Err(Error::InvalidInput(format!(
                "{} signal values are not whole rows for {n_fits} fits",
                fs.values.len()
            )));
        }
        let replicas = self.replicas(datasets)?;
        let signal_replicas = match &problem.signal {
            Some(fs) => Some(self.replicas(fs.attached)?),
            None => None,
        };
        let fits: Vec<(usize, Range<usize>)> = shares(n_fits, self.gpus.len())
            .into_iter()
            .enumerate()
            .collect();
        let parts = on_every_gpu(&self.gpus, fits, |gpu, (k, r)| {
            let signal = match (problem.signal, signal_replicas) {
                (Some(fs), Some(per_gpu)) => Some(FitSignal {
                    attached: &per_gpu[k],
                    values: rows_of(fs.values, &r, width),
                }),
                _ => None,
            };
            let share = DeviceFitProblem {
                init: rows_of(problem.init, &r, np),
                free_index: rows_of(problem.free_index, &r, np),
                n_free: rows_of(problem.n_free, &r, 1),
                lower: rows_of(problem.lower, &r, np),
                upper: rows_of(problem.upper, &r, np),
                scale: rows_of(problem.scale, &r, np),
                dataset: rows_of(problem.dataset, &r, 1),
                signal,
            };
            gpu.fit_lbfgsb(&share, &replicas[k], options, stop)
        })?;
        let mut out = DeviceFitOutput::default();
        for part in parts {
            out.x.extend(part.x);
            out.g.extend(part.g);
            out.f.extend(part.f);
            out.iterations.extend(part.iterations);
            out.evaluations.extend(part.evaluations);
            out.termination.extend(part.termination);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::shares;

    #[test]
    fn shares_are_contiguous_balanced_and_cover_every_row() {
        for (n, parts) in [(0, 2), (1, 2), (7, 3), (10_000, 2), (5, 8)] {
            let s = shares(n, parts);
            assert_eq!(s.len(), parts);
            assert_eq!(s[0].start, 0);
            assert_eq!(s[parts - 1].end, n);
            for w in s.windows(2) {
                assert_eq!(w[0].end, w[1].start);
            }
            let (min, max) = (
                s.iter().map(|r| r.len()).min().unwrap(),
                s.iter().map(|r| r.len()).max().unwrap(),
            );
            assert!(max - min <= 1, "{n} rows in {parts}: {s:?}");
        }
    }
}
