//! `auto` for a batch of fits: the CPU or the first GPU, weighed by fits of the model's
//! observed data timed on the CPU — alone, and on every thread at once.
//!
//! The size of a batch alone does not tell: on a 16-thread H200 host, 2000 toys of tHq (184
//! parameters) run 1.8× faster on CUDA while 2000 toys of the compressed EWKinos likelihood
//! (219 parameters, a similar size) run 1.2× slower there, because every one of its toy fits
//! passes [`HANDOVER_AFTER`] iterations and is fitted again on the host
//! (`Fitter::stopped_for_handover`). A few timed CPU fits — at most three alone and two rounds of
//! one per thread, within a few percent of the batch's time — give what the CPU would take, what
//! the GPU would, and whether the device's fits would come back.
//!
//! The constants below are a linear fit of whole `hypotest-toys` processes on the H200 host
//! (tHq, tttt, 3ℓ on-shell at 500, 1000 and 2000 toys, each on the CPU and on CUDA) to the
//! probe's times: docs/benchmarks.md.

use std::time::Instant;

use ns_compute::{CudaGpus, Device, Likelihood, Workload};
use ns_core::Error;

use super::newton::{HANDOVER_AFTER, caps_device_fits};
use super::{FitConfig, Fitter};

/// What a process pays before its first device fit, beyond what a CPU run pays too, when it
/// holds no CUDA context yet: context, kernels, the model and toys uploaded, the first launch
/// (the fit's intercepts: 0.67 s on CUDA, 0.30 s on the CPU).
const CUDA_OPEN_SECONDS: f64 = 0.4;
/// The same for a process that holds the context already (a server, a Python session).
const CUDA_REOPEN_SECONDS: f64 = 0.05;
/// Fits the device optimizer completes in the time one CPU fit takes alone (the fit's slope:
/// 75; in CPU fits of the observed data, the batch's own fits being alike).
const DEVICE_FITS_PER_CPU_FIT: f64 = 75.0;
/// A batch's fit on the loaded CPU, in fits of the observed data on every thread at once (the
/// fit's slope: 0.82; toys start nearer their minimum than the observed data's fit does from
/// the model's initial values).
const CPU_FIT_PER_LOADED_PROBE: f64 = 0.82;

/// The margin by which the GPU's estimate must beat the CPU's for `auto` to open it: where the
/// two are within the estimates' noise a wrong choice costs little either way, and the CPU's
/// time varies less than a GPU's start-up.
const GPU_MARGIN: f64 = 1.1;

/// What `auto` chose for a workload, and why: the numbers it weighed, in words.
#[derive(Clone, Debug, PartialEq)]
pub struct AutoChoice {
    pub device: Device,
    pub reason: String,
}

impl AutoChoice {
    fn cpu(reason: impl Into<String>) -> Self {
        AutoChoice {
            device: Device::Cpu,
            reason: reason.into(),
        }
    }
}

/// What `auto` runs a `workload` of `model` on: the CPU for sequential work, small batches
/// ([`Likelihood::worth_a_gpu`]) and machines without a CUDA driver library; a larger batch is
/// weighed by timed fits ([`estimate`]), and only a batch the GPU wins initialises the CUDA
/// driver to see whether a GPU exists (0.1–0.2 s, which a batch kept on the CPU then does not
/// pay). A model whose probe fit fails stays on the CPU, where the batch then reports the
/// failure as it would anywhere.
pub(crate) fn resolve(model: &dyn Likelihood, workload: Workload) -> AutoChoice {
    let mut choice = choose(model, workload);
    // A driver that is there but unusable (a stub, one too old) is worth knowing of whatever
    // the batch's size: checking for one loads the library, it initialises nothing.
    if choice.device == Device::Cpu
        && let Some(problem) = ns_compute::cuda::cuda_driver_problem()
        && !choice.reason.contains(problem)
    {
        choice.reason = format!("{} ({problem})", choice.reason);
    }
    choice
}

