//! `auto` for a batch of fits: the CPU or the first GPU, weighed by a fit of the model's
//! observed data timed on this thread.
//!
//! The size of a batch alone does not tell: on a 16-thread H200 host, 2000 toys of tHq (184
//! parameters) run 1.8× faster on CUDA while 2000 toys of the compressed EWKinos likelihood
//! (219 parameters, a similar size) run 1.2× slower there, because every one of its toy fits
//! passes [`HANDOVER_AFTER`] iterations and is fitted again on the host
//! (`Fitter::stopped_for_handover`). A CPU fit, run three times — a few percent of the time of
//! a batch worth weighing — gives both what the CPU would take and whether the device's fits
//! would come back.

use std::time::Instant;

use ns_compute::{CudaGpus, Device, Likelihood, Workload};

use super::newton::{HANDOVER_AFTER, caps_device_fits};
use super::{FitConfig, Fitter};

/// What a process pays before its first device fit when it holds no CUDA context yet: context,
/// kernels, the model and toys uploaded, the first launch. Fitted to whole `hypotest-toys`
/// processes on an H200 host (tHq, 3ℓ on-shell: 0.3–0.6 s above their fits).
const CUDA_OPEN_SECONDS: f64 = 0.5;
/// The same for a process that holds the context already (a server, a Python session).
const CUDA_REOPEN_SECONDS: f64 = 0.05;
/// Fits the device optimizer completes in the time one CPU thread takes for one. Measured on
/// one H200 against one thread of its 16-core host, from 500 and 2000 toys of the published
/// likelihoods whose fits converge on the device: 27–54; with 40, `auto` is within 1.2× of the
/// faster device on every one of them (docs/benchmarks.md).
const DEVICE_FITS_PER_CPU_FIT: f64 = 40.0;

/// What `auto` runs a `workload` of `model` on: the CPU for sequential work and small batches
/// ([`Likelihood::worth_a_gpu`]); a larger batch is weighed by a timed fit ([`choose`]), and
/// only a batch the GPU wins initialises the CUDA driver to see whether a GPU exists (0.1–0.2 s,
/// which a batch kept on the CPU then does not pay). A model whose probe fit fails
/// stays on the CPU, where the batch then reports the failure as it would anywhere.
pub(crate) fn resolve(model: &dyn Likelihood, workload: Workload) -> Device {
    let Workload::Batch { fits } = workload else {
        return Device::Cpu;
    };
    let threads = rayon::current_num_threads();
    // With as many threads as the GPU's throughput in CPU fits, the CPU wins any batch.
    if !model.worth_a_gpu(workload) || threads as f64 >= DEVICE_FITS_PER_CPU_FIT {
        return Device::Cpu;
    }
    let Some(probe) = probe(model) else {
        return Device::Cpu;
    };
    // `auto` offers the first GPU only.
    let open = ns_compute::cuda::context_open(0);
    if choose(fits, &probe, threads, open) && ns_compute::cuda::has_cuda() {
        Device::Cuda(CudaGpus::FIRST)
    } else {
        Device::Cpu
    }
}

/// One fit of the observed data on the CPU, on this thread.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Probe {
    pub seconds: f64,
    pub iterations: usize,
    /// Whether a device fit of such a problem stops at [`HANDOVER_AFTER`] iterations for the
    /// host (`Fitter::handover_cap`: up to 500 free parameters).
    pub capped: bool,
}

/// The probe's time is the faster of two runs after a first: the first of a process also pays
/// for its memory, and one timed run alone moved by 1.5× from process to process on the H200
/// host (offshell: 5.0 or 6.7 ms), enough to flip a choice.
fn probe(model: &dyn Likelihood) -> Option<Probe> {
    let data = model.observed().ok()?;
    let fitter = Fitter::on_device(model, Device::Cpu, Workload::Sequential).ok()?;
    let config = FitConfig::suggested(model);
    let capped = caps_device_fits(&config, config.fixed.iter().filter(|&&f| !f).count());
    fitter.fit(&data, &config).ok()?;
    let timed = || -> Option<Probe> {
        let start = Instant::now();
        let fit = fitter.fit(&data, &config).ok()?;
        Some(Probe {
            seconds: start.elapsed().as_secs_f64(),
            iterations: fit.iterations,
            capped,
        })
    };
    let (first, second) = (timed()?, timed()?);
    Some(match first.seconds <= second.seconds {
        true => first,
        false => second,
    })
}

