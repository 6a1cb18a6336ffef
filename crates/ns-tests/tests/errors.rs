//! Bad input: one test per error class. Each must be an error (never a panic) whose message
//! names the place.

use ns_inference::params::params_from_json;
use ns_translate::FromWorkspace;
use ns_translate::patch::{PatchSet, apply_patch};
use ns_translate::{HistFactoryModel, ModelOptions, Workspace};
use serde_json::{Value, json};

fn base() -> Value {
    json!({
        "channels": [{"name": "SR", "samples": [
            {"name": "signal", "data": [5.0, 10.0], "modifiers": [{"name": "mu", "type": "normfactor", "data": null}]},
            {"name": "bkg", "data": [50.0, 60.0], "modifiers": [
                {"name": "stat_SR", "type": "staterror", "data": [5.0, 6.0]},
                {"name": "jes", "type": "normsys", "data": {"hi": 1.1, "lo": 0.9}}]}
        ]}],
        "observations": [{"name": "SR", "data": [55.0, 70.0]}],
        "measurements": [{"name": "meas", "config": {"poi": "mu", "parameters": []}}],
        "version": "1.0.0"
    })
}

/// Build the workspace and its model; return the error text.
fn error_of(ws: Value) -> String {
    match Workspace::from_value(ws) {
        Err(e) => e.to_string(),
        Ok(ws) => match HistFactoryModel::from_workspace(&ws, &ModelOptions::default()) {
            Err(e) => e.to_string(),
            Ok(model) => match model.poi() {
                Err(e) => e.to_string(),
                Ok(_) => panic!("expected an error"),
            },
        },
    }
}

fn assert_mentions(message: &str, parts: &[&str]) {
    for part in parts {
        assert!(
            message.contains(part),
            "error message {message:?} does not mention {part:?}"
        );
    }
}

#[test]
fn malformed_json_names_line_and_column() {
    let e = Workspace::from_json_str("{\"channels\": [}")
        .unwrap_err()
        .to_string();
    assert_mentions(&e, &["line 1", "column"]);
}

#[test]
fn non_finite_numbers_are_rejected() {
    let text = base().to_string().replace("55.0", "NaN");
    assert_mentions(
        &Workspace::from_json_str(&text).unwrap_err().to_string(),
        &["non-finite", "line 1"],
    );
    let text = base().to_string().replace("70.0", "-Infinity");
    assert_mentions(
        &Workspace::from_json_str(&text).unwrap_err().to_string(),
        &["non-finite"],
    );
}

#[test]
fn missing_key_names_the_path() {
    let mut ws = base();
    ws["channels"][0]["samples"][1]
        .as_object_mut()
        .unwrap()
        .remove("data");
    assert_mentions(&error_of(ws), &["channels[0].samples[1]", "data"]);
}

#[test]
fn wrong_type_names_the_path() {
    let mut ws = base();
    ws["channels"][0]["samples"][0]["data"][1] = json!("ten");
    assert_mentions(&error_of(ws), &["channels[0].samples[0].data[1]"]);
}

#[test]
fn sample_length_mismatch_names_channel_and_sample() {
    let mut ws = base();
    ws["channels"][0]["samples"][1]["data"] = json!([1.0, 2.0, 3.0]);
    assert_mentions(&error_of(ws), &["'SR'", "'bkg'", "3 bins"]);
}

#[test]
fn modifier_length_mismatch_names_the_modifier() {
    let mut ws = base();
    ws["channels"][0]["samples"][1]["modifiers"][0]["data"] = json!([1.0]);
    assert_mentions(
        &error_of(ws),
        &["'bkg'", "staterror 'stat_SR'", "1 entries"],
    );
    let mut ws = base();
    ws["channels"][0]["samples"][1]["modifiers"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "shape", "type": "histosys", "data": {"hi_data": [1.0, 2.0], "lo_data": [1.0]}}));
    assert_mentions(&error_of(ws), &["histosys 'shape'", "lo_data"]);
}

#[test]
fn observation_length_mismatch_is_named() {
    let mut ws = base();
    ws["observations"][0]["data"] = json!([1.0]);
    assert_mentions(&error_of(ws), &["observations[0] 'SR'", "1 bins"]);
}

#[test]
fn unknown_modifier_type_is_named() {
    let mut ws = base();
    ws["channels"][0]["samples"][0]["modifiers"][0]["type"] = json!("normfactr");
    assert_mentions(
        &error_of(ws),
        &[
            "channels[0].samples[0].modifiers[0]",
            "normfactr",
            "normfactor",
        ],
    );
}

#[test]
fn lumi_without_config_is_named() {
    let mut ws = base();
    ws["channels"][0]["samples"][0]["modifiers"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "lumi", "type": "lumi", "data": null}));
    assert_mentions(
        &error_of(ws),
        &["measurement 'meas'", "parameter 'lumi'", "auxdata"],
    );
}

#[test]
fn invalid_name_reuse_is_named() {
    let mut ws = base();
    ws["channels"][0]["samples"][0]["modifiers"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "jes", "type": "normfactor", "data": null}));
    assert_mentions(
        &error_of(ws),
        &["'jes'", "normfactor", "normsys", "InvalidNameReuse"],
    );
}

#[test]
fn shapesys_shared_across_samples_is_named() {
    let mut ws = base();
    for s in 0..2 {
        ws["channels"][0]["samples"][s]["modifiers"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "unc", "type": "shapesys", "data": [1.0, 1.0]}));
    }
    assert_mentions(&error_of(ws), &["shapesys 'unc'", "'bkg'", "'signal'"]);
}

