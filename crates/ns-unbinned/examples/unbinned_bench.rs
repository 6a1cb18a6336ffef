//! Unbinned Gauss + exponential on one device: NLL + gradient per call (events resident), a
//! full fit (with and without the Hessian), and 1000 toy fits of 10⁴ events. Prints a Markdown
//! table.
//!
//!     cargo run --release -p ns-unbinned --example unbinned_bench -- cpu|cuda [EVENTS...]

use std::sync::atomic::AtomicBool;
use std::time::Instant;

use ns_compute::{CudaGpus, Datasets, Device, Likelihood};
use ns_inference::{FitConfig, Fitter};
use ns_unbinned::events::pack;

#[path = "support/gauss_exp.rs"]
mod gauss_exp;
use gauss_exp::{events, model};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let device = match args.next().as_deref() {
        Some("cuda") => Device::Cuda(CudaGpus::FIRST),
        _ => Device::Cpu,
    };
    let sizes: Vec<usize> = args
        .map(|a| a.parse::<f64>().expect("event counts") as usize)
        .collect();
    let sizes = if sizes.is_empty() {
        vec![100_000, 1_000_000, 10_000_000]
    } else {
        sizes
    };
    println!(
        "| device | events | NLL+grad per call | fit (no Hessian) | fit + Hessian | iterations |"
    );
    println!("|---|---|---|---|---|---|");
    for n in sizes {
        let m = model(n);
        let data = pack(&[events(n)], Vec::new(), 0.0);
        let backend = m.open(device).expect("the device opens");
        let resident = backend.upload(std::slice::from_ref(&data)).unwrap();
        let theta = m.suggested_init();
        let (mut nll, mut grad) = ([0.0], vec![0.0; theta.len()]);
        let stop = AtomicBool::new(false);
        let times: Vec<f64> = (0..21)
            .map(|_| {
                let t = Instant::now();
                backend
                    .nll_grad_batch(
                        &theta,
                        Datasets::Resident(&resident),
                        &[0],
                        &mut nll,
                        &mut grad,
                        &stop,
                    )
                    .unwrap();
                t.elapsed().as_secs_f64()
            })
            .collect();
        let call = median(times[1..].to_vec());
        let fitter = Fitter::with_backend(&m, m.open(device).unwrap()).unwrap();
        let plain = FitConfig::suggested(&m);
        let t = Instant::now();
        let fit = fitter.fit(&data, &plain).unwrap();
        let fit_time = t.elapsed().as_secs_f64();
        let hessian = FitConfig {
            uncertainties: true,
            ..plain
        };
        let t = Instant::now();
        fitter.fit(&data, &hessian).unwrap();
        let full = t.elapsed().as_secs_f64();
        println!(
            "| {} | {n:.0e} | {:.3} ms ({:.2} ns/event) | {:.1} ms | {:.1} ms | {} |",
            device.name(),
            call * 1e3,
            call * 1e9 / n as f64,
            fit_time * 1e3,
            full * 1e3,
            fit.iterations
        );
    }
    // 1000 toy fits of 10⁴ events.
    let m = model(10_000);
    let fitter = Fitter::with_backend(&m, m.open(device).unwrap()).unwrap();
    let config = FitConfig::suggested(&m);
    let t = Instant::now();
    let (_, fits) =
        ns_inference::toys::fit_toys(&fitter, &m.suggested_init(), 1000, 7, &config, &|_| {})
            .unwrap();
    let elapsed = t.elapsed().as_secs_f64();
    let converged = fits
        .iter()
        .filter(|f| f.as_ref().is_ok_and(|f| f.converged))
        .count();
    println!(
        "\n1000 toy fits of 1e4 events on {}: {:.3} s ({converged} converged)",
        device.name(),
        elapsed
    );
}
