//! The transcendental loop over events (a mixture of densities in logarithms): `exp` and `ln`
//! written branch-free in plain f64 arithmetic (no fused multiply-add, so every instruction set rounds the same), in loops the
//! compiler vectorises; compiled twice, for the baseline x86-64 and for AVX2, and chosen at run
//! time (`ns_core::simd_dispatched!`, within `NEXTSTAT_CPU_SIMD`). Results are the same on
//! every machine and thread count; against the C library they differ by at most a few ulp
//! (tested).

/// ln 2 split so that k·LN2_HI is exact for the k exp and ln meet (fdlibm's constants).
const LN2_HI: f64 = 6.931_471_803_691_238e-1;
const LN2_LO: f64 = 1.908_214_929_270_587_7e-10;

/// 1/n! for n = 2..=13: e^r's Taylor coefficients past 1 + r.
const EXP_TAYLOR: [f64; 12] = [
    1.0 / 2.0,
    1.0 / 6.0,
    1.0 / 24.0,
    1.0 / 120.0,
    1.0 / 720.0,
    1.0 / 5_040.0,
    1.0 / 40_320.0,
    1.0 / 362_880.0,
    1.0 / 3_628_800.0,
    1.0 / 39_916_800.0,
    1.0 / 479_001_600.0,
    1.0 / 6_227_020_800.0,
];

/// 1/(2n + 1) for n = 1..=11: atanh's series past its first term.
const ATANH_SERIES: [f64; 11] = [
    1.0 / 3.0,
    1.0 / 5.0,
    1.0 / 7.0,
    1.0 / 9.0,
    1.0 / 11.0,
    1.0 / 13.0,
    1.0 / 15.0,
    1.0 / 17.0,
    1.0 / 19.0,
    1.0 / 21.0,
    1.0 / 23.0,
];

/// 1.5·2⁵²: adding it rounds a small float to an integer held in the low mantissa bits, so the
/// float/integer conversions stay in vector registers (AVX2 has no 64-bit conversions).
const SHIFTER: f64 = 6_755_399_441_055_744.0;

/// exp(x): x = k·ln2 + r, |r| ≤ ln2/2; e^r = 1 + (r + r²·P(r)), P the Taylor series from r²/2!
/// to r¹³/13! (error below 1e-17) evaluated by Estrin's scheme: a few dependent steps instead of
/// Horner's twelve, so the loop is not bound by their latency; 2^k assembled in two halves so
/// that results down to the subnormals stay exact.
#[inline(always)]
fn exp1(x: f64) -> f64 {
    let xc = x.clamp(-745.2, 709.8);
    let shifted = xc * std::f64::consts::LOG2_E + SHIFTER;
    let k = shifted - SHIFTER;
    let r = (xc - k * LN2_HI) - k * LN2_LO;
    let (r2, c) = (r * r, &EXP_TAYLOR);
    let r4 = r2 * r2;
    let r8 = r4 * r4;
    let s0 = (c[0] + c[1] * r) + (c[2] + c[3] * r) * r2;
    let s1 = (c[4] + c[5] * r) + (c[6] + c[7] * r) * r2;
    let s2 = (c[8] + c[9] * r) + (c[10] + c[11] * r) * r2;
    let p = 1.0 + (r + r2 * ((s0 + s1 * r4) + s2 * r8));
    let ki = shifted.to_bits().wrapping_sub(SHIFTER.to_bits()) as i64;
    // ⌊k/2⌋ through a logical shift of a non-negative value (AVX2 has no 64-bit arithmetic
    // shift), for k in [−1075, 1024]; wrapping, as a NaN's k is any integer (and its p NaN).
    let half = ((ki.wrapping_add(2048) as u64) >> 1) as i64 - 1024;
    let scale = |e: i64| f64::from_bits((e.wrapping_add(1023) as u64) << 52);
    let y = p * scale(half) * scale(ki.wrapping_sub(half));
    // A NaN stays NaN through the clamp and the polynomial (no select: a select that keeps x
    // becomes a masked store in the loop, slow on AMD's cores).
    if x > 709.8 { f64::INFINITY } else { y }
}

