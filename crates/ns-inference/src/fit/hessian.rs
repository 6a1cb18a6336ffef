//! Uncertainties of large models without a dense n×n matrix.
//!
//! A HistFactory likelihood couples two parameters only through a main bin both act on (every
//! constraint term holds one parameter). Per-bin parameters — shapesys, staterror, shapefactor γ's —
//! act on one bin each, so the Hessian is an *arrow*: a dense block over the few global parameters
//! (normfactors, normsys, histosys, lumi), their dense coupling to the per-bin ones, and a
//! block-diagonal part over the per-bin ones (a block per bin, as large as the number of per-bin
//! parameters sharing that bin). It is measured by central differences of the analytic gradient
//! with 2·(globals + largest block) probes instead of 2·n — the per-bin parameters of different
//! bins are moved together (Curtis–Powell–Reid colouring), the coupling block is read from the
//! globals' probes by symmetry — and the covariance diagonal follows from the Schur complement of
//! the block-diagonal part. Memory: O(n · globals).

use ns_compute::{Likelihood, PreparedData, Reach};
use ns_core::{Error, Result};

use super::Fitter;
use crate::linalg::{cholesky, cholesky_inverse};
use ns_compute::Datasets;

/// How the free parameters couple.
pub(crate) struct Structure {
    /// Free parameters acting on more than one bin (positions in the full vector).
    pub globals: Vec<usize>,
    /// Per-bin free parameters, grouped by their bin: each group is one diagonal block.
    pub blocks: Vec<Vec<usize>>,
}

impl Structure {
    /// The coupling of the `free` parameters of `model`: dense where it describes none.
    pub fn of(model: &dyn Likelihood, free: &[usize]) -> Structure {
        let Some(reach) = model.reach() else {
            return Structure {
                globals: free.to_vec(),
                blocks: Vec::new(),
            };
        };
        let mut globals = Vec::new();
        let mut by_bin: std::collections::BTreeMap<usize, Vec<usize>> = Default::default();
        for &p in free {
            match reach[p] {
                Reach::One(bin) => by_bin.entry(bin).or_default().push(p),
                // A parameter acting on no bin couples to nothing: a block of its own.
                Reach::Nothing => by_bin.entry(usize::MAX - p).or_default().push(p),
                Reach::Several => globals.push(p),
            }
        }
        Structure {
            globals,
            blocks: by_bin.into_values().collect(),
        }
    }

    /// Bytes [`arrow_variances`] holds for a model of `n_params`: the probe points and gradients,
    /// the dense global block and the per-bin coupling rows.
    pub fn memory_bytes(&self, n_params: usize) -> usize {
        let g = self.globals.len();
        let locals: usize = self.blocks.iter().map(Vec::len).sum();
        let probes = 2 * self.columns().len();
        8 * (2 * probes * n_params + g * g + locals * g)
    }

    /// Sets of parameters moved together by one probe: each global alone, then colour c = the
    /// c-th parameter of every block (their gradients do not see each other).
    pub fn columns(&self) -> Vec<Vec<usize>> {
        let width = self.blocks.iter().map(Vec::len).max().unwrap_or(0);
        self.globals
            .iter()
            .map(|&p| vec![p])
            .chain((0..width).map(|c| {
                self.blocks
                    .iter()
                    .filter_map(|b| b.get(c).copied())
                    .collect()
            }))
            .collect()
    }
}

