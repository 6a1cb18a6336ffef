//! Curvature: the optimizer's variable scaling, the Hessian by differences of the analytic
//! gradient, and the uncertainties and covariance from it (dense, or from the arrow structure of
//! large models).

use ns_compute::{Datasets, HessianPart, Precision, PreparedData};
use ns_core::Result;

use super::hessian::{Structure, arrow_variances};
use super::{DENSE_PARAMETER_LIMIT, FitConfig, FitResult, Fitter};
use crate::linalg::{cholesky, cholesky_inverse, inverse};

/// Largest variable scale of a fit's start: √curvature of a shapesys γ with τ = 10¹², of a
/// normalisation of 10⁹ events (a fit that stalls against a steeper wall goes on with
/// [`STIFF_SCALE_CEILING`]).
pub(crate) const SCALE_CEILING: f64 = 1e6;

/// Largest variable scale of a fit that goes on from where it stalled: at a wall of the
/// likelihood a bin's expected count can move by 10¹⁶ events per unit of a nuisance parameter
/// (the published sleptons likelihood), and that curvature is what the scaled problem must undo
/// (a ceiling of 10¹² left more of the sleptons toy fits short).
pub(crate) const STIFF_SCALE_CEILING: f64 = 1e16;

/// Most memory the structured Hessian of a large model may take (probes and blocks).
const MAX_HESSIAN_BYTES: usize = 4 << 30;

