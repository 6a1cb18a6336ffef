//! Pre- and post-fit yields of every sample in every channel with the uncertainty of the total,
//! as cabinetry computes them (`model_utils.yield_stdev`): each parameter shifted by ± its
//! uncertainty, δᵢ the half-difference of the yields it gives, and var = Σᵢⱼ ρᵢⱼ δᵢ δⱼ — with the
//! fit's correlations post-fit, and the constraint widths (free parameters: none) without
//! correlations pre-fit.

use ns_compute::{ChannelYields, Likelihood};
use ns_core::{Error, Result};
use rayon::prelude::*;

use crate::fit::FitResult;

/// One channel's yields at one parameter point.
#[derive(Clone, Debug, PartialEq)]
pub struct ChannelTable {
    pub channel: String,
    pub samples: Vec<(String, Vec<f64>)>,
    /// The sum of the samples per bin, and its standard deviation.
    pub total: Vec<f64>,
    pub total_stdev: Vec<f64>,
    /// The channel's sum over bins, and its standard deviation.
    pub sum: f64,
    pub sum_stdev: f64,
}

/// Pre- and post-fit yields, channel by channel, with the observed data.
#[derive(Clone, Debug, PartialEq)]
pub struct FitYields {
    pub observed: Vec<Option<Vec<f64>>>,
    pub prefit: Vec<ChannelTable>,
    pub postfit: Vec<ChannelTable>,
}

/// The yields of a fit: pre-fit at the model's suggested init, post-fit at the best fit. Needs
/// the fit's uncertainties and correlations.
pub fn fit_yields(model: &dyn Likelihood, fit: &FitResult) -> Result<FitYields> {
    let (Some(sigmas), Some(correlation)) = (&fit.uncertainties, fit.correlation()) else {
        return Err(Error::InvalidModel(format!(
            "post-fit yields need the fit's uncertainties and correlations, which it has not ({})",
            fit.warning
                .clone()
                .unwrap_or_else(|| fit.termination.describe().to_string())
        )));
    };
    let init = model.suggested_init();
    let widths: Vec<f64> = (0..model.n_params())
        .map(|i| model.constraint(i).map_or(0.0, |(_, w)| w))
        .collect();
    let nominal = model.sample_yields(&fit.parameters)?;
    Ok(FitYields {
        observed: nominal.iter().map(|c| c.observed.clone()).collect(),
        prefit: tables(model, &init, &widths, None)?,
        postfit: tables(model, &fit.parameters, sigmas, Some(&correlation))?,
    })
}

/// Yields at `params` with the standard deviations from shifting each parameter by `sigmas`,
/// correlated by `correlation` (n×n, row-major; `None`: uncorrelated).
fn tables(
    model: &dyn Likelihood,
    params: &[f64],
    sigmas: &[f64],
    correlation: Option<&[f64]>,
) -> Result<Vec<ChannelTable>> {
    let n = model.n_params();
    let nominal = model.sample_yields(params)?;
    let totals = |yields: &[ChannelYields]| -> Vec<Vec<f64>> {
        yields
            .iter()
            .map(|c| {
                let bins = c.samples.first().map_or(0, |s| s.1.len());
                (0..bins)
                    .map(|b| c.samples.iter().map(|s| s.1[b]).sum())
                    .collect()
            })
            .collect()
    };
    // δᵢ per channel and bin (plus the channel sum as its last entry), for each shifted parameter.
    let shifted: Vec<usize> = (0..n).filter(|&i| sigmas[i] > 0.0).collect();
    let deltas: Vec<Vec<Vec<f64>>> = shifted
        .par_iter()
        .map(|&i| {
            let at = |sign: f64| {
                let mut p = params.to_vec();
                p[i] += sign * sigmas[i];
                model.sample_yields(&p).map(|y| totals(&y))
            };
            let (up, down) = (at(1.0)?, at(-1.0)?);
            Ok(up
                .iter()
                .zip(&down)
                .map(|(u, d)| {
                    let mut row: Vec<f64> = u.iter().zip(d).map(|(u, d)| (u - d) / 2.0).collect();
                    row.push(row.iter().sum());
                    row
                })
                .collect())
        })
        .collect::<Result<_>>()?;
    let rho = |a: usize, b: usize| match correlation {
        Some(c) => c[shifted[a] * n + shifted[b]],
        None => f64::from(a == b),
    };
    let stdev = |channel: usize, bin: usize| -> f64 {
        let mut var = 0.0;
        for a in 0..shifted.len() {
            let da = deltas[a][channel][bin];
            if da == 0.0 {
                continue;
            }
            for (b, db) in deltas.iter().enumerate() {
                var += rho(a, b) * da * db[channel][bin];
            }
        }
        var.max(0.0).sqrt()
    };
    let totals = totals(&nominal);
    Ok(nominal
        .into_iter()
        .zip(totals)
        .enumerate()
        .map(|(c, (yields, total))| {
            let bins = total.len();
            ChannelTable {
                channel: yields.channel,
                samples: yields.samples,
                total_stdev: (0..bins).map(|b| stdev(c, b)).collect(),
                sum: total.iter().sum(),
                sum_stdev: stdev(c, bins),
                total,
            }
        })
        .collect())
}
