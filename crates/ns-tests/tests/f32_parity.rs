//! The f32 backend (wgpu) against the CPU f64 reference: design.md's f32 column. Runs on any
//! Vulkan adapter — in CI on Mesa's lavapipe (`mesa-vulkan-drivers`, installed by
//! scripts/test.sh), on the GPU machine on NVIDIA's driver. Without an adapter these tests fail
//! with the reason: they are never skipped.

use std::sync::atomic::AtomicBool;

use ns_compute::backend::open;
use ns_compute::{CpuEvaluator, Datasets, Device, PreparedData, Scratch};
use ns_core::HistFactoryModel;
use ns_tests::{
    TestRng, model_and_data, points_for, random_point, shared_workspaces, workspace_path,
};
use ns_translate::Workspace;

const DEVICE: Device = Device::Vulkan;

/// f32 tolerances (design.md's f32 column, `tests/tolerances.json`): the NLL relative to the
/// saturated model (the deviance form the backends return), gradient elements relative to
/// max(1, |g|), best-fit parameters in σ, twice_nll at the minimum, uncertainties, CLs.
fn tol(key: &str) -> f64 {
    ns_tests::tolerance(&format!("f32_{key}"))
}

/// The largest NLL difference as a fraction of its tolerance, and the largest gradient
/// difference relative to max(1, |g|), over `points`.
fn worst_differences(
    model: &HistFactoryModel,
    data: &PreparedData,
    points: &[Vec<f64>],
) -> (f64, f64) {
    let backend =
        open(DEVICE, &model.compiled).expect("a Vulkan adapter (install mesa-vulkan-drivers)");
    let resident = backend.upload(std::slice::from_ref(data)).unwrap();
    let n = model.n_params();
    let (mut nll, mut grad) = (
        vec![f64::NAN; points.len()],
        vec![f64::NAN; points.len() * n],
    );
    backend
        .nll_grad_batch(
            &points.concat(),
            Datasets::Resident(&resident),
            &vec![0; points.len()],
            &mut nll,
            &mut grad,
            &AtomicBool::new(false),
        )
        .unwrap();
    let cpu = CpuEvaluator::new(&model.compiled);
    let mut scratch = Scratch::new(&model.compiled);
    let (mut worst_nll, mut worst_grad) = (0.0f64, 0.0f64);
    for (k, p) in points.iter().enumerate() {
        let mut g = vec![0.0; n];
        let want = cpu
            .nll_minus_constant(p, data, &mut scratch, Some(&mut g))
            .unwrap();
        if want.is_nan() {
            // A yield driven negative: pyhf's NaN on both sides.
            assert!(
                nll[k].is_nan(),
                "point {k}: f32 {} where the CPU has NaN",
                nll[k]
            );
            continue;
        }
        worst_nll =
            worst_nll.max((nll[k] - want).abs() / (tol("nll_atol") + tol("nll_rtol") * want.abs()));
        for i in 0..n {
            worst_grad = worst_grad.max((grad[k * n + i] - g[i]).abs() / g[i].abs().max(1.0));
        }
    }
    (worst_nll, worst_grad)
}

/// The deviance-form NLL (the NLL relative to the saturated model's) within
/// `tol("nll_atol") + tol("nll_rtol")·|NLL|`, every gradient element within `tol("gradient_rel")·max(1, |g|)`, at the
/// suggested init and random points of every shared workspace.
#[test]
fn nll_and_gradient_match_cpu_on_every_workspace() {
    for (name, ws) in shared_workspaces() {
        let (model, data) = model_and_data(&ws, Default::default());
        let (nll, grad) = worst_differences(&model, &data, &points_for(&model, 11, 10));
        eprintln!("{name}: NLL {nll:.2e} of the tolerance, gradient {grad:.2e}");
        assert!(nll <= 1.0, "{name}: NLL differs by {nll} of its tolerance");
        assert!(
            grad <= tol("gradient_rel"),
            "{name}: a gradient element differs by {grad} (relative)"
        );
    }
}

/// Every interpolation code, on a model with normsys and histosys on every sample.
#[test]
fn every_interpolation_code_matches_cpu() {
    let ws = Workspace::from_path(&workspace_path("nextstat_tHu.json")).unwrap();
    for codes in ns_tests::all_code_pairs() {
        let (model, data) = model_and_data(&ws, codes);
        let (nll, grad) = worst_differences(&model, &data, &points_for(&model, 3, 6));
        assert!(
            nll <= 1.0 && grad <= tol("gradient_rel"),
            "{codes}: NLL {nll}, gradient {grad}"
        );
    }
}

