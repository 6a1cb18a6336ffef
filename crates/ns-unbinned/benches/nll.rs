//! NLL + gradient of an unbinned Gauss + exponential model per event, on one thread and on all:
//! `cargo bench -p ns-unbinned --bench nll` (throughput in events per second).

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use ns_compute::rng::ToyStream;
use ns_unbinned::UnbinnedModel;
use ns_unbinned::events::{ChannelEvents, pack};
use ns_unbinned::hs3::{ReadOptions, read};

fn model() -> UnbinnedModel {
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
            {"name": "mean", "value": 5.0, "min": 0, "max": 10}, {"name": "sigma", "value": 1.0, "min": 0.1, "max": 5},
            {"name": "c", "value": 0.3, "min": -1, "max": 2}, {"name": "nsig", "value": 1000.0, "min": 0, "max": 1e9},
            {"name": "nbkg", "value": 9000.0, "min": 0, "max": 1e9}]}]
    });
    read(&doc, &ReadOptions::default()).expect("the benchmark model reads")
}

fn events(n: usize) -> ChannelEvents {
    let mut rng = ToyStream::new(1, 0, 0);
    let x = (0..n)
        .map(|i| {
            if i % 10 == 0 {
                (5.0 + rng.normal()).clamp(0.0, 10.0)
            } else {
                (-(1.0 - rng.uniform() * (1.0 - (-3.0f64).exp())).ln() / 0.3).min(10.0)
            }
        })
        .collect();
    ChannelEvents {
        columns: vec![x],
        weights: None,
    }
}

fn bench(c: &mut Criterion) {
    let model = model();
    let theta = [5.0, 1.0, 0.3, 1000.0, 9000.0];
    let mut group = c.benchmark_group("gauss_exp_nll_grad");
    for n in [100_000usize, 1_000_000] {
        let data = pack(&[events(n)], Vec::new(), 0.0);
        group.throughput(Throughput::Elements(n as u64));
        for threads in [1, rayon::current_num_threads()] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            group.bench_with_input(
                BenchmarkId::new(format!("{threads}_threads"), n),
                &n,
                |b, _| {
                    let mut grad = [0.0; 5];
                    b.iter(|| pool.install(|| model.nll_grad(&data, &theta, &mut grad).unwrap()))
                },
            );
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
