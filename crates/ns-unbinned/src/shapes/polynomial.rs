//! Shapes linear in their coefficients: RooChebychev's series of Chebychev polynomials on the
//! range mapped onto [−1, 1], and the power series of HS3's `polynomial_dist`. Integrated in
//! closed form term by term.

use crate::scalar::Real;

fn mapped(x: f64, range: (f64, f64)) -> f64 {
    (2.0 * x - (range.0 + range.1)) / (range.1 - range.0)
}

/// T_0(u), T_1(u), …, T_{n}(u).
fn chebychev_values(u: f64, n: usize) -> Vec<f64> {
    let mut t = vec![1.0, u];
    while t.len() <= n {
        let k = t.len();
        t.push(2.0 * u * t[k - 1] - t[k - 2]);
    }
    t.truncate(n + 1);
    t
}

/// 1 + Σ cᵢ·T_{i+1}(x′).
pub fn chebychev<T: Real>(x: f64, c: &[T], range: (f64, f64)) -> T {
    let t = chebychev_values(mapped(x, range), c.len() + 1);
    c.iter()
        .enumerate()
        .fold(T::constant(1.0), |acc, (i, &ci)| acc + ci * t[i + 1])
}

/// ∫ T_k(u) du from 0 to u.
fn chebychev_antiderivative(u: f64, k: usize) -> f64 {
    match k {
        0 => u,
        1 => 0.5 * u * u,
        _ => {
            let t = chebychev_values(u, k + 1);
            t[k + 1] / (2.0 * (k + 1) as f64) - t[k - 1] / (2.0 * (k - 1) as f64)
        }
    }
}

pub fn chebychev_integral<T: Real>(c: &[T], lo: f64, hi: f64, range: (f64, f64)) -> T {
    let (u, v) = (mapped(lo, range), mapped(hi, range));
    let jac = (range.1 - range.0) / 2.0;
    let basis = |k: usize| (chebychev_antiderivative(v, k) - chebychev_antiderivative(u, k)) * jac;
    c.iter()
        .enumerate()
        .fold(T::constant(basis(0)), |acc, (i, &ci)| {
            acc + ci * basis(i + 1)
        })
}

/// Σ aₖ·xᵏ.
pub fn power_series<T: Real>(x: f64, a: &[T]) -> T {
    a.iter()
        .rev()
        .fold(T::constant(0.0), |acc, &ak| acc * x + ak)
}

pub fn power_series_integral<T: Real>(a: &[T], lo: f64, hi: f64) -> T {
    a.iter()
        .enumerate()
        .fold(T::constant(0.0), |acc, (k, &ak)| {
            let e = (k + 1) as i32;
            acc + ak * ((hi.powi(e) - lo.powi(e)) / (k + 1) as f64)
        })
}