fn choose(model: &dyn Likelihood, workload: Workload) -> AutoChoice {
    let Workload::Batch { fits } = workload else {
        return AutoChoice::cpu("one fit at a time (a fit, scan or limit) is fastest on the CPU");
    };
    if !model.worth_a_gpu(workload) {
        return AutoChoice::cpu(format!(
            "{fits} fits of this model are too few for a GPU to repay opening it"
        ));
    }
    if let Some(absent) = ns_compute::cuda::cuda_driver_absent() {
        return AutoChoice::cpu(format!(
            "{fits} fits of this model would be weighed for a GPU, but {absent}"
        ));
    }
    let Some(probe) = probe(model, fits) else {
        return AutoChoice::cpu("the fit of the observed data failed on the CPU");
    };
    // `auto` offers the first GPU only.
    let threads = rayon::current_num_threads();
    let (gpu_wins, weighed) = weigh(fits, &probe, threads, ns_compute::cuda::context_open(0));
    if !gpu_wins {
        return AutoChoice::cpu(weighed);
    }
    match ns_compute::cuda::has_cuda() {
        true => AutoChoice {
            device: Device::Cuda(CudaGpus::FIRST),
            reason: weighed,
        },
        false => AutoChoice::cpu(format!(
            "{weighed}, but {}",
            match ns_compute::cuda::cuda_unavailable() {
                Error::Device(message) => message,
                other => other.to_string(),
            }
        )),
    }
}

/// Fits of the observed data on the CPU: one alone, and one on every thread at once.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Probe {
    /// Seconds of one fit on one thread, the others idle: the GPU's estimate is in these.
    pub seconds: f64,
    /// Seconds per fit of the CPU as a whole with every thread fitting (the median fit's
    /// seconds over the threads): the CPU's estimate. Threads slow each other (shared caches,
    /// memory bandwidth, clock boost, hyper-threads): on the 16-thread H200 host the CPU ran
    /// 500 tHq toys ~1.3× slower than sixteen of its fits alone would.
    pub loaded_seconds: f64,
    pub iterations: usize,
    /// Whether a device fit of such a problem stops at [`HANDOVER_AFTER`] iterations for the
    /// host (`Fitter::handover_cap`: up to 500 free parameters).
    pub capped: bool,
    /// Timing rounds run (a fit alone, or one on every thread): 1 to 5 ([`PROBE_SHARE`]).
    pub rounds: usize,
}

/// The share of the CPU's estimated batch time (from the probe's first fit) that its further
/// timed fits may take: a model whose fit is long against its batch (a large model, few toys)
/// is weighed by fewer of them.
const PROBE_SHARE: f64 = 0.05;
/// A fit on every thread at once against one alone, for a probe without the time to measure
/// it: the median over the probes of tHq, tttt, 3ℓ on-shell and the off-shell likelihoods on
/// the 16-thread H200 host (1.0–1.67).
const LOADED_SLOWDOWN: f64 = 1.2;

/// A first fit (timed: it also pays for the process's memory, and its time sets the probe's
/// budget), then, as far as [`PROBE_SHARE`] of the batch allows: two more fits alone, the
/// fastest of the three counting (one timed run alone moved by 1.5× from process to process on
/// the H200 host, enough to flip a choice), and one fit on every thread, twice, each fit timed:
/// the median of the last round (the first wakes the threads). The median, not the round's span,
/// which counts the threads' start and the slowest straggler. The variable scaling and the first
/// fit are paid whatever the budget.
fn probe(model: &dyn Likelihood, fits: usize) -> Option<Probe> {
    let data = model.observed().ok()?;
    let fitter = Fitter::on_device(model, Device::Cpu, Workload::Sequential).ok()?;
    // With the variable scaling computed once, as a batch's fits have it.
    let config = fitter
        .with_scale(&data, &FitConfig::suggested(model))
        .ok()?;
    let capped = caps_device_fits(&config, config.fixed.iter().filter(|&&f| !f).count());
    let threads = rayon::current_num_threads();
    let timed = || -> Option<(f64, usize)> {
        let start = Instant::now();
        let iterations = fitter.fit(&data, &config).ok()?.iterations;
        Some((start.elapsed().as_secs_f64(), iterations))
    };
    let on_every_thread = || -> Option<f64> {
        let mut seconds = rayon::broadcast(|_| timed().map(|(s, _)| s))
            .into_iter()
            .collect::<Option<Vec<f64>>>()?;
        seconds.sort_by(f64::total_cmp);
        Some(seconds[seconds.len() / 2])
    };
    let (first, iterations) = timed()?;
    let mut budget = PROBE_SHARE * fits as f64 * first / threads as f64;
    let mut afford = |cost: f64| {
        budget -= cost;
        budget >= 0.0
    };
    let (mut seconds, mut loaded, mut rounds) = (first, None, 1);
    for _ in 0..2 {
        if afford(seconds) {
            seconds = seconds.min(timed()?.0);
            rounds += 1;
        }
    }
    for _ in 0..2 {
        if afford(seconds * LOADED_SLOWDOWN) {
            loaded = Some(on_every_thread()?);
            rounds += 1;
        }
    }
    Some(Probe {
        seconds,
        loaded_seconds: loaded.unwrap_or(seconds * LOADED_SLOWDOWN) / threads as f64,
        iterations,
        capped,
        rounds,
    })
}

