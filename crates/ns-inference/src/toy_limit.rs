//! Upper limits from toys (Combine's `HybridNew`, RooStats' `HypoTestInverter` with a
//! `FrequentistCalculator`): CLs from toy ensembles at each μ of a grid, the limits where the
//! curves cross the level (interpolated as pyhf's linear grid scan interpolates), and the
//! Monte-Carlo uncertainty of each limit.
//!
//! Every μ draws its toys from the same seed, so toy `i` of every μ comes from the same random
//! stream: neighbouring points of the CLs curve share their fluctuations, which keeps the curve
//! smooth where it is interpolated. The toys of all μ of a round are fitted as one batch (one
//! device submission per chunk).

use ns_compute::PreparedData;
use ns_core::{Error, Result};
use std::collections::BTreeMap;

use crate::checks;
use crate::fit::{FitConfig, Fitter};
use crate::hypotest::TestStatistic;
use crate::limits::{Outside, UpperLimit, check_scan, upper_limit_root};
use crate::toys::{MAX_TOYS, ToyHypotest, ToyTest, check_n_toys, hypotest_toys_batch};

/// Toys of all μ together (μ values × toys per μ) that one limit may ask for: each is two fits.
pub const MAX_LIMIT_TOYS: usize = MAX_TOYS;

/// Rounds that extend an automatic grid toward a limit outside it.
const EXTEND_ROUNDS: usize = 4;

/// Rounds that refine an automatic grid around the limits.
const REFINE_ROUNDS: usize = 3;

/// A toy-based upper limit.
#[derive(Clone, Debug)]
pub struct ToyUpperLimit {
    /// The CLs level.
    pub level: f64,
    /// The limits on the toy CLs curves, with the points (μ, CLs observed, CLs expected).
    pub limit: UpperLimit,
    /// Monte-Carlo standard errors of the observed and the five expected limits (NaN where the
    /// limit lies outside the grid).
    pub errors: [f64; 6],
    /// The toy test at each μ of the grid, μ increasing.
    pub tests: Vec<ToyHypotest>,
    /// Per test, the Monte-Carlo standard errors of its CLs observed and expected.
    pub cls_errors: Vec<[f64; 6]>,
}

impl ToyUpperLimit {
    /// The limits from the toy tests of a grid (any order; μ distinct).
    pub fn from_tests(level: f64, mut tests: Vec<ToyHypotest>) -> Result<ToyUpperLimit> {
        tests.sort_by(|a, b| a.mu.total_cmp(&b.mu));
        let limit = curve_limit(level, &tests)?;
        let cls_errors: Vec<[f64; 6]> = tests.iter().map(ToyHypotest::cls_errors).collect();
        let mut errors = [f64::NAN; 6];
        for (which, error) in errors.iter_mut().enumerate() {
            let value = limit_value(&limit, which);
            *error = limit_error(&tests, &cls_errors, which, value);
        }
        Ok(ToyUpperLimit {
            level,
            limit,
            errors,
            tests,
            cls_errors,
        })
    }

    /// The warnings of the tests (failed toy fits left out), each with its μ, and the limits
    /// outside the grid; `None` where there is nothing to say.
    pub fn warning(&self) -> Option<String> {
        let said: Vec<String> = self
            .limit
            .outside_in_words()
            .into_iter()
            .chain(
                self.tests
                    .iter()
                    .filter_map(|t| t.warning.as_ref().map(|w| format!("at μ = {}: {w}", t.mu))),
            )
            .collect();
        (!said.is_empty()).then(|| said.join("; "))
    }
}

/// The limits on the CLs curves of `tests` (μ increasing), refused where a μ repeats or a CLs is
/// undefined: CLb = 0 (the observed statistic beyond every background-only toy) leaves CLs without
/// a value, and interpolating through it would give a number that is no limit.
fn curve_limit(level: f64, tests: &[ToyHypotest]) -> Result<UpperLimit> {
    if let Some(w) = tests.windows(2).find(|w| w[0].mu == w[1].mu) {
        return Err(Error::InvalidInput(format!(
            "two toy tests at μ = {}: a grid's μ values are distinct",
            w[0].mu
        )));
    }
    if let Some(t) = tests.iter().find(|t| {
        !std::iter::once(t.cls.cls_obs)
            .chain(t.cls.cls_exp)
            .all(f64::is_finite)
    }) {
        return Err(Error::Computation(format!(
            "CLs at μ = {} is undefined: the observed test statistic lies beyond every one of the \
             {} background-only toys (CLb = 0); more toys, or μ values nearer the limits, give it \
             a value",
            t.mu,
            t.background.teststats.len()
        )));
    }
    let points: Vec<_> = tests
        .iter()
        .map(|t| (t.mu, t.cls.cls_obs, t.cls.cls_exp))
        .collect();
    UpperLimit::from_scan(level, points)
}

