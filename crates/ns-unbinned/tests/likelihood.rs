//! The unbinned NLL's gradient against finite differences on a model that uses every node kind
//! (extended mixture of products, a fraction mixture, a constraint, generic functions), and its
//! independence of the thread count and of the instruction set.

use ns_compute::{Device, Likelihood};

mod common;

use common::model;

#[test]
fn gradient_matches_finite_differences() {
    check_gradient(&model(), 1e-5);
    // A two-sided Crystal Ball's NLL is only C¹ in its peak (events cross the tail joins): the
    // central difference itself is good to ~1e-5 there.
    check_gradient(&common::other_shapes(), 1e-4);
}

fn check_gradient(m: &ns_unbinned::UnbinnedModel, tolerance: f64) {
    let data = m.observed().unwrap();
    let theta = m.suggested_init();
    let mut grad = vec![0.0; theta.len()];
    m.nll_grad(&data, &theta, &mut grad).unwrap();
    let mut scratch = vec![0.0; theta.len()];
    for (i, name) in m.parameter_names().iter().enumerate() {
        let h = 1e-6 * theta[i].abs().max(1.0);
        let at = |d: f64, g: &mut [f64]| {
            let mut t = theta.clone();
            t[i] += d;
            m.nll_grad(&data, &t, g).unwrap()
        };
        let numeric = (at(h, &mut scratch) - at(-h, &mut scratch)) / (2.0 * h);
        assert!(
            (grad[i] - numeric).abs() <= tolerance * numeric.abs().max(1.0),
            "∂NLL/∂{name}: {} against {numeric}",
            grad[i]
        );
    }
}

#[test]
fn results_do_not_depend_on_the_thread_count() {
    let m = model();
    let data = m.observed().unwrap();
    let theta = m.suggested_init();
    let run = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        let mut grad = vec![0.0; theta.len()];
        let nll = pool.install(|| m.nll_grad(&data, &theta, &mut grad).unwrap());
        (
            nll.to_bits(),
            grad.iter().map(|g| g.to_bits()).collect::<Vec<_>>(),
        )
    };
    assert_eq!(run(1), run(3));
    // Toys too.
    let backend = m.open(Device::Cpu).unwrap();
    let toys = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| {
            m.sample_toys(backend.as_ref(), &[(&theta, 0)], 9, 0, 6)
                .unwrap()
                .host
        })
    };
    assert_eq!(toys(1), toys(4));
}

/// The NLL and gradient bits on both test models, one line.
fn result_bits() -> String {
    [model(), common::other_shapes()]
        .iter()
        .flat_map(|m| {
            let theta = m.suggested_init();
            let mut grad = vec![0.0; theta.len()];
            let nll = m
                .nll_grad(&m.observed().unwrap(), &theta, &mut grad)
                .unwrap();
            std::iter::once(nll).chain(grad)
        })
        .map(|x| format!("{:016x}", x.to_bits()))
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn every_instruction_set_gives_the_same_bits() {
    const CHILD: &str = "NS_UNBINNED_BITS_CHILD";
    if std::env::var_os(CHILD).is_some() {
        println!("bits: {}", result_bits());
        return;
    }
    // The instruction set is read once per process: each runs this test in a process of its own.
    let sets = ns_core::simd::available();
    let runs: Vec<String> = sets
        .iter()
        .map(|set| {
            let out = std::process::Command::new(std::env::current_exe().unwrap())
                .args([
                    "every_instruction_set_gives_the_same_bits",
                    "--exact",
                    "--nocapture",
                ])
                .env(CHILD, "1")
                .env("NEXTSTAT_CPU_SIMD", set.name())
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            let line = text.lines().find_map(|l| l.strip_prefix("bits: "));
            line.unwrap_or_else(|| panic!("{set:?}: no result in {text}"))
                .to_string()
        })
        .collect();
    eprintln!("instruction sets compared: {sets:?}");
    assert!(!runs.is_empty());
    for (set, bits) in sets.iter().zip(&runs) {
        assert_eq!(bits, &runs[0], "{set:?} differs from the baseline");
    }
    assert_eq!(runs[0], result_bits());
}

#[test]
fn a_fit_recovers_its_own_asimov_point() {
    let m = model();
    let theta = m.suggested_init();
    let asimov = m.asimov(&theta).unwrap();
    let fitter = ns_inference::Fitter::new(&m);
    let config = ns_inference::FitConfig {
        uncertainties: true,
        ..ns_inference::FitConfig::suggested(&m)
    };
    let fit = fitter.fit(&asimov, &config).unwrap();
    assert!(fit.converged);
    let sigma = fit.uncertainties.as_ref().unwrap();
    // 100 cells per observable: the midpoint rule moves the optimum by a small part of a sigma.
    for (i, name) in m.parameter_names().iter().enumerate() {
        let (got, want) = (fit.parameters[i], theta[i]);
        assert!(
            (got - want).abs() <= 0.1 * sigma[i],
            "{name}: {got} against {want} ± {}",
            sigma[i]
        );
    }
}
