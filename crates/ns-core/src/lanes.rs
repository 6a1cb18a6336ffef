//! Sums in four interleaved partial sums: a vector wide, and in the same order on every machine
//! and instruction set (no reassociation beyond the fixed lanes), so results stay bit-identical.

/// Values per partial sum group.
pub const LANES: usize = 4;

/// Σ a·b over the common length.
#[inline(always)]
pub fn dot(a: &[f64], b: &[f64]) -> f64 {
    let (ca, cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let tail: f64 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    let mut acc = [0.0; LANES];
    for (x, y) in ca.zip(cb) {
        for k in 0..LANES {
            acc[k] += x[k] * y[k];
        }
    }
    (acc[0] + acc[1]) + (acc[2] + acc[3]) + tail
}
