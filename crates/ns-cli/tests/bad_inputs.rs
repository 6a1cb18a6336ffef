//! Hostile, careless and edge-case inputs, table-driven: each case gives the exit code and a
//! fragment of the message (or of the output). Nothing may panic (exit 101), abort (134) or hang;
//! a request without a meaningful answer is exit 2 with a message that names the problem.

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

mod common;
use common::{Scratch, run};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_nextstat"))
}

/// A small analysis: signal with a normfactor POI, background with a normsys and a shapesys.
fn analysis() -> Value {
    json!({
        "channels": [{"name": "SR", "samples": [
            {"name": "signal", "data": [5.0, 10.0], "modifiers": [
                {"name": "mu", "type": "normfactor", "data": null}]},
            {"name": "background", "data": [50.0, 60.0], "modifiers": [
                {"name": "bkg_norm", "type": "normsys", "data": {"hi": 1.1, "lo": 0.9}},
                {"name": "bkg_stat", "type": "shapesys", "data": [5.0, 6.0]}]}]}],
        "observations": [{"name": "SR", "data": [52, 63]}],
        "measurements": [{"name": "meas", "config": {"poi": "mu", "parameters": []}}],
        "version": "1.0.0"
    })
}

fn variant(edit: impl FnOnce(&mut Value)) -> Value {
    let mut ws = analysis();
    edit(&mut ws);
    ws
}

