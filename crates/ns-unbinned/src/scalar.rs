//! The arithmetic PDFs are written in once: [`Real`] is implemented by `f64` and by the
//! forward-mode dual number [`Dual`], which carries exact first derivatives with respect to
//! `N` seeded inputs. Shapes and their normalisation integrals are generic over `Real`, so
//! their analytic gradients come from the same code as their values.

// The product and quotient rules mix operators inside `Mul` and `Div`: that is their meaning.
#![allow(clippy::suspicious_arithmetic_impl)]

use std::ops::{Add, Div, Mul, Neg, Sub};

/// A number PDFs compute with: its value, and whatever derivatives it carries.
pub trait Real:
    Copy
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + Neg<Output = Self>
    + Add<f64, Output = Self>
    + Sub<f64, Output = Self>
    + Mul<f64, Output = Self>
    + Div<f64, Output = Self>
{
    fn constant(v: f64) -> Self;
    fn value(self) -> f64;
    fn exp(self) -> Self;
    fn ln(self) -> Self;
    fn sqrt(self) -> Self;
    fn erf(self) -> Self;
    fn erfc(self) -> Self;
    fn sin(self) -> Self;
    fn cos(self) -> Self;
    /// `exp(self) − 1`, accurate near 0.
    fn exp_m1(self) -> Self;
    /// `ln(1 + self)`, accurate near 0.
    fn ln_1p(self) -> Self;
    fn powf(self, e: Self) -> Self {
        (self.ln() * e).exp()
    }
    fn powi(self, n: i32) -> Self;
    fn abs(self) -> Self {
        if self.value() < 0.0 { -self } else { self }
    }
}

impl Real for f64 {
    fn constant(v: f64) -> Self {
        v
    }
    fn value(self) -> f64 {
        self
    }
    fn exp(self) -> Self {
        f64::exp(self)
    }
    fn ln(self) -> Self {
        f64::ln(self)
    }
    fn sqrt(self) -> Self {
        f64::sqrt(self)
    }
    fn erf(self) -> Self {
        libm::erf(self)
    }
    fn erfc(self) -> Self {
        libm::erfc(self)
    }
    fn sin(self) -> Self {
        f64::sin(self)
    }
    fn cos(self) -> Self {
        f64::cos(self)
    }
    fn exp_m1(self) -> Self {
        f64::exp_m1(self)
    }
    fn ln_1p(self) -> Self {
        f64::ln_1p(self)
    }
    fn powf(self, e: Self) -> Self {
        f64::powf(self, e)
    }
    fn powi(self, n: i32) -> Self {
        f64::powi(self, n)
    }
}

/// A value and its derivatives with respect to `N` inputs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Dual<const N: usize> {
    pub v: f64,
    pub d: [f64; N],
}

impl<const N: usize> Dual<N> {
    /// Input `i` of `N` with value `v` (its derivative with respect to itself is 1).
    pub fn input(v: f64, i: usize) -> Self {
        let mut d = [0.0; N];
        d[i] = 1.0;
        Dual { v, d }
    }

    /// `N` inputs seeded from `values`, the `i`-th carrying derivative 1 in slot `i`.
    pub fn inputs(values: [f64; N]) -> [Self; N] {
        std::array::from_fn(|i| Dual::input(values[i], i))
    }

    /// The chain rule: a function of this value with value `f` and derivative `df`.
    #[inline(always)]
    fn chain(self, f: f64, df: f64) -> Self {
        Dual {
            v: f,
            d: self.d.map(|x| x * df),
        }
    }
}

impl<const N: usize> Add for Dual<N> {
    type Output = Self;
    #[inline(always)]
    fn add(self, o: Self) -> Self {
        Dual {
            v: self.v + o.v,
            d: std::array::from_fn(|i| self.d[i] + o.d[i]),
        }
    }
}

impl<const N: usize> Sub for Dual<N> {
    type Output = Self;
    #[inline(always)]
    fn sub(self, o: Self) -> Self {
        Dual {
            v: self.v - o.v,
            d: std::array::from_fn(|i| self.d[i] - o.d[i]),
        }
    }
}

impl<const N: usize> Mul for Dual<N> {
    type Output = Self;
    #[inline(always)]
    fn mul(self, o: Self) -> Self {
        Dual {
            v: self.v * o.v,
            d: std::array::from_fn(|i| self.d[i] * o.v + self.v * o.d[i]),
        }
    }
}

impl<const N: usize> Div for Dual<N> {
    type Output = Self;
    #[inline(always)]
    fn div(self, o: Self) -> Self {
        let q = self.v / o.v;
        Dual {
            v: q,
            d: std::array::from_fn(|i| (self.d[i] - q * o.d[i]) / o.v),
        }
    }
}

impl<const N: usize> Neg for Dual<N> {
    type Output = Self;
    #[inline(always)]
    fn neg(self) -> Self {
        Dual {
            v: -self.v,
            d: self.d.map(|x| -x),
        }
    }
}

