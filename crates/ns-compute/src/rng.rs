//! Philox4x32-10 (Salmon et al. 2011), a counter-based generator: the numbers of toy `i`, stream
//! `s`, seed `k` depend on nothing else, so toys are identical for any thread count (and, with
//! the same transforms, on a GPU). Samplers use [`crate::detmath`], whose CUDA twin in
//! `kernels/toys.cuh` makes the same bits come out on the CPU and the GPU.

use crate::detmath;

const M0: u32 = 0xD251_1F53;
const M1: u32 = 0xCD9E_8D57;
const W0: u32 = 0x9E37_79B9;
const W1: u32 = 0xBB67_AE85;

/// The Philox4x32-10 bijection of a 128-bit counter under a 64-bit key.
pub fn philox4x32(counter: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    let (mut c, mut k) = (counter, key);
    for round in 0..10 {
        if round > 0 {
            k[0] = k[0].wrapping_add(W0);
            k[1] = k[1].wrapping_add(W1);
        }
        let p0 = u64::from(M0) * u64::from(c[0]);
        let p1 = u64::from(M1) * u64::from(c[2]);
        c = [
            ((p1 >> 32) as u32) ^ c[1] ^ k[0],
            p1 as u32,
            ((p0 >> 32) as u32) ^ c[3] ^ k[1],
            p0 as u32,
        ];
    }
    c
}

/// Most draws of a rejection sampler of a bounded density before it gives up.
pub(crate) const MAX_REJECTIONS: u32 = 10_000;

/// A continuous Poisson density e^{tL − ln Γ(t+1)} on [0, high] as its sampler needs it: L,
/// the log of an envelope above its maximum, and its mode. Computed once per ensemble on the
/// host with [`crate::detmath`], so every device samples the same values.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ContinuousPoisson {
    pub log_rate: f64,
    pub log_max: f64,
    pub mode: f64,
}

impl ContinuousPoisson {
    /// The density of rate `rate` on [0, high] (a rate of zero as the smallest positive one).
    pub fn at(rate: f64, high: f64) -> Self {
        let log_rate = detmath::ln(rate.max(f64::MIN_POSITIVE));
        let f = |t: f64| t * log_rate - detmath::ln_gamma_1p(t);
        // The log-density is concave: golden-section search for its maximum.
        let (mut a, mut b) = (0.0, high);
        let ratio = 0.618_033_988_749_894_9;
        for _ in 0..200 {
            let (c, d) = (b - ratio * (b - a), a + ratio * (b - a));
            if f(c) < f(d) {
                a = c;
            } else {
                b = d;
            }
        }
        let mode = [0.0, 0.5 * (a + b), high]
            .into_iter()
            .fold(0.0, |best, t| if f(t) > f(best) { t } else { best });
        // A margin over rounding keeps the envelope above the density.
        let log_max = f(mode) + 1e-9 * (1.0 + f(mode).abs());
        ContinuousPoisson {
            log_rate,
            log_max,
            mode,
        }
    }
}

/// The random stream of one toy of one hypothesis.
#[derive(Clone, Debug)]
pub struct ToyStream {
    key: [u32; 2],
    toy: u32,
    stream: u32,
    block: u64,
    buffer: [u32; 4],
    used: usize,
}

impl ToyStream {
    pub fn new(seed: u64, stream: u32, toy: u32) -> Self {
        ToyStream {
            key: [seed as u32, (seed >> 32) as u32],
            toy,
            stream,
            block: 0,
            buffer: [0; 4],
            used: 4,
        }
    }

    fn next_u32(&mut self) -> u32 {
        if self.used == 4 {
            self.buffer = philox4x32(
                [
                    self.block as u32,
                    (self.block >> 32) as u32,
                    self.toy,
                    self.stream,
                ],
                self.key,
            );
            self.block += 1;
            self.used = 0;
        }
        self.used += 1;
        self.buffer[self.used - 1]
    }

    /// Uniform in (0, 1), 53 random bits, never 0 or 1.
    pub fn uniform(&mut self) -> f64 {
        let bits = (u64::from(self.next_u32() >> 5) << 26) | u64::from(self.next_u32() >> 6);
        (bits as f64 + 0.5) / (1u64 << 53) as f64
    }

