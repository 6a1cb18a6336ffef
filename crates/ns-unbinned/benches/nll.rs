//! NLL + gradient of an unbinned Gauss + exponential model per event, on one thread and on all:
//! `cargo bench -p ns-unbinned --bench nll` (throughput in events per second).

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use ns_unbinned::events::pack;

#[path = "../examples/support/gauss_exp.rs"]
mod gauss_exp;
use gauss_exp::{events, model};

fn bench(c: &mut Criterion) {
    let model = model(10_000);
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
