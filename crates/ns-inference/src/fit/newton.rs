//! Projected-Newton steps: the polish of a fit that L-BFGS-B left short of its tolerance, and
//! the handover of a slow CPU fit to Newton once it is close to its minimum.
//!
//! L-BFGS-B with a diagonal preconditioner crawls on likelihoods whose parameters are strongly
//! correlated (a cross-section POI against a dozen normalisation systematics, with 10⁶ events
//! per bin): the published ATLAS tt̄ ℓ+jets likelihood needs ~2000 iterations and still ends with a
//! projected gradient of 1e-2, and the 2000-bin model spends two thirds of its 452 iterations
//! going from 1e-5 above its minimum to it. Where the model is small enough for a dense Hessian,
//! a few Newton steps on the free variables (Bertsekas' projected Newton: variables held at a
//! bound by their gradient stay there, the rest take the Newton step, an Armijo search along the
//! projected arc) finish the job — what MINUIT's MIGRAD + HESSE achieve with a full covariance.
//!
//! - The *polish* runs on every backend after the optimizer stalled; its Hessians are the
//!   likelihood's analytic one where it has one (on the host), else central differences of the
//!   gradient through `probe_batch` (f64).
//! - The *handover* runs inside a CPU fit that has not converged in [`HANDOVER_AFTER`]
//!   iterations, and only where the likelihood's own Hessian at the current point is positive
//!   definite and predicts a decrease (½ gᵀH⁻¹g of twice_nll, MINUIT's EDM) of at most
//!   [`HANDOVER_EDM`]: inside the quadratic basin of the minimum L-BFGS-B is converging to, not
//!   merely somewhere with a small gradient (handing over by iteration count alone sent free
//!   toy fits of the tt̄ ℓ+jets likelihood to stationary points ~1,500 higher, `495d1e5`). The
//!   handover stands only if its steps reach the tolerance; otherwise L-BFGS-B goes on from
//!   where it was.
//!
//! Both reuse a factorised Hessian while each step at least quarters the Newton decrement (chord
//! steps, one gradient each), and take a fresh one otherwise.

use ns_compute::PreparedData;
use ns_core::Result;

use super::{
    DENSE_PARAMETER_LIMIT, FitConfig, FitResult, FitRun, Fitter, at_bound, projected_gradient,
};
use crate::linalg::{cholesky, cholesky_solve, dot};
use crate::optimizer::Termination;
use ns_compute::Datasets;

/// Newton steps of one polish. More rescue rare fits (a background-only toy of the published
/// staus likelihood needs 100–200) but cost dense Hessians on every stalled fit: with 200, the
/// tt̄ ℓ+jets toys took 4× longer on a GPU and the CPU and GPU ends still differed on that toy,
/// so a fit that 20 steps leave short is restarted (toys) or reported instead.
const MAX_NEWTON_STEPS: usize = 20;
const ARMIJO: f64 = 1e-4;
const MAX_BACKTRACKS: usize = 40;

/// L-BFGS-B iterations before a CPU fit first tries the handover: most fits converge sooner
/// (tHq in 55), where a Hessian would cost more than the iterations it saves.
pub(crate) const HANDOVER_AFTER: usize = 100;
/// Largest predicted decrease of twice_nll (½ gᵀH⁻¹g) at which a fit hands over to Newton: the
/// minimum of the quadratic model lies within about one standard deviation (in the Hessian's
/// metric). MIGRAD takes such quasi-Newton steps from anywhere. On the tt̄ ℓ+jets fit 1e-2 hands
/// over after 505 iterations, 1 after 225; the toy test (`newton_handover.rs`) holds at both.
const HANDOVER_EDM: f64 = 1.0;
/// Most free parameters for a handover: its dense Cholesky (k³/3) must stay cheaper than the
/// iterations it saves.
const HANDOVER_MAX_FREE: usize = 500;
/// Tries whose Newton steps start inside the basin but do not reach the tolerance, before a
/// fit stops trying.
const MAX_SHORT_TRIES: usize = 2;
/// A reused factorisation serves the next step while the Newton decrement falls at least this
/// much per step; otherwise the Hessian is taken afresh.
const CHORD_DECREMENT_RATIO: f64 = 0.25;

