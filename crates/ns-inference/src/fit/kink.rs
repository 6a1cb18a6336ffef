//! Fits that stop at a kink of their likelihood.
//!
//! Where a sample's yield is clipped at zero (ROOT's semantics) or raised to a floor, the
//! likelihood has kinks, and its minimum often lies on one: a constraint pulls a parameter back
//! toward its nominal value while an empty bin pushes it on, and the clip stops the push. No
//! gradient vanishes there, and a quasi-Newton method stalls on the kink before it: every
//! step along its direction crosses the kink, where the gradient turns. What applies is
//! gradient sampling (Burke, Lewis & Overton): gradients at a few points within a small ball
//! around the point (in the optimizer's curvature-scaled parameters), their convex combination
//! of least norm as the direction (it follows the kink instead of crossing it), a line search
//! along it, and the ball shrunk where no step lowers the objective. The point is a minimum
//! (Clarke-stationary) where that combination is below the fit's tolerance in a ball of radius
//! [`CERTIFY_RADIUS`]: no direction lowers the objective. Away from kinks the sampled gradients
//! agree, and the test is the projected-gradient test of a smooth fit.
//!
//! Gradient sampling steps like steepest descent, and a minimum on a kink that many parameters
//! move (a morphed template's bin at its floor, CMS Combine's `shape`: every shape systematic of
//! the process moves it) lies at the end of a long, badly scaled valley. Where the likelihood
//! can smooth its kinks ([`Likelihood::open_smoothed`](ns_compute::Likelihood::open_smoothed)),
//! a stalled fit first follows the minimum of the smoothed likelihood as the width shrinks
//! ([`SMOOTHING_WIDTHS`]), by quasi-Newton fits that converge on a smooth function; the exact
//! likelihood then judges the end, and gradient sampling finishes what remains.

use ns_compute::rng::ToyStream;
use ns_compute::{Datasets, PreparedData};
use ns_core::Result;
use ns_core::optim::Termination;

use super::{FitConfig, FitResult, FitRun, Fitter};

/// The seed of the sampling's random stream.
const KINK_SEED: u64 = 0x6b69_6e6b;

/// The first radius sampled, in curvature-scaled parameters (units of about one σ).
const START_RADIUS: f64 = 1e-3;

/// The radius at or below which a small convex combination makes the point a minimum: the
/// objective there is within ~radius² (10⁻¹²) of the lowest within the ball.
const CERTIFY_RADIUS: f64 = 1e-6;

/// The radius below which sampling stops.
const END_RADIUS: f64 = 1e-10;

/// Points sampled per ball (besides the point): enough to straddle the few kinks that meet at
/// a minimum.
const SAMPLES: usize = 16;

/// Gradients kept around one point (the latest).
const MAX_BUNDLE: usize = 96;

/// Step lengths tried at once along a direction: 1, ½, ¼, … down to where the step is within
/// the sampled ball (there the sampled gradients promise a decrease), at most this many.
const MAX_STEPS: usize = 64;

/// Sampling rounds (each a batch of gradients, then a batch of steps).
const MAX_ROUNDS: usize = 60;

/// Iterations of the projected-gradient solver of the small quadratic program.
const QP_ITERATIONS: usize = 2000;

/// Iterations of that solver between checks of whether its combination will do.
const CHECK_INTERVAL: usize = 10;

/// Widths, in events, over which a stalled fit's kinks are smoothed in turn, each fit starting
/// where the previous one ended: the smoothed minimum is within about the width (times the
/// gradient's jump) of the kink's.
const SMOOTHING_WIDTHS: [f64; 4] = [1e-2, 1e-4, 1e-6, 1e-9];

