//! L-BFGS-B (Byrd, Lu, Nocedal & Zhu 1995) as a resumable ask/tell state machine.
//!
//! Each iteration finds the generalized Cauchy point along the projected steepest-descent path
//! of the limited-memory quadratic model, minimizes the model over the variables that are free
//! there (direct primal method), and runs a strong-Wolfe line search along the resulting
//! direction, capped at the largest step that stays in the box. The caller evaluates the points
//! the machine asks for, so one implementation drives a single CPU fit or thousands of fits in
//! lockstep on a GPU.

use std::collections::VecDeque;

use crate::linalg::{dot, inverse, solve};
use ns_core::optim::{
    FLAT_ITERATIONS, HZ_DELTA, MAX_LINE_SEARCH_EVALUATIONS, SLOPE_WINDOW_PER_NOISE, WOLFE_C1 as C1,
    WOLFE_C2 as C2,
};
pub use ns_core::optim::{LbfgsbOptions, Termination};

#[derive(Clone, Copy, Debug)]
struct LinePoint {
    alpha: f64,
    phi: f64,
    dphi: f64,
}

#[derive(Clone, Debug)]
struct LineSearch {
    direction: Vec<f64>,
    dphi0: f64,
    alpha_max: f64,
    alpha: f64,
    previous: LinePoint,
    zoom: Option<(LinePoint, LinePoint)>,
    evaluations: usize,
    /// The best point seen that satisfies sufficient decrease: (alpha, f, x, g).
    best: Option<(f64, f64, Vec<f64>, Vec<f64>)>,
}

#[derive(Clone, Debug)]
enum Phase {
    Start,
    Searching(LineSearch),
    Finished(Termination),
}

/// The L-BFGS-B state machine. `ask` gives the point to evaluate; `tell` takes the objective and
/// its gradient there.
#[derive(Clone, Debug)]
pub struct Lbfgsb {
    lower: Vec<f64>,
    upper: Vec<f64>,
    options: LbfgsbOptions,
    x: Vec<f64>,
    f: f64,
    g: Vec<f64>,
    s_history: VecDeque<Vec<f64>>,
    y_history: VecDeque<Vec<f64>>,
    /// The same pairs by variable, oldest first: row i (length `memory`) holds yⱼ[i] in
    /// `y_by_variable` and sⱼ[i] in `s_by_variable`, so a row of W is two contiguous reads.
    y_by_variable: Vec<f64>,
    s_by_variable: Vec<f64>,
    /// Inner products of the history, kept up to date pair by pair: ss[i][j] = sᵢ·sⱼ,
    /// sy[i][j] = sᵢ·yⱼ, yy[i][j] = yᵢ·yⱼ.
    ss: Vec<Vec<f64>>,
    sy: Vec<Vec<f64>>,
    yy: Vec<Vec<f64>>,
    theta: f64,
    trial: Vec<f64>,
    phase: Phase,
    iterations: usize,
    evaluations: usize,
    /// Per-variable factors applied to the projected gradient in the convergence test (for a
    /// caller that optimizes rescaled variables but wants the tolerance in the original ones).
    gradient_scale: Option<Vec<f64>>,
    /// How far above f₀, relative to max(1, |f₀|), a step may end and still be judged by its
    /// slope (Hager & Zhang's ε): 1e-12 unless a noise is declared (`with_objective_noise`).
    slope_window: f64,
    /// Where a noise is declared: the noise of f (relative), the lowest f accepted so far and the
    /// count of consecutive iterations that did not lower it by more than the noise; the run
    /// stops after [`FLAT_ITERATIONS`] of them.
    flat: Option<Flat>,
}

/// Progress of a run whose objective has declared rounding noise (`with_objective_noise`).
#[derive(Clone, Copy, Debug)]
struct Flat {
    noise: f64,
    best: f64,
    iterations: usize,
}

fn project(x: f64, lo: f64, hi: f64) -> f64 {
    x.max(lo).min(hi)
}

