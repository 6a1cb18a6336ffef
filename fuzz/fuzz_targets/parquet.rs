//! Fuzz the Parquet reader of unbinned events (the `nextstat:parquet` HS3 extension): whatever
//! the file holds, reading it is events or an error, never a panic (the parquet crate's
//! assertions run contained).
#![no_main]

use libfuzzer_sys::fuzz_target;
use ns_core::FileAccess;
use serde_json::json;

fuzz_target!(|bytes: &[u8]| {
    let dir = std::env::temp_dir().join(format!("ns-fuzz-parquet-{}", std::process::id()));
    if std::fs::create_dir_all(&dir).is_err()
        || std::fs::write(dir.join("f.parquet"), bytes).is_err()
    {
        return;
    }
    let entry = json!({"name": "obs", "type": "nextstat:parquet", "path": "f.parquet",
                       "axes": [{"name": "x", "min": 0, "max": 10}], "weights": "w"});
    let _ = ns_unbinned::parquet::read_entry(&entry, "obs", FileAccess::Local { base: Some(&dir) });
    let unweighted = json!({"name": "obs", "type": "nextstat:parquet", "path": "f.parquet",
                            "axes": [{"name": "x", "min": 0, "max": 10}]});
    let _ = ns_unbinned::parquet::read_entry(
        &unweighted,
        "obs",
        FileAccess::Local { base: Some(&dir) },
    );
});
