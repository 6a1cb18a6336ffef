//! An HS3 analysis of binned and unbinned channels: ROOT's binned `simple` file
//! (`../shared/hs3-binned`) with an unbinned Gauss + exponential channel added to its likelihood,
//! μ shared by name. The joint likelihood is the sum of its parts' (each read alone), its
//! gradient their gradients on the shared parameters, its toys the parts' toys from independent
//! keys; a fit converges; every verb's path (toys, scans) runs on it. RooFit's numbers for a file
//! ROOT writes itself are in tests/python/test_hs3_hybrid.py.

use std::sync::atomic::AtomicBool;

use ns_compute::{Datasets, Device, Likelihood, PreparedData};
use ns_inference::{FitConfig, Fitter};
use ns_source::{Files, LoadedModel, ModelRef, PyhfRef, Source};
use serde_json::{Value, json};

fn simple() -> Value {
    let path = std::env::var_os("NEXTSTAT_HS3_BINNED")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/hs3-binned")
        })
        .join("nextstat_simple.hs3.json");
    ns_tests::read_json(&path)
}

/// Events of the unbinned channel on [0, 10]: a fixed list.
fn events() -> Vec<Value> {
    (0..60)
        .map(|i| {
            let u = (i as f64 + 0.5) / 60.0;
            // A peak near 5 for a third of them, a falling spectrum for the rest.
            let x = if i % 3 == 0 {
                5.0 + 0.8 * (u - 0.5) * 3.0
            } else {
                -3.0 * (1.0 - 0.95 * u).ln()
            };
            json!([x])
        })
        .collect()
}

/// The unbinned channel's entries: (distributions, functions, data, parameters).
fn unbinned_channel() -> (Vec<Value>, Vec<Value>, Value, Vec<Value>) {
    let distributions = vec![
        json!({"name": "model_unb", "type": "mixture_dist", "summands": ["sig", "bkg"],
               "coefficients": ["nsig", "nbkg"], "extended": true}),
        json!({"name": "sig", "type": "gaussian_dist", "x": "x", "mean": "mean", "sigma": "sigma"}),
        json!({"name": "bkg", "type": "exponential_dist", "x": "x", "c": "c"}),
    ];
    let functions =
        vec![json!({"name": "nsig", "type": "generic_function", "expression": "mu*20"})];
    let data = json!({"name": "obsData_unb", "type": "unbinned",
                      "axes": [{"name": "x", "min": 0.0, "max": 10.0}], "entries": events()});
    let parameters = vec![
        json!({"name": "mean", "value": 5.0, "min": 0.0, "max": 10.0}),
        json!({"name": "sigma", "value": 0.8, "min": 0.1, "max": 5.0}),
        json!({"name": "c", "value": -0.3, "min": -2.0, "max": 0.0}),
        json!({"name": "nbkg", "value": 40.0, "min": 0.0, "max": 500.0}),
    ];
    (distributions, functions, data, parameters)
}

fn push_all(doc: &mut Value, key: &str, entries: Vec<Value>) {
    doc.as_object_mut()
        .unwrap()
        .entry(key)
        .or_insert_with(|| json!([]))
        .as_array_mut()
        .unwrap()
        .extend(entries);
}

/// ROOT's `simple` with the unbinned channel in its observed-data likelihood.
fn hybrid() -> Value {
    let mut doc = simple();
    let (distributions, functions, data, parameters) = unbinned_channel();
    push_all(&mut doc, "distributions", distributions);
    push_all(&mut doc, "functions", functions);
    push_all(&mut doc, "data", vec![data]);
    for point in doc["parameter_points"].as_array_mut().unwrap() {
        point["parameters"]
            .as_array_mut()
            .unwrap()
            .extend(parameters.clone());
    }
    for likelihood in doc["likelihoods"].as_array_mut().unwrap() {
        if likelihood["name"] == "simPdf_obsData" {
            likelihood["distributions"]
                .as_array_mut()
                .unwrap()
                .push(json!("model_unb"));
            likelihood["data"]
                .as_array_mut()
                .unwrap()
                .push(json!("obsData_unb"));
        }
    }
    doc
}

