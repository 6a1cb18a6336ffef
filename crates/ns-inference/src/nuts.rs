//! The No-U-Turn Sampler (Hoffman & Gelman 2014) as Stan runs it: trajectories doubled forward
//! or backward at random, a state drawn from each by multinomial weights (biased toward the new
//! subtree), the generalised no-U-turn criterion checked across every subtree and its merged
//! neighbours, a diagonal Euclidean metric, and Stan's warmup — dual averaging of the step size
//! toward a target acceptance, the metric learnt from the draws of doubling windows between an
//! initial and a final buffer. The target is any differentiable log density ([`LogDensity`]).

use ns_compute::rng::ToyStream;
use ns_core::{Error, Result};

/// A log density on ℝⁿ with its gradient.
pub trait LogDensity: Sync {
    fn dim(&self) -> usize;
    /// log p at `x`, its gradient written to `grad`: −∞ or NaN where the density vanishes or
    /// cannot be evaluated (a divergence of the trajectory there); an error only where the run
    /// must stop (an interrupt).
    fn log_density(&self, x: &[f64], grad: &mut [f64]) -> Result<f64>;
}

/// What one chain runs.
#[derive(Clone, Copy, Debug)]
pub struct NutsOptions {
    pub warmup: usize,
    pub draws: usize,
    /// Most doublings of a trajectory (2^depth leapfrog steps).
    pub max_depth: usize,
    /// The acceptance statistic the step size adapts toward.
    pub target_accept: f64,
}

/// One chain's draws and what its sampler did after warmup.
#[derive(Clone, Debug)]
pub struct ChainRun {
    /// `draws` points, each `dim` long.
    pub draws: Vec<Vec<f64>>,
    pub divergences: usize,
    /// Draws whose trajectory stopped at `max_depth` rather than turning.
    pub max_depth_hits: usize,
    pub step_size: f64,
    pub mean_tree_depth: f64,
    pub mean_accept: f64,
    /// The inverse metric (per coordinate) warmup learnt.
    pub inverse_metric: Vec<f64>,
}

/// A trajectory's energy error beyond which it has diverged (Stan's).
const MAX_ENERGY_ERROR: f64 = 1000.0;

#[derive(Clone, Debug)]
struct Point {
    q: Vec<f64>,
    p: Vec<f64>,
    g: Vec<f64>,
    logp: f64,
}

/// One end of a trajectory: its outermost state, the momenta and sharp momenta at the side's
/// inner and outer ends, and the side's summed momentum.
#[derive(Clone, Debug)]
struct End {
    z: Point,
    p_in: Vec<f64>,
    p_out: Vec<f64>,
    s_in: Vec<f64>,
    s_out: Vec<f64>,
    rho: Vec<f64>,
}

/// The tallies of one transition.
#[derive(Default)]
struct Tally {
    n_leapfrog: usize,
    sum_metro_prob: f64,
    divergent: bool,
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn add(a: &[f64], b: &[f64]) -> Vec<f64> {
    a.iter().zip(b).map(|(x, y)| x + y).collect()
}

fn log_sum_exp(a: f64, b: f64) -> f64 {
    let m = a.max(b);
    if m == f64::NEG_INFINITY {
        return m;
    }
    m + ((a - m).exp() + (b - m).exp()).ln()
}

/// The sampler of one chain: target, metric, step size and random stream.
struct Sampler<'a> {
    target: &'a dyn LogDensity,
    inverse_metric: Vec<f64>,
    step: f64,
    max_depth: usize,
    rng: &'a mut ToyStream,
}