/// Fits on the f32 backend against CPU fits: best-fit parameters within `PARAM_SIGMA` of their
/// CPU uncertainty, twice the NLL at the minimum within `2 · NLL_MIN`, uncertainties (f64 Hessian
/// at the f32 minimum) within `UNCERTAINTY_RTOL`, and the fit converged at the f32 tolerance.
#[test]
fn fits_match_cpu_fits() {
    use ns_inference::{FitConfig, Fitter};
    for file in [
        "nextstat_simple_workspace.json",
        "nextstat_complex_workspace.json",
        "nextstat_shape_workspace.json",
        "pyhf_validation_2bin_2channel_coupledhistosys.json",
        "tutorial_bkg_only_1Lbb_CRs.json",
        "nextstat_tHu.json",
    ] {
        let ws = Workspace::from_path(&workspace_path(file)).unwrap();
        let (model, data) = model_and_data(&ws, Default::default());
        let mut config = FitConfig::suggested(&model);
        config.uncertainties = true;
        let cpu = Fitter::new(&model).fit(&data, &config).unwrap();
        let f32_fitter = Fitter::on_device(&model, DEVICE, ns_compute::Workload::Sequential)
            .expect("a Vulkan adapter (install mesa-vulkan-drivers)");
        let got = f32_fitter.fit(&data, &config).unwrap();
        eprintln!(
            "{file}: converged {} ({:?}, {} iterations), twice_nll {} vs {}",
            got.converged, got.termination, got.iterations, got.twice_nll, cpu.twice_nll
        );
        let (cpu_sigma, got_sigma) = (
            cpu.uncertainties.clone().unwrap(),
            got.uncertainties.clone().unwrap(),
        );
        let mut worst_pull: f64 = 0.0;
        let mut worst_unc: f64 = 0.0;
        for i in 0..model.n_params() {
            let sigma = cpu_sigma[i];
            if !(sigma > 0.0) {
                continue;
            }
            worst_pull = worst_pull.max((got.parameters[i] - cpu.parameters[i]).abs() / sigma);
            worst_unc = worst_unc.max((got_sigma[i] - sigma).abs() / sigma);
        }
        eprintln!("   worst |Δθ|/σ {worst_pull:.2e}, worst Δσ/σ {worst_unc:.2e}");
        assert!(got.converged, "{file}: {:?}", got.termination);
        assert!(
            worst_pull <= tol("bestfit_sigma_frac"),
            "{file}: |Δθ|/σ = {worst_pull}"
        );
        assert!(
            worst_unc <= tol("uncertainty_rtol"),
            "{file}: Δσ/σ = {worst_unc}"
        );
        assert!(
            (got.twice_nll - cpu.twice_nll).abs() <= tol("twice_nll_at_min_atol"),
            "{file}: {} vs {}",
            got.twice_nll,
            cpu.twice_nll
        );
    }
}

/// Asymptotic CLs (q̃μ) within 1e-3 of the CPU's, and toy CLs with the same seed within 1e-2:
/// the same toy datasets (sampled on the host) fitted in f32.
#[test]
fn cls_match_cpu() {
    use ns_inference::{FitConfig, Fitter, TestStatistic, hypotest_asymptotic, hypotest_toys};
    for (file, mu) in [
        ("nextstat_complex_workspace.json", 1.0),
        ("nextstat_tHu.json", 0.3),
    ] {
        let ws = Workspace::from_path(&workspace_path(file)).unwrap();
        let (model, data) = model_and_data(&ws, Default::default());
        let config = FitConfig::suggested(&model);
        let cpu = Fitter::new(&model);
        let f32_fitter =
            Fitter::on_device(&model, DEVICE, ns_compute::Workload::Sequential).unwrap();
        let asymptotic = |f: &Fitter| {
            hypotest_asymptotic(f, mu, &data, &config, TestStatistic::QTilde)
                .unwrap()
                .cls
        };
        let (a, b) = (asymptotic(&cpu), asymptotic(&f32_fitter));
        eprintln!("{file}: asymptotic CLs {} vs {}", b.cls_obs, a.cls_obs);
        assert!(
            (a.cls_obs - b.cls_obs).abs() <= tol("cls_asymptotic_atol"),
            "{file}: asymptotic CLs {} vs {}",
            b.cls_obs,
            a.cls_obs
        );
        for (x, y) in a.cls_exp.iter().zip(&b.cls_exp) {
            assert!(
                (x - y).abs() <= tol("cls_asymptotic_atol"),
                "{file}: expected CLs {y} vs {x}"
            );
        }
        let toys = |f: &Fitter| {
            hypotest_toys(
                f,
                mu,
                &data,
                &config,
                TestStatistic::QTilde,
                200,
                7,
                &|_| {},
            )
            .unwrap()
        };
        let (a, b) = (toys(&cpu), toys(&f32_fitter));
        eprintln!("{file}: toy CLs {} vs {}", b.cls.cls_obs, a.cls.cls_obs);
        assert!(
            (a.cls.cls_obs - b.cls.cls_obs).abs() <= tol("cls_toys_atol"),
            "{file}: toy CLs {} vs {}",
            b.cls.cls_obs,
            a.cls.cls_obs
        );
    }
}