/// The unbinned channel alone, as its own HS3 document.
fn unbinned_alone() -> Value {
    let (distributions, functions, data, mut parameters) = unbinned_channel();
    parameters.push(json!({"name": "mu", "value": 1.0, "min": 0.0, "max": 10.0}));
    json!({
        "metadata": {"hs3_version": "0.2"},
        "distributions": distributions,
        "functions": functions,
        "data": [data],
        "likelihoods": [{"name": "L", "distributions": ["model_unb"], "data": ["obsData_unb"]}],
        "analyses": [{"name": "A", "likelihood": "L", "parameters_of_interest": ["mu"]}],
        "parameter_points": [{"name": "default_values", "parameters": parameters}],
    })
}

fn load(doc: Value, analysis: Option<&str>) -> LoadedModel {
    ModelRef::ByContent(PyhfRef {
        workspace: Source::Inline(doc),
        measurement: analysis.map(String::from),
        ..PyhfRef::file("")
    })
    .load_model(&Files)
    .unwrap_or_else(|e| panic!("{e}"))
}

/// The binned part's parameters under the file's names (the binned reader's are the XML
/// route's: `uncorr_bkguncrt[i]` is ROOT's `gamma_uncorr_bkguncrt_bin_i`).
fn file_names(binned: &dyn Likelihood) -> Vec<String> {
    binned
        .parameter_names()
        .iter()
        .map(|n| match n.strip_prefix("uncorr_bkguncrt[") {
            Some(i) => format!("gamma_uncorr_bkguncrt_bin_{}", i.trim_end_matches(']')),
            None => n.clone(),
        })
        .collect()
}

/// NLL and gradient of `model` at `point` on `data`, on the CPU.
fn nll_grad(model: &dyn Likelihood, point: &[f64], data: &PreparedData) -> (f64, Vec<f64>) {
    let backend = model.open(Device::Cpu).unwrap();
    let (mut nll, mut grad) = ([0.0], vec![0.0; point.len()]);
    backend
        .nll_grad_batch(
            point,
            Datasets::Host(std::slice::from_ref(data)),
            &[0],
            &mut nll,
            &mut grad,
            &AtomicBool::new(false),
        )
        .unwrap();
    (nll[0] + data.constant, grad)
}

/// `joint`'s point as the values of `part`'s parameters under their joint names `names`.
fn part_point(joint: &dyn Likelihood, names: &[String], point: &[f64]) -> Vec<f64> {
    names
        .iter()
        .map(|n| point[joint.parameter_index(n).unwrap()])
        .collect()
}

#[test]
fn the_joint_likelihood_is_the_sum_of_its_parts() {
    let joint = load(hybrid(), Some("simPdf_obsData"));
    let LoadedModel::Joint(joint) = &joint else {
        panic!("a likelihood of binned and unbinned channels loads as a joint one");
    };
    let binned = load(simple(), Some("simPdf_obsData"));
    let unbinned = load(unbinned_alone(), None);
    let (binned, unbinned) = (binned.likelihood(), unbinned.likelihood());
    let binned_names = file_names(binned);
    let names = joint.parameter_names();
    assert_eq!(
        names.iter().filter(|n| *n == "mu").count(),
        1,
        "μ is one parameter: {names:?}"
    );
    assert_eq!(
        names.len(),
        binned.n_params() + unbinned.n_params() - 1,
        "{names:?}"
    );
    assert_eq!(joint.poi().unwrap(), joint.parameter_index("mu").unwrap());

    let data = joint.observed().unwrap();
    let (binned_data, unbinned_data) = (binned.observed().unwrap(), unbinned.observed().unwrap());
    let bounds = joint.suggested_bounds();
    let mut rng = ns_tests::TestRng::new(17);
    for _ in 0..5 {
        let point: Vec<f64> = bounds
            .iter()
            .zip(joint.suggested_init())
            .map(|(&(lo, hi), init)| (init + 0.2 * (rng.uniform() - 0.5) * (hi - lo)).clamp(lo, hi))
            .collect();
        let (nll, grad) = nll_grad(joint.as_ref(), &point, &data);
        let (b, b_grad) = nll_grad(
            binned,
            &part_point(joint.as_ref(), &binned_names, &point),
            &binned_data,
        );
        let unbinned_names = unbinned.parameter_names().to_vec();
        let (u, u_grad) = nll_grad(
            unbinned,
            &part_point(joint.as_ref(), &unbinned_names, &point),
            &unbinned_data,
        );
        assert!(
            (nll - (b + u)).abs() <= 1e-10 * nll.abs(),
            "{nll} vs {b} + {u}"
        );
        // Each parameter's derivative is the sum of its parts' (μ gets both).
        for (i, name) in names.iter().enumerate() {
            let mut want = 0.0;
            for (part_names, part_grad) in [(&binned_names, &b_grad), (&unbinned_names, &u_grad)] {
                if let Some(k) = part_names.iter().position(|n| n == name) {
                    want += part_grad[k];
                }
            }
            assert!(
                (grad[i] - want).abs() <= 1e-9 * want.abs().max(1.0),
                "∂/∂{name}: {} vs {want}",
                grad[i]
            );
        }
        // And the gradient is the NLL's: central differences.
        for i in 0..point.len() {
            let h = 1e-5 * (bounds[i].1 - bounds[i].0);
            let (mut up, mut down) = (point.clone(), point.clone());
            up[i] += h;
            down[i] -= h;
            let fd = (nll_grad(joint.as_ref(), &up, &data).0
                - nll_grad(joint.as_ref(), &down, &data).0)
                / (2.0 * h);
            assert!(
                (grad[i] - fd).abs() <= 1e-5 * fd.abs().max(1.0),
                "∂/∂{}: {} vs {fd}",
                names[i],
                grad[i]
            );
        }
    }
}

