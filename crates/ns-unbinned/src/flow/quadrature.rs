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

/// The relative accuracy the grid is refined to (an estimate from successive refinements).
pub const TARGET: f64 = 1e-10;

/// Accepted where the point budget runs out before [`TARGET`].
pub const ACCEPTED: f64 = 1e-7;

/// The most points a grid may have, per number of observables.
fn budget(dims: usize) -> usize {
    match dims {
        1 => 1 << 18,
        2 => 1 << 22,
        _ => 1 << 24,
    }
}

/// A quadrature grid: points (row-major) and their ln weights.
pub type Grid = (Vec<f64>, Vec<f64>);

/// The log-density at a batch of points (row-major).
pub type LogDensity<'a> = dyn FnMut(&[f64]) -> Result<Vec<f64>, ns_core::Error> + 'a;

/// The 8-point rule on [lo, hi]: (x, w) pairs.
fn panel(lo: f64, hi: f64) -> impl Iterator<Item = (f64, f64)> {
    let (mid, half) = ((lo + hi) / 2.0, (hi - lo) / 2.0);
    NODES
        .iter()
        .zip(&WEIGHTS)
        .flat_map(move |(x, w)| [(mid - x * half, w * half), (mid + x * half, w * half)])
}

/// A grid refined for `log_f` (log-values at a batch of points) over `bounds`: in one
/// dimension adaptively (a panel is halved while its 8-point rule and that of its halves differ
/// by more than [`TARGET`] of the total), in more by doubling the panels of every axis until
/// the integral moves by less than [`TARGET`]; accepted at [`ACCEPTED`] where the budget ends,
/// an error beyond. Deterministic: the same flow gives the same grid.
pub fn refined_grid(bounds: &[(f64, f64)], log_f: &mut LogDensity) -> Result<Grid, ns_core::Error> {
    let dims = bounds.len();
    if dims == 1 {
        return adaptive_1d(bounds[0], log_f);
    }
    let mut panels = if dims == 2 { 16 } else { 8 };
    let mut grid = tensor_grid(bounds, panels);
    let mut z = log_sum_exp(&log_f(&grid.0)?, &grid.1);
    loop {
        let finer = tensor_grid(bounds, panels * 2);
        let z_finer = log_sum_exp(&log_f(&finer.0)?, &finer.1);
        let change = (z_finer - z).abs();
        grid = finer;
        z = z_finer;
        panels *= 2;
        if change < TARGET {
            return Ok(grid);
        }
        if (panels * 2 * 8).pow(dims as u32) > budget(dims) {
            if change < ACCEPTED {
                return Ok(grid);
            }
            return Err(not_converged(change, grid.1.len()));
        }
    }
}

fn not_converged(change: f64, points: usize) -> ns_core::Error {
    ns_core::Error::Computation(format!(
        "the flow's integral over its box does not settle: the last refinement moved ln Z by {change:e} at {points} points (more than {ACCEPTED:e})"
    ))
}

fn adaptive_1d((lo, hi): (f64, f64), log_f: &mut LogDensity) -> Result<Grid, ns_core::Error> {
    // Panels to test: each gives its rule (8 points) then its halves' (16 points).
    let mut open: Vec<(f64, f64)> = (0..64)
        .map(|i| {
            (
                lo + (hi - lo) * i as f64 / 64.0,
                lo + (hi - lo) * (i + 1) as f64 / 64.0,
            )
        })
        .collect();
    let mut done: Vec<(f64, f64)> = Vec::new();
    let mut total: Option<f64> = None;
    while !open.is_empty() {
        let mut x = Vec::with_capacity(open.len() * 24);
        let mut w = Vec::with_capacity(open.len() * 24);
        for &(a, b) in &open {
            let m = (a + b) / 2.0;
            for (px, pw) in panel(a, b).chain(panel(a, m)).chain(panel(m, b)) {
                x.push(px);
                w.push(pw);
            }
        }
        let values: Vec<f64> = log_f(&x)?
            .iter()
            .zip(&w)
            .map(|(l, w)| l.exp() * w)
            .collect();
        let sums: Vec<(f64, f64)> = values
            .chunks(24)
            .map(|c| (c[..8].iter().sum(), c[8..].iter().sum()))
            .collect();
        let z = *total.get_or_insert_with(|| sums.iter().map(|s| s.1).sum::<f64>());
        if !(z > 0.0 && z.is_finite()) {
            return Err(ns_core::Error::Computation(format!(
                "the flow's integral over [{lo}, {hi}] is {z}"
            )));
        }
        let mut next = Vec::new();
        for (&(a, b), (coarse, fine)) in open.iter().zip(&sums) {
            if (coarse - fine).abs() <= TARGET * z {
                done.push((a, b));
            } else {
                let m = (a + b) / 2.0;
                next.push((a, m));
                next.push((m, b));
            }
        }
        if (done.len() + next.len()) * 16 > budget(1) {
            let left: f64 = open
                .iter()
                .zip(&sums)
                .filter(|(p, _)| !done.contains(p))
                .map(|(_, (c, f))| (c - f).abs())
                .sum();
            if left < ACCEPTED * z {
                done.extend(next);
                break;
            }
            return Err(not_converged(left / z, (done.len() + next.len()) * 16));
        }
        open = next;
    }
    // Every accepted panel by its halves' rules (the finer of the two it was judged by).
    done.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut points = Vec::with_capacity(done.len() * 16);
    let mut ln_w = Vec::with_capacity(done.len() * 16);
    for (a, b) in done {
        let m = (a + b) / 2.0;
        for (x, w) in panel(a, m).chain(panel(m, b)) {
            points.push(x);
            ln_w.push(w.ln());
        }
    }
    Ok((points, ln_w))
}

