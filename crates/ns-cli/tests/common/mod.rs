//! What the CLI's integration tests share: a scratch folder per test, and running the binary.

use serde_json::Value;
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// Run `nextstat` with `args` and the environment `env` added, no standard input: (exit status,
/// stdout, stderr).
#[allow(dead_code)] // not every test binary runs the CLI through it
pub fn run_with(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_nextstat"));
    cmd.args(args).stdin(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("nextstat runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// [`run_with`] in the test's own environment.
#[allow(dead_code)]
pub fn run(args: &[&str]) -> (Option<i32>, String, String) {
    run_with(args, &[])
}

/// A temporary folder of one test, removed when dropped.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(test: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("nextstat-{test}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    /// Write `value` as JSON to `name` in the folder.
    pub fn write(&self, name: &str, value: &Value) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, serde_json::to_string(value).unwrap()).unwrap();
        path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
