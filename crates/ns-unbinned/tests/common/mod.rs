//! Models the integration tests share.

use ns_unbinned::hs3::{ReadOptions, read};

/// A model with every node kind: an extended mixture of products over two observables, a
/// fraction mixture, a one-sided Crystal Ball, Chebychev, a Gaussian constraint, generic
/// functions; 5000 events spread by a low-discrepancy sequence.
pub fn model() -> ns_unbinned::UnbinnedModel {
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

/// One-observable models of the other shapes (ARGUS, polynomial, histogram, two-sided Crystal
/// Ball) with weighted events.
pub fn other_shapes() -> ns_unbinned::UnbinnedModel {
    let entries: Vec<Vec<f64>> = (0..3000)
        .map(|i| vec![5.2 + 0.0899 * (i as f64 * 0.7548776662).fract()])
        .collect();
    let weights: Vec<f64> = (0..3000).map(|i| 0.5 + (i % 5) as f64 * 0.25).collect();
    let doc = serde_json::json!({
        "metadata": {"hs3_version": "0.2"},
        "distributions": [
            {"name": "argus", "type": "ARGUS_dist", "mass": "m", "resonance": 5.29, "slope": "k", "power": "p"},
            {"name": "poly", "type": "polynomial_dist", "x": "m", "coefficients": ["1.0", "a1"]},
            {"name": "hist", "type": "histogram_dist", "data": {"axes": [{"name": "m", "min": 5.2, "max": 5.3, "nbins": 5}], "contents": [1, 2, 3, 2, 1]}},
            {"name": "cb2", "type": "crystalball_doublesided_dist", "m": "m", "m0": "m0", "sigma_L": "sl", "sigma_R": "sr", "alpha_L": 1.2, "n_L": "nl", "alpha_R": 1.7, "n_R": 3.0},
            {"name": "model", "type": "mixture_dist", "summands": ["argus", "poly", "hist", "cb2"], "coefficients": ["n1", "n2", "n3", "n4"], "extended": true}
        ],
        "data": [{"name": "obs", "type": "unbinned", "axes": [{"name": "m", "min": 5.2, "max": 5.2899}], "entries": entries, "weights": weights}],
        "likelihoods": [{"name": "L", "distributions": ["model"], "data": ["obs"]}],
        "parameter_points": [{"name": "default_values", "parameters": [
            {"name": "k", "value": -20, "min": -100, "max": -1}, {"name": "p", "value": 0.7, "min": 0.1, "max": 2},
            {"name": "a1", "value": -0.1, "min": -0.19, "max": 1}, {"name": "m0", "value": 5.25, "min": 5.2, "max": 5.3},
            {"name": "sl", "value": 0.004, "min": 0.001, "max": 0.05}, {"name": "sr", "value": 0.006, "min": 0.001, "max": 0.05},
            {"name": "nl", "value": 2.5, "min": 1.1, "max": 10},
            {"name": "n1", "value": 2000, "min": 0, "max": 1e5}, {"name": "n2", "value": 1000, "min": 0, "max": 1e5},
            {"name": "n3", "value": 500, "min": 0, "max": 1e5}, {"name": "n4", "value": 2500, "min": 0, "max": 1e5}]}],
        "analyses": [{"name": "A", "likelihood": "L", "parameters_of_interest": ["n4"]}]
    });
    read(&doc, &ReadOptions::default()).expect("the test model reads")
}
