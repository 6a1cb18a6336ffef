//! `--save-call` writes the call a verb runs; `nextstat run` of that file, from another folder,
//! prints exactly what the verb printed, for every verb on the bundled example analysis.

mod common;

use common::Scratch;
use std::path::{Path, PathBuf};
use std::process::Command;

fn example() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/analysis.json")
}

fn nextstat(args: &[&str], cwd: &Path) -> (bool, Vec<u8>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_nextstat"))
        .args(args)
        .current_dir(cwd)
        .output()
        .unwrap();
    (
        out.status.success(),
        out.stdout,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn run_reproduces_every_verb_byte_for_byte() {
    let dir = Scratch::new("saved-calls");
    let elsewhere = Scratch::new("saved-calls-elsewhere");
    let data = dir.write(
        "data.json",
        &serde_json::json!([120, 95, 70, 52, 61, 40, 33]),
    );
    let example = example();
    let ws = example.to_str().unwrap();
    let cases: Vec<Vec<&str>> = vec![
        vec!["eval", ws],
        vec![
            "fit",
            ws,
            "--covariance",
            "--fix",
            "wjets_norm=1.1",
            "--minos",
            "mu_sig",
        ],
        vec!["fit", ws, "--format", "text", "--bound", "mu_sig=0,5"],
        vec!["hypotest", ws, "--mu", "1.5", "--test-stat", "q"],
        vec!["hypotest-toys", ws, "--n-toys", "60", "--seed", "3"],
        vec!["upper-limit", ws],
        vec![
            "upper-limit",
            ws,
            "--scan",
            "0",
            "4",
            "9",
            "--format",
            "text",
        ],
        vec!["significance", ws, "--asimov", "1"],
        vec!["scan", ws, "--range", "0", "2", "5"],
        vec!["ranking", ws],
        vec!["gof", ws, "--data", data.to_str().unwrap()],
    ];
    for (k, args) in cases.iter().enumerate() {
        let call = dir.0.join(format!("call{k}.json"));
        let mut with_save = args.clone();
        with_save.extend(["--save-call", call.to_str().unwrap()]);
        let (ok, direct, err) = nextstat(&with_save, &dir.0);
        assert!(ok, "{args:?}: {err}");
        let mut run = vec!["run", call.to_str().unwrap()];
        if args.contains(&"text") {
            run.extend(["--format", "text"]);
        }
        let (ok, rerun, err) = nextstat(&run, &elsewhere.0);
        assert!(ok, "run of {args:?}: {err}");
        assert!(
            direct == rerun,
            "{args:?}: the saved call printed something else:\n{}\n---\n{}",
            String::from_utf8_lossy(&direct),
            String::from_utf8_lossy(&rerun)
        );
    }
}

#[test]
fn a_call_without_an_answer_is_refused_naming_the_field() {
    let dir = Scratch::new("saved-calls-bad");
    let cases = [
        (r#"{"request": {"verb": "fit"}}"#, "names no model"),
        (
            r#"{"model": {"workspace": "nowhere.json"}, "request": {"verb": "fit"}}"#,
            "nowhere.json",
        ),
        (
            r#"{"model": {"workspace": "x.json"}, "request": {"verb": "fit"}, "fit": {"tolerance": -1}}"#,
            "tolerance -1",
        ),
        (
            r#"{"model": {"workspace": "x.json"}, "request": {"verb": "scan"}}"#,
            "request",
        ),
    ];
    for (k, (text, words)) in cases.iter().enumerate() {
        let call = dir.0.join(format!("bad{k}.json"));
        std::fs::write(&call, text).unwrap();
        let (ok, _, err) = nextstat(&["run", call.to_str().unwrap()], &dir.0);
        assert!(!ok && err.contains(words), "{text}: {err}");
    }
}

#[test]
fn a_saved_call_never_replaces_an_input_and_keeps_infinities() {
    let dir = Scratch::new("saved-calls-inputs");
    let ws = dir.write(
        "ws.json",
        &serde_json::from_str(&std::fs::read_to_string(example()).unwrap()).unwrap(),
    );
    let ws = ws.to_str().unwrap();
    // The workspace itself as the call file: refused, the workspace untouched.
    let before = std::fs::read(ws).unwrap();
    let (ok, _, err) = nextstat(&["fit", ws, "--save-call", ws], &dir.0);
    assert!(
        !ok && err.contains("--save-call") && err.contains("an input"),
        "{err}"
    );
    assert_eq!(std::fs::read(ws).unwrap(), before);
    // ±inf keep their sign through the call: an inverted box is still refused, and a fix at
    // infinity is named as such.
    let call = dir.0.join("call.json");
    let (ok, _, err) = nextstat(
        &[
            "fit",
            ws,
            "--bound",
            "mu_sig=inf,5",
            "--save-call",
            call.to_str().unwrap(),
        ],
        &dir.0,
    );
    assert!(!ok && err.contains("low must not exceed high"), "{err}");
    let (ok, _, err) = nextstat(&["fit", ws, "--fix", "mu_sig=inf"], &dir.0);
    assert!(!ok && err.contains("fixed at inf"), "{err}");
    // An unbounded side runs, and its saved call runs again to the same output.
    let (ok, direct, err) = nextstat(
        &[
            "fit",
            ws,
            "--bound",
            "mu_sig=0,inf",
            "--save-call",
            call.to_str().unwrap(),
        ],
        &dir.0,
    );
    assert!(ok, "{err}");
    assert!(std::fs::read_to_string(&call).unwrap().contains("\"inf\""));
    let (ok, rerun, err) = nextstat(&["run", call.to_str().unwrap()], &dir.0);
    assert!(ok && rerun == direct, "{err}");
}

#[test]
fn a_model_that_names_its_format_gives_what_the_untagged_one_gives() {
    let dir = Scratch::new("saved-calls-format");
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let resonance = root.join("unbinned/resonance.json");
    let run = |model: serde_json::Value| {
        let call = dir.write(
            "call.json",
            &serde_json::json!({"model": model, "request": {"verb": "fit"}}),
        );
        nextstat(&["run", call.to_str().unwrap()], &dir.0)
    };
    for (untagged, tagged) in [
        (
            serde_json::json!({"workspace": example()}),
            serde_json::json!({"format": "pyhf", "workspace": example()}),
        ),
        (
            serde_json::json!({"workspace": resonance, "measurement": "simPdf_obsData"}),
            serde_json::json!({"format": "hs3", "document": resonance, "analysis": "simPdf_obsData"}),
        ),
    ] {
        let (ok, expected, err) = run(untagged);
        assert!(ok, "{err}");
        let (ok, out, err) = run(tagged);
        assert!(ok, "{err}");
        assert_eq!(out, expected);
    }
    // A format that does not match the document, and one that does not exist, say so.
    let (ok, _, err) = run(serde_json::json!({"format": "pyhf", "workspace": resonance}));
    assert!(
        !ok && err.contains("is an HS3 model, not a pyhf workspace"),
        "{err}"
    );
    let (ok, _, err) = run(serde_json::json!({"format": "root", "workspace": example()}));
    assert!(
        !ok && err.contains("no input format 'root' (the formats are: hs3, xml, datacard, pyhf)"),
        "{err}"
    );
}

#[test]
fn a_patchset_grid_runs_on_a_histfactory_xml_background() {
    // A patchset made for the workspace the XML gives (its digest), scaling the signal.
    let set = std::env::var_os("NEXTSTAT_HISTFACTORY_XML")
        .map_or_else(
            || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/histfactory-xml"),
            PathBuf::from,
        )
        .join("pyhf-validation/xmlimport_input");
    let top = set.join("config/example.xml");
    let top = top.to_str().unwrap();
    let dir = Scratch::new("xml-grid");
    let (ok, workspace, err) = nextstat(&["xml2json", top], &dir.0);
    assert!(ok, "{err}");
    let workspace: serde_json::Value = serde_json::from_slice(&workspace).unwrap();
    let (ok, digest, err) = nextstat(
        &["digest", dir.write("ws.json", &workspace).to_str().unwrap()],
        &dir.0,
    );
    assert!(ok, "{err}");
    let digest = String::from_utf8(digest)
        .unwrap()
        .trim()
        .trim_start_matches("sha256:")
        .to_string();
    let patch = |name: &str, scale: f64| {
        serde_json::json!({"metadata": {"name": name, "values": [scale]},
            "patch": [{"op": "replace", "path": "/channels/0/samples/0/data", "value": [20.0 * scale, 10.0 * scale]}]})
    };
    let patchset = dir.write(
        "patchset.json",
        &serde_json::json!({"metadata": {"references": {}, "description": "signal scaled", "digests": {"sha256": digest},
            "labels": ["scale"]}, "version": "1.0.0", "patches": [patch("x1", 1.0), patch("x2", 2.0)]}),
    );
    // The patchset's digest is of pyhf's reading of the XML: under ROOT's semantics (the
    // default) the background is another workspace, and the digest says so.
    let grid = |semantics: &str| {
        nextstat(
            &[
                "upper-limit",
                top,
                "--patchset",
                patchset.to_str().unwrap(),
                "--all",
                "--semantics",
                semantics,
            ],
            &dir.0,
        )
    };
    let (ok, _, err) = grid("root");
    assert!(!ok && err.contains("digest verification failed"), "{err}");
    let (ok, table, err) = grid("pyhf");
    assert!(ok, "{err}");
    let table: serde_json::Value = serde_json::from_slice(&table).unwrap();
    let points = table["points"].as_array().unwrap();
    assert_eq!(points.len(), 2);
    // Twice the signal: a lower limit on its strength.
    assert!(
        points[1]["obs"].as_f64().unwrap() < points[0]["obs"].as_f64().unwrap(),
        "{table}"
    );
}
