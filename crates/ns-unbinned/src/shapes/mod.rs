//! The parametric shapes of the HS3 distributions: each a log-density (unnormalised) and the
//! logarithm of its integral over an interval, written once generically over [`Real`] so that
//! [`Dual`] numbers give their exact gradients in the shape's arguments. Normalisation is
//! analytic for every shape (ARGUS through the incomplete-gamma series); sampling inverts the
//! CDF where it is closed (exponential, histogram) and otherwise accepts or rejects against a
//! flat envelope above the shape's maximum on the range.

mod argus;
mod crystalball;
mod polynomial;

use ns_compute::rng::ToyStream;

use crate::scalar::{Dual, Real};

pub use crystalball::Tails;

/// A histogram density: uniform bins on `[lo, hi]` with their contents.
#[derive(Clone, Debug, PartialEq)]
pub struct Histogram {
    pub lo: f64,
    pub hi: f64,
    pub contents: Vec<f64>,
}

impl Histogram {
    fn width(&self) -> f64 {
        (self.hi - self.lo) / self.contents.len() as f64
    }

    fn log_density(&self, x: f64) -> f64 {
        self.bin(x)
            .map_or(0.0, |i| self.contents[i] / self.width())
            .ln()
    }

    fn bin(&self, x: f64) -> Option<usize> {
        if !(x >= self.lo && x <= self.hi) {
            return None;
        }
        Some((((x - self.lo) / self.width()) as usize).min(self.contents.len() - 1))
    }

    fn integral(&self, a: f64, b: f64) -> f64 {
        let w = self.width();
        self.contents
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let (l, h) = (self.lo + i as f64 * w, self.lo + (i + 1) as f64 * w);
                let overlap = (h.min(b) - l.max(a)).max(0.0);
                c * overlap / w
            })
            .sum()
    }
}

/// A shape and the meaning of its arguments.
#[derive(Clone, Debug, PartialEq)]
pub enum Shape {
    /// exp(−(x − mean)²/2σ²); arguments: mean, sigma.
    Gaussian,
    /// exp(−c·x) (HS3's sign; RooFit's exp(c·x) is written with c = −c); argument: c.
    Exponential,
    /// The Crystal Ball: a Gaussian core with power-law tails ([`Tails`] says which and how
    /// the arguments read).
    CrystalBall(Tails),
    /// m·(1 − (m/m0)²)^p·exp(c·(1 − (m/m0)²)) below m0; arguments: m0, c, p.
    Argus,
    /// 1 + Σ cᵢ·T_{i+1}(x′), x′ the observable mapped onto [−1, 1]; arguments: the cᵢ.
    Chebychev(usize),
    /// Σ aₖ·xᵏ from k = 0; arguments: the aₖ.
    Polynomial(usize),
    /// A fixed histogram; no arguments.
    Histogram(Histogram),
}

/// The most arguments a shape takes (its gradient is carried in one forward pass).
pub const MAX_ARGS: usize = 8;

impl Shape {
    /// ln g(x) at arguments `a`, on the observable range `range` (which maps Chebychev's x).
    pub fn log_density<T: Real>(&self, x: f64, a: &[T], range: (f64, f64)) -> T {
        match self {
            Shape::Gaussian => gaussian(x, a),
            Shape::Exponential => exponential(x, a, range),
            Shape::CrystalBall(tails) => crystalball::log_density(*tails, x, a),
            Shape::Argus => argus::log_density(x, a),
            Shape::Chebychev(_) => polynomial::chebychev(x, a, range).ln(),
            Shape::Polynomial(_) => polynomial::power_series(x, a).ln(),
            Shape::Histogram(h) => T::constant(h.log_density(x)),
        }
    }

