//! The result of a fit and how it is assembled from where the optimizer ended.

use ns_core::optim::Termination;

use super::FitConfig;

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

/// Warning (and toy-fit failure reason) of a fit that ended where the likelihood is unbounded
/// below (`Fitter::empty_bin_below_zero`).
pub const UNBOUNDED_BELOW: &str = "the likelihood is unbounded below here: an empty bin's \
                                   expected count is negative, and pyhf's Poisson term of an \
                                   empty bin, e^−λ, exceeds 1";

/// Said of a fit whose every free parameter ended on a bound.
pub const ALL_AT_BOUND: &str = "every free parameter ended at a bound: the model cannot describe \
     these data within its parameter ranges (pyhf's fit fails here)";

impl FitResult {
    /// Add a warning (several are joined with "; ").
    pub fn warn(&mut self, message: String) {
        self.warning = Some(match self.warning.take() {
            Some(previous) => format!("{previous}; {message}"),
            None => message,
        });
    }

    /// Whether every free parameter ended on a bound (`at_bound` for all of them).
    pub fn all_at_bound(&self, config: &FitConfig) -> bool {
        let mut free = (0..self.parameters.len())
            .filter(|&i| !config.fixed[i])
            .peekable();
        free.peek().is_some() && free.all(|i| self.at_bound[i])
    }

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

/// Where an optimizer run ended, in its scaled coordinates.
pub(crate) struct OptimizerEnd<'a> {
    pub(crate) x: &'a [f64],
    pub(crate) g: &'a [f64],
    pub(crate) f: f64,
    pub(crate) iterations: usize,
    pub(crate) evaluations: usize,
    pub(crate) termination: Termination,
}

/// A fit result from the optimizer's end point (host or device optimizer alike).
pub(crate) fn assemble_result(
    free: &[usize],
    scale: &[f64],
    config: &FitConfig,
    end: OptimizerEnd,
    constant: f64,
) -> FitResult {
    let n = config.init.len();
    let mut parameters = config.init.clone();
    let mut grad = vec![0.0; n];
    for (k, &i) in free.iter().enumerate() {
        // Unscaling can round a value on a bound just past it: the result stays in the box.
        parameters[i] = (end.x[k] / scale[k]).clamp(config.bounds[i].0, config.bounds[i].1);
        grad[i] = end.g[k] * scale[k];
    }
    FitResult {
        twice_nll: end.f + 2.0 * constant,
        // A minimum whose value is not finite is no minimum: never `converged` with a NaN.
        converged: end.termination.is_converged() && end.f.is_finite(),
        termination: end.termination,
        iterations: end.iterations,
        evaluations: end.evaluations,
        projected_gradient: projected_gradient(&parameters, &grad, config, free),
        uncertainties: None,
        covariance: None,
        at_bound: at_bound(&parameters, config),
        warning: None,
        parameters,
    }
}

/// ‖P(x − g) − x‖∞ of twice_nll over the free parameters, in the original parameters.
pub(crate) fn projected_gradient(
    parameters: &[f64],
    grad: &[f64],
    config: &FitConfig,
    free: &[usize],
) -> f64 {
    free.iter()
        .map(|&i| {
            ((parameters[i] - grad[i]).clamp(config.bounds[i].0, config.bounds[i].1)
                - parameters[i])
                .abs()
        })
        .fold(0.0, f64::max)
}

/// Free parameters within 1e-6 of the bound range of a bound (of max(1, |θ|) where the range is
/// unbounded).
pub(crate) fn at_bound(parameters: &[f64], config: &FitConfig) -> Vec<bool> {
    (0..parameters.len())
        .map(|i| {
            let (lo, hi) = config.bounds[i];
            let range = hi - lo;
            let scale = if range.is_finite() {
                range
            } else {
                parameters[i].abs()
            };
            let tol = 1e-6 * scale.max(1.0);
            !config.fixed[i] && (parameters[i] - lo <= tol || hi - parameters[i] <= tol)
        })
        .collect()
}
