//! The standard normal distribution, accurate in the far tails (CLs reaches 1e-40 on large models),
//! and empirical quantiles.

use std::f64::consts::SQRT_2;

/// The `p`-quantile of `values`, linearly interpolated between order statistics (numpy's
/// default, `interpolation="linear"`): NaN for no values.
pub fn quantile(values: &[f64], p: f64) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    quantile_of_sorted(&sorted, p)
}

/// [`quantile`] of values already sorted.
pub fn quantile_of_sorted(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let h = p.clamp(0.0, 1.0) * (sorted.len() - 1) as f64;
    let (lo, frac) = (h.floor() as usize, h - h.floor());
    if lo + 1 < sorted.len() {
        sorted[lo] + frac * (sorted[lo + 1] - sorted[lo])
    } else {
        sorted[lo]
    }
}

/// Φ(x).
pub fn normal_cdf(x: f64) -> f64 {
    0.5 * libm::erfc(-x / SQRT_2)
}

/// Φ(−(t + a)) / Φ(−t), the CLs of the asymptotic test statistic t when the signal-plus-
/// background distribution is shifted by a = √q_A ≥ 0.
///
/// a = 0 (Asimov data that do not distinguish the hypotheses: a signal too small to matter) gives
/// 1, as pyhf does when q = q_A = 0; where both tails underflow (t ≳ 37: q̃μ divides by a tiny
/// √q_A) the ratio comes from the tails' asymptotic series, which pyhf leaves as 0/0 = NaN.
/// Elsewhere it is the plain quotient, bit for bit.
pub fn tail_ratio(t: f64, a: f64) -> f64 {
    if a == 0.0 {
        return 1.0;
    }
    if t == f64::INFINITY {
        // Both tails are 0; their ratio e^(−a t)·… tends to 0 for a > 0.
        return 0.0;
    }
    let (num, den) = (normal_cdf(-(t + a)), normal_cdf(-t));
    if den > 0.0 || t.is_nan() {
        return num / den;
    }
    // Φ(−x) = φ(x)/x · (1 − 1/x² + 3/x⁴ − 15/x⁶ + …) for x > 37; the ratio of two such tails.
    let series = |x: f64| {
        let r = 1.0 / (x * x);
        1.0 - r * (1.0 - r * (3.0 - 15.0 * r))
    };
    let x = t + a;
    (-(a * t + 0.5 * a * a)).exp() * (t / x) * series(x) / series(t)
}

/// Φ⁻¹(p) for p in (0, 1): Acklam's rational approximation refined by two Newton steps on Φ.
pub fn normal_quantile(p: f64) -> f64 {
    if !(p > 0.0 && p < 1.0) {
        return if p == 0.0 {
            f64::NEG_INFINITY
        } else if p == 1.0 {
            f64::INFINITY
        } else {
            f64::NAN
        };
    }
    const A: [f64; 6] = [
        -3.969683028665376e1,
        2.209460984245205e2,
        -2.759285104469687e2,
        1.383_577_518_672_69e2,
        -3.066479806614716e1,
        2.506628277459239,
    ];
    const B: [f64; 5] = [
        -5.447609879822406e1,
        1.615858368580409e2,
        -1.556989798598866e2,
        6.680131188771972e1,
        -1.328068155288572e1,
    ];
    const C: [f64; 6] = [
        -7.784894002430293e-3,
        -3.223964580411365e-1,
        -2.400758277161838,
        -2.549732539343734,
        4.374664141464968,
        2.938163982698783,
    ];
    const D: [f64; 4] = [
        7.784695709041462e-3,
        3.224671290700398e-1,
        2.445134137142996,
        3.754408661907416,
    ];
    let tail = |q: f64| {
        let r = (-2.0 * q.ln()).sqrt();
        (((((C[0] * r + C[1]) * r + C[2]) * r + C[3]) * r + C[4]) * r + C[5])
            / ((((D[0] * r + D[1]) * r + D[2]) * r + D[3]) * r + 1.0)
    };
    if p > 0.5 {
        return -normal_quantile(1.0 - p);
    }
    let mut x = if p < 0.02425 {
        tail(p)
    } else {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    };
    // Newton steps on Φ(x) = p; Φ from erfc keeps relative accuracy in the lower tail.
    for _ in 0..2 {
        let density = (-0.5 * x * x).exp() / (2.0 * std::f64::consts::PI).sqrt();
        if density > 0.0 {
            x -= (normal_cdf(x) - p) / density;
        }
    }
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantile_inverts_cdf_including_tails() {
        for &x in &[-11.0, -7.5, -3.0, -1.0, -0.1, 0.0, 0.3, 1.0, 2.5, 5.0] {
            let p = normal_cdf(x);
            assert!(
                (normal_quantile(p) - x).abs() < 1e-9 * x.abs().max(1.0),
                "x = {x}"
            );
        }
        assert!((normal_cdf(1.0) - 0.8413447460685429).abs() < 1e-15);
    }

    #[test]
    fn tail_ratio_is_the_quotient_and_continues_it_where_both_tails_underflow() {
        assert_eq!(tail_ratio(0.7, 1.3), normal_cdf(-2.0) / normal_cdf(-0.7));
        assert_eq!(tail_ratio(f64::INFINITY, 0.0), 1.0);
        assert_eq!(tail_ratio(3.0, 0.0), 1.0);
        assert_eq!(tail_ratio(f64::INFINITY, 0.5), 0.0);
        // Just inside the range where the quotient still works, the series agrees with it.
        let (t, a) = (30.0, 0.01);
        let quotient = normal_cdf(-(t + a)) / normal_cdf(-t);
        let x = t + a;
        let series = |x: f64| 1.0 - (1.0 - (3.0 - 15.0 / (x * x)) / (x * x)) / (x * x);
        let asymptotic = (-(a * t + 0.5 * a * a)).exp() * (t / x) * series(x) / series(t);
        assert!(
            (quotient - asymptotic).abs() < 1e-9 * quotient,
            "{quotient} vs {asymptotic}"
        );
        // q̃μ with q = 1e-8 and √q_A = 1e-12: t = 5e3, CLs ≈ exp(−q/2).
        let (q, a) = (1e-8, 1e-12);
        let r = tail_ratio((q - a * a) / (2.0 * a), a);
        assert!((r - (-q / 2.0f64).exp()).abs() < 1e-12, "{r}");
    }
}
