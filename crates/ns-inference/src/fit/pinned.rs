//! Fits that stop against a wall of the likelihood along single parameters.
//!
//! Published likelihoods carry samples whose normsys product — dozens of code-4 polynomials,
//! factors of ~24 on a sample of 4·10⁻⁴ events — crosses zero with a slope of up to 10¹³
//! events per unit of one nuisance parameter. Under ROOT's clipping the sample yields nothing on
//! one side; on the other its yield runs away within 10⁻¹³ of that parameter: to a bin that
//! expects a negative count (undefined, as in ROOT), or through a minimum narrower than f64
//! resolves in the parameter. A toy's minimum often lies against such a wall. The gradient
//! there does not vanish (it is the wall's, or rounding at a slope of 10¹³), and L-BFGS-B, which
//! moves every parameter at once, stalls: each step it tries crosses the wall, and so does each
//! sampled gradient's step at a kink ([`super::kink`]).
//!
//! Such a parameter is *pinned*: a step of 10⁻⁶ σ along its descent direction does not lower
//! the objective, or leaves where it is defined ([`PIN_STEP`]). The fit holds the pinned
//! parameters where they are and fits the others, in rounds: a parameter that is no longer
//! pinned where the others ended moves again. Only likelihoods with kinks have such walls. The end is converged
//! ([`Termination::ConvergedPinned`]) where the others pass the gradient test and a compass
//! search along the held ones ([`COMPASS_STEPS`]) finds nothing lower: the wall is within f64's
//! resolution of the point, and the other parameters set the wall's sample's yield (its normfactor
//! and γ) as the held one would.

use ns_compute::{Device, PreparedData};
use ns_core::Result;
use ns_core::optim::Termination;

use super::{FitConfig, FitResult, FitRun, Fitter};

/// The probe step that tells a pinned parameter, in the optimizer's curvature-scaled variable
/// (units of about its σ): walls lie within 10⁻⁷ of where L-BFGS-B stalls, and a smooth
/// parameter that fails the gradient test lowers the objective over 10⁻⁶ σ.
const PIN_STEP: f64 = 1e-6;

/// Steps of the compass search along held parameters, in the same units: from
/// [`PIN_STEP`] down to 10⁻¹³, where the narrowest minima behind such walls lie.
const COMPASS_STEPS: [f64; 8] = [1e-6, 1e-7, 1e-8, 1e-9, 1e-10, 1e-11, 1e-12, 1e-13];

/// The least decrease of twice_nll that the compass search takes: a hundredth of
/// [`REPEATED_END_ATOL`](ns_core::optim::REPEATED_END_ATOL), far below any difference of test
/// statistics that results report.
const PIN_GAIN: f64 = 1e-9;

/// Compass moves per round.
const COMPASS_MOVES: usize = 50;

/// Rounds of holding the pinned parameters and fitting the others.
const PIN_ROUNDS: usize = 6;

