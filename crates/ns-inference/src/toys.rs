//! Toy-based hypothesis tests with pyhf's `ToyCalculator` semantics.
//!
//! Toys are generated at the conditional MLEs of the observed data — μ = μ_test for the
//! signal-plus-background ensemble, μ = 0 for background only (μ = 1 and μ = 0 for q0) — with
//! main bins ~ Poisson(ν), Gaussian auxiliary data ~ Normal(θ, σ) and Poisson auxiliary data ~
//! Poisson(γτ). Toy `i` of hypothesis `h` with seed `s` is the same dataset whatever the thread
//! count. Per-toy test statistics below 1e-9 are set to 0 (as is the observed one): pyhf only
//! clips negatives, which lets p-values flip on rounding noise.

use ns_compute::{CpuEvaluator, PreparedData, Scratch};
use ns_core::Result;
use rayon::prelude::*;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::fit::{FitConfig, Fitter};
use crate::hypotest::{ClsValues, TestStatistic, test_statistic};
use crate::rng::ToyStream;

/// Test statistics below this are rounding noise around zero.
pub const TESTSTAT_ZERO: f64 = 1e-9;

/// Stream numbers of the two ensembles.
const SIGNAL_STREAM: u32 = 0;
const BACKGROUND_STREAM: u32 = 1;

/// Generate toy `index` of `stream` at parameters `params`: main and auxiliary data.
pub fn generate_toy(
    fitter: &Fitter,
    params: &[f64],
    seed: u64,
    stream: u32,
    index: u32,
) -> Result<PreparedData> {
    let compiled = &fitter.model().compiled;
    let (main, _) =
        CpuEvaluator::new(compiled).expected_data(params, &mut Scratch::new(compiled))?;
    let mut rng = ToyStream::new(seed, stream, index);
    let main: Vec<f64> = main.iter().map(|&lambda| rng.poisson(lambda)).collect();
    let mut aux = vec![0.0; compiled.n_aux];
    for c in &compiled.gaussian {
        aux[c.aux_index as usize] = params[c.param as usize] + c.sigma * rng.normal();
    }
    for c in &compiled.poisson {
        aux[c.aux_index as usize] = rng.poisson(params[c.param as usize] * c.tau);
    }
    PreparedData::new(compiled, main, aux)
}

/// One ensemble of toy test statistics.
#[derive(Clone, Debug)]
pub struct ToyEnsemble {
    /// Test statistics of the toys whose fits converged, in toy order.
    pub teststats: Vec<f64>,
    pub n_failed: usize,
    /// Why fits failed, with counts.
    pub failures: BTreeMap<String, usize>,
}

impl ToyEnsemble {
    /// Fraction of toys with a test statistic at least `value` (pyhf's `EmpiricalDistribution.pvalue`).
    pub fn pvalue(&self, value: f64) -> f64 {
        self.teststats.iter().filter(|&&t| t >= value).count() as f64 / self.teststats.len() as f64
    }
}

/// Result of a toy-based hypothesis test.
#[derive(Clone, Debug)]
pub struct ToyHypotest {
    pub mu: f64,
    pub test_statistic: TestStatistic,
    pub teststat_obs: f64,
    /// Expected values: percentiles −2σ…+2σ of the p-values over the background-only toys.
    pub cls: ClsValues,
    pub n_toys: usize,
    pub seed: u64,
    pub signal: ToyEnsemble,
    pub background: ToyEnsemble,
}

fn clip(t: f64) -> f64 {
    if t < TESTSTAT_ZERO { 0.0 } else { t }
}

