//! The standard GPU table: CPU (all threads) vs CUDA on one workspace, the model loaded once.
//! Prints one JSON object: MLE fit, a 21-point profile scan and toy CLs at `--mu`, each timed on
//! both devices (medians of warm runs; the CUDA session's first kernel load is timed apart).
//!
//! `cargo build --release -p ns-inference --example gpu_bench`, then
//! `gpu_bench WS.json --mu MU --toys 1000 [--cpu-toys 200] [--big-toys 10000] [--devices cpu,cuda,vulkan]`
//! (see bench/gpu_run.sh).

use ns_compute::PreparedData;
use ns_inference::{
    Device, FitConfig, Fitter, TestStatistic, Workload, hypotest_toys, profile_scan,
};
use ns_translate::FromWorkspace;
use ns_translate::{HistFactoryModel, ModelOptions, Workspace};
use std::time::Instant;

fn median_seconds(mut f: impl FnMut(), runs: usize) -> f64 {
    f();
    let mut times: Vec<f64> = (0..runs)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

/// The differentiable layer's engine on `device`: NLL + ∂/∂s + ∂/∂θ (the signal being the samples
/// that carry the POI's normfactor, values in host memory) for one row per call and for a batch
/// of 1000 rows (each yield scaled by a fixed factor in [0.9, 1.1]), medians of warm calls.
fn differentiable_timings(
    ws: &Workspace,
    model: &HistFactoryModel,
    data: &PreparedData,
    device: Device,
) -> Result<serde_json::Value, Box<dyn std::error::Error>> {
    use ns_compute::{SignalBatch, Values, ValuesMut};
    let samples: Vec<(String, String)> = ws
        .channels
        .iter()
        .flat_map(|c| {
            c.samples
                .iter()
                .filter(|s| {
                    s.modifiers.iter().any(|m| {
                        m.name == model.poi_name
                            && matches!(m.kind, ns_translate::spec::ModifierKind::NormFactor)
                    })
                })
                .map(|s| (c.name.clone(), s.name.clone()))
        })
        .collect();
    let session =
        ns_inference::differentiable::DifferentiableSession::on_device(model, &samples, device)?;
    let (n, np) = (session.n_signal(), model.n_params());
    let nominal = session.nominal_signal();
    let pars = model.suggested_init();
    let time = |rows: usize| -> f64 {
        let signals: Vec<f64> = (0..rows * n)
            .map(|k| nominal[k % n] * (0.9 + 0.2 * ((k * 7919) % 1000) as f64 / 1000.0))
            .collect();
        let (mut nll, mut ds, mut dp) =
            (vec![0.0; rows], vec![0.0; rows * n], vec![0.0; rows * np]);
        median_seconds(
            || {
                session
                    .evaluate(SignalBatch {
                        signals: Values::Host(&signals),
                        pars: Values::Host(&pars),
                        data,
                        nll: ValuesMut::Host(&mut nll),
                        d_signal: ValuesMut::Host(&mut ds),
                        d_pars: ValuesMut::Host(&mut dp),
                    })
                    .unwrap()
            },
            11,
        )
    };
    Ok(serde_json::json!({
        "n_signal": n, "nll_grad_per_call_s": time(1), "nll_grad_batch1000_s": time(1000),
    }))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    ns_core::settings::install(ns_core::settings::Settings::from_environment());
    let args: Vec<String> = std::env::args().collect();
    let path = args
        .get(1)
        .ok_or("usage: gpu_bench WS.json --mu MU --toys N")?;
    let flag = |name: &str, default: f64| -> f64 {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|s| s.parse().ok())
            .unwrap_or(default)
    };
    let mu = flag("--mu", 1.0);
    let n_toys = flag("--toys", 1000.0) as usize;
    let cpu_toys = flag("--cpu-toys", n_toys as f64) as usize;
    let big_toys = flag("--big-toys", 0.0) as usize;
    let vulkan_toys = flag("--vulkan-toys", n_toys as f64) as usize;
    let ws = Workspace::from_path(std::path::Path::new(path))?;
    let model = HistFactoryModel::from_workspace(&ws, &ModelOptions::default())?;
    let data = PreparedData::from_full(&model.compiled, &ws.data(&model, true)?)?;
    let config = FitConfig::suggested(&model);
    let poi = model.poi()?;
    let scan_values: Vec<f64> = (0..21).map(|i| 2.0 * mu * i as f64 / 20.0).collect();

    // A whole toy CLs (`n` toys per hypothesis of `seed`), timed once: (seconds, CLs_obs).
    let toy_cls = |fitter: &Fitter, n: usize, seed: u64| {
        let started = Instant::now();
        let h = hypotest_toys(
            fitter,
            mu,
            &data,
            &config,
            TestStatistic::QTilde,
            n,
            seed,
            &|_| {},
        )
        .unwrap();
        (started.elapsed().as_secs_f64(), h.cls.cls_obs)
    };
    // The columns: `--devices cpu,cuda,vulkan` (default cpu,cuda). The f32 Vulkan column runs on
    // the same GPU through its Vulkan driver.
    let devices: Vec<String> = args
        .iter()
        .position(|a| a == "--devices")
        .and_then(|i| args.get(i + 1))
        .map_or("cpu,cuda", |s| s.as_str())
        .split(',')
        .map(str::to_string)
        .collect();
    let mut out = serde_json::json!({
        "workspace": path,
        "n_params": model.n_params(),
        "n_bins": model.compiled.n_main,
        "mu": mu,
        "cpu_threads": rayon::current_num_threads(),
    });
    let mut fitters: Vec<(&str, Fitter)> = Vec::new();
    for name in &devices {
        match name.as_str() {
            "cpu" => fitters.push(("cpu", Fitter::new(&model))),
            "cuda" => {
                let session_open = Instant::now();
                let backend = ns_compute::cuda::CudaBackend::new(
                    &model.compiled,
                    0,
                    ns_compute::Objective::Likelihood,
                )?;
                let session_s = session_open.elapsed().as_secs_f64();
                let mut session = backend.session();
                let device = session.info().clone();
                // The evaluation kernel alone: 4000 NLL + gradient evaluations in one launch.
                let on_device = session.upload_datasets(&[&data])?;
                let points: Vec<f64> = (0..4000).flat_map(|_| model.suggested_init()).collect();
                let (mut nll, mut grad) = (vec![0.0; 4000], vec![0.0; 4000 * model.n_params()]);
                let eval_4000 = median_seconds(
                    || {
                        session
                            .nll_grad(
                                &points,
                                &on_device,
                                &[0; 4000],
                                &mut nll,
                                &mut grad,
                                &Default::default(),
                            )
                            .unwrap()
                    },
                    5,
                );
                out["gpu"] = device.name.clone().into();
                out["kernels"] = format!("{:?}", device.kernels).into();
                out["cuda_session_open_s"] = session_s.into();
                out["nll_grad_4000_evals_s"] = eval_4000.into();
                out["kernels_report"] = session.kernel_report().into();
                drop(session);
                let cuda = Fitter::with_backend(&model, Box::new(backend))?;
                out["backend"] = cuda.backend_description().into();
                fitters.push(("cuda", cuda));
            }
            "vulkan" => {
                let open = Instant::now();
                let vulkan = Fitter::on_device(&model, Device::Vulkan, Workload::Sequential)?;
                out["vulkan_open_s"] = open.elapsed().as_secs_f64().into();
                out["vulkan_backend"] = vulkan.backend_description().into();
                fitters.push(("vulkan", vulkan));
            }
            other => return Err(format!("--devices: unknown device '{other}'").into()),
        }
    }
    for (name, fitter) in &fitters {
        let name = *name;
        let fit = median_seconds(|| drop(fitter.fit(&data, &config).unwrap()), 5);
        let with_errors = FitConfig {
            uncertainties: true,
            ..config.clone()
        };
        let fit_unc = median_seconds(|| drop(fitter.fit(&data, &with_errors).unwrap()), 3);
        let limit_grid: Vec<f64> = (1..=21).map(|i| 2.0 * mu * i as f64 / 21.0).collect();
        let limit = median_seconds(
            || {
                drop(
                    ns_inference::upper_limit_scan(
                        fitter,
                        &data,
                        &config,
                        0.05,
                        &limit_grid,
                        &mut |_| {},
                    )
                    .unwrap(),
                )
            },
            2,
        );
        let rank = median_seconds(
            || drop(ns_inference::ranking(fitter, &data, &config, &|_| {}).unwrap()),
            3,
        );
        let scan = median_seconds(
            || drop(profile_scan(fitter, poi, &scan_values, &data, &config, &|_| {}).unwrap()),
            2,
        );
        let differentiable = differentiable_timings(&ws, &model, &data, fitter.device())?;
        let toys = match name {
            "cpu" => cpu_toys,
            "vulkan" => vulkan_toys,
            _ => n_toys,
        };
        let (toys_s, cls) = toy_cls(fitter, toys, 1);
        out[name] = serde_json::json!({
            "fit_s": fit, "fit_uncertainties_s": fit_unc, "ranking_s": rank, "limit_scan21_s": limit, "scan21_s": scan, "toys": toys, "toys_s": toys_s,
            "toys_per_1000_s": toys_s * 1000.0 / toys as f64, "cls_obs": cls,
            "differentiable": differentiable,
        });
    }
    if big_toys > 0 {
        let cuda = &fitters
            .iter()
            .find(|(name, _)| *name == "cuda")
            .ok_or("--big-toys runs on CUDA: add cuda to --devices")?
            .1;
        let (s, cls) = toy_cls(cuda, big_toys, 2);
        out["cuda_big"] = serde_json::json!({"toys": big_toys, "toys_s": s, "cls_obs": cls});
        // Every GPU of the host sharing the same toys (the same bits as one GPU).
        let gpus = ns_compute::cuda::device_count()?;
        if gpus > 1 {
            let open = Instant::now();
            let all = Fitter::on_device(
                &model,
                Device::Cuda(ns_compute::CudaGpus::All),
                Workload::Sequential,
            )?;
            let open_s = open.elapsed().as_secs_f64();
            let (s_all, cls_all) = toy_cls(&all, big_toys, 2);
            let rank_all = median_seconds(
                || drop(ns_inference::ranking(&all, &data, &config, &|_| {}).unwrap()),
                3,
            );
            out["cuda_all"] = serde_json::json!({
                "gpus": gpus, "open_s": open_s, "toys": big_toys, "toys_s": s_all,
                "speedup": s / s_all, "cls_obs": cls_all,
                "cls_bit_identical": cls_all.to_bits() == cls.to_bits(), "ranking_s": rank_all,
            });
        }
    }
    out["auto_for_toys"] =
        Fitter::auto_device(&model, Device::Auto, Workload::Batch { fits: 4 * n_toys })
            .name()
            .into();
    out["auto_for_fit"] = Fitter::auto_device(&model, Device::Auto, Workload::Sequential)
        .name()
        .into();
    println!("{out}");
    Ok(())
}