/// The observed (0) or an expected (1..=5) limit.
fn limit_value(limit: &UpperLimit, which: usize) -> f64 {
    if which == 0 {
        limit.obs
    } else {
        limit.exp[which - 1]
    }
}

/// The CLs curve's value at a test: observed (0) or expected (1..=5).
fn cls_value(test: &ToyHypotest, which: usize) -> f64 {
    if which == 0 {
        test.cls.cls_obs
    } else {
        test.cls.cls_exp[which - 1]
    }
}

/// The Monte-Carlo error of a limit interpolated at `value` between two grid points: the CLs
/// error there (interpolated as the value is) over the curve's slope.
fn limit_error(tests: &[ToyHypotest], errors: &[[f64; 6]], which: usize, value: f64) -> f64 {
    if !value.is_finite() {
        return f64::NAN;
    }
    let Some(j) = tests
        .windows(2)
        .position(|w| w[0].mu <= value && value <= w[1].mu)
    else {
        return f64::NAN;
    };
    let (a, b) = (&tests[j], &tests[j + 1]);
    let slope = (cls_value(b, which) - cls_value(a, which)) / (b.mu - a.mu);
    let weight = (value - a.mu) / (b.mu - a.mu);
    let cls_error = (1.0 - weight) * errors[j][which] + weight * errors[j + 1][which];
    if slope == 0.0 {
        f64::INFINITY
    } else {
        cls_error / slope.abs()
    }
}

/// What a toy-based limit asks for: the CLs level, the toys per μ and their seed.
#[derive(Clone, Copy, Debug)]
pub struct ToyLimitSpec {
    pub level: f64,
    pub n_toys: usize,
    pub seed: u64,
}

impl ToyLimitSpec {
    /// Refuse a grid of `points` μ values whose toys together exceed [`MAX_LIMIT_TOYS`].
    pub fn check_points(&self, points: usize) -> Result<()> {
        check_n_toys(self.n_toys)?;
        if points.saturating_mul(self.n_toys) > MAX_LIMIT_TOYS {
            return Err(Error::InvalidInput(format!(
                "{points} μ values × {} toys: a toy-based limit draws at most {MAX_LIMIT_TOYS} \
                 toys per hypothesis over its grid; use fewer μ values or toys",
                self.n_toys
            )));
        }
        Ok(())
    }

    /// The test of this limit at `mu` over toys `toys` (all of them, or a shard's share).
    pub fn test<'a>(
        &self,
        mu: f64,
        toys: std::ops::Range<usize>,
        data: &'a PreparedData,
        config: &'a FitConfig,
    ) -> ToyTest<'a> {
        ToyTest {
            mu,
            data,
            config,
            stat: TestStatistic::QTilde,
            n_toys: self.n_toys,
            seed: self.seed,
            toys,
        }
    }
}

/// The toy tests at `mus`, as one batch; an error names the μ whose test failed. `progress`
/// receives the toys done, of `2 · n_toys · mus.len()`.
fn tests_at(
    fitter: &Fitter,
    data: &PreparedData,
    config: &FitConfig,
    spec: &ToyLimitSpec,
    mus: &[f64],
    progress: &(dyn Fn(usize) + Sync),
) -> Result<Vec<ToyHypotest>> {
    let tests: Vec<ToyTest> = mus
        .iter()
        .map(|&mu| spec.test(mu, 0..spec.n_toys, data, config))
        .collect();
    hypotest_toys_batch(fitter, &tests, progress)?
        .into_iter()
        .zip(mus)
        .map(|(r, mu)| r.map_err(|e| at_mu(e, *mu)))
        .collect()
}

/// An error of the test at one μ, naming it (its kind kept).
pub fn at_mu(e: Error, mu: f64) -> Error {
    let say = |m: String| format!("the toy test at μ = {mu}: {m}");
    match e {
        Error::InvalidInput(m) => Error::InvalidInput(say(m)),
        Error::InvalidModel(m) => Error::InvalidModel(say(m)),
        Error::Computation(m) => Error::Computation(say(m)),
        other => other,
    }
}

/// The toy-based limit on the μ values of `grid` (increasing, from the POI's lower bound on, as a
/// linear-scan limit takes them). `progress` receives the toys done, of `2 · n_toys · grid.len()`.
pub fn toy_upper_limit_scan(
    fitter: &Fitter,
    data: &PreparedData,
    config: &FitConfig,
    spec: &ToyLimitSpec,
    grid: &[f64],
    progress: &(dyn Fn(usize) + Sync),
) -> Result<ToyUpperLimit> {
    check_scan(fitter, config, spec.level, grid)?;
    spec.check_points(grid.len())?;
    let tests = tests_at(fitter, data, config, spec, grid, progress)?;
    ToyUpperLimit::from_tests(spec.level, tests)
}

