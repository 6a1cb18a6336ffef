//! Times nextstat's inference on one workspace, the model loaded once; prints JSON medians.
//! `cargo run --release -p ns-inference --example bench_inference -- WS.json [--toys N]`
//! (run with RAYON_NUM_THREADS=1 for single-thread numbers). Used by bench/inference_bench.py.

use ns_compute::PreparedData;
use ns_inference::{FitConfig, Fitter, TestStatistic, hypotest_asymptotic, hypotest_toys};
use ns_translate::FromWorkspace;
use ns_translate::{HistFactoryModel, ModelOptions, Workspace};
use std::time::Instant;

fn median_seconds(mut f: impl FnMut(), min_runs: usize, min_seconds: f64) -> f64 {
    f();
    let mut times = Vec::new();
    let start = Instant::now();
    while times.len() < min_runs || start.elapsed().as_secs_f64() < min_seconds {
        let t = Instant::now();
        f();
        times.push(t.elapsed().as_secs_f64());
        if times.len() >= 1000 {
            break;
        }
    }
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    ns_core::settings::install(ns_core::settings::Settings::from_environment());
    let args: Vec<String> = std::env::args().collect();
    let path = args
        .get(1)
        .ok_or("usage: bench_inference WS.json [--toys N] [--mu MU]")?;
    let flag = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .map(|s| s.parse::<f64>())
    };
    let n_toys = flag("--toys").transpose()?.unwrap_or(0.0) as usize;
    let mu = flag("--mu").transpose()?.unwrap_or(1.0);
    let ws = Workspace::from_path(std::path::Path::new(path))?;
    let model = HistFactoryModel::from_workspace(&ws, &ModelOptions::default())?;
    let data = PreparedData::from_full(&model.compiled, &ws.data(&model, true)?)?;
    let fitter = Fitter::new(&model);
    let config = FitConfig::suggested(&model);
    let with_hessian = FitConfig {
        uncertainties: true,
        ..config.clone()
    };
    let fit = median_seconds(|| drop(fitter.fit(&data, &config).unwrap()), 5, 1.0);
    let fit_hessian = median_seconds(|| drop(fitter.fit(&data, &with_hessian).unwrap()), 5, 1.0);
    let cls = median_seconds(
        || drop(hypotest_asymptotic(&fitter, mu, &data, &config, TestStatistic::QTilde).unwrap()),
        3,
        1.0,
    );
    let mut out = format!(
        "{{\"n_params\": {}, \"fit_s\": {fit}, \"fit_hessian_s\": {fit_hessian}, \"asymptotic_cls_s\": {cls}, \"threads\": {}",
        model.n_params(),
        rayon::current_num_threads()
    );
    if n_toys > 0 {
        let t = Instant::now();
        let h = hypotest_toys(
            &fitter,
            mu,
            &data,
            &config,
            TestStatistic::QTilde,
            n_toys,
            1,
            &|_| {},
        )?;
        out += &format!(
            ", \"toys\": {n_toys}, \"toy_cls_s\": {}, \"toy_cls\": {}, \"toy_n_failed\": {}",
            t.elapsed().as_secs_f64(),
            h.cls.cls_obs,
            h.signal.n_failed + h.background.n_failed
        );
    }
    println!("{out}}}");
    Ok(())
}