impl Fitter<'_> {
    /// Where the likelihood smooths its kinks ([`Likelihood::open_smoothed`]
    /// (ns_compute::Likelihood::open_smoothed)): fits of the smoothed likelihood from
    /// `result`'s end, over [`SMOOTHING_WIDTHS`] in turn. Their end replaces `result`'s where
    /// the exact objective is lower there, and is converged where it passes the fit's scaled
    /// test ([`Termination::ConvergedScaled`]).
    pub(crate) fn follow_smoothed_kinks(
        &self,
        mut result: FitResult,
        data: &PreparedData,
        config: &FitConfig,
        run: &FitRun,
        tolerance: f64,
    ) -> Result<FitResult> {
        if self.smoothed || !result.twice_nll.is_finite() {
            return Ok(result);
        }
        let mut x = result.parameters.clone();
        for width in SMOOTHING_WIDTHS {
            let Some(backend) = self.model().open_smoothed(width) else {
                return Ok(result);
            };
            let mut fitter = Fitter::with_backend(self.model(), backend)?
                .with_interrupt(self.interrupt().clone());
            fitter.smoothed = true;
            let start = FitConfig {
                scale: None,
                uncertainties: false,
                ..config.starting_at(&x)
            };
            let end = fitter.fit(data, &start)?;
            result.iterations += end.iterations;
            result.evaluations += end.evaluations;
            if end.twice_nll.is_finite() {
                x = end.parameters;
            }
        }
        let check = self.check_in_f64(&x, data, config, run, tolerance)?;
        if check.twice_nll <= result.twice_nll {
            result.parameters = x;
            result.twice_nll = check.twice_nll;
            result.projected_gradient = check.projected_gradient;
            if check.within {
                result.converged = true;
                result.termination = Termination::ConvergedScaled;
            }
        }
        Ok(result)
    }

    /// Gradient sampling from `result`, where a fit stopped short of the projected-gradient
    /// test (see the module). The point moves only where the objective decreases; the result is
    /// converged ([`Termination::ConvergedKink`]) where it ends Clarke-stationary. Evaluations
    /// run in f64 on the likelihood's CPU backend, so every device reaches the same verdict from
    /// the same point.
    pub(crate) fn descend_at_kinks(
        &self,
        mut result: FitResult,
        data: &PreparedData,
        config: &FitConfig,
        run: &FitRun,
        tolerance: f64,
    ) -> Result<FitResult> {
        let n = self.model().n_params();
        let sigma: Vec<f64> = run.scale.iter().map(|s| s.max(1.0)).collect();
        let mut x = result.parameters.clone();
        let (mut f, mut grad) = (vec![0.0; 1], vec![0.0; n]);
        self.probe_host_batch(&x, data, &mut f, &mut grad)?;
        let (start, mut fx, mut gx) = (f[0], f[0], grad.clone());
        if !fx.is_finite() {
            return Ok(result);
        }
        // A fixed stream of the toys' generator: the verdict is a function of the end point.
        let mut rng = ToyStream::new(KINK_SEED, 0, 0);
        let mut radius = START_RADIUS;
        let mut certified = false;
        let mut bundle: Vec<(Vec<f64>, Vec<f64>)> = Vec::new();
        let mut evaluations = 1;
        for _ in 0..MAX_ROUNDS {
            // The components that move: free parameters, less those resting on a bound that
            // their gradient pushes against (the bound's normal cone absorbs it).
            let moving: Vec<usize> = (0..run.free.len())
                .filter(|&k| {
                    let i = run.free[k];
                    let (lo, hi) = config.bounds[i];
                    let near = radius / sigma[k];
                    !((x[i] - lo <= near && gx[i] > 0.0) || (hi - x[i] <= near && gx[i] < 0.0))
                })
                .collect();
            if moving.is_empty() {
                break;
            }
            let mut points = x.clone();
            for _ in 0..SAMPLES {
                let mut point = x.clone();
                for &k in &moving {
                    let i = run.free[k];
                    let (lo, hi) = config.bounds[i];
                    point[i] =
                        (x[i] + (2.0 * rng.uniform() - 1.0) * radius / sigma[k]).clamp(lo, hi);
                }
                points.extend_from_slice(&point);
            }
            let m = SAMPLES + 1;
            let (mut fs, mut gs) = (vec![0.0; m], vec![0.0; m * n]);
            self.probe_host_batch(&points, data, &mut fs, &mut gs)?;
            evaluations += m;
            // The bundle: the finite gradients sampled within the ball around this point, this
            // round's and those of earlier rounds that lie in it (steps near a kink are short).
            bundle.extend(finite_rows(&points, &fs, &gs, n));
            bundle.retain(|(point, _)| {
                run.free
                    .iter()
                    .zip(&sigma)
                    .all(|(&i, s)| (point[i] - x[i]).abs() * s <= radius * (1.0 + 1e-9))
            });
            if bundle.len() > MAX_BUNDLE {
                bundle.drain(..bundle.len() - MAX_BUNDLE);
            }
            let columns: Vec<Vec<f64>> = bundle
                .iter()
                .map(|(_, g)| moving.iter().map(|&k| g[run.free[k]] / sigma[k]).collect())
                .collect();
            if columns.is_empty() {
                break;
            }
            // ‖d‖² to 10⁻⁴ of itself, or d within the tolerance that certifies.
            let weights = smallest_convex_combination(&columns, tolerance, 1e-4);
            let d: Vec<f64> = (0..moving.len())
                .map(|k| columns.iter().zip(&weights).map(|(c, w)| w * c[k]).sum())
                .collect();
            if !d.iter().all(|v| v.is_finite()) {
                // Gradients beyond f64's squares: nothing to learn from them here.
                break;
            }
            // Only the tolerance itself certifies: an estimate of what a step could still gain
            // (½‖d‖², as a Newton decrement) accepted fits of published likelihoods whose
            // continuation later lowered twice_nll by 0.3.
            if d.iter().all(|v| v.abs() <= tolerance) {
                if radius <= CERTIFY_RADIUS {
                    certified = true;
                    break;
                }
                radius *= 0.1;
                continue;
            }
            // A line search along −d (scaled, projected onto the box), every step length in one
            // batch; the longest with a sufficient decrease (Armijo, on the step taken) is taken.
            let longest = d.iter().fold(0.0f64, |a, v| a.max(v.abs()));
            let n_steps = ((longest / radius).log2().ceil() + 2.0).clamp(2.0, MAX_STEPS as f64);
            let n_steps = n_steps as usize;
            let mut steps = Vec::with_capacity(n_steps * n);
            for s in 0..n_steps {
                let t = 0.5f64.powi(s as i32);
                let mut point = x.clone();
                for (&k, dk) in moving.iter().zip(&d) {
                    let i = run.free[k];
                    let (lo, hi) = config.bounds[i];
                    point[i] = (x[i] - t * dk / sigma[k]).clamp(lo, hi);
                }
                steps.extend_from_slice(&point);
            }
            let (mut ft, mut gt) = (vec![0.0; n_steps], vec![0.0; n_steps * n]);
            self.probe_host_batch(&steps, data, &mut ft, &mut gt)?;
            evaluations += n_steps;
            // The steps' gradients join the bundle: a step that crossed a kink brings the
            // gradient of its far side, which the next ball may need.
            bundle.extend(finite_rows(&steps, &ft, &gt, n));
            let taken = (0..n_steps).find(|&s| {
                let step = &steps[s * n..(s + 1) * n];
                let predicted: f64 = moving
                    .iter()
                    .zip(&d)
                    .map(|(&k, dk)| {
                        let i = run.free[k];
                        dk * (x[i] - step[i]) * sigma[k]
                    })
                    .sum();
                ft[s].is_finite() && predicted > 0.0 && ft[s] <= fx - 1e-4 * predicted
            });
            match taken {
                Some(s) => {
                    x.copy_from_slice(&steps[s * n..(s + 1) * n]);
                    fx = ft[s];
                    gx.copy_from_slice(&gt[s * n..(s + 1) * n]);
                    // A step taken: the ball may grow again (a point stuck against a kink
                    // needs a ball that straddles it).
                    radius = (radius * 10.0).min(START_RADIUS);
                }
                None if radius > END_RADIUS => radius *= 0.1,
                None => break,
            }
        }
        result.evaluations += evaluations;
        if fx < start {
            result.twice_nll = fx + 2.0 * data.constant;
            result.projected_gradient =
                super::result::projected_gradient(&x, &gx, config, &run.free);
            result.parameters = x;
        }
        if certified {
            result.converged = true;
            result.termination = Termination::ConvergedKink;
        }
        Ok(result)
    }

    /// The objective and gradient at the rows of `points`, in f64 on the CPU.
    pub(super) fn probe_host_batch(
        &self,
        points: &[f64],
        data: &PreparedData,
        f: &mut [f64],
        grad: &mut [f64],
    ) -> Result<()> {
        self.objective_batch_on(
            self.host(),
            points,
            Datasets::Host(std::slice::from_ref(data)),
            &vec![0; f.len()],
            f,
            grad,
        )
    }
}

