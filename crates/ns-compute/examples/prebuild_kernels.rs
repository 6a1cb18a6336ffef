//! Compile the CUDA kernels ahead of time for the architectures release builds ship, into a
//! folder that `build.rs` embeds when `NEXTSTAT_PREBUILT_KERNELS` names it. Needs only the NVRTC
//! library (the `nvidia-cuda-nvrtc` pip package), no GPU. `scripts/prebuild_kernels.sh` runs it.
//!
//!     cargo run -p ns-compute --example prebuild_kernels -- DIR [ARCH ...]

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    ns_core::settings::install(ns_core::settings::Settings::from_environment());
    let mut args = std::env::args().skip(1);
    let Some(dir) = args.next().map(PathBuf::from) else {
        eprintln!("usage: prebuild_kernels DIR [ARCH ...]   (ARCH such as 90 for sm_90)");
        return ExitCode::from(2);
    };
    let archs: Result<Vec<u32>, _> = args.map(|a| a.parse::<u32>()).collect();
    let archs = match archs {
        Ok(a) if a.is_empty() => ns_compute::cuda::PREBUILT_ARCHS.to_vec(),
        Ok(a) => a,
        Err(e) => {
            eprintln!("an architecture is not a number: {e}");
            return ExitCode::from(2);
        }
    };
    let started = std::time::Instant::now();
    match ns_compute::cuda::prebuild_kernels(&dir, &archs) {
        Ok(files) => {
            for f in files {
                println!("{}", f.display());
            }
            eprintln!(
                "compiled {archs:?} in {:.1} s",
                started.elapsed().as_secs_f64()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
