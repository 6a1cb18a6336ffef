//! What the WGSL shaders share with Rust, defined once here: the `Meta` uniform (every packed
//! array's offset and the model's counts) and the constants. [`header`] writes them as the WGSL
//! prepended to the shader sources, so a field added on one side only cannot compile.

use ns_core::layout::ScalarFactor;
use ns_core::optim::{
    FLAT_ITERATIONS, HZ_DELTA, MAX_LINE_SEARCH_EVALUATIONS, SLOPE_WINDOW_PER_NOISE, Termination,
    WOLFE_C1, WOLFE_C2,
};

use crate::layout::{
    BLOCK_WORDS, FLOOR_WORDS, NORMSYS_INPUT_WORDS, NORMSYS_WORDS, STAT_SCRATCH_WORDS, STAT_WORDS,
};

/// Threads per workgroup of `nll_grad` (a power of 2: its reductions are trees).
pub(crate) const THREADS: u32 = 128;

/// A `#[repr(C)]` struct of u32 fields and its WGSL definition from one field list.
macro_rules! wgsl_struct {
    ($(#[$meta:meta])* struct $name:ident { $($(#[$fmeta:meta])* $field:ident,)* }) => {
        $(#[$meta])*
        #[repr(C)]
        #[derive(Clone, Copy, Debug, Default, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
        pub(crate) struct $name {
            $($(#[$fmeta])* pub(crate) $field: u32,)*
        }

        impl $name {
            /// The WGSL definition, fields in the same order.
            pub(crate) fn wgsl_definition() -> String {
                let mut w = format!("struct {} {{\n", stringify!($name));
                $(w.push_str(&format!("    {}: u32,\n", stringify!($field)));)*
                w.push_str("}\n");
                w
            }
        }
    };
}

wgsl_struct! {
    /// The uniform of `nll_grad`: counts, then offsets into the packed u32 array (`ints`), then
    /// into the packed f32 array (`reals`). A multiple of 16 bytes, as uniforms must be.
    struct Meta {
        n_params,
        n_main,
        n_aux,
        n_blocks,
        n_entries,
        n_scalar,
        n_histosys,
        n_entry_factors,
        n_gauss,
        n_pois,
        /// 1 or 4.
        normsys_code,
        /// 0, 2 or 4 (code4p).
        histosys_code,
        /// Evaluations of this dispatch.
        n_eval,
        /// f32 values of scratch per workgroup.
        scratch_stride,
        blocks,
        entry_factor_start,
        entry_factor_param,
        entry_block,
        scalar_param,
        scalar_normsys,
        histosys_param,
        histosys_block,
        bin_entry_start,
        bin_entries,
        gauss_param,
        gauss_aux,
        pois_param,
        pois_aux,
        param_slot_start,
        param_slots,
        nominal,
        normsys,
        histosys_delta,
        gauss_sigma,
        pois_tau,
        /// External signal yields (`crate::signal`; 0: none): their count, the staterror links,
        /// whether the NLL gains ln(σ/σ_model) of each linked width, and the offsets of their
        /// layout (`crate::layout::SignalLayout`) in `ints` and `reals`.
        n_signal,
        n_links,
        width_terms,
        entry_signal,
        signal_entry,
        gauss_link,
        link_gauss,
        link_member_start,
        link_members,
        signal_link_start,
        signal_links,
        templates,
        link_absolute,
        link_fixed,
        /// CMS Combine's and ROOT's terms (`crate::layout::KernelLayout`; each array empty and
        /// its flag or count 0 where the model has none): ROOT's clipped sample yields, the
        /// parameters' normsys inputs, two-sided Gaussian widths, floored blocks, statistical
        /// terms, and whether the NLL is profiled over the analytic parameters.
        clip_sample_yields,
        has_normsys_input,
        has_gauss_sigma_low,
        n_floored,
        n_stats,
        profile_analytic,
        floor_block,
        stat_bin_start,
        stat_terms,
        stat_param,
        stat_aux,
        stat_entry_start,
        stat_entries,
        param_analytic,
        normsys_input,
        gauss_sigma_low,
        floor_values,
        stat_values,
        stat_sigma,
    }
}

const _: () = assert!(std::mem::size_of::<Meta>().is_multiple_of(16));

wgsl_struct! {
    /// The device optimizer's launch (fit.wgsl): where the fits' states and outputs lie in the
    /// scratch buffer (offsets in f32 words), the correction pairs kept, evaluations per launch,
    /// the limits, and the tolerance and objective noise as f32 bits.
    struct FitMeta {
        state0,
        state_stride,
        out0,
        memory,
        evals_per_launch,
        max_iterations,
        max_evaluations,
        pg_tol,
        noise,
        pad0,
        pad1,
        pad2,
    }
}

const _: () = assert!(std::mem::size_of::<FitMeta>().is_multiple_of(16));

/// Words of a device fit's state header; its fields, in order (fit.wgsl's `H_*`).
pub(crate) const FIT_HEADER: [&str; 16] = [
    "H_F",
    "H_BEST",
    "H_FLAT",
    "H_ITERATIONS",
    "H_EVALUATIONS",
    "H_TERMINATION",
    "H_PHASE",
    "H_ALPHA",
    "H_LS_EVALS",
    "H_PAIRS",
    "H_NEWEST",
    "H_GAMMA",
    "H_N_FREE",
    "H_UNUSED0",
    "H_UNUSED1",
    "H_UNUSED2",
];

/// The header index of a field of [`FIT_HEADER`].
pub(crate) fn fit_header(name: &str) -> usize {
    FIT_HEADER
        .iter()
        .position(|&h| h == name)
        .expect("a field of FIT_HEADER")
}

/// A device fit's termination while it runs (the codes of `Termination` once it stops).
pub(crate) const RUNNING: f32 = -1.0;

/// The WGSL prepended to the shader sources: constants and the `Meta` struct.
/// `NONE` marks an entry that is not external and a constraint without a staterror link.
pub(crate) fn header() -> String {
    let mut h =
        String::from("// Generated by ns_compute::wgpu::abi: do not edit in the shaders.\n");
    let constants = [
        ("THREADS", THREADS),
        ("BLOCK_WORDS", BLOCK_WORDS as u32),
        ("NORMSYS_WORDS", NORMSYS_WORDS as u32),
        ("LINEAR", ScalarFactor::LINEAR),
        ("NONE", crate::layout::NONE),
        ("DEVIANCE_TERMS", crate::poisson::DEVIANCE_SERIES_TERMS),
        ("NORMSYS_INPUT_WORDS", NORMSYS_INPUT_WORDS as u32),
        ("FLOOR_WORDS", FLOOR_WORDS as u32),
        ("STAT_WORDS", STAT_WORDS as u32),
        ("STAT_SCRATCH_WORDS", STAT_SCRATCH_WORDS as u32),
    ];
    for (name, value) in constants {
        h.push_str(&format!("const {name}: u32 = {value}u;\n"));
    }
    // The device optimizer's (fit.wgsl): its state header, the termination codes, the host
    // optimizer's line-search constants and stopping rule.
    let fit_constants = [
        ("HEADER_WORDS", FIT_HEADER.len() as u32),
        ("CONVERGED", Termination::Converged.code() as u32),
        ("MAX_ITERATIONS", Termination::MaxIterations.code() as u32),
        ("MAX_EVALUATIONS", Termination::MaxEvaluations.code() as u32),
        (
            "LINE_SEARCH_FAILED",
            Termination::LineSearchFailed.code() as u32,
        ),
        (
            "NON_FINITE_START",
            Termination::NonFiniteStart.code() as u32,
        ),
        ("MAX_LINE_SEARCH", MAX_LINE_SEARCH_EVALUATIONS as u32),
        ("FLAT_ITERATIONS", FLAT_ITERATIONS as u32),
    ];
    for (name, value) in fit_constants {
        h.push_str(&format!("const {name}: u32 = {value}u;\n"));
    }
    for (i, name) in FIT_HEADER.iter().enumerate() {
        h.push_str(&format!("const {name}: u32 = {i}u;\n"));
    }
    let reals = [
        ("RUNNING", RUNNING as f64),
        ("WOLFE_C1", WOLFE_C1),
        ("WOLFE_C2", WOLFE_C2),
        ("HZ_DELTA", HZ_DELTA),
        ("SLOPE_WINDOW_PER_NOISE", SLOPE_WINDOW_PER_NOISE),
        ("AFFINE_FLOOR", ns_core::layout::AFFINE_FLOOR),
        ("BIN_STAT_FLOOR", ns_core::layout::BinStat::FLOOR),
        ("EMPTY_BIN_WALL", crate::poisson::EMPTY_BIN_WALL),
    ];
    for (name, value) in reals {
        h.push_str(&format!("const {name}: f32 = {value:?};\n"));
    }
    h.push_str(&Meta::wgsl_definition());
    h.push_str(&FitMeta::wgsl_definition());
    h
}

/// The shader sources (file name, text), after the header: the evaluation, then the device
/// optimizer that calls it.
pub(crate) const SHADER_FILES: [(&str, &str); 2] = [
    ("nll_grad.wgsl", include_str!("../../shaders/nll_grad.wgsl")),
    ("fit.wgsl", include_str!("../../shaders/fit.wgsl")),
];

/// The shader module as compiled: header, then the sources (entry points `nll_grad` and `fit`).
pub(crate) fn shader_source() -> String {
    SHADER_FILES
        .iter()
        .fold(header(), |source, (_, text)| source + text)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shader parses and validates (naga, no device needed): a shader error fails the
    /// test suite, not a user's run.
    #[test]
    fn shaders_validate() {
        let source = shader_source();
        let module = naga::front::wgsl::parse_str(&source)
            .unwrap_or_else(|e| panic!("{}", e.emit_to_string(&source)));
        naga::valid::Validator::new(
            naga::valid::ValidationFlags::all(),
            naga::valid::Capabilities::empty(),
        )
        .validate(&module)
        .unwrap_or_else(|e| panic!("{}", e.emit_to_string(&source)));
    }

    #[test]
    fn the_shaders_define_no_shared_name_themselves() {
        let h = header();
        assert!(h.contains("const LINEAR: u32 = 4294967295u;\n"));
        assert!(h.contains("struct Meta {\n    n_params: u32,\n"));
        for (file, source) in SHADER_FILES {
            for name in ["THREADS", "BLOCK_WORDS", "NORMSYS_WORDS", "LINEAR", "NONE"] {
                assert!(
                    !source.contains(&format!("const {name}")),
                    "{file} defines {name}"
                );
            }
            assert!(!source.contains("struct Meta {"), "{file} defines Meta");
            assert!(
                !source.contains("struct FitMeta {"),
                "{file} defines FitMeta"
            );
        }
    }
}
