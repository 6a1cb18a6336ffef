//! The compiled model: a HistFactory model lowered once into flat arrays.
//!
//! Every evaluator (CPU f64, CUDA f64, wgpu f32) reads this one layout, so a disagreement
//! between backends is a kernel bug, never a modelling difference. The arrays are plain
//! `#[repr(C)]` records of `u32`/`f64` so that they can be uploaded to a device unchanged.
//!
//! The expected yield of main bin `b` is `Σ_s ν_{s,b}` over the sample blocks that cover it, with
//!
//! ```text
//! ν_{s,b} = (nominal_{s,b} + Σ_histosys Δ(α)) · Π_scalar f(θ) · Π_entry θ
//! ```
//!
//! where scalar factors act on a whole sample (normfactor, lumi: `f = θ`; normsys: `f = I(α)`)
//! and entry factors act on one bin of one sample (staterror, shapesys, shapefactor).

use crate::interp::{InterpCodes, NormsysTerm};

/// One sample in one channel: a contiguous run of entries (one entry per bin).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SampleBlock {
    /// First global main bin covered by the sample.
    pub bin_start: u32,
    /// Number of bins (entries) of the sample.
    pub n_bins: u32,
    /// First entry index (into `nominal`, `entry_factor_start`).
    pub entry_start: u32,
    /// Range into `scalar_factors`.
    pub scalar_start: u32,
    pub scalar_end: u32,
    /// Range into `histosys_param` (the block's histosys terms).
    pub histosys_start: u32,
    pub histosys_end: u32,
    /// Start of the block's histosys differences in `histosys_delta`.
    pub histosys_delta_start: u32,
}

/// A factor multiplying every bin of a sample.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ScalarFactor {
    pub param: u32,
    /// Index into `normsys`, or `u32::MAX` for a linear factor (normfactor, lumi: `f = θ`).
    pub normsys: u32,
}

impl ScalarFactor {
    pub const LINEAR: u32 = u32::MAX;
}

/// Gaussian constraint `N(aux | θ, σ)`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GaussianConstraint {
    pub param: u32,
    pub aux_index: u32,
    pub sigma: f64,
}

/// Poisson constraint `Pois(aux | γ·τ)` (shapesys).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PoissonConstraint {
    pub param: u32,
    pub aux_index: u32,
    pub tau: f64,
}

/// The normalisation of a Gaussian constraint over a bounded range of its auxiliary datum:
/// `ln(Φ((high − θ)/σ) − Φ((low − θ)/σ))` joins the NLL (RooFit's truncated Gaussian, which ROOT
/// builds for widths above a fifth of the range its mean keeps from the bounds).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GaussianRange {
    pub param: u32,
    pub sigma: f64,
    pub low: f64,
    pub high: f64,
}

impl GaussianRange {
    /// The term `ln N(θ)` and its first two derivatives in θ.
    pub fn log_norm(&self, theta: f64) -> (f64, f64, f64) {
        let (a, b) = (
            (self.low - theta) / self.sigma,
            (self.high - theta) / self.sigma,
        );
        // 1/√(2π), as the CUDA twin (kernels/nll_grad.cu, ns_range_log_norm) writes it.
        let density = |x: f64| (-0.5 * x * x).exp() * 0.398_942_280_401_432_7;
        // Φ(b) − Φ(a) as a difference of upper tails, exact where both are small.
        let tail = |x: f64| 0.5 * libm::erfc(x / std::f64::consts::SQRT_2);
        let norm = tail(a) - tail(b);
        let (fa, fb) = (density(a), density(b));
        let slope = (fa - fb) / (self.sigma * norm);
        let second = (a * fa - b * fb) / (self.sigma * self.sigma * norm);
        (norm.ln(), slope, second - slope * slope)
    }
}