/// The tensor product of `panels` 8-point panels per axis.
fn tensor_grid(bounds: &[(f64, f64)], panels: usize) -> Grid {
    let dims = bounds.len();
    let per_dim: Vec<Vec<(f64, f64)>> = bounds
        .iter()
        .map(|&(lo, hi)| {
            (0..panels)
                .flat_map(|p| {
                    let width = (hi - lo) / panels as f64;
                    panel(lo + p as f64 * width, lo + (p + 1) as f64 * width)
                })
                .collect()
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

    fn gaussian(m: f64, s: f64) -> impl FnMut(&[f64]) -> Result<Vec<f64>, ns_core::Error> {
        move |x: &[f64]| {
            Ok(x.iter()
                .map(|x| {
                    -0.5 * ((x - m) / s).powi(2) - (s * (2.0 * std::f64::consts::PI).sqrt()).ln()
                })
                .collect())
        }
    }

    #[test]
    fn integrates_a_narrow_truncated_gaussian_adaptively() {
        let (m, s) = (0.3, 0.01);
        let mut f = gaussian(m, s);
        let (pts, lw) = refined_grid(&[(-1.0, 2.0)], &mut f).unwrap();
        let exact = 0.5
            * (libm::erf((2.0 - m) / (s * std::f64::consts::SQRT_2))
                - libm::erf((-1.0 - m) / (s * std::f64::consts::SQRT_2)));
        let z = log_sum_exp(&f(&pts).unwrap(), &lw);
        assert!((z - exact.ln()).abs() < 1e-9, "{z} against {}", exact.ln());
        // Refined where the density is: far fewer points than a uniform grid that fine.
        assert!(pts.len() < 4000, "{}", pts.len());
    }

    #[test]
    fn integrates_a_product_by_doubling() {
        // ∫∫ N(x; 0.5, 0.2)·N(y; 1, 0.5) over [0,1]×[0,2].
        let mut f = |p: &[f64]| -> Result<Vec<f64>, ns_core::Error> {
            let mut gx = gaussian(0.5, 0.2);
            let mut gy = gaussian(1.0, 0.5);
            let xs: Vec<f64> = p.chunks(2).map(|c| c[0]).collect();
            let ys: Vec<f64> = p.chunks(2).map(|c| c[1]).collect();
            Ok(gx(&xs)?.iter().zip(gy(&ys)?).map(|(a, b)| a + b).collect())
        };
        let (pts, lw) = refined_grid(&[(0.0, 1.0), (0.0, 2.0)], &mut f).unwrap();
        let cdf =
            |v: f64, m: f64, s: f64| 0.5 * libm::erfc(-(v - m) / (s * std::f64::consts::SQRT_2));
        let exact =
            (cdf(1.0, 0.5, 0.2) - cdf(0.0, 0.5, 0.2)) * (cdf(2.0, 1.0, 0.5) - cdf(0.0, 1.0, 0.5));
        assert!((log_sum_exp(&f(&pts).unwrap(), &lw) - exact.ln()).abs() < 1e-10);
    }
}
