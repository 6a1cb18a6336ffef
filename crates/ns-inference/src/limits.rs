//! Upper limits on the POI with pyhf's `upper_limit` semantics: the μ where CLs crosses the
//! level, observed and for the five expected bands, by bracketed root finding (with pyhf's
//! bracket expansion) or by interpolation on a linear scan.

use ns_compute::PreparedData;
use ns_core::{Error, Result};
use std::collections::BTreeMap;

use std::sync::Arc;

use crate::checks;
use crate::fit::{FitConfig, FitJob, FitResult, Fitter};
use crate::hypotest::{
    TestStatValue, TestStatistic, asimov_data, asymptotic_from_fits, expected_data,
    statistic_from_fits,
};

/// Where a limit lies when it is outside the μ range examined: the POI's bounds (root finding)
/// or the scan's grid. Such a limit has no value, only this side.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Outside {
    /// CLs stays above the level up to μ = this (the POI's upper bound or the scan's last μ).
    Above(f64),
    /// CLs is below the level already at μ = this (the scan's first μ).
    Below(f64),
}

/// Observed and expected (n_σ = 2, 1, 0, −1, −2, pyhf's order) upper limits.
#[derive(Clone, Debug)]
pub struct UpperLimit {
    /// NaN where `outside[0]` says the limit lies outside the range examined.
    pub obs: f64,
    /// NaN where `outside[1 + k]` says the limit lies outside the range examined.
    pub exp: [f64; 5],
    /// For the observed and the five expected limits: `Some` where it lies outside the range.
    pub outside: [Option<Outside>; 6],
    /// The range examined, in words: "the POI's bounds" or "the scanned μ values".
    pub range: &'static str,
    /// Every (μ, CLs_obs, CLs_exp) computed on the way, sorted by μ.
    pub points: Vec<(f64, f64, [f64; 5])>,
}

impl UpperLimit {
    fn new(
        limits: [f64; 6],
        outside: [Option<Outside>; 6],
        range: &'static str,
        points: Vec<(f64, f64, [f64; 5])>,
    ) -> Self {
        UpperLimit {
            obs: limits[0],
            exp: [limits[1], limits[2], limits[3], limits[4], limits[5]],
            outside,
            range,
            points,
        }
    }

    /// The limits outside the range, in words ("the observed limit lies above μ = 1 (the POI's
    /// upper bound)"), or `None` where every limit was found.
    pub fn outside_in_words(&self) -> Option<String> {
        // pyhf's order of the expected set: the lowest-CLs ("−2σ") band first.
        const NAMES: [&str; 6] = [
            "observed",
            "expected −2σ",
            "expected −1σ",
            "expected median",
            "expected +1σ",
            "expected +2σ",
        ];
        if let Some(first) = self.outside[0]
            && self.outside.iter().all(|o| *o == Some(first))
        {
            let side = match first {
                Outside::Below(mu) => format!("below μ = {mu}"),
                Outside::Above(mu) => format!("above μ = {mu}"),
            };
            return Some(format!(
                "every limit (observed and expected) lies {side}, outside {}",
                self.range
            ));
        }
        let said: Vec<String> = self
            .outside
            .iter()
            .zip(NAMES)
            .filter_map(|(o, name)| {
                o.map(|o| match o {
                    Outside::Above(mu) => format!("the {name} limit lies above μ = {mu}"),
                    Outside::Below(mu) => format!("the {name} limit lies below μ = {mu}"),
                })
            })
            .collect();
        (!said.is_empty()).then(|| format!("{}, outside {}", said.join(", "), self.range))
    }
}

/// The fits of an asymptotic hypotest that do not depend on μ: the free fit on the data, the fit
/// behind the Asimov data (POI fixed at 0), the Asimov data and the free fit on them. A curve
/// makes them once; each μ then costs its two fixed-POI fits.
struct SharedFits {
    free: FitResult,
    behind_asimov: FitResult,
    asimov: PreparedData,
    free_asimov: FitResult,
}

