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

/// ln A of the tail A·(B − |t|)^(−n) (continuous with the core at |t| = α): n ln(n/α) − α²/2.
fn ln_a<T: Real>(alpha: T, n: T) -> T {
    n * (n / alpha).ln() - alpha * alpha * 0.5
}

pub fn log_density<T: Real>(tails: Tails, x: f64, a: &[T]) -> T {
    let p = tails.parts(a);
    let below = x < p.m0.value();
    let t = (T::constant(x) - p.m0) / if below { p.sigma_l } else { p.sigma_r };
    let tail = if below { p.left } else { p.right };
    match tail {
        Some((alpha, n)) if t.abs().value() > alpha.value() => {
            ln_a(alpha, n) - n * (n / alpha - alpha + t.abs()).ln()
        }
        _ => t * t * -0.5,
    }
}

/// A·∫ s^(−n) ds over [s_near, s_far] (0 < s_near ≤ s_far), smooth through n = 1.
fn power_tail<T: Real>(alpha: T, n: T, s_near: T, s_far: T) -> T {
    let k = -(n - 1.0);
    let l = (s_far / s_near).ln();
    let kl = k * l;
    let ratio = if kl.value().abs() < 1e-12 {
        l * (kl * 0.5 + 1.0)
    } else {
        kl.exp_m1() / k
    };
    (ln_a(alpha, n) + k * s_near.ln()).exp() * ratio
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
                let b = n / alpha - alpha;
                total = total + power_tail(alpha, n, b + start, b + t2);
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