#[test]
fn staterror_over_different_bins_is_named() {
    let mut ws = base();
    ws["channels"].as_array_mut().unwrap().push(json!({"name": "CR", "samples": [
        {"name": "other", "data": [3.0], "modifiers": [{"name": "stat_SR", "type": "staterror", "data": [1.0]}]}]}));
    ws["observations"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "CR", "data": [3.0]}));
    assert_mentions(
        &error_of(ws),
        &["staterror 'stat_SR'", "'bkg'", "'other'", "different bins"],
    );
}

#[test]
fn config_key_a_parameter_does_not_use_is_named() {
    let mut ws = base();
    ws["measurements"][0]["config"]["parameters"] = json!([{"name": "mu", "sigmas": [0.1]}]);
    assert_mentions(&error_of(ws), &["parameter 'mu'", "sigmas"]);
    let mut ws = base();
    ws["measurements"][0]["config"]["parameters"] = json!([{"name": "stat_SR", "inits": [1.0]}]);
    assert_mentions(
        &error_of(ws),
        &["parameter 'stat_SR'", "inits has 1 values"],
    );
}

#[test]
fn duplicate_parameter_config_is_named() {
    let mut ws = base();
    ws["measurements"][0]["config"]["parameters"] = json!([{"name": "mu"}, {"name": "mu"}]);
    assert_mentions(&error_of(ws), &["config.parameters[1] 'mu'", "multiple"]);
}

#[test]
fn config_of_a_parameter_not_in_the_model_is_accepted_as_pyhf_does() {
    let mut ws = base();
    ws["measurements"][0]["config"]["parameters"] =
        json!([{"name": "not_a_modifier", "bounds": [[0, 1]]}]);
    let ws = Workspace::from_value(ws).unwrap();
    HistFactoryModel::from_workspace(&ws, &ModelOptions::default()).unwrap();
}

#[test]
fn missing_poi_is_an_error_only_when_needed() {
    let mut ws = base();
    ws["measurements"][0]["config"]["poi"] = json!("mu_SIG");
    let e = error_of(ws);
    assert_mentions(&e, &["'mu_SIG'", "measurement 'meas'", "background-only"]);
}

#[test]
fn unknown_measurement_lists_the_known_ones() {
    let ws = Workspace::from_value(base()).unwrap();
    let e = HistFactoryModel::from_workspace(
        &ws,
        &ModelOptions {
            measurement: Some("other".into()),
            ..Default::default()
        },
    )
    .unwrap_err();
    assert_mentions(&e.to_string(), &["'other'", "meas"]);
}

#[test]
fn unknown_parameter_in_a_parameter_object_is_named() {
    let ws = Workspace::from_value(base()).unwrap();
    let model = HistFactoryModel::from_workspace(&ws, &ModelOptions::default()).unwrap();
    let e = params_from_json(&model, &json!({"muu": 1.0}), &model.suggested_init()).unwrap_err();
    assert_mentions(&e.to_string(), &["'muu'", "mu"]);
    let e =
        params_from_json(&model, &json!({"stat_SR": [1.0]}), &model.suggested_init()).unwrap_err();
    assert_mentions(&e.to_string(), &["'stat_SR'", "2 parameters"]);
}

#[test]
fn patch_that_does_not_apply_is_named() {
    let mut ws = base();
    let patch = json!([{"op": "replace", "path": "/channels/3/name", "value": "x"}]);
    assert_mentions(
        &apply_patch(&mut ws, &patch, "signal.json")
            .unwrap_err()
            .to_string(),
        &["signal.json"],
    );
    let bad_op = json!([{"op": "frobnicate", "path": "/channels"}]);
    assert_mentions(
        &apply_patch(&mut ws, &bad_op, "signal.json")
            .unwrap_err()
            .to_string(),
        &["patch signal.json"],
    );
}

#[test]
fn patchset_digest_mismatch_is_reported() {
    let ps = json!({
        "metadata": {"description": "d", "digests": {"sha256": "0".repeat(64)}, "labels": ["m"], "references": {"hepdata": "ins1234567"}},
        "patches": [{"metadata": {"name": "p1", "values": [100]}, "patch": []}],
        "version": "1.0.0"
    });
    let ps = PatchSet::from_value(ps).unwrap();
    assert_mentions(
        &ps.apply(&base(), "p1").unwrap_err().to_string(),
        &["digest verification failed", "sha256"],
    );
    // The right digest written in upper case names the same workspace.
    let upper = ns_translate::pyjson::digest(&base()).to_ascii_uppercase();
    let ps = json!({
        "metadata": {"description": "d", "digests": {"sha256": upper}, "labels": ["m"], "references": {"hepdata": "ins1234567"}},
        "patches": [{"metadata": {"name": "p1", "values": [100]}, "patch": []}],
        "version": "1.0.0"
    });
    assert!(
        PatchSet::from_value(ps)
            .unwrap()
            .apply(&base(), "p1")
            .is_ok()
    );
}

#[test]
fn non_positive_expectation_gives_nan_like_pyhf_not_a_panic() {
    use ns_compute::{CpuEvaluator, PreparedData, Scratch};
    let mut ws = base();
    ws["channels"][0]["samples"][1]["data"] = json!([-60.0, 60.0]);
    let ws = Workspace::from_value(ws).unwrap();
    let model = HistFactoryModel::from_workspace(&ws, &ModelOptions::default()).unwrap();
    let data = PreparedData::from_full(&model.compiled, &ws.data(&model, true).unwrap()).unwrap();
    let nll = CpuEvaluator::new(&model.compiled)
        .nll(
            &model.suggested_init(),
            &data,
            &mut Scratch::new(&model.compiled),
        )
        .unwrap();
    assert!(
        nll.is_nan(),
        "a negative expected count with n > 0 is NaN in pyhf, got {nll}"
    );
}
