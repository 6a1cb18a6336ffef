//! Embeds the CUDA kernels compiled ahead of time, where a release build provides them: every
//! `nextstat-sm<arch>-<key>.cubin` in `$NEXTSTAT_PREBUILT_KERNELS` (written by
//! `cargo run -p ns-compute --example prebuild_kernels`, see `scripts/prebuild_kernels.sh`).
//! Without the variable nothing is embedded and the kernels are compiled by NVRTC at first use.
//! Which cubin a device loads, and whether its key still matches the source, is decided at run
//! time (`src/cuda/compile.rs`).

use std::fmt::Write;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-env-changed=NEXTSTAT_PREBUILT_KERNELS");
    let mut entries = String::new();
    if let Some(dir) = std::env::var_os("NEXTSTAT_PREBUILT_KERNELS") {
        let dir = PathBuf::from(dir);
        println!("cargo:rerun-if-changed={}", dir.display());
        let listing = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("NEXTSTAT_PREBUILT_KERNELS={}: {e}", dir.display()));
        let mut files: Vec<PathBuf> = listing.filter_map(|e| e.ok().map(|e| e.path())).collect();
        files.sort();
        for path in files {
            let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            let Some((arch, key)) = name
                .strip_prefix("nextstat-sm")
                .and_then(|rest| rest.strip_suffix(".cubin"))
                .and_then(|rest| rest.split_once('-'))
            else {
                continue;
            };
            let arch: u32 = arch
                .parse()
                .unwrap_or_else(|_| panic!("{name}: the architecture is not a number"));
            println!("cargo:rerun-if-changed={}", path.display());
            writeln!(
                entries,
                "    Prebuilt {{ arch: {arch}, key: {key:?}, cubin: include_bytes!({:?}) }},",
                path.canonicalize().expect("listed file exists")
            )
            .expect("writing to a String");
        }
    }
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    std::fs::write(out.join("prebuilt_kernels.rs"), format!("&[\n{entries}]\n"))
        .expect("OUT_DIR is writable");
}