/// ln(x): x = m·2^e with m in [√½, √2); ln m = 2·atanh(s) = 2s + 2s·z·Q(z), s = (m − 1)/(m + 1),
/// |s| ≤ 0.172, z = s², Q atanh's series from 1/3 to z¹⁰/23 by Estrin's scheme.
#[inline(always)]
fn ln1(x: f64) -> f64 {
    // Subnormals are scaled up by 2⁵⁴ first.
    let tiny = x < f64::MIN_POSITIVE;
    let xs = if tiny {
        x * 18_014_398_509_481_984.0
    } else {
        x
    };
    let bits = xs.to_bits();
    let m0 = f64::from_bits((bits & 0x000f_ffff_ffff_ffff) | 0x3ff0_0000_0000_0000);
    // The biased exponent as a float, through the mantissa of 2⁵² (no integer conversion).
    let biased =
        f64::from_bits(0x4330_0000_0000_0000 | ((bits >> 52) & 0x7ff)) - 4_503_599_627_370_496.0;
    let big = m0 > std::f64::consts::SQRT_2;
    let m = if big { m0 * 0.5 } else { m0 };
    let ef = biased - 1023.0 + if big { 1.0 } else { 0.0 } - if tiny { 54.0 } else { 0.0 };
    let s = (m - 1.0) / (m + 1.0);
    let (z, c) = (s * s, &ATANH_SERIES);
    let z2 = z * z;
    let z4 = z2 * z2;
    let z8 = z4 * z4;
    let q0 = (c[0] + c[1] * z) + (c[2] + c[3] * z) * z2;
    let q1 = (c[4] + c[5] * z) + (c[6] + c[7] * z) * z2;
    let q2 = (c[8] + c[9] * z) + c[10] * z2;
    let two_s = 2.0 * s;
    let y = ef * LN2_HI + (two_s + (two_s * z * ((q0 + q1 * z4) + q2 * z8) + ef * LN2_LO));
    let y = if x == 0.0 { f64::NEG_INFINITY } else { y };
    let y = if x == f64::INFINITY { x } else { y };
    if x < 0.0 || x.is_nan() { f64::NAN } else { y }
}

ns_core::simd_dispatched! {
    /// A mixture in logarithms, per event: `out = ln Σₚ cₚ·e^{lₚ}` and `share[p] = e^{lₚ}/e^{out}`
    /// (∂out/∂cₚ; rows of `out.len()`), pivoted on the largest lₚ so that no term overflows or
    /// underflows whole. Of two children only the smaller needs an exp.
    pub fn log_mixture(logs: &[&[f64]], coefs: &[f64], out: &mut [f64], share: &mut [f64]) -> () {
        let n = out.len();
        if let ([l0, l1], [c0, c1]) = (logs, coefs) {
            let (s0, s1) = share.split_at_mut(n);
            for ((((o, q0), q1), &a), &b) in out.iter_mut().zip(s0).zip(s1).zip(*l0).zip(*l1) {
                let up = b > a;
                let (hi, lo) = if up { (b, a) } else { (a, b) };
                // Both −∞ (no density): the gap is −∞, not NaN, so the result stays −∞.
                let gap = if hi == f64::NEG_INFINITY { hi } else { lo - hi };
                let r = exp1(gap);
                let (r0, r1) = if up { (r, 1.0) } else { (1.0, r) };
                let total = c0 * r0 + c1 * r1;
                let inv = 1.0 / total;
                *q0 = r0 * inv;
                *q1 = r1 * inv;
                *o = hi + ln1(total);
            }
            return;
        }
        out.fill(f64::NEG_INFINITY);
        for l in logs {
            for (o, &x) in out.iter_mut().zip(*l) {
                *o = if x > *o { x } else { *o };
            }
        }
        for (row, l) in share.chunks_exact_mut(n).zip(logs) {
            for ((r, &x), &top) in row.iter_mut().zip(*l).zip(out.iter()) {
                *r = exp1(if top == f64::NEG_INFINITY { top } else { x - top });
            }
        }
        for (e, o) in out.iter_mut().enumerate() {
            let total: f64 = coefs.iter().enumerate().map(|(p, c)| c * share[p * n + e]).sum();
            let inv = 1.0 / total;
            for p in 0..coefs.len() {
                share[p * n + e] *= inv;
            }
            *o += ln1(total);
        }
    }
}

/// Σ aᵢ·bᵢ in a fixed order: eight running sums (independent chains the CPU overlaps and the
/// compiler vectorises), then those, then the tail.
#[inline]
pub fn dot(a: &[f64], b: &[f64]) -> f64 {
    let n = a.len().min(b.len());
    let head = n / 8 * 8;
    let mut acc = [0.0; 8];
    for (x, y) in a[..head].chunks_exact(8).zip(b[..head].chunks_exact(8)) {
        for l in 0..8 {
            acc[l] += x[l] * y[l];
        }
    }
    let tail: f64 = (head..n).map(|i| a[i] * b[i]).sum();
    acc.iter().sum::<f64>() + tail
}