/// The differentiable NLL (external signal yields) in f32 against the CPU session: the NLL
/// within `tol("nll_atol") + tol("nll_rtol")·|NLL|`, ∂NLL/∂s and ∂NLL/∂θ within `tol("gradient_rel")·max(1, |g|)`, on
/// tHq's signal samples (histosys, and staterror widths that follow the yields) and the
/// 8-parameter model's, in a batch with per-row parameters.
#[test]
fn differentiable_nll_matches_cpu() {
    use ns_inference::differentiable::DifferentiableSession;
    for file in ["nextstat_tHu.json", "nextstat_complex_workspace.json"] {
        let ws = Workspace::from_path(&workspace_path(file)).unwrap();
        let (model, data) = model_and_data(&ws, Default::default());
        let poi = model.poi().unwrap();
        let mut samples = Vec::new();
        for channel in &model.channels {
            for sample in &model.samples {
                let Some(block) = model.block_of(&channel.name, sample) else {
                    continue;
                };
                let b = model.compiled.samples[block];
                let touches_poi = (b.scalar_start..b.scalar_end)
                    .any(|k| model.compiled.scalar_factors[k as usize].param as usize == poi);
                if touches_poi {
                    samples.push((channel.name.clone(), sample.clone()));
                }
            }
        }
        let f32_session = DifferentiableSession::on_device(&model, &samples, DEVICE).unwrap();
        let cpu = DifferentiableSession::new(&model, &samples).unwrap();
        let nominal = cpu.nominal_signal();
        let rows = [
            nominal.iter().map(|v| v * 0.8).collect::<Vec<_>>(),
            nominal.clone(),
        ]
        .concat();
        let mut rng = TestRng::new(5);
        let pars = [random_point(&model, &mut rng), model.suggested_init()].concat();
        let got = f32_session.nll_batch(&rows, &pars, &data).unwrap();
        let want = cpu.nll_batch(&rows, &pars, &data).unwrap();
        for (r, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                (g.nll - w.nll).abs() <= tol("nll_atol") + tol("nll_rtol") * w.nll.abs(),
                "{file} row {r}: NLL {} vs {}",
                g.nll,
                w.nll
            );
            for (what, a, b) in [
                ("∂/∂s", &g.d_signal, &w.d_signal),
                ("∂/∂θ", &g.d_pars, &w.d_pars),
            ] {
                let worst = a
                    .iter()
                    .zip(b)
                    .map(|(x, y)| (x - y).abs() / y.abs().max(1.0))
                    .fold(0.0, f64::max);
                eprintln!("{file} row {r} {what}: worst {worst:.2e}");
                assert!(
                    worst <= tol("gradient_rel"),
                    "{file} row {r}: {what} differs by {worst}"
                );
            }
        }
    }
}

/// A request for an f32 device where it cannot be met is an error, never a panic: yields in
/// device memory (CUDA's), and datasets from another backend.
#[test]
fn unsupported_requests_are_errors() {
    use ns_compute::{DeviceSlice, SignalBatch, Values, ValuesMut};
    let ws = Workspace::from_path(&workspace_path("nextstat_simple_workspace.json")).unwrap();
    let (model, data) = model_and_data(&ws, Default::default());
    let samples = vec![(model.channels[0].name.clone(), "signal".to_string())];
    let session =
        ns_inference::differentiable::DifferentiableSession::on_device(&model, &samples, DEVICE)
            .unwrap();
    let n = model.n_params();
    let (mut nll, mut ds, mut dp) = (vec![0.0], vec![0.0; session.n_signal()], vec![0.0; n]);
    // SAFETY: the address is never dereferenced: the f32 backend refuses device memory first.
    let in_device = unsafe { DeviceSlice::new(0x1000, session.n_signal()) };
    let e = session
        .evaluate(SignalBatch {
            signals: Values::Device(in_device),
            pars: Values::Host(&model.suggested_init()),
            data: &data,
            nll: ValuesMut::Host(&mut nll),
            d_signal: ValuesMut::Host(&mut ds),
            d_pars: ValuesMut::Host(&mut dp),
        })
        .unwrap_err()
        .to_string();
    assert!(e.contains("host memory only"), "{e}");
    let backend = open(DEVICE, &model.compiled).unwrap();
    let cpu_data = open(Device::Cpu, &model.compiled)
        .unwrap()
        .upload(std::slice::from_ref(&data))
        .unwrap();
    let e = backend
        .nll_grad_batch(
            &model.suggested_init(),
            Datasets::Resident(&cpu_data),
            &[0],
            &mut [0.0],
            &mut vec![0.0; n],
            &AtomicBool::new(false),
        )
        .unwrap_err()
        .to_string();
    assert!(e.contains("different backend"), "{e}");
}