    /// Standard normal by Box–Muller (one value per pair of uniforms).
    pub fn normal(&mut self) -> f64 {
        let (u, v) = (self.uniform(), self.uniform());
        (-2.0 * detmath::ln(u)).sqrt() * detmath::cos_2pi(v)
    }

    /// mean + σ·N(0, 1) conditioned on [low, high] (a global observable of bounded range), by
    /// rejection; the mean, clamped, after `MAX_REJECTIONS` draws outside.
    pub fn truncated_normal(&mut self, mean: f64, sigma: f64, low: f64, high: f64) -> f64 {
        for _ in 0..MAX_REJECTIONS {
            let x = mean + sigma * self.normal();
            if x >= low && x <= high {
                return x;
            }
        }
        mean.clamp(low, high)
    }

    /// A bifurcated normal around `mean` (the global observable of CMS Combine's asymmetric
    /// `param`, RooBifurGauss): above the mean with probability σ_above/(σ_below + σ_above),
    /// each side a half-normal of its own width. A uniform picks the side, then |N(0, 1)|.
    pub fn bifurcated_normal(&mut self, mean: f64, sigma_below: f64, sigma_above: f64) -> f64 {
        let above = self.uniform() * (sigma_below + sigma_above) < sigma_above;
        let z = self.normal().abs();
        if above {
            mean + sigma_above * z
        } else {
            mean - sigma_below * z
        }
    }

    /// A continuous Poisson datum on [0, high]: density ∝ e^{tL − ln Γ(t+1)} with L = ln λ, by
    /// rejection from the uniform under the envelope's maximum (`ContinuousPoisson::at`); its
    /// mode after `MAX_REJECTIONS` rejections.
    pub fn continuous_poisson(&mut self, shape: &ContinuousPoisson, high: f64) -> f64 {
        for _ in 0..MAX_REJECTIONS {
            let t = high * self.uniform();
            let u = self.uniform();
            if detmath::ln(u) <= t * shape.log_rate - detmath::ln_gamma_1p(t) - shape.log_max {
                return t;
            }
        }
        shape.mode
    }