/// The (point, gradient) rows of a batch where the objective and the gradient are finite.
fn finite_rows(points: &[f64], f: &[f64], grad: &[f64], n: usize) -> Vec<(Vec<f64>, Vec<f64>)> {
    (0..f.len())
        .filter(|&j| f[j].is_finite() && grad[j * n..(j + 1) * n].iter().all(|v| v.is_finite()))
        .map(|j| {
            (
                points[j * n..(j + 1) * n].to_vec(),
                grad[j * n..(j + 1) * n].to_vec(),
            )
        })
        .collect()
}

/// The weights t (t ≥ 0, Σt = 1) minimising ‖Σ_j t_j c_j‖²: accelerated projected gradient
/// (FISTA) on the simplex over the Gram matrix of the columns, with the step 1/λ_max (power
/// iteration): the sampled gradients are often nearly parallel, and the plain method crawls.
/// Every [`CHECK_INTERVAL`] iterations it stops where the combination is already within
/// `tolerance` in every component (what certifies a point: the least is smaller still) or where
/// the Frank–Wolfe gap bounds what ‖Σ t c‖² can still lose by `relative` of itself.
fn smallest_convex_combination(columns: &[Vec<f64>], tolerance: f64, relative: f64) -> Vec<f64> {
    let m = columns.len();
    let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();
    let gram: Vec<f64> = (0..m * m)
        .map(|k| dot(&columns[k / m], &columns[k % m]))
        .collect();
    let times = |v: &[f64], out: &mut [f64]| {
        for (j, o) in out.iter_mut().enumerate() {
            *o = dot(&gram[j * m..(j + 1) * m], v);
        }
    };
    let mut v = vec![1.0; m];
    let mut w = vec![0.0; m];
    let mut largest = 0.0;
    for _ in 0..50 {
        times(&v, &mut w);
        largest = dot(&w, &w).sqrt();
        if !(largest > 0.0) {
            return vec![1.0 / m as f64; m];
        }
        for (a, b) in v.iter_mut().zip(&w) {
            *a = b / largest;
        }
    }
    // The power iteration approaches λ_max from below: a margin keeps the step stable.
    let step = 1.0 / (1.01 * largest);
    let mut t = vec![1.0 / m as f64; m];
    let mut y = t.clone();
    let (mut next, mut g) = (vec![0.0; m], vec![0.0; m]);
    let mut momentum = 1.0f64;
    for iteration in 0..QP_ITERATIONS {
        if iteration % CHECK_INTERVAL == 0 {
            times(&t, &mut g);
            // ‖d‖² − min_j ⟨c_j, d⟩ ≥ ‖d‖² − its minimum over the simplex.
            let value = dot(&t, &g);
            let gap = value - g.iter().fold(f64::INFINITY, |a, &v| a.min(v));
            let within = (0..columns[0].len()).all(|k| {
                columns
                    .iter()
                    .zip(&t)
                    .map(|(c, w)| w * c[k])
                    .sum::<f64>()
                    .abs()
                    <= tolerance
            });
            if within || gap <= relative * value {
                break;
            }
        }
        times(&y, &mut g);
        for ((n, yj), gj) in next.iter_mut().zip(&y).zip(&g) {
            *n = yj - step * gj;
        }
        project_onto_simplex(&mut next);
        let following = 0.5 * (1.0 + (1.0 + 4.0 * momentum * momentum).sqrt());
        let beta = (momentum - 1.0) / following;
        for ((yj, nj), tj) in y.iter_mut().zip(&next).zip(&t) {
            *yj = nj + beta * (nj - tj);
        }
        momentum = following;
        let change = t
            .iter()
            .zip(&next)
            .fold(0.0f64, |a, (u, v)| a.max((u - v).abs()));
        std::mem::swap(&mut t, &mut next);
        if change < 1e-14 {
            break;
        }
    }
    t
}