#[test]
fn each_bad_request_is_a_clear_error() {
    let dir = Scratch::new("bad-requests");
    let ws = dir.write("ws.json", &analysis());
    let fixed_poi = dir.write(
        "fixed_poi.json",
        &variant(|w| {
            w["measurements"][0]["config"]["parameters"] = json!([{"name": "mu", "fixed": true}])
        }),
    );
    let pinned_poi = dir.write(
        "pinned_poi.json",
        &variant(|w| {
            w["measurements"][0]["config"]["parameters"] =
                json!([{"name": "mu", "bounds": [[1, 1]]}])
        }),
    );
    let zero_normsys = dir.write(
        "zero_normsys.json",
        &variant(|w| {
            w["channels"][0]["samples"][1]["modifiers"][0]["data"] = json!({"hi": 0.0, "lo": 0.9})
        }),
    );
    let empty_bin = dir.write(
        "empty_bin.json",
        &variant(|w| {
            w["channels"][0]["samples"][0]["data"] = json!([0.0, 10.0]);
            w["channels"][0]["samples"][1]["data"] = json!([0.0, 60.0]);
            w["channels"][0]["samples"][1]["modifiers"] =
                json!([{"name": "bkg_norm", "type": "normsys", "data": {"hi": 1.1, "lo": 0.9}}]);
        }),
    );
    let init_outside = dir.write(
        "init_outside.json",
        &variant(|w| {
            w["measurements"][0]["config"]["parameters"] = json!([{"name": "mu", "inits": [20.0]}])
        }),
    );
    let collision = dir.write(
        "collision.json",
        &variant(|w| {
            // A scalar parameter named like element 0 of the shapesys vector 'bkg_stat'.
            w["channels"][0]["samples"][0]["modifiers"]
                .as_array_mut()
                .unwrap()
                .push(json!({"name": "bkg_stat[0]", "type": "normsys", "data": {"hi": 1.1, "lo": 0.9}}));
        }),
    );
    let ws = ws.to_str().unwrap();
    let s = |p: &PathBuf| p.to_str().unwrap().to_string();
    let cases: Vec<(Vec<String>, &str)> = [
        (
            vec!["hypotest-toys", ws, "--n-toys", "4611686018427387904"],
            "between 1 and",
        ),
        (
            vec!["hypotest-toys", ws, "--n-toys", "1000000000"],
            "between 1 and",
        ),
        (vec!["hypotest-toys", ws, "--n-toys", "0"], "between 1 and"),
        (
            vec!["scan", ws, "--range", "0", "2", "1e18"],
            "COUNT must be a whole number",
        ),
        (
            vec!["scan", ws, "--range", "0", "2", "1e30"],
            "COUNT must be a whole number",
        ),
        (
            vec!["scan", ws, "--range", "0", "2", "2.5"],
            "COUNT must be a whole number",
        ),
        (
            vec!["upper-limit", ws, "--scan", "0", "5", "1e18"],
            "COUNT must be a whole number",
        ),
        (
            vec!["upper-limit", ws, "--scan", "5", "0", "11"],
            "must increase",
        ),
        (
            vec!["upper-limit", ws, "--scan", "-1", "5", "11"],
            "lower bound",
        ),
        (vec!["upper-limit", ws, "--level", "0"], "between 0 and 1"),
        (vec!["upper-limit", ws, "--level", "1"], "between 0 and 1"),
        (vec!["upper-limit", ws, "--level", "nan"], "between 0 and 1"),
        (
            vec!["upper-limit", ws, "--level", "-0.05"],
            "between 0 and 1",
        ),
        (
            vec!["hypotest", ws, "--mu", "nan"],
            "mu = NaN is outside the bounds of 'mu'",
        ),
        (vec!["hypotest", ws, "--mu", "inf"], "outside the bounds"),
        // A huge value in exponent form, not as 309 digits.
        (
            vec!["hypotest", ws, "--mu", "1e308"],
            "mu = 1e308 is outside the bounds of 'mu', [0, 10]",
        ),
        (
            vec!["hypotest", ws, "--mu", "-1"],
            "outside the bounds of 'mu', [0, 10]",
        ),
        (
            vec!["hypotest-toys", ws, "--mu", "-1"],
            "outside the bounds",
        ),
        (
            vec!["fit", ws, "--fix", "bkg_norm=7"],
            "'bkg_norm' is fixed at 7, outside its bounds [-5, 5]",
        ),
        (
            vec!["fit", ws, "--tolerance", "inf"],
            "tolerance inf: it must be",
        ),
        (
            vec!["fit", ws, "--tolerance", "-1"],
            "tolerance -1: it must be",
        ),
        (vec!["fit", ws, "--threads", "100000"], "--threads 100000"),
        (vec!["fit", ws, "--threads", "0"], "--threads 0"),
        (vec!["fit", ws, "--bound", "mu=nan,2"], "not a number"),
        (
            vec!["fit", ws, "--semantics", "root"],
            "semantics 'root' apply to HistFactory XML; this model is pyhf",
        ),
        (
            vec!["fit", ws, "--semantics", "roofit"],
            "semantics 'roofit': HistFactory XML is read with 'root'",
        ),
        (
            vec!["inspect", ws, "--measurement", "nope"],
            "no measurement named 'nope' (the workspace has: meas)",
        ),
        (
            vec![
                "scan",
                ws,
                "--parameter",
                "bkg_norm",
                "--range",
                "-9",
                "0",
                "3",
            ],
            "outside the bounds of 'bkg_norm'",
        ),
        (
            vec!["fit", &s(&init_outside)],
            "'mu' starts at 20, outside its bounds [0, 10]",
        ),
        (
            vec!["fit", &s(&zero_normsys)],
            "hi = 0 and lo = 0.9 must both be positive",
        ),
        (
            vec!["hypotest", &s(&empty_bin)],
            "channel 'SR' bin 0 expects 0 events and observes 52",
        ),
        (
            vec!["significance", &s(&empty_bin)],
            "undefined where the fit starts",
        ),
        (
            vec!["gof", &s(&empty_bin)],
            "undefined where the fit starts",
        ),
        (
            vec!["scan", &s(&empty_bin)],
            "undefined where the fit starts",
        ),
        (
            vec!["ranking", &s(&empty_bin)],
            "undefined where the fit starts",
        ),
        (
            vec!["upper-limit", &s(&empty_bin)],
            "undefined where the fit starts",
        ),
        (
            vec!["hypotest-toys", &s(&empty_bin), "--n-toys", "10"],
            "undefined where the fit starts",
        ),
        (
            vec!["fit", &s(&collision), "--fix", "bkg_stat[0]=1"],
            "'bkg_stat[0]' names two parameters",
        ),
        (
            vec!["fit", &s(&collision), "--minos", "all"],
            "names two parameters",
        ),
        (
            vec!["scan", &s(&collision), "--parameter", "bkg_stat[0]"],
            "names two parameters",
        ),
    ]
    .into_iter()
    .map(|(args, fragment)| (args.into_iter().map(String::from).collect(), fragment))
    .chain(
        ["hypotest", "upper-limit", "significance", "scan", "ranking"]
            .into_iter()
            .flat_map(|verb| {
                [
                    (vec![verb.to_string(), s(&fixed_poi)], "'mu' is fixed"),
                    (vec![verb.to_string(), s(&pinned_poi)], "[1, 1]"),
                ]
            }),
    )
    .collect();
    for (args, fragment) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, stdout, stderr) = run(&args);
        assert_eq!(code, Some(2), "{args:?} should fail cleanly: {stderr}");
        assert!(stdout.is_empty(), "{args:?} printed a result: {stdout}");
        assert!(
            stderr.contains(fragment),
            "{args:?}: message lacks '{fragment}':\n{stderr}"
        );
    }
}

