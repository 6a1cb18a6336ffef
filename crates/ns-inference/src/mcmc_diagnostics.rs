//! Convergence diagnostics of Markov chains, as Stan and ArviZ compute them (Vehtari, Gelman,
//! Simpson, Carpenter, Bürkner 2021, "Rank-normalization, folding, and localization"): the
//! rank-normalised split-R̂ (the larger of its bulk and folded forms), the bulk effective sample
//! size (on rank-normalised split chains) and the tail effective sample size (the smaller of the
//! 5% and 95% quantile indicators'), each with Geyer's initial monotone sequence.

use statrs::distribution::{ContinuousCDF, Normal};

use crate::stats::{quantile, quantile_of_sorted};

/// R̂ and effective sample sizes of one parameter over its chains.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ChainDiagnostics {
    pub r_hat: f64,
    pub ess_bulk: f64,
    pub ess_tail: f64,
}

/// The diagnostics of `chains` (each the same length, at least 4 draws): NaN where a chain
/// holds a non-finite value or every draw is the same.
pub fn diagnostics(chains: &[Vec<f64>]) -> ChainDiagnostics {
    let nan = ChainDiagnostics {
        r_hat: f64::NAN,
        ess_bulk: f64::NAN,
        ess_tail: f64::NAN,
    };
    let n = chains.first().map_or(0, Vec::len);
    if n < 4
        || chains
            .iter()
            .any(|c| c.len() != n || c.iter().any(|v| !v.is_finite()))
    {
        return nan;
    }
    let split = split_chains(chains);
    let all: Vec<f64> = split.iter().flatten().copied().collect();
    let median = quantile(&all, 0.5);
    let folded: Vec<Vec<f64>> = split
        .iter()
        .map(|c| c.iter().map(|v| (v - median).abs()).collect())
        .collect();
    let bulk = rank_normalised(&split);
    // ArviZ's R̂ needs two chains; its tail quantiles are of every draw (an odd chain's middle
    // one too), its folding median of the split chains'.
    let r_hat = match chains.len() {
        1 => f64::NAN,
        _ => r_hat(&bulk).max(r_hat(&rank_normalised(&folded))),
    };
    let every: Vec<f64> = chains.iter().flatten().copied().collect();
    let tail = [0.05, 0.95]
        .map(|p| {
            let q = quantile(&every, p);
            let indicator: Vec<Vec<f64>> = split
                .iter()
                .map(|c| c.iter().map(|&v| f64::from(u8::from(v <= q))).collect())
                .collect();
            ess(&indicator)
        })
        .into_iter()
        .fold(f64::INFINITY, f64::min);
    ChainDiagnostics {
        r_hat,
        ess_bulk: ess(&bulk),
        ess_tail: tail,
    }
}

/// The Monte-Carlo standard error of the `p`-quantile of `chains`' draws: the binomial error of
/// the fraction of draws below it, over the effective sample size of that indicator (split
/// chains), carried to the draws' scale by the quantiles at p ± that error. NaN where the
/// chains give no diagnostics.
pub fn quantile_error(chains: &[Vec<f64>], p: f64) -> f64 {
    let n = chains.first().map_or(0, Vec::len);
    if n < 4
        || chains
            .iter()
            .any(|c| c.len() != n || c.iter().any(|v| !v.is_finite()))
    {
        return f64::NAN;
    }
    let mut all: Vec<f64> = chains.iter().flatten().copied().collect();
    all.sort_by(f64::total_cmp);
    let q = quantile_of_sorted(&all, p);
    let indicator: Vec<Vec<f64>> = split_chains(chains)
        .iter()
        .map(|c| c.iter().map(|&v| f64::from(u8::from(v <= q))).collect())
        .collect();
    let se = (p * (1.0 - p) / ess(&indicator)).sqrt();
    if !se.is_finite() {
        return f64::NAN;
    }
    (quantile_of_sorted(&all, p + se) - quantile_of_sorted(&all, p - se)) / 2.0
}