/// CLs(μ) observed and expected, memoized; each new μ costs two fits (on the data and on the
/// Asimov data, the POI fixed at μ), the μ-independent fits being made once per curve.
struct ClsCurve<'a> {
    fitter: &'a Fitter<'a>,
    data: &'a PreparedData,
    config: &'a FitConfig,
    shared: Option<SharedFits>,
    cache: BTreeMap<u64, (f64, [f64; 5])>,
    progress: &'a mut dyn FnMut(usize),
}

/// An error of a fit on the Asimov data names them (it is not about the observed data).
fn on_asimov_data(e: Error) -> Error {
    match e {
        Error::InvalidModel(m) => Error::InvalidModel(format!(
            "on the Asimov data (the expected data at POI = 0): {m}"
        )),
        other => other,
    }
}

impl<'a> ClsCurve<'a> {
    fn new(
        fitter: &'a Fitter<'a>,
        data: &'a PreparedData,
        config: &'a FitConfig,
        progress: &'a mut dyn FnMut(usize),
    ) -> Self {
        ClsCurve {
            fitter,
            data,
            config,
            shared: None,
            cache: BTreeMap::new(),
            progress,
        }
    }

    /// The hypotest at `mu` from its two fixed-POI fits and the shared fits.
    fn record(&mut self, mu: f64, poi: usize, fixed: FitResult, fixed_asimov: FitResult) {
        let shared = self
            .shared
            .as_ref()
            .expect("the shared fits precede every point");
        let statistic = |fixed_fit: FitResult, free_fit: &FitResult| TestStatValue {
            value: statistic_from_fits(TestStatistic::QTilde, mu, poi, &fixed_fit, free_fit),
            fixed_fit,
            free_fit: free_fit.clone(),
        };
        let h = asymptotic_from_fits(
            TestStatistic::QTilde,
            mu,
            statistic(fixed, &shared.free),
            shared.behind_asimov.clone(),
            statistic(fixed_asimov, &shared.free_asimov),
        );
        self.cache
            .insert(mu.to_bits(), (h.cls.cls_obs, h.cls.cls_exp));
        (self.progress)(self.cache.len());
    }

    fn at(&mut self, mu: f64) -> Result<(f64, [f64; 5])> {
        if let Some(v) = self.cache.get(&mu.to_bits()) {
            return Ok(*v);
        }
        let (fitter, data, config) = (self.fitter, self.data, self.config);
        checks::asimov_poi_in_bounds(fitter, config, 0.0)?;
        let poi = checks::free_poi(fitter, config)?;
        checks::value_in_bounds(fitter, config, poi, mu, "mu")?;
        // In `hypotest_asymptotic`'s order (so that a failing fit is named as it names it): the
        // free and fixed fits on the data, then the Asimov data and the fits on them; the
        // μ-independent ones on the curve's first point only.
        let free = match self.shared {
            None => {
                let free = fitter.fit(data, config)?;
                checks::started(fitter, &free, data)?;
                Some(free)
            }
            Some(_) => None,
        };
        let fixed = fitter.fixed_poi_fit(mu, data, config)?;
        checks::started(fitter, &fixed, data)?;
        if let Some(free) = free {
            let (asimov, behind_asimov) = asimov_data(fitter, 0.0, data, config)?;
            let free_asimov = fitter.fit(&asimov, config).map_err(on_asimov_data)?;
            checks::started(fitter, &free_asimov, &asimov).map_err(on_asimov_data)?;
            self.shared = Some(SharedFits {
                free,
                behind_asimov,
                asimov,
                free_asimov,
            });
        }
        let asimov = &self.shared.as_ref().expect("made above or before").asimov;
        let fixed_asimov = fitter
            .fixed_poi_fit(mu, asimov, config)
            .and_then(|f| checks::started(fitter, &f, asimov).map(|()| f))
            .map_err(on_asimov_data)?;
        self.record(mu, poi, fixed, fixed_asimov);
        Ok(self.cache[&mu.to_bits()])
    }