impl Lbfgsb {
    /// Start from `x0` (projected into the box `[lower, upper]`).
    pub fn new(x0: &[f64], lower: &[f64], upper: &[f64], options: LbfgsbOptions) -> Self {
        let x: Vec<f64> = x0
            .iter()
            .zip(lower.iter().zip(upper))
            .map(|(&x, (&l, &u))| project(x, l, u))
            .collect();
        let by_variable = x.len() * options.memory;
        Lbfgsb {
            lower: lower.to_vec(),
            upper: upper.to_vec(),
            options,
            trial: x.clone(),
            f: f64::INFINITY,
            g: vec![0.0; x.len()],
            x,
            s_history: VecDeque::new(),
            y_history: VecDeque::new(),
            y_by_variable: vec![0.0; by_variable],
            s_by_variable: vec![0.0; by_variable],
            ss: Vec::new(),
            sy: Vec::new(),
            yy: Vec::new(),
            theta: 1.0,
            phase: Phase::Start,
            iterations: 0,
            evaluations: 0,
            gradient_scale: None,
            slope_window: 1e-12,
            flat: None,
        }
    }

    /// Declare the objective's rounding noise relative to max(1, |f|) (undeclared: f64 sums,
    /// a slope window of 1e-12 and no stopping rule). The line search then judges steps that end
    /// within [`SLOPE_WINDOW_PER_NOISE`] noises of f₀ by their slope alone, and after
    /// [`FLAT_ITERATIONS`] iterations in a row that lower f by no more than the noise the run
    /// ends as `LineSearchFailed`: in low precision the projected gradient may never fall below
    /// the tolerance, and the caller judges the end point in higher precision.
    pub fn with_objective_noise(mut self, relative: f64) -> Self {
        self.slope_window = SLOPE_WINDOW_PER_NOISE * relative;
        self.flat = Some(Flat {
            noise: relative,
            best: f64::INFINITY,
            iterations: 0,
        });
        self
    }

    /// Judge convergence on `scale_i · (P(x − g) − x)_i` instead of the plain projected gradient.
    pub fn with_gradient_scale(mut self, scale: Vec<f64>) -> Self {
        self.gradient_scale = Some(scale);
        self
    }

    /// The point to evaluate next, or `None` once finished.
    pub fn ask(&self) -> Option<&[f64]> {
        match self.phase {
            Phase::Finished(_) => None,
            _ => Some(&self.trial),
        }
    }

    /// Report the objective and gradient at the point from [`ask`](Self::ask).
    /// A non-finite value is treated as +∞ (the line search backs off), never a crash.
    pub fn tell(&mut self, f: f64, g: &[f64]) {
        self.evaluations += 1;
        let f = if f.is_nan() { f64::INFINITY } else { f };
        let phase = std::mem::replace(&mut self.phase, Phase::Start);
        self.phase = match phase {
            Phase::Finished(t) => Phase::Finished(t),
            Phase::Start => {
                if !f.is_finite() || g.iter().any(|v| !v.is_finite()) {
                    Phase::Finished(Termination::NonFiniteStart)
                } else {
                    self.x = self.trial.clone();
                    self.f = f;
                    self.g = g.to_vec();
                    self.next_iteration()
                }
            }
            Phase::Searching(search) => self.line_search_step(search, f, g),
        };
        if !matches!(self.phase, Phase::Finished(_))
            && self.evaluations >= self.options.max_evaluations
        {
            self.phase = Phase::Finished(Termination::MaxEvaluations);
        }
    }

    /// The best point so far (the last accepted iterate).
    pub fn x(&self) -> &[f64] {
        &self.x
    }
    pub fn f(&self) -> f64 {
        self.f
    }
    pub fn gradient(&self) -> &[f64] {
        &self.g
    }
    pub fn max_iterations(&self) -> usize {
        self.options.max_iterations
    }
    pub fn iterations(&self) -> usize {
        self.iterations
    }
    pub fn evaluations(&self) -> usize {
        self.evaluations
    }
    pub fn termination(&self) -> Option<Termination> {
        match self.phase {
            Phase::Finished(t) => Some(t),
            _ => None,
        }
    }

    /// ‖P(x − g) − x‖∞.
    pub fn projected_gradient_norm(&self) -> f64 {
        (0..self.x.len())
            .map(|i| {
                let pg = (project(self.x[i] - self.g[i], self.lower[i], self.upper[i]) - self.x[i])
                    .abs();
                self.gradient_scale.as_ref().map_or(pg, |s| pg * s[i])
            })
            .fold(0.0, f64::max)
    }

