//! What a fit is asked to do: its starting point, box, fixed parameters and optimizer options,
//! and a fit's place in a batch.

use std::sync::Arc;

use ns_compute::Likelihood;
use ns_core::optim::LbfgsbOptions;

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
    /// Let a CPU fit that L-BFGS-B has not finished in 100 iterations end with Newton steps
    /// once it is inside the quadratic basin of its minimum (`fit/newton.rs`): the same minimum
    /// in a fraction of the iterations on badly conditioned models. `false` runs L-BFGS-B alone
    /// (with the polish where it stalls), as device fits do: for side-by-side comparisons.
    pub newton_handover: bool,
    /// The parameter of interest that hypothesis tests, limits, scans and rankings test: the
    /// model's unless a call names another (`FitConfig::poi`).
    pub poi: Option<usize>,
}

impl FitConfig {
    /// The model's suggested init, bounds and fixed parameters.
    pub fn suggested(model: &dyn Likelihood) -> Self {
        FitConfig {
            init: model.suggested_init(),
            bounds: model.suggested_bounds(),
            fixed: model.suggested_fixed(),
            optimizer: LbfgsbOptions::default(),
            uncertainties: false,
            scale: None,
            newton_handover: true,
            poi: model.poi_index(),
        }
    }

    /// The index of the parameter of interest these fits test: the one chosen for them, else
    /// the model's (or the model's error saying why it has none).
    pub fn poi(&self, model: &dyn Likelihood) -> ns_core::Result<usize> {
        match self.poi {
            Some(index) => Ok(index),
            None => model.poi(),
        }
    }

    /// The same configuration starting at `point` (a fit's end, a toy's generating parameters),
    /// each free value clamped into its bounds: a starting point the engine makes itself is
    /// never refused for lying past a bound by rounding. Fixed parameters keep their values.
    pub fn starting_at(&self, point: &[f64]) -> Self {
        let mut c = self.clone();
        for (i, &value) in point.iter().enumerate().take(c.init.len()) {
            let (lo, hi) = c.bounds[i];
            // `clamp` needs lo ≤ hi; a box that is not one is refused when the fit starts.
            if !c.fixed[i] && value.is_finite() && lo <= hi {
                c.init[i] = value.clamp(lo, hi);
            }
        }
        c
    }

    /// The same configuration with parameter `index` fixed at `value`.
    pub fn with_fixed(&self, index: usize, value: f64) -> Self {
        let mut c = self.clone();
        c.init[index] = value;
        c.fixed[index] = true;
        c
    }
}

/// One fit of a batch: dataset `data` (an index into the batch's datasets) with `config`
/// (shared: thousands of toy fits use one configuration).
#[derive(Clone, Debug)]
pub struct FitJob {
    pub data: usize,
    pub config: Arc<FitConfig>,
}