#[test]
fn malformed_documents_get_messages_that_say_what_is_wrong() {
    let dir = Scratch::new("malformed");
    let text = serde_json::to_string(&analysis()).unwrap();
    let write_text = |name: &str, body: &str| {
        let path = dir.0.join(name);
        std::fs::write(&path, body).unwrap();
        path
    };
    let cases = [
        (
            write_text("bigint.json", &text.replacen("[52,63]", "[52,100000000000000000000000]", 1)),
            "the integer 100000000000000000000000 at line 1",
        ),
        (write_text("array.json", "[1, 2]"), "a workspace is a JSON object"),
        (
            write_text("surrogate.json", &text.replacen("\"SR\"", "\"S\\ud800R\"", 2)),
            "lone UTF-16 surrogate",
        ),
        (
            dir.write("bool.json", &variant(|w| w["observations"][0]["data"] = json!([true, 63]))),
            "observations",
        ),
        (
            dir.write(
                "lumi_sigma_zero.json",
                &variant(|w| {
                    w["channels"][0]["samples"][0]["modifiers"]
                        .as_array_mut()
                        .unwrap()
                        .push(json!({"name": "lumi", "type": "lumi", "data": null}));
                    w["measurements"][0]["config"]["parameters"] =
                        json!([{"name": "lumi", "auxdata": [1.0], "sigmas": [0.0], "bounds": [[0.5, 1.5]], "inits": [1.0]}]);
                }),
            ),
            "sigmas[0] = 0 must be positive",
        ),
        (
            dir.write(
                "lengths.json",
                &variant(|w| w["channels"][0]["samples"][1]["data"] = json!([50.0, 60.0, 70.0])),
            ),
            "data has 3 bins but sample 'signal' of the same channel has 2",
        ),
    ];
    for (path, fragment) in cases {
        let (code, stdout, stderr) = run(&["fit", path.to_str().unwrap()]);
        assert_eq!(code, Some(2), "{}: {stderr}", path.display());
        assert!(stdout.is_empty());
        assert!(
            stderr.contains(fragment),
            "{}: message lacks '{fragment}':\n{stderr}",
            path.display()
        );
    }
}

