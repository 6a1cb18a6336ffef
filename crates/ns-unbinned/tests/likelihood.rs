//! The unbinned NLL's gradient against finite differences on a model that uses every node kind
//! (extended mixture of products, a fraction mixture, a constraint, generic functions), and its
//! independence of the thread count.

use ns_compute::{Device, Likelihood};
use ns_unbinned::hs3::{ReadOptions, read};

fn model() -> ns_unbinned::UnbinnedModel {
    let entries: Vec<Vec<f64>> = (0..5000)
        .map(|i| {
            let u = (i as f64 * 0.6180339887).fract();
            let v = (i as f64 * 0.4142135623).fract();
            vec![10.0 * u, -5.0 + 10.0 * v]
        })
        .collect();
    let doc = serde_json::json!({
        "metadata": {"hs3_version": "0.2"},
        "distributions": [
            {"name": "gx", "type": "gaussian_dist", "x": "x", "mean": "mean", "sigma": "sigma"},
            {"name": "cb", "type": "crystalball_dist", "m": "x", "m0": "mean", "sigma": "sigma", "alpha": "alpha", "n": 3.0},
            {"name": "core", "type": "mixture_dist", "summands": ["gx", "cb"], "coefficients": ["frac"], "extended": false},
            {"name": "gy", "type": "gaussian_dist", "x": "y", "mean": "ymean", "sigma": 1.5},
            {"name": "sig", "type": "product_dist", "factors": ["core", "gy"]},
            {"name": "ex", "type": "exponential_dist", "x": "x", "c": "c"},
            {"name": "cheb", "type": "chebychev_dist", "x": "y", "coefficients": ["c0", 0.1]},
            {"name": "bkg", "type": "product_dist", "factors": ["ex", "cheb"]},
            {"name": "model", "type": "mixture_dist", "summands": ["sig", "bkg"], "coefficients": ["nsig", "nbkg_eff"], "extended": true},
            {"name": "cons", "type": "gaussian_dist", "x": "glob", "mean": "theta", "sigma": 1.0},
            {"name": "full", "type": "product_dist", "factors": ["model", "cons"]}
        ],
        "functions": [
            {"name": "nsig", "type": "generic_function", "expression": "mu*400"},
            {"name": "nbkg_eff", "type": "generic_function", "expression": "nbkg*exp(0.1*theta)"}
        ],
        "data": [{"name": "obs", "type": "unbinned", "axes": [{"name": "x", "min": 0, "max": 10}, {"name": "y", "min": -5, "max": 5}], "entries": entries}],
        "likelihoods": [{"name": "L", "distributions": ["full"], "data": ["obs"]}],
        "domains": [{"name": "d", "type": "product_domain", "axes": [{"name": "glob", "min": -5, "max": 5}]}],
        "parameter_points": [{"name": "default_values", "parameters": [
            {"name": "mu", "value": 1.1, "min": 0, "max": 10}, {"name": "mean", "value": 5.2, "min": 0, "max": 10},
            {"name": "sigma", "value": 0.9, "min": 0.1, "max": 5}, {"name": "alpha", "value": 1.4, "min": 0.1, "max": 5},
            {"name": "frac", "value": 0.6, "min": 0, "max": 1}, {"name": "ymean", "value": 0.3, "min": -5, "max": 5},
            {"name": "c", "value": 0.2, "min": -1, "max": 2}, {"name": "c0", "value": -0.1, "min": -1, "max": 1},
            {"name": "nbkg", "value": 4500, "min": 0, "max": 1e5}, {"name": "theta", "value": 0.3, "min": -5, "max": 5},
            {"name": "glob", "value": 0.1, "const": true}]}],
        "analyses": [{"name": "A", "likelihood": "L", "parameters_of_interest": ["mu"]}]
    });
    read(&doc, &ReadOptions::default()).expect("the test model reads")
}

#[test]
fn gradient_matches_finite_differences() {
    let m = model();
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
            (grad[i] - numeric).abs() <= 1e-5 * numeric.abs().max(1.0),
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