/// Where Newton steps take their Hessians.
#[derive(Clone, Copy, PartialEq)]
enum Curvature {
    /// The likelihood's analytic Hessian where it has one (exact where a steep direction makes
    /// differences of the gradient poor), else central differences of the gradient (the polish).
    Differences,
    /// The likelihood's analytic Hessian, or differences where it has none if the fit has
    /// already spent as many iterations as they cost gradients (the handover).
    Analytic,
}

/// A factorised (possibly damped) Hessian over the `moving` variables.
struct Factor {
    moving: Vec<usize>,
    cholesky: Vec<f64>,
    /// gᵀH⁻¹g of the last step solved with it.
    decrement: f64,
}

/// When a running CPU fit next tries the handover to Newton.
pub(crate) struct Handover {
    next_try: usize,
    /// Gradient evaluations of tries that did not finish the fit.
    pub(crate) spent_evaluations: usize,
    /// Tries that passed the test at their start but whose Newton steps did not converge.
    short_tries: usize,
}

impl Handover {
    pub(crate) fn new(config: &FitConfig, n_free: usize) -> Self {
        Handover {
            next_try: if handover_applies(config, n_free) {
                HANDOVER_AFTER
            } else {
                usize::MAX
            },
            spent_evaluations: 0,
            short_tries: 0,
        }
    }

    /// The fit, finished by Newton steps, if `run` is due for a handover and its point
    /// qualifies; `None` to let L-BFGS-B go on (the next try after half as many iterations
    /// again, so a fit far from its minimum pays few Hessians).
    pub(crate) fn try_finish(
        &mut self,
        fitter: &Fitter,
        run: &FitRun,
        data: &PreparedData,
        config: &FitConfig,
    ) -> Result<Option<FitResult>> {
        let iterations = run.state.iterations();
        if iterations < self.next_try || run.state.termination().is_some() {
            return Ok(None);
        }
        self.next_try = iterations + iterations / 2;
        let current = run.result(config, data.constant);
        let before = current.evaluations;
        match newton_steps(
            fitter,
            current,
            data,
            config,
            &run.free,
            Curvature::Analytic,
        )? {
            Some(finished) if finished.converged => Ok(Some(FitResult {
                evaluations: finished.evaluations + self.spent_evaluations,
                ..finished
            })),
            Some(short) => {
                // Newton steps from inside the basin that cannot reach the tolerance either
                // met a bound or a curvature that changes (a later try may succeed), or stall
                // at the rounding of the objective (a tolerance finer than it resolves, where
                // every try would): after a few such tries L-BFGS-B finishes alone.
                self.spent_evaluations += short.evaluations - before;
                self.short_tries += 1;
                if self.short_tries == MAX_SHORT_TRIES {
                    self.next_try = usize::MAX;
                }
                Ok(None)
            }
            // Refused at its starting point, after one evaluation there.
            None => {
                self.spent_evaluations += 1;
                Ok(None)
            }
        }
    }
}

/// Whether a CPU fit of `config` over `n_free` free parameters tries the handover.
pub(crate) fn handover_applies(config: &FitConfig, n_free: usize) -> bool {
    config.newton_handover && (1..=HANDOVER_MAX_FREE.min(DENSE_PARAMETER_LIMIT)).contains(&n_free)
}

/// Whether an f64 device fit of `config` stops at [`HANDOVER_AFTER`] iterations for the host
/// (`Fitter::handover_cap`): where the handover applies and the fit's own limit lies beyond.
pub(crate) fn caps_device_fits(config: &FitConfig, n_free: usize) -> bool {
    handover_applies(config, n_free) && config.optimizer.max_iterations > HANDOVER_AFTER
}

/// Whether L-BFGS-B stopped short of convergence at a point where the likelihood is defined
/// (not a failed start).
pub(crate) fn stalled(result: &FitResult) -> bool {
    matches!(
        result.termination,
        Termination::MaxIterations | Termination::MaxEvaluations | Termination::LineSearchFailed
    ) && result.twice_nll.is_finite()
}

/// Whether `result` should be polished: it stalled, with free parameters few enough for a dense
/// Hessian.
pub(crate) fn applies(result: &FitResult, n_free: usize) -> bool {
    stalled(result) && n_free > 0 && n_free <= DENSE_PARAMETER_LIMIT
}

