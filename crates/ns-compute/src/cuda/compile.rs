//! The kernels' machine code: compiled ahead of time and embedded in release builds, else
//! compiled by NVRTC for the device's own architecture and cached on disk.
//!
//! Ahead of time ([`prebuild_kernels`], `scripts/prebuild_kernels.sh`): one cubin per
//! architecture of [`PREBUILT_ARCHS`], embedded by `build.rs` under a key that hashes the source
//! and the options; a device loads the newest one of its own major version (a cubin for X.y runs
//! on every X.z, z ≥ y) whose key matches, so a first call costs no compile. Where none matches
//! (another architecture, a changed source or register budget) or the driver refuses it, NVRTC
//! compiles: the cubin is then stored under a name that also hashes the architecture and the
//! driver and NVRTC versions, so a second process loads it without compiling. The disk cache is
//! best-effort: an unwritable directory only costs a compile per process.

use std::ffi::{CStr, c_char, c_int};
use std::path::{Path, PathBuf};

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

/// Where cubins are cached (`ns_core::settings::Settings::kernel_cache`).
pub fn cache_dir() -> Option<PathBuf> {
    ns_core::settings::settings().kernel_cache.clone()
}

/// How the module was obtained (reported by the GPU benchmark).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelOrigin {
    /// Embedded in the binary at build time.
    Prebuilt,
    Compiled,
    Cached,
}

/// The architectures release builds compile ahead of time: Ampere (8.x), Hopper (9.0),
/// Blackwell data-centre (10.x) and consumer (12.x) parts.
pub const PREBUILT_ARCHS: [u32; 4] = [80, 90, 100, 120];

/// A cubin embedded at build time.
struct Prebuilt {
    arch: u32,
    key: &'static str,
    cubin: &'static [u8],
}

const PREBUILT: &[Prebuilt] = include!(concat!(env!("OUT_DIR"), "/prebuilt_kernels.rs"));

/// What a kernel build depends on besides the architecture: the source, the options and the fit
/// kernel's register budget, hashed.
fn build_key(source: &str, fit_blocks: &str) -> String {
    let mut hasher = Sha256::new();
    hasher.update(source.as_bytes());
    hasher.update(format!("{OPTIONS:?}|{fit_blocks}"));
    hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The embedded cubin for compute capability `major.minor`: of those built from this source with
/// these options, the newest architecture of the same major version not above it.
pub(crate) fn prebuilt_cubin(major: i32, minor: i32) -> Option<&'static [u8]> {
    if PREBUILT.is_empty() {
        return None;
    }
    let key = build_key(&kernel_source(), &fit_min_blocks());
    select_prebuilt(PREBUILT, &key, major, minor).map(|p| p.cubin)
}

fn select_prebuilt<'a>(
    table: &'a [Prebuilt],
    key: &str,
    major: i32,
    minor: i32,
) -> Option<&'a Prebuilt> {
    let (major, minor) = (u32::try_from(major).ok()?, u32::try_from(minor).ok()?);
    table
        .iter()
        .filter(|p| p.key == key && p.arch / 10 == major && p.arch % 10 <= minor)
        .max_by_key(|p| p.arch)
}

/// Whether this build embeds kernels compiled ahead of time, and for which architectures.
pub fn prebuilt_archs() -> Vec<u32> {
    let mut archs: Vec<u32> = PREBUILT.iter().map(|p| p.arch).collect();
    archs.sort_unstable();
    archs
}

fn require_nvrtc() -> Result<()> {
    if let Some(problem) = crate::cuda::library::nvrtc_problem() {
        return Err(Error::Device(problem.to_string()));
    }
    // SAFETY: is_culib_present only tries to load the NVRTC library; it touches nothing of ours.
    if unsafe { sys::is_culib_present() } {
        Ok(())
    } else {
        Err(Error::Device(
            "the NVRTC library (libnvrtc) was not found: install the CUDA runtime compiler library"
                .into(),
        ))
    }
}