    /// Every μ of a grid, its fits as two batches (one GPU submission each, or every core): on
    /// the data, the fit at each μ (with the free fit and the fit behind the Asimov data, where
    /// the curve has not made them yet); then on the Asimov data, the fit at each μ (with the
    /// free fit). Each fit is the one [`at`](Self::at) makes, so the results are the same.
    fn at_all(&mut self, grid: &[f64]) -> Result<()> {
        let fitter = self.fitter;
        let config = self.config;
        let poi = checks::free_poi(fitter, config)?;
        checks::asimov_poi_in_bounds(fitter, config, 0.0)?;
        let mut todo: Vec<f64> = Vec::new();
        for &mu in grid {
            checks::value_in_bounds(fitter, config, poi, mu, "the scan's mu")?;
            if !self.cache.contains_key(&mu.to_bits()) && !todo.contains(&mu) {
                todo.push(mu);
            }
        }
        if todo.is_empty() {
            return Ok(());
        }
        let job = |config: FitConfig| FitJob {
            data: 0,
            config: Arc::new(config),
        };
        let started = |fit: Option<Result<FitResult>>, on: &PreparedData| -> Result<FitResult> {
            let fit =
                fit.ok_or_else(|| Error::Computation("a batch returned too few fits".into()))??;
            checks::started(fitter, &fit, on)?;
            Ok(fit)
        };
        let fixed_jobs = todo.iter().map(|&mu| job(config.with_fixed(poi, mu)));
        let make_shared = self.shared.is_none();
        let mut jobs = Vec::new();
        if make_shared {
            jobs.extend([job(config.clone()), job(config.with_fixed(poi, 0.0))]);
        }
        jobs.extend(fixed_jobs.clone());
        let mut on_data = fitter
            .fit_batch(std::slice::from_ref(self.data), &jobs, &|_| {})?
            .into_iter();
        let mut free_on_data = None;
        if make_shared {
            let free = started(on_data.next(), self.data)?;
            let behind_asimov = started(on_data.next(), self.data)?;
            let asimov = expected_data(fitter, &behind_asimov)?;
            free_on_data = Some((free, behind_asimov, asimov));
        }
        let fixed: Vec<FitResult> = on_data
            .map(|f| started(Some(f), self.data))
            .collect::<Result<_>>()?;

        // On the Asimov data: the free fit where it is still to make, and the fit at each μ.
        let mut jobs = Vec::new();
        if make_shared {
            jobs.push(job(config.clone()));
        }
        jobs.extend(fixed_jobs);
        let asimov = match &free_on_data {
            Some((_, _, asimov)) => asimov,
            None => {
                &self
                    .shared
                    .as_ref()
                    .expect("made before, or in this batch")
                    .asimov
            }
        };
        let mut on_asimov = fitter
            .fit_batch(std::slice::from_ref(asimov), &jobs, &|_| {})?
            .into_iter();
        if let Some((free, behind_asimov, asimov)) = free_on_data {
            let free_asimov = started(on_asimov.next(), &asimov).map_err(on_asimov_data)?;
            self.shared = Some(SharedFits {
                free,
                behind_asimov,
                asimov,
                free_asimov,
            });
        }
        let asimov = &self.shared.as_ref().expect("set above").asimov;
        let fixed_asimov: Vec<FitResult> = on_asimov
            .map(|f| started(Some(f), asimov).map_err(on_asimov_data))
            .collect::<Result<_>>()?;
        for ((&mu, fixed), fixed_asimov) in todo.iter().zip(fixed).zip(fixed_asimov) {
            self.record(mu, poi, fixed, fixed_asimov);
        }
        Ok(())
    }

