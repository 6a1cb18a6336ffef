//! Hardening round 3, one test per class of input that crashed, hung, answered wrongly or blamed
//! the wrong thing (issue 22): each failed before its fix.

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;

mod common;
use common::{Scratch, run, run_with};

/// One channel: signal with the POI `mu`, background with a shapesys.
fn single_bin(signal: f64, background: f64, uncertainty: f64, observed: f64) -> Value {
    json!({
        "channels": [{"name": "SR", "samples": [
            {"name": "signal", "data": [signal], "modifiers": [
                {"name": "mu", "type": "normfactor", "data": null}]},
            {"name": "background", "data": [background], "modifiers": [
                {"name": "bkg_stat", "type": "shapesys", "data": [uncertainty]}]}]}],
        "observations": [{"name": "SR", "data": [observed]}],
        "measurements": [{"name": "m", "config": {"poi": "mu", "parameters": []}}],
        "version": "1.0.0"
    })
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn json_of(stdout: &str) -> Value {
    serde_json::from_str(stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

#[test]
fn counts_at_the_top_of_the_f64_range_are_refused_not_hung() {
    let dir = Scratch::new("h3-huge");
    let mut ws = single_bin(1e307, 1e308, 1e306, 1e308);
    ws["channels"][0]["samples"][1]["modifiers"] = json!([]);
    let file = dir.write("huge.json", &ws);
    for verb in [
        "eval",
        "fit",
        "hypotest",
        "upper-limit",
        "scan",
        "significance",
        "ranking",
    ] {
        let (code, _, err) = run(&[verb, path(&file)]);
        assert_eq!(code, Some(2), "{verb}: {err}");
        assert!(
            err.contains("main data bin 0") && err.contains("at most 1e300"),
            "{verb}: {err}"
        );
    }
}

#[test]
fn upper_limits_outside_the_range_are_said_to_be_outside() {
    let dir = Scratch::new("h3-limits");
    let mut ws = single_bin(8.0, 50.0, 5.0, 52.0);
    let open = dir.write("open.json", &ws);
    ws["measurements"][0]["config"]["parameters"] = json!([{"name": "mu", "bounds": [[0, 1]]}]);
    let bounded = dir.write("bounded.json", &ws);

    // The limit (≈ 2.4) lies above the POI's upper bound 1: no number, a side and a warning.
    let (code, out, err) = run(&["upper-limit", path(&bounded)]);
    assert_eq!(code, Some(0), "{err}");
    let r = json_of(&out);
    assert!(r["obs"].is_null(), "{r}");
    assert_eq!(r["obs_outside"], json!({"above": 1.0}));
    assert!(err.contains("lies above μ = 1"), "{err}");
    // And a hypotest there is refused, as before: the two agree.
    let (code, _, err) = run(&["hypotest", path(&bounded), "--mu", "2"]);
    assert_eq!(code, Some(2), "{err}");

    // A scan whose grid ends below the crossing, or starts above it.
    let (_, out, _) = run(&["upper-limit", path(&open), "--scan", "0", "1", "5"]);
    assert_eq!(json_of(&out)["obs_outside"], json!({"above": 1.0}));
    let (_, out, _) = run(&["upper-limit", path(&open), "--scan", "6", "10", "5"]);
    let r = json_of(&out);
    assert!(r["obs"].is_null() && r["exp"][2].is_null(), "{r}");
    assert_eq!(r["obs_outside"], json!({"below": 6.0}));
    // A grid that brackets the crossing gives the number.
    let (_, out, _) = run(&["upper-limit", path(&open), "--scan", "0", "5", "11"]);
    let obs = json_of(&out)["obs"].as_f64().unwrap();
    assert!((2.2..2.7).contains(&obs), "{obs}");
    // A scan past the POI's bound is refused, as hypotest refuses μ there.
    let (code, _, err) = run(&["upper-limit", path(&bounded), "--scan", "0", "3", "4"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("outside the bounds of 'mu'"), "{err}");
}

#[test]
fn toy_fits_reach_the_minimum_where_a_shapesys_tau_is_huge() {
    let dir = Scratch::new("h3-tau");
    // τ = (nominal/σ)² = 10¹²: the γ's gradient has rounding noise far above 1e-6.
    let file = dir.write("tau.json", &single_bin(10.0, 1e6, 1.0, 1e6 + 3.0));
    let (code, out, err) = run(&["hypotest-toys", path(&file), "--n-toys", "100", "--mu", "1"]);
    assert_eq!(code, Some(0), "{err}");
    let r = json_of(&out);
    assert_eq!(r["n_failed"], 0, "{r}");
    assert!(r["warning"].is_null(), "{r}");
    let (_, out, _) = run(&["fit", path(&file)]);
    assert_eq!(json_of(&out)["converged"], true);
}

#[test]
fn two_sided_test_statistics_are_refused_as_pyhf_refuses_them() {
    let dir = Scratch::new("h3-tstat");
    let file = dir.write("ws.json", &single_bin(8.0, 50.0, 5.0, 52.0));
    for stat in ["t", "ttilde"] {
        for verb in ["hypotest", "hypotest-toys"] {
            let (code, _, err) = run(&[verb, path(&file), "--test-stat", stat]);
            assert_eq!(code, Some(2), "{verb} {stat}");
            assert!(err.contains("two-sided") && err.contains("qtilde"), "{err}");
        }
    }
}

#[test]
fn a_signal_too_small_to_matter_gives_cls_one_as_pyhf_does() {
    let dir = Scratch::new("h3-tiny");
    let file = dir.write("ws.json", &single_bin(1e-6, 50.0, 5.0, 50.0));
    let (code, out, err) = run(&["hypotest", path(&file)]);
    assert_eq!(code, Some(0), "{err}");
    let r = json_of(&out);
    let cls = r["CLs_obs"].as_f64().unwrap_or_else(|| panic!("{r}"));
    assert!((cls - 1.0).abs() < 1e-6, "{r}");
    for v in r["CLs_exp"].as_array().unwrap() {
        assert!((v.as_f64().unwrap() - 1.0).abs() < 1e-6, "{r}");
    }
}

#[test]
fn outputs_never_replace_inputs_and_follow_links() {
    let dir = Scratch::new("h3-outputs");
    let ws = dir.write("ws.json", &single_bin(8.0, 50.0, 5.0, 52.0));
    let before = std::fs::read(&ws).unwrap();
    let (code, _, err) = run(&["fit", path(&ws), "-o", path(&ws)]);
    assert_eq!(code, Some(2));
    assert!(err.contains("an input of this command"), "{err}");
    assert_eq!(std::fs::read(&ws).unwrap(), before);
    // Through a symbolic link to the input: refused too.
    let link = dir.0.join("link.json");
    std::os::unix::fs::symlink(&ws, &link).unwrap();
    let (code, _, _) = run(&["fit", path(&ws), "-o", path(&link)]);
    assert_eq!(code, Some(2));
    // A link to another file: its target is written, the link stays a link.
    let target = dir.0.join("result.json");
    std::fs::write(&target, "old").unwrap();
    let out_link = dir.0.join("out.json");
    std::os::unix::fs::symlink(&target, &out_link).unwrap();
    let (code, _, err) = run(&["fit", path(&ws), "-o", path(&out_link)]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        std::fs::symlink_metadata(&out_link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert!(
        std::fs::read_to_string(&target)
            .unwrap()
            .contains("bestfit")
    );
    // A dangling link: the file it names is written.
    let missing = dir.0.join("not-yet.json");
    let dangling = dir.0.join("dangling.json");
    std::os::unix::fs::symlink(&missing, &dangling).unwrap();
    let (code, _, err) = run(&["fit", path(&ws), "-o", path(&dangling)]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        std::fs::read_to_string(&missing)
            .unwrap()
            .contains("bestfit")
    );
    // A folder is named as one.
    let (code, _, err) = run(&["fit", path(&ws), "-o", path(&dir.0)]);
    assert_eq!(code, Some(2));
    assert!(err.contains("that is a folder"), "{err}");
}

#[test]
fn messages_name_the_real_cause() {
    let dir = Scratch::new("h3-messages");
    let negative = dir.write("negative.json", &single_bin(8.0, 50.0, 5.0, -3.0));
    let (code, _, err) = run(&["fit", path(&negative)]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("main data bin 0") && err.contains("-3"),
        "{err}"
    );
    assert!(!err.contains("constraint"), "{err}");
    // UTF-16 without a byte-order mark.
    let text = serde_json::to_string(&single_bin(8.0, 50.0, 5.0, 52.0)).unwrap();
    let utf16: Vec<u8> = text.encode_utf16().flat_map(|u| u.to_le_bytes()).collect();
    let file = dir.0.join("utf16.json");
    std::fs::write(&file, utf16).unwrap();
    let (code, _, err) = run(&["fit", path(&file)]);
    assert_eq!(code, Some(2));
    assert!(err.contains("UTF-16"), "{err}");
}

#[test]
fn a_patch_test_compares_numbers_by_value() {
    let dir = Scratch::new("h3-patch");
    let ws = dir.write("ws.json", &single_bin(8.0, 50.0, 5.0, 52.0));
    let patch = dir.write(
        "p.json",
        &json!([
            {"op": "test", "path": "/observations/0/data", "value": [52]},
            {"op": "replace", "path": "/observations/0/data", "value": [60.0]}
        ]),
    );
    let (code, out, err) = run(&["fit", path(&ws), "-p", path(&patch)]);
    assert_eq!(code, Some(0), "{err}");
    assert!(json_of(&out)["converged"].as_bool().unwrap());
}

/// A `libcuda.so.1` that is not a driver (a stub exporting one entry point) on the library
/// path: no panic; CUDA is reported unusable, by name, and the CPU still works.
#[test]
fn a_stub_cuda_driver_is_reported_not_a_crash() {
    let dir = Scratch::new("h3-stub");
    let source = dir.0.join("stub.c");
    std::fs::write(
        &source,
        "int cuDriverGetVersion(int *v) { *v = 12000; return 0; }\n",
    )
    .unwrap();
    for name in ["libcuda.so", "libcuda.so.1"] {
        let status = Command::new("cc")
            .args(["-shared", "-fPIC", "-o"])
            .arg(dir.0.join(name))
            .arg(&source)
            .status()
            .expect("a C compiler (cc) builds the stub driver");
        assert!(status.success());
    }
    let env = [("LD_LIBRARY_PATH", path(&dir.0))];
    let (code, out, err) = run_with(&["devices", "--json"], &env);
    assert_eq!(code, Some(0), "{err}");
    let devices = json_of(&out);
    let cuda = devices["cuda_unavailable"].to_string();
    assert!(
        cuda.contains("lacks cuInit") && cuda.contains("stub"),
        "{devices}"
    );
    let ws = dir.write("ws.json", &single_bin(8.0, 50.0, 5.0, 52.0));
    let (code, _, err) = run_with(&["fit", path(&ws), "--gpu", "cuda"], &env);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("lacks cuInit"), "{err}");
    let (code, _, err) = run_with(
        &[
            "hypotest-toys",
            path(&ws),
            "--n-toys",
            "50",
            "--gpu",
            "auto",
        ],
        &env,
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains("--gpu auto runs on the CPU") && err.contains("lacks cuInit"),
        "{err}"
    );
}

/// `../shared/likelihoods` beside the repository (override with `NEXTSTAT_LIKELIHOODS`).
fn published_likelihoods() -> Vec<PathBuf> {
    let dir = std::env::var("NEXTSTAT_LIKELIHOODS").map_or_else(
        |_| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/likelihoods"),
        PathBuf::from,
    );
    let mut found: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| {
            panic!(
                "{}: {e} (the published likelihoods live in ../shared)",
                dir.display()
            )
        })
        .filter_map(|e| e.ok().map(|e| e.path().join("workspace.json")))
        .filter(|p| p.is_file())
        .collect();
    found.sort();
    assert!(!found.is_empty(), "no likelihoods in {}", dir.display());
    found
}

/// Every verb answers on every published likelihood (where pyhf answers, so must we): each exits
/// 0 with JSON, and the toy result has no failed fit. The likelihoods run side by side.
#[test]
fn every_verb_works_on_every_published_likelihood() {
    let likelihoods = published_likelihoods();
    std::thread::scope(|scope| {
        for ws in &likelihoods {
            scope.spawn(move || {
                let ws = path(ws);
                for args in [
                    vec!["eval", ws],
                    vec!["fit", ws],
                    vec!["hypotest", ws],
                    vec!["hypotest", ws, "--test-stat", "q0", "--mu", "0"],
                    vec!["significance", ws],
                    vec!["upper-limit", ws],
                    vec!["scan", ws, "--range", "0", "2", "5"],
                    vec!["gof", ws],
                    vec!["ranking", ws],
                    vec!["hypotest-toys", ws, "--n-toys", "20"],
                ] {
                    let (code, out, err) = run(&args);
                    assert_eq!(code, Some(0), "{args:?}: {err}");
                    let r = json_of(&out);
                    if args[0] == "hypotest-toys" {
                        assert_eq!(r["n_failed"], 0, "{args:?}: {r}");
                    }
                }
            });
        }
    });
}

#[test]
fn silent_choices_are_said() {
    let dir = Scratch::new("h3-silent");
    let ws = dir.write("ws.json", &single_bin(8.0, 50.0, 5.0, 52.0));
    // One type named twice.
    let (code, _, err) = run(&[
        "fit",
        path(&ws),
        "--interp-codes",
        "normsys=code1,normsys=code4",
    ]);
    assert_eq!(code, Some(2));
    assert!(err.contains("names 'normsys' twice"), "{err}");
    // An unsafe join warns as pyhf does; its inputs are inputs.
    let mut other = single_bin(8.0, 50.0, 5.0, 52.0);
    other["channels"][0]["name"] = json!("CR");
    other["observations"][0]["name"] = json!("CR");
    let other = dir.write("other.json", &other);
    let out = dir.0.join("combined.json");
    let (code, _, err) = run(&[
        "combine",
        path(&ws),
        path(&other),
        "--join",
        "left outer",
        "-o",
        path(&out),
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("unsafe join operation"), "{err}");
    let (code, _, err) = run(&[
        "combine",
        path(&ws),
        path(&other),
        "--join",
        "outer",
        "-o",
        path(&ws),
    ]);
    assert_eq!(code, Some(2));
    assert!(err.contains("an input of this command"), "{err}");
    // The fit's matrices in text: where they are said.
    let (_, out, _) = run(&["fit", path(&ws), "--covariance", "--format", "text"]);
    assert!(out.contains("matrices are in the JSON output"), "{out}");
    // A POI whose range excludes the background-only hypothesis of the Asimov data.
    let mut lumi_poi = single_bin(8.0, 50.0, 5.0, 52.0);
    lumi_poi["channels"][0]["samples"][0]["modifiers"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "lumi", "type": "lumi", "data": null}));
    lumi_poi["measurements"][0]["config"] = json!({"poi": "lumi", "parameters": [
        {"name": "lumi", "auxdata": [1.0], "sigmas": [0.02], "bounds": [[0.5, 1.5]], "inits": [1.0]}]});
    let lumi_poi = dir.write("lumi_poi.json", &lumi_poi);
    let (code, _, err) = run(&["hypotest", path(&lumi_poi)]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("background-only hypothesis behind the Asimov data"),
        "{err}"
    );
}

/// Counts beyond f32's range on the f32 backend (lavapipe here, `scripts/test.sh` installs it):
/// f32 is named, not the model.
#[test]
fn f32_overflow_is_named_as_such() {
    let dir = Scratch::new("h3-f32");
    let mut ws = single_bin(1e37, 1e39, 1e37, 1.01e39);
    ws["channels"][0]["samples"][1]["modifiers"] = json!([]);
    let file = dir.write("f32.json", &ws);
    let (code, _, err) = run(&["fit", path(&file), "--gpu", "vulkan"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("overflows f32") && err.contains("on the cpu or cuda device"),
        "{err}"
    );
    let (code, _, err) = run(&["fit", path(&file)]);
    assert_eq!(code, Some(0), "{err}");
}
