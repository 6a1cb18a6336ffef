//! The batch entry point: many parameter vectors (and datasets) at once, equal to single
//! evaluations and bit-identical for any thread count.

use ns_compute::{CpuEvaluator, PreparedData, Scratch};
use ns_tests::{TestRng, random_point, workspace_path};
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
    let run = |threads: usize, sets: &[PreparedData]| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap()
            .install(|| eval.nll_grad_batch(&flat, sets).unwrap())
    };
    for sets in [std::slice::from_ref(&data), &datasets[..]] {
        let (one, two) = (run(1, sets), run(2, sets));
        assert_eq!(one.0, two.0, "NLLs differ between 1 and 2 threads");
        assert_eq!(one.1, two.1, "gradients differ between 1 and 2 threads");
        for (i, p) in points.iter().enumerate() {
            let d = if sets.len() == 1 { &sets[0] } else { &sets[i] };
            let mut g = vec![0.0; model.n_params()];
            let nll = eval
                .nll_with_gradient(p, d, &mut scratch, Some(&mut g))
                .unwrap();
            assert_eq!(nll.to_bits(), one.0[i].to_bits());
            assert_eq!(g, one.1[i * model.n_params()..(i + 1) * model.n_params()]);
        }
    }
    assert!(
        eval.nll_grad_batch(&flat[..5], &[data]).is_err(),
        "a ragged batch is an error"
    );
}
