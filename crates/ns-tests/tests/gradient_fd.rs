//! The analytic gradient against central finite differences (Richardson-extrapolated) on every
//! shared workspace, for every interpolation pair, at random points away from the kinks.

use ns_compute::{CpuEvaluator, Scratch};
use ns_tests::{
    TestRng, all_code_pairs, model_and_data, random_point, reference, reference_names,
    reference_workspace, tolerance,
};

#[test]
fn gradient_matches_finite_differences_everywhere() {
    let rel = tolerance("gradient_fd_rel");
    let mut checked = 0;
    for name in reference_names() {
        let ws = reference_workspace(&reference(&name));
        for codes in all_code_pairs() {
            let (model, data) = model_and_data(&ws, codes);
            let eval = CpuEvaluator::new(&model.compiled);
            let mut s = Scratch::new(&model.compiled);
            let mut rng = TestRng::new(name.len() as u64 * 31 + checked);
            for _ in 0..2 {
                let p = random_point(&model, &mut rng);
                let mut g = vec![0.0; model.n_params()];
                let f0 = eval
                    .nll_with_gradient(&p, &data, &mut s, Some(&mut g))
                    .unwrap();
                if !f0.is_finite() {
                    continue;
                }
                let mut nll_at = |q: &[f64]| eval.nll(q, &data, &mut s).unwrap();
                for i in 0..p.len() {
                    let mut diff = |h: f64| {
                        let (mut a, mut b) = (p.clone(), p.clone());
                        a[i] += h;
                        b[i] -= h;
                        (nll_at(&a) - nll_at(&b)) / (2.0 * h)
                    };
                    // Richardson-extrapolated central differences at three steps: the NLL carries
                    // Σ lgamma(n+1) (~1e5 on the large models), so the smallest step is limited by
                    // rounding and the largest by truncation; the closest of the three is the reference.
                    let scale = p[i].abs().max(1.0);
                    let fd = [1e-2, 1e-3, 1e-4]
                        .into_iter()
                        .map(|h| (4.0 * diff(h * scale / 2.0) - diff(h * scale)) / 3.0)
                        .filter(|d| d.is_finite())
                        .min_by(|a, b| (a - g[i]).abs().total_cmp(&(b - g[i]).abs()));
                    // A step that crosses a non-positive expectation has no finite difference.
                    let Some(fd) = fd else { continue };
                    assert!(
                        (g[i] - fd).abs() <= rel * g[i].abs().max(1.0),
                        "{name} {codes}: d/d{} analytic {} vs FD {fd}",
                        model.par_names[i],
                        g[i]
                    );
                }
                checked += 1;
            }
        }
    }
    assert!(checked > 200, "only {checked} points were checked");
}