    fn next_iteration(&mut self) -> Phase {
        if self.projected_gradient_norm() <= self.options.pg_tol {
            return Phase::Finished(Termination::Converged);
        }
        if self
            .flat
            .is_some_and(|flat| flat.iterations >= FLAT_ITERATIONS)
        {
            return Phase::Finished(Termination::LineSearchFailed);
        }
        if self.iterations >= self.options.max_iterations {
            return Phase::Finished(Termination::MaxIterations);
        }
        let mut direction = self.direction();
        let mut dphi0 = dot(&self.g, &direction);
        if !(dphi0 < 0.0) && !self.s_history.is_empty() {
            self.reset_memory();
            direction = self.direction();
            dphi0 = dot(&self.g, &direction);
        }
        if !(dphi0 < 0.0) {
            return Phase::Finished(Termination::LineSearchFailed);
        }
        let alpha_max = self.max_step(&direction);
        let norm = dot(&direction, &direction).sqrt();
        let first = if self.iterations == 0 && self.s_history.is_empty() {
            (1.0 / norm).min(1.0)
        } else {
            1.0
        };
        let alpha = first.min(alpha_max);
        self.set_trial(&direction, alpha);
        Phase::Searching(LineSearch {
            direction,
            dphi0,
            alpha_max,
            alpha,
            previous: LinePoint {
                alpha: 0.0,
                phi: self.f,
                dphi: dphi0,
            },
            zoom: None,
            evaluations: 0,
            best: None,
        })
    }

    fn reset_memory(&mut self) {
        self.s_history.clear();
        self.y_history.clear();
        self.ss.clear();
        self.sy.clear();
        self.yy.clear();
        self.theta = 1.0;
    }

    fn max_step(&self, d: &[f64]) -> f64 {
        let mut step = f64::INFINITY;
        for i in 0..d.len() {
            if d[i] > 0.0 {
                step = step.min((self.upper[i] - self.x[i]) / d[i]);
            } else if d[i] < 0.0 {
                step = step.min((self.lower[i] - self.x[i]) / d[i]);
            }
        }
        // Not `clamp`: a NaN step must become 0, not stay NaN.
        #[allow(clippy::manual_clamp)]
        let capped = step.max(0.0).min(1e10);
        capped
    }

    fn set_trial(&mut self, d: &[f64], alpha: f64) {
        for i in 0..d.len() {
            self.trial[i] = project(self.x[i] + alpha * d[i], self.lower[i], self.upper[i]);
        }
    }

    fn line_search_step(&mut self, mut ls: LineSearch, phi: f64, g: &[f64]) -> Phase {
        ls.evaluations += 1;
        let dphi = if phi.is_finite() {
            dot(g, &ls.direction)
        } else {
            f64::NAN
        };
        let current = LinePoint {
            alpha: ls.alpha,
            phi,
            dphi,
        };
        // Sufficient decrease; near the minimum, where f changes by less than its rounding noise,
        // Hager & Zhang's approximate Wolfe condition (a decrease of the slope with f not above
        // f₀ beyond its noise) stands in for it, so tight tolerances stay reachable.
        let noise = self.slope_window * self.f.abs().max(1.0);
        let armijo = phi.is_finite()
            && (phi <= self.f + C1 * ls.alpha * ls.dphi0
                || (phi <= self.f + noise
                    && dphi >= C2 * ls.dphi0
                    && dphi <= (2.0 * HZ_DELTA - 1.0) * ls.dphi0));
        if armijo && ls.best.as_ref().is_none_or(|b| phi < b.1) {
            ls.best = Some((ls.alpha, phi, self.trial.clone(), g.to_vec()));
        }
        let curvature = dphi.abs() <= -C2 * ls.dphi0;
        if armijo && curvature {
            return self.accept(phi, g);
        }
        match ls.zoom {
            None => {
                if !armijo || (ls.evaluations > 1 && phi >= ls.previous.phi) {
                    ls.zoom = Some((ls.previous, current));
                } else if dphi >= 0.0 {
                    ls.zoom = Some((current, ls.previous));
                } else if ls.alpha >= ls.alpha_max {
                    // Still descending at the box boundary: take the boundary point.
                    return self.accept(phi, g);
                } else {
                    ls.previous = current;
                    ls.alpha = (4.0 * ls.alpha).min(ls.alpha_max);
                }
            }
            Some((lo, hi)) => {
                if !armijo || phi >= lo.phi {
                    ls.zoom = Some((lo, current));
                } else if dphi * (hi.alpha - lo.alpha) >= 0.0 {
                    ls.zoom = Some((current, lo));
                } else {
                    ls.zoom = Some((current, hi));
                }
            }
        }
        if let Some((lo, hi)) = ls.zoom {
            let width = (hi.alpha - lo.alpha).abs();
            if ls.evaluations >= MAX_LINE_SEARCH_EVALUATIONS
                || width <= 1e-15 * lo.alpha.abs().max(1e-300)
            {
                return self.line_search_failed(ls);
            }
            ls.alpha = interpolate(lo, hi);
        }
        if ls.evaluations >= MAX_LINE_SEARCH_EVALUATIONS {
            return self.line_search_failed(ls);
        }
        let (d, alpha) = (std::mem::take(&mut ls.direction), ls.alpha);
        self.set_trial(&d, alpha);
        ls.direction = d;
        Phase::Searching(ls)
    }