/// How the OverallSys interpolations of a normsys parameter θ read it, where ROOT's
/// ConstraintTerms transform it (its constraint stays on θ).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum NormsysTransform {
    /// LogNormal: α' = τ(κ^θ − 1), with τ = 1/rel and κ = 1 + rel.
    LogNormal { tau: f64, kappa: f64 },
    /// Gamma: θ is ROOT's β, read as α' = scale·(θ − 1), with scale = 1/rel.
    Linear { scale: f64 },
    /// α' = ln θ: a normsys term with ln hi = p = −ln lo is then the power θ^p (a factor of a
    /// product formula, as Combine's `@0*@1/@2`).
    Log,
    /// α' = ln(1 + slope·θ): a normsys term with ln hi = 1 = −ln lo is then the affine factor
    /// 1 + slope·θ (Combine's `trG`). Where that factor falls below [`AFFINE_FLOOR`] (at the
    /// edge of θ's range) it is held there, with no slope.
    Affine { slope: f64 },
}

/// The least factor [`NormsysTransform::Affine`] gives: keeps its logarithm and derivatives
/// finite at the edge of the range where 1 + slope·θ reaches zero.
pub const AFFINE_FLOOR: f64 = 1e-12;

/// A normsys parameter read through a [`NormsysTransform`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NormsysInput {
    pub param: u32,
    pub transform: NormsysTransform,
}

impl NormsysInput {
    /// α' and its first two derivatives in θ.
    pub fn apply(&self, theta: f64) -> (f64, f64, f64) {
        match self.transform {
            NormsysTransform::LogNormal { tau, kappa } => {
                let (power, ln_kappa) = (kappa.powf(theta), kappa.ln());
                let slope = tau * power * ln_kappa;
                (tau * (power - 1.0), slope, slope * ln_kappa)
            }
            NormsysTransform::Linear { scale } => (scale * (theta - 1.0), scale, 0.0),
            NormsysTransform::Log => (theta.ln(), 1.0 / theta, -1.0 / (theta * theta)),
            NormsysTransform::Affine { slope } => {
                let factor = 1.0 + slope * theta;
                if factor < AFFINE_FLOOR {
                    return (AFFINE_FLOOR.ln(), 0.0, 0.0);
                }
                let d = slope / factor;
                (factor.ln(), d, -d * d)
            }
        }
    }
}

/// Gauss–Legendre nodes and weights of 8 points on [−1, 1]: the rule of
/// [`PoissonRange::log_norm`], panel by panel (the CUDA kernels read the same numbers).
pub const GAUSS_LEGENDRE_8: [(f64, f64); 8] = [
    (-0.960_289_856_497_536_3, 0.101_228_536_290_376_26),
    (-0.796_666_477_413_626_7, 0.222_381_034_453_374_48),
    (-0.525_532_409_916_329, 0.313_706_645_877_887_27),
    (-0.183_434_642_495_649_8, 0.362_683_783_378_362),
    (0.183_434_642_495_649_8, 0.362_683_783_378_362),
    (0.525_532_409_916_329, 0.313_706_645_877_887_27),
    (0.796_666_477_413_626_7, 0.222_381_034_453_374_48),
    (0.960_289_856_497_536_3, 0.101_228_536_290_376_26),
];

/// Panels of the quadrature of [`PoissonRange::log_norm`]: 320 nodes over the range, exact to
/// rounding for rates down to e^−20.
pub const POISSON_RANGE_PANELS: usize = 40;

/// The normalisation of a Poisson constraint `Pois(y | θτ)` read as a density of a continuous
/// auxiliary datum y over [0, high] (ROOT's Gamma ConstraintTerm: a RooGamma in β normalised
/// over its global observable's range): `ln ∫₀^high e^−λ λ^t / Γ(t + 1) dt` with λ = θτ joins
/// the NLL.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PoissonRange {
    pub param: u32,
    pub tau: f64,
    pub high: f64,
}

