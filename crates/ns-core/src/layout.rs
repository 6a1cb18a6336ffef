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

/// A normsys parameter read through ROOT's LogNormal ConstraintTerm: its OverallSys
/// interpolations take α' = τ(κ^θ − 1) of the parameter θ (τ = 1/rel, κ = 1 + rel); its
/// Gaussian constraint stays on θ.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NormsysInput {
    pub param: u32,
    pub tau: f64,
    pub kappa: f64,
}

impl NormsysInput {
    /// α' and its first two derivatives in θ.
    pub fn apply(&self, theta: f64) -> (f64, f64, f64) {
        let (power, ln_kappa) = (self.kappa.powf(theta), self.kappa.ln());
        let slope = self.tau * power * ln_kappa;
        (self.tau * (power - 1.0), slope, slope * ln_kappa)
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
    /// Normsys parameters read through a transform (ROOT's LogNormal ConstraintTerm), at most
    /// one per parameter.
    pub normsys_inputs: Vec<NormsysInput>,
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

    /// The parameters of entry `entry`'s per-bin factors (staterror, shapesys, shapefactor).
    pub fn entry_factor_params(&self, entry: usize) -> &[u32] {
        &self.entry_factor_param
            [self.entry_factor_start[entry] as usize..self.entry_factor_start[entry + 1] as usize]
    }
}