    /// Accept the best sufficient-decrease point if there is one; otherwise reset the memory and
    /// retry along the projected gradient, and stop if that fails too.
    fn line_search_failed(&mut self, ls: LineSearch) -> Phase {
        if let Some((_, f, x, g)) = ls.best
            && f < self.f
        {
            self.trial = x;
            return self.accept(f, &g);
        }
        if self.s_history.is_empty() {
            return Phase::Finished(Termination::LineSearchFailed);
        }
        self.reset_memory();
        self.next_iteration()
    }

    fn accept(&mut self, f: f64, g: &[f64]) -> Phase {
        let s: Vec<f64> = self.trial.iter().zip(&self.x).map(|(a, b)| a - b).collect();
        let y: Vec<f64> = g.iter().zip(&self.g).map(|(a, b)| a - b).collect();
        let sy = dot(&s, &y);
        let yy = dot(&y, &y);
        // Keep the pair only if it preserves positive definiteness.
        if sy > f64::EPSILON * yy && sy > 0.0 {
            let memory = self.options.memory;
            if self.s_history.len() == memory {
                self.s_history.pop_front();
                self.y_history.pop_front();
                for rows in [&mut self.y_by_variable, &mut self.s_by_variable] {
                    for row in rows.chunks_exact_mut(memory) {
                        row.copy_within(1.., 0);
                    }
                }
                for m in [&mut self.ss, &mut self.sy, &mut self.yy] {
                    m.remove(0);
                    for row in m.iter_mut() {
                        row.remove(0);
                    }
                }
            }
            // New row and column of the inner products (the new pair is last).
            let ss_row: Vec<f64> = self
                .s_history
                .iter()
                .map(|sj| dot(&s, sj))
                .chain([dot(&s, &s)])
                .collect();
            let yy_row: Vec<f64> = self
                .y_history
                .iter()
                .map(|yj| dot(&y, yj))
                .chain([yy])
                .collect();
            let sy_row: Vec<f64> = self
                .y_history
                .iter()
                .map(|yj| dot(&s, yj))
                .chain([sy])
                .collect();
            for (i, si) in self.s_history.iter().enumerate() {
                self.ss[i].push(ss_row[i]);
                self.yy[i].push(yy_row[i]);
                self.sy[i].push(dot(si, &y));
            }
            self.ss.push(ss_row);
            self.yy.push(yy_row);
            self.sy.push(sy_row);
            let slot = self.s_history.len();
            for (i, (&si, &yi)) in s.iter().zip(&y).enumerate() {
                self.s_by_variable[i * memory + slot] = si;
                self.y_by_variable[i * memory + slot] = yi;
            }
            self.s_history.push_back(s);
            self.y_history.push_back(y);
            self.theta = yy / sy;
        }
        if let Some(flat) = &mut self.flat {
            let best = flat.best.min(self.f);
            if f < best - flat.noise * best.abs().max(1.0) {
                flat.iterations = 0;
            } else {
                flat.iterations += 1;
            }
            flat.best = best.min(f);
        }
        self.x = self.trial.clone();
        self.f = f;
        self.g = g.to_vec();
        self.iterations += 1;
        self.next_iteration()
    }