impl PoissonRange {
    /// The term `ln N(θ)` and its first two derivatives in θ.
    ///
    /// With L = ln λ and the density p(t) ∝ e^{tL − ln Γ(t+1)} on [0, high]:
    /// ln N = −λ + ln ∫ e^{tL − ln Γ(t+1)} dt, d/dθ = (E[t] − λ)/θ, d²/dθ² = (Var[t] − E[t])/θ².
    pub fn log_norm(&self, theta: f64) -> (f64, f64, f64) {
        // A rate of zero is the limit of the smallest positive one (θ stays in [0, high]).
        let lambda = (theta * self.tau).max(f64::MIN_POSITIVE);
        let theta = lambda / self.tau;
        let log_rate = lambda.ln();
        let half = 0.5 * self.high / POISSON_RANGE_PANELS as f64;
        let mut exponents = [0.0; POISSON_RANGE_PANELS * 8];
        let mut max = f64::NEG_INFINITY;
        for (k, e) in exponents.iter_mut().enumerate() {
            let t = half * (2 * (k / 8) + 1) as f64 + half * GAUSS_LEGENDRE_8[k % 8].0;
            *e = t * log_rate - libm::lgamma(t + 1.0);
            max = max.max(*e);
        }
        let (mut s0, mut s1, mut s2) = (0.0, 0.0, 0.0);
        for (k, e) in exponents.iter().enumerate() {
            let t = half * (2 * (k / 8) + 1) as f64 + half * GAUSS_LEGENDRE_8[k % 8].0;
            let w = GAUSS_LEGENDRE_8[k % 8].1 * (e - max).exp();
            s0 += w;
            s1 += w * t;
            s2 += w * t * t;
        }
        let (mean, second) = (s1 / s0, s2 / s0);
        let variance = second - mean * mean;
        (
            -lambda + max + (half * s0).ln(),
            (mean - lambda) / theta,
            (variance - mean) / (theta * theta),
        )
    }
}

/// A sample block whose morphed yields are floored (CMS Combine's templates): each bin's
/// nominal-plus-histosys yield f_b is raised to at least `floor`. Where `renormalise_to` gives a
/// total T (`FastVerticalInterpHistPdf2`, channels without autoMCStats) the block's yields are
/// then f_b · T / Σ f; otherwise (`CMSHistFunc`) they are the floored f_b.
///
/// `logarithmic` (Combine's `shapeN`, `CMSHistFunc`'s LogQuadLinear): the nominal and its
/// histosys terms are logarithms of yields; the block's yields are e^f_b · T / Σ e^f, then
/// raised to the floor (T is given: the nominal's Σ e^f).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FlooredBlock {
    pub block: u32,
    /// The block's first `active_bins` bins are its template; the rest pad a narrower channel
    /// to the card's widest template (Combine's shared `CMS_th1x`) and stay zero, outside the
    /// floor and the normalisation.
    pub active_bins: u32,
    pub floor: f64,
    pub renormalise_to: Option<f64>,
    pub logarithmic: bool,
}

/// CMS Combine's autoMCStats (Barlow–Beeston-lite, `CMSHistErrorPropagator`): the template
/// statistics of one main bin, as a parameter for the bin or for one process in it. F_e below is
/// what multiplies entry e's base yield (its sample's scalar factors times its entry factors).
#[derive(Clone, Debug, PartialEq)]
pub enum BinStat {
    /// ν_bin += θ·√(Σ_e (F_e σ_e)²) over the listed (entry, σ_e): one Gaussian parameter for the
    /// bin's summed template error, or for one process's where one entry is listed. Where
    /// `analytic` gives θ's range, fits set θ to its minimum given the other parameters at
    /// every step, within that range, instead of minimising over it (Combine's analytic
    /// Barlow–Beeston, `CMSHistErrorPropagator::runBarlowBeeston`); θ needs a Gaussian
    /// constraint of width 1, and no other term in its bin.
    Gaussian {
        bin: u32,
        param: u32,
        entries: Vec<(u32, f64)>,
        analytic: Option<(f64, f64)>,
    },
    /// Entry e's yield times x/n: the process's effective count n in the bin, x
    /// Poisson-constrained to n.
    Poisson { entry: u32, param: u32, count: f64 },
}

impl BinStat {
    /// Combine's floor of a bin's total after its statistical terms (`CropUnderflows`).
    pub const FLOOR: f64 = 1e-9;

    /// The term's parameter.
    pub fn param(&self) -> u32 {
        match self {
            BinStat::Gaussian { param, .. } | BinStat::Poisson { param, .. } => *param,
        }
    }

    /// The main bin the term adds to in `model` (a Poisson term's: its entry's).
    pub fn main_bin(&self, model: &CompiledModel) -> u32 {
        match self {
            BinStat::Gaussian { bin, .. } => *bin,
            BinStat::Poisson { entry, .. } => {
                let block = model
                    .samples
                    .partition_point(|b| b.entry_start + b.n_bins <= *entry);
                let sample = &model.samples[block];
                sample.bin_start + (entry - sample.entry_start)
            }
        }
    }

