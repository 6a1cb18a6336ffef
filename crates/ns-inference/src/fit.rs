//! Maximum-likelihood fits of a HistFactory model: free, with the POI fixed, or with any set of
//! fixed parameters; uncertainties, covariance and correlations from the Hessian.

use ns_compute::{CpuEvaluator, PreparedData, Scratch};
use ns_core::{Error, Result};
use ns_translate::HistFactoryModel;

use crate::linalg::{cholesky, cholesky_inverse, inverse};
use crate::optimizer::{Lbfgsb, LbfgsbOptions, Termination};

/// Starting point, box and fixed parameters of a fit (pyhf's `init_pars`, `par_bounds`,
/// `fixed_params`). Fixed parameters are removed from the problem, not clamped.
#[derive(Clone, Debug)]
pub struct FitConfig {
    pub init: Vec<f64>,
    pub bounds: Vec<(f64, f64)>,
    pub fixed: Vec<bool>,
    pub optimizer: LbfgsbOptions,
    /// Compute the Hessian, covariance and uncertainties at the minimum.
    pub uncertainties: bool,
    /// Per-parameter variable scaling of the optimizer (√curvature of twice_nll); computed at
    /// the start of each fit when `None`. Set it once (`Fitter::with_scale`) for many similar
    /// fits — toys, scans, refits — to save one gradient evaluation per parameter each.
    pub scale: Option<Vec<f64>>,
}

impl FitConfig {
    /// The model's suggested init, bounds and fixed parameters.
    pub fn suggested(model: &HistFactoryModel) -> Self {
        FitConfig {
            init: model.suggested_init(),
            bounds: model.suggested_bounds(),
            fixed: model.suggested_fixed(),
            optimizer: LbfgsbOptions::default(),
            uncertainties: false,
            scale: None,
        }
    }

    /// The same configuration with parameter `index` fixed at `value`.
    pub fn with_fixed(&self, index: usize, value: f64) -> Self {
        let mut c = self.clone();
        c.init[index] = value;
        c.fixed[index] = true;
        c
    }
}

/// The result of a fit. Vectors are over all parameters in pyhf order; fixed parameters have
/// zero uncertainty.
#[derive(Clone, Debug)]
pub struct FitResult {
    pub parameters: Vec<f64>,
    pub twice_nll: f64,
    pub converged: bool,
    pub termination: Termination,
    pub iterations: usize,
    pub evaluations: usize,
    /// ‖projected gradient of twice_nll‖∞ at the result.
    pub projected_gradient: f64,
    pub uncertainties: Option<Vec<f64>>,
    /// Covariance (row-major, n×n) of the parameters; zero rows for fixed ones.
    pub covariance: Option<Vec<f64>>,
    /// Parameters within 1e-6 of the bound range of a bound.
    pub at_bound: Vec<bool>,
    /// Set when the Hessian is not positive definite; names the parameters.
    pub warning: Option<String>,
}

impl FitResult {
    /// Correlation matrix from the covariance.
    pub fn correlation(&self) -> Option<Vec<f64>> {
        let cov = self.covariance.as_ref()?;
        let n = self.parameters.len();
        let mut corr = vec![0.0; n * n];
        for i in 0..n {
            for j in 0..n {
                let d = (cov[i * n + i] * cov[j * n + j]).sqrt();
                corr[i * n + j] = if i == j {
                    if cov[i * n + i] > 0.0 { 1.0 } else { 0.0 }
                } else if d > 0.0 {
                    cov[i * n + j] / d
                } else {
                    0.0
                };
            }
        }
        Some(corr)
    }
}

/// Fits one model against datasets on the CPU.
pub struct Fitter<'m> {
    model: &'m HistFactoryModel,
    eval: CpuEvaluator<'m>,
}

impl<'m> Fitter<'m> {
    pub fn new(model: &'m HistFactoryModel) -> Self {
        Fitter {
            model,
            eval: CpuEvaluator::new(&model.compiled),
        }
    }

