//! The differentiable likelihood: ∂NLL/∂s and the profiled statistics' gradients against central
//! finite differences, on a model whose signal carries normfactor, lumi, normsys and histosys
//! and whose background carries staterror, shapesys, normsys and histosys, in two channels.

use ns_compute::PreparedData;
use ns_inference::differentiable::{DifferentiableSession, StatisticData};
use ns_inference::{FitConfig, TestStatistic};
use ns_translate::{FromWorkspace, HistFactoryModel, ModelOptions, Workspace};
use serde_json::json;

fn workspace(signal_modifiers: serde_json::Value) -> Workspace {
    let spec = json!({
        "channels": [
            {"name": "SR", "samples": [
                {"name": "signal", "data": [6.0, 9.0, 4.0], "modifiers": signal_modifiers},
                {"name": "bkg", "data": [30.0, 22.0, 11.0], "modifiers": [
                    {"name": "bkg_norm", "type": "normsys", "data": {"hi": 1.1, "lo": 0.92}},
                    {"name": "shape", "type": "histosys", "data": {"hi_data": [33.0, 23.0, 11.5], "lo_data": [28.0, 21.5, 10.2]}},
                    {"name": "staterror_SR", "type": "staterror", "data": [2.0, 1.5, 1.2]},
                    {"name": "lumi", "type": "lumi", "data": null}]}]},
            {"name": "CR", "samples": [
                {"name": "signal", "data": [1.0, 0.5], "modifiers": [
                    {"name": "mu", "type": "normfactor", "data": null},
                    {"name": "lumi", "type": "lumi", "data": null}]},
                {"name": "bkg", "data": [80.0, 60.0], "modifiers": [
                    {"name": "bkg_norm", "type": "normsys", "data": {"hi": 1.1, "lo": 0.92}},
                    {"name": "cr_stat", "type": "shapesys", "data": [5.0, 4.0]},
                    {"name": "lumi", "type": "lumi", "data": null}]}]}
        ],
        "observations": [{"name": "SR", "data": [40, 33, 15]}, {"name": "CR", "data": [82, 58]}],
        "measurements": [{"name": "m", "config": {"poi": "mu", "parameters": [
            {"name": "lumi", "auxdata": [1.0], "sigmas": [0.02], "bounds": [[0.9, 1.1]], "inits": [1.0]}]}}],
        "version": "1.0.0"
    });
    Workspace::from_value(spec).unwrap()
}

fn signal_modifiers() -> serde_json::Value {
    json!([
        {"name": "mu", "type": "normfactor", "data": null},
        {"name": "lumi", "type": "lumi", "data": null},
        {"name": "sig_xsec", "type": "normsys", "data": {"hi": 1.05, "lo": 0.94}},
        {"name": "sig_shape", "type": "histosys", "data": {"hi_data": [6.6, 9.5, 4.1], "lo_data": [5.5, 8.4, 3.9]}}
    ])
}

fn setup() -> (HistFactoryModel, PreparedData, Vec<(String, String)>) {
    let ws = workspace(signal_modifiers());
    let model = HistFactoryModel::from_workspace(&ws, &ModelOptions::default()).unwrap();
    let data = PreparedData::from_full(&model.compiled, &ws.data(&model, true).unwrap()).unwrap();
    let samples = vec![
        ("SR".to_string(), "signal".to_string()),
        ("CR".to_string(), "signal".to_string()),
    ];
    (model, data, samples)
}

/// Central differences of `f` at `x`, one coordinate at a time.
fn finite_differences(x: &[f64], h: f64, f: &dyn Fn(&[f64]) -> f64) -> Vec<f64> {
    (0..x.len())
        .map(|k| {
            let (mut up, mut down) = (x.to_vec(), x.to_vec());
            up[k] += h;
            down[k] -= h;
            (f(&up) - f(&down)) / (2.0 * h)
        })
        .collect()
}

fn assert_close(got: &[f64], want: &[f64], rtol: f64, atol: f64, what: &str) {
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= rtol * w.abs() + atol,
            "{what}[{k}]: analytic {g} vs finite differences {w}"
        );
    }
}

/// The suggested init with the named parameters set.
fn pars_with(model: &HistFactoryModel, values: &[(&str, f64)]) -> Vec<f64> {
    let mut pars = model.suggested_init();
    for &(name, value) in values {
        pars[model.parameter_index(name).unwrap()] = value;
    }
    pars
}