impl Sampler<'_> {
    fn kinetic(&self, p: &[f64]) -> f64 {
        0.5 * p
            .iter()
            .zip(&self.inverse_metric)
            .map(|(p, m)| p * p * m)
            .sum::<f64>()
    }

    fn hamiltonian(&self, z: &Point) -> f64 {
        let h = -z.logp + self.kinetic(&z.p);
        if h.is_nan() { f64::INFINITY } else { h }
    }

    fn sharp(&self, p: &[f64]) -> Vec<f64> {
        p.iter()
            .zip(&self.inverse_metric)
            .map(|(p, m)| p * m)
            .collect()
    }

    fn draw_momentum(&mut self, z: &mut Point) {
        for (p, m) in z.p.iter_mut().zip(&self.inverse_metric) {
            *p = self.rng.normal() / m.sqrt();
        }
    }

    fn evaluate(&self, z: &mut Point) -> Result<()> {
        z.logp = self.target.log_density(&z.q, &mut z.g)?;
        if !z.logp.is_finite() || z.g.iter().any(|g| !g.is_finite()) {
            z.logp = f64::NEG_INFINITY;
            z.g.iter_mut().for_each(|g| *g = 0.0);
        }
        Ok(())
    }

    fn leapfrog(&self, z: &mut Point, epsilon: f64) -> Result<()> {
        for (p, g) in z.p.iter_mut().zip(&z.g) {
            *p += 0.5 * epsilon * g;
        }
        for ((q, p), m) in z.q.iter_mut().zip(&z.p).zip(&self.inverse_metric) {
            *q += epsilon * m * p;
        }
        self.evaluate(z)?;
        for (p, g) in z.p.iter_mut().zip(&z.g) {
            *p += 0.5 * epsilon * g;
        }
        Ok(())
    }

    /// One NUTS transition from `z0`: the next state, its acceptance statistic, the depth
    /// reached and whether the trajectory diverged.
    fn transition(&mut self, z0: &Point) -> Result<(Point, f64, usize, bool)> {
        let mut start = z0.clone();
        self.draw_momentum(&mut start);
        let h0 = self.hamiltonian(&start);
        let mut z_sample = start.clone();
        let mut z_propose = start.clone();
        let p0 = start.p.clone();
        let end = End {
            p_in: p0.clone(),
            p_out: p0.clone(),
            s_in: self.sharp(&p0),
            s_out: self.sharp(&p0),
            rho: vec![0.0; p0.len()],
            z: start,
        };
        // The backward and the forward end.
        let mut ends = [end.clone(), end];
        let mut rho = p0;
        let mut log_sum_weight = 0.0;
        let mut depth = 0;
        let mut tally = Tally::default();
        while depth < self.max_depth {
            let mut log_sum_weight_subtree = f64::NEG_INFINITY;
            let [bck, fwd] = &mut ends;
            let (grow, keep, sign) = if self.rng.uniform() > 0.5 {
                (fwd, bck, 1.0)
            } else {
                (bck, fwd, -1.0)
            };
            // The side kept holds the trajectory so far; the side grown, the new subtree.
            keep.rho.clone_from(&rho);
            keep.p_in.clone_from(&grow.p_in);
            keep.s_in.clone_from(&grow.s_in);
            grow.rho.iter_mut().for_each(|r| *r = 0.0);
            let valid = self.build_tree(
                depth,
                &mut grow.z,
                &mut z_propose,
                (&mut grow.s_in, &mut grow.s_out),
                &mut grow.rho,
                (&mut grow.p_in, &mut grow.p_out),
                h0,
                sign,
                &mut log_sum_weight_subtree,
                &mut tally,
            )?;
            if !valid {
                break;
            }
            depth += 1;
            if log_sum_weight_subtree > log_sum_weight
                || self.rng.uniform() < (log_sum_weight_subtree - log_sum_weight).exp()
            {
                z_sample.clone_from(&z_propose);
            }
            log_sum_weight = log_sum_exp(log_sum_weight, log_sum_weight_subtree);
            let [bck, fwd] = &ends;
            rho = add(&bck.rho, &fwd.rho);
            let persist = turning_not(&bck.s_out, &fwd.s_out, &rho)
                && turning_not(&bck.s_out, &fwd.s_in, &add(&bck.rho, &fwd.p_in))
                && turning_not(&bck.s_in, &fwd.s_out, &add(&fwd.rho, &bck.p_in));
            if !persist {
                break;
            }
        }
        let accept = if tally.n_leapfrog == 0 {
            0.0
        } else {
            tally.sum_metro_prob / tally.n_leapfrog as f64
        };
        Ok((z_sample, accept, depth, tally.divergent))
    }

    /// A subtree of 2^depth leapfrog steps from `z` in direction `sign`: its proposal in
    /// `z_propose`, its momenta and sharp momenta at both ends, its summed momentum added to
    /// `rho`, its log weight added to `log_sum_weight`. False where it diverged or turned.
    #[allow(clippy::too_many_arguments)]
    fn build_tree(
        &mut self,
        depth: usize,
        z: &mut Point,
        z_propose: &mut Point,
        sharp_ends: (&mut Vec<f64>, &mut Vec<f64>),
        rho: &mut [f64],
        p_ends: (&mut Vec<f64>, &mut Vec<f64>),
        h0: f64,
        sign: f64,
        log_sum_weight: &mut f64,
        tally: &mut Tally,
    ) -> Result<bool> {
        let (sharp_beg, sharp_end) = sharp_ends;
        let (p_beg, p_end) = p_ends;
        if depth == 0 {
            self.leapfrog(z, sign * self.step)?;
            tally.n_leapfrog += 1;
            let h = self.hamiltonian(z);
            if h - h0 > MAX_ENERGY_ERROR {
                tally.divergent = true;
            }
            *log_sum_weight = log_sum_exp(*log_sum_weight, h0 - h);
            tally.sum_metro_prob += if h0 - h > 0.0 { 1.0 } else { (h0 - h).exp() };
            z_propose.clone_from(z);
            *sharp_beg = self.sharp(&z.p);
            sharp_end.clone_from(sharp_beg);
            for (r, p) in rho.iter_mut().zip(&z.p) {
                *r += p;
            }
            p_beg.clone_from(&z.p);
            p_end.clone_from(&z.p);
            return Ok(!tally.divergent);
        }
        let n = rho.len();
        // The initial subtree.
        let mut log_sum_weight_init = f64::NEG_INFINITY;
        let (mut p_init_end, mut sharp_init_end, mut rho_init) =
            (vec![0.0; n], vec![0.0; n], vec![0.0; n]);
        if !self.build_tree(
            depth - 1,
            z,
            z_propose,
            (sharp_beg, &mut sharp_init_end),
            &mut rho_init,
            (p_beg, &mut p_init_end),
            h0,
            sign,
            &mut log_sum_weight_init,
            tally,
        )? {
            return Ok(false);
        }
        // The final subtree.
        let mut z_propose_final = z.clone();
        let mut log_sum_weight_final = f64::NEG_INFINITY;
        let (mut p_final_beg, mut sharp_final_beg, mut rho_final) =
            (vec![0.0; n], vec![0.0; n], vec![0.0; n]);
        if !self.build_tree(
            depth - 1,
            z,
            &mut z_propose_final,
            (&mut sharp_final_beg, sharp_end),
            &mut rho_final,
            (&mut p_final_beg, p_end),
            h0,
            sign,
            &mut log_sum_weight_final,
            tally,
        )? {
            return Ok(false);
        }
        // A multinomial draw between the two.
        let log_sum_weight_subtree = log_sum_exp(log_sum_weight_init, log_sum_weight_final);
        *log_sum_weight = log_sum_exp(*log_sum_weight, log_sum_weight_subtree);
        if log_sum_weight_final > log_sum_weight_subtree
            || self.rng.uniform() < (log_sum_weight_final - log_sum_weight_subtree).exp()
        {
            z_propose.clone_from(&z_propose_final);
        }
        let rho_subtree = add(&rho_init, &rho_final);
        for (r, s) in rho.iter_mut().zip(&rho_subtree) {
            *r += s;
        }
        Ok(turning_not(sharp_beg, sharp_end, &rho_subtree)
            && turning_not(sharp_beg, &sharp_final_beg, &add(&rho_init, &p_final_beg))
            && turning_not(&sharp_init_end, sharp_end, &add(&rho_final, &p_init_end)))
    }

    /// Stan's first step size: doubled or halved until one leapfrog step's acceptance crosses
    /// 0.8.
    fn initial_step(&mut self, z: &Point) -> Result<()> {
        let mut direction = 0.0;
        for _ in 0..100 {
            let mut trial = z.clone();
            self.draw_momentum(&mut trial);
            let h0 = self.hamiltonian(&trial);
            self.leapfrog(&mut trial, self.step)?;
            let delta = h0 - self.hamiltonian(&trial);
            let up = delta > 0.8f64.ln();
            if direction == 0.0 {
                direction = if up { 1.0 } else { -1.0 };
            } else if (direction > 0.0) != up {
                return Ok(());
            }
            self.step *= if direction > 0.0 { 2.0 } else { 0.5 };
            if !(1e-12..=1e7).contains(&self.step) {
                return Err(Error::Computation(format!(
                    "the sampler found no step size (it reached {:e}): the posterior is flat \
                     or improper along some direction, or not finite where the chain starts",
                    self.step
                )));
            }
        }
        Ok(())
    }
}

