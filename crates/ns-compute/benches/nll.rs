//! Single-thread NLL and NLL + gradient on the standard large models, the latter once per
//! instruction set this CPU offers (the same bits on each: the ratio is what SIMD buys).
//! `cargo bench -p ns-compute --bench nll` (reads ../shared/pyhf-ref beside the repository).

use criterion::{Criterion, criterion_group, criterion_main};
use ns_compute::{CpuEvaluator, PreparedData, Scratch};
use ns_translate::FromWorkspace;
use ns_translate::{HistFactoryModel, ModelOptions, Workspace};
use std::hint::black_box;
use std::path::PathBuf;

const MODELS: [(&str, &str); 3] = [
    ("tHq_184", "nextstat_tHu.json"),
    ("tttt_249", "nextstat_tttt_prod.json"),
    ("synthetic_2000bins", "synthetic_large_2000bins.json"),
];

fn bench(c: &mut Criterion) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/pyhf-ref/workspaces");
    for (label, file) in MODELS {
        let ws = Workspace::from_path(&dir.join(file)).expect("shared workspace loads");
        let model =
            HistFactoryModel::from_workspace(&ws, &ModelOptions::default()).expect("model builds");
        let data =
            PreparedData::from_full(&model.compiled, &ws.data(&model, true).unwrap()).unwrap();
        let eval = CpuEvaluator::new(&model.compiled);
        let mut scratch = Scratch::new(&model.compiled);
        let params = model.suggested_init();
        let mut grad = vec![0.0; model.n_params()];
        c.bench_function(&format!("{label}/nll"), |b| {
            b.iter(|| eval.nll(black_box(&params), &data, &mut scratch).unwrap())
        });
        c.bench_function(&format!("{label}/nll_grad"), |b| {
            b.iter(|| {
                eval.nll_with_gradient(black_box(&params), &data, &mut scratch, Some(&mut grad))
                    .unwrap()
            })
        });
        for &simd in ns_compute::cpu::simd::available() {
            c.bench_function(&format!("{label}/nll_grad/{}", simd.name()), |b| {
                b.iter(|| {
                    eval.nll_minus_constant_on(
                        simd,
                        black_box(&params),
                        &data,
                        &mut scratch,
                        Some(&mut grad),
                    )
                    .unwrap()
                })
            });
        }
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
