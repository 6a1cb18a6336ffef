//! Hardening round 4 through the CLI, one test per class (issue 44): files a command must not
//! replace or mix, figures on extreme values, HS3 parameter points, messages that name the
//! cause. Each failed before its fix.

use serde_json::{Value, json};
use std::path::{Path, PathBuf};

mod common;
use common::{Scratch, run};

fn example() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/analysis.json")
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A refusal: exit status 2, `says` in the message, no panic.
fn refused(args: &[&str], says: &str) {
    let (code, _, err) = run(args);
    assert_eq!(code, Some(2), "{args:?}: {err}");
    assert!(
        err.contains(says) && !err.contains("panicked"),
        "{args:?}: {err}"
    );
}

#[test]
fn a_report_never_replaces_a_folder_of_other_files() {
    let dir = Scratch::new("h4-report");
    let mine = dir.0.join("mine");
    std::fs::create_dir_all(&mine).unwrap();
    std::fs::write(mine.join("index.html"), "my own page").unwrap();
    refused(
        &["report", path(&example()), "-o", path(&mine)],
        "the folder holds other files (index.html) and is not a report",
    );
    assert_eq!(
        std::fs::read_to_string(mine.join("index.html")).unwrap(),
        "my own page"
    );
    // A report goes into a new folder, and again into its own.
    let report = dir.0.join("report");
    for _ in 0..2 {
        let (code, _, err) = run(&["report", path(&example()), "-o", path(&report)]);
        assert_eq!(code, Some(0), "{err}");
    }
    assert!(report.join("index.html").is_file());
}

#[test]
fn the_saved_call_and_the_result_never_share_a_file_or_a_stream() {
    let dir = Scratch::new("h4-save-call");
    let out = dir.0.join("out.json");
    let ws = example();
    refused(
        &[
            "fit",
            path(&ws),
            "--save-call",
            path(&out),
            "-o",
            path(&out),
        ],
        "the result would replace the call",
    );
    assert!(!out.exists(), "nothing written");
    // The same file named two ways.
    let dotted = dir.0.join(".").join("out.json");
    refused(
        &[
            "fit",
            path(&ws),
            "--save-call",
            path(&out),
            "-o",
            path(&dotted),
        ],
        "the result would replace the call",
    );
    for verb in [&["fit"][..], &["eval"], &["hypotest", "--mu", "1"]] {
        let mut args = verb.to_vec();
        args.extend([path(&ws), "--save-call", "-"]);
        refused(&args, "--save-call -: the call would go to standard output");
    }
    // To standard output with the result in a file: one document each.
    let (code, call, err) = run(&["fit", path(&ws), "--save-call", "-", "-o", path(&out)]);
    assert_eq!(code, Some(0), "{err}");
    let call: Value = serde_json::from_str(&call).expect("stdout is the call alone");
    assert_eq!(call["request"]["verb"], "fit");
    assert!(out.is_file());
}