    fn value(&mut self, mu: f64, which: usize) -> Result<f64> {
        let (obs, exp) = self.at(mu)?;
        Ok(if which == 0 { obs } else { exp[which - 1] })
    }

    fn points(&self) -> Vec<(f64, f64, [f64; 5])> {
        let mut p: Vec<_> = self
            .cache
            .iter()
            .map(|(k, v)| (f64::from_bits(*k), v.0, v.1))
            .collect();
        p.sort_by(|a, b| a.0.total_cmp(&b.0));
        p
    }
}

/// A CLs level must lie strictly between 0 and 1 (0.05 for 95% CL).
fn check_level(level: f64) -> Result<()> {
    if !(level > 0.0 && level < 1.0) {
        return Err(Error::InvalidInput(format!(
            "level = {level}: the CLs level must be between 0 and 1 (0.05 for a 95% CL limit)"
        )));
    }
    Ok(())
}

/// Upper limits by root finding: start from the POI bounds, halve the lower end until every
/// curve is above `level` there and double the upper end until every curve is below it
/// (pyhf's `toms748_scan`), then solve each crossing by Brent's method from the tightest
/// bracket among the points already computed. `progress` is called with the number of
/// hypotests done.
pub fn upper_limit_root(
    fitter: &Fitter,
    data: &PreparedData,
    config: &FitConfig,
    level: f64,
    rtol: f64,
    progress: &mut dyn FnMut(usize),
) -> Result<UpperLimit> {
    check_level(level)?;
    let poi = checks::free_poi(fitter, config)?;
    let config = &fitter.with_scale(data, config)?;
    let (mut low, high) = config.bounds[poi];
    let upper_bound = high;
    if !(high > 0.0) {
        return Err(Error::InvalidInput(format!(
            "the POI's upper bound is {high}: an upper limit needs a positive range"
        )));
    }
    if !(low > 0.0) {
        // pyhf starts from the lower bound; at 0 CLs is 1 by construction, so start just above it.
        low = (high * 1e-6).max(f64::MIN_POSITIVE);
    }
    let mut curve = ClsCurve::new(fitter, data, config, progress);
    let all = |v: (f64, [f64; 5])| std::iter::once(v.0).chain(v.1);
    let mut tries = 0;
    while all(curve.at(low)?).any(|c| c < level) {
        low /= 2.0;
        tries += 1;
        if tries > 60 {
            return Err(Error::InvalidInput(
                "CLs stays below the level even at tiny μ: no upper limit".into(),
            ));
        }
    }
    // pyhf doubles the bracket past the POI's upper bound, where its own hypotests refuse μ; here
    // the bracket ends at the bound, and a curve still above the level there has its limit
    // reported as lying above the bound.
    let at_bound = curve.at(high)?;
    let mut limits = [f64::NAN; 6];
    let mut outside = [None; 6];
    for (which, limit) in limits.iter_mut().enumerate() {
        let cls_at_bound = if which == 0 {
            at_bound.0
        } else {
            at_bound.1[which - 1]
        };
        if cls_at_bound.is_nan() {
            return Err(Error::Computation(format!(
                "CLs is undefined at the POI's upper bound μ = {upper_bound}: no limit can be \
                 bracketed (a linear scan of μ values shows the CLs curve)"
            )));
        }
        if cls_at_bound > level {
            outside[which] = Some(Outside::Above(upper_bound));
            continue;
        }
        // Tightest bracket among the points known so far.
        let points = curve.points();
        let value =
            |p: &(f64, f64, [f64; 5])| if which == 0 { p.1 } else { p.2[which - 1] } - level;
        let a = points
            .iter()
            .filter(|p| value(p) >= 0.0)
            .map(|p| p.0)
            .fold(f64::NEG_INFINITY, f64::max);
        let b = points
            .iter()
            .filter(|p| value(p) < 0.0)
            .map(|p| p.0)
            .fold(f64::INFINITY, f64::min);
        let (a, b) = if a.is_finite() && b.is_finite() && a < b {
            (a, b)
        } else {
            (low, high)
        };
        *limit = brent(|mu| Ok(curve.value(mu, which)? - level), a, b, rtol)?;
    }
    Ok(UpperLimit::new(
        limits,
        outside,
        "the POI's bounds (widen them to look further)",
        curve.points(),
    ))
}