/// Σ aᵢ in the same fixed order as [`dot`].
#[inline]
pub fn sum(a: &[f64]) -> f64 {
    let head = a.len() / 8 * 8;
    let mut acc = [0.0; 8];
    for x in a[..head].chunks_exact(8) {
        for l in 0..8 {
            acc[l] += x[l];
        }
    }
    acc.iter().sum::<f64>() + a[head..].iter().sum::<f64>()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ulps(a: f64, b: f64) -> u64 {
        (a.to_bits() as i64 - b.to_bits() as i64).unsigned_abs()
    }

    #[test]
    fn exp_and_ln_are_within_a_few_ulp_of_the_c_library() {
        let mut worst = (0, 0);
        for i in 0..200_001 {
            let x = -744.0 + 1453.0 * i as f64 / 200_000.0;
            worst.0 = worst.0.max(ulps(exp1(x), x.exp()));
            let y = (x / 10.0).exp() * 1.37;
            worst.1 = worst.1.max(ulps(ln1(y), y.ln()));
        }
        assert!(
            worst.0 <= 2 && worst.1 <= 3,
            "worst ulp: exp {}, ln {}",
            worst.0,
            worst.1
        );
        for x in [5e-324, 1e-310, 2.2e-308, 0.5, 1.0, 1.0 + 1e-15, 1e300] {
            assert!(
                ulps(ln1(x), x.ln()) <= 3,
                "ln({x}) = {} against {}",
                ln1(x),
                x.ln()
            );
        }
        assert_eq!(exp1(-746.0), 0.0);
        assert_eq!(exp1(710.0), f64::INFINITY);
        assert!(exp1(f64::NAN).is_nan() && exp1(-f64::NAN).is_nan());
        assert!(ln1(-1.0).is_nan() && ln1(f64::NAN).is_nan());
        assert_eq!(ln1(0.0), f64::NEG_INFINITY);
        assert_eq!(ln1(f64::INFINITY), f64::INFINITY);
        assert_eq!(exp1(f64::NEG_INFINITY), 0.0);
    }

    #[test]
    fn mixtures_in_logarithms_match_the_direct_sums() {
        let n = 9;
        let l0: Vec<f64> = (0..n).map(|i| -800.0 + 190.0 * i as f64).collect();
        let l1: Vec<f64> = (0..n).map(|i| 3.0 - 0.7 * i as f64).collect();
        let l2: Vec<f64> = (0..n).map(|i| -2.0 + 0.1 * i as f64).collect();
        let coefs = [0.25, 2.0, 0.5];
        for k in [1, 2, 3] {
            let logs: Vec<&[f64]> = [&l0, &l1, &l2][..k].iter().map(|l| l.as_slice()).collect();
            let (mut out, mut share) = (vec![0.0; n], vec![0.0; k * n]);
            log_mixture(&logs, &coefs[..k], &mut out, &mut share);
            for e in 0..n {
                // Exact in extended range: shift by the largest log first.
                let top = logs.iter().map(|l| l[e]).fold(f64::NEG_INFINITY, f64::max);
                let total: f64 = (0..k).map(|p| coefs[p] * (logs[p][e] - top).exp()).sum();
                let want = top + total.ln();
                assert!(
                    (out[e] - want).abs() <= 1e-14 * want.abs().max(1.0),
                    "{k} children, event {e}"
                );
                for p in 0..k {
                    let want = (logs[p][e] - top).exp() / total;
                    assert!((share[p * n + e] - want).abs() <= 1e-14 * want.max(1e-300));
                }
            }
        }
        let none = [f64::NEG_INFINITY];
        let (mut out, mut share) = ([0.0], [0.0; 2]);
        log_mixture(&[&none, &none], &[1.0, 1.0], &mut out, &mut share);
        assert_eq!(out[0], f64::NEG_INFINITY);
        let (mut out3, mut share3) = ([0.0], [0.0; 3]);
        log_mixture(&[&none, &none, &none], &[1.0; 3], &mut out3, &mut share3);
        assert_eq!(out3[0], f64::NEG_INFINITY);
    }
}
