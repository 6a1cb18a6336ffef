//! Which instruction set the CPU evaluator runs: detected once per process, capped by
//! `Settings::cpu_simd` (`NEXTSTAT_CPU_SIMD`).

use std::sync::OnceLock;

pub use ns_core::settings::CpuSimd as Simd;

/// The instruction sets this CPU offers, narrowest first (always the baseline).
pub fn available() -> &'static [Simd] {
    static AVAILABLE: OnceLock<Vec<Simd>> = OnceLock::new();
    AVAILABLE.get_or_init(|| {
        #[allow(unused_mut)]
        let mut sets = vec![Simd::Baseline];
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx2") {
                sets.push(Simd::Avx2);
                if std::arch::is_x86_feature_detected!("avx512f") {
                    sets.push(Simd::Avx512);
                }
            }
        }
        sets
    })
}

/// The widest available instruction set within the configured cap.
pub fn best() -> Simd {
    let cap = ns_core::settings::settings()
        .cpu_simd
        .unwrap_or(Simd::Avx512);
    available()
        .iter()
        .copied()
        .filter(|&s| s <= cap)
        .max()
        .unwrap_or(Simd::Baseline)
}
