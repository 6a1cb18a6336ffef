//! Toy-based CLs: statistical parity with pyhf's stored toy results, and toys that do not depend
//! on the thread count.

use ns_compute::PreparedData;
use ns_core::InterpCodes;
use ns_inference::toys::hypotest_toys;
use ns_inference::{FitConfig, Fitter, TestStatistic};
use ns_tests::{model_and_data, reference, tolerance, workspace_path};
use ns_translate::{HistFactoryModel, Workspace};

fn load(file: &str, codes: InterpCodes) -> (HistFactoryModel, PreparedData) {
    model_and_data(&Workspace::from_path(&workspace_path(file)).unwrap(), codes)
}

/// |p₁ − p₂| in units of the combined binomial standard error of two samples.
fn binomial_z(p1: f64, n1: usize, p2: f64, n2: usize) -> f64 {
    let var = p1 * (1.0 - p1) / n1 as f64 + p2 * (1.0 - p2) / n2 as f64;
    if var == 0.0 {
        if p1 == p2 { 0.0 } else { f64::INFINITY }
    } else {
        (p1 - p2).abs() / var.sqrt()
    }
}

#[test]
fn qtilde_toys_agree_with_pyhf() {
    let r = reference("pyhf_docs_2bin_1channel")["hypotest_toys_mu1"].clone();
    let (model, data) = load("pyhf_docs_2bin_1channel.json", InterpCodes::default());
    let fitter = Fitter::new(&model);
    let h = hypotest_toys(
        &fitter,
        1.0,
        &data,
        &FitConfig::suggested(&model),
        TestStatistic::QTilde,
        2000,
        1,
        &|_| {},
    )
    .unwrap();
    let pyhf_toys = 1000; // the stored call used ntoys=1000
    let (clsb, clb) = (
        r["tail_probs"][0].as_f64().unwrap(),
        r["tail_probs"][1].as_f64().unwrap(),
    );
    let z_sb = binomial_z(h.cls.clsb_obs, h.signal.teststats.len(), clsb, pyhf_toys);
    let z_b = binomial_z(h.cls.clb_obs, h.background.teststats.len(), clb, pyhf_toys);
    eprintln!(
        "CLsb {} vs pyhf {clsb} (z {z_sb:.2}); CLb {} vs {clb} (z {z_b:.2}); failed {} + {}",
        h.cls.clsb_obs, h.cls.clb_obs, h.signal.n_failed, h.background.n_failed
    );
    assert!(z_sb <= tolerance("toy_binomial_z") && z_b <= tolerance("toy_binomial_z"));
    assert_eq!(
        h.signal.n_failed + h.background.n_failed,
        0,
        "{:?} {:?}",
        h.signal.failures,
        h.background.failures
    );
}

#[test]
fn q0_toys_agree_with_pyhf_validation() {
    let r = reference("pyhf_validation_1bin_shapesys_q0")["validation_toys_q0"].clone();
    let (model, data) = load(
        "pyhf_validation_1bin_shapesys_q0.json",
        InterpCodes::legacy(),
    );
    let fitter = Fitter::new(&model);
    let h = hypotest_toys(
        &fitter,
        0.0,
        &data,
        &FitConfig::suggested(&model),
        TestStatistic::Q0,
        2000,
        2,
        &|_| {},
    )
    .unwrap();
    let (p0, clb) = (
        r["p0_obs"].as_f64().unwrap(),
        r["tail_probs"][0].as_f64().unwrap(),
    );
    let z_p0 = binomial_z(h.cls.clsb_obs, h.signal.teststats.len(), p0, 2000);
    let z_b = binomial_z(h.cls.clb_obs, h.background.teststats.len(), clb, 2000);
    eprintln!(
        "p0 {} vs pyhf {p0} (z {z_p0:.2}); CLb {} vs {clb} (z {z_b:.2})",
        h.cls.clsb_obs, h.cls.clb_obs
    );
    assert!(z_p0 <= tolerance("toy_binomial_z") && z_b <= tolerance("toy_binomial_z"));
}

