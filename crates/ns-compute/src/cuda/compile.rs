//! NVRTC compilation of the kernels for the device's own architecture, cached on disk.
//!
//! The cubin is stored under a name that hashes the source, the options, the architecture and
//! the driver and NVRTC versions, so a second process loads it without compiling, and any change
//! to one of them compiles afresh. The cache is best-effort: an unwritable directory only costs
//! a compile per process.

use std::ffi::{CStr, c_char, c_int};
use std::path::PathBuf;

use cudarc::nvrtc::{result, sys};
use ns_core::{Error, Result};
use sha2::{Digest, Sha256};

/// The kernel sources, in translation-unit order: the deterministic math, the toy samplers, the
/// NLL and the device-resident optimizer.
pub(crate) const KERNEL_FILES: [(&str, &str); 4] = [
    ("detmath.cuh", include_str!("../../kernels/detmath.cuh")),
    ("toys.cuh", include_str!("../../kernels/toys.cuh")),
    ("nll_grad.cu", include_str!("../../kernels/nll_grad.cu")),
    ("lbfgsb.cu", include_str!("../../kernels/lbfgsb.cu")),
];

/// All kernels as one translation unit, after the header generated from Rust ([`super::abi`]).
pub(crate) fn kernel_source() -> String {
    let mut source = super::abi::header();
    for (_, text) in KERNEL_FILES {
        source.push_str(text);
    }
    source
}

/// `--fmad=false` keeps every product and sum separately rounded, as on the CPU: the toy
/// samplers must reproduce the CPU's bits. Line information costs nothing at run time and lets
/// Nsight Compute attribute time to source lines.
const OPTIONS: [&str; 3] = ["--fmad=false", "--std=c++17", "--generate-line-info"];

fn nvrtc_error(what: &str, e: result::NvrtcError) -> Error {
    Error::Device(format!("NVRTC {what} failed: {e:?}"))
}

fn nvrtc_version() -> Result<(i32, i32)> {
    let (mut major, mut minor): (c_int, c_int) = (0, 0);
    // SAFETY: nvrtcVersion writes two c_ints through pointers to live locals.
    unsafe { sys::nvrtcVersion(&mut major, &mut minor) }
        .result()
        .map_err(|e| nvrtc_error("version query", e))?;
    Ok((major, minor))
}

/// Where cubins are cached: `$NEXTSTAT_KERNEL_CACHE`, else `$XDG_CACHE_HOME/nextstat`, else
/// `~/.cache/nextstat`.
pub fn cache_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("NEXTSTAT_KERNEL_CACHE") {
        return Some(PathBuf::from(dir));
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("nextstat"))
}

/// How the module was obtained (reported by the GPU benchmark).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelOrigin {
    Compiled,
    Cached,
}

/// The cubin of the kernels for compute capability `major.minor`, from the cache or NVRTC.
pub(crate) fn kernel_cubin(
    major: i32,
    minor: i32,
    driver_version: i32,
) -> Result<(Vec<u8>, KernelOrigin)> {
    // SAFETY: is_culib_present only tries to load the driver library; it touches nothing of ours.
    if !unsafe { sys::is_culib_present() } {
        return Err(Error::Device(
            "the NVRTC library (libnvrtc) was not found: install the CUDA runtime compiler library"
                .into(),
        ));
    }
    let arch = format!("--gpu-architecture=sm_{major}{minor}");
    let fit_blocks = fit_min_blocks();
    let (nv_major, nv_minor) = nvrtc_version()?;
    let source = kernel_source();
    let mut hasher = Sha256::new();
    hasher.update(source.as_bytes());
    hasher.update(format!(
        "{OPTIONS:?}|{arch}|{fit_blocks}|driver {driver_version}|nvrtc {nv_major}.{nv_minor}"
    ));
    let key: String = hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let cached = cache_dir().map(|d| d.join(format!("kernels-{key}.cubin")));
    if let Some(bytes) = cached.as_ref().and_then(|p| std::fs::read(p).ok())
        && !bytes.is_empty()
    {
        return Ok((bytes, KernelOrigin::Cached));
    }
    let cubin = compile(&source, &[arch, fit_blocks])?;
    if let Some(path) = cached {
        // Write then rename, so a concurrent reader never sees half a file.
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        let stored = path
            .parent()
            .map(std::fs::create_dir_all)
            .transpose()
            .and_then(|_| std::fs::write(&tmp, &cubin))
            .and_then(|_| std::fs::rename(&tmp, &path));
        if stored.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
    }
    Ok((cubin, KernelOrigin::Compiled))
}