    /// ln ∫ g over `[lo, hi]` (within the observable range `range`), on the same scale as
    /// [`log_density`](Self::log_density).
    pub fn log_integral<T: Real>(&self, a: &[T], lo: f64, hi: f64, range: (f64, f64)) -> T {
        match self {
            Shape::Gaussian => {
                let s2 = a[1] * std::f64::consts::SQRT_2;
                let (u, v) = ((T::constant(lo) - a[0]) / s2, (T::constant(hi) - a[0]) / s2);
                (a[1] * (std::f64::consts::PI / 2.0).sqrt() * erf_difference(u, v)).ln()
            }
            Shape::Exponential => {
                // ∫_lo^hi exp(−c(x − range.0)) dx = exp(−c(lo − range.0))·(1 − exp(−cΔ))/c.
                // A rising exponential (c < 0) takes its largest factor out, e^{−cΔ}, so a
                // steep one (c = −200 on [0, 10]: e^2000) stays finite in logarithms.
                let c = a[0];
                let delta = hi - lo;
                let cd = c * delta;
                let ln_span = if cd.value().abs() < 1e-8 {
                    ((T::constant(1.0) - cd * 0.5 + cd * cd / 6.0) * delta).ln()
                } else if cd.value() > 0.0 {
                    (-(-cd).exp_m1() / c).ln()
                } else {
                    -cd + (cd.exp_m1() / c).ln()
                };
                c * -(lo - range.0) + ln_span
            }
            Shape::CrystalBall(tails) => crystalball::log_integral(*tails, a, lo, hi),
            Shape::Argus => argus::log_integral(a, lo, hi),
            Shape::Chebychev(_) => polynomial::chebychev_integral(a, lo, hi, range).ln(),
            Shape::Polynomial(_) => polynomial::power_series_integral(a, lo, hi).ln(),
            Shape::Histogram(h) => T::constant(h.integral(lo, hi).ln()),
        }
    }

    /// ln of the normalisation and its gradient in the arguments `a` (first `n_args` slots).
    pub fn log_norm_grad(&self, a: &[f64], range: (f64, f64), grad: &mut [f64]) -> f64 {
        let duals: [Dual<MAX_ARGS>; MAX_ARGS] =
            std::array::from_fn(|i| Dual::input(a.get(i).copied().unwrap_or(0.0), i));
        let r = self.log_integral(&duals[..a.len()], range.0, range.1, range);
        grad[..a.len()].copy_from_slice(&r.d[..a.len()]);
        r.v
    }

    /// Every event of `xs`: ln g and its derivatives in the arguments (rows of `n_args`,
    /// argument-major: `dlog[j * xs.len() + e]`).
    pub fn log_density_grad(
        &self,
        xs: &[f64],
        a: &[f64],
        range: (f64, f64),
        log: &mut [f64],
        dlog: &mut [f64],
    ) {
        log_density_grad_dispatched(self, xs, a, range, log, dlog);
    }

    /// The largest value of g on `[lo, hi]` (for accept–reject), with a margin where it is
    /// found numerically.
    fn max_on(&self, a: &[f64], lo: f64, hi: f64) -> f64 {
        let at = |x: f64| self.log_density::<f64>(x, a, (lo, hi)).exp();
        match self {
            Shape::Gaussian => at(a[0].clamp(lo, hi)),
            Shape::CrystalBall(tails) => at(tails.peak(a).clamp(lo, hi)),
            _ => {
                // A grid, refined around its best point: smooth shapes with few extrema.
                const GRID: usize = 4096;
                let step = (hi - lo) / GRID as f64;
                let (best, mut top) = (0..=GRID)
                    .map(|i| {
                        let x = lo + i as f64 * step;
                        (x, at(x))
                    })
                    .fold((lo, 0.0f64), |b, p| if p.1 > b.1 { p } else { b });
                let (mut l, mut h) = ((best - step).max(lo), (best + step).min(hi));
                for _ in 0..60 {
                    let (m1, m2) = (l + (h - l) / 3.0, h - (h - l) / 3.0);
                    if at(m1) < at(m2) {
                        l = m1;
                    } else {
                        h = m2;
                    }
                    top = top.max(at(m1)).max(at(m2));
                }
                top * 1.05
            }
        }
    }