#[test]
fn figures_refuse_what_they_cannot_draw_and_finish_on_extreme_values() {
    let dir = Scratch::new("h4-plots");
    let ws = example();
    let (_, ranking, err) = run(&["ranking", path(&ws)]);
    let ranking: Value = serde_json::from_str(&ranking).unwrap_or_else(|e| panic!("{e}: {err}"));
    let figure = dir.0.join("f.svg");
    let with = |key: &str, value: Value| {
        let mut r = ranking.clone();
        r["entries"][0][key] = value;
        dir.write("ranking.json", &r)
    };
    for huge in [1e308, -1e308, 1e101] {
        refused(
            &[
                "plot",
                "ranking",
                path(&with("impact_postfit_up", json!(huge))),
                "-o",
                path(&figure),
            ],
            "no axis can draw it",
        );
    }
    // Tiny and subnormal impacts are drawn.
    for tiny in [1e-300, 5e-324, 0.0] {
        let file = with("impact_postfit_up", json!(tiny));
        let (code, _, err) = run(&["plot", "ranking", path(&file), "-o", path(&figure)]);
        assert_eq!(code, Some(0), "{tiny}: {err}");
    }
    let file = dir.write("ranking.json", &ranking);
    refused(
        &[
            "plot",
            "ranking",
            path(&file),
            "-o",
            path(&figure),
            "--top",
            "0",
        ],
        "top must be at least 1",
    );
    let theory = dir.write("theory.json", &json!([1.0, 2.0]));
    refused(
        &[
            "plot",
            "ranking",
            path(&file),
            "-o",
            path(&figure),
            "--theory",
            path(&theory),
        ],
        "the ranking figure takes no 'theory'",
    );
    refused(
        &[
            "plot",
            "ranking",
            path(&file),
            "-o",
            path(&figure),
            "--select",
            "m=1",
        ],
        "the ranking figure takes no 'select'",
    );
    let (_, fit, err) = run(&["fit", path(&ws), "--covariance"]);
    let mut fit: Value = serde_json::from_str(&fit).unwrap_or_else(|e| panic!("{e}: {err}"));
    fit["correlation"][0][1] = json!(5.0);
    let file = dir.write("fit.json", &fit);
    refused(
        &["plot", "correlation", path(&file), "-o", path(&figure)],
        "correlation[0][1] is 5, outside [−1, 1]",
    );
}

/// A one-Gaussian HS3 model with the parameter point `parameters`.
fn hs3(parameters: Value) -> Value {
    json!({
        "metadata": {"hs3_version": "0.2"},
        "distributions": [
            {"name": "g", "type": "gaussian_dist", "x": "x", "mean": "mu", "sigma": 1.0},
            {"name": "model", "type": "mixture_dist", "summands": ["g"], "coefficients": ["n"], "extended": true}],
        "data": [{"name": "d", "type": "unbinned", "axes": [{"name": "x", "min": -5, "max": 5}], "entries": [[0.1], [0.2], [-0.3]]}],
        "likelihoods": [{"name": "L", "distributions": ["model"], "data": ["d"]}],
        "domains": [{"name": "dom", "type": "product_domain", "axes": [
            {"name": "mu", "min": -3, "max": 3}, {"name": "n", "min": 0, "max": 100}]}],
        "parameter_points": [{"name": "default_values", "parameters": parameters}],
        "analyses": [{"name": "A", "likelihood": "L", "parameters_of_interest": ["n"], "domains": ["dom"]}]
    })
}

#[test]
fn hs3_parameter_points_are_read_strictly() {
    let dir = Scratch::new("h4-points");
    let good = dir.write(
        "good.json",
        &hs3(json!([{"name": "mu", "value": 0}, {"name": "n", "value": 3}])),
    );
    let (code, fit, err) = run(&["fit", path(&good)]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        serde_json::from_str::<Value>(&fit).unwrap()["parameter_names"],
        json!(["mu", "n"])
    );
    for (parameters, says) in [
        (
            json!([{"name": "mu", "value": 0}, {"name": "n", "value": 3}, {"name": "mu", "value": 1}]),
            "parameter 'mu' is listed twice",
        ),
        (
            json!([{"name": "mu", "value": "ten"}, {"name": "n", "value": 3}]),
            "'value' must be a number, not \"ten\"",
        ),
        (
            json!([{"name": "mu", "value": 0, "min": "-3", "max": 3}, {"name": "n", "value": 3}]),
            "'min' must be a number",
        ),
        (
            json!([{"name": "mu", "value": 0, "const": "yes"}, {"name": "n", "value": 3}]),
            "'const' must be true or false",
        ),
        (json!([{"value": 0}]), "parameters[0] has no \"name\""),
    ] {
        let file = dir.write("bad.json", &hs3(parameters));
        refused(&["fit", path(&file)], says);
    }
}