impl Fitter<'_> {
    /// Where a fit stopped short of the gradient test (see the module): the parameters pinned
    /// against a wall held, the others fitted, on the host; converged
    /// ([`Termination::ConvergedPinned`]) where the others pass the gradient test and a compass
    /// search along the held ones (every step of [`COMPASS_STEPS`] either way) finds nothing
    /// lower by [`PIN_GAIN`]. The point moves only where the objective decreases.
    pub(crate) fn hold_pinned(
        &self,
        mut result: FitResult,
        data: &PreparedData,
        config: &FitConfig,
        run: &FitRun,
        tolerance: f64,
    ) -> Result<FitResult> {
        // Walls along single parameters are those of clipped yields (a likelihood without kinks
        // has none, and a stiff smooth parameter must not pass for one); a fit that ended where
        // an empty bin expects a negative count descends a likelihood unbounded below, which no
        // wall holds.
        if self.holding
            || self.smoothed
            || !result.twice_nll.is_finite()
            || !self.model().has_kinks()
            || self
                .model()
                .negative_empty_bins(&result.parameters, data)
                .is_some()
        {
            return Ok(result);
        }
        let n = self.model().n_params();
        let mut host =
            Fitter::with_backend(self.model(), self.model().open_for_fits(Device::Cpu)?)?
                .with_interrupt(self.interrupt().clone());
        host.holding = true;
        let scale = run.full_scale(n);
        for round in 0..PIN_ROUNDS {
            let x = result.parameters.clone();
            let (f, grad) = self.host_objective(&x, data)?;
            // The free parameters that fail the scaled gradient test, and of them the pinned.
            let failing: Vec<usize> = run
                .free
                .iter()
                .zip(&run.scale)
                .filter(|&(&i, &s)| {
                    let (lo, hi) = config.bounds[i];
                    ((x[i] - grad[i]).clamp(lo, hi) - x[i]).abs() > tolerance * s.max(1.0)
                })
                .map(|(&i, _)| i)
                .collect();
            if failing.is_empty() {
                result.converged = true;
                result.termination = Termination::ConvergedScaled;
                break;
            }
            let descents: Vec<(usize, f64)> = failing
                .iter()
                .map(|&i| (i, -grad[i].signum() * PIN_STEP))
                .collect();
            let (probes, values) = self.probe_steps(&x, &descents, &scale, data, config)?;
            let pinned: Vec<usize> = failing
                .iter()
                .enumerate()
                .filter(|&(k, &i)| probes[k * n + i] == x[i] || !(values[k] < f))
                .map(|(_, &i)| i)
                .collect();
            if pinned.is_empty() && round == 0 {
                // No wall: the kink handling's case.
                break;
            }
            // With nothing pinned (a held parameter moved away from its wall), every free
            // parameter starts again from there.
            let mut held = FitConfig {
                scale: Some(scale.clone()),
                uncertainties: false,
                ..config.starting_at(&x)
            };
            for &i in &pinned {
                held = held.with_fixed(i, x[i]);
            }
            let end = host.fit(data, &held)?;
            result.iterations += end.iterations;
            result.evaluations += end.evaluations;
            if !(end.twice_nll <= result.twice_nll) {
                break;
            }
            let (settled, f_settled, moved, evaluations) =
                self.compass_search(end.parameters, &pinned, &scale, data, config)?;
            result.evaluations += evaluations;
            let grad_settled = self.host_objective(&settled, data)?.1;
            result.projected_gradient =
                super::result::projected_gradient(&settled, &grad_settled, config, &run.free);
            result.twice_nll = f_settled + 2.0 * data.constant;
            result.parameters = settled;
            if end.converged && !moved {
                result.converged = true;
                result.termination = if pinned.is_empty() {
                    end.termination
                } else {
                    Termination::ConvergedPinned
                };
                break;
            }
        }
        Ok(result)
    }

    /// Compass search along `held` from `x`: every step of [`COMPASS_STEPS`] either way along
    /// each, in one batch; the lowest taken where it lowers the objective by [`PIN_GAIN`], until
    /// none does. Returns the end, its objective, whether it moved, and the evaluations spent.
    fn compass_search(
        &self,
        mut x: Vec<f64>,
        held: &[usize],
        scale: &[f64],
        data: &PreparedData,
        config: &FitConfig,
    ) -> Result<(Vec<f64>, f64, bool, usize)> {
        let mut f = self.host_objective(&x, data)?.0;
        let steps: Vec<(usize, f64)> = held
            .iter()
            .flat_map(|&i| COMPASS_STEPS.iter().flat_map(move |&h| [(i, h), (i, -h)]))
            .collect();
        let (mut moved, mut evaluations) = (false, 1);
        for _ in 0..COMPASS_MOVES {
            if steps.is_empty() {
                break;
            }
            let (probes, values) = self.probe_steps(&x, &steps, scale, data, config)?;
            evaluations += steps.len();
            let best = (0..steps.len())
                .filter(|&k| values[k].is_finite())
                .min_by(|&a, &b| values[a].total_cmp(&values[b]));
            match best {
                Some(k) if values[k] < f - PIN_GAIN => {
                    let n = x.len();
                    x.copy_from_slice(&probes[k * n..(k + 1) * n]);
                    f = values[k];
                    moved = true;
                }
                _ => break,
            }
        }
        Ok((x, f, moved, evaluations))
    }

    /// The points `x` moved along one parameter each — (parameter, step in the optimizer's
    /// curvature-scaled variable y = x·s, about its σ) — clamped to the box, and the objective
    /// at each, in one host batch.
    fn probe_steps(
        &self,
        x: &[f64],
        steps: &[(usize, f64)],
        scale: &[f64],
        data: &PreparedData,
        config: &FitConfig,
    ) -> Result<(Vec<f64>, Vec<f64>)> {
        let n = x.len();
        let mut points = Vec::with_capacity(steps.len() * n);
        for &(i, step) in steps {
            let (lo, hi) = config.bounds[i];
            let mut point = x.to_vec();
            let s = if scale[i] > 0.0 { scale[i] } else { 1.0 };
            point[i] = (x[i] + step / s).clamp(lo, hi);
            points.extend_from_slice(&point);
        }
        let (mut fs, mut grads) = (vec![0.0; steps.len()], vec![0.0; steps.len() * n]);
        self.probe_host_batch(&points, data, &mut fs, &mut grads)?;
        Ok((points, fs))
    }

    /// The objective and its gradient at `x`, in f64 on the host.
    fn host_objective(&self, x: &[f64], data: &PreparedData) -> Result<(f64, Vec<f64>)> {
        let (mut f, mut grad) = ([0.0], vec![0.0; x.len()]);
        self.probe_host_batch(x, data, &mut f, &mut grad)?;
        Ok((f[0], grad))
    }
}