impl<const N: usize> Add<f64> for Dual<N> {
    type Output = Self;
    #[inline(always)]
    fn add(self, o: f64) -> Self {
        Dual {
            v: self.v + o,
            d: self.d,
        }
    }
}

impl<const N: usize> Sub<f64> for Dual<N> {
    type Output = Self;
    #[inline(always)]
    fn sub(self, o: f64) -> Self {
        Dual {
            v: self.v - o,
            d: self.d,
        }
    }
}

impl<const N: usize> Mul<f64> for Dual<N> {
    type Output = Self;
    #[inline(always)]
    fn mul(self, o: f64) -> Self {
        Dual {
            v: self.v * o,
            d: self.d.map(|x| x * o),
        }
    }
}

impl<const N: usize> Div<f64> for Dual<N> {
    type Output = Self;
    #[inline(always)]
    fn div(self, o: f64) -> Self {
        Dual {
            v: self.v / o,
            d: self.d.map(|x| x / o),
        }
    }
}

impl<const N: usize> Real for Dual<N> {
    fn constant(v: f64) -> Self {
        Dual { v, d: [0.0; N] }
    }
    fn value(self) -> f64 {
        self.v
    }
    #[inline(always)]
    fn exp(self) -> Self {
        let e = self.v.exp();
        self.chain(e, e)
    }
    #[inline(always)]
    fn ln(self) -> Self {
        self.chain(self.v.ln(), 1.0 / self.v)
    }
    fn sqrt(self) -> Self {
        let s = self.v.sqrt();
        self.chain(s, 0.5 / s)
    }
    fn erf(self) -> Self {
        let slope = std::f64::consts::FRAC_2_SQRT_PI * (-self.v * self.v).exp();
        self.chain(libm::erf(self.v), slope)
    }
    fn erfc(self) -> Self {
        let slope = -std::f64::consts::FRAC_2_SQRT_PI * (-self.v * self.v).exp();
        self.chain(libm::erfc(self.v), slope)
    }
    fn sin(self) -> Self {
        self.chain(self.v.sin(), self.v.cos())
    }
    fn cos(self) -> Self {
        self.chain(self.v.cos(), -self.v.sin())
    }
    fn exp_m1(self) -> Self {
        self.chain(self.v.exp_m1(), self.v.exp())
    }
    fn ln_1p(self) -> Self {
        self.chain(self.v.ln_1p(), 1.0 / (1.0 + self.v))
    }
    fn powf(self, e: Self) -> Self {
        let p = self.v.powf(e.v);
        // d(a^b) = b a^(b−1) da + a^b ln a db; the ln a term only where b varies.
        let da = if self.v == 0.0 { 0.0 } else { e.v * p / self.v };
        let db = if e.d.iter().all(|&x| x == 0.0) {
            0.0
        } else {
            p * self.v.ln()
        };
        Dual {
            v: p,
            d: std::array::from_fn(|i| da * self.d[i] + db * e.d[i]),
        }
    }
    fn powi(self, n: i32) -> Self {
        let p = self.v.powi(n);
        let slope = if n == 0 {
            0.0
        } else {
            n as f64 * self.v.powi(n - 1)
        };
        self.chain(p, slope)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check<F: Fn(Dual<2>) -> Dual<2>>(f: F, g: fn(f64) -> f64, x: f64) {
        let d = f(Dual::input(x, 0));
        let h = 1e-6 * x.abs().max(1.0);
        let numeric = (g(x + h) - g(x - h)) / (2.0 * h);
        assert!((d.v - g(x)).abs() <= 1e-14 * g(x).abs().max(1.0));
        assert!(
            (d.d[0] - numeric).abs() <= 1e-7 * numeric.abs().max(1.0),
            "{} against {numeric}",
            d.d[0]
        );
        assert_eq!(d.d[1], 0.0);
    }

    #[test]
    fn derivatives_match_finite_differences() {
        check(|x| x.exp(), f64::exp, 0.7);
        check(|x| x.ln(), f64::ln, 2.3);
        check(|x| x.sqrt(), f64::sqrt, 2.3);
        check(|x| x.erf(), libm::erf, 0.4);
        check(|x| x.erfc(), libm::erfc, 1.4);
        check(|x| x.sin() * x.cos(), |x| x.sin() * x.cos(), 0.4);
        check(|x| x.exp_m1() / x, |x| x.exp_m1() / x, 1e-3);
        check(|x| x.ln_1p(), f64::ln_1p, 0.2);
        check(|x| x.powi(3) - x * 2.0, |x| x.powi(3) - 2.0 * x, 1.5);
        check(|x| x.powf(x + 1.0), |x| x.powf(x + 1.0), 1.3);
        check(|x| (-x).abs() / (x + 1.0), |x| x.abs() / (x + 1.0), 0.8);
    }
}
