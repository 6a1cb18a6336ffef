//! The analytic Hessian of the CPU evaluator against differences of the analytic gradient, on
//! every shared workspace, for every interpolation pair, at the suggested start, with the POI at
//! 0 (a normfactor at 0: the limit of the logarithmic form) and at random points.

use ns_compute::{CpuEvaluator, HessianPart, Scratch};
use ns_tests::{
    all_code_pairs, hessian_column_by_differences, model_and_data, points_for, reference,
    reference_names, reference_workspace, tolerance,
};

#[test]
fn hessian_matches_differences_of_the_gradient_everywhere() {
    let rel = tolerance("hessian_fd_rel");
    let (mut checked, mut at_zero) = (0, 0);
    for name in reference_names() {
        let ws = reference_workspace(&reference(&name));
        for codes in all_code_pairs() {
            let (model, data) = model_and_data(&ws, codes);
            let n = model.n_params();
            let eval = CpuEvaluator::new(&model.compiled);
            let mut s = Scratch::new(&model.compiled);
            for p in points_for(&model, name.len() as u64 * 7 + checked, 2) {
                let full = eval
                    .nll_hessian(&p, &data, &mut s, HessianPart::Full)
                    .unwrap()
                    .unwrap_or_else(|| panic!("{name} {codes}: no Hessian at {p:?}"));
                if model.poi().is_ok_and(|poi| p[poi] == 0.0) {
                    at_zero += 1;
                }
                let diagonal = eval
                    .nll_hessian(&p, &data, &mut s, HessianPart::Diagonal)
                    .unwrap()
                    .expect("the diagonal exists where the matrix does");
                let mut gradient_at = |q: &[f64]| {
                    let mut g = vec![0.0; n];
                    eval.nll_with_gradient(q, &data, &mut s, Some(&mut g))
                        .unwrap();
                    g
                };
                if !gradient_at(&p).iter().all(|g| g.is_finite()) {
                    continue;
                }
                for j in 0..n {
                    assert_eq!(
                        diagonal[j].to_bits(),
                        full[j * n + j].to_bits(),
                        "{name} {codes}: diagonal of {}",
                        model.par_names[j]
                    );
                }
                // Every column of the small models, fifty spread over the large ones.
                let stride = if n <= 300 { 1 } else { n.div_ceil(50) };
                for j in (0..n).step_by(stride) {
                    // On the upper side: at the kinks of code 0 and code 1 (α = 0, the start)
                    // the Hessian is the α ≥ 0 branch's.
                    let column = hessian_column_by_differences(&p, j, &mut gradient_at);
                    for (i, &fd) in column.iter().enumerate() {
                        let analytic = full[i * n + j];
                        assert_eq!(
                            analytic.to_bits(),
                            full[j * n + i].to_bits(),
                            "{name} {codes}: not symmetric"
                        );
                        // Relative to the curvatures of the pair (a correlation-sized error).
                        let size = (full[i * n + i] * full[j * n + j]).abs().sqrt().max(1.0);
                        assert!(
                            (analytic - fd).abs() <= rel * size,
                            "{name} {codes}: d²/d{} d{}: analytic {analytic} vs differences {fd}",
                            model.par_names[i],
                            model.par_names[j]
                        );
                    }
                }
                checked += 1;
            }
        }
    }
    assert!(checked > 100, "only {checked} points were checked");
    assert!(at_zero > 0, "the POI at 0 was never checked");
}
