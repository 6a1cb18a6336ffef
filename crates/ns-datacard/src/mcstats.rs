//! autoMCStats: which bins of a channel get which template-statistics parameters, as Combine
//! decides once from the nominal templates (`CMSHistErrorPropagator::setupBinPars`):
//! - a bin whose effective event count n = ⌊½ + (Σv)²/Σe²⌋ (over background processes, and
//!   signal ones with include-signal; v the yield, e its template error, both at the initial
//!   normalisation) exceeds the threshold gets one Gaussian parameter `prop_bin<ch>_bin<j>` for
//!   the summed error of every process;
//! - otherwise each process with an error gets its own `prop_bin<ch>_bin<j>_<proc>`: a
//!   Poisson-constrained factor x/n_p where its own count n_p = ⌊½ + v²/e²⌋ (v ≥ 0.999 e) is at
//!   most the threshold, an additive Gaussian term where it is larger or e > v.
//!
//! The terms themselves are the engine's [`ns_core::layout::BinStat`].

use ns_core::model::Constraint;
use ns_core::{Error, Result};
use statrs::function::gamma::{gamma_lr, gamma_ur, ln_gamma};

use crate::Datacard;
use crate::model::{Parameter, Shaped};

/// The range of every autoMCStats Gaussian parameter.
pub(crate) const GAUSSIAN_BOUNDS: (f64, f64) = (-7.0, 7.0);
/// The tail, in Gaussian σ, outside a Poisson parameter's range.
const POISSON_RANGE_SIGMA: f64 = 7.0;

/// A statistical term by column and bin of its channel, before the model's entries exist.
pub(crate) enum StatSpec {
    /// θ·√(Σ (F σ)²) over the listed (column, σ) in bin `bin` of channel `channel`; a bin's
    /// own parameter is set analytically in fits (`analytic`), as Combine sets it.
    Gaussian {
        channel: usize,
        bin: usize,
        param: u32,
        columns: Vec<(usize, f64)>,
        analytic: bool,
    },
    /// Column `column`'s yield in bin `bin` times x/count.
    Poisson {
        column: usize,
        bin: usize,
        param: u32,
        count: f64,
    },
}

/// The statistical parameters of every autoMCStats channel, added to `parameters`.
/// `initial_factor[c]` is what multiplies column c's yields at the initial point.
pub(crate) fn bin_parameters(
    card: &Datacard,
    columns: &[Shaped],
    initial_factor: &[f64],
    parameters: &mut Vec<Parameter>,
) -> Result<Vec<StatSpec>> {
    let mut specs = Vec::new();
    for (channel, name) in card.bins.iter().enumerate() {
        let Some(flags) = card.auto_mc_stats.get(name) else {
            continue;
        };
        let members: Vec<usize> = (0..card.columns.len())
            .filter(|&c| &card.columns[c].bin == name)
            .collect();
        let n_bins = members.first().map_or(0, |&c| columns[c].nominal.len());
        for j in 0..n_bins {
            let yield_of = |c: usize| initial_factor[c] * columns[c].yield_at(j);
            let error_of = |c: usize| initial_factor[c] * columns[c].errors[j];
            let counted = members
                .iter()
                .filter(|&&c| flags.include_signal || !card.columns[c].signal);
            let sum: f64 = counted.clone().map(|&c| yield_of(c)).sum();
            let error2: f64 = counted.map(|&c| error_of(c).powi(2)).sum();
            if !(error2 > 0.0) {
                continue;
            }
            let events = (0.5 + sum * sum / error2).floor();
            let bin_name = format!("prop_bin{name}_bin{j}");
            if events > flags.threshold {
                let with_error: Vec<(usize, f64)> = members
                    .iter()
                    .map(|&c| (c, columns[c].errors[j]))
                    .filter(|&(_, e)| e > 0.0)
                    .collect();
                // Combine holds it constant in its fits and sets it at every step
                // (`runBarlowBeeston`): suggested fixed here, set by the fitter.
                let mut parameter = gaussian(&bin_name);
                parameter.fixed = true;
                let param = push(parameters, parameter);
                specs.push(StatSpec::Gaussian {
                    channel,
                    bin: j,
                    param,
                    columns: with_error,
                    analytic: true,
                });
                continue;
            }
            for &c in &members {
                let (v, e) = (columns[c].yield_at(j), columns[c].errors[j]);
                if !(e > 0.0) || v < 0.0 {
                    continue;
                }
                let name = format!("{bin_name}_{}", card.columns[c].process);
                let own_events = (0.5 + v * v / (e * e)).floor();
                if v > 0.0 && v >= 0.999 * e && own_events <= flags.threshold {
                    let param = push(parameters, poisson(&name, own_events)?);
                    specs.push(StatSpec::Poisson {
                        column: c,
                        bin: j,
                        param,
                        count: own_events,
                    });
                } else {
                    let param = push(parameters, gaussian(&name));
                    specs.push(StatSpec::Gaussian {
                        channel,
                        bin: j,
                        param,
                        columns: vec![(c, e)],
                        analytic: false,
                    });
                }
            }
        }
    }
    Ok(specs)
}