    /// `W = [Y, θS]` (n × 2k, by rows), built once per direction: the Cauchy point and the
    /// subspace minimization read each row up to three times.
    #[inline(always)]
    fn w_matrix(&self) -> Vec<f64> {
        let (k, memory) = (self.s_history.len(), self.options.memory);
        let mut w = Vec::with_capacity(self.x.len() * 2 * k);
        for i in 0..self.x.len() {
            let start = i * memory;
            w.extend_from_slice(&self.y_by_variable[start..start + k]);
            w.extend(
                self.s_by_variable[start..start + k]
                    .iter()
                    .map(|&sj| self.theta * sj),
            );
        }
        w
    }

    /// The middle matrix `M = [[−D, Lᵀ], [L, θ SᵀS]]⁻¹` of the compact L-BFGS form.
    #[inline(always)]
    fn middle_matrix(&self) -> Option<Vec<f64>> {
        let k = self.s_history.len();
        let n2 = 2 * k;
        let mut a = vec![0.0; n2 * n2];
        for i in 0..k {
            for j in 0..k {
                let sy = self.sy[i][j];
                if i == j {
                    a[i * n2 + j] = -sy;
                } else if i > j {
                    a[(k + i) * n2 + j] = sy; // L
                    a[j * n2 + k + i] = sy; // Lᵀ
                }
                a[(k + i) * n2 + k + j] = self.theta * self.ss[i][j];
            }
        }
        inverse(&a, n2)
    }

    /// The search direction of one iteration: the generalized Cauchy point of the
    /// limited-memory quadratic model along the projected steepest-descent path, then the
    /// model's minimum over the variables free there (direct primal method), minus x.
    fn direction(&mut self) -> Vec<f64> {
        search_direction(self)
    }

    #[inline(always)]
    fn direction_body(&mut self) -> Vec<f64> {
        let m = if self.s_history.is_empty() {
            Vec::new()
        } else {
            match self.middle_matrix() {
                Some(m) => m,
                None => {
                    self.reset_memory();
                    Vec::new()
                }
            }
        };
        let w = self.w_matrix();
        let (xcp, c) = self.cauchy_point(&m, &w);
        let xbar = self.subspace_minimum(&m, &w, xcp, &c);
        xbar.iter().zip(&self.x).map(|(a, b)| a - b).collect()
    }

    /// M·v for the 2k×2k middle matrix `m`.
    #[inline(always)]
    fn middle_times(m: &[f64], v: &[f64]) -> Vec<f64> {
        let n2 = v.len();
        (0..n2).map(|r| dot(&m[r * n2..(r + 1) * n2], v)).collect()
    }

