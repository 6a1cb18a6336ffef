//! Elementary functions built only from correctly rounded IEEE operations (`+ − × ÷`, `sqrt`,
//! `floor`, bit manipulation), with no fused multiply-add, in a fixed order.
//!
//! The toy samplers use these instead of the platform's `exp`/`ln`/`cos`/`lgamma`, which differ
//! between glibc, libm and CUDA by ulps. `kernels/detmath.cuh` is the line-by-line CUDA twin,
//! compiled with `--fmad=false`; together they make toy `i` of seed `s` the same dataset, bit for
//! bit, on the CPU and on the GPU. Accuracy is a few ulps over the ranges the samplers use —
//! plenty for sampling, where only reproducibility has to be exact.

/// ln 2 split so that `k · LN2_HI` is exact for |k| < 2²⁰.
pub(crate) const LN2_HI: f64 = 6.931_471_803_691_238e-1;
pub(crate) const LN2_LO: f64 = 1.908_214_929_270_587_7e-10;
pub(crate) const INV_LN2: f64 = std::f64::consts::LOG2_E;
pub(crate) const PI: f64 = std::f64::consts::PI;

/// 2^k for k in the normal exponent range.
fn pow2(k: i64) -> f64 {
    f64::from_bits(((k + 1023) as u64) << 52)
}

/// e^x. Underflows to 0 below −745 and overflows to +∞ above 709.78.
pub fn exp(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    if x > 709.78 {
        return f64::INFINITY;
    }
    if x < -745.2 {
        return 0.0;
    }
    let k = (x * INV_LN2 + 0.5).floor();
    // |r| ≤ ln2/2: Taylor series to r¹⁴/14! (< 1e-18 relative).
    let r = (x - k * LN2_HI) - k * LN2_LO;
    let mut p = 1.0 / 87_178_291_200.0;
    for d in [
        6_227_020_800.0,
        479_001_600.0,
        39_916_800.0,
        3_628_800.0,
        362_880.0,
        40_320.0,
        5_040.0,
        720.0,
        120.0,
        24.0,
        6.0,
        2.0,
        1.0,
        1.0,
    ] {
        p = p * r + 1.0 / d;
    }
    let k = k as i64;
    // Two steps keep 2^k normal near the ends of the range.
    let half = k / 2;
    p * pow2(half) * pow2(k - half)
}

/// Natural logarithm: NaN below 0, −∞ at 0.
pub fn ln(x: f64) -> f64 {
    if x.is_nan() || x < 0.0 {
        return f64::NAN;
    }
    if x == 0.0 {
        return f64::NEG_INFINITY;
    }
    if x == f64::INFINITY {
        return x;
    }
    let (mut bits, mut e) = (x.to_bits(), 0i64);
    if bits >> 52 == 0 {
        // Subnormal: scale by 2⁵⁴ first.
        bits = (x * 18_014_398_509_481_984.0).to_bits();
        e = -54;
    }
    e += ((bits >> 52) & 0x7ff) as i64 - 1023;
    // Mantissa m in [1, 2); move it to [√½, √2).
    let mut m = f64::from_bits((bits & 0x000f_ffff_ffff_ffff) | 0x3ff0_0000_0000_0000);
    if m > std::f64::consts::SQRT_2 {
        m *= 0.5;
        e += 1;
    }
    // ln m = 2 atanh s, s = (m − 1)/(m + 1), |s| ≤ 0.172: series to s²³.
    let s = (m - 1.0) / (m + 1.0);
    let s2 = s * s;
    let mut p = 1.0 / 23.0;
    for d in [21.0, 19.0, 17.0, 15.0, 13.0, 11.0, 9.0, 7.0, 5.0, 3.0, 1.0] {
        p = p * s2 + 1.0 / d;
    }
    let e = e as f64;
    e * LN2_HI + (2.0 * s * p + e * LN2_LO)
}

/// sin and cos on [−π/4, π/4] by their Taylor series (terms below 1e-18 dropped).
fn sin_cos_reduced(x: f64) -> (f64, f64) {
    let x2 = x * x;
    let mut s = -1.0 / 1_307_674_368_000.0;
    for d in [
        6_227_020_800.0,
        -39_916_800.0,
        362_880.0,
        -5_040.0,
        120.0,
        -6.0,
        1.0,
    ] {
        s = s * x2 + 1.0 / d;
    }
    let mut c = 1.0 / 20_922_789_888_000.0;
    for d in [
        -87_178_291_200.0,
        479_001_600.0,
        -3_628_800.0,
        40_320.0,
        -720.0,
        24.0,
        -2.0,
        1.0,
    ] {
        c = c * x2 + 1.0 / d;
    }
    (x * s, c)
}