/// Variances (the diagonal of 2·H⁻¹ of twice_nll) of every free parameter, in the order of
/// `free`, from the arrow Hessian at `point`. An error names the first parameter whose curvature
/// is not positive.
pub(crate) fn arrow_variances(
    fitter: &Fitter,
    point: &[f64],
    data: &PreparedData,
    free: &[usize],
    structure: &Structure,
) -> Result<Vec<f64>> {
    let model = fitter.model();
    let n = model.n_params();
    let g = structure.globals.len();
    let step = |j: usize| 1e-5 * point[j].abs().max(1.0);
    let columns = structure.columns();
    let mut points = Vec::with_capacity(2 * columns.len() * n);
    for column in &columns {
        for sign in [1.0, -1.0] {
            let mut x = point.to_vec();
            for &j in column {
                x[j] += sign * step(j);
            }
            points.extend_from_slice(&x);
        }
    }
    let probes = 2 * columns.len();
    let (mut f, mut grads) = (vec![0.0; probes], vec![0.0; probes * n]);
    let host = Datasets::Host(std::slice::from_ref(data));
    fitter.probe_batch(&points, host, &vec![0; probes], &mut f, &mut grads)?;
    // d g_row / d x_j from probe pair `k` (column k moved x_j by ±step(j)).
    let derivative = |k: usize, row: usize, j: usize| {
        (grads[2 * k * n + row] - grads[(2 * k + 1) * n + row]) / (2.0 * step(j))
    };

    // H_GG (symmetrised) and H_LG: rows of every per-bin parameter from the globals' probes.
    let mut h_gg = vec![0.0; g * g];
    for (a, &pa) in structure.globals.iter().enumerate() {
        for (b, &pb) in structure.globals.iter().enumerate() {
            h_gg[a * g + b] = 0.5 * (derivative(b, pa, pb) + derivative(a, pb, pa));
        }
    }
    let coupling = |p: usize| -> Vec<f64> {
        structure
            .globals
            .iter()
            .enumerate()
            .map(|(b, &pb)| derivative(b, p, pb))
            .collect()
    };
    // Per block: its inverse, and W = H_LL⁻¹ H_LG (rows of the block), accumulated into the
    // Schur complement S = H_GG − H_GL H_LL⁻¹ H_LG.
    let mut schur = h_gg;
    let mut per_block = Vec::with_capacity(structure.blocks.len());
    for block in &structure.blocks {
        let m = block.len();
        let mut h = vec![0.0; m * m];
        for (r, &pr) in block.iter().enumerate() {
            for (c, &pc) in block.iter().enumerate() {
                h[r * m + c] = 0.5 * (derivative(g + c, pr, pc) + derivative(g + r, pc, pr));
            }
        }
        let inverse = cholesky(&h, m)
            .map(|l| cholesky_inverse(&l, m))
            .map_err(|i| not_positive(model, block[i]))?;
        let rows: Vec<Vec<f64>> = block.iter().map(|&p| coupling(p)).collect();
        // W = inverse · rows (m × g).
        let w: Vec<Vec<f64>> = (0..m)
            .map(|r| {
                (0..g)
                    .map(|col| (0..m).map(|k| inverse[r * m + k] * rows[k][col]).sum())
                    .collect()
            })
            .collect();
        for a in 0..g {
            for b in 0..g {
                schur[a * g + b] -= (0..m).map(|k| rows[k][a] * w[k][b]).sum::<f64>();
            }
        }
        per_block.push((inverse, w));
    }
    let schur_inverse = cholesky(&schur, g)
        .map(|l| cholesky_inverse(&l, g))
        .map_err(|i| not_positive(model, structure.globals[i]))?;

    let mut variance = vec![f64::NAN; n];
    for (a, &p) in structure.globals.iter().enumerate() {
        variance[p] = 2.0 * schur_inverse[a * g + a];
    }
    for (block, (inverse, w)) in structure.blocks.iter().zip(&per_block) {
        let m = block.len();
        for (r, &p) in block.iter().enumerate() {
            // (H⁻¹)_pp = (H_LL⁻¹)_pp + w_p S⁻¹ w_pᵀ
            let correction: f64 = (0..g)
                .map(|a| {
                    w[r][a]
                        * (0..g)
                            .map(|b| schur_inverse[a * g + b] * w[r][b])
                            .sum::<f64>()
                })
                .sum();
            variance[p] = 2.0 * (inverse[r * m + r] + correction);
        }
    }
    Ok(free.iter().map(|&p| variance[p]).collect())
}

