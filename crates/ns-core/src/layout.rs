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
    /// Range into `histosys`.
    pub histosys_start: u32,
    pub histosys_end: u32,
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

/// An additive histosys term on one sample; its per-bin differences start at `delta_start`
/// in `histosys_up` / `histosys_down` and run for the sample's `n_bins`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HistosysTerm {
    pub param: u32,
    pub delta_start: u32,
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
    pub histosys: Vec<HistosysTerm>,
    /// `hi − nominal` per histosys term and bin.
    pub histosys_up: Vec<f64>,
    /// `nominal − lo` per histosys term and bin.
    pub histosys_down: Vec<f64>,
    pub gaussian: Vec<GaussianConstraint>,
    pub poisson: Vec<PoissonConstraint>,
}

impl CompiledModel {
    /// Number of (sample, bin) entries.
    pub fn n_entries(&self) -> usize {
        self.nominal.len()
    }
}