/// cos(2π·t): the argument is reduced in turns, exactly, before it is scaled by 2π.
pub fn cos_2pi(t: f64) -> f64 {
    let t = t - t.floor();
    let quarter = (4.0 * t + 0.5).floor();
    let x = (t - 0.25 * quarter) * (2.0 * PI);
    let (s, c) = sin_cos_reduced(x);
    match (quarter as i64) & 3 {
        0 => c,
        1 => -s,
        2 => -c,
        _ => s,
    }
}

/// ln(k!) for integer k ≥ 0: exact factorials below 20, Stirling's series above.
pub fn ln_factorial(k: f64) -> f64 {
    if k < 20.0 {
        let mut f = 1.0;
        let mut i = 2.0;
        while i <= k {
            f *= i;
            i += 1.0;
        }
        return ln(f);
    }
    stirling_ln_gamma(k + 1.0)
}

/// ln Γ(t + 1) for real t ≥ 0: Γ's recurrence up to an argument of 20, Stirling's series there.
pub fn ln_gamma_1p(t: f64) -> f64 {
    let (mut x, mut product) = (t + 1.0, 1.0);
    while x < 20.0 {
        product *= x;
        x += 1.0;
    }
    stirling_ln_gamma(x) - ln(product)
}

/// ln Γ(x) by Stirling's series, for x ≥ 20.
fn stirling_ln_gamma(x: f64) -> f64 {
    let inv = 1.0 / x;
    let inv2 = inv * inv;
    // 1/(12x) − 1/(360x³) + 1/(1260x⁵) − 1/(1680x⁷) + 1/(1188x⁹).
    let series = inv
        * (1.0 / 12.0
            + inv2
                * (-1.0 / 360.0 + inv2 * (1.0 / 1260.0 + inv2 * (-1.0 / 1680.0 + inv2 / 1188.0))));
    (x - 0.5) * ln(x) - x + 0.918_938_533_204_672_7 + series
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_close(got: f64, want: f64, rel: f64, what: &str) {
        assert!(
            (got - want).abs() <= rel * want.abs().max(f64::MIN_POSITIVE),
            "{what}: got {got:e}, want {want:e}"
        );
    }

    #[test]
    fn functions_agree_with_the_platform_to_a_few_ulps() {
        let mut x = -700.0;
        while x < 700.0 {
            assert_close(exp(x), x.exp(), 4e-16, &format!("exp({x})"));
            x += 0.37;
        }
        for &x in &[
            1e-300_f64, 5e-324, 1e-10, 0.3, 0.5, 0.999_999, 1.0, 1.5, 2.0, 12.0, 1e6, 1e300,
        ] {
            let want = x.ln();
            if want == 0.0 {
                assert_eq!(ln(x), 0.0);
            } else {
                assert_close(ln(x), want, 4e-16, &format!("ln({x})"));
            }
        }
        let mut u = 1e-9;
        while u < 1.0 {
            assert_close(ln(u), u.ln(), 4e-16, &format!("ln({u})"));
            let want = (2.0 * std::f64::consts::PI * u).cos();
            assert!((cos_2pi(u) - want).abs() < 2e-15, "cos_2pi({u})");
            u += 0.000_731;
        }
        let mut t = 0.0;
        while t < 12.0 {
            // Absolute near its zeros at t = 0 and 1: the recurrence cancels ln 19! ≈ 39.
            let want = libm::lgamma(t + 1.0);
            assert!(
                (ln_gamma_1p(t) - want).abs() < 1e-13 * want.abs().max(1.0),
                "ln_gamma_1p({t}): got {}, want {want}",
                ln_gamma_1p(t)
            );
            t += 0.0137;
        }
        for k in 0..400 {
            let k = k as f64;
            assert_close(
                ln_factorial(k),
                libm::lgamma(k + 1.0),
                2e-15,
                &format!("ln({k}!)"),
            );
        }
        assert!(ln(-1.0).is_nan() && ln(0.0) == f64::NEG_INFINITY && exp(-800.0) == 0.0);
    }
}
