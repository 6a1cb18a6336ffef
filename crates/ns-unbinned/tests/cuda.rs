//! The CUDA backend of unbinned models against the CPU: NLL and gradient on every shape and
//! node kind, batches of rows on several datasets, run-to-run identity, fits. They need a CUDA
//! GPU: ignored here (reported as such), run on the GPU machine with `--include-ignored`.

mod common;

use std::sync::atomic::AtomicBool;

use ns_compute::{Backend, CudaGpus, Datasets, Device, Likelihood};

const CUDA: Device = Device::Cuda(CudaGpus::FIRST);

fn compare(m: &ns_unbinned::UnbinnedModel, points: &[Vec<f64>]) {
    let cpu = m.open(Device::Cpu).unwrap();
    let gpu = m.open(CUDA).expect("a CUDA GPU");
    let backend = cpu.as_ref();
    let toys = m
        .sample_toys(backend, &[(&points[0], 0)], 3, 0, 3)
        .unwrap()
        .host;
    let mut datasets = vec![m.observed().unwrap()];
    datasets.extend(toys);
    let n = m.n_params();
    let rows = points.len() * datasets.len();
    let flat: Vec<f64> = (0..rows)
        .flat_map(|r| points[r % points.len()].clone())
        .collect();
    let which: Vec<u32> = (0..rows).map(|r| (r / points.len()) as u32).collect();
    let stop = AtomicBool::new(false);
    let run = |b: &dyn Backend, resident: bool| {
        let (mut nll, mut grad) = (vec![0.0; rows], vec![0.0; rows * n]);
        let held;
        let data = if resident {
            held = b.upload(&datasets).unwrap();
            Datasets::Resident(&held)
        } else {
            Datasets::Host(&datasets)
        };
        b.nll_grad_batch(&flat, data, &which, &mut nll, &mut grad, &stop)
            .unwrap();
        (nll, grad)
    };
    let (want_nll, want_grad) = run(backend, false);
    let (got_nll, got_grad) = run(gpu.as_ref(), true);
    for r in 0..rows {
        assert!(
            (got_nll[r] - want_nll[r]).abs() <= 1e-12 * want_nll[r].abs().max(1.0),
            "row {r}: NLL {} against the CPU's {}",
            got_nll[r],
            want_nll[r]
        );
        for (i, name) in m.parameter_names().iter().enumerate() {
            let (g, w) = (got_grad[r * n + i], want_grad[r * n + i]);
            let scale = want_grad[r * n..(r + 1) * n]
                .iter()
                .fold(1.0f64, |a, x| a.max(x.abs()));
            assert!(
                (g - w).abs() <= 1e-10 * scale,
                "row {r}: ∂NLL/∂{name} {g} against the CPU's {w}"
            );
        }
    }
    // The same launch twice gives the same bits.
    assert_eq!(
        run(gpu.as_ref(), true),
        run(gpu.as_ref(), false),
        "CUDA results vary between runs"
    );
}

#[test]
#[ignore = "needs a CUDA GPU: run with --include-ignored on the GPU machine"]
fn nll_and_gradient_match_the_cpu_on_every_node_kind() {
    let m = common::model();
    let init = m.suggested_init();
    let shifted: Vec<f64> = init.iter().map(|v| v * 1.03 + 0.01).collect();
    compare(&m, &[init, shifted]);
}

#[test]
#[ignore = "needs a CUDA GPU: run with --include-ignored on the GPU machine"]
fn nll_and_gradient_match_the_cpu_on_the_other_shapes_with_weights() {
    let m = common::other_shapes();
    compare(&m, &[m.suggested_init()]);
}

#[test]
#[ignore = "needs a CUDA GPU: run with --include-ignored on the GPU machine"]
fn fits_on_cuda_match_the_cpu() {
    let m = common::model();
    let data = m.observed().unwrap();
    let config = ns_inference::FitConfig {
        uncertainties: true,
        ..ns_inference::FitConfig::suggested(&m)
    };
    let cpu = ns_inference::Fitter::new(&m).fit(&data, &config).unwrap();
    let gpu = ns_inference::Fitter::with_backend(&m, m.open(CUDA).unwrap())
        .unwrap()
        .fit(&data, &config)
        .unwrap();
    assert!(gpu.converged);
    assert!((gpu.twice_nll - cpu.twice_nll).abs() <= 1e-8 * cpu.twice_nll.abs());
    let (sg, sc) = (gpu.uncertainties.unwrap(), cpu.uncertainties.unwrap());
    // Both stop at the optimizer's tolerance, from gradients that differ in the last bits.
    for i in 0..m.n_params() {
        let name = &m.parameter_names()[i];
        // A parameter at a bound has no uncertainty: both fits must sit on it.
        let tolerance = if sc[i] > 0.0 {
            1e-3 * sc[i]
        } else {
            1e-8 * cpu.parameters[i].abs().max(1.0)
        };
        assert!(
            (gpu.parameters[i] - cpu.parameters[i]).abs() <= tolerance,
            "{name}: {} against {} ± {}",
            gpu.parameters[i],
            cpu.parameters[i],
            sc[i]
        );
        assert!(
            (sg[i] - sc[i]).abs() <= 1e-3 * sc[i],
            "σ {name}: {} against {}",
            sg[i],
            sc[i]
        );
    }
}