    /// Where fits set the term's parameter analytically: its range, and the auxiliary index of
    /// its Gaussian constraint's global observable.
    pub fn analytic(&self, model: &CompiledModel) -> Option<((f64, f64), u32)> {
        let BinStat::Gaussian {
            param,
            analytic: Some(range),
            ..
        } = self
        else {
            return None;
        };
        model
            .gaussian
            .iter()
            .find(|c| c.param == *param)
            .map(|c| (*range, c.aux_index))
    }
}

/// A Gaussian constraint of another width below its global observable (CMS Combine's
/// asymmetric `param`, a `RooBifurGauss`): `constraint` indexes the parameter's
/// [`GaussianConstraint`], whose σ is the width above; below, the term is ½((θ − aux)/σ_low)².
/// Normalised as a density: ln(√(2π)·(σ_low + σ)/2).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LowSideWidth {
    pub constraint: u32,
    pub sigma_low: f64,
}

impl LowSideWidth {
    /// What the low side adds to ½((θ − aux)/σ)² and its derivative in θ: below aux,
    /// ½(θ − aux)²(1/σ_low² − 1/σ²); nothing above.
    pub fn correction(&self, theta: f64, aux: f64, sigma: f64) -> (f64, f64) {
        let d = theta - aux;
        if d >= 0.0 {
            return (0.0, 0.0);
        }
        let k = 1.0 / (self.sigma_low * self.sigma_low) - 1.0 / (sigma * sigma);
        (0.5 * d * d * k, d * k)
    }
}

/// The flat, backend-independent form of a HistFactory model.
#[derive(Clone, Debug, PartialEq)]
pub struct CompiledModel {
    pub n_params: usize,
    pub n_main: usize,
    pub n_aux: usize,
    pub codes: InterpCodes,
    pub samples: Vec<SampleBlock>,
    /// Nominal yield per entry.
    pub nominal: Vec<f64>,
    /// CSR offsets (length `n_entries + 1`) into `entry_factor_param`.
    pub entry_factor_start: Vec<u32>,
    pub entry_factor_param: Vec<u32>,
    pub scalar_factors: Vec<ScalarFactor>,
    pub normsys: Vec<NormsysTerm>,
    /// The α parameter of each histosys term, grouped by sample block.
    pub histosys_param: Vec<u32>,
    /// Histosys differences, bin-major within a block: for bin i of a block with H terms,
    /// `[up_0, down_0, up_1, down_1, …, up_{H−1}, down_{H−1}]` with `up = hi − nominal` and
    /// `down = nominal − lo`. Bin-major rows make the per-bin sum a contiguous dot product.
    pub histosys_delta: Vec<f64>,
    pub gaussian: Vec<GaussianConstraint>,
    pub poisson: Vec<PoissonConstraint>,
    /// Normalisations of Gaussian constraints over bounded ranges (ROOT's semantics).
    pub gaussian_ranges: Vec<GaussianRange>,
    /// Normsys parameters read through a transform (ROOT's LogNormal and Gamma
    /// ConstraintTerms), at most one per parameter.
    pub normsys_inputs: Vec<NormsysInput>,
    /// Normalisations of Poisson constraints over a bounded range of their continuous
    /// auxiliary datum (ROOT's Gamma ConstraintTerm).
    pub poisson_ranges: Vec<PoissonRange>,
    /// Blocks whose morphed yields are floored, and renormalised where asked (CMS Combine's
    /// template morphing).
    pub floored_blocks: Vec<FlooredBlock>,
    /// Template statistics per main bin (CMS Combine's autoMCStats); a bin with terms has its
    /// total floored at [`BinStat::FLOOR`].
    pub bin_stats: Vec<BinStat>,
    /// Gaussian constraints with another width below their global observable (CMS Combine's
    /// asymmetric `param`).
    pub low_side_widths: Vec<LowSideWidth>,
    /// Each sample's yield in a bin (nominal plus histosys) is clipped at zero, as ROOT's
    /// positive-definite interpolation does; at zero its derivatives are those of the clipped
    /// side.
    pub clip_sample_yields: bool,
}

impl CompiledModel {
    /// Number of (sample, bin) entries.
    pub fn n_entries(&self) -> usize {
        self.nominal.len()
    }