/// ∂NLL/∂s at (`signal`, `pars`) against central differences; returns the evaluation.
fn check_signal_gradient(
    session: &DifferentiableSession,
    signal: &[f64],
    pars: &[f64],
    data: &PreparedData,
    what: &str,
) -> ns_inference::differentiable::NllGradient {
    let g = session.nll(signal, pars, data).unwrap();
    let fd = finite_differences(signal, 1e-6, &|s| session.nll(s, pars, data).unwrap().nll);
    assert_close(&g.d_signal, &fd, 1e-6, 1e-8, what);
    g
}

#[test]
fn nll_gradient_with_respect_to_the_signal_matches_finite_differences() {
    let (model, data, samples) = setup();
    let session = DifferentiableSession::new(&model, &samples).unwrap();
    assert_eq!(session.n_signal(), 5);
    assert_eq!(session.nominal_signal(), vec![6.0, 9.0, 4.0, 1.0, 0.5]);
    let signal = vec![5.0, 10.0, 3.5, 1.3, 0.7];
    // Away from the nominal point, histosys and normsys pulled: every factor is exercised.
    let pars = pars_with(
        &model,
        &[
            ("mu", 1.4),
            ("sig_shape", 0.6),
            ("sig_xsec", -0.8),
            ("shape", -1.3),
            ("lumi", 1.03),
        ],
    );
    let g = check_signal_gradient(&session, &signal, &pars, &data, "dNLL/ds");
    // The parameters' gradient is the evaluator's, at the model with this signal.
    let fd_pars = finite_differences(&pars, 1e-6, &|p| {
        session.nll(&signal, p, &data).unwrap().nll
    });
    assert_close(&g.d_pars, &fd_pars, 1e-6, 1e-8, "dNLL/dθ");
    // The nominal signal reproduces the workspace's own NLL.
    let own = session
        .nll(&session.nominal_signal(), &pars, &data)
        .unwrap()
        .nll;
    let fitter = ns_inference::Fitter::new(&model);
    assert!((2.0 * own - fitter.twice_nll(&pars, &data).unwrap()).abs() < 1e-10);
    // A batch is the single evaluations, row by row.
    let batch = session
        .nll_batch(
            &[signal.clone(), session.nominal_signal()].concat(),
            &pars,
            &data,
        )
        .unwrap();
    assert_eq!(batch[0].nll, g.nll);
    assert_eq!(batch[0].d_signal, g.d_signal);
    assert_eq!(batch[1].nll, own);
}

/// q0 on the observed data.
fn observed_q0(
    session: &DifferentiableSession,
    signal: &[f64],
    data: &PreparedData,
    config: &FitConfig,
) -> ns_core::Result<ns_inference::differentiable::ProfiledStatistic> {
    session.profiled(
        signal,
        TestStatistic::Q0,
        0.0,
        StatisticData::Fixed(data),
        config,
    )
}

/// Tight fits, so that finite differences of q resolve its derivative.
fn tight(model: &HistFactoryModel) -> FitConfig {
    let mut config = FitConfig::suggested(model);
    config.optimizer.pg_tol = 1e-10;
    config
}

#[test]
fn profiled_statistics_gradients_match_finite_differences_of_refits() {
    let (model, data, samples) = setup();
    let config = tight(&model);
    let signal = session_signal();
    for (stat, mu) in [
        (TestStatistic::Q0, 0.0),
        (TestStatistic::QTilde, 1.0),
        (TestStatistic::Q, 2.0),
    ] {
        let session = DifferentiableSession::new(&model, &samples).unwrap();
        let p = session
            .profiled(&signal, stat, mu, StatisticData::Fixed(&data), &config)
            .unwrap();
        assert!(p.q > 0.0, "{stat:?}: q = {}", p.q);
        let fresh = |s: &[f64]| {
            DifferentiableSession::new(&model, &samples)
                .unwrap()
                .profiled(s, stat, mu, StatisticData::Fixed(&data), &config)
                .unwrap()
                .q
        };
        let fd = finite_differences(&signal, 1e-4, &fresh);
        assert_close(&p.d_signal, &fd, 1e-4, 1e-6, &format!("{stat:?} dq/ds"));
    }
}

fn session_signal() -> Vec<f64> {
    vec![8.0, 12.0, 5.0, 1.5, 0.8]
}

