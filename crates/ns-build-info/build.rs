//! Records the git commit, the compiler and the target of this build. The commit comes from
//! `$NEXTSTAT_GIT_COMMIT` (source archives without `.git`), else `git rev-parse`, else "unknown".

use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=NEXTSTAT_GIT_COMMIT");
    let manifest = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default();
    let commit = std::env::var("NEXTSTAT_GIT_COMMIT")
        .ok()
        .filter(|c| !c.trim().is_empty())
        .or_else(|| git(&manifest, &["rev-parse", "--short=12", "HEAD"]))
        .unwrap_or_else(|| "unknown".into());
    // A new commit or checkout moves HEAD or the branch it names: rebuild then, not otherwise
    // (a watched path that does not exist would rerun this script on every build).
    if let Some(git_dir) = git(&manifest, &["rev-parse", "--absolute-git-dir"]) {
        let git_dir = Path::new(&git_dir);
        let branch = git(&manifest, &["symbolic-ref", "-q", "HEAD"]);
        let watched = [Some("HEAD"), branch.as_deref(), Some("packed-refs")];
        for path in watched.into_iter().flatten().map(|p| git_dir.join(p)) {
            if path.exists() {
                println!("cargo:rerun-if-changed={}", path.display());
            }
        }
    }
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let rustc_version = Command::new(rustc)
        .arg("-V")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|v| v.trim().to_string())
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=NEXTSTAT_BUILD_COMMIT={commit}");
    println!("cargo:rustc-env=NEXTSTAT_BUILD_RUSTC={rustc_version}");
    println!(
        "cargo:rustc-env=NEXTSTAT_BUILD_TARGET={}",
        std::env::var("TARGET").unwrap_or_default()
    );
    println!(
        "cargo:rustc-env=NEXTSTAT_BUILD_PROFILE={}",
        std::env::var("PROFILE").unwrap_or_default()
    );
}

fn git(dir: &str, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .current_dir(dir)
        .args(args)
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && !text.is_empty()).then_some(text)
}
