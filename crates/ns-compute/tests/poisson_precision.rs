//! The Poisson term against 50-digit mpmath (tests/fixtures/poisson_mpmath.json, written by
//! scripts/make_poisson_reference.py): ≤ 1e-13 relative error for n, λ from 0 to 1e15.

use ns_compute::poisson::poisson_nll;

#[test]
fn poisson_terms_match_exact_values() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/fixtures/poisson_mpmath.json"
    );
    let text = std::fs::read_to_string(path).expect("fixture tests/fixtures/poisson_mpmath.json");
    let doc: serde_json::Value = serde_json::from_str(&text).expect("fixture is JSON");
    let cases = doc["cases"].as_array().expect("cases");
    assert!(cases.len() > 500);
    let mut worst = (0.0f64, 0.0, 0.0);
    for case in cases {
        let n = case["n"].as_f64().unwrap();
        let lambda = case["lambda"].as_f64().unwrap();
        let exact: f64 = case["nll"].as_str().unwrap().parse().unwrap();
        let ours = poisson_nll(n, lambda);
        let rel = ((ours - exact) / exact.abs().max(f64::MIN_POSITIVE)).abs();
        if rel > worst.0 {
            worst = (rel, n, lambda);
        }
    }
    assert!(
        worst.0 <= 1e-13,
        "largest relative error {:e} at n = {}, λ = {}",
        worst.0,
        worst.1,
        worst.2
    );
}
