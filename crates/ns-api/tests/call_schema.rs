//! The committed JSON Schema of the serialisable call (docs/call.schema.json) is the one the
//! types generate. After changing the call's types, regenerate it with
//! `NEXTSTAT_WRITE_SCHEMA=1 cargo test -p ns-api --test call_schema`.

use ns_api::call::Call;

#[test]
fn the_committed_call_schema_matches_the_types() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/call.schema.json");
    let generated = serde_json::to_string_pretty(&schemars::schema_for!(Call)).unwrap() + "\n";
    if std::env::var_os("NEXTSTAT_WRITE_SCHEMA").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "docs/call.schema.json differs from the schema of ns_api::call::Call: regenerate it \
         with NEXTSTAT_WRITE_SCHEMA=1 cargo test -p ns-api --test call_schema"
    );
}

#[test]
fn calls_round_trip_and_refuse_what_has_no_answer() {
    let call = Call::from_json(serde_json::json!({
        "model": {"workspace": "ws.json", "patches": ["p.json"]},
        "request": {"verb": "hypotest", "mu": 1.5, "test_stat": "q"},
        "fit": {"tolerance": 1e-7, "fixed": {"bkg_norm": 0.5}},
        "device": "cuda:0",
        "data": {"asimov": 0.0}
    }))
    .unwrap();
    assert_eq!(Call::from_json(call.to_json()).unwrap(), call);
    assert!(call.validate().is_ok());
    let refused = |value: serde_json::Value, words: &str| {
        let e = Call::from_json(value)
            .and_then(|c| c.validate().map(|_| c))
            .err()
            .unwrap_or_else(|| panic!("accepted; expected an error with '{words}'"))
            .to_string();
        assert!(e.contains(words), "{e}");
    };
    refused(
        serde_json::json!({"request": {"verb": "fit"}, "fit": {"tolerance": 0}}),
        "positive, finite",
    );
    refused(
        serde_json::json!({"request": {"verb": "hypotest", "mu": 1, "test_stat": "tmu"}}),
        "two-sided",
    );
    refused(
        serde_json::json!({"request": {"verb": "fit"}, "device": "gpu"}),
        "unknown device 'gpu'",
    );
    refused(
        serde_json::json!({"request": {"verb": "profile_scan", "values": []}}),
        "from 1 to 100000",
    );
    refused(
        serde_json::json!({"request": {"verb": "fit"}, "colour": "red"}),
        "unknown field `colour`",
    );
    refused(
        serde_json::json!({"request": {"verb": "hypotest_toys", "mu": 1}}),
        "request: missing field `n_toys`",
    );
    refused(serde_json::json!([1, 2]), "a call is a JSON object");
    refused(serde_json::json!({}), "call: missing field `request`");
}
