//! Small dense linear algebra (row-major `Vec<f64>`): what the optimizer's 2m×2m systems and the
//! covariance of a fit need, nothing more.

/// Solve `A x = b` in place by Gaussian elimination with partial pivoting (`a` is n×n, consumed).
/// Returns `None` when `A` is singular to working precision.
#[inline(always)]
pub fn solve(mut a: Vec<f64>, mut b: Vec<f64>) -> Option<Vec<f64>> {
    let n = b.len();
    debug_assert_eq!(a.len(), n * n);
    let scale = a
        .iter()
        .fold(0.0f64, |m, x| m.max(x.abs()))
        .max(f64::MIN_POSITIVE);
    for col in 0..n {
        let pivot =
            (col..n).max_by(|&i, &j| a[i * n + col].abs().total_cmp(&a[j * n + col].abs()))?;
        if a[pivot * n + col].abs() <= 1e-14 * scale {
            return None;
        }
        if pivot != col {
            for k in 0..n {
                a.swap(pivot * n + k, col * n + k);
            }
            b.swap(pivot, col);
        }
        let (upper, lower) = a.split_at_mut((col + 1) * n);
        let pivot_row = &upper[col * n + col..(col + 1) * n];
        for (row, target) in lower.chunks_exact_mut(n).enumerate() {
            let factor = target[col] / pivot_row[0];
            if factor != 0.0 {
                // Element by element (no reassociation): vectorisable, the same bits.
                for (t, &p) in target[col..].iter_mut().zip(pivot_row) {
                    *t -= factor * p;
                }
                b[col + 1 + row] -= factor * b[col];
            }
        }
    }
    for row in (0..n).rev() {
        let mut sum = b[row];
        for k in row + 1..n {
            sum -= a[row * n + k] * b[k];
        }
        b[row] = sum / a[row * n + row];
    }
    Some(b)
}

/// Inverse of an n×n matrix by Gauss–Jordan elimination with partial pivoting, `None` if singular.
#[inline(always)]
pub fn inverse(a: &[f64], n: usize) -> Option<Vec<f64>> {
    let mut m = a.to_vec();
    let mut inv = vec![0.0; n * n];
    for i in 0..n {
        inv[i * n + i] = 1.0;
    }
    let scale = a
        .iter()
        .fold(0.0f64, |s, x| s.max(x.abs()))
        .max(f64::MIN_POSITIVE);
    for col in 0..n {
        let pivot =
            (col..n).max_by(|&i, &j| m[i * n + col].abs().total_cmp(&m[j * n + col].abs()))?;
        if m[pivot * n + col].abs() <= 1e-14 * scale {
            return None;
        }
        if pivot != col {
            for k in 0..n {
                m.swap(pivot * n + k, col * n + k);
                inv.swap(pivot * n + k, col * n + k);
            }
        }
        let d = 1.0 / m[col * n + col];
        for k in 0..n {
            m[col * n + k] *= d;
            inv[col * n + k] *= d;
        }
        // The pivot row is borrowed beside the others, row by row (no copy of it).
        for row in (0..n).filter(|&row| row != col) {
            let (m_target, m_pivot) = two_rows(&mut m, n, row, col);
            let factor = m_target[col];
            if factor != 0.0 {
                // Element by element (no reassociation): vectorisable, the same bits.
                for (t, &p) in m_target.iter_mut().zip(m_pivot) {
                    *t -= factor * p;
                }
                let (inv_target, inv_pivot) = two_rows(&mut inv, n, row, col);
                for (t, &p) in inv_target.iter_mut().zip(inv_pivot) {
                    *t -= factor * p;
                }
            }
        }
    }
    Some(inv)
}

/// Rows `target` (mutable) and `pivot` (≠ target) of a row-major matrix with `n` columns.
#[inline(always)]
fn two_rows(m: &mut [f64], n: usize, target: usize, pivot: usize) -> (&mut [f64], &[f64]) {
    if target < pivot {
        let (head, tail) = m.split_at_mut(pivot * n);
        (&mut head[target * n..(target + 1) * n], &tail[..n])
    } else {
        let (head, tail) = m.split_at_mut(target * n);
        (&mut tail[..n], &head[pivot * n..(pivot + 1) * n])
    }
}