/// Where p0 underflows (Z ≳ 37.5) Z is still √q0, read in √q space, not infinity.
#[test]
fn a_significance_beyond_the_smallest_p_value_is_still_a_number() {
    let dir = Scratch::new("infinite-z");
    let ws = dir.write(
        "overwhelming.json",
        &variant(|w| {
            w["channels"][0]["samples"][0]["data"] = json!([1000.0, 1000.0]);
            w["channels"][0]["samples"][1]["data"] = json!([1.0, 1.0]);
            w["channels"][0]["samples"][1]["modifiers"] = json!([]);
            w["observations"][0]["data"] = json!([1000, 1000]);
        }),
    );
    let (code, out, err) = run(&["significance", ws.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["p0_obs"], 0.0);
    let z = v["Z_obs"]
        .as_f64()
        .unwrap_or_else(|| panic!("Z_obs {}", v["Z_obs"]));
    assert!(z.is_finite() && z > 37.5, "{z}");
}

#[test]
fn legal_inputs_that_used_to_fail_now_work() {
    let dir = Scratch::new("legal-inputs");
    let ws = dir.write("ws.json", &analysis());
    let ws_s = ws.to_str().unwrap();
    // Negative numbers for multi-value and single-value options.
    let (code, out, err) = run(&[
        "scan",
        ws_s,
        "--parameter",
        "bkg_norm",
        "--range",
        "-3",
        "3",
        "7",
    ]);
    assert_eq!(code, Some(0), "{err}");
    let scan: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(scan["values"][0], -3.0);
    let (code, _, err) = run(&["fit", ws_s, "--asimov", "-0.0"]);
    assert_eq!(code, Some(0), "{err}");
    // A UTF-8 byte-order mark, as some editors write.
    let bom = dir.0.join("bom.json");
    let mut bytes = b"\xEF\xBB\xBF".to_vec();
    bytes.extend(std::fs::read(&ws).unwrap());
    std::fs::write(&bom, bytes).unwrap();
    let (code, out, err) = run(&["digest", bom.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.starts_with("sha256:"));
    // '-' reads the workspace from standard input.
    let piped = bin()
        .args(["digest", "-"])
        .stdin(std::fs::File::open(&ws).unwrap())
        .output()
        .unwrap();
    assert!(piped.status.success());
    assert_eq!(String::from_utf8_lossy(&piped.stdout), out);
    // An observation of a channel the workspace lacks is ignored (pyhf does the same).
    let orphan = dir.write(
        "orphan.json",
        &variant(|w| {
            w["observations"]
                .as_array_mut()
                .unwrap()
                .push(json!({"name": "VR_removed", "data": [1, 2, 3]}))
        }),
    );
    let (code, _, err) = run(&["fit", orphan.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{err}");
    let (code, _, err) = run(&["inspect", orphan.to_str().unwrap()]);
    assert_eq!(code, Some(0));
    assert!(err.contains("VR_removed"), "{err}");
}

#[test]
fn fits_say_when_every_parameter_ends_on_a_bound_and_unbounded_ranges_are_not_bounds() {
    let dir = Scratch::new("bounds");
    // Data a million times the expectation: every parameter runs into its upper bound.
    let absurd = dir.write(
        "absurd.json",
        &variant(|w| w["observations"][0]["data"] = json!([52_000_000, 63_000_000])),
    );
    let (code, out, err) = run(&["fit", absurd.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{err}");
    let fit: Value = serde_json::from_str(&out).unwrap();
    assert!(
        fit["warning"]
            .as_str()
            .unwrap()
            .contains("every free parameter ended at a bound")
    );
    let (_, out, _) = run(&["hypotest", absurd.to_str().unwrap(), "--mu", "1"]);
    let hypo: Value = serde_json::from_str(&out).unwrap();
    assert!(
        hypo["fit_warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w.as_str().unwrap().contains("every free parameter"))
    );
    // An interior μ̂ with an infinite upper bound is not "at a bound".
    let ws = dir.write("ws.json", &analysis());
    let (code, out, err) = run(&["fit", ws.to_str().unwrap(), "--bound", "mu=0,inf"]);
    assert_eq!(code, Some(0), "{err}");
    let fit: Value = serde_json::from_str(&out).unwrap();
    assert!(fit["bestfit"][0].as_f64().unwrap() > 0.1);
    assert_eq!(fit["at_bound"][0], false);
}

#[test]
fn inspect_takes_very_long_names() {
    let dir = Scratch::new("long-names");
    let long = "n".repeat(70_000);
    let ws = dir.write(
        "long.json",
        &variant(|w| w["channels"][0]["samples"][1]["modifiers"][0]["name"] = json!(long)),
    );
    for extra in [None, Some("--json")] {
        let mut args = vec!["inspect", ws.to_str().unwrap()];
        args.extend(extra);
        let (code, out, err) = run(&args);
        assert_eq!(code, Some(0), "{err}");
        assert!(out.contains(&long));
    }
}

#[test]
fn q0_hypotest_reports_p0_as_pyhf_does() {
    let dir = Scratch::new("q0");
    let ws = dir.write("ws.json", &analysis());
    let (code, out, err) = run(&["hypotest", ws.to_str().unwrap(), "--test-stat", "q0"]);
    assert_eq!(code, Some(0), "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert!(
        v.get("CLs_obs").is_none(),
        "a CLs ratio has no meaning for q0"
    );
    assert_eq!(v["p0_obs"], v["CLsb"]);
    assert_eq!(v["p0_exp"].as_array().unwrap().len(), 5);
    let significance: Value =
        serde_json::from_str(&run(&["significance", ws.to_str().unwrap()]).1).unwrap();
    assert_eq!(v["p0_obs"], significance["p0_obs"]);
}

#[test]
fn endless_input_full_disk_and_closed_pipes_end_cleanly() {
    let dir = Scratch::new("io");
    let ws = dir.write("ws.json", &analysis());
    let ws_s = ws.to_str().unwrap();
    if Path::new("/dev/zero").exists() {
        let out = bin()
            .args(["eval", "/dev/zero"])
            .env("NEXTSTAT_MAX_INPUT_MB", "1")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&out.stderr).contains("input limit of 1 MB"));
    }
    if Path::new("/dev/full").exists() {
        let out = bin()
            .args(["eval", ws_s])
            .stdout(
                std::fs::OpenOptions::new()
                    .write(true)
                    .open("/dev/full")
                    .unwrap(),
            )
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&out.stderr).contains("standard output"));
    }
    // -o into a folder that does not exist: an error, and no file left behind.
    let target = dir.0.join("missing").join("out.json");
    let (code, _, err) = run(&["fit", ws_s, "-o", target.to_str().unwrap()]);
    assert_eq!(code, Some(2), "{err}");
    assert!(!target.exists());
    // -o writes the whole result with a trailing newline, atomically.
    let target = dir.0.join("fit.json");
    let (code, _, _) = run(&["fit", ws_s, "-o", target.to_str().unwrap()]);
    assert_eq!(code, Some(0));
    let text = std::fs::read_to_string(&target).unwrap();
    assert!(text.ends_with("}\n"));
    assert_eq!(
        std::fs::read_dir(&dir.0).unwrap().count(),
        2,
        "no temporary files remain"
    );
    // A reader that stops early (`| head -c 1`): no panic, no message.
    let big = dir.write(
        "big.json",
        &variant(|w| {
            let n = 20_000;
            w["channels"][0]["samples"][0]["data"] = json!(vec![1.0; n]);
            w["channels"][0]["samples"][1]["data"] = json!(vec![10.0; n]);
            w["channels"][0]["samples"][1]["modifiers"] =
                json!([{"name": "bkg_norm", "type": "normsys", "data": {"hi": 1.1, "lo": 0.9}}]);
            w["observations"][0]["data"] = json!(vec![11; n]);
        }),
    );
    let mut child = bin()
        .args(["eval", big.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 1];
    std::io::Read::read_exact(child.stdout.as_mut().unwrap(), &mut first).unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Peak resident memory (bytes) of the largest child process waited for so far.
fn children_peak_rss() -> u64 {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes a complete rusage into the pointer it is given, which is valid and
    // properly aligned for the struct.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, usage.as_mut_ptr()) };
    assert_eq!(rc, 0);
    // SAFETY: getrusage returned 0, so it initialised the struct.
    let usage = unsafe { usage.assume_init() };
    usage.ru_maxrss as u64 * 1024
}

#[test]
fn toy_memory_does_not_grow_with_the_number_of_toys() {
    let dir = Scratch::new("toy-memory");
    let ws = dir.write(
        "tiny.json",
        &json!({
            "channels": [{"name": "SR", "samples": [
                {"name": "signal", "data": [5.0], "modifiers": [{"name": "mu", "type": "normfactor", "data": null}]},
                {"name": "background", "data": [50.0], "modifiers": [
                    {"name": "bkg_norm", "type": "normsys", "data": {"hi": 1.1, "lo": 0.9}}]}]}],
            "observations": [{"name": "SR", "data": [52]}],
            "measurements": [{"name": "meas", "config": {"poi": "mu", "parameters": []}}],
            "version": "1.0.0"
        }),
    );
    let run_toys = |n: u64| {
        let out = bin()
            .args([
                "hypotest-toys",
                ws.to_str().unwrap(),
                "--n-toys",
                &n.to_string(),
                "--threads",
                "2",
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        children_peak_rss()
    };
    let small = run_toys(10_000);
    let large = run_toys(100_000);
    // What the result itself holds: two ensembles of f64 statistics and their sorted copies.
    let stored = 2 * 2 * 8 * (100_000 - 10_000);
    assert!(
        large <= small + stored + (4 << 20),
        "peak RSS grew from {small} to {large} bytes for ten times the toys (allowed: {stored} + 4 MiB)"
    );
}