/// Run `n_toys` toys of one hypothesis in parallel; each toy is fitted serially.
#[allow(clippy::too_many_arguments)]
fn ensemble(
    fitter: &Fitter,
    stat: TestStatistic,
    mu: f64,
    generating: &[f64],
    config: &FitConfig,
    n_toys: usize,
    seed: u64,
    stream: u32,
    done: &AtomicUsize,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<ToyEnsemble> {
    let results: Vec<std::result::Result<f64, String>> = (0..n_toys)
        .into_par_iter()
        .map(|i| {
            let outcome = generate_toy(fitter, generating, seed, stream, i as u32)
                .and_then(|toy| test_statistic(fitter, stat, mu, &toy, config));
            progress(done.fetch_add(1, Ordering::Relaxed) + 1);
            match outcome {
                Ok(t) if t.free_fit.converged && t.fixed_fit.converged => Ok(clip(t.value)),
                Ok(t) => {
                    let failed = if t.free_fit.converged {
                        &t.fixed_fit
                    } else {
                        &t.free_fit
                    };
                    Err(failed.termination.describe().to_string())
                }
                Err(e) => Err(e.to_string()),
            }
        })
        .collect();
    let mut teststats = Vec::with_capacity(n_toys);
    let mut failures = BTreeMap::new();
    for r in results {
        match r {
            Ok(t) => teststats.push(t),
            Err(reason) => *failures.entry(reason).or_insert(0) += 1,
        }
    }
    Ok(ToyEnsemble {
        n_failed: n_toys - teststats.len(),
        teststats,
        failures,
    })
}

/// numpy's `percentile(..., interpolation="linear")` of unsorted values at `q` in [0, 100].
fn percentile(values: &[f64], q: f64) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let pos = q / 100.0 * (v.len() - 1) as f64;
    let (lo, frac) = (pos.floor() as usize, pos - pos.floor());
    if lo + 1 < v.len() {
        v[lo] + frac * (v[lo + 1] - v[lo])
    } else {
        v[lo]
    }
}

/// Toy-based CLs at `mu` (pyhf's `hypotest(..., calctype="toybased")`).
#[allow(clippy::too_many_arguments)]
pub fn hypotest_toys(
    fitter: &Fitter,
    mu: f64,
    data: &PreparedData,
    config: &FitConfig,
    stat: TestStatistic,
    n_toys: usize,
    seed: u64,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<ToyHypotest> {
    if n_toys == 0 {
        return Err(ns_core::Error::InvalidInput(
            "the number of toys must be positive".into(),
        ));
    }
    let config = &fitter.with_scale(data, config)?;
    let observed = clip(test_statistic(fitter, stat, mu, data, config)?.value);
    let signal_mu = if stat == TestStatistic::Q0 { 0.0 } else { mu };
    let background_mu = if stat == TestStatistic::Q0 { 1.0 } else { 0.0 };
    let signal_pars = fitter.fixed_poi_fit(signal_mu, data, config)?.parameters;
    let background_pars = fitter
        .fixed_poi_fit(background_mu, data, config)?
        .parameters;
    let done = AtomicUsize::new(0);
    let signal = ensemble(
        fitter,
        stat,
        mu,
        &signal_pars,
        config,
        n_toys,
        seed,
        SIGNAL_STREAM,
        &done,
        progress,
    )?;
    let background = ensemble(
        fitter,
        stat,
        mu,
        &background_pars,
        config,
        n_toys,
        seed,
        BACKGROUND_STREAM,
        &done,
        progress,
    )?;
    if signal.teststats.is_empty() || background.teststats.is_empty() {
        return Err(ns_core::Error::InvalidInput(format!(
            "every toy fit failed ({:?} / {:?}): no p-value can be formed",
            signal.failures, background.failures
        )));
    }
    let pvalues = |t: f64| {
        let (clsb, clb) = (signal.pvalue(t), background.pvalue(t));
        (clsb, clb, clsb / clb)
    };
    let (clsb_obs, clb_obs, cls_obs) = pvalues(observed);
    let per_toy: Vec<(f64, f64, f64)> = background.teststats.iter().map(|&t| pvalues(t)).collect();
    let band = |pick: fn(&(f64, f64, f64)) -> f64| {
        let values: Vec<f64> = per_toy.iter().map(pick).collect();
        [2.27501319, 15.86552539, 50.0, 84.13447461, 97.72498681].map(|q| percentile(&values, q))
    };
    Ok(ToyHypotest {
        mu,
        test_statistic: stat,
        teststat_obs: observed,
        cls: ClsValues {
            cls_obs,
            clsb_obs,
            clb_obs,
            cls_exp: band(|p| p.2),
            clsb_exp: band(|p| p.0),
            clb_exp: band(|p| p.1),
        },
        n_toys,
        seed,
        signal,
        background,
    })
}

#[cfg(test)]
mod tests {
    use super::percentile;

    #[test]
    fn percentile_matches_numpy_linear() {
        let v = [3.0, 1.0, 2.0, 4.0];
        assert_eq!(percentile(&v, 50.0), 2.5);
        assert_eq!(percentile(&v, 0.0), 1.0);
        assert_eq!(percentile(&v, 100.0), 4.0);
        assert!((percentile(&v, 2.27501319) - 1.0682503957).abs() < 1e-9);
    }
}