/// Whether `fits` like `probe` finish sooner on the GPU than on the CPU's `threads`, by
/// [`GPU_MARGIN`], and why, in words: never where the probe needed more than
/// [`HANDOVER_AFTER`] iterations and the device caps its fits there (they would be fitted again
/// on the host); else by the [`estimate`].
pub(crate) fn weigh(
    fits: usize,
    probe: &Probe,
    threads: usize,
    context_open: bool,
) -> (bool, String) {
    if probe.capped && probe.iterations > HANDOVER_AFTER {
        return (
            false,
            format!(
                "the fit of the observed data took {} iterations, more than the {HANDOVER_AFTER} \
                 after which a device fit is handed back to the CPU",
                probe.iterations
            ),
        );
    }
    let Estimate { cpu, gpu } = estimate(fits, probe, context_open);
    let gpu_wins = gpu * GPU_MARGIN < cpu;
    let loaded = probe.loaded_seconds * threads as f64 * 1e3;
    // The loaded rounds come after the two alone ([`probe`]).
    let loaded = match probe.rounds > 3 {
        true => format!(
            "{loaded:.2} ms on each of {} at once",
            plural(threads, "thread")
        ),
        false => format!(
            "{loaded:.2} ms assumed on each of {} at once",
            plural(threads, "thread")
        ),
    };
    let verdict = match (gpu_wins, gpu < cpu) {
        (true, _) => "the GPU".to_string(),
        (false, true) => format!("the CPU (the GPU is not {GPU_MARGIN}× faster)"),
        (false, false) => "the CPU".to_string(),
    };
    let weighed = format!(
        "a CPU fit of the observed data takes {:.2} ms alone and {loaded} ({}): {fits} fits ≈ \
         {cpu:.2} s on the CPU, ≈ {gpu:.2} s on the GPU, so {verdict}",
        probe.seconds * 1e3,
        plural(probe.rounds, "timing round"),
    );
    (gpu_wins, weighed)
}

/// `n` `thing`s, in words.
fn plural(n: usize, thing: &str) -> String {
    match n {
        1 => format!("1 {thing}"),
        n => format!("{n} {thing}s"),
    }
}

/// Seconds a batch would take on each device.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Estimate {
    pub cpu: f64,
    pub gpu: f64,
}