/// Whether a trajectory with summed momentum `rho` and sharp momenta `minus`, `plus` at its ends
/// has not yet turned back on itself.
fn turning_not(minus: &[f64], plus: &[f64], rho: &[f64]) -> bool {
    dot(plus, rho) > 0.0 && dot(minus, rho) > 0.0
}

/// Dual averaging of the log step size (Nesterov; Stan's constants).
struct StepAdaptation {
    mu: f64,
    target: f64,
    counter: f64,
    s_bar: f64,
    x_bar: f64,
}

impl StepAdaptation {
    const GAMMA: f64 = 0.05;
    const T0: f64 = 10.0;
    const KAPPA: f64 = 0.75;

    fn new(step: f64, target: f64) -> Self {
        StepAdaptation {
            mu: (10.0 * step).ln(),
            target,
            counter: 0.0,
            s_bar: 0.0,
            x_bar: 0.0,
        }
    }

    fn learn(&mut self, accept: f64) -> f64 {
        self.counter += 1.0;
        let eta = 1.0 / (self.counter + Self::T0);
        self.s_bar = (1.0 - eta) * self.s_bar + eta * (self.target - accept.min(1.0));
        let x = self.mu - self.s_bar * self.counter.sqrt() / Self::GAMMA;
        let weight = self.counter.powf(-Self::KAPPA);
        self.x_bar = (1.0 - weight) * self.x_bar + weight * x;
        x.exp()
    }