#[test]
fn asimov_significance_gradient_includes_the_moving_data() {
    let (model, _, samples) = setup();
    let config = tight(&model);
    let mut asimov = model.suggested_init();
    asimov[model.poi().unwrap()] = 1.0;
    let q = |s: &[f64]| {
        DifferentiableSession::new(&model, &samples)
            .unwrap()
            .profiled(
                s,
                TestStatistic::Q0,
                0.0,
                StatisticData::Asimov {
                    parameters: &asimov,
                },
                &config,
            )
            .unwrap()
    };
    let signal = session_signal();
    let p = q(&signal);
    assert!(p.q > 1.0, "q0 on Asimov data = {}", p.q);
    let fd = finite_differences(&signal, 1e-4, &|s| q(s).q);
    assert_close(&p.d_signal, &fd, 1e-4, 1e-6, "Asimov dq0/ds");
    // More signal everywhere, more significance (signal in the control region alone lowers it).
    let along: f64 = p.d_signal.iter().zip(&signal).map(|(d, s)| d * s).sum();
    assert!(along > 0.0, "{:?}", p.d_signal);
}

#[test]
fn clipped_statistics_have_zero_gradient_and_warm_starts_reuse_the_fits() {
    let (model, data, samples) = setup();
    let config = tight(&model);
    let session = DifferentiableSession::new(&model, &samples).unwrap();
    // A signal so large that μ̂ < 0.1: q̃μ at μ = 0.05 is clipped (μ̂ > μ is impossible here, so
    // use qμ at a μ below μ̂ instead).
    let signal = session_signal();
    let free = session
        .profiled(
            &signal,
            TestStatistic::Q,
            0.0,
            StatisticData::Fixed(&data),
            &config,
        )
        .unwrap();
    let muhat = free.free_fit.parameters[model.poi().unwrap()];
    let below = session
        .profiled(
            &signal,
            TestStatistic::Q,
            0.5 * muhat,
            StatisticData::Fixed(&data),
            &config,
        )
        .unwrap();
    assert_eq!(below.q, 0.0, "μ̂ = {muhat} above the tested μ: qμ is 0");
    assert!(below.d_signal.iter().all(|&d| d == 0.0));
    // The second call started from the first's solution: far fewer iterations than cold.
    let again = session
        .profiled(
            &signal,
            TestStatistic::Q,
            0.0,
            StatisticData::Fixed(&data),
            &config,
        )
        .unwrap();
    assert!(
        again.free_fit.iterations < free.free_fit.iterations.max(2),
        "warm start took {} iterations, cold {}",
        again.free_fit.iterations,
        free.free_fit.iterations
    );
}

#[test]
fn bad_requests_are_named() {
    let (model, data, samples) = setup();
    let err = |r: ns_core::Result<DifferentiableSession>| r.err().expect("an error").to_string();
    assert!(
        err(DifferentiableSession::new(
            &model,
            &[("SR".into(), "nope".into())]
        ))
        .contains("no sample 'nope'")
    );
    assert!(err(DifferentiableSession::new(&model, &[])).contains("at least one"));
    let twice = vec![samples[0].clone(), samples[0].clone()];
    assert!(err(DifferentiableSession::new(&model, &twice)).contains("named twice"));
    // A shapesys on an external sample: its τ and auxdata would move with the yields.
    assert!(
        err(DifferentiableSession::new(
            &model,
            &[("CR".into(), "bkg".into())]
        ))
        .contains("shapesys")
    );
    let session = DifferentiableSession::new(&model, &samples).unwrap();
    let pars = model.suggested_init();
    let e = session
        .nll(&[1.0, 2.0], &pars, &data)
        .unwrap_err()
        .to_string();
    assert!(e.contains("2 yields") && e.contains("5 bins"), "{e}");
    let e = session
        .nll(&[1.0, f64::NAN, 1.0, 1.0, 1.0], &pars, &data)
        .unwrap_err()
        .to_string();
    assert!(e.contains("yield 1 is NaN"), "{e}");
}