/// How long `fits` like `probe` take on the CPU, all threads fitting (fits × the loaded
/// probe's seconds per fit × [`CPU_FIT_PER_LOADED_PROBE`]), and on the GPU: its opening cost
/// plus fits × (one fit alone) / [`DEVICE_FITS_PER_CPU_FIT`]. What both devices pay alike
/// (reading the model, the baseline fits) is left out.
pub(crate) fn estimate(fits: usize, probe: &Probe, context_open: bool) -> Estimate {
    let open = if context_open {
        CUDA_REOPEN_SECONDS
    } else {
        CUDA_OPEN_SECONDS
    };
    Estimate {
        cpu: fits as f64 * probe.loaded_seconds * CPU_FIT_PER_LOADED_PROBE,
        gpu: open + fits as f64 * probe.seconds / DEVICE_FITS_PER_CPU_FIT,
    }
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
        // A batch of one fit affords the probe's first fit alone.
        let stiff = probe(&published("atlas_compressed_EWKinos_2018-16_smodels"), 1).unwrap();
        assert!(stiff.iterations > HANDOVER_AFTER, "{stiff:?}");
        assert!(!weigh(usize::MAX >> 8, &stiff, 1, true).0);
        let converging = probe(
            &published("atlas_3Lonshell_2019-09_smodels"),
            usize::MAX >> 8,
        )
        .unwrap();
        assert!(converging.iterations <= HANDOVER_AFTER, "{converging:?}");
        assert!(
            converging.seconds > 0.0
                && converging.seconds < 1.0
                && converging.loaded_seconds > 0.0
                && converging.loaded_seconds.is_finite(),
            "{converging:?}"
        );
    }

    /// The probe's timing rounds are bounded by the batch: one fit's batch gets the first fit
    /// alone (the loaded time then assumed from it), a vast one all five rounds.
    #[test]
    fn the_probe_spends_in_proportion_to_the_batch() {
        let model = published("atlas_3Lonshell_2019-09_smodels");
        let small = probe(&model, 1).unwrap();
        assert_eq!(small.rounds, 1, "{small:?}");
        let threads = rayon::current_num_threads() as f64;
        assert_eq!(
            small.loaded_seconds,
            small.seconds * LOADED_SLOWDOWN / threads
        );
        assert_eq!(probe(&model, usize::MAX >> 8).unwrap().rounds, 5);
        // From inside a pool, as the server weighs a batch on the pool it would run on.
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap();
        assert_eq!(
            pool.install(|| probe(&model, usize::MAX >> 8))
                .unwrap()
                .rounds,
            5
        );
    }

    /// tHq on the 16-thread H200 host: 4.6 ms a fit alone, 16 at once 1.3× slower each.
    const THQ: Probe = Probe {
        seconds: 4.6e-3,
        loaded_seconds: 4.6e-3 * 1.3 / 16.0,
        iterations: 55,
        capped: true,
        rounds: 5,
    };

    #[test]
    fn large_batches_of_converging_fits_go_to_the_gpu_small_ones_stay() {
        // 250 toys (1000 fits) faster on the CPU, 1000 toys on the GPU.
        assert!(!weigh(1000, &THQ, 16, false).0);
        assert!(weigh(4000, &THQ, 16, false).0);
        // Fewer threads, or a context already open, move the break-even down.
        let two_threads = Probe {
            loaded_seconds: 4.6e-3 / 2.0,
            ..THQ
        };
        assert!(weigh(1000, &two_threads, 2, false).0);
        assert!(weigh(1000, &THQ, 16, true).0);
    }

    /// Where the GPU's estimate wins by less than the margin the batch stays on the CPU: at 1700
    /// tHq fits the GPU is estimated 1.03× faster, at 4000 1.9×.
    #[test]
    fn near_ties_stay_on_the_cpu() {
        let close = estimate(1700, &THQ, false);
        assert!(
            close.gpu < close.cpu && close.gpu * GPU_MARGIN > close.cpu,
            "{close:?}"
        );
        let (gpu_wins, reason) = weigh(1700, &THQ, 16, false);
        assert!(!gpu_wins);
        assert!(
            reason.contains("on each of 16 threads at once (5 timing rounds)")
                && reason.ends_with("so the CPU (the GPU is not 1.1× faster)"),
            "{reason}"
        );
        let (gpu_wins, reason) = weigh(4000, &THQ, 16, false);
        assert!(gpu_wins && reason.ends_with("so the GPU"), "{reason}");
        // Without the time to measure the loaded CPU, the reason says it was assumed.
        let hurried = Probe { rounds: 1, ..THQ };
        let reason = weigh(4000, &hurried, 1, false).1;
        assert!(
            reason.contains("assumed on each of 1 thread at once (1 timing round)"),
            "{reason}"
        );
    }

    #[test]
    fn fits_past_the_handover_stay_on_the_cpu_however_many() {
        let stiff = Probe {
            iterations: HANDOVER_AFTER + 3,
            ..THQ
        };
        assert!(!weigh(1_000_000, &stiff, 1, true).0);
        let at_the_cap = Probe {
            iterations: HANDOVER_AFTER,
            ..THQ
        };
        assert!(weigh(1_000_000, &at_the_cap, 1, true).0);
        // Above 500 free parameters a device fit runs to its own limit: nothing comes back.
        let uncapped = Probe {
            capped: false,
            ..stiff
        };
        assert!(weigh(1_000_000, &uncapped, 1, true).0);
    }
}
