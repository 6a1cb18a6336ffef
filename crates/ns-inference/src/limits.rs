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
    AsymptoticHypotest, TestStatValue, TestStatistic, asymptotic_from_fits, expected_data,
    hypotest_asymptotic, statistic_from_fits,
};

/// Observed and expected (n_σ = 2, 1, 0, −1, −2, pyhf's order) upper limits.
#[derive(Clone, Debug)]
pub struct UpperLimit {
    pub obs: f64,
    pub exp: [f64; 5],
    /// Every (μ, CLs_obs, CLs_exp) computed on the way, sorted by μ.
    pub points: Vec<(f64, f64, [f64; 5])>,
}

/// CLs(μ) observed and expected, memoized: each μ costs a full asymptotic hypotest.
struct ClsCurve<'a> {
    fitter: &'a Fitter<'a>,
    data: &'a PreparedData,
    config: &'a FitConfig,
    cache: BTreeMap<u64, (f64, [f64; 5])>,
    progress: &'a mut dyn FnMut(usize),
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
            cache: BTreeMap::new(),
            progress,
        }
    }

    /// The configuration at `mu`: pyhf's bracket expansion tests μ beyond the POI's upper bound,
    /// so the bound is widened to μ there.
    fn config_at(&self, mu: f64) -> FitConfig {
        let mut config = self.config.clone();
        if let Some(poi) = self.fitter.model().poi_index() {
            config.bounds[poi].1 = config.bounds[poi].1.max(mu);
        }
        config
    }

    fn record(&mut self, h: &AsymptoticHypotest) -> (f64, [f64; 5]) {
        let value = (h.cls.cls_obs, h.cls.cls_exp);
        self.cache.insert(h.mu.to_bits(), value);
        (self.progress)(self.cache.len());
        value
    }

    fn at(&mut self, mu: f64) -> Result<(f64, [f64; 5])> {
        if let Some(v) = self.cache.get(&mu.to_bits()) {
            return Ok(*v);
        }
        let config = self.config_at(mu);
        let h = hypotest_asymptotic(self.fitter, mu, self.data, &config, TestStatistic::QTilde)?;
        Ok(self.record(&h))
    }

    /// Every μ of a grid, its fits as two batches (one GPU submission each, or every core):
    /// on the data, the free fit and the fit behind the Asimov data (once for all μ that share a
    /// configuration) and the fit at each μ; then on the Asimov data, the free fit and the fit
    /// at each μ. Each fit is the one [`at`](Self::at) makes, so the results are the same.
    fn at_all(&mut self, grid: &[f64]) -> Result<()> {
        let fitter = self.fitter;
        let poi = checks::free_poi(fitter, self.config)?;
        let mut todo: Vec<f64> = Vec::new();
        for &mu in grid {
            if !self.cache.contains_key(&mu.to_bits()) && !todo.contains(&mu) {
                todo.push(mu);
            }
        }
        if todo.is_empty() {
            return Ok(());
        }
        // μ values whose configurations agree (all below the POI's upper bound, usually) share
        // the fits that do not depend on μ.
        let mut groups: Vec<FitConfig> = Vec::new();
        let mut group_of = Vec::with_capacity(todo.len());
        for &mu in &todo {
            let config = self.config_at(mu);
            checks::value_in_bounds(fitter, &config, poi, mu, "mu")?;
            let upper = config.bounds[poi].1.to_bits();
            let g = match groups
                .iter()
                .position(|c| c.bounds[poi].1.to_bits() == upper)
            {
                Some(g) => g,
                None => {
                    groups.push(config);
                    groups.len() - 1
                }
            };
            group_of.push(g);
        }
        let job = |data: usize, config: FitConfig| FitJob {
            data,
            config: Arc::new(config),
        };
        let at_mu = |k: usize| groups[group_of[k]].with_fixed(poi, todo[k]);
        let data = std::slice::from_ref(self.data);
        let started = |fit: Result<FitResult>, on: &PreparedData| -> Result<FitResult> {
            let fit = fit?;
            checks::started(fitter, &fit, on)?;
            Ok(fit)
        };

        let mut jobs = Vec::with_capacity(2 * groups.len() + todo.len());
        for config in &groups {
            jobs.push(job(0, config.clone()));
            jobs.push(job(0, config.with_fixed(poi, 0.0)));
        }
        jobs.extend((0..todo.len()).map(|k| job(0, at_mu(k))));
        let mut on_data = fitter.fit_batch(data, &jobs, &|_| {})?.into_iter();
        let mut free = Vec::with_capacity(groups.len());
        let mut behind_asimov = Vec::with_capacity(groups.len());
        let mut asimov = Vec::with_capacity(groups.len());
        for _ in &groups {
            let (f, a) = (on_data.next(), on_data.next());
            free.push(started(f.expect("one result per job"), self.data)?);
            let a = started(a.expect("one result per job"), self.data)?;
            asimov.push(expected_data(fitter, &a)?);
            behind_asimov.push(a);
        }
        let fixed: Vec<FitResult> = on_data
            .map(|f| started(f, self.data))
            .collect::<Result<_>>()?;

        let mut jobs = Vec::with_capacity(groups.len() + todo.len());
        jobs.extend(groups.iter().enumerate().map(|(g, c)| job(g, c.clone())));
        jobs.extend((0..todo.len()).map(|k| job(group_of[k], at_mu(k))));
        let mut on_asimov = fitter.fit_batch(&asimov, &jobs, &|_| {})?.into_iter();
        let mut free_asimov = Vec::with_capacity(groups.len());
        for a in &asimov {
            free_asimov.push(started(on_asimov.next().expect("one result per job"), a)?);
        }
        for (k, (fixed, fixed_asimov)) in fixed.into_iter().zip(on_asimov).enumerate() {
            let (mu, g) = (todo[k], group_of[k]);
            let fixed_asimov = started(fixed_asimov, &asimov[g])?;
            let statistic = |fixed_fit: FitResult, free_fit: &FitResult| TestStatValue {
                value: statistic_from_fits(TestStatistic::QTilde, mu, poi, &fixed_fit, free_fit),
                fixed_fit,
                free_fit: free_fit.clone(),
            };
            let h = asymptotic_from_fits(
                TestStatistic::QTilde,
                mu,
                statistic(fixed, &free[g]),
                behind_asimov[g].clone(),
                statistic(fixed_asimov, &free_asimov[g]),
            );
            self.record(&h);
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
    let (mut low, mut high) = config.bounds[poi];
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
    tries = 0;
    while all(curve.at(high)?).any(|c| c > level || c.is_nan()) {
        high *= 2.0;
        tries += 1;
        if tries > 30 {
            return Err(Error::InvalidInput(format!(
                "CLs stays above {level} from the POI's upper bound {upper_bound} up to μ = {high}: \
                 no upper limit in reach (is the signal's yield zero or tiny? a linear scan over a \
                 chosen range, --scan START STOP COUNT, shows the CLs curve)"
            )));
        }
    }
    let mut limits = [0.0; 6];
    for (which, limit) in limits.iter_mut().enumerate() {
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
        let (a, b) = if a < b { (a, b) } else { (low, high) };
        *limit = brent(|mu| Ok(curve.value(mu, which)? - level), a, b, rtol)?;
    }
    Ok(UpperLimit {
        obs: limits[0],
        exp: [limits[1], limits[2], limits[3], limits[4], limits[5]],
        points: curve.points(),
    })
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
    let mut curve = ClsCurve::new(fitter, data, config, progress);
    curve.at_all(scan)?;
    let mut rows = Vec::with_capacity(scan.len());
    for &mu in scan {
        rows.push((mu, curve.at(mu)?));
    }
    let interp = |which: usize| {
        // np.interp(level, cls[::-1], scan[::-1]): CLs decreasing in μ, reversed to increasing.
        let xs: Vec<f64> = rows
            .iter()
            .rev()
            .map(|(_, v)| if which == 0 { v.0 } else { v.1[which - 1] })
            .collect();
        let ys: Vec<f64> = rows.iter().rev().map(|(mu, _)| *mu).collect();
        np_interp(level, &xs, &ys)
    };
    Ok(UpperLimit {
        obs: interp(0),
        exp: [interp(1), interp(2), interp(3), interp(4), interp(5)],
        points: curve.points(),
    })
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