ns_core::simd_dispatched! {
    /// Cholesky factor `L` (lower, row-major) of a symmetric positive-definite matrix; on
    /// failure, the index of the first pivot that is not positive. Its four-lane sums
    /// (`ns_core::lanes`) take one AVX2 instruction each where the CPU has it, in the same
    /// order: the bits are the baseline build's.
    pub fn cholesky(a: &[f64], n: usize) -> Result<Vec<f64>, usize> {
        let mut l = vec![0.0; n * n];
        for i in 0..n {
            for j in 0..=i {
                let sum =
                    a[i * n + j] - ns_core::lanes::dot(&l[i * n..i * n + j], &l[j * n..j * n + j]);
                if i == j {
                    if !(sum > 0.0) {
                        return Err(i);
                    }
                    l[i * n + i] = sum.sqrt();
                } else {
                    l[i * n + j] = sum / l[j * n + j];
                }
            }
        }
        Ok(l)
    }
}

/// Solve `L Lᵀ x = b` with the Cholesky factor `L`.
pub fn cholesky_solve(l: &[f64], n: usize, b: &[f64]) -> Vec<f64> {
    let mut y = vec![0.0; n];
    for i in 0..n {
        let mut sum = b[i];
        for k in 0..i {
            sum -= l[i * n + k] * y[k];
        }
        y[i] = sum / l[i * n + i];
    }
    for i in (0..n).rev() {
        let mut sum = y[i];
        for k in i + 1..n {
            sum -= l[k * n + i] * y[k];
        }
        y[i] = sum / l[i * n + i];
    }
    y
}

ns_core::simd_dispatched! {
    /// Inverse of a symmetric positive-definite matrix from its Cholesky factor: U = L⁻ᵀ (upper,
    /// stored by rows), then A⁻¹ = U Uᵀ from dot products of contiguous rows — n³/3 flops in all,
    /// a third of n triangular solves (2000 parameters: ~1 s instead of ~10 s).
    pub fn cholesky_inverse(l: &[f64], n: usize) -> Vec<f64> {
        // Row j of U is column j of L⁻¹: U[j][i] for i ≥ j, by forward substitution down column j.
        let mut u = vec![0.0; n * n];
        for j in 0..n {
            u[j * n + j] = 1.0 / l[j * n + j];
            for i in j + 1..n {
                let sum = ns_core::lanes::dot(&l[i * n + j..i * n + i], &u[j * n + j..j * n + i]);
                u[j * n + i] = -sum / l[i * n + i];
            }
        }
        let mut inv = vec![0.0; n * n];
        for a in 0..n {
            for b in 0..=a {
                // U[a][k] = 0 for k < a, and a ≥ b.
                let value = ns_core::lanes::dot(&u[a * n + a..a * n + n], &u[b * n + a..b * n + n]);
                inv[a * n + b] = value;
                inv[b * n + a] = value;
            }
        }
        inv
    }
}

#[inline(always)]
pub fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn solve_and_inverse_agree_with_known_answers() {
        let a = vec![4.0, 1.0, 0.0, 1.0, 3.0, 1.0, 0.0, 1.0, 2.0];
        let x = solve(a.clone(), vec![1.0, 2.0, 3.0]).unwrap();
        for (row, expect) in [1.0, 2.0, 3.0].iter().enumerate() {
            assert!((dot(&a[row * 3..row * 3 + 3], &x) - expect).abs() < 1e-12);
        }
        let inv = inverse(&a, 3).unwrap();
        let chol_inv = cholesky_inverse(&cholesky(&a, 3).unwrap(), 3);
        for (p, q) in inv.iter().zip(&chol_inv) {
            assert!((p - q).abs() < 1e-12);
        }
        assert!(solve(vec![1.0, 2.0, 2.0, 4.0], vec![1.0, 1.0]).is_none());
        // A larger SPD matrix: A · A⁻¹ = I.
        let n = 40;
        let b: Vec<f64> = (0..n * n)
            .map(|k| ((k * 37 % 101) as f64 - 50.0) / 50.0)
            .collect();
        let mut spd = vec![0.0; n * n];
        for r in 0..n {
            for c in 0..n {
                spd[r * n + c] = (0..n).map(|k| b[r * n + k] * b[c * n + k]).sum::<f64>()
                    + if r == c { 1.0 } else { 0.0 };
            }
        }
        let inv = cholesky_inverse(&cholesky(&spd, n).unwrap(), n);
        for r in 0..n {
            for c in 0..n {
                let v: f64 = (0..n).map(|k| spd[r * n + k] * inv[k * n + c]).sum();
                assert!(
                    (v - if r == c { 1.0 } else { 0.0 }).abs() < 1e-9,
                    "({r}, {c}): {v}"
                );
            }
        }
        assert_eq!(cholesky(&[1.0, 2.0, 2.0, 1.0], 2), Err(1));
    }
}