#[test]
fn toys_are_identical_for_any_thread_count() {
    let (model, data) = load("nextstat_shape_workspace.json", InterpCodes::default());
    let fitter = Fitter::new(&model);
    let config = FitConfig::suggested(&model);
    let run = |threads: usize| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap()
            .install(|| {
                hypotest_toys(
                    &fitter,
                    1.0,
                    &data,
                    &config,
                    TestStatistic::QTilde,
                    200,
                    99,
                    &|_| {},
                )
                .unwrap()
            })
    };
    let (one, two) = (run(1), run(2));
    assert_eq!(one.signal.teststats, two.signal.teststats);
    assert_eq!(one.background.teststats, two.background.teststats);
    assert_eq!(one.cls.cls_obs, two.cls.cls_obs);
    let other_seed = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .unwrap()
        .install(|| {
            hypotest_toys(
                &fitter,
                1.0,
                &data,
                &config,
                TestStatistic::QTilde,
                200,
                100,
                &|_| {},
            )
            .unwrap()
        });
    assert_ne!(
        one.background.teststats, other_seed.background.teststats,
        "a different seed gives different toys"
    );
}

/// An empty bin whose expected count a parameter can turn negative: pyhf's `xlogy` takes
/// e^−λ > 1 as the probability of the empty bin, so the likelihood grows without bound as λ falls
/// (toy fits of the published sleptons likelihood ran off to twice_nll of −10¹⁵⁰). A fit that
/// ends there says the likelihood is unbounded below, naming the bin; toy fits that the box
/// stopped there (owing it more than 10 units of twice_nll) are counted as failed under that
/// reason.
#[test]
fn a_fit_into_negative_empty_bins_says_the_likelihood_is_unbounded() {
    let ws = Workspace::from_value(serde_json::json!({
        "channels": [{"name": "sr", "samples": [
            {"name": "signal", "data": [5.0, 1.0], "modifiers": [
                {"name": "mu", "type": "normfactor", "data": null}]},
            {"name": "background", "data": [1.0, 4.0], "modifiers": [
                {"name": "shift", "type": "histosys",
                 "data": {"hi_data": [1.5, 4.5], "lo_data": [-3.0, 3.5]}}]}]}],
        "observations": [{"name": "sr", "data": [0.0, 4.0]}],
        "measurements": [{"name": "m", "config": {"poi": "mu", "parameters": [
            {"name": "mu", "bounds": [[-5.0, 5.0]]}]}}],
        "version": "1.0.0"
    }))
    .unwrap();
    let (model, data) = model_and_data(&ws, InterpCodes::default());
    let fit = Fitter::new(&model)
        .fit(&data, &FitConfig::suggested(&model))
        .unwrap();
    let warning = fit.warning.unwrap_or_default();
    assert!(
        warning.contains(ns_inference::UNBOUNDED_BELOW) && warning.contains("main bin 0"),
        "{warning:?} at {:?}, twice_nll {}",
        fit.parameters,
        fit.twice_nll
    );
    // Toys whose fits the box stopped there (twice_nll lowered by ~50 by the empty bin)
    // have no test statistic: they count as failed, under that reason, although the optimizer
    // converged at the bound (the refusal says so).
    let refused = hypotest_toys(
        &Fitter::new(&model),
        1.0,
        &data,
        &FitConfig::suggested(&model),
        TestStatistic::QTilde,
        100,
        5,
        &|_| {},
    )
    .map(|h| (h.signal.n_failed, h.background.n_failed))
    .unwrap_err()
    .to_string();
    assert!(refused.contains(ns_inference::UNBOUNDED_BELOW), "{refused}");
    // A well-posed fit of the same model (the bin observed non-empty) has no such warning.
    let mut filled = data.clone();
    filled.main[0] = 2.0;
    let fit = Fitter::new(&model)
        .fit(&filled, &FitConfig::suggested(&model))
        .unwrap();
    assert!(fit.converged && fit.warning.is_none(), "{:?}", fit.warning);
}
