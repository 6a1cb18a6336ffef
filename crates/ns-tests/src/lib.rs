//! Shared helpers of the integration tests: where the reference data lives, the tolerances.

use serde_json::Value;
use std::path::PathBuf;

/// `../shared/pyhf-ref` beside the repository (override with `NEXTSTAT_PYHF_REF`).
pub fn pyhf_ref_dir() -> PathBuf {
    if let Ok(dir) = std::env::var("NEXTSTAT_PYHF_REF") {
        return PathBuf::from(dir);
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/pyhf-ref")
}

/// Names (file stems) of every stored reference, sorted.
pub fn reference_names() -> Vec<String> {
    let dir = pyhf_ref_dir().join("ref");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| {
            panic!(
                "cannot read {}: {e} (is ../shared beside the repository?)",
                dir.display()
            )
        })
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            e.path()
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
        })
        .collect();
    names.sort();
    names
}

/// The stored pyhf reference of a workspace.
pub fn reference(name: &str) -> Value {
    let path = pyhf_ref_dir().join("ref").join(format!("{name}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Path of a shared workspace file.
pub fn workspace_path(file: &str) -> PathBuf {
    pyhf_ref_dir().join("workspaces").join(file)
}

/// A tolerance of the parity contract (`tests/tolerances.json`).
pub fn tolerance(key: &str) -> f64 {
    let all: Value = serde_json::from_str(include_str!("../../../tests/tolerances.json"))
        .expect("tolerances.json parses");
    all[key]
        .as_f64()
        .unwrap_or_else(|| panic!("tolerance '{key}' missing"))
}

/// Floats of a JSON array.
pub fn floats(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap_or_else(|| panic!("expected an array, found {v}"))
        .iter()
        .map(|x| x.as_f64().unwrap_or(f64::NAN))
        .collect()
}

/// `|a − b| ≤ rtol·max(|a|, |b|)`, with NaN equal only to NaN.
pub fn close(a: f64, b: f64, rtol: f64) -> bool {
    if a.is_nan() || b.is_nan() {
        return a.is_nan() && b.is_nan();
    }
    a == b || (a - b).abs() <= rtol * a.abs().max(b.abs())
}
