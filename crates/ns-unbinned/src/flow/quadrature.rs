//! Tensor-product composite Gauss–Legendre quadrature over a box: how a flow's truncation
//! integral over the observables' ranges is measured.

/// Nodes and weights of the 8-point Gauss–Legendre rule on [−1, 1] (positive half).
const NODES: [f64; 4] = [
    0.183_434_642_495_649_8,
    0.525_532_409_916_329,
    0.796_666_477_413_626_7,
    0.960_289_856_497_536_3,
];
const WEIGHTS: [f64; 4] = [
    0.362_683_783_378_362,
    0.313_706_645_877_887_3,
    0.222_381_034_453_374_5,
    0.101_228_536_290_376_3,
];

/// The most observables a measured normalisation covers.
pub const MAX_DIMS: usize = 3;

/// Panels per observable: 1024 points in one dimension, 256² in two, 64³ in three.
pub fn panels(dims: usize) -> usize {
    match dims {
        1 => 128,
        2 => 32,
        _ => 8,
    }
}

/// The quadrature points of `bounds` (row-major, one row per point) and their ln weights.
pub fn grid(bounds: &[(f64, f64)]) -> (Vec<f64>, Vec<f64>) {
    let dims = bounds.len();
    let panels = panels(dims);
    let per_dim: Vec<Vec<(f64, f64)>> = bounds
        .iter()
        .map(|&(lo, hi)| {
            let width = (hi - lo) / panels as f64;
            let mut pts = Vec::with_capacity(panels * 8);
            for p in 0..panels {
                let mid = lo + (p as f64 + 0.5) * width;
                for (x, w) in NODES.iter().zip(&WEIGHTS) {
                    for sign in [-1.0, 1.0] {
                        pts.push((mid + sign * x * width / 2.0, w * width / 2.0));
                    }
                }
            }
            pts
        })
        .collect();
    let n_per = panels * 8;
    let total = n_per.pow(dims as u32);
    let mut points = Vec::with_capacity(total * dims);
    let mut ln_weights = Vec::with_capacity(total);
    for i in 0..total {
        let mut rest = i;
        let mut lw = 0.0;
        for axis in &per_dim {
            let (x, w) = axis[rest % n_per];
            rest /= n_per;
            points.push(x);
            lw += w.ln();
        }
        ln_weights.push(lw);
    }
    (points, ln_weights)
}

/// ln Σ exp(aᵢ + bᵢ), stable.
pub fn log_sum_exp(a: &[f64], b: &[f64]) -> f64 {
    let top = a
        .iter()
        .zip(b)
        .map(|(x, y)| x + y)
        .fold(f64::NEG_INFINITY, f64::max);
    if !top.is_finite() {
        return top;
    }
    top + a
        .iter()
        .zip(b)
        .map(|(x, y)| (x + y - top).exp())
        .sum::<f64>()
        .ln()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integrates_a_truncated_gaussian_and_a_product() {
        // ∫₋₁² N(x; 0.3, 0.7) dx against erf.
        let (pts, lw) = grid(&[(-1.0, 2.0)]);
        let (m, s) = (0.3, 0.7);
        let lp: Vec<f64> = pts
            .iter()
            .map(|x| -0.5 * ((x - m) / s).powi(2) - (s * (2.0 * std::f64::consts::PI).sqrt()).ln())
            .collect();
        let exact = 0.5
            * (libm::erf((2.0 - m) / (s * std::f64::consts::SQRT_2))
                - libm::erf((-1.0 - m) / (s * std::f64::consts::SQRT_2)));
        assert!((log_sum_exp(&lp, &lw) - exact.ln()).abs() < 1e-12);
        // ∫∫ x·y² over [0,1]×[0,2] = ½·8/3.
        let (pts, lw) = grid(&[(0.0, 1.0), (0.0, 2.0)]);
        let lp: Vec<f64> = pts
            .chunks(2)
            .map(|p| (p[0] * p[1] * p[1]).ln())
            .collect();
        assert!((log_sum_exp(&lp, &lw) - (4.0f64 / 3.0).ln()).abs() < 1e-12);
    }
}