/// A staterror on an external sample: its width √(Σδ²)/Σν moves with the yields, as in pyhf.
#[test]
fn staterror_widths_follow_external_yields() {
    let (model, data, _) = setup();
    let external = vec![("SR".to_string(), "bkg".to_string())];
    let session = DifferentiableSession::new(&model, &external).unwrap();
    let background = vec![26.0, 25.0, 9.0];
    let pars = pars_with(
        &model,
        &[
            ("staterror_SR[0]", 1.04),
            ("staterror_SR[2]", 0.93),
            ("shape", 0.7),
        ],
    );
    check_signal_gradient(
        &session,
        &background,
        &pars,
        &data,
        "dNLL/ds with staterror",
    );
    let config = tight(&model);
    let q = |s: &[f64]| {
        DifferentiableSession::new(&model, &external)
            .unwrap()
            .profiled(
                s,
                TestStatistic::QTilde,
                3.0,
                StatisticData::Fixed(&data),
                &config,
            )
            .unwrap()
    };
    let p = q(&background);
    assert!(p.q > 0.0, "q = {}", p.q);
    let fd = finite_differences(&background, 1e-4, &|s| q(s).q);
    assert_close(&p.d_signal, &fd, 1e-4, 1e-6, "dq/ds with staterror");
}

#[test]
fn a_batch_of_signals_is_fitted_row_by_row_in_parallel() {
    let (model, data, samples) = setup();
    let config = tight(&model);
    let rows = [
        session_signal(),
        vec![6.0, 9.0, 4.0, 1.0, 0.5],
        vec![12.0, 15.0, 6.0, 2.0, 1.0],
    ];
    let session = DifferentiableSession::new(&model, &samples).unwrap();
    let batch = session
        .profiled_batch(
            &rows.concat(),
            TestStatistic::Q0,
            0.0,
            StatisticData::Fixed(&data),
            &config,
        )
        .unwrap();
    assert_eq!(batch.len(), 3);
    for (row, got) in rows.iter().zip(&batch) {
        let alone = DifferentiableSession::new(&model, &samples)
            .unwrap()
            .profiled(
                row,
                TestStatistic::Q0,
                0.0,
                StatisticData::Fixed(&data),
                &config,
            )
            .unwrap();
        // Warm starts differ between the two runs: the fits agree to their tolerance.
        assert!(
            (got.q - alone.q).abs() <= 1e-8 * alone.q.max(1.0),
            "{} vs {}",
            got.q,
            alone.q
        );
        assert_close(&got.d_signal, &alone.d_signal, 1e-6, 1e-9, "batched dq/ds");
    }
    let e = session
        .profiled_batch(
            &[1.0; 7],
            TestStatistic::Q0,
            0.0,
            StatisticData::Fixed(&data),
            &config,
        )
        .unwrap_err()
        .to_string();
    assert!(e.contains("7 values") && e.contains("5 bins"), "{e}");
}

/// A model from one channel: a signal with its own staterror (δ = 0 in bin 1, which pyhf fixes)
/// over a background with no events in bin 2.
fn sparse_model() -> (HistFactoryModel, PreparedData) {
    let spec = json!({
        "channels": [{"name": "SR", "samples": [
            {"name": "signal", "data": [4.0, 6.0, 3.0], "modifiers": [
                {"name": "mu", "type": "normfactor", "data": null},
                {"name": "sig_stat", "type": "staterror", "data": [0.4, 0.0, 0.3]}]},
            {"name": "bkg", "data": [20.0, 15.0, 0.0], "modifiers": [
                {"name": "bkg_norm", "type": "normsys", "data": {"hi": 1.1, "lo": 0.9}}]}]}],
        "observations": [{"name": "SR", "data": [25, 20, 2]}],
        "measurements": [{"name": "m", "config": {"poi": "mu", "parameters": []}}],
        "version": "1.0.0"
    });
    let ws = Workspace::from_value(spec).unwrap();
    let model = HistFactoryModel::from_workspace(&ws, &ModelOptions::default()).unwrap();
    let data = PreparedData::from_full(&model.compiled, &ws.data(&model, true).unwrap()).unwrap();
    (model, data)
}