/// Newton steps from `result` until the projected gradient of twice_nll is below the fit's
/// tolerance. The result is never worse than `result`: if no step decreases the objective, the
/// L-BFGS-B end point stands with its own termination reason.
pub(crate) fn polish(
    fitter: &Fitter,
    result: FitResult,
    data: &PreparedData,
    config: &FitConfig,
    free: &[usize],
) -> Result<FitResult> {
    let fallback = result.clone();
    Ok(
        newton_steps(fitter, result, data, config, free, Curvature::Differences)?
            .unwrap_or(fallback),
    )
}

/// Projected-Newton steps from `result` (see the module). `None` only with
/// [`Curvature::Analytic`], where the starting point fails the handover's test.
fn newton_steps(
    fitter: &Fitter,
    result: FitResult,
    data: &PreparedData,
    config: &FitConfig,
    free: &[usize],
    curvature: Curvature,
) -> Result<Option<FitResult>> {
    let n = fitter.model().n_params();
    let host = Datasets::Host(std::slice::from_ref(data));
    let evaluate = |x: &[f64], grad: &mut Vec<f64>| -> Result<f64> {
        let mut f = [0.0];
        grad.resize(n, 0.0);
        fitter.probe_batch(x, host, &[0], &mut f, grad)?;
        Ok(f[0])
    };
    let mut x = result.parameters.clone();
    let mut grad = Vec::new();
    let mut f = evaluate(&x, &mut grad)?;
    let mut evaluations = 1;
    let mut steps_taken = 0;
    let mut converged = false;
    let mut factor: Option<Factor> = None;
    for step in 0..MAX_NEWTON_STEPS {
        let current_pg = projected_gradient(&x, &grad, config, free);
        if current_pg <= config.optimizer.pg_tol {
            converged = true;
            break;
        }
        let moving = moving_variables(&x, &grad, config, free);
        if moving.is_empty() {
            break;
        }
        let g: Vec<f64> = moving.iter().map(|&i| grad[i]).collect();
        let chord = factor
            .as_ref()
            .filter(|last| last.moving == moving)
            .map(|last| (last.solve(&g), last.decrement))
            .filter(|(step, last)| {
                let decrement = -dot(step, &g);
                decrement > 0.0 && decrement <= CHORD_DECREMENT_RATIO * last
            })
            .map(|(step, _)| step);
        let reused = chord.is_some();
        let direction = match chord {
            Some(direction) => direction,
            None => {
                let hessian = match curvature {
                    Curvature::Differences => match fitter.analytic_hessian(&x, data, &moving)? {
                        Some(hessian) => hessian,
                        None => {
                            evaluations += 2 * moving.len();
                            fitter.hessian_by_differences(&x, data, &moving)?
                        }
                    },
                    Curvature::Analytic => match fitter.analytic_hessian(&x, data, &moving)? {
                        Some(hessian) => hessian,
                        // Differences cost 2k gradients: a handover pays them only once the
                        // fit has spent as many iterations.
                        None if 2 * moving.len() <= result.iterations => {
                            evaluations += 2 * moving.len();
                            fitter.hessian_by_differences(&x, data, &moving)?
                        }
                        None if step == 0 => return Ok(None),
                        None => break,
                    },
                };
                let entry = curvature == Curvature::Analytic && step == 0;
                let fresh = if entry {
                    // The handover's test, first part: positive definite as it stands.
                    match cholesky(&hessian, moving.len()) {
                        Ok(l) => {
                            let fresh = Factor::new(moving, l);
                            let direction = fresh.solve(&g);
                            Some((fresh, direction))
                        }
                        Err(_) => return Ok(None),
                    }
                } else {
                    Factor::damped(&hessian, moving, &g)
                };
                let Some((fresh, direction)) = fresh else {
                    break;
                };
                // Second part: close to the bottom of that basin.
                if entry && !(0.5 * -dot(&direction, &g) <= HANDOVER_EDM) {
                    return Ok(None);
                }
                factor = Some(fresh);
                direction
            }
        };
        let decrement = -dot(&direction, &g);
        if !(decrement > 0.0 && direction.iter().all(|v| v.is_finite())) {
            break;
        }
        let moving = &factor.as_ref().expect("a step has its factor").moving;
        let mut alpha = 1.0;
        let mut accepted = None;
        for _ in 0..MAX_BACKTRACKS {
            let mut trial = x.clone();
            for (k, &i) in moving.iter().enumerate() {
                trial[i] =
                    (x[i] + alpha * direction[k]).clamp(config.bounds[i].0, config.bounds[i].1);
            }
            let moved: Vec<f64> = free.iter().map(|&i| trial[i] - x[i]).collect();
            let slope: f64 = free.iter().zip(&moved).map(|(&i, d)| grad[i] * d).sum();
            let mut trial_grad = Vec::new();
            let trial_f = evaluate(&trial, &mut trial_grad)?;
            evaluations += 1;
            // Close to the minimum of a stiff direction the decrease (g²/2H) is far below the
            // rounding of f: there a step that keeps f within its rounding and shrinks the
            // projected gradient is progress too.
            let flat = (trial_f - f).abs() <= 64.0 * f64::EPSILON * f.abs().max(1.0)
                && projected_gradient(&trial, &trial_grad, config, free) < current_pg;
            if trial_f.is_finite() && (trial_f <= f + ARMIJO * slope.min(0.0) || flat) {
                accepted = Some((trial, trial_f, trial_grad));
                break;
            }
            alpha *= 0.5;
        }
        let Some((trial, trial_f, trial_grad)) = accepted else {
            if reused {
                // The old curvature no longer fits here: the next step takes a fresh one.
                factor = None;
                continue;
            }
            break;
        };
        if let Some(factor) = factor.as_mut() {
            factor.decrement = decrement;
        }
        (x, f, grad) = (trial, trial_f, trial_grad);
        steps_taken += 1;
    }
    if steps_taken == 0 && !converged {
        return Ok(Some(FitResult {
            evaluations: result.evaluations + evaluations,
            ..result
        }));
    }
    let termination = if converged {
        Termination::Converged
    } else {
        result.termination
    };
    Ok(Some(FitResult {
        twice_nll: f + 2.0 * data.constant,
        converged,
        termination,
        iterations: result.iterations + steps_taken,
        evaluations: result.evaluations + evaluations,
        projected_gradient: projected_gradient(&x, &grad, config, free),
        at_bound: at_bound(&x, config),
        parameters: x,
        ..result
    }))
}