    pub fn model(&self) -> &'m HistFactoryModel {
        self.model
    }

    /// twice_nll and its gradient at a full parameter vector.
    pub fn twice_nll_and_gradient(
        &self,
        params: &[f64],
        data: &PreparedData,
        scratch: &mut Scratch,
        grad: &mut [f64],
    ) -> Result<f64> {
        Ok(2.0 * data.constant + self.objective(params, data, scratch, grad)?)
    }

    /// twice_nll minus its data-only constant, with its gradient: the optimizer's objective
    /// (same minimizer, far finer resolution near the minimum on large models).
    fn objective(
        &self,
        params: &[f64],
        data: &PreparedData,
        scratch: &mut Scratch,
        grad: &mut [f64],
    ) -> Result<f64> {
        let nll = self
            .eval
            .nll_minus_constant(params, data, scratch, Some(grad))?;
        for g in grad.iter_mut() {
            *g *= 2.0;
        }
        Ok(2.0 * nll)
    }

    pub fn twice_nll(&self, params: &[f64], data: &PreparedData) -> Result<f64> {
        Ok(2.0
            * self
                .eval
                .nll(params, data, &mut Scratch::new(&self.model.compiled))?)
    }

    fn check(&self, config: &FitConfig) -> Result<()> {
        let n = self.model.n_params();
        if config.init.len() != n || config.bounds.len() != n || config.fixed.len() != n {
            return Err(Error::InvalidInput(format!(
                "fit configuration has {} init values, {} bounds and {} fixed flags for a model of {n} parameters",
                config.init.len(),
                config.bounds.len(),
                config.fixed.len()
            )));
        }
        if let Some(i) = (0..n).find(|&i| !(config.bounds[i].0 <= config.bounds[i].1)) {
            return Err(Error::InvalidInput(format!(
                "bounds of '{}' are [{}, {}]: low must not exceed high",
                self.model.par_names[i], config.bounds[i].0, config.bounds[i].1
            )));
        }
        Ok(())
    }

    /// Minimize twice_nll over the free parameters.
    pub fn fit(&self, data: &PreparedData, config: &FitConfig) -> Result<FitResult> {
        self.check(config)?;
        let n = self.model.n_params();
        let free: Vec<usize> = (0..n).filter(|&i| !config.fixed[i]).collect();
        let mut full = config.init.clone();
        let mut scratch = Scratch::new(&self.model.compiled);
        let mut grad = vec![0.0; n];
        // Diagonal preconditioning: optimize y = x·s with s² the curvature of twice_nll along each
        // free parameter at the start, so that normfactors (curvature ~ Σν) and nuisance
        // parameters (~1) look alike to the quasi-Newton model.
        let scale = match &config.scale {
            Some(all) if all.len() == n => free.iter().map(|&i| all[i]).collect(),
            _ => self.curvature_scale(&full, &free, &config.bounds, data, &mut scratch)?,
        };
        let lower: Vec<f64> = free
            .iter()
            .zip(&scale)
            .map(|(&i, s)| config.bounds[i].0 * s)
            .collect();
        let upper: Vec<f64> = free
            .iter()
            .zip(&scale)
            .map(|(&i, s)| config.bounds[i].1 * s)
            .collect();
        let y0: Vec<f64> = free
            .iter()
            .zip(&scale)
            .map(|(&i, s)| config.init[i] * s)
            .collect();
        let mut free_grad = vec![0.0; free.len()];
        let mut state =
            Lbfgsb::new(&y0, &lower, &upper, config.optimizer).with_gradient_scale(scale.clone());
        while let Some(y) = state.ask() {
            for (k, &i) in free.iter().enumerate() {
                full[i] = y[k] / scale[k];
            }
            let f = self.objective(&full, data, &mut scratch, &mut grad)?;
            for (k, &i) in free.iter().enumerate() {
                free_grad[k] = grad[i] / scale[k];
            }
            state.tell(f, &free_grad);
        }
        let termination = state.termination().unwrap_or(Termination::MaxIterations);
        for (k, &i) in free.iter().enumerate() {
            full[i] = state.x()[k] / scale[k];
        }
        let at_bound = (0..n)
            .map(|i| {
                let (lo, hi) = config.bounds[i];
                let tol = 1e-6 * (hi - lo).abs().max(1.0);
                !config.fixed[i] && (full[i] - lo <= tol || hi - full[i] <= tol)
            })
            .collect();
        let mut result = FitResult {
            twice_nll: state.f() + 2.0 * data.constant,
            converged: termination == Termination::Converged,
            termination,
            iterations: state.iterations(),
            evaluations: state.evaluations(),
            // In the original parameters: ‖P(x − g) − x‖∞ of twice_nll.
            projected_gradient: {
                self.twice_nll_and_gradient(&full, data, &mut scratch, &mut grad)?;
                free.iter()
                    .map(|&i| {
                        ((full[i] - grad[i]).clamp(config.bounds[i].0, config.bounds[i].1)
                            - full[i])
                            .abs()
                    })
                    .fold(0.0, f64::max)
            },
            uncertainties: None,
            covariance: None,
            at_bound,
            warning: None,
            parameters: full,
        };
        if config.uncertainties && termination != Termination::NonFiniteStart {
            self.add_uncertainties(&mut result, data, &free)?;
        }
        Ok(result)
    }

    /// √(∂²twice_nll/∂x_j²) at `x` for each free parameter, by a one-sided difference of the
    /// analytic gradient (stepping away from the nearer bound); 1 where it is not positive.
    fn curvature_scale(
        &self,
        x: &[f64],
        free: &[usize],
        bounds: &[(f64, f64)],
        data: &PreparedData,
        scratch: &mut Scratch,
    ) -> Result<Vec<f64>> {
        let n = x.len();
        let (mut g0, mut g1) = (vec![0.0; n], vec![0.0; n]);
        self.twice_nll_and_gradient(x, data, scratch, &mut g0)?;
        let mut probe = x.to_vec();
        let mut scale = Vec::with_capacity(free.len());
        for &j in free {
            let (lo, hi) = bounds[j];
            let h = 1e-4 * x[j].abs().max(1.0);
            let step = if x[j] + h <= hi || x[j] - h < lo {
                h
            } else {
                -h
            };
            probe[j] = x[j] + step;
            let curvature = match self.twice_nll_and_gradient(&probe, data, scratch, &mut g1) {
                Ok(f) if f.is_finite() => (g1[j] - g0[j]) / step,
                _ => f64::NAN,
            };
            probe[j] = x[j];
            scale.push(if curvature.is_finite() && curvature > 0.0 {
                curvature.sqrt().clamp(1e-3, 1e6)
            } else {
                1.0
            });
        }
        Ok(scale)
    }

    /// `config` with the optimizer's variable scaling computed once, at `config.init` on `data`.
    pub fn with_scale(&self, data: &PreparedData, config: &FitConfig) -> Result<FitConfig> {
        let n = self.model.n_params();
        let all: Vec<usize> = (0..n).collect();
        let scale = self.curvature_scale(
            &config.init,
            &all,
            &config.bounds,
            data,
            &mut Scratch::new(&self.model.compiled),
        )?;
        Ok(FitConfig {
            scale: Some(scale),
            ..config.clone()
        })
    }

    /// Fit with the POI fixed at `mu` (pyhf's `fixed_poi_fit`).
    pub fn fixed_poi_fit(
        &self,
        mu: f64,
        data: &PreparedData,
        config: &FitConfig,
    ) -> Result<FitResult> {
        let poi = self.model.poi()?;
        self.fit(data, &config.with_fixed(poi, mu))
    }

    /// Hessian of twice_nll over the free parameters by central differences of the analytic
    /// gradient; C = 2·H⁻¹ (the inverse Hessian of the NLL).
    fn add_uncertainties(
        &self,
        result: &mut FitResult,
        data: &PreparedData,
        free: &[usize],
    ) -> Result<()> {
        let n = self.model.n_params();
        let k = free.len();
        let mut scratch = Scratch::new(&self.model.compiled);
        let mut hessian = vec![0.0; k * k];
        let (mut gp, mut gm) = (vec![0.0; n], vec![0.0; n]);
        for (col, &j) in free.iter().enumerate() {
            let h = 1e-5 * result.parameters[j].abs().max(1.0);
            let mut x = result.parameters.clone();
            x[j] += h;
            self.twice_nll_and_gradient(&x, data, &mut scratch, &mut gp)?;
            x[j] -= 2.0 * h;
            self.twice_nll_and_gradient(&x, data, &mut scratch, &mut gm)?;
            for (row, &i) in free.iter().enumerate() {
                hessian[row * k + col] = (gp[i] - gm[i]) / (2.0 * h);
            }
        }
        for r in 0..k {
            for c in 0..r {
                let avg = 0.5 * (hessian[r * k + c] + hessian[c * k + r]);
                hessian[r * k + c] = avg;
                hessian[c * k + r] = avg;
            }
        }
        let inverse_hessian = match cholesky(&hessian, k) {
            Ok(l) => Some(cholesky_inverse(&l, k)),
            Err(pivot) => {
                let negative: Vec<&str> = (0..k)
                    .filter(|&i| !(hessian[i * k + i] > 0.0))
                    .map(|i| self.model.par_names[free[i]].as_str())
                    .collect();
                result.warning = Some(format!(
                    "the Hessian is not positive definite (Cholesky fails at '{}'{}); uncertainties come from a general inverse and may be unreliable",
                    self.model.par_names[free[pivot]],
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
            result.warning = Some("the Hessian is singular: no uncertainties".into());
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
