//! The ARGUS background m·u^p·exp(c·u), u = 1 − (m/m0)², below the endpoint m0. Its integral
//! is (m0²/2)·∫ u^p e^(cu) du, a lower incomplete gamma function, summed as a series of
//! positive terms for either sign of c ([`lower_gamma`]).

use crate::scalar::Real;

pub fn log_density<T: Real>(x: f64, a: &[T]) -> T {
    let (m0, c, p) = (a[0], a[1], a[2]);
    let r = T::constant(x) / m0;
    let u = -(r * r) + 1.0;
    if u.value() <= 0.0 || x <= 0.0 {
        return T::constant(f64::NEG_INFINITY);
    }
    T::constant(x.ln()) + p * u.ln() + c * u
}

/// Most terms of the integral's series: for c > 0 its terms grow until k ≈ cU, and past
/// cU ≈ 700 the integral overflows f64 anyway.
const MAX_SERIES_TERMS: usize = 2000;

/// ∫_0^U u^p e^(cu) du, as a series of positive terms for either sign of c, so that nothing
/// cancels: U^(p+1)·e^(cU)·Σ_k (−cU)^k / ((p+1)(p+2)…(p+1+k)) for c ≤ 0, and its Kummer
/// transform U^(p+1)·Σ_k (cU)^k / (k!·(p+1+k)) for c > 0 (a rising ARGUS; the first form
/// alternates there and lost 10⁻⁵ of the integral at cU = 30).
fn lower_gamma<T: Real>(big_u: T, c: T, p: T) -> T {
    if big_u.value() <= 0.0 {
        return T::constant(0.0);
    }
    let s = p + 1.0;
    let z = c * big_u;
    let mut sum = T::constant(1.0) / s;
    if c.value() <= 0.0 {
        let mut term = sum;
        for k in 1..MAX_SERIES_TERMS {
            term = term * -z / (s + k as f64);
            sum = sum + term;
            if term.value().abs() <= 1e-17 * sum.value().abs() {
                break;
            }
        }
        (s * big_u.ln() + z).exp() * sum
    } else {
        let mut power = T::constant(1.0);
        for k in 1..MAX_SERIES_TERMS {
            power = power * z * (1.0 / k as f64);
            let term = power / (s + k as f64);
            sum = sum + term;
            if k as f64 > z.value() && term.value() <= 1e-17 * sum.value() {
                break;
            }
        }
        (s * big_u.ln()).exp() * sum
    }
}

pub fn log_integral<T: Real>(a: &[T], lo: f64, hi: f64) -> T {
    let (m0, c, p) = (a[0], a[1], a[2]);
    let u_of = |x: T| {
        let r = x / m0;
        -(r * r) + 1.0
    };
    let top = if hi < m0.value() { T::constant(hi) } else { m0 };
    if lo >= top.value() {
        return T::constant(f64::NEG_INFINITY);
    }
    let u_lo = u_of(T::constant(lo.max(0.0)));
    let u_hi = u_of(top);
    (m0 * m0 * 0.5 * (lower_gamma(u_lo, c, p) - lower_gamma(u_hi, c, p))).ln()
}