#[test]
fn toys_of_the_joint_are_its_parts_toys_from_independent_keys() {
    let joint = load(hybrid(), Some("simPdf_obsData"));
    let joint = joint.likelihood();
    let binned = load(simple(), Some("simPdf_obsData"));
    let binned = binned.likelihood();
    let init = joint.suggested_init();
    let backend = joint.open(Device::Cpu).unwrap();
    let toys = joint
        .sample_toys(backend.as_ref(), &[(&init, 0)], 11, 0, 4)
        .unwrap()
        .host;
    assert_eq!(toys.len(), 4);
    let again = joint
        .sample_toys(backend.as_ref(), &[(&init, 0)], 11, 0, 4)
        .unwrap()
        .host;
    assert_eq!(toys, again, "one seed, one set of toys");
    // The binned part draws with the seed itself: its toys are the binned model's.
    let binned_init = part_point(joint, &file_names(binned), &init);
    let binned_backend = binned.open(Device::Cpu).unwrap();
    let binned_toys = binned
        .sample_toys(binned_backend.as_ref(), &[(&binned_init, 0)], 11, 0, 4)
        .unwrap()
        .host;
    for (toy, alone) in toys.iter().zip(&binned_toys) {
        // Header: (main, aux, constant) per part, then the binned part's bins first.
        let (m, a) = (toy.main[0] as usize, toy.main[1] as usize);
        assert_eq!(&toy.main[6..6 + m], alone.main.as_slice());
        assert_eq!(&toy.aux[..a], alone.aux.as_slice());
    }
    // Each toy's unbinned events differ from the next toy's (the streams advance), and the
    // fits of all of them run.
    let fitter = Fitter::new(joint);
    let config = FitConfig::suggested(joint);
    for toy in &toys {
        let fit = fitter.fit(toy, &config).unwrap();
        assert!(fit.converged, "{:?}", fit.termination);
    }
}

#[test]
fn a_fit_of_the_joint_converges_below_its_start_with_uncertainties() {
    let loaded = load(hybrid(), Some("simPdf_obsData"));
    let joint = loaded.likelihood();
    let data = joint.observed().unwrap();
    let fitter = Fitter::new(joint);
    let mut config = FitConfig::suggested(joint);
    config.uncertainties = true;
    let fit = fitter.fit(&data, &config).unwrap();
    assert!(fit.converged, "{:?}", fit.termination);
    let start = fitter.twice_nll(&joint.suggested_init(), &data).unwrap();
    assert!(fit.twice_nll < start);
    let errors = fit.uncertainties.as_ref().expect("uncertainties");
    let fixed = joint.suggested_fixed();
    assert!(
        fixed.iter().any(|&f| f),
        "the luminosity is a constant of the binned channel"
    );
    for (i, e) in errors.iter().enumerate() {
        assert!(
            fixed[i] || (e.is_finite() && *e > 0.0),
            "{}: σ = {e}",
            joint.parameter_names()[i]
        );
    }
    // A list of values names no channel of a joint likelihood: refused, not guessed.
    let error = joint.dataset(&[1.0, 2.0]).unwrap_err().to_string();
    assert!(error.contains("binned and unbinned"), "{error}");
}
