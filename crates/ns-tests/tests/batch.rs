//! The CPU backend's batch entry point: many parameter vectors (and datasets) at once, equal to
//! single evaluations and bit-identical for any thread count.

use std::sync::atomic::AtomicBool;

use ns_compute::{Backend, CpuBackend, CpuEvaluator, Datasets, PreparedData, Scratch};
use ns_tests::{TestRng, random_point, workspace_path};
use ns_translate::FromWorkspace;
use ns_translate::{HistFactoryModel, ModelOptions, Workspace};

#[test]
fn batch_equals_single_evaluations_for_any_thread_count() {
    let ws = Workspace::from_path(&workspace_path("nextstat_tHu.json")).unwrap();
    let model = HistFactoryModel::from_workspace(&ws, &ModelOptions::default()).unwrap();
    let data = PreparedData::from_full(&model.compiled, &ws.data(&model, true).unwrap()).unwrap();
    let eval = CpuEvaluator::new(&model.compiled);
    let mut rng = TestRng::new(5);
    let points: Vec<Vec<f64>> = (0..16).map(|_| random_point(&model, &mut rng)).collect();
    let flat: Vec<f64> = points.concat();
    // A second dataset per point: the Asimov data of the point itself.
    let mut scratch = Scratch::new(&model.compiled);
    let datasets: Vec<PreparedData> = points
        .iter()
        .map(|p| {
            let (main, aux) = eval.expected_data(p, &mut scratch).unwrap();
            PreparedData::new(&model.compiled, main, aux).unwrap()
        })
        .collect();
    let backend = CpuBackend::new(&model.compiled);
    let stop = AtomicBool::new(false);
    let n = model.n_params();
    let run = |threads: usize, sets: &[PreparedData]| {
        let which: Vec<u32> = (0..points.len())
            .map(|i| if sets.len() == 1 { 0 } else { i as u32 })
            .collect();
        let (mut nll, mut grad) = (vec![0.0; points.len()], vec![0.0; points.len() * n]);
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap()
            .install(|| {
                backend
                    .nll_grad_batch(
                        &flat,
                        Datasets::Host(sets),
                        &which,
                        &mut nll,
                        &mut grad,
                        &stop,
                    )
                    .unwrap()
            });
        (nll, grad)
    };
    for sets in [std::slice::from_ref(&data), &datasets[..]] {
        let (one, two) = (run(1, sets), run(2, sets));
        assert_eq!(one.0, two.0, "NLLs differ between 1 and 2 threads");
        assert_eq!(one.1, two.1, "gradients differ between 1 and 2 threads");
        for (i, p) in points.iter().enumerate() {
            let d = if sets.len() == 1 { &sets[0] } else { &sets[i] };
            let mut g = vec![0.0; model.n_params()];
            // The backend evaluates the NLL without its data-only constant.
            let nll = eval
                .nll_minus_constant(p, d, &mut scratch, Some(&mut g))
                .unwrap();
            assert_eq!(nll.to_bits(), one.0[i].to_bits());
            assert_eq!(g, one.1[i * model.n_params()..(i + 1) * model.n_params()]);
        }
    }
    let (mut nll, mut grad) = (vec![0.0; 1], vec![0.0; n]);
    assert!(
        backend
            .nll_grad_batch(
                &flat[..5],
                Datasets::Host(&[data]),
                &[0],
                &mut nll,
                &mut grad,
                &stop
            )
            .is_err(),
        "a ragged batch is an error"
    );
    assert!(
        backend
            .nll_grad_batch(
                &flat[..n],
                Datasets::Host(&datasets),
                &[99],
                &mut nll,
                &mut grad,
                &stop
            )
            .is_err(),
        "a dataset index out of range is an error"
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(
        matches!(
            backend.nll_grad_batch(
                &flat[..n],
                Datasets::Host(&datasets),
                &[0],
                &mut nll,
                &mut grad,
                &stop
            ),
            Err(ns_core::Error::Interrupted)
        ),
        "a set stop flag interrupts the batch"
    );
}
