//! The binary's contract: exit 0 on success, 2 on bad input with the message on stderr,
//! positional and `-i` workspaces alike.

use std::path::PathBuf;
use std::process::Command;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_nextstat"))
}

fn shared(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/pyhf-ref/workspaces")
        .join(file)
}

#[test]
fn eval_positional_and_input_flag_agree() {
    let ws = shared("pyhf_docs_2bin_1channel.json");
    let a = bin().arg("eval").arg(&ws).output().unwrap();
    let b = bin().arg("eval").arg("-i").arg(&ws).output().unwrap();
    assert!(a.status.success() && b.status.success());
    assert_eq!(a.stdout, b.stdout);
    let out: serde_json::Value = serde_json::from_slice(&a.stdout).unwrap();
    let twice_nll = out["twice_nll"].as_f64().unwrap();
    assert!((twice_nll - 25.167266297778653).abs() < 1e-9, "{twice_nll}");
}

#[test]
fn bad_input_exits_2_with_a_message() {
    let dir = std::env::temp_dir().join(format!("nextstat-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let broken = dir.join("broken.json");
    std::fs::write(&broken, "{\"channels\": [").unwrap();
    let pars = dir.join("pars.json");
    std::fs::write(&pars, "{\"not_a_parameter\": 1.0}").unwrap();
    let cases: Vec<(Vec<std::ffi::OsString>, &str)> = vec![
        (vec!["eval".into(), broken.clone().into()], "broken.json"),
        (
            vec!["eval".into(), dir.join("missing.json").into()],
            "missing.json",
        ),
        (
            vec![
                "eval".into(),
                shared("pyhf_docs_2bin_1channel.json").into(),
                "--pars".into(),
                pars.clone().into(),
            ],
            "not_a_parameter",
        ),
        (
            vec![
                "eval".into(),
                shared("pyhf_docs_2bin_1channel.json").into(),
                "--interp-codes".into(),
                "normsys=code0".into(),
            ],
            "code0",
        ),
    ];
    for (args, needle) in cases {
        let out = bin().args(&args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains(needle),
            "{args:?}: stderr {stderr:?} should mention {needle:?}"
        );
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn eval_reports_non_positive_expectation_without_crashing() {
    let dir = std::env::temp_dir().join(format!("nextstat-cli-neg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pars = dir.join("pars.json");
    // mu = 0 and a shapesys gamma of 0 make the first bin's expectation zero while n > 0.
    std::fs::write(&pars, "{\"mu\": 0.0, \"uncorr_bkguncrt\": [0.0, 1.0]}").unwrap();
    let out = bin()
        .arg("eval")
        .arg(shared("pyhf_docs_2bin_1channel.json"))
        .arg("--pars")
        .arg(&pars)
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["twice_nll"], "inf");
    let warning = v["warning"].as_str().unwrap();
    assert!(
        warning.contains("undefined here") && warning.contains("bin 0 expects 0 events"),
        "{warning}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

fn json_of(args: &[&str]) -> serde_json::Value {
    let out = bin().args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn inference_verbs_print_the_documented_keys() {
    let ws = shared("pyhf_docs_2bin_1channel.json");
    let ws = ws.to_str().unwrap();
    let cases: Vec<(Vec<&str>, Vec<&str>)> = vec![
        (
            vec!["fit", ws, "--covariance"],
            vec![
                "parameter_names",
                "bestfit",
                "uncertainties",
                "twice_nll",
                "nll",
                "converged",
                "termination_reason",
                "correlation",
            ],
        ),
        (
            vec!["hypotest", ws],
            vec!["CLs_obs", "CLs_exp", "CLsb", "CLb"],
        ),
        (vec!["upper-limit", ws], vec!["obs", "exp"]),
        (
            vec!["scan", ws, "--range", "0", "2", "5"],
            vec!["parameter", "values", "twice_nll", "delta_twice_nll"],
        ),
        (
            vec!["significance", ws],
            vec!["p0_obs", "Z_obs", "p0_exp", "Z_exp"],
        ),
        (vec!["ranking", ws], vec!["entries"]),
        (
            vec!["gof", ws],
            vec!["minus_two_log_lambda", "ndof", "p_value"],
        ),
        (
            vec!["hypotest-toys", ws, "--n-toys", "50", "--seed", "4"],
            vec![
                "CLs_obs", "CLs_exp", "CLsb", "CLb", "n_toys", "n_failed", "seed",
            ],
        ),
    ];
    for (args, keys) in cases {
        let v = json_of(&args);
        for key in keys {
            assert!(
                v.get(key).is_some_and(|x| !x.is_null()),
                "{args:?}: missing '{key}' in {v}"
            );
        }
    }
    let exp = json_of(&["hypotest", ws])["CLs_exp"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(exp, 5);
    let entry = &json_of(&["ranking", ws])["entries"][0];
    for key in [
        "name",
        "pull",
        "constraint",
        "impact_prefit_up",
        "impact_prefit_down",
        "impact_postfit_up",
        "impact_postfit_down",
    ] {
        assert!(entry.get(key).is_some(), "ranking entry lacks '{key}'");
    }
    // The same seed gives the same toys whatever the thread count.
    let a = json_of(&[
        "hypotest-toys",
        ws,
        "--n-toys",
        "50",
        "--seed",
        "4",
        "--threads",
        "1",
    ]);
    let b = json_of(&[
        "hypotest-toys",
        ws,
        "--n-toys",
        "50",
        "--seed",
        "4",
        "--threads",
        "2",
    ]);
    assert_eq!(a["CLs_obs"], b["CLs_obs"]);
    assert_eq!(a["CLs_exp"], b["CLs_exp"]);
}

#[test]
fn a_fit_option_naming_no_parameter_is_bad_input() {
    let ws = shared("pyhf_docs_2bin_1channel.json");
    let out = bin()
        .args(["fit", ws.to_str().unwrap(), "--fix", "nope=1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("'nope'"));
}

#[test]
fn version_names_the_build() {
    let short = bin().arg("-V").output().unwrap();
    assert!(short.status.success());
    let short = String::from_utf8(short.stdout).unwrap();
    let version = env!("CARGO_PKG_VERSION");
    assert!(
        short.starts_with(&format!("nextstat {version} (")) && short.lines().count() == 1,
        "{short}"
    );
    // `--version` and `version --json` describe the same build as `-V`.
    let long = bin().arg("--version").output().unwrap();
    let long = String::from_utf8(long.stdout).unwrap();
    let info = json_of(&["version", "--json"]);
    assert_eq!(info["version"], version);
    let commit = info["git_commit"].as_str().unwrap();
    let features: Vec<&str> = info["features"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f.as_str())
        .collect();
    assert!(features.contains(&"cuda"), "{features:?}");
    assert!(
        short.contains(&format!("({commit})")),
        "{short} vs {commit}"
    );
    let expected_lines = [
        format!("commit: {commit}"),
        format!("features: {}", features.join(", ")),
        format!("cpu simd: {}", info["cpu_simd"].as_str().unwrap()),
    ];
    for line in expected_lines {
        assert!(
            long.lines().any(|l| l == line),
            "{line:?} missing from\n{long}"
        );
    }
    // scripts/test.sh names the commit it builds.
    if let Ok(built_from) = std::env::var("NEXTSTAT_BUILT_FROM") {
        assert_eq!(commit, built_from);
    }
    // Where a build embeds kernels (release builds: scripts/prebuild_kernels.sh), it says which.
    let archs = info["cuda_archs"].as_array().unwrap();
    if std::env::var_os("NEXTSTAT_PREBUILT_KERNELS").is_some() {
        assert_eq!(archs.len(), 4, "{archs:?}");
    }
}