/// Each chain cut into its first and second half (an odd draw in the middle left out).
fn split_chains(chains: &[Vec<f64>]) -> Vec<Vec<f64>> {
    let half = chains[0].len() / 2;
    let second = chains[0].len() - half;
    chains
        .iter()
        .flat_map(|c| [c[..half].to_vec(), c[second..].to_vec()])
        .collect()
}

/// The draws replaced by the normal quantiles of their fractional ranks over all chains,
/// Φ⁻¹((r − 3/8)/(S + 1/4)) with average ranks for ties (Blom's offset, as the paper).
fn rank_normalised(chains: &[Vec<f64>]) -> Vec<Vec<f64>> {
    let total: usize = chains.iter().map(Vec::len).sum();
    let mut order: Vec<(f64, usize, usize)> = chains
        .iter()
        .enumerate()
        .flat_map(|(c, chain)| chain.iter().enumerate().map(move |(i, &v)| (v, c, i)))
        .collect();
    order.sort_by(|a, b| a.0.total_cmp(&b.0));
    let normal = Normal::standard();
    let mut out: Vec<Vec<f64>> = chains.iter().map(|c| vec![0.0; c.len()]).collect();
    let mut start = 0;
    while start < order.len() {
        let mut end = start + 1;
        while end < order.len() && order[end].0 == order[start].0 {
            end += 1;
        }
        // Ranks start + 1 ..= end share their mean.
        let rank = (start + 1 + end) as f64 / 2.0;
        let z = normal.inverse_cdf((rank - 0.375) / (total as f64 + 0.25));
        for &(_, c, i) in &order[start..end] {
            out[c][i] = z;
        }
        start = end;
    }
    out
}

fn mean(values: &[f64]) -> f64 {
    values.iter().sum::<f64>() / values.len() as f64
}

/// Sample variance (divisor n − 1).
fn variance(values: &[f64]) -> f64 {
    let m = mean(values);
    values.iter().map(|v| (v - m) * (v - m)).sum::<f64>() / (values.len() - 1) as f64
}

/// The potential scale reduction of `chains`: √(var⁺/W), var⁺ the pooled variance estimate.
fn r_hat(chains: &[Vec<f64>]) -> f64 {
    let n = chains[0].len() as f64;
    let means: Vec<f64> = chains.iter().map(|c| mean(c)).collect();
    let between = n * variance(&means);
    let within = mean(&chains.iter().map(|c| variance(c)).collect::<Vec<_>>());
    let pooled = (n - 1.0) / n * within + between / n;
    (pooled / within).sqrt()
}

/// The autocovariance of `chain` at `lag` (divisor n, about the chain's mean).
fn autocovariance(chain: &[f64], chain_mean: f64, lag: usize) -> f64 {
    let n = chain.len();
    (0..n - lag)
        .map(|i| (chain[i] - chain_mean) * (chain[i + lag] - chain_mean))
        .sum::<f64>()
        / n as f64
}

/// The most products the autocovariances of one effective sample size may sum.
const MAX_AUTOCOVARIANCE_WORK: usize = 2_000_000_000;