/// The fit kernel's register budget as resident blocks per multiprocessor: 4 by default (128
/// registers a thread, no spills); `NEXTSTAT_FIT_MIN_BLOCKS` to experiment. On an H100, 4, 6
/// and 8 ran tHq toys equally fast (docs/benchmarks.md): the kernel is not occupancy-bound.
fn fit_min_blocks() -> String {
    let blocks = std::env::var("NEXTSTAT_FIT_MIN_BLOCKS")
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
        .filter(|&b| (1..=16).contains(&b))
        .unwrap_or(4);
    format!("-DNS_FIT_MIN_BLOCKS={blocks}")
}

fn compile(source: &str, extra: &[String]) -> Result<Vec<u8>> {
    let source = std::ffi::CString::new(source).expect("kernel source has no NUL byte");
    let name = c"nextstat_kernels.cu";
    let program = result::create_program(&source, Some(name))
        .map_err(|e| nvrtc_error("program creation", e))?;
    let mut options: Vec<String> = OPTIONS.iter().map(|s| s.to_string()).collect();
    options.extend(extra.iter().cloned());
    // SAFETY: `program` was created above and is destroyed only at the end of this function; the options outlive the call.
    let compiled = unsafe { result::compile_program(program, &options) };
    let outcome = compiled
        .map_err(|e| {
            // SAFETY: the program is still alive; its log is copied out before it is destroyed.
            let log = unsafe { result::get_program_log(program) }
                .map(|raw| {
                    // SAFETY: NVRTC's log buffer is sized by nvrtcGetProgramLogSize, which counts the NUL terminator.
                    unsafe { CStr::from_ptr(raw.as_ptr()) }
                        .to_string_lossy()
                        .into_owned()
                })
                .unwrap_or_default();
            Error::Device(format!(
                "NVRTC could not compile the kernels ({e:?}) with {options:?}:\n{log}"
            ))
        })
        .and_then(|()| {
            let mut size = 0usize;
            // SAFETY: the program is alive and compiled; `size` is a valid out-pointer.
            unsafe { sys::nvrtcGetCUBINSize(program, &mut size) }
                .result()
                .map_err(|e| nvrtc_error("cubin size query", e))?;
            let mut cubin = vec![0u8; size];
            // SAFETY: `cubin` holds exactly the `size` bytes NVRTC reported for this program.
            unsafe { sys::nvrtcGetCUBIN(program, cubin.as_mut_ptr() as *mut c_char) }
                .result()
                .map_err(|e| nvrtc_error("cubin retrieval", e))?;
            Ok(cubin)
        });
    // SAFETY: last use of the program: nothing refers to it afterwards.
    let _ = unsafe { result::destroy_program(program) };
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;

    /// NVRTC is a pip package (`nvidia-cuda-nvrtc`), no GPU needed: `scripts/test.sh` installs
    /// it and runs these with `--ignored` and LD_LIBRARY_PATH at its lib folder; elsewhere they
    /// are reported as ignored. Without the library they fail, saying so.
    fn require_nvrtc() {
        // SAFETY: is_culib_present only tries to load the NVRTC library; it touches nothing of ours.
        assert!(
            unsafe { sys::is_culib_present() },
            "libnvrtc not found: pip install nvidia-cuda-nvrtc and put its nvidia/cu13/lib on LD_LIBRARY_PATH"
        );
    }

    /// The kernels, after the header generated from Rust, compile for Hopper: every generated
    /// struct's size check holds.
    #[test]
    #[ignore = "needs libnvrtc (no GPU): scripts/test.sh installs it and runs this"]
    fn kernels_compile_for_sm90_with_the_generated_header() {
        require_nvrtc();
        let cubin = compile(
            &kernel_source(),
            &["--gpu-architecture=sm_90".into(), fit_min_blocks()],
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(cubin.starts_with(b"\x7fELF"), "NVRTC returned no ELF cubin");
    }

    /// The layout check bites: a kernel-side struct that differs from its Rust twin (here one
    /// int widened to a double) does not compile.
    #[test]
    #[ignore = "needs libnvrtc (no GPU): scripts/test.sh installs it and runs this"]
    fn a_struct_that_drifts_from_rust_does_not_compile() {
        require_nvrtc();
        let drifted = super::super::abi::header().replace("    int n_fits;", "    double n_fits;");
        assert_ne!(drifted, super::super::abi::header());
        let e = compile(&drifted, &["--gpu-architecture=sm_90".into()])
            .expect_err("a drifted struct must not compile");
        assert!(
            e.to_string().contains("FitArgs differs from its Rust twin"),
            "{e}"
        );
    }
}
