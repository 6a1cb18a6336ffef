//! The unbinned NLL's gradient against finite differences on a model that uses every node kind
//! (extended mixture of products, a fraction mixture, a constraint, generic functions), and its
//! independence of the thread count.

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
