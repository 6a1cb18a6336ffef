//! One fit in progress, as an ask/tell machine.

use ns_core::optim::Termination;

use super::result::{OptimizerEnd, assemble_result};
use super::{FitConfig, FitResult};
use crate::optimizer::Lbfgsb;

/// One fit in progress: the L-BFGS-B machine over the free parameters in scaled coordinates,
/// driven by whoever evaluates the points it asks for — the CPU loop of [`Fitter::fit`], or a
/// lockstep batch of many fits on a GPU ([`Fitter::fit_batch`]).
pub struct FitRun {
    pub(crate) free: Vec<usize>,
    pub(crate) scale: Vec<f64>,
    /// The optimizer's box, in scaled coordinates.
    pub(crate) lower: Vec<f64>,
    pub(crate) upper: Vec<f64>,
    pub(crate) full: Vec<f64>,
    /// The box of the free parameters, unscaled.
    pub(crate) bounds: Vec<(f64, f64)>,
    pub(crate) free_grad: Vec<f64>,
    pub(crate) state: Lbfgsb,
}

impl FitRun {
    /// The full parameter vector to evaluate next, or `None` once finished.
    pub fn ask(&mut self) -> Option<&[f64]> {
        let y = self.state.ask()?;
        for (k, &i) in self.free.iter().enumerate() {
            // The box in scaled coordinates, unscaled, may round past a bound: clamp back.
            self.full[i] = (y[k] / self.scale[k]).clamp(self.bounds[k].0, self.bounds[k].1);
        }
        Some(&self.full)
    }

    /// The objective (twice_nll minus its data constant) and its full gradient at the point
    /// from [`ask`](Self::ask).
    pub fn tell(&mut self, f: f64, grad: &[f64]) {
        for (k, &i) in self.free.iter().enumerate() {
            self.free_grad[k] = grad[i] / self.scale[k];
        }
        self.state.tell(f, &self.free_grad);
    }

    /// The most iterations its optimizer takes.
    pub(crate) fn max_iterations(&self) -> usize {
        self.state.max_iterations()
    }

    /// The variable scaling over all `n_params` parameters (1 for the fixed ones).
    pub(crate) fn full_scale(&self, n_params: usize) -> Vec<f64> {
        let mut scale = vec![1.0; n_params];
        for (&i, &s) in self.free.iter().zip(&self.scale) {
            scale[i] = s;
        }
        scale
    }

    /// The result without uncertainties. The projected gradient comes from the optimizer's
    /// last gradient, so finishing costs no evaluation.
    pub(crate) fn result(&self, config: &FitConfig, constant: f64) -> FitResult {
        assemble_result(
            &self.free,
            &self.scale,
            config,
            OptimizerEnd {
                x: self.state.x(),
                g: self.state.gradient(),
                f: self.state.f(),
                iterations: self.state.iterations(),
                evaluations: self.state.evaluations(),
                termination: self
                    .state
                    .termination()
                    .unwrap_or(Termination::MaxIterations),
            },
            constant,
        )
    }
}
