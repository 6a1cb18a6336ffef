//! The Gauss + exponential benchmark model (signal 12 %, background 85 % of `n`) and its events,
//! shared by the CPU criterion benchmark and the device benchmark example.

use ns_compute::rng::ToyStream;
use ns_unbinned::events::ChannelEvents;
use ns_unbinned::hs3::{ReadOptions, read};

pub fn model(n: usize) -> ns_unbinned::UnbinnedModel {
    let doc = serde_json::json!({
        "metadata": {"hs3_version": "0.2"},
        "distributions": [
            {"name": "sig", "type": "gaussian_dist", "x": "x", "mean": "mean", "sigma": "sigma"},
            {"name": "bkg", "type": "exponential_dist", "x": "x", "c": "c"},
            {"name": "model", "type": "mixture_dist", "summands": ["sig", "bkg"], "coefficients": ["nsig", "nbkg"], "extended": true}
        ],
        "data": [{"name": "obs", "type": "unbinned", "axes": [{"name": "x", "min": 0, "max": 10}], "entries": []}],
        "likelihoods": [{"name": "L", "distributions": ["model"], "data": ["obs"]}],
        "parameter_points": [{"name": "default_values", "parameters": [
            {"name": "mean", "value": 4.8, "min": 0, "max": 10}, {"name": "sigma", "value": 1.1, "min": 0.1, "max": 5},
            {"name": "c", "value": 0.25, "min": -1, "max": 2}, {"name": "nsig", "value": 0.12 * n as f64, "min": 0, "max": 1e9},
            {"name": "nbkg", "value": 0.85 * n as f64, "min": 0, "max": 1e9}]}],
        "analyses": [{"name": "A", "likelihood": "L", "parameters_of_interest": ["nsig"]}]
    });
    read(&doc, &ReadOptions::default()).expect("the benchmark model reads")
}

pub fn events(n: usize) -> ChannelEvents {
    let mut rng = ToyStream::new(1, 0, 0);
    let x = (0..n)
        .map(|i| {
            if i % 10 == 0 {
                (5.0 + rng.normal()).clamp(0.0, 10.0)
            } else {
                -(1.0 - rng.uniform() * (1.0 - (-3.0f64).exp())).ln() / 0.3
            }
        })
        .collect();
    ChannelEvents {
        columns: vec![x],
        weights: None,
    }
}
