//! Inputs that would take memory or time out of proportion are refused with a clear error, or
//! kept in proportion: functions that double at every level, toys of enormous expected counts,
//! Asimov data of many observables, deeply nested expressions.

use ns_compute::{Device, Likelihood};
use ns_unbinned::hs3::{ReadOptions, read};
use serde_json::json;

fn one_gaussian(
    extra_functions: serde_json::Value,
    yield_ref: &str,
    axes: usize,
) -> serde_json::Value {
    let names: Vec<String> = (0..axes).map(|i| format!("x{i}")).collect();
    let mut distributions: Vec<serde_json::Value> = names
        .iter()
        .map(|n| json!({"name": format!("g_{n}"), "type": "gaussian_dist", "x": n, "mean": 0.0, "sigma": 1.0}))
        .collect();
    distributions.push(json!({"name": "prod", "type": "product_dist", "factors": names.iter().map(|n| format!("g_{n}")).collect::<Vec<_>>()}));
    distributions.push(json!({"name": "model", "type": "mixture_dist", "summands": ["prod"], "coefficients": [yield_ref], "extended": true}));
    json!({
        "distributions": distributions,
        "functions": extra_functions,
        "data": [{"name": "d", "type": "unbinned", "axes": names.iter().map(|n| json!({"name": n, "min": -3, "max": 3})).collect::<Vec<_>>(), "entries": [vec![0.0; axes]]}],
        "likelihoods": [{"name": "L", "distributions": ["model"], "data": ["d"]}],
        "parameter_points": [{"name": "default_values", "parameters": [{"name": "n", "value": 10, "min": 0, "max": 1e15}]}]
    })
}

#[test]
fn functions_that_double_at_every_level_are_refused() {
    let mut functions = vec![json!({"name": "f0", "type": "generic_function", "expression": "n"})];
    for k in 1..40 {
        functions.push(json!({"name": format!("f{k}"), "type": "generic_function", "expression": format!("f{0}+f{0}", k - 1)}));
    }
    let err = read(
        &one_gaussian(json!(functions), "f39", 1),
        &ReadOptions::default(),
    )
    .err()
    .expect("refused");
    assert!(err.to_string().contains("expands to more than"), "{err}");
}

#[test]
fn toys_of_enormous_counts_are_refused() {
    let m = read(&one_gaussian(json!([]), "n", 1), &ReadOptions::default()).unwrap();
    let cpu = m.open(Device::Cpu).unwrap();
    let err = m
        .sample_toys(cpu.as_ref(), &[(&[1e12][..], 0)], 1, 0, 1)
        .err()
        .expect("refused");
    assert!(
        err.to_string().contains("toys are drawn for counts"),
        "{err}"
    );
}

#[test]
fn asimov_data_of_many_observables_stay_in_proportion() {
    for axes in [1, 2, 3, 4, 6] {
        let m = read(&one_gaussian(json!([]), "n", axes), &ReadOptions::default()).unwrap();
        let asimov = m.asimov(&[10.0]).unwrap();
        let cells = (asimov.main.len() - 2) / (axes + 1);
        assert!(
            cells <= ns_unbinned::MAX_ASIMOV_CELLS,
            "{axes} observables: {cells} cells"
        );
        // The weights still add up to the expected count (a Gaussian of ±3σ, midpoints).
        let weights: f64 = asimov.main[2 + cells * axes..].iter().sum();
        assert!(
            (weights - 10.0 * 0.9973f64.powi(axes as i32)).abs() < 0.05 * axes as f64,
            "{axes}: {weights}"
        );
    }
}