/// Compile the kernels for every architecture of `archs` (numbers such as 90 for sm_90), in
/// parallel, into `dir` as `nextstat-sm<arch>-<key>.cubin`, for `build.rs` to embed; earlier
/// cubins there are removed first. Returns the files written.
pub fn prebuild_kernels(dir: &Path, archs: &[u32]) -> Result<Vec<PathBuf>> {
    require_nvrtc()?;
    let io = |what: &str, path: &Path, e: std::io::Error| {
        Error::InvalidInput(format!("{what} {}: {e}", path.display()))
    };
    std::fs::create_dir_all(dir).map_err(|e| io("cannot create", dir, e))?;
    for entry in std::fs::read_dir(dir).map_err(|e| io("cannot list", dir, e))? {
        let path = entry.map_err(|e| io("cannot list", dir, e))?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.starts_with("nextstat-sm") && name.ends_with(".cubin") {
            std::fs::remove_file(&path).map_err(|e| io("cannot remove", &path, e))?;
        }
    }
    let source = kernel_source();
    let fit_blocks = fit_min_blocks();
    let key = build_key(&source, &fit_blocks);
    let cubins: Vec<Result<Vec<u8>>> = std::thread::scope(|scope| {
        let jobs: Vec<_> = archs
            .iter()
            .map(|arch| {
                let (source, fit_blocks) = (&source, &fit_blocks);
                scope.spawn(move || {
                    compile(
                        source,
                        &[format!("--gpu-architecture=sm_{arch}"), fit_blocks.clone()],
                    )
                })
            })
            .collect();
        jobs.into_iter()
            .map(|job| job.join().expect("an NVRTC compile thread panicked"))
            .collect()
    });
    archs
        .iter()
        .zip(cubins)
        .map(|(arch, cubin)| {
            let path = dir.join(format!("nextstat-sm{arch}-{key}.cubin"));
            std::fs::write(&path, cubin?).map_err(|e| io("cannot write", &path, e))?;
            Ok(path)
        })
        .collect()
}

/// The cubin of the kernels for compute capability `major.minor`, from the cache or NVRTC.
pub(crate) fn kernel_cubin(
    major: i32,
    minor: i32,
    driver_version: i32,
) -> Result<(Vec<u8>, KernelOrigin)> {
    cached_cubin(
        &kernel_source(),
        &[fit_min_blocks()],
        major,
        minor,
        driver_version,
    )
}