    /// The generalized Cauchy point and c = Wᵀ(xcp − x), walking the breakpoints in order.
    #[inline(always)]
    fn cauchy_point(&self, m: &[f64], w: &[f64]) -> (Vec<f64>, Vec<f64>) {
        let n = self.x.len();
        let n2 = 2 * self.s_history.len();
        let theta = self.theta;
        let mv = |v: &[f64]| Self::middle_times(m, v);
        // Breakpoints along the projected steepest-descent path.
        let (x, g) = (&self.x, &self.g);
        let mut t = vec![f64::INFINITY; n];
        let mut d = vec![0.0; n];
        for i in 0..n {
            t[i] = if g[i] < 0.0 {
                (x[i] - self.upper[i]) / g[i]
            } else if g[i] > 0.0 {
                (x[i] - self.lower[i]) / g[i]
            } else {
                f64::INFINITY
            };
            if t[i] > 0.0 {
                d[i] = -g[i];
            }
        }
        let mut order: Vec<usize> = (0..n).filter(|&i| t[i] > 0.0 && t[i].is_finite()).collect();
        let row = |i: usize| &w[i * n2..(i + 1) * n2];
        let mut p = vec![0.0; n2];
        for i in 0..n {
            if d[i] != 0.0 {
                for (p_r, &w) in p.iter_mut().zip(row(i)) {
                    *p_r += w * d[i];
                }
            }
        }
        let mut c = vec![0.0; n2];
        let mut xcp = x.clone();
        let mut fp = -dot(&d, &d);
        let mut fpp = -theta * fp - dot(&p, &mv(&p));
        let mut dt_min = if fpp > 0.0 { -fp / fpp } else { f64::INFINITY };
        // Most iterations stop before the first breakpoint: sort them only when the walk passes
        // it (the first minimum, as the stable sort would put first).
        let first = order.iter().copied().min_by(|&a, &b| t[a].total_cmp(&t[b]));
        if first.is_some_and(|b| !(dt_min < t[b])) {
            order.sort_by(|&a, &b| t[a].total_cmp(&t[b]));
        }
        let mut t_old = 0.0;
        let mut next = 0;
        while next < order.len() {
            let b = order[next];
            let dt = t[b] - t_old;
            if dt_min < dt {
                break;
            }
            // Move to the breakpoint; variable b hits its bound.
            xcp[b] = if d[b] > 0.0 {
                self.upper[b]
            } else {
                self.lower[b]
            };
            let z_b = xcp[b] - x[b];
            for r in 0..n2 {
                c[r] += dt * p[r];
            }
            let w_b = row(b);
            let mw = mv(w_b);
            let gb = g[b];
            fp += dt * fpp + gb * gb + theta * gb * z_b - gb * dot(&mw, &c);
            fpp += -theta * gb * gb - 2.0 * gb * dot(&mw, &p) - gb * gb * dot(&mw, w_b);
            for r in 0..n2 {
                p[r] += gb * w_b[r];
            }
            d[b] = 0.0;
            dt_min = if fpp > 0.0 { -fp / fpp } else { f64::INFINITY };
            t_old = t[b];
            next += 1;
        }
        let dt_min = if dt_min.is_finite() {
            dt_min.max(0.0)
        } else {
            0.0
        };
        let t_cp = t_old + dt_min;
        for i in 0..n {
            if d[i] != 0.0 {
                xcp[i] = project(x[i] + t_cp * d[i], self.lower[i], self.upper[i]);
            }
        }
        for r in 0..n2 {
            c[r] += dt_min * p[r];
        }

        (xcp, c)
    }