    fn final_step(&self) -> f64 {
        self.x_bar.exp()
    }
}

/// Stan's warmup windows: an initial buffer of step-size adaptation only, metric windows of
/// doubling length, a final buffer.
struct Windows {
    warmup: usize,
    init_buffer: usize,
    term_buffer: usize,
    window: usize,
    next_end: usize,
}

impl Windows {
    fn new(warmup: usize) -> Self {
        let (mut init, mut term, mut base) = (75, 50, 25);
        if init + base + term > warmup {
            init = warmup * 15 / 100;
            term = warmup / 10;
            base = warmup - init - term;
        }
        Windows {
            warmup,
            init_buffer: init,
            term_buffer: term,
            window: base,
            next_end: (init + base).saturating_sub(1),
        }
    }

    fn in_window(&self, i: usize) -> bool {
        self.warmup >= 20 && i >= self.init_buffer && i < self.warmup - self.term_buffer
    }

    fn ends_window(&self, i: usize) -> bool {
        self.warmup >= 20 && i == self.next_end
    }

    fn advance(&mut self) {
        let last = self.warmup - self.term_buffer - 1;
        if self.next_end == last {
            return;
        }
        self.window *= 2;
        self.next_end += self.window;
        if self.next_end + 2 * self.window > last {
            self.next_end = last;
        }
    }
}

