//! What this build of nextstat is: its version, git commit, compiler, target, the backends
//! compiled in and the CUDA architectures whose kernels it embeds — for `nextstat --version` and
//! `nextstat.build_info()`, so that a bug report says exactly which binary ran.

use serde::Serialize;

/// A description of the running build. The CPU instruction set is the one the evaluator uses on
/// this machine (detected at run time, capped by `NEXTSTAT_CPU_SIMD`).
#[derive(Clone, Debug, Serialize)]
pub struct BuildInfo {
    pub version: &'static str,
    pub git_commit: &'static str,
    pub rustc: &'static str,
    pub target: &'static str,
    pub profile: &'static str,
    /// Backends compiled in: "cuda" (f64, the driver loaded at run time) and "wgpu" (f32 on
    /// Vulkan/Metal) where the front end enabled it.
    pub features: Vec<&'static str>,
    /// Streaming-multiprocessor architectures (e.g. 90 for sm_90) with kernels compiled ahead of
    /// time; other GPUs compile the kernels with NVRTC at first use.
    pub cuda_archs: Vec<u32>,
    pub cpu_simd: &'static str,
}

impl BuildInfo {
    /// This build, with the front end's own package version (the CLI's and the Python package's
    /// versions are set in their manifests).
    pub fn current(version: &'static str) -> BuildInfo {
        BuildInfo {
            version,
            git_commit: env!("NEXTSTAT_BUILD_COMMIT"),
            rustc: env!("NEXTSTAT_BUILD_RUSTC"),
            target: env!("NEXTSTAT_BUILD_TARGET"),
            profile: env!("NEXTSTAT_BUILD_PROFILE"),
            features: ns_compute::compiled_features(),
            cuda_archs: ns_compute::cuda::prebuilt_archs(),
            cpu_simd: ns_compute::cpu::simd::best().name(),
        }
    }

    /// One line: version and commit.
    pub fn short(&self) -> String {
        format!("{} ({})", self.version, self.git_commit)
    }

    /// The `--version` text: one fact per line.
    pub fn long(&self) -> String {
        let archs = if !self.features.contains(&"cuda") {
            "none (no CUDA in this build)".to_string()
        } else if self.cuda_archs.is_empty() {
            "none embedded (compiled by NVRTC at first use)".to_string()
        } else {
            sm_names(&self.cuda_archs)
        };
        let features = if self.features.is_empty() {
            "none (statically linked: the CPU engine only)".to_string()
        } else {
            self.features.join(", ")
        };
        format!(
            "{}\ncommit: {}\nfeatures: {}\ncuda kernels: {}\ncpu simd: {}\ntarget: {} ({})\nrustc: {}",
            self.version,
            self.git_commit,
            features,
            archs,
            self.cpu_simd,
            self.target,
            self.profile,
            self.rustc
        )
    }
}

/// Architectures as NVIDIA names them: `[80, 90]` → "sm_80, sm_90".
pub fn sm_names(archs: &[u32]) -> String {
    archs
        .iter()
        .map(|a| format!("sm_{a}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn describes_this_build() {
        let info = BuildInfo::current("1.2.3");
        assert_eq!(info.short(), format!("1.2.3 ({})", info.git_commit));
        assert!(!info.git_commit.is_empty());
        assert!(info.rustc.starts_with("rustc "), "{}", info.rustc);
        assert!(info.target.contains('-'), "{}", info.target);
        assert!(info.features.contains(&"cuda"));
        let long = info.long();
        for line in [
            "commit: ",
            "features: cuda",
            "cuda kernels: ",
            "cpu simd: ",
            "target: ",
        ] {
            assert!(long.contains(line), "{line:?} missing from\n{long}");
        }
        let json = serde_json::to_value(&info).unwrap();
        assert_eq!(json["version"], "1.2.3");
        assert!(json["cuda_archs"].is_array());
    }
}