#[test]
fn fixed_staterror_bins_and_empty_background_bins_give_finite_exact_gradients() {
    let (model, data) = sparse_model();
    let samples = vec![("SR".to_string(), "signal".to_string())];
    let session = DifferentiableSession::new(&model, &samples).unwrap();
    // The workspace's own signal reproduces the model's NLL (the fixed bin keeps width 1).
    let pars = pars_with(&model, &[("sig_stat[0]", 1.1), ("mu", 1.2)]);
    let own = session
        .nll(&session.nominal_signal(), &pars, &data)
        .unwrap();
    let fitter = ns_inference::Fitter::new(&model);
    assert!((2.0 * own.nll - fitter.twice_nll(&pars, &data).unwrap()).abs() < 1e-10);
    check_signal_gradient(&session, &[5.0, 7.0, 2.5], &pars, &data, "sparse dNLL/ds");
    // q̃μ on the background-only Asimov data: no events expected in bin 2 at the free fit
    // (μ̂ = 0 at its bound), yet the gradient is finite and exact.
    let mut config = FitConfig::suggested(&model);
    config.optimizer.pg_tol = 1e-10;
    let asimov = model.suggested_init();
    let mut at_zero = asimov.clone();
    at_zero[model.poi().unwrap()] = 0.0;
    let q = |s: &[f64]| {
        DifferentiableSession::new(&model, &samples)
            .unwrap()
            .profiled(
                s,
                TestStatistic::QTilde,
                1.0,
                StatisticData::Asimov {
                    parameters: &at_zero,
                },
                &config,
            )
            .unwrap()
    };
    let signal = [5.0, 7.0, 2.5];
    let p = q(&signal);
    assert!(
        p.q > 0.0 && p.d_signal.iter().all(|d| d.is_finite()),
        "{p:?}"
    );
    let fd = finite_differences(&signal, 1e-4, &|s| q(s).q);
    assert_close(&p.d_signal, &fd, 1e-4, 1e-6, "sparse Asimov dq/ds");
}

/// Calls from many threads at once (here from rayon workers, where a waiting lock could
/// deadlock) neither wait on each other nor mix their signals.
#[test]
fn concurrent_calls_from_worker_threads_are_independent() {
    use rayon::prelude::*;
    let (model, data, samples) = setup();
    let session = DifferentiableSession::new(&model, &samples).unwrap();
    let config = tight(&model);
    let signals: Vec<Vec<f64>> = (0..16)
        .map(|k| {
            session_signal()
                .iter()
                .map(|s| s * (1.0 + 0.05 * k as f64))
                .collect()
        })
        .collect();
    let pars = model.suggested_init();
    let parallel: Vec<(f64, f64)> = signals
        .par_iter()
        .map(|s| {
            let nll = session.nll(s, &pars, &data).unwrap().nll;
            let q = observed_q0(&session, s, &data, &config).unwrap().q;
            (nll, q)
        })
        .collect();
    for (s, (nll, q)) in signals.iter().zip(parallel) {
        let alone = DifferentiableSession::new(&model, &samples).unwrap();
        assert_eq!(nll, alone.nll(s, &pars, &data).unwrap().nll);
        let want = observed_q0(&alone, s, &data, &config).unwrap().q;
        assert!((q - want).abs() <= 1e-8 * want.max(1.0), "{q} vs {want}");
    }
}