/// Run one chain from `start` (a point where the density is finite): warmup, then `draws`
/// draws. `step` is called after every iteration with the iterations done, and may stop the
/// run with its error.
pub fn run_chain(
    target: &dyn LogDensity,
    start: &[f64],
    options: &NutsOptions,
    rng: &mut ToyStream,
    step: &dyn Fn(usize) -> Result<()>,
) -> Result<ChainRun> {
    let dim = target.dim();
    let mut sampler = Sampler {
        target,
        inverse_metric: vec![1.0; dim],
        step: 1.0,
        max_depth: options.max_depth,
        rng,
    };
    let mut z = Point {
        q: start.to_vec(),
        p: vec![0.0; dim],
        g: vec![0.0; dim],
        logp: 0.0,
    };
    sampler.evaluate(&mut z)?;
    if !z.logp.is_finite() {
        return Err(Error::Computation(
            "the posterior is not finite where the chain starts".into(),
        ));
    }
    sampler.initial_step(&z)?;
    let mut adaptation = StepAdaptation::new(sampler.step, options.target_accept);
    let mut windows = Windows::new(options.warmup);
    // The window's running mean and sum of squared deviations (Welford, as Stan: no
    // cancellation where a parameter's mean dwarfs its spread).
    let (mut mean, mut m2, mut count) = (vec![0.0; dim], vec![0.0; dim], 0usize);
    let mut run = ChainRun {
        draws: Vec::with_capacity(options.draws),
        divergences: 0,
        max_depth_hits: 0,
        step_size: 0.0,
        mean_tree_depth: 0.0,
        mean_accept: 0.0,
        inverse_metric: Vec::new(),
    };
    for i in 0..options.warmup + options.draws {
        let (next, accept, depth, divergent) = sampler.transition(&z)?;
        z = next;
        if i < options.warmup {
            sampler.step = adaptation.learn(accept);
            if windows.in_window(i) {
                count += 1;
                for ((mu, s2), q) in mean.iter_mut().zip(&mut m2).zip(&z.q) {
                    let delta = q - *mu;
                    *mu += delta / count as f64;
                    *s2 += delta * (q - *mu);
                }
            }
            if windows.ends_window(i) {
                let n = count as f64;
                for (m, s2) in sampler.inverse_metric.iter_mut().zip(&m2) {
                    let variance = s2 / (n - 1.0);
                    // Stan's regularisation toward 10⁻³.
                    *m = (n / (n + 5.0)) * variance + 1e-3 * (5.0 / (n + 5.0));
                }
                mean.iter_mut().chain(&mut m2).for_each(|v| *v = 0.0);
                count = 0;
                windows.advance();
                sampler.initial_step(&z)?;
                adaptation = StepAdaptation::new(sampler.step, options.target_accept);
            }
            if i + 1 == options.warmup {
                sampler.step = adaptation.final_step();
            }
        } else {
            run.divergences += usize::from(divergent);
            run.max_depth_hits += usize::from(depth >= options.max_depth);
            run.mean_tree_depth += depth as f64;
            run.mean_accept += accept;
            run.draws.push(z.q.clone());
        }
        step(i + 1)?;
    }
    let n = options.draws.max(1) as f64;
    run.mean_tree_depth /= n;
    run.mean_accept /= n;
    run.step_size = sampler.step;
    run.inverse_metric = sampler.inverse_metric;
    Ok(run)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcmc_diagnostics::diagnostics;

    /// A correlated 2-D Gaussian with different scales.
    struct Gaussian;

    impl LogDensity for Gaussian {
        fn dim(&self) -> usize {
            2
        }
        fn log_density(&self, x: &[f64], grad: &mut [f64]) -> Result<f64> {
            // Covariance [[4, 1.2], [1.2, 0.25]] · ρ = 0.3 · σ = (2, 0.5).
            let (s1, s2, r) = (2.0, 0.5, 0.3);
            let (a, b) = (x[0] / s1, (x[1] - 1.0) / s2);
            let k = 1.0 / (1.0 - r * r);
            grad[0] = -k * (a - r * b) / s1;
            grad[1] = -k * (b - r * a) / s2;
            Ok(-0.5 * k * (a * a - 2.0 * r * a * b + b * b))
        }
    }

    /// N(10⁵, 0.01²): a mean that dwarfs the spread.
    struct FarAway;

    impl LogDensity for FarAway {
        fn dim(&self) -> usize {
            1
        }
        fn log_density(&self, x: &[f64], grad: &mut [f64]) -> Result<f64> {
            let z = (x[0] - 1e5) / 0.01;
            grad[0] = -z / 0.01;
            Ok(-0.5 * z * z)
        }
    }

    #[test]
    fn short_warmups_run_and_the_metric_survives_a_far_mean() {
        for warmup in [0, 1, 19, 20, 150] {
            let options = NutsOptions {
                warmup,
                draws: 50,
                max_depth: 10,
                target_accept: 0.8,
            };
            let mut rng = ToyStream::new(3, 9, 0);
            let run = run_chain(&Gaussian, &[0.0, 1.0], &options, &mut rng, &|_| Ok(())).unwrap();
            assert_eq!(run.draws.len(), 50, "warmup {warmup}");
        }
        let options = NutsOptions {
            warmup: 300,
            draws: 400,
            max_depth: 10,
            target_accept: 0.8,
        };
        let mut rng = ToyStream::new(4, 9, 0);
        let run = run_chain(&FarAway, &[1e5 + 0.01], &options, &mut rng, &|_| Ok(())).unwrap();
        // The learnt variance is the spread's (10⁻⁴, regularised), not cancellation noise.
        let m = run.inverse_metric[0];
        assert!(m > 0.0 && m < 1e-2, "{m}");
        let mean = run.draws.iter().map(|d| d[0]).sum::<f64>() / 400.0;
        assert!((mean - 1e5).abs() < 0.005, "{mean}");
    }

    #[test]
    fn draws_have_the_gaussians_moments() {
        let options = NutsOptions {
            warmup: 500,
            draws: 2000,
            max_depth: 10,
            target_accept: 0.8,
        };
        let chains: Vec<ChainRun> = (0..4)
            .map(|c| {
                let mut rng = ToyStream::new(11, 9, c);
                run_chain(&Gaussian, &[0.5, 0.5], &options, &mut rng, &|_| Ok(())).unwrap()
            })
            .collect();
        for (k, (mean, sd)) in [(0.0, 2.0), (1.0, 0.5)].into_iter().enumerate() {
            let per_chain: Vec<Vec<f64>> = chains
                .iter()
                .map(|c| c.draws.iter().map(|d| d[k]).collect())
                .collect();
            let all: Vec<f64> = per_chain.iter().flatten().copied().collect();
            let m = all.iter().sum::<f64>() / all.len() as f64;
            let v = all.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / all.len() as f64;
            let d = diagnostics(&per_chain);
            // Means within 4 Monte-Carlo errors; the variance within 10%.
            assert!(
                (m - mean).abs() < 4.0 * sd / d.ess_bulk.sqrt(),
                "{k}: mean {m} {d:?}"
            );
            assert!((v.sqrt() / sd - 1.0).abs() < 0.1, "{k}: sd {}", v.sqrt());
            assert!(d.r_hat < 1.01 && d.ess_bulk > 1000.0, "{d:?}");
        }
        assert!(chains.iter().all(|c| c.divergences == 0));
        // The metric learnt the scales: variances near 4 and 0.25.
        let m = &chains[0].inverse_metric;
        assert!(
            (m[0] / 4.0 - 1.0).abs() < 0.5 && (m[1] / 0.25 - 1.0).abs() < 0.5,
            "{m:?}"
        );
    }
}
