//! The analytic gradient against central finite differences (Richardson-extrapolated) on every
//! shared workspace, for every interpolation pair, at random points away from the kinks.

use ns_compute::{CpuEvaluator, Scratch};
use ns_tests::{
    TestRng, all_code_pairs, model_and_data, random_point, reference, reference_names,
    reference_workspace, tolerance,
};

#[test]
fn gradient_matches_finite_differences_everywhere() {
    let mut checked = 0;
    for name in reference_names() {
        let ws = reference_workspace(&reference(&name));
        for codes in all_code_pairs() {
            let mut rng = TestRng::new(name.len() as u64 * 31 + checked);
            checked += check_gradient(&name, &ws, codes, &mut rng);
        }
    }
    assert!(checked > 200, "only {checked} points were checked");
}

/// Every layout the CPU evaluator's plan distinguishes, in one model: blocks whose bins have
/// several per-bin factors (staterror and shapesys), one (shapefactor), none; histosys rows
/// that fill one, two and three spans (1, 5 and 9 terms) over bin counts that are and are not
/// whole vectors; parameters shared by histosys and normsys across samples and channels.
#[test]
fn gradient_matches_finite_differences_on_every_block_layout() {
    let text = block_layout_workspace().to_string();
    let ws = ns_translate::Workspace::from_json_str(&text).expect("the generated workspace loads");
    let mut checked = 0;
    for codes in all_code_pairs() {
        let mut rng = TestRng::new(11 + checked);
        checked += check_gradient("every block layout", &ws, codes, &mut rng);
    }
    assert!(checked >= 12, "only {checked} points were checked");
}

/// The same under ROOT's HistFactory semantics: Poisson staterror, Gaussian shapesys wide
/// enough for RooFit's range normalisation, a histosys that drives a sample's yield below zero,
/// where it is clipped, and LogNormal and Gamma ConstraintTerms.
#[test]
fn gradient_matches_finite_differences_under_root_semantics() {
    let mut value = block_layout_workspace();
    for channel in value["channels"].as_array_mut().unwrap() {
        let other = &mut channel["samples"][2];
        let nominal: Vec<f64> = serde_json::from_value(other["data"].clone()).unwrap();
        let (hi, lo): (Vec<f64>, Vec<f64>) = nominal.iter().map(|v| (2.0 * v, -3.0 * v)).unzip();
        other["modifiers"]
            .as_array_mut()
            .unwrap()
            .push(serde_json::json!(
            {"name": "clipper", "type": "histosys", "data": {"hi_data": hi, "lo_data": lo}}));
    }
    value["nextstat:root_semantics"] = serde_json::json!({
        "shapesys": {
            "uncorr_0": {"constraint": "gaussian", "relative": [0.3, 0.25, 0.1, 0.5, 0.2]},
            "uncorr_1": {"constraint": "poisson", "relative": vec![0.1; 9]},
        },
        // A LogNormal ConstraintTerm on a parameter that a histosys shares, and a Gamma one
        // (its global observable at the end of its range: 1/0.3² > 10).
        "constraint_terms": {"m": {
            "shape_3": {"type": "lognormal", "relative_uncertainty": 0.3},
            "norm_b": {"type": "gamma", "relative_uncertainty": 0.3},
        }},
    });
    let ws = ns_translate::Workspace::from_value(value).expect("the generated workspace loads");
    let (model, _) = model_and_data(&ws, ns_core::InterpCodes::default());
    assert!(model.compiled.clip_sample_yields && !model.compiled.gaussian_ranges.is_empty());
    assert_eq!(model.compiled.normsys_inputs.len(), 2);
    assert_eq!(model.compiled.poisson_ranges.len(), 1);
    let mut checked = 0;
    for codes in all_code_pairs() {
        let mut rng = TestRng::new(23 + checked);
        checked += check_gradient("ROOT semantics", &ws, codes, &mut rng);
    }
    assert!(checked >= 12, "only {checked} points were checked");
}