/// Every backend's NLL with external yields: its ∂NLL/∂s and ∂NLL/∂θ against central finite
/// differences of its own NLL, its values against the CPU session's, the workspace's own yields
/// reproducing the model's NLL, batches with shared and per-row parameters, and the errors of
/// bad yields. Three models: a signal over two channels with normsys, histosys, lumi and a
/// normfactor; an external background under a staterror (widths moving with the yields) and a
/// histosys; a signal with its own staterror, one bin of it fixed, over an empty bin.
fn signal_nll_on_every_backend(device: ns_compute::Device) {
    let (model, data, samples) = setup();
    let (sparse, sparse_data) = sparse_model();
    let cases = [
        (
            &model,
            &data,
            samples,
            vec![5.0, 10.0, 3.5, 1.3, 0.7],
            pars_with(
                &model,
                &[
                    ("mu", 1.4),
                    ("sig_shape", 0.6),
                    ("sig_xsec", -0.8),
                    ("shape", -1.3),
                ],
            ),
        ),
        (
            &model,
            &data,
            vec![("SR".to_string(), "bkg".to_string())],
            vec![26.0, 25.0, 9.0],
            pars_with(
                &model,
                &[
                    ("staterror_SR[0]", 1.04),
                    ("staterror_SR[2]", 0.93),
                    ("shape", 0.7),
                ],
            ),
        ),
        (
            &sparse,
            &sparse_data,
            vec![("SR".to_string(), "signal".to_string())],
            vec![5.0, 7.0, 2.5],
            pars_with(&sparse, &[("sig_stat[0]", 1.1), ("mu", 1.2)]),
        ),
    ];
    for (model, data, samples, signal, pars) in cases {
        let what = format!("{device:?} {samples:?}");
        let session = DifferentiableSession::on_device(model, &samples, device).unwrap();
        let cpu = DifferentiableSession::new(model, &samples).unwrap();
        assert_eq!(session.device(), device);
        let g = check_signal_gradient(&session, &signal, &pars, data, &what);
        let fd_pars =
            finite_differences(&pars, 1e-6, &|p| session.nll(&signal, p, data).unwrap().nll);
        assert_close(&g.d_pars, &fd_pars, 1e-6, 1e-8, &format!("{what} dNLL/dθ"));
        let reference = cpu.nll(&signal, &pars, data).unwrap();
        assert!(
            (g.nll - reference.nll).abs() <= 1e-12 * reference.nll.abs().max(1.0),
            "{what}"
        );
        assert_close(
            &g.d_signal,
            &reference.d_signal,
            1e-10,
            1e-12,
            &format!("{what} vs CPU"),
        );
        assert_close(
            &g.d_pars,
            &reference.d_pars,
            1e-10,
            1e-12,
            &format!("{what} vs CPU"),
        );
        let own = session.nll(&session.nominal_signal(), &pars, data).unwrap();
        let twice = ns_inference::Fitter::new(model)
            .twice_nll(&pars, data)
            .unwrap();
        assert!(
            (2.0 * own.nll - twice).abs() < 1e-9,
            "{what}: {} vs {twice}",
            2.0 * own.nll
        );
        // Batches: shared parameters, then one row each; rows are the single evaluations.
        let signals = [signal.clone(), session.nominal_signal()].concat();
        let shared = session.nll_batch(&signals, &pars, data).unwrap();
        let mut moved = pars.clone();
        moved[model.poi().unwrap()] *= 0.5;
        let per_row = session
            .nll_batch(&signals, &[pars.clone(), moved.clone()].concat(), data)
            .unwrap();
        assert_eq!(shared[0].nll, g.nll, "{what}");
        assert_eq!(shared[0].d_signal, g.d_signal, "{what}");
        assert_eq!(shared[1].nll, own.nll, "{what}");
        assert_eq!(per_row[0].d_pars, g.d_pars, "{what}");
        let second = session
            .nll(&session.nominal_signal(), &moved, data)
            .unwrap();
        assert_eq!(per_row[1].nll, second.nll, "{what}");
        assert_eq!(per_row[1].d_signal, second.d_signal, "{what}");
        // Bad yields are named, and the session stays usable after them.
        let mut bad = signal.clone();
        bad[1] = f64::INFINITY;
        let e = session.nll(&bad, &pars, data).unwrap_err().to_string();
        assert!(e.contains("yield 1 is inf"), "{what}: {e}");
        let e = session
            .nll_batch(&signals[1..], &pars, data)
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a positive multiple"), "{what}: {e}");
        let e = session
            .nll_batch(&signals, &pars[1..], data)
            .unwrap_err()
            .to_string();
        assert!(e.contains("parameters have"), "{what}: {e}");
        assert_eq!(
            session.nll(&signal, &pars, data).unwrap().nll,
            g.nll,
            "{what}"
        );
    }
}

// The f32 arm of the differentiable layer is in f32_parity.rs.
ns_tests::test_device!(f64: signal_nll_on_every_backend);