/// Upper limits by interpolating CLs on a grid of μ values (pyhf's `linear_grid_scan`, which
/// uses `np.interp` on the reversed curves).
pub fn upper_limit_scan(
    fitter: &Fitter,
    data: &PreparedData,
    config: &FitConfig,
    level: f64,
    scan: &[f64],
    progress: &mut dyn FnMut(usize),
) -> Result<UpperLimit> {
    check_scan(fitter, config, level, scan)?;
    let points = cls_scan_points(fitter, data, config, scan, progress)?;
    UpperLimit::from_scan(level, points)
}

/// The rules of a linear-scan limit: a CLs level in (0, 1) and at least two increasing finite μ
/// values from the POI's lower bound on.
pub fn check_scan(fitter: &Fitter, config: &FitConfig, level: f64, scan: &[f64]) -> Result<()> {
    check_level(level)?;
    let poi = checks::free_poi(fitter, config)?;
    if scan.len() < 2 {
        return Err(Error::InvalidInput(
            "a linear-scan upper limit needs at least two μ values".into(),
        ));
    }
    let lower = config.bounds[poi].0;
    if let Some(w) = scan.windows(2).find(|w| !(w[0] < w[1])) {
        return Err(Error::InvalidInput(format!(
            "the scan's μ values must increase ({} is followed by {})",
            w[0], w[1]
        )));
    }
    if !(scan[0] >= lower && scan[scan.len() - 1].is_finite()) {
        return Err(Error::InvalidInput(format!(
            "the scan runs from {} to {}; it must be finite and start at or above the POI's lower \
             bound {lower}",
            scan[0],
            scan[scan.len() - 1]
        )));
    }
    Ok(())
}

/// One μ of a CLs scan: (μ, CLs observed, CLs expected −2σ…+2σ).
pub type ClsPoint = (f64, f64, [f64; 5]);

/// CLs observed and expected at each of `mus` (a scan's values, or a shard's share of them), in
/// their order. Each μ's fits depend on the data and μ only, so shards give the same points.
pub fn cls_scan_points(
    fitter: &Fitter,
    data: &PreparedData,
    config: &FitConfig,
    mus: &[f64],
    progress: &mut dyn FnMut(usize),
) -> Result<Vec<ClsPoint>> {
    let mut curve = ClsCurve::new(fitter, data, config, progress);
    curve.at_all(mus)?;
    mus.iter()
        .map(|&mu| curve.at(mu).map(|(obs, exp)| (mu, obs, exp)))
        .collect()
}

impl UpperLimit {
    /// The limits of a linear scan from its CLs points (μ increasing):
    /// np.interp(level, cls[::-1], scan[::-1]) (CLs decreasing in μ, reversed to increasing),
    /// where the crossing lies inside the grid; np.interp would return the end of the grid for a
    /// crossing outside it, which looks like a limit and is not one.
    pub fn from_scan(level: f64, points: Vec<ClsPoint>) -> Result<UpperLimit> {
        if points.len() < 2 {
            return Err(Error::InvalidInput(format!(
                "{} CLs points: a scan limit needs at least two",
                points.len()
            )));
        }
        let (first, last) = (points[0].0, points[points.len() - 1].0);
        let mut limits = [f64::NAN; 6];
        let mut outside = [None; 6];
        for which in 0..6 {
            let xs: Vec<f64> = points
                .iter()
                .rev()
                .map(|(_, obs, exp)| if which == 0 { *obs } else { exp[which - 1] })
                .collect();
            let ys: Vec<f64> = points.iter().rev().map(|(mu, _, _)| *mu).collect();
            let (at_last, at_first) = (xs[0], xs[xs.len() - 1]);
            if at_last > level {
                outside[which] = Some(Outside::Above(last));
            } else if at_first < level {
                outside[which] = Some(Outside::Below(first));
            } else {
                limits[which] = np_interp(level, &xs, &ys);
            }
        }
        Ok(UpperLimit::new(
            limits,
            outside,
            "the scanned μ values",
            points,
        ))
    }
}