/// Euclidean projection onto {t ≥ 0, Σt = 1} (sort and threshold).
fn project_onto_simplex(v: &mut [f64]) {
    let mut sorted = v.to_vec();
    sorted.sort_by(|a, b| b.total_cmp(a));
    let (mut sum, mut threshold) = (0.0, 0.0);
    for (k, &u) in sorted.iter().enumerate() {
        sum += u;
        let candidate = (sum - 1.0) / (k + 1) as f64;
        if u - candidate > 0.0 {
            threshold = candidate;
        }
    }
    for x in v.iter_mut() {
        *x = (*x - threshold).max(0.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_combination_of_opposite_gradients_cancels_and_of_equal_ones_does_not() {
        // Two sides of a kink along x, the same pull along y: the smallest combination keeps y.
        let w = smallest_convex_combination(&[vec![3.0, 0.5], vec![-1.0, 0.5]], 0.0, 0.0);
        let d: Vec<f64> = (0..2)
            .map(|k| w[0] * [3.0, 0.5][k] + w[1] * [-1.0, 0.5][k])
            .collect();
        assert!(
            (w[0] - 0.25).abs() < 1e-9 && (w[1] - 0.75).abs() < 1e-9,
            "{w:?}"
        );
        assert!(d[0].abs() < 1e-9 && (d[1] - 0.5).abs() < 1e-12, "{d:?}");
    }

    #[test]
    fn the_projection_lands_on_the_simplex() {
        let mut v = vec![0.9, 0.8, -2.0];
        project_onto_simplex(&mut v);
        assert!((v.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        assert!((v[0] - 0.55).abs() < 1e-12 && (v[1] - 0.45).abs() < 1e-12 && v[2] == 0.0);
    }
}