impl Fitter<'_> {
    /// √(∂²twice_nll/∂x_j²) at `x` for each free parameter: analytic where the likelihood's
    /// CPU backend offers it and the fitter's backend is f64, else by a one-sided difference of
    /// the analytic gradient (stepping away from the nearer bound); 1 where it is not positive;
    /// within [10⁻³, `ceiling`].
    pub(crate) fn curvature_scale(
        &self,
        x: &[f64],
        free: &[usize],
        bounds: &[(f64, f64)],
        data: &PreparedData,
        ceiling: f64,
    ) -> Result<Vec<f64>> {
        // The f32 backends keep the differences: their fits' behaviour against the f64 ones
        // (docs/gpu-f32.md) was measured with that scale, and f32 paths are chaotic enough that
        // a scale moved by 1e-4 sends a few toys of a flat likelihood to other stopping points.
        let analytic = match self.backend.precision() {
            Precision::F64 => self.host().nll_hessian(x, data, HessianPart::Diagonal)?,
            Precision::F32 => None,
        };
        let curvature = match analytic {
            Some(diagonal) => diagonal.iter().map(|h| 2.0 * h).collect(),
            None => self.curvature_by_differences(x, free, bounds, data)?,
        };
        Ok(free
            .iter()
            .map(|&j| {
                let c = curvature[j];
                if c.is_finite() && c > 0.0 {
                    c.sqrt().clamp(1e-3, ceiling)
                } else {
                    1.0
                }
            })
            .collect())
    }

    /// ∂²twice_nll/∂x_j² of the free parameters (NaN for the others and where a probe is not
    /// finite) by one-sided differences of the gradient.
    fn curvature_by_differences(
        &self,
        x: &[f64],
        free: &[usize],
        bounds: &[(f64, f64)],
        data: &PreparedData,
    ) -> Result<Vec<f64>> {
        let n = x.len();
        let (mut g0, mut g1) = (vec![0.0; n], vec![0.0; n]);
        // On the host in f64 whatever the backend: the scale is part of the fit's definition.
        self.objective_on(self.host(), x, data, &mut g0)?;
        // One probe per global parameter; the per-bin parameters of different bins share probes
        // (their gradients do not see each other, so each curvature is the one a probe of its
        // own would measure).
        let columns = Structure::of(self.model, free).columns();
        let step = |j: usize| {
            let (lo, hi) = bounds[j];
            let h = 1e-4 * x[j].abs().max(1.0);
            if x[j] + h <= hi || x[j] - h < lo {
                h
            } else {
                -h
            }
        };
        let mut curvature = vec![f64::NAN; n];
        let mut probe = x.to_vec();
        for column in &columns {
            for &j in column {
                probe[j] = x[j] + step(j);
            }
            let finite = matches!(
                self.objective_on(self.host(), &probe, data, &mut g1),
                Ok(f) if f.is_finite()
            );
            for &j in column {
                if finite {
                    curvature[j] = (g1[j] - g0[j]) / step(j);
                }
                probe[j] = x[j];
            }
        }
        Ok(curvature)
    }

    /// Uncertainties of a large model from the arrow structure of its Hessian
    /// ([`super::hessian`]): no dense n×n matrix, so no covariance either.
    fn add_structured_uncertainties(
        &self,
        result: &mut FitResult,
        data: &PreparedData,
        free: &[usize],
    ) -> Result<()> {
        let structure = Structure::of(self.model, free);
        let bytes = structure.memory_bytes(self.model.n_params());
        if bytes > MAX_HESSIAN_BYTES {
            result.warn(format!(
                "no uncertainties: {} of the {} free parameters act on several bins, and their \
                 Hessian would need {:.1} GB (at most {:.1} GB)",
                structure.globals.len(),
                free.len(),
                bytes as f64 * 1e-9,
                MAX_HESSIAN_BYTES as f64 * 1e-9
            ));
            return Ok(());
        }
        match arrow_variances(self, &result.parameters, data, free, &structure) {
            Ok(variances) => {
                let mut sigma = vec![0.0; self.model.n_params()];
                for (&p, v) in free.iter().zip(variances) {
                    sigma[p] = v.max(0.0).sqrt();
                }
                result.uncertainties = Some(sigma);
            }
            Err(e) => result.warn(e.to_string()),
        }
        Ok(())
    }

    /// `config` with the optimizer's variable scaling computed once, at `config.init` on `data`.
    pub fn with_scale(&self, data: &PreparedData, config: &FitConfig) -> Result<FitConfig> {
        self.with_scale_up_to(data, config, SCALE_CEILING)
    }

    /// [`with_scale`](Self::with_scale) with scales up to `ceiling`.
    pub(crate) fn with_scale_up_to(
        &self,
        data: &PreparedData,
        config: &FitConfig,
        ceiling: f64,
    ) -> Result<FitConfig> {
        let n = self.model.n_params();
        let all: Vec<usize> = (0..n).collect();
        let scale = self.curvature_scale(&config.init, &all, &config.bounds, data, ceiling)?;
        Ok(FitConfig {
            scale: Some(scale),
            ..config.clone()
        })
    }

    /// Hessian of twice_nll over the `free` parameters at `point` (k×k, row-major, symmetric)
    /// for the uncertainties: analytic where the likelihood's CPU backend offers it, else
    /// [`hessian_by_differences`](Self::hessian_by_differences).
    pub(crate) fn hessian(
        &self,
        point: &[f64],
        data: &PreparedData,
        free: &[usize],
    ) -> Result<Vec<f64>> {
        match self.analytic_hessian(point, data, free)? {
            Some(hessian) => Ok(hessian),
            None => self.hessian_by_differences(point, data, free),
        }
    }

    /// The analytic Hessian of twice_nll over `free` at `point`, where the likelihood's CPU
    /// backend offers one (HistFactory models; not at every point: a γ at 0).
    pub(crate) fn analytic_hessian(
        &self,
        point: &[f64],
        data: &PreparedData,
        free: &[usize],
    ) -> Result<Option<Vec<f64>>> {
        let n = self.model.n_params();
        let k = free.len();
        Ok(self
            .host()
            .nll_hessian(point, data, HessianPart::Full)?
            .map(|full| {
                let mut hessian = vec![0.0; k * k];
                for (row, &i) in free.iter().enumerate() {
                    for (col, &j) in free.iter().enumerate() {
                        hessian[row * k + col] = 2.0 * full[i * n + j];
                    }
                }
                hessian
            }))
    }

    /// Hessian of twice_nll over the `free` parameters at `point` (k×k, row-major, symmetrised)
    /// by central differences of the analytic gradient, all 2k probes in one batch: one launch
    /// on CUDA, parallel on the CPU. The Newton polish steps with it: the analytic Hessian moved
    /// where stalled fits of the tt̄ ℓ+jets toys end by 1e-3 in twice_nll against their f32 twins
    /// (docs/benchmarks.md).
    pub(crate) fn hessian_by_differences(
        &self,
        point: &[f64],
        data: &PreparedData,
        free: &[usize],
    ) -> Result<Vec<f64>> {
        let n = self.model.n_params();
        let k = free.len();
        let steps: Vec<f64> = free
            .iter()
            .map(|&j| 1e-5 * point[j].abs().max(1.0))
            .collect();
        let mut points = Vec::with_capacity(2 * k * n);
        for (col, &j) in free.iter().enumerate() {
            for sign in [1.0, -1.0] {
                let mut x = point.to_vec();
                x[j] += sign * steps[col];
                points.extend_from_slice(&x);
            }
        }
        let (mut f, mut grads) = (vec![0.0; 2 * k], vec![0.0; 2 * k * n]);
        self.probe_batch(
            &points,
            Datasets::Host(std::slice::from_ref(data)),
            &vec![0; 2 * k],
            &mut f,
            &mut grads,
        )?;
        let mut hessian = vec![0.0; k * k];
        for col in 0..k {
            let (gp, gm) = (&grads[2 * col * n..], &grads[(2 * col + 1) * n..]);
            for (row, &i) in free.iter().enumerate() {
                hessian[row * k + col] = (gp[i] - gm[i]) / (2.0 * steps[col]);
            }
        }
        for r in 0..k {
            for c in 0..r {
                let avg = 0.5 * (hessian[r * k + c] + hessian[c * k + r]);
                hessian[r * k + c] = avg;
                hessian[c * k + r] = avg;
            }
        }
        Ok(hessian)
    }

    /// Uncertainties from the Hessian of twice_nll at the minimum: C = 2·H⁻¹ (the inverse
    /// Hessian of the NLL).
    pub(crate) fn add_uncertainties(
        &self,
        result: &mut FitResult,
        data: &PreparedData,
        free: &[usize],
    ) -> Result<()> {
        let n = self.model.n_params();
        let k = free.len();
        if k > DENSE_PARAMETER_LIMIT {
            return self.add_structured_uncertainties(result, data, free);
        }
        let hessian = self.hessian(&result.parameters, data, free)?;
        let inverse_hessian = match cholesky(&hessian, k) {
            Ok(l) => Some(cholesky_inverse(&l, k)),
            Err(pivot) => {
                let negative: Vec<&str> = (0..k)
                    .filter(|&i| !(hessian[i * k + i] > 0.0))
                    .map(|i| self.model.parameter_names()[free[i]].as_str())
                    .collect();
                result.warn(format!(
                    "the Hessian is not positive definite (Cholesky fails at '{}'{}); uncertainties come from a general inverse and may be unreliable",
                    self.model.parameter_names()[free[pivot]],
                    if negative.is_empty() {
                        String::new()
                    } else {
                        format!("; non-positive curvature for {}", negative.join(", "))
                    }
                ));
                inverse(&hessian, k)
            }
        };
        let Some(inv) = inverse_hessian else {
            result.warn("the Hessian is singular: no uncertainties".into());
            return Ok(());
        };
        let mut covariance = vec![0.0; n * n];
        for (r, &i) in free.iter().enumerate() {
            for (c, &j) in free.iter().enumerate() {
                covariance[i * n + j] = 2.0 * inv[r * k + c];
            }
        }
        result.uncertainties = Some(
            (0..n)
                .map(|i| covariance[i * n + i].max(0.0).sqrt())
                .collect(),
        );
        result.covariance = Some(covariance);
        Ok(())
    }
}