#[test]
fn messages_name_the_cause() {
    let dir = Scratch::new("h4-messages");
    // A seed beyond 64 bits in a saved call: no advice to write it as a float.
    let call = dir.write(
        "call.json",
        &json!({"model": {"workspace": path(&example())}, "request": {"verb": "hypotest_toys", "mu": 1, "n_toys": 10}}),
    );
    let text = std::fs::read_to_string(&call).unwrap().replace(
        "\"n_toys\":10",
        "\"n_toys\":10,\"seed\":18446744073709551616",
    );
    std::fs::write(&call, text).unwrap();
    refused(
        &["run", path(&call)],
        "a seed or a count must be below 2^64",
    );
    // A file with HS3's distributions but no likelihoods is not taken for a pyhf workspace.
    let mut half = hs3(json!([{"name": "mu", "value": 0}, {"name": "n", "value": 3}]));
    half.as_object_mut().unwrap().remove("likelihoods");
    half.as_object_mut().unwrap().remove("metadata");
    let file = dir.write("half.json", &half);
    refused(
        &["fit", path(&file)],
        "has HS3's 'distributions' but no 'likelihoods'",
    );
    // The help speaks of models, not only pyhf workspaces; eval takes --gpu.
    let (_, help, _) = run(&["fit", "--help"]);
    assert!(help.contains("HS3") && help.contains("MODEL"), "{help}");
    let (_, help, _) = run(&["--help"]);
    assert!(
        !help.contains("HistFactory binned-likelihood inference,"),
        "{help}"
    );
    let (code, out, err) = run(&["eval", path(&example()), "--gpu", "cpu"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("twice_nll"));
}

#[test]
fn an_undefined_likelihood_names_the_distribution_at_fault() {
    let dir = Scratch::new("h4-undefined");
    let points = json!([{"name": "mu", "value": 0}, {"name": "n", "value": 3}, {"name": "s", "value": 0.0},
                        {"name": "f", "value": 0.0}]);
    let with = |distributions: Value| {
        let mut doc = hs3(points.clone());
        doc["distributions"] = distributions;
        doc["domains"][0]["axes"] = json!([{"name": "mu", "min": -3, "max": 3}, {"name": "n", "min": 0, "max": 100},
                                           {"name": "s", "min": 0, "max": 5}, {"name": "f", "min": 0, "max": 1}]);
        doc
    };
    for (distributions, says) in [
        // σ = 0 at the start.
        (
            json!([{"name": "g", "type": "gaussian_dist", "x": "x", "mean": "mu", "sigma": "s"},
                   {"name": "model", "type": "mixture_dist", "summands": ["g"], "coefficients": ["n"], "extended": true}]),
            "distribution 'g' cannot be normalised",
        ),
        // Mixture coefficients that are all zero.
        (
            json!([{"name": "g", "type": "gaussian_dist", "x": "x", "mean": "mu", "sigma": 1.0},
                   {"name": "h", "type": "gaussian_dist", "x": "x", "mean": 1.0, "sigma": 1.0},
                   {"name": "mix", "type": "mixture_dist", "summands": ["g", "h"], "coefficients": ["f", "f"]},
                   {"name": "model", "type": "mixture_dist", "summands": ["mix"], "coefficients": ["n"], "extended": true}]),
            "mixture 'mix': its coefficients are (NaN, NaN) here",
        ),
    ] {
        let file = dir.write("undefined.json", &with(distributions));
        let (code, _, err) = run(&["fit", path(&file)]);
        assert_eq!(code, Some(2), "{err}");
        assert!(
            err.contains(says) && !err.contains("a term of the likelihood is not finite"),
            "{err}"
        );
    }
    // A steep exponential (e^{200x} on [0, 5]) is a valid density, fitted.
    let steep = json!([{"name": "e", "type": "exponential_dist", "x": "x", "c": -200.0},
                       {"name": "model", "type": "mixture_dist", "summands": ["e"], "coefficients": ["n"], "extended": true}]);
    let mut doc = with(steep);
    doc["data"][0]["axes"] = json!([{"name": "x", "min": 0, "max": 5}]);
    doc["data"][0]["entries"] = json!([[4.99], [4.995], [4.999]]);
    let file = dir.write("steep.json", &doc);
    let (code, out, err) = run(&["fit", path(&file)]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("\"converged\": true"), "{out}");
}
