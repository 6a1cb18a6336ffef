//! The Crystal Ball: RooCBShape's one-sided form and RooCrystalBall's double-sided one.
//! Normalised analytically: the Gaussian core through erf/erfc, each power-law tail in closed
//! form (smooth through n = 1).

use super::erf_difference;
use crate::scalar::Real;

/// Which tails a Crystal Ball has, and so how its arguments read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tails {
    /// RooCBShape (HS3 `crystalball_dist` with `alpha`, `n`, `sigma`): arguments m0, sigma,
    /// alpha, n; the tail is on the left for alpha > 0 and on the right for alpha < 0.
    OneSided,
    /// RooCrystalBall: arguments m0, sigma_L, sigma_R, alpha_L, n_L, alpha_R, n_R; a side
    /// without its tail is Gaussian to the end of the range (its alpha and n unused).
    DoubleSided { left: bool, right: bool },
}

struct Parts<T> {
    m0: T,
    sigma_l: T,
    sigma_r: T,
    left: Option<(T, T)>,
    right: Option<(T, T)>,
}

impl Tails {
    /// Where the density peaks.
    pub fn peak(self, a: &[f64]) -> f64 {
        a[0]
    }

    fn parts<T: Real>(self, a: &[T]) -> Parts<T> {
        match self {
            Tails::OneSided => {
                let tail = Some((a[2].abs(), a[3]));
                let left = a[2].value() >= 0.0;
                Parts {
                    m0: a[0],
                    sigma_l: a[1],
                    sigma_r: a[1],
                    left: if left { tail } else { None },
                    right: if left { None } else { tail },
                }
            }
            Tails::DoubleSided { left, right } => Parts {
                m0: a[0],
                sigma_l: a[1],
                sigma_r: a[2],
                left: left.then_some((a[3], a[4])),
                right: right.then_some((a[5], a[6])),
            },
        }
    }
}

/// The tail A·(B + |t|)^(−n), continuous with the core at |t| = α, written as
/// e^(−α²/2)·(1 + u)^(−n) with u = α(|t| − α)/n: B = n/α − α is never formed, so a tail as α → 0
/// (B → ∞, where n/α + |t| rounds to n/α) stays exact and tends to its limit, a flat tail.
fn tail_u<T: Real>(alpha: T, n: T, t: T) -> T {
    alpha * (t - alpha) / n
}

pub fn log_density<T: Real>(tails: Tails, x: f64, a: &[T]) -> T {
    let p = tails.parts(a);
    let below = x < p.m0.value();
    let t = (T::constant(x) - p.m0) / if below { p.sigma_l } else { p.sigma_r };
    let tail = if below { p.left } else { p.right };
    match tail {
        Some((alpha, n)) if t.abs().value() > alpha.value() => {
            alpha * alpha * -0.5 - n * tail_u(alpha, n, t.abs()).ln_1p()
        }
        _ => t * t * -0.5,
    }
}

/// ln(1 + q)/q, continuous through q = 0.
fn ln_1p_over<T: Real>(q: T) -> T {
    if q.value().abs() < 1e-8 {
        T::constant(1.0) - q * 0.5 + q * q / 3.0
    } else {
        q.ln_1p() / q
    }
}

/// (eˣ − 1)/x, continuous through x = 0.
fn exp_m1_over<T: Real>(x: T) -> T {
    if x.value().abs() < 1e-8 {
        T::constant(1.0) + x * 0.5 + x * x / 6.0
    } else {
        x.exp_m1() / x
    }
}

/// ∫ of the tail over |t| in [t1, t2] (α ≤ t1 ≤ t2): with w = 1 + u, e^(−α²/2)·(n/α)·
/// (w₂^k − w₁^k)/k, k = 1 − n, written without n/α (so α → 0 and α = 0 are exact: the integral
/// tends to t2 − t1) and smooth through n = 1.
fn power_tail<T: Real>(alpha: T, n: T, t1: T, t2: T) -> T {
    let u1 = tail_u(alpha, n, t1);
    let w1 = T::constant(1.0) + u1;
    // (w₂ − w₁)/w₁, formed from t2 − t1 directly.
    let q = alpha * (t2 - t1) / n / w1;
    let k = -(n - 1.0);
    let l = q.ln_1p();
    (alpha * alpha * -0.5 + k * u1.ln_1p()).exp() * (t2 - t1) / w1
        * ln_1p_over(q)
        * exp_m1_over(k * l)
}

/// ∫ over t in [t1, t2] of one side's shape (t ≥ 0 measured away from the peak).
fn side<T: Real>(tail: Option<(T, T)>, t1: T, t2: T) -> T {
    let core = |u: T, v: T| {
        erf_difference(u / std::f64::consts::SQRT_2, v / std::f64::consts::SQRT_2)
            * (std::f64::consts::PI / 2.0).sqrt()
    };
    let mut total = T::constant(0.0);
    match tail {
        Some((alpha, n)) => {
            if t1.value() < alpha.value() {
                let end = if t2.value() < alpha.value() {
                    t2
                } else {
                    alpha
                };
                total = total + core(t1, end);
            }
            if t2.value() > alpha.value() {
                let start = if t1.value() > alpha.value() {
                    t1
                } else {
                    alpha
                };
                total = total + power_tail(alpha, n, start, t2);
            }
        }
        None => total = core(t1, t2),
    }
    total
}

pub fn log_integral<T: Real>(tails: Tails, a: &[T], lo: f64, hi: f64) -> T {
    let p = tails.parts(a);
    let m0 = p.m0.value();
    let mut total = T::constant(0.0);
    if lo < m0 {
        // The left side, mirrored: t = (m0 − x)/σ_L from (m0 − min(hi, m0)) to (m0 − lo).
        let top = if hi < m0 { T::constant(hi) } else { p.m0 };
        total = total + side(p.left, (p.m0 - top) / p.sigma_l, (p.m0 - lo) / p.sigma_l) * p.sigma_l;
    }
    if hi > m0 {
        let bottom = if lo > m0 { T::constant(lo) } else { p.m0 };
        total = total
            + side(
                p.right,
                (bottom - p.m0) / p.sigma_r,
                (T::constant(hi) - p.m0) / p.sigma_r,
            ) * p.sigma_r;
    }
    total.ln()
}