    /// The minimum of the quadratic model over the variables free at the Cauchy point `xcp`,
    /// kept in the box by the largest step ≤ 1 along the Newton direction.
    #[inline(always)]
    fn subspace_minimum(&self, m: &[f64], w: &[f64], xcp: Vec<f64>, c: &[f64]) -> Vec<f64> {
        let n = self.x.len();
        let k = self.s_history.len();
        let n2 = 2 * k;
        let theta = self.theta;
        let (x, g) = (&self.x, &self.g);
        let mv = |v: &[f64]| Self::middle_times(m, v);
        // Subspace minimization over the variables free at the Cauchy point.
        let free: Vec<usize> = (0..n)
            .filter(|&i| xcp[i] > self.lower[i] && xcp[i] < self.upper[i])
            .collect();
        let mut xbar = xcp.clone();
        if !free.is_empty() {
            let mc = mv(c);
            let row = |i: usize| &w[i * n2..(i + 1) * n2];
            let r_hat: Vec<f64> = free
                .iter()
                .map(|&i| g[i] + theta * (xcp[i] - x[i]) - dot(row(i), &mc))
                .collect();
            let mut du: Vec<f64> = r_hat.iter().map(|r| -r / theta).collect();
            if n2 > 0 {
                let mut v = vec![0.0; n2];
                for (&i, r) in free.iter().zip(&r_hat) {
                    for (v_q, &w) in v.iter_mut().zip(row(i)) {
                        *v_q += w * r;
                    }
                }
                let v = mv(&v);
                // N = I − (1/θ) M WᶻᵀWᶻ, with WᶻᵀWᶻ = WᵀW (from the cached inner products) minus
                // the rows of the variables held at a bound.
                let mut wtw = vec![0.0; n2 * n2];
                for a in 0..k {
                    for b in 0..k {
                        wtw[a * n2 + b] = self.yy[a][b];
                        wtw[a * n2 + k + b] = theta * self.sy[b][a];
                        wtw[(k + a) * n2 + b] = theta * self.sy[a][b];
                        wtw[(k + a) * n2 + k + b] = theta * theta * self.ss[a][b];
                    }
                }
                // WᵀW and every correction are symmetric (row[a]·row[b] = row[b]·row[a]
                // exactly): the upper triangle is updated, then mirrored.
                for i in (0..n).filter(|&i| !(xcp[i] > self.lower[i] && xcp[i] < self.upper[i])) {
                    let row = row(i);
                    for a in 0..n2 {
                        let r_a = row[a];
                        for (w, &r_b) in wtw[a * n2 + a..(a + 1) * n2].iter_mut().zip(&row[a..]) {
                            *w -= r_a * r_b;
                        }
                    }
                }
                for a in 0..n2 {
                    for b in 0..a {
                        wtw[a * n2 + b] = wtw[b * n2 + a];
                    }
                }
                // (M·WᵀW)[a][b] = Σ_q M[a][q]·WᵀW[q][b], summed over q in order for every b at
                // once (independent sums: vectorisable, the same bits as one dot per entry).
                let mut nmat = vec![0.0; n2 * n2];
                let mut mw = vec![0.0; n2];
                for a in 0..n2 {
                    mw.fill(0.0);
                    for (&m_aq, wtw_q) in m[a * n2..(a + 1) * n2].iter().zip(wtw.chunks_exact(n2)) {
                        for (sum, &w) in mw.iter_mut().zip(wtw_q) {
                            *sum += m_aq * w;
                        }
                    }
                    for (b, &sum) in mw.iter().enumerate() {
                        nmat[a * n2 + b] = if a == b { 1.0 } else { 0.0 } - sum / theta;
                    }
                }
                if let Some(v) = solve(nmat, v) {
                    for (du_j, &i) in du.iter_mut().zip(&free) {
                        *du_j -= dot(row(i), &v) / (theta * theta);
                    }
                }
            }
            // Largest step ≤ 1 along du that keeps the free variables in the box.
            let mut step: f64 = 1.0;
            for (j, &i) in free.iter().enumerate() {
                if du[j] > 0.0 {
                    step = step.min((self.upper[i] - xcp[i]) / du[j]);
                } else if du[j] < 0.0 {
                    step = step.min((self.lower[i] - xcp[i]) / du[j]);
                }
            }
            for (j, &i) in free.iter().enumerate() {
                xbar[i] = project(xcp[i] + step * du[j], self.lower[i], self.upper[i]);
            }
        }
        xbar
    }
}

/// Safeguarded cubic interpolation between two line-search points, bisection as the fallback.
fn interpolate(lo: LinePoint, hi: LinePoint) -> f64 {
    let (a, b) = (lo.alpha, hi.alpha);
    let mid = 0.5 * (a + b);
    if !(lo.phi.is_finite() && hi.phi.is_finite() && lo.dphi.is_finite() && hi.dphi.is_finite()) {
        return mid;
    }
    let d1 = lo.dphi + hi.dphi - 3.0 * (lo.phi - hi.phi) / (a - b);
    let disc = d1 * d1 - lo.dphi * hi.dphi;
    if disc < 0.0 {
        return mid;
    }
    let d2 = (b - a).signum() * disc.sqrt();
    let alpha = b - (b - a) * (hi.dphi + d2 - d1) / (hi.dphi - lo.dphi + 2.0 * d2);
    let (left, right) = (a.min(b), a.max(b));
    let margin = 0.1 * (right - left);
    if alpha.is_finite() && alpha > left + margin && alpha < right - margin {
        alpha
    } else {
        mid
    }
}

ns_core::simd_dispatched! {
    /// [`Lbfgsb::direction`], compiled for AVX2 as well and run so where the CPU has it: its
    /// element-wise loops then run four wide instead of two. Sums keep their order and no
    /// multiply-add is fused, so the bits are the baseline build's.
    fn search_direction(state: &mut Lbfgsb) -> Vec<f64> {
        state.direction_body()
    }
}
