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
        // Same (seed, stream, toy) → same numbers.
        let (mut a, mut b) = (ToyStream::new(1, 1, 3), ToyStream::new(1, 1, 3));
        assert_eq!(a.poisson(17.0), b.poisson(17.0));
    }
}