/// The toy-based limit on a grid of its own: around each asymptotic limit (÷1.3, ×1, ×1.3),
/// extended (×1.5 or ÷1.5 a round, up to four rounds, within the POI's bounds) where a toy limit
/// lies outside it, then refined (up to three rounds) with points 2% below and above each limit
/// whose grid interval is wider than 5% of it. `progress` receives the toys done so far.
pub fn toy_upper_limit_auto(
    fitter: &Fitter,
    data: &PreparedData,
    config: &FitConfig,
    spec: &ToyLimitSpec,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<ToyUpperLimit> {
    let poi = checks::free_poi(fitter, config)?;
    let asymptotic = upper_limit_root(fitter, data, config, spec.level, 1e-3, &mut |_| {})?;
    let centres: Vec<f64> = std::iter::once(asymptotic.obs)
        .chain(asymptotic.exp)
        .filter(|v| v.is_finite())
        .collect();
    if centres.is_empty() {
        return Err(Error::InvalidInput(format!(
            "the asymptotic limits all lie outside the POI's bounds ({}), so there is no grid to \
             centre the toys on: give the μ values to test (a scan)",
            asymptotic.outside_in_words().unwrap_or_default()
        )));
    }
    let (low, high) = config.bounds[poi];
    let within = |mu: f64| mu.clamp(low.max(0.0), high);
    let mut grid = Grid::default();
    for c in &centres {
        for factor in [1.0 / 1.3, 1.0, 1.3] {
            grid.add(within(c * factor));
        }
    }
    let first = grid.take_new();
    // The most points the rounds can add (each limit: a point a round beyond the grid, two a
    // round around it), refused before any toy is drawn rather than after hours of them.
    spec.check_points(first.len() + 6 * EXTEND_ROUNDS + 12 * REFINE_ROUNDS)?;
    let mut tests: Vec<ToyHypotest> = Vec::new();
    let mut done = 0;
    let mut run = |mus: Vec<f64>, tests: &mut Vec<ToyHypotest>| -> Result<()> {
        let offset = done;
        tests.extend(tests_at(fitter, data, config, spec, &mus, &|k| {
            progress(offset + k)
        })?);
        done += 2 * spec.n_toys * mus.len();
        Ok(())
    };
    run(first, &mut tests)?;
    for _ in 0..EXTEND_ROUNDS {
        tests.sort_by(|a, b| a.mu.total_cmp(&b.mu));
        let current = curve_limit(spec.level, &tests)?;
        for side in current.outside.iter().flatten() {
            match *side {
                Outside::Above(mu) if mu < high => grid.add(within(mu * 1.5)),
                Outside::Below(mu) if mu > low.max(0.0) => grid.add(within(mu / 1.5)),
                _ => {}
            }
        }
        let new = grid.take_new();
        if new.is_empty() {
            break;
        }
        run(new, &mut tests)?;
    }
    for _ in 0..REFINE_ROUNDS {
        tests.sort_by(|a, b| a.mu.total_cmp(&b.mu));
        let current = curve_limit(spec.level, &tests)?;
        for which in 0..6 {
            let value = limit_value(&current, which);
            let Some(j) = tests
                .windows(2)
                .position(|w| w[0].mu <= value && value <= w[1].mu)
            else {
                continue;
            };
            if tests[j + 1].mu - tests[j].mu > 0.05 * value {
                grid.add(within(value * 0.98));
                grid.add(within(value * 1.02));
            }
        }
        let new = grid.take_new();
        if new.is_empty() {
            break;
        }
        run(new, &mut tests)?;
    }
    ToyUpperLimit::from_tests(spec.level, tests)
}

/// An automatic grid: its μ values, each kept once (values within 1% of one already there are
/// that one), and those not yet tested.
#[derive(Default)]
struct Grid {
    values: BTreeMap<u64, bool>,
}

impl Grid {
    fn add(&mut self, mu: f64) {
        let near = self
            .values
            .keys()
            .any(|&k| (f64::from_bits(k) - mu).abs() <= 0.01 * mu.abs());
        if !near && mu.is_finite() {
            self.values.insert(mu.to_bits(), false);
        }
    }

    /// The values added since the last call, now marked as tested.
    fn take_new(&mut self) -> Vec<f64> {
        let mut new = Vec::new();
        for (k, tested) in self.values.iter_mut() {
            if !*tested {
                *tested = true;
                new.push(f64::from_bits(*k));
            }
        }
        new.sort_by(f64::total_cmp);
        new
    }
}