    /// Poisson(λ): inversion below λ = 12, Hörmann's PTRS transformed rejection above.
    pub fn poisson(&mut self, lambda: f64) -> f64 {
        if !(lambda > 0.0) {
            return 0.0;
        }
        if lambda < 12.0 {
            let u = self.uniform();
            let mut p = detmath::exp(-lambda);
            let (mut k, mut cdf) = (0.0, p);
            while u > cdf && k < 1000.0 {
                k += 1.0;
                p *= lambda / k;
                cdf += p;
            }
            return k;
        }
        let slam = lambda.sqrt();
        let loglam = detmath::ln(lambda);
        let b = 0.931 + 2.53 * slam;
        let a = -0.059 + 0.02483 * b;
        let inv_alpha = 1.1239 + 1.1328 / (b - 3.4);
        let vr = 0.9277 - 3.6224 / (b - 2.0);
        loop {
            let u = self.uniform() - 0.5;
            let v = self.uniform();
            let us = 0.5 - u.abs();
            let k = f64::floor((2.0 * a / us + b) * u + lambda + 0.43);
            if us >= 0.07 && v <= vr {
                return k;
            }
            if k < 0.0 || (us < 0.013 && v > us) {
                continue;
            }
            if detmath::ln(v) + detmath::ln(inv_alpha) - detmath::ln(a / (us * us) + b)
                <= -lambda + k * loglam - detmath::ln_factorial(k)
            {
                return k;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn philox_matches_the_reference_vectors() {
        // Known-answer tests of Random123 (philox4x32_10).
        assert_eq!(
            philox4x32([0, 0, 0, 0], [0, 0]),
            [0x6627_e8d5, 0xe169_c58d, 0xbc57_ac4c, 0x9b00_dbd8]
        );
        assert_eq!(
            philox4x32([0xffff_ffff; 4], [0xffff_ffff; 2]),
            [0x408f_276d, 0x41c8_3b0e, 0xa20b_c7c6, 0x6d54_51fd]
        );
    }

    #[test]
    fn samplers_have_the_right_moments() {
        let mut s = ToyStream::new(42, 0, 7);
        let n = 200_000;
        for lambda in [0.5, 5.0, 40.0, 1000.0] {
            let xs: Vec<f64> = (0..n).map(|_| s.poisson(lambda)).collect();
            let mean = xs.iter().sum::<f64>() / n as f64;
            let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64;
            assert!(
                (mean - lambda).abs() < 5.0 * (lambda / n as f64).sqrt(),
                "λ={lambda}: mean {mean}"
            );
            assert!((var / lambda - 1.0).abs() < 0.03, "λ={lambda}: var {var}");
        }
        let zs: Vec<f64> = (0..n).map(|_| s.normal()).collect();
        let mean = zs.iter().sum::<f64>() / n as f64;
        let var = zs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64;
        assert!(mean.abs() < 0.01 && (var - 1.0).abs() < 0.02);
        // A bifurcated normal (widths 0.5 below, 2 above the mean 1): above with probability
        // 2/2.5, mean 1 + (2 − 0.5)·√(2/π) (each side's half-normal mean, weighted by its
        // probability: σ_a²/(σ_a + σ_b) − σ_b²/(σ_a + σ_b)).
        let xs: Vec<f64> = (0..n).map(|_| s.bifurcated_normal(1.0, 0.5, 2.0)).collect();
        let above = xs.iter().filter(|&&x| x > 1.0).count() as f64 / n as f64;
        assert!(
            (above - 0.8).abs() < 5.0 * (0.8f64 * 0.2 / n as f64).sqrt(),
            "{above}"
        );
        let mean = xs.iter().sum::<f64>() / n as f64;
        let want = 1.0 + (4.0 - 0.25) / 2.5 * (2.0 / std::f64::consts::PI).sqrt();
        assert!(
            (mean - want).abs() < 5.0 * 2.0 / (n as f64).sqrt(),
            "{mean} vs {want}"
        );
        // Same (seed, stream, toy) → same numbers.
        let (mut a, mut b) = (ToyStream::new(1, 1, 3), ToyStream::new(1, 1, 3));
        assert_eq!(a.poisson(17.0), b.poisson(17.0));
    }

    #[test]
    fn bounded_samplers_stay_in_range_with_the_right_means() {
        let mut s = ToyStream::new(5, 2, 11);
        let n = 200_000;
        // A γ's global observable N(1, 0.6) on [0, 10]: mean 1 + σ φ(a)/(1 − Φ(a)), a = −1/0.6.
        let xs: Vec<f64> = (0..n)
            .map(|_| s.truncated_normal(1.0, 0.6, 0.0, 10.0))
            .collect();
        assert!(xs.iter().all(|x| (0.0..=10.0).contains(x)));
        let a: f64 = -1.0 / 0.6;
        let density = (-0.5 * a * a).exp() / (2.0 * std::f64::consts::PI).sqrt();
        let tail = 0.5 * libm::erfc(a / std::f64::consts::SQRT_2);
        let want = 1.0 + 0.6 * density / tail;
        let mean = xs.iter().sum::<f64>() / n as f64;
        assert!(
            (mean - want).abs() < 5.0 * 0.6 / (n as f64).sqrt(),
            "{mean} vs {want}"
        );
        // ROOT's Gamma global observables: rates 11.1 and 4 (β = 1), 0.5 and 30, on [0, 10]; the
        // mean is the quadrature's E[t] = λ + θ·d ln N/dθ.
        for rate in [1.0 / 0.09, 4.0, 0.5, 30.0] {
            let shape = ContinuousPoisson::at(rate, 10.0);
            let ts: Vec<f64> = (0..n).map(|_| s.continuous_poisson(&shape, 10.0)).collect();
            assert!(ts.iter().all(|t| (0.0..=10.0).contains(t)));
            let range = ns_core::layout::PoissonRange {
                param: 0,
                tau: rate,
                high: 10.0,
            };
            let want = rate + range.log_norm(1.0).1;
            let mean = ts.iter().sum::<f64>() / n as f64;
            let spread = (ts.iter().map(|t| (t - mean).powi(2)).sum::<f64>() / n as f64).sqrt();
            assert!(
                (mean - want).abs() < 5.0 * spread / (n as f64).sqrt(),
                "rate {rate}: mean {mean} vs {want}"
            );
        }
    }
}
