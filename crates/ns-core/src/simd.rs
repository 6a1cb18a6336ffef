//! Which instruction set the CPU kernels run: detected once per process, capped by
//! `Settings::cpu_simd` (`NEXTSTAT_CPU_SIMD`), and [`simd_dispatched!`](crate::simd_dispatched),
//! the one way a kernel is compiled for each set and chosen at run time.

use std::sync::OnceLock;

pub use crate::settings::CpuSimd as Simd;

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
    let cap = crate::settings::settings().cpu_simd.unwrap_or(Simd::Avx512);
    available()
        .iter()
        .copied()
        .filter(|&s| s <= cap)
        .max()
        .unwrap_or(Simd::Baseline)
}

/// A function compiled for the baseline and, on x86-64, for AVX2 and AVX-512, and run as the
/// widest build [`best`] allows. Its body is inlined into each build (so the wider ones
/// vectorise four or eight wide); it must keep every sum's order and fuse no multiply-add, so
/// that every build gives the same bits.
#[macro_export]
macro_rules! simd_dispatched {
    ($(#[$doc:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty $body:block) => {
        $(#[$doc])*
        $vis fn $name($($arg: $ty),*) -> $ret {
            #[inline(always)]
            fn body($($arg: $ty),*) -> $ret $body
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx2")]
                fn avx2($($arg: $ty),*) -> $ret {
                    body($($arg),*)
                }
                #[target_feature(enable = "avx512f,avx512dq,avx512vl")]
                fn avx512($($arg: $ty),*) -> $ret {
                    body($($arg),*)
                }
                if $crate::simd::best() >= $crate::simd::Simd::Avx512 {
                    // SAFETY: `best` offers AVX-512 only where the CPU has it.
                    return unsafe { avx512($($arg),*) };
                }
                if $crate::simd::best() >= $crate::simd::Simd::Avx2 {
                    // SAFETY: `best` offers AVX2 only where the CPU has it.
                    return unsafe { avx2($($arg),*) };
                }
            }
            body($($arg),*)
        }
    };
}