    /// The parameters that fits set analytically ([`BinStat::Gaussian`]'s `analytic`), in term
    /// order.
    pub fn analytic_parameters(&self) -> Vec<usize> {
        self.bin_stats
            .iter()
            .filter_map(|s| match s {
                BinStat::Gaussian {
                    param,
                    analytic: Some(_),
                    ..
                } => Some(*param as usize),
                _ => None,
            })
            .collect()
    }

    /// The parameters of entry `entry`'s per-bin factors (staterror, shapesys, shapefactor).
    pub fn entry_factor_params(&self, entry: usize) -> &[u32] {
        &self.entry_factor_param
            [self.entry_factor_start[entry] as usize..self.entry_factor_start[entry + 1] as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ln ∫₀^high e^−λ λ^t / Γ(t+1) dt by the composite Simpson rule on 200,000 intervals.
    fn simpson_log_norm(lambda: f64, high: f64) -> f64 {
        let n = 200_000;
        let h = high / n as f64;
        let f = |t: f64| (-lambda + t * lambda.ln() - libm::lgamma(t + 1.0)).exp();
        let mut sum = f(0.0) + f(high);
        for i in 1..n {
            sum += f(i as f64 * h) * if i % 2 == 1 { 4.0 } else { 2.0 };
        }
        (sum * h / 3.0).ln()
    }

    /// The two-sided Gaussian (Combine's RooBifurGauss) with its correction: ½((θ−μ)/σ_side)²,
    /// its slope continuous at μ, its derivative the derivative of its value.
    #[test]
    fn a_low_side_width_makes_the_bifurcated_gaussian() {
        let (mu, sigma, sigma_low) = (1.2, 0.2, 0.1);
        let w = LowSideWidth {
            constraint: 0,
            sigma_low,
        };
        let total = |t: f64| 0.5 * ((t - mu) / sigma).powi(2) + w.correction(t, mu, sigma).0;
        for t in [0.8, 1.0, 1.19, 1.2, 1.3, 2.0] {
            let side = if t < mu { sigma_low } else { sigma };
            let want = 0.5 * ((t - mu) / side).powi(2);
            assert!(
                (total(t) - want).abs() < 1e-14,
                "{t}: {} vs {want}",
                total(t)
            );
            let h = 1e-6;
            let fd =
                (w.correction(t + h, mu, sigma).0 - w.correction(t - h, mu, sigma).0) / (2.0 * h);
            // Central differences straddle the kink of the second derivative at μ: error h·k/4.
            assert!((fd - w.correction(t, mu, sigma).1).abs() < 1e-4, "{t}");
        }
        assert_eq!(w.correction(mu, mu, sigma), (0.0, 0.0));
    }

    #[test]
    fn poisson_range_normalisation_and_its_derivatives_are_exact() {
        // ROOT's Gamma ConstraintTerms of the shared sets: rel 0.3 (τ = 11.1) and 0.5 (τ = 4).
        for tau in [1.0 / (0.3f64 * 0.3), 4.0] {
            let range = PoissonRange {
                param: 0,
                tau,
                high: 10.0,
            };
            for theta in [1e-6, 0.05, 0.5, 1.0, 2.23, 6.0, 10.0] {
                let (value, slope, curvature) = range.log_norm(theta);
                let want = simpson_log_norm(theta * tau, 10.0);
                assert!(
                    (value - want).abs() < 1e-10 * want.abs().max(1.0),
                    "τ {tau} θ {theta}: {value} vs {want}"
                );
                let h = 1e-5 * theta;
                let (up, down) = (range.log_norm(theta + h), range.log_norm(theta - h));
                let fd_slope = (up.0 - down.0) / (2.0 * h);
                let fd_curvature = (up.1 - down.1) / (2.0 * h);
                assert!(
                    (slope - fd_slope).abs() < 1e-6 * slope.abs().max(1.0),
                    "τ {tau} θ {theta}: slope {slope} vs {fd_slope}"
                );
                assert!(
                    (curvature - fd_curvature).abs() < 1e-5 * curvature.abs().max(1.0),
                    "τ {tau} θ {theta}: curvature {curvature} vs {fd_curvature}"
                );
            }
        }
    }
}