/// The model of `gradient_matches_finite_differences_on_every_block_layout`.
fn block_layout_workspace() -> serde_json::Value {
    let mut rng = TestRng::new(7);
    let mut values = |n: usize, around: f64| -> Vec<f64> {
        (0..n)
            .map(|_| around * (0.8 + 0.4 * rng.uniform()))
            .collect()
    };
    let mut channels = Vec::new();
    let mut observations = Vec::new();
    for (c, n_bins) in [5usize, 9].into_iter().enumerate() {
        let histosys =
            |terms: usize, nominal: &[f64], values: &mut dyn FnMut(usize, f64) -> Vec<f64>| {
                (0..terms)
                    .map(|k| {
                        let (hi, lo): (Vec<f64>, Vec<f64>) = nominal
                            .iter()
                            .zip(values(nominal.len(), 0.1))
                            .map(|(v, d)| (v * (1.0 + d), v * (1.0 - 0.7 * d)))
                            .unzip();
                        serde_json::json!({"name": format!("shape_{k}"), "type": "histosys",
                        "data": {"hi_data": hi, "lo_data": lo}})
                    })
                    .collect::<Vec<_>>()
            };
        let signal = values(n_bins, 5.0);
        let mut signal_modifiers = vec![
            serde_json::json!({"name": "mu", "type": "normfactor", "data": null}),
            serde_json::json!({"name": "shape_0", "type": "normsys", "data": {"hi": 1.1, "lo": 0.9}}),
        ];
        signal_modifiers.extend(histosys(1, &signal, &mut values));
        let background = values(n_bins, 50.0);
        let mut background_modifiers = vec![
            serde_json::json!({"name": format!("stat_{c}"), "type": "staterror", "data": values(n_bins, 2.0)}),
            serde_json::json!({"name": format!("uncorr_{c}"), "type": "shapesys", "data": values(n_bins, 4.0)}),
            serde_json::json!({"name": "norm_b", "type": "normsys", "data": {"hi": 1.05, "lo": 0.97}}),
        ];
        background_modifiers.extend(histosys(5, &background, &mut values));
        let other = values(n_bins, 20.0);
        let mut other_modifiers = vec![
            serde_json::json!({"name": format!("free_{c}"), "type": "shapefactor", "data": null}),
            serde_json::json!({"name": "shape_3", "type": "normsys", "data": {"hi": 1.2, "lo": 0.85}}),
        ];
        other_modifiers.extend(histosys(9, &other, &mut values));
        channels.push(serde_json::json!({"name": format!("ch{c}"), "samples": [
            {"name": "signal", "data": signal, "modifiers": signal_modifiers},
            {"name": "background", "data": background, "modifiers": background_modifiers},
            {"name": "other", "data": other, "modifiers": other_modifiers},
        ]}));
        observations
            .push(serde_json::json!({"name": format!("ch{c}"), "data": values(n_bins, 75.0)}));
    }
    serde_json::json!({
        "channels": channels,
        "observations": observations,
        "measurements": [{"name": "m", "config": {"poi": "mu", "parameters": []}}],
        "version": "1.0.0",
    })
}

/// Two random points of `ws` with `codes`: the analytic gradient against Richardson-extrapolated
/// central differences, parameter by parameter. Returns the number of points checked.
fn check_gradient(
    name: &str,
    ws: &ns_translate::Workspace,
    codes: ns_core::InterpCodes,
    rng: &mut TestRng,
) -> u64 {
    let rel = tolerance("gradient_fd_rel");
    let (model, data) = model_and_data(ws, codes);
    let eval = CpuEvaluator::new(&model.compiled);
    let mut s = Scratch::new(&model.compiled);
    let mut checked = 0;
    for _ in 0..2 {
        let p = random_point(&model, rng);
        let mut g = vec![0.0; model.n_params()];
        let f0 = eval
            .nll_with_gradient(&p, &data, &mut s, Some(&mut g))
            .unwrap();
        if !f0.is_finite() {
            continue;
        }
        let mut nll_at = |q: &[f64]| eval.nll(q, &data, &mut s).unwrap();
        for i in 0..p.len() {
            let mut diff = |h: f64| {
                let (mut a, mut b) = (p.clone(), p.clone());
                a[i] += h;
                b[i] -= h;
                (nll_at(&a) - nll_at(&b)) / (2.0 * h)
            };
            // Richardson-extrapolated central differences at three steps: the NLL carries
            // Σ lgamma(n+1) (~1e5 on the large models), so the smallest step is limited by
            // rounding and the largest by truncation; the closest of the three is the reference.
            let scale = p[i].abs().max(1.0);
            let fd = [1e-2, 1e-3, 1e-4]
                .into_iter()
                .map(|h| (4.0 * diff(h * scale / 2.0) - diff(h * scale)) / 3.0)
                .filter(|d| d.is_finite())
                .min_by(|a, b| (a - g[i]).abs().total_cmp(&(b - g[i]).abs()));
            // A step that crosses a non-positive expectation has no finite difference.
            let Some(fd) = fd else { continue };
            assert!(
                (g[i] - fd).abs() <= rel * g[i].abs().max(1.0),
                "{name} {codes}: d/d{} analytic {} vs FD {fd}",
                model.par_names[i],
                g[i]
            );
        }
        checked += 1;
    }
    checked
}
