//! The layering rules of docs/ARCHITECTURE.md that the compiler does not check: engine crates
//! read no environment variables (front doors install `ns_core::settings`), inference
//! algorithms name no model type, and engine messages name no CLI flag.

use std::path::{Path, PathBuf};

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The non-test source of an engine crate's files: (path, text before any `#[cfg(test)]`).
fn engine(krate: &str) -> Vec<(PathBuf, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(krate)
        .join("src");
    let mut files = Vec::new();
    sources(&root, &mut files);
    files
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            let code = text.split("#[cfg(test)]").next().unwrap_or("").to_string();
            (p, code)
        })
        .collect()
}

const ENGINE: [&str; 7] = [
    "ns-core",
    "ns-translate",
    "ns-source",
    "ns-compute",
    "ns-unbinned",
    "ns-inference",
    "ns-api",
];

/// The path crates a crate's `[dependencies]` name.
fn path_dependencies(krate: &str) -> Vec<String> {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(krate)
        .join("Cargo.toml");
    let text = std::fs::read_to_string(&manifest).unwrap();
    let section = text
        .split("[dependencies]")
        .nth(1)
        .and_then(|rest| rest.split("\n[").next())
        .unwrap_or("");
    section
        .lines()
        .filter_map(|l| l.split(['.', ' ', '=']).next())
        .filter(|name| name.starts_with("ns-"))
        .map(str::to_string)
        .collect()
}

#[test]
fn readers_and_statistics_know_no_format_registry() {
    // The pyhf parser stands on the core alone; statistics know no reader.
    assert_eq!(path_dependencies("ns-translate"), ["ns-core"]);
    let inference = path_dependencies("ns-inference");
    for reader in ["ns-translate", "ns-source", "ns-unbinned", "ns-api"] {
        assert!(
            !inference.iter().any(|d| d == reader),
            "ns-inference depends on {reader}"
        );
    }
}

#[test]
fn only_the_registry_reads_model_formats() {
    // Front ends and the API load models through ns_source::ModelRef, never a reader directly.
    for krate in ["ns-api", "ns-cli", "ns-server"] {
        for (path, code) in engine(krate) {
            for reader in ["hs3::read(", "is_hs3(", "Workspace::from_json_text_direct("] {
                assert!(
                    !code.contains(reader),
                    "{} calls {reader}: load models through ns_source::ModelRef",
                    path.display()
                );
            }
        }
    }
}

#[test]
fn engine_crates_read_no_environment_variables() {
    for krate in ENGINE {
        for (path, code) in engine(krate) {
            if path.ends_with("settings.rs") {
                continue;
            }
            assert!(
                !code.contains("env::var"),
                "{} reads the environment: take it from ns_core::settings instead",
                path.display()
            );
        }
    }
}

#[test]
fn inference_algorithms_name_no_model_type() {
    for (path, code) in engine("ns-inference") {
        // The binned-template layer of nextstat.torch is HistFactory's by nature.
        if path.ends_with("differentiable.rs") {
            continue;
        }
        for name in ["HistFactoryModel", "CompiledModel", "CpuEvaluator"] {
            assert!(
                !code.contains(name),
                "{} names {name}: go through ns_compute::Likelihood",
                path.display()
            );
        }
    }
}

#[test]
fn engine_messages_name_no_cli_flag() {
    let flags = [
        "--fix",
        "--bound",
        "--scan",
        "--gpu ",
        "--tolerance",
        "--data",
        "--patchset",
        "--range",
        "--interp",
        "--modifier",
        "--init",
        "--threads",
        "--shard",
        "--all",
        "--skip-verify",
        "-p ",
    ];
    for krate in ENGINE {
        for (path, code) in engine(krate) {
            for line in code.lines().filter(|l| !l.trim_start().starts_with("//")) {
                for flag in flags {
                    assert!(
                        !line.contains(flag),
                        "{}: '{}' names the CLI flag {flag}; name the call's field",
                        path.display(),
                        line.trim()
                    );
                }
            }
        }
    }
}