/// The free variables that move: all but those at a bound whose gradient pushes outward.
fn moving_variables(x: &[f64], grad: &[f64], config: &FitConfig, free: &[usize]) -> Vec<usize> {
    free.iter()
        .copied()
        .filter(|&i| {
            let (lo, hi) = config.bounds[i];
            let eps = 1e-12 * (hi - lo).abs().max(1.0);
            !((x[i] - lo <= eps && grad[i] > 0.0) || (hi - x[i] <= eps && grad[i] < 0.0))
        })
        .collect()
}

impl Factor {
    fn new(moving: Vec<usize>, cholesky: Vec<f64>) -> Self {
        Factor {
            moving,
            cholesky,
            decrement: f64::INFINITY,
        }
    }

    /// The Newton step −H⁻¹g.
    fn solve(&self, g: &[f64]) -> Vec<f64> {
        cholesky_solve(&self.cholesky, self.moving.len(), g)
            .into_iter()
            .map(|v| -v)
            .collect()
    }

    /// The factor of `hessian` with the least Levenberg damping (none where it is positive
    /// definite) that gives a finite downhill step, with that step; `None` if no damped system
    /// is solvable.
    fn damped(hessian: &[f64], moving: Vec<usize>, g: &[f64]) -> Option<(Self, Vec<f64>)> {
        let k = moving.len();
        let diagonal_scale = (0..k)
            .map(|i| hessian[i * k + i].abs())
            .fold(0.0, f64::max)
            .max(f64::MIN_POSITIVE);
        let mut damping = 0.0;
        for _ in 0..20 {
            let mut damped = hessian.to_vec();
            for i in 0..k {
                damped[i * k + i] += damping;
            }
            if let Ok(l) = cholesky(&damped, k) {
                let factor = Factor::new(moving.clone(), l);
                let step = factor.solve(g);
                if step.iter().all(|v| v.is_finite()) && dot(&step, g) < 0.0 {
                    return Some((factor, step));
                }
            }
            damping = if damping == 0.0 {
                1e-10 * diagonal_scale
            } else {
                damping * 10.0
            };
        }
        None
    }
}