    /// A prepared sampler of this shape at arguments `a` on `range`; an error where the shape
    /// cannot be sampled there (no mass in the range, or so peaked that accept–reject would
    /// take more than 1/[`MIN_ACCEPTANCE`] tries an event).
    pub fn sampler<'a>(&'a self, a: &'a [f64], range: (f64, f64)) -> Result<Sampler<'a>, String> {
        let (lo, hi) = range;
        // In logarithms: a steep exponential's integral (e^2000) is beyond f64, its log is not.
        let ln_integral = self.log_integral::<f64>(a, lo, hi, range);
        if !ln_integral.is_finite() {
            return Err(format!(
                "its integral over [{lo}, {hi}] is {}",
                ln_integral.exp()
            ));
        }
        let integral = ln_integral.exp();
        let (top, normal_draws) = match self {
            Shape::Exponential | Shape::Histogram(_) => (0.0, false),
            _ if !integral.is_finite() => {
                return Err(format!("its integral over [{lo}, {hi}] is {integral}"));
            }
            _ => {
                let top = self.max_on(a, lo, hi);
                let envelope = integral / (top * (hi - lo));
                // A Gaussian is drawn as a normal kept inside the range where that accepts
                // more often than the flat envelope (its acceptance is the range's mass).
                let mass = match self {
                    Shape::Gaussian => integral / (a[1] * (2.0 * std::f64::consts::PI).sqrt()),
                    _ => 0.0,
                };
                let acceptance = envelope.max(mass);
                if !(acceptance >= MIN_ACCEPTANCE) {
                    return Err(format!(
                        "it is too peaked in [{lo}, {hi}] to sample by accept–reject (acceptance {acceptance:e})"
                    ));
                }
                (top, mass > envelope)
            }
        };
        Ok(Sampler {
            shape: self,
            a,
            range,
            top,
            normal_draws,
        })
    }
}

fn gaussian<T: Real>(x: f64, a: &[T]) -> T {
    // By the reciprocal, which a loop over events computes once (divisions are slow).
    let t = (T::constant(x) - a[0]) * (T::constant(1.0) / a[1]);
    t * t * -0.5
}

fn exponential<T: Real>(x: f64, a: &[T], range: (f64, f64)) -> T {
    a[0] * -(x - range.0)
}

ns_core::simd_dispatched! {
    /// [`Shape::log_density_grad`], its loops compiled for each instruction set.
    fn log_density_grad_dispatched(
        shape: &Shape,
        xs: &[f64],
        a: &[f64],
        range: (f64, f64),
        log: &mut [f64],
        dlog: &mut [f64],
    ) -> () {
        match shape {
            Shape::Gaussian => chunk::<2>(xs, a, log, dlog, gaussian),
            Shape::Exponential => chunk::<1>(xs, a, log, dlog, |x, a| exponential(x, a, range)),
            Shape::CrystalBall(t @ Tails::OneSided) => {
                chunk::<4>(xs, a, log, dlog, |x, a| crystalball::log_density(*t, x, a))
            }
            Shape::CrystalBall(t) => {
                chunk::<7>(xs, a, log, dlog, |x, a| crystalball::log_density(*t, x, a))
            }
            Shape::Argus => chunk::<3>(xs, a, log, dlog, argus::log_density),
            Shape::Chebychev(_) => chunk::<MAX_ARGS>(xs, a, log, dlog, |x, a| {
                polynomial::chebychev(x, a, range).ln()
            }),
            Shape::Polynomial(_) => {
                chunk::<MAX_ARGS>(xs, a, log, dlog, |x, a| polynomial::power_series(x, a).ln())
            }
            Shape::Histogram(h) => {
                for (l, &x) in log.iter_mut().zip(xs) {
                    *l = h.log_density(x);
                }
            }
        }
    }
}