/// The effective sample size of `chains` (Stan's estimator, as ArviZ indexes it:
/// autocorrelations combined over chains, summed in pairs while positive, made monotone as
/// Geyer's initial sequence).
fn ess(chains: &[Vec<f64>]) -> f64 {
    let (m, n) = (chains.len(), chains[0].len());
    let means: Vec<f64> = chains.iter().map(|c| mean(c)).collect();
    let acov = |lag: usize| -> f64 {
        chains
            .iter()
            .zip(&means)
            .map(|(c, &mu)| autocovariance(c, mu, lag))
            .sum::<f64>()
            / m as f64
    };
    let mean_var = acov(0) * n as f64 / (n - 1) as f64;
    let mut var_plus = mean_var * (n - 1) as f64 / n as f64;
    if m > 1 {
        var_plus += variance(&means);
    }
    if !(var_plus > 0.0) {
        return f64::NAN;
    }
    let rho = |lag: usize| 1.0 - (mean_var - acov(lag)) / var_plus;
    // Autocorrelations summed in (even, odd) pairs while a pair is positive (Geyer's initial
    // positive sequence), indexed as ArviZ's `_ess`.
    let mut rho_hat = vec![0.0; n];
    rho_hat[0] = 1.0;
    let (mut even, mut odd) = (1.0, rho(1));
    rho_hat[1] = odd;
    // Each lag costs a pass over every draw: a chain whose autocorrelation stays positive past
    // this many lags has no estimate here (NaN) rather than hours of summing.
    let max_lag = (MAX_AUTOCOVARIANCE_WORK / (m * n).max(1)).max(16);
    let mut t = 1;
    while t + 3 < n && even + odd > 0.0 {
        if t + 2 > max_lag {
            return f64::NAN;
        }
        even = rho(t + 1);
        odd = rho(t + 2);
        if even + odd >= 0.0 {
            rho_hat[t + 1] = even;
            rho_hat[t + 2] = odd;
        }
        t += 2;
    }
    // ArviZ's max_t is t − 2 (−1 where no pair was summed); `last` is max_t + 1.
    let last = t - 1;
    if even > 0.0 {
        rho_hat[last] = even;
    }
    // Geyer's initial monotone sequence: pair sums never increase.
    let mut t = 1;
    while t + 3 <= last {
        let previous = rho_hat[t - 1] + rho_hat[t];
        if rho_hat[t + 1] + rho_hat[t + 2] > previous {
            rho_hat[t + 1] = previous / 2.0;
            rho_hat[t + 2] = previous / 2.0;
        }
        t += 2;
    }
    if rho_hat.iter().any(|r| r.is_nan()) {
        return f64::NAN;
    }
    let total = (m * n) as f64;
    let tau =
        (-1.0 + 2.0 * rho_hat[..last].iter().sum::<f64>() + rho_hat[last]).max(1.0 / total.log10());
    total / tau
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An AR(1) chain x_t = φ x_{t−1} + ε: its effective sample size is n (1 − φ)/(1 + φ).
    fn ar1(phi: f64, n: usize, seed: u64) -> Vec<f64> {
        let mut rng = ns_compute::rng::ToyStream::new(seed, 7, 0);
        let mut x = 0.0;
        (0..n)
            .map(|_| {
                x = phi * x + rng.normal();
                x
            })
            .collect()
    }

    #[test]
    fn independent_chains_have_r_hat_one_and_ess_near_their_size() {
        let chains: Vec<Vec<f64>> = (0..4).map(|s| ar1(0.0, 2000, s)).collect();
        let d = diagnostics(&chains);
        assert!((d.r_hat - 1.0).abs() < 0.01, "{d:?}");
        assert!((d.ess_bulk / 8000.0 - 1.0).abs() < 0.1, "{d:?}");
        assert!((d.ess_tail / 8000.0 - 1.0).abs() < 0.2, "{d:?}");
    }

    #[test]
    fn autocorrelated_chains_have_the_ar1_ess() {
        let chains: Vec<Vec<f64>> = (0..4).map(|s| ar1(0.8, 5000, s)).collect();
        let d = diagnostics(&chains);
        let expected = 20000.0 * 0.2 / 1.8;
        assert!(
            (d.ess_bulk / expected - 1.0).abs() < 0.15,
            "{d:?} vs {expected}"
        );
        assert!(d.r_hat < 1.01, "{d:?}");
    }

    #[test]
    fn chains_in_different_places_have_a_large_r_hat() {
        let mut chains: Vec<Vec<f64>> = (0..4).map(|s| ar1(0.5, 1000, s)).collect();
        for v in &mut chains[3] {
            *v += 3.0;
        }
        assert!(diagnostics(&chains).r_hat > 1.1);
        // A constant chain has no diagnostics, rather than a number.
        assert!(
            diagnostics(&[vec![1.0; 10], vec![1.0; 10]])
                .ess_bulk
                .is_nan()
        );
    }

    #[test]
    fn quantiles_interpolate_as_numpy() {
        assert_eq!(quantile(&[3.0, 1.0, 2.0, 4.0], 0.5), 2.5);
        assert_eq!(quantile(&[1.0, 2.0, 3.0, 4.0, 5.0], 0.95), 4.8);
    }
}