fn push(parameters: &mut Vec<Parameter>, parameter: Parameter) -> u32 {
    parameters.push(parameter);
    (parameters.len() - 1) as u32
}

/// θ ∈ [−7, 7], N(0, 1).
fn gaussian(name: &str) -> Parameter {
    let mut p = Parameter::free(name, "autoMCStats", 0.0, GAUSSIAN_BOUNDS);
    p.constraint = Constraint::Gaussian;
    p.sigma = 1.0;
    p
}

/// x starting at n, Poisson-constrained to n, in the central interval of Poisson rates that
/// leaves 7σ outside on each side: ½χ²-quantiles of 2n and 2n + 2 degrees of freedom, Gamma
/// quantiles of shape n and n + 1.
fn poisson(name: &str, count: f64) -> Result<Parameter> {
    let tail = 0.5 * libm::erfc(POISSON_RANGE_SIGMA / std::f64::consts::SQRT_2);
    let low = gamma_tail_quantile(count, tail, false);
    let high = gamma_tail_quantile(count + 1.0, tail, true);
    if !(low.is_finite() && high.is_finite() && low < count && count < high) {
        return Err(Error::InvalidModel(format!(
            "'{name}': no Poisson range around {count} events ({low}, {high})"
        )));
    }
    let mut p = Parameter::free(name, "autoMCStats", count, (low, high));
    p.constraint = Constraint::Poisson;
    p.aux = count;
    Ok(p)
}

/// The x where a Gamma(shape, 1) distribution leaves `tail` below it (or above it, `upper`):
/// Newton's method on ln of the tail in ln x, from the tail's leading term (lower) or the
/// Wilson–Hilferty approximation (upper), kept inside a bracket that halves where a step
/// leaves it.
fn gamma_tail_quantile(shape: f64, tail: f64, upper: bool) -> f64 {
    let ln_tail = |x: f64| {
        if upper {
            gamma_ur(shape, x).ln()
        } else {
            gamma_lr(shape, x).ln()
        }
    };
    // d ln(tail)/d ln x = ±x·density/tail.
    let slope = |x: f64, ln_t: f64| {
        let ln_density = (shape - 1.0) * x.ln() - x - ln_gamma(shape);
        let s = (x.ln() + ln_density - ln_t).exp();
        if upper { -s } else { s }
    };
    let mut x = if upper {
        let z = POISSON_RANGE_SIGMA;
        shape * (1.0 - 1.0 / (9.0 * shape) + z / (3.0 * shape.sqrt())).powi(3)
    } else {
        ((tail.ln() + ln_gamma(shape + 1.0)) / shape).exp()
    };
    let (mut below, mut above) = (0.0f64, f64::INFINITY);
    for _ in 0..200 {
        let ln_t = ln_tail(x);
        let miss = ln_t - tail.ln();
        // The tail grows with x below the quantile (lower) or above it (upper).
        if (miss < 0.0) != upper {
            below = x;
        } else {
            above = x;
        }
        let step = miss / slope(x, ln_t);
        let mut next = x * (-step).exp();
        if !(next > below && next < above) {
            next = if above.is_finite() {
                0.5 * (below + above)
            } else {
                2.0 * x
            };
        }
        if (next - x).abs() <= 1e-15 * x {
            return next;
        }
        x = next;
    }
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Combine's ranges of the Poisson parameters of own_shape_mcstats10 (reference.json),
    /// which ROOT's χ² quantiles give to 1e-4 this far in the tail; for one event the bounds
    /// are known in closed form: 1 − e^−x = tail, and e^−x (1 + x) = tail.
    #[test]
    fn poisson_ranges_are_combines_chi_squared_quantiles() {
        for (count, low, high) in [
            (1.0, 1.279963920484024e-12, 30.845151575602564),
            (2.0, 1.599999819762281e-06, 33.790641974869814),
            (8.0, 0.12447815921458405, 47.9126512073931),
        ] {
            let p = poisson("x", count).unwrap();
            assert!(
                (p.bounds.0 - low).abs() <= 2e-4 * low,
                "{count}: {:?}",
                p.bounds
            );
            assert!(
                (p.bounds.1 - high).abs() <= 2e-4 * high,
                "{count}: {:?}",
                p.bounds
            );
        }
        let tail = 0.5 * libm::erfc(POISSON_RANGE_SIGMA / std::f64::consts::SQRT_2);
        let (low, high) = poisson("x", 1.0).unwrap().bounds;
        assert!(((-low).exp_m1() + tail).abs() <= 1e-12 * tail, "{low}");
        assert!(
            ((-high).exp() * (1.0 + high) - tail).abs() <= 1e-12 * tail,
            "{high}"
        );
    }
}