/// ln g and its argument derivatives at each event, `density` evaluated on dual numbers of
/// `N` slots (the first `a.len()` seeded).
#[inline(always)]
fn chunk<const N: usize>(
    xs: &[f64],
    a: &[f64],
    log: &mut [f64],
    dlog: &mut [f64],
    density: impl Fn(f64, &[Dual<N>]) -> Dual<N>,
) {
    let k = a.len();
    let duals: [Dual<N>; N] =
        std::array::from_fn(|i| Dual::input(a.get(i).copied().unwrap_or(0.0), i));
    let n = xs.len();
    let (log, dlog) = (&mut log[..n], &mut dlog[..k * n]);
    // The k rows as slices of their own, written event by event (no index arithmetic across
    // rows in the loop).
    let mut rows = dlog.chunks_exact_mut(n.max(1));
    let mut rows: [&mut [f64]; N] = std::array::from_fn(|_| rows.next().unwrap_or_default());
    if k == N && n > 0 {
        // Every slot an argument: a fixed count of rows of length n, so the loop over events
        // vectorises.
        for (e, (&x, l)) in xs.iter().zip(log.iter_mut()).enumerate() {
            let r = density(x, &duals);
            *l = r.v;
            for (row, d) in rows.iter_mut().zip(r.d) {
                row[e] = d;
            }
        }
        return;
    }
    let rows = &mut rows[..k];
    for (e, (&x, l)) in xs.iter().zip(log.iter_mut()).enumerate() {
        let r = density(x, &duals[..k]);
        *l = r.v;
        for (row, d) in rows.iter_mut().zip(r.d) {
            row[e] = d;
        }
    }
}

/// erf(v) − erf(u) for u ≤ v, through erfc where both lie in one tail (no cancellation).
fn erf_difference<T: Real>(u: T, v: T) -> T {
    if u.value() >= 0.0 {
        u.erfc() - v.erfc()
    } else if v.value() <= 0.0 {
        (-v).erfc() - (-u).erfc()
    } else {
        v.erf() - u.erf()
    }
}

/// The smallest acceptance rate a sampler runs at: at most 10⁴ tries an event on average.
pub const MIN_ACCEPTANCE: f64 = 1e-4;

/// The most tries for one event (a hard stop far beyond what [`MIN_ACCEPTANCE`] lets happen).
const MAX_TRIES: usize = 100_000_000;

/// Draws from one shape at fixed arguments.
pub struct Sampler<'a> {
    shape: &'a Shape,
    a: &'a [f64],
    range: (f64, f64),
    top: f64,
    normal_draws: bool,
}

impl Sampler<'_> {
    pub fn draw(&self, rng: &mut ToyStream) -> Result<f64, String> {
        let (lo, hi) = self.range;
        Ok(match self.shape {
            Shape::Exponential => {
                // Inverse CDF of exp(−c(x − lo)) on [lo, hi].
                let c = self.a[0];
                let u = rng.uniform();
                let x = if (c * (hi - lo)).abs() < 1e-12 {
                    lo + u * (hi - lo)
                } else if c > 0.0 {
                    lo - (u * (-c * (hi - lo)).exp_m1()).ln_1p() / c
                } else {
                    // Rising: drawn from the top end, where e^{c(hi − x)} is at most 1.
                    hi - (u * (c * (hi - lo)).exp_m1()).ln_1p() / c
                };
                x.clamp(lo, hi)
            }
            Shape::Histogram(h) => {
                let total = h.integral(lo, hi);
                let target = rng.uniform() * total;
                let w = h.width();
                let mut acc = 0.0;
                for (i, c) in h.contents.iter().enumerate() {
                    let (l, r) = (
                        (h.lo + i as f64 * w).max(lo),
                        (h.lo + (i + 1) as f64 * w).min(hi),
                    );
                    let mass = c * (r - l).max(0.0) / w;
                    if acc + mass >= target && mass > 0.0 {
                        return Ok(l + (target - acc) / mass * (r - l));
                    }
                    acc += mass;
                }
                hi
            }
            Shape::Gaussian if self.normal_draws => {
                for _ in 0..MAX_TRIES {
                    let x = self.a[0] + self.a[1] * rng.normal();
                    if x >= lo && x <= hi {
                        return Ok(x);
                    }
                }
                return Err(format!("no draw fell in [{lo}, {hi}] in {MAX_TRIES} tries"));
            }
            _ => {
                for _ in 0..MAX_TRIES {
                    let x = lo + rng.uniform() * (hi - lo);
                    let g = self.shape.log_density::<f64>(x, self.a, self.range).exp();
                    if rng.uniform() * self.top < g {
                        return Ok(x);
                    }
                }
                return Err(format!("no draw was accepted in {MAX_TRIES} tries"));
            }
        })
    }
}

#[cfg(test)]
mod tests;