/// numpy's `interp` (xs assumed increasing; clamps outside the range).
fn np_interp(x: f64, xs: &[f64], ys: &[f64]) -> f64 {
    if x <= xs[0] {
        return ys[0];
    }
    if x >= xs[xs.len() - 1] {
        return ys[ys.len() - 1];
    }
    let i = xs.partition_point(|&v| v <= x).max(1) - 1;
    let t = (x - xs[i]) / (xs[i + 1] - xs[i]);
    ys[i] + t * (ys[i + 1] - ys[i])
}

/// Brent's method for a root of `f` in `[a, b]` (f(a)·f(b) ≤ 0) to `rtol`·|x| + 1e-12.
pub fn brent(
    mut f: impl FnMut(f64) -> Result<f64>,
    mut a: f64,
    mut b: f64,
    rtol: f64,
) -> Result<f64> {
    let (mut fa, mut fb) = (f(a)?, f(b)?);
    if fa == 0.0 {
        return Ok(a);
    }
    if fb == 0.0 {
        return Ok(b);
    }
    if fa.signum() == fb.signum() {
        return Err(Error::InvalidInput(format!(
            "root finding: [{a}, {b}] does not bracket a crossing"
        )));
    }
    let (mut c, mut fc) = (a, fa);
    let (mut d, mut e) = (b - a, b - a);
    for _ in 0..200 {
        if fb.signum() == fc.signum() {
            c = a;
            fc = fa;
            d = b - a;
            e = d;
        }
        if fc.abs() < fb.abs() {
            a = b;
            b = c;
            c = a;
            fa = fb;
            fb = fc;
            fc = fa;
        }
        let tol = 2.0 * f64::EPSILON * b.abs() + 0.5 * (rtol * b.abs() + 1e-12);
        let m = 0.5 * (c - b);
        if m.abs() <= tol || fb == 0.0 {
            return Ok(b);
        }
        if e.abs() >= tol && fa.abs() > fb.abs() {
            let s = fb / fa;
            let (mut p, mut q) = if a == c {
                (2.0 * m * s, 1.0 - s)
            } else {
                let q = fa / fc;
                let r = fb / fc;
                (
                    s * (2.0 * m * q * (q - r) - (b - a) * (r - 1.0)),
                    (q - 1.0) * (r - 1.0) * (s - 1.0),
                )
            };
            if p > 0.0 {
                q = -q;
            } else {
                p = -p;
            }
            if 2.0 * p < (3.0 * m * q - (tol * q).abs()).min((e * q).abs()) {
                e = d;
                d = p / q;
            } else {
                d = m;
                e = m;
            }
        } else {
            d = m;
            e = m;
        }
        a = b;
        fa = fb;
        b += if d.abs() > tol { d } else { tol.copysign(m) };
        fb = f(b)?;
    }
    Ok(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn brent_finds_roots_and_interp_matches_numpy() {
        let r = brent(|x| Ok(x * x - 2.0), 0.0, 2.0, 1e-12).unwrap();
        assert!((r - 2f64.sqrt()).abs() < 1e-11);
        assert!(brent(|x| Ok(x * x + 1.0), 0.0, 2.0, 1e-12).is_err());
        assert_eq!(np_interp(0.5, &[0.0, 1.0], &[10.0, 20.0]), 15.0);
        assert_eq!(np_interp(-1.0, &[0.0, 1.0], &[10.0, 20.0]), 10.0);
    }
}