/// The cubin of `source` with the kernels' options and `extra`, for compute capability
/// `major.minor`: from the disk cache where an identical build is stored, else compiled by
/// NVRTC and stored.
fn cached_cubin(
    source: &str,
    extra: &[String],
    major: i32,
    minor: i32,
    driver_version: i32,
) -> Result<(Vec<u8>, KernelOrigin)> {
    require_nvrtc()?;
    let arch = format!("--gpu-architecture=sm_{major}{minor}");
    let (nv_major, nv_minor) = nvrtc_version()?;
    let mut hasher = Sha256::new();
    hasher.update(build_key(source, &extra.join(" ")));
    hasher.update(format!(
        "|{arch}|driver {driver_version}|nvrtc {nv_major}.{nv_minor}"
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
    let mut options = vec![arch];
    options.extend(extra.iter().cloned());
    let cubin = compile(source, &options)?;
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

/// `source` compiled by NVRTC for `sm_<arch>` with the kernels' options and `extra` (no GPU
/// needed): how a model type's tests check its kernels compile.
pub fn compile_for(source: &str, extra: &[String], arch: u32) -> Result<Vec<u8>> {
    require_nvrtc()?;
    let mut options = vec![format!("--gpu-architecture=sm_{arch}")];
    options.extend(extra.iter().cloned());
    compile(source, &options)
}

/// Load the CUDA C++ program `source` (a model type's own kernels, outside this crate's
/// translation unit) on the device of `ctx`: compiled by NVRTC with the kernels' options and
/// `extra` (say, -D definitions that specialise it) for the device's architecture, or taken
/// from the disk cache.
pub fn load_program(
    ctx: &std::sync::Arc<cudarc::driver::CudaContext>,
    source: &str,
    extra: &[String],
) -> Result<(std::sync::Arc<cudarc::driver::CudaModule>, KernelOrigin)> {
    let driver = |what: &str, e: cudarc::driver::DriverError| {
        Error::Device(format!("CUDA {what} failed: {e}"))
    };
    let (major, minor) = ctx
        .compute_capability()
        .map_err(|e| driver("capability query", e))?;
    let mut driver_version = 0;
    // SAFETY: writes one int through a pointer to a live local.
    unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut driver_version) }
        .result()
        .map_err(|e| driver("driver version query", e))?;
    let (cubin, origin) = cached_cubin(source, extra, major, minor, driver_version)?;
    let module = ctx
        .load_module(cudarc::nvrtc::Ptx::from_binary(cubin))
        .map_err(|e| driver("module load", e))?;
    Ok((module, origin))
}

/// The fit kernel's register budget as resident blocks per multiprocessor: 4 by default (64
/// registers a thread at 256 threads a block); `Settings::fit_min_blocks` to experiment (a value
/// no embedded cubin was built for compiles with NVRTC). The choices measured are in
/// docs/gpu.md.
fn fit_min_blocks() -> String {
    let blocks = ns_core::settings::settings().fit_min_blocks.unwrap_or(4);
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

    /// A device takes the newest embedded cubin of its major version not above it, built from
    /// the current source: 8.6 runs the sm_80 one, 9.0 the sm_90 one, 7.5 and a stale key none.
    #[test]
    fn a_device_takes_the_newest_matching_cubin_of_its_major_version() {
        let entry = |arch, key| Prebuilt {
            arch,
            key,
            cubin: b"",
        };
        let table = [
            entry(80, "k"),
            entry(86, "k"),
            entry(90, "k"),
            entry(90, "old"),
            entry(120, "k"),
        ];
        let arch = |major, minor| select_prebuilt(&table, "k", major, minor).map(|p| p.arch);
        assert_eq!(arch(8, 0), Some(80));
        assert_eq!(arch(8, 6), Some(86));
        assert_eq!(arch(8, 9), Some(86));
        assert_eq!(arch(9, 0), Some(90));
        assert_eq!(arch(12, 1), Some(120));
        assert_eq!(arch(7, 5), None);
        assert_eq!(arch(10, 0), None);
        assert_eq!(select_prebuilt(&table, "new", 9, 0).map(|p| p.arch), None);
        assert_eq!(select_prebuilt(&table, "k", -1, 0).map(|p| p.arch), None);
    }

    /// The kernels, after the header generated from Rust, compile for Hopper (every generated
    /// struct's size check holds), and `prebuild_kernels` writes the cubin named for `build.rs`,
    /// replacing an earlier one. One NVRTC compile: each takes most of a minute of CI's time.
    #[test]
    #[ignore = "needs libnvrtc (no GPU): scripts/test.sh installs it and runs this"]
    fn kernels_compile_for_sm90_and_prebuilt_cubins_are_named_for_build_rs() {
        require_nvrtc();
        let dir = std::env::temp_dir().join(format!("ns-prebuilt-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("nextstat-sm90-stale.cubin"), b"old").unwrap();
        let written = prebuild_kernels(&dir, &[90]).unwrap_or_else(|e| panic!("{e}"));
        let key = build_key(&kernel_source(), &fit_min_blocks());
        let names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names, [format!("nextstat-sm90-{key}.cubin")]);
        for path in written {
            assert!(
                std::fs::read(&path).unwrap().starts_with(b"\x7fELF"),
                "NVRTC returned no ELF cubin"
            );
        }
        std::fs::remove_dir_all(&dir).unwrap();
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
