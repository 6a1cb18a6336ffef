//! The GPU entry points of the toy workflow, by the names physicists look for. Each opens a CUDA
//! session for the model (uploaded once) and runs the shared implementation on it: the same
//! toys, the same fits and the same statistics as on the CPU.

use ns_compute::PreparedData;
use ns_core::{Error, Result};
use ns_translate::HistFactoryModel;
use std::sync::Arc;

use crate::fit::{FitConfig, FitJob, FitResult, Fitter};
use crate::hypotest::TestStatistic;
use crate::toys::{ToyHypotest, fit_toys, hypotest_toys};

/// Draw `n_toys` toys at `params` on the GPU and fit each (free fit), in lockstep. Returns the
/// toy datasets (as the CPU would draw them, bit for bit) and the fits, in toy order.
pub fn fit_toys_batch_gpu(
    model: &HistFactoryModel,
    params: &[f64],
    n_toys: usize,
    seed: u64,
    config: &FitConfig,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<(Vec<PreparedData>, Vec<Result<FitResult>>)> {
    fit_toys(
        &Fitter::cuda(model, 0)?,
        params,
        n_toys,
        seed,
        config,
        progress,
    )
}

/// Fit caller-supplied datasets on the GPU in lockstep, each with its own starting point and
/// bounds (`init[i]`, `bounds[i]`; one entry is shared by all).
pub fn fit_toys_from_data_gpu(
    model: &HistFactoryModel,
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
    Fitter::cuda(model, 0)?.fit_batch(datasets, &jobs, progress)
}

/// Toy-based CLs with q̃_μ on the GPU: the observed statistic and the generating fits, then both
/// ensembles sampled on the device and fitted (free and fixed-μ fit per toy) in one lockstep batch.
pub fn hypotest_qtilde_toys_gpu(
    model: &HistFactoryModel,
    mu: f64,
    data: &PreparedData,
    config: &FitConfig,
    n_toys: usize,
    seed: u64,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<ToyHypotest> {
    let fitter = Fitter::cuda(model, 0)?;
    hypotest_toys(
        &fitter,
        mu,
        data,
        config,
        TestStatistic::QTilde,
        n_toys,
        seed,
        progress,
    )
}