/// Whether `fits` like `probe` finish sooner on the GPU than on `threads` CPU threads: never
/// where the probe needed more than [`HANDOVER_AFTER`] iterations and the device caps its fits
/// there (they would be fitted again on the host); else, with w = fits × seconds (a toy's fit
/// takes about what the probe takes: tHq 4.6 ms against 4.7 ms per fit of its toys on the H200
/// host), the CPU takes w / threads, the GPU its opening cost plus
/// w / [`DEVICE_FITS_PER_CPU_FIT`].
pub(crate) fn choose(fits: usize, probe: &Probe, threads: usize, context_open: bool) -> bool {
    if probe.capped && probe.iterations > HANDOVER_AFTER {
        return false;
    }
    let work = fits as f64 * probe.seconds;
    let cpu = work / threads.max(1) as f64;
    let open = if context_open {
        CUDA_REOPEN_SECONDS
    } else {
        CUDA_OPEN_SECONDS
    };
    open + work / DEVICE_FITS_PER_CPU_FIT < cpu
}

#[cfg(test)]
mod tests {
    use super::*;
    use ns_translate::{FromWorkspace, HistFactoryModel, ModelOptions, Workspace};

    /// A published likelihood of `../shared/likelihoods` (or `NEXTSTAT_LIKELIHOODS`).
    fn published(name: &str) -> HistFactoryModel {
        let dir = std::env::var("NEXTSTAT_LIKELIHOODS").map_or_else(
            |_| {
                std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/likelihoods")
            },
            std::path::PathBuf::from,
        );
        let ws = Workspace::from_path(&dir.join(name).join("workspace.json")).unwrap_or_else(|e| {
            panic!("{name} (the published likelihoods live in ../shared): {e}")
        });
        HistFactoryModel::from_workspace(&ws, &ModelOptions::default()).unwrap()
    }

    /// The probe tells the likelihood whose fits the device would hand back from one whose fits
    /// it finishes: the compressed EWKinos fit passes the handover, the 3ℓ on-shell one does not.
    #[test]
    fn the_probe_sees_fits_past_the_handover() {
        let stiff = probe(&published("atlas_compressed_EWKinos_2018-16_smodels")).unwrap();
        assert!(stiff.iterations > HANDOVER_AFTER, "{stiff:?}");
        assert!(!choose(usize::MAX >> 8, &stiff, 1, true));
        let converging = probe(&published("atlas_3Lonshell_2019-09_smodels")).unwrap();
        assert!(converging.iterations <= HANDOVER_AFTER, "{converging:?}");
        assert!(
            converging.seconds > 0.0 && converging.seconds < 1.0,
            "{converging:?}"
        );
    }

    const THQ: Probe = Probe {
        seconds: 4.6e-3,
        iterations: 55,
        capped: true,
    };

    #[test]
    fn large_batches_of_converging_fits_go_to_the_gpu_small_ones_stay() {
        // tHq on a 16-thread host: 500 toys (2000 fits) faster on the CPU, 2000 on the GPU.
        assert!(!choose(2000, &THQ, 16, false));
        assert!(choose(8000, &THQ, 16, false));
        // Fewer threads, or a context already open, move the break-even down.
        assert!(choose(2000, &THQ, 2, false));
        assert!(choose(2000, &THQ, 16, true));
    }

    #[test]
    fn fits_past_the_handover_stay_on_the_cpu_however_many() {
        let stiff = Probe {
            iterations: HANDOVER_AFTER + 3,
            ..THQ
        };
        assert!(!choose(1_000_000, &stiff, 1, true));
        let at_the_cap = Probe {
            iterations: HANDOVER_AFTER,
            ..THQ
        };
        assert!(choose(1_000_000, &at_the_cap, 1, true));
        // Above 500 free parameters a device fit runs to its own limit: nothing comes back.
        let uncapped = Probe {
            capped: false,
            ..stiff
        };
        assert!(choose(1_000_000, &uncapped, 1, true));
    }
}
