//! Fit, and fit + Hessian (uncertainties), of the standard large and published models on one
//! thread, in process (model loaded once). `cargo bench -p ns-inference --bench fit` (reads
//! ../shared beside the repository; `NEXTSTAT_CPU_SIMD=baseline` for the evaluator without SIMD).

use criterion::{Criterion, criterion_group, criterion_main};
use ns_inference::{FitConfig, Fitter};
use ns_translate::FromWorkspace;
use ns_translate::{HistFactoryModel, ModelOptions, Workspace};
use std::path::PathBuf;

const MODELS: [(&str, &str); 5] = [
    (
        "staus_120",
        "likelihoods/atlas_staus_2018-04_comb_DS_100_1/workspace.json",
    ),
    ("tHq_184", "pyhf-ref/workspaces/nextstat_tHu.json"),
    (
        "EWKinos_219",
        "likelihoods/atlas_compressed_EWKinos_2018-16_smodels/workspace.json",
    ),
    ("tttt_249", "pyhf-ref/workspaces/nextstat_tttt_prod.json"),
    (
        "synthetic_2000bins",
        "pyhf-ref/workspaces/synthetic_large_2000bins.json",
    ),
];

fn bench(c: &mut Criterion) {
    ns_core::settings::install(ns_core::settings::Settings::from_environment());
    let shared = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared");
    // One thread, as `nextstat fit --threads 1`: batches of probes run on the calling thread.
    rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build_global()
        .expect("the global thread pool is configured once");
    let mut group = c.benchmark_group("fit");
    group.sample_size(20);
    for (label, file) in MODELS {
        let ws = Workspace::from_path(&shared.join(file)).expect("shared workspace loads");
        let model =
            HistFactoryModel::from_workspace(&ws, &ModelOptions::default()).expect("model builds");
        let data = ns_compute::Likelihood::observed(&model).expect("observed data");
        let fitter = Fitter::new(&model);
        let config = FitConfig::suggested(&model);
        let with_hessian = FitConfig {
            uncertainties: true,
            ..config.clone()
        };
        group.bench_function(format!("{label}/fit"), |b| {
            b.iter(|| fitter.fit(&data, &config).expect("fit runs"))
        });
        group.bench_function(format!("{label}/fit+hessian"), |b| {
            b.iter(|| fitter.fit(&data, &with_hessian).expect("fit runs"))
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