fn not_positive(model: &dyn ns_compute::Likelihood, p: usize) -> Error {
    Error::InvalidModel(format!(
        "the Hessian is not positive definite at '{}': no uncertainties",
        model.parameter_names()[p]
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fit::FitConfig;
    use ns_core::HistFactoryModel;
    use ns_translate::{FromWorkspace, ModelOptions, Workspace};

    /// Per-bin shapesys and staterror on the same bins (blocks of two), a normsys, a normfactor
    /// and a lumi over two channels.
    fn model() -> (HistFactoryModel, PreparedData) {
        let bins = 40;
        let bkg: Vec<f64> = (0..bins).map(|i| 30.0 + 7.0 * (i % 5) as f64).collect();
        let spec = serde_json::json!({
            "channels": [
                {"name": "A", "samples": [
                    {"name": "sig", "data": vec![2.0; bins], "modifiers": [
                        {"name": "mu", "type": "normfactor", "data": null},
                        {"name": "lumi", "type": "lumi", "data": null}]},
                    {"name": "bkg", "data": bkg, "modifiers": [
                        {"name": "norm", "type": "normsys", "data": {"hi": 1.1, "lo": 0.92}},
                        {"name": "shape", "type": "shapesys", "data": vec![4.0; bins]},
                        {"name": "staterror_A", "type": "staterror", "data": vec![2.5; bins]}]}]},
                {"name": "B", "samples": [
                    {"name": "bkg", "data": [100.0, 80.0], "modifiers": [
                        {"name": "norm", "type": "normsys", "data": {"hi": 1.05, "lo": 0.95}}]}]}],
            "observations": [
                {"name": "A", "data": (0..bins).map(|i| 33 + (i * 7) % 11).collect::<Vec<_>>()},
                {"name": "B", "data": [104, 77]}],
            "measurements": [{"name": "m", "config": {"poi": "mu", "parameters": [
                {"name": "lumi", "auxdata": [1.0], "sigmas": [0.02], "bounds": [[0.5, 1.5]], "inits": [1.0]}]}}],
            "version": "1.0.0"
        });
        let ws = Workspace::from_value(spec).unwrap();
        let model = HistFactoryModel::from_workspace(&ws, &ModelOptions::default()).unwrap();
        let data =
            PreparedData::from_full(&model.compiled, &ws.data(&model, true).unwrap()).unwrap();
        (model, data)
    }

    #[test]
    fn arrow_variances_equal_the_dense_inverse() {
        let (model, data) = model();
        let fitter = Fitter::new(&model);
        let config = FitConfig::suggested(&model);
        let fit = fitter.fit(&data, &config).unwrap();
        assert!(fit.converged);
        let free: Vec<usize> = (0..model.n_params())
            .filter(|&i| !config.fixed[i])
            .collect();
        let structure = Structure::of(&model, &free);
        assert_eq!(
            structure.globals.len(),
            3,
            "mu, lumi and norm act on several bins"
        );
        assert_eq!(structure.blocks.iter().map(Vec::len).max(), Some(2));
        assert_eq!(structure.columns().len(), 5);
        let arrow = arrow_variances(&fitter, &fit.parameters, &data, &free, &structure).unwrap();
        let k = free.len();
        let dense = fitter.hessian(&fit.parameters, &data, &free).unwrap();
        let inverse = cholesky_inverse(&cholesky(&dense, k).unwrap(), k);
        for (i, &p) in free.iter().enumerate() {
            let exact = 2.0 * inverse[i * k + i];
            assert!(
                (arrow[i] - exact).abs() <= 1e-6 * exact,
                "{}: {} vs dense {exact}",
                model.parameter_names()[p],
                arrow[i]
            );
        }
    }
}