/// Every backend's batches of profiled statistics (on a GPU every row's two fits run in one
/// device batch, the fits' widths following staterror-linked yields) against one-row statistics
/// of fresh host sessions: q0 and q̃μ on observed data, q0 on the Asimov data that move with
/// each row's signal, and q̃μ with the staterror-covered background as the external sample.
fn profiled_batches_on_every_backend(device: ns_compute::Device) {
    let (model, data, samples) = setup();
    let config = tight(&model);
    let asimov = pars_with(&model, &[("mu", 1.0)]);
    let background = vec![("SR".to_string(), "bkg".to_string())];
    let signal_rows = [
        session_signal(),
        vec![6.0, 9.0, 4.0, 1.0, 0.5],
        vec![9.0, 14.0, 6.0, 2.0, 1.0],
    ]
    .concat();
    let background_rows = [vec![26.0, 25.0, 9.0], vec![30.0, 22.0, 11.0]].concat();
    let cases = [
        (
            &samples,
            &signal_rows,
            TestStatistic::Q0,
            0.0,
            StatisticData::Fixed(&data),
        ),
        (
            &samples,
            &signal_rows,
            TestStatistic::QTilde,
            2.0,
            StatisticData::Fixed(&data),
        ),
        (
            &samples,
            &signal_rows,
            TestStatistic::Q0,
            0.0,
            StatisticData::Asimov {
                parameters: &asimov,
            },
        ),
        (
            &background,
            &background_rows,
            TestStatistic::QTilde,
            3.0,
            StatisticData::Fixed(&data),
        ),
    ];
    for (external, rows, stat, mu, on) in cases {
        let what = format!("{device:?} {external:?} {stat:?}");
        let session = DifferentiableSession::on_device(&model, external, device).unwrap();
        assert_eq!(
            session.batch_fits_on_device(&config),
            matches!(device, ns_compute::Device::Cuda(_))
        );
        let batch = session
            .profiled_batch(rows, stat, mu, on.clone(), &config)
            .unwrap();
        let n = session.n_signal();
        assert_eq!(batch.len(), rows.len() / n, "{what}");
        for (row, got) in rows.chunks(n).zip(&batch) {
            let want = DifferentiableSession::new(&model, external)
                .unwrap()
                .profiled(row, stat, mu, on.clone(), &config)
                .unwrap();
            assert!(want.q > 0.0, "{what}: q = {}", want.q);
            assert!(
                (got.q - want.q).abs() <= 1e-6 * want.q + 1e-8,
                "{what}: q {} vs {}",
                got.q,
                want.q
            );
            assert_close(
                &got.d_signal,
                &want.d_signal,
                1e-4,
                1e-6,
                &format!("{what} dq/ds"),
            );
            assert!(got.free_fit.converged && got.fixed_fit.converged, "{what}");
        }
    }
}

// The f32 arm of the differentiable layer is in f32_parity.rs.
ns_tests::test_device!(f64: profiled_batches_on_every_backend);

/// Signal evaluations and profiled batches (device fits with each row's signal, staterror widths
/// following the yields) on several GPUs give one GPU's bits. Where the host has one GPU, two
/// sessions of it share the batches.
#[test]
#[ignore = "needs an NVIDIA GPU: run with --include-ignored on a GPU machine (bench/gpu_run.sh)"]
fn signal_batches_on_several_gpus_are_one_gpus_bits() {
    ns_tests::require_cuda("signal_batches_on_several_gpus_are_one_gpus_bits");
    let (model, data, samples) = setup();
    let config = tight(&model);
    let rows = [
        session_signal(),
        vec![6.0, 9.0, 4.0, 1.0, 0.5],
        vec![9.0, 14.0, 6.0, 2.0, 1.0],
    ]
    .concat();
    let background = vec![("SR".to_string(), "bkg".to_string())];
    let background_rows = [vec![26.0, 25.0, 9.0], vec![30.0, 22.0, 11.0]].concat();
    let one_gpu = ns_compute::Device::Cuda(ns_compute::CudaGpus::FIRST);
    for (external, rows, stat, mu) in [
        (&samples, &rows, TestStatistic::Q0, 0.0),
        (&background, &background_rows, TestStatistic::QTilde, 3.0),
    ] {
        let one = DifferentiableSession::on_device(&model, external, one_gpu).unwrap();
        let several = DifferentiableSession::with_backend(
            &model,
            external,
            ns_tests::all_gpus_backend(&model.compiled),
        )
        .unwrap();
        assert!(several.batch_fits_on_device(&config));
        let statistic = |s: &DifferentiableSession| {
            s.profiled_batch(rows, stat, mu, StatisticData::Fixed(&data), &config)
                .unwrap()
                .into_iter()
                .map(|p| {
                    (
                        p.q.to_bits(),
                        p.d_signal.iter().map(|v| v.to_bits()).collect(),
                    )
                })
                .collect::<Vec<(u64, Vec<u64>)>>()
        };
        assert_eq!(statistic(&one), statistic(&several), "{external:?}");
        let pars = model.suggested_init();
        let n = one.n_signal();
        let nll = |s: &DifferentiableSession| {
            let batch = s.nll_batch(rows, &pars, &data).unwrap();
            batch
                .iter()
                .map(|r| {
                    (
                        r.nll.to_bits(),
                        r.d_signal.iter().map(|v| v.to_bits()).collect(),
                    )
                })
                .collect::<Vec<(u64, Vec<u64>)>>()
        };
        assert_eq!(nll(&one).len(), rows.len() / n);
        assert_eq!(nll(&one), nll(&several), "{external:?}");
    }
}
