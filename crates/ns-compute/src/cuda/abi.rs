//! Everything the kernels share with Rust, defined once here: the kernel-argument structs
//! (`ModelView`, `FitArgs`), the launch and layout constants, the optimizer's line-search
//! constants and termination codes. [`header`] writes them as the C++ that is prepended to the
//! kernel sources before NVRTC compiles them, with a `static_assert` on every struct's size, so
//! a field added on one side only cannot compile.

use cudarc::driver::DeviceRepr;
use ns_core::layout::ScalarFactor;

use crate::layout::{
    BLOCK_WORDS, FLOOR_WORDS, NONE, NORMSYS_INPUT_WORDS, NORMSYS_WORDS, STAT_SCRATCH_WORDS,
    STAT_WORDS,
};
use crate::poisson::DEVIANCE_SERIES_TERMS;
use ns_core::optim::{HZ_DELTA, MAX_LINE_SEARCH_EVALUATIONS, Termination, WOLFE_C1, WOLFE_C2};

/// Threads per block of `nll_grad` and `fit_lbfgsb` in batches and fits. A fit is a chain of
/// dependent loads and barriers (latency-bound: no warp eligible 91 % of the cycles on an H100),
/// so more warps per multiprocessor win even at the price of spills: 256 threads × 4 blocks (64
/// registers, 280 B spilled) ran 10,000 tHq toys in 1.95–2.01 s against 2.19–2.27 s for 128 × 4
/// (128 registers); 64, 512 and other register budgets were slower (docs/gpu.md).
pub(crate) const BLOCK_THREADS: u32 = 256;
/// The widest block `nll_grad` takes: evaluations with external signal yields use it, since a
/// training step evaluates one histogram and its latency is one block's.
pub(crate) const EVAL_MAX_THREADS: u32 = 512;
/// Largest L-BFGS-B memory the device optimizer supports (its per-block shared arrays).
pub const DEVICE_MAX_MEMORY: usize = 10;
/// Vectors of `n_params` doubles in one fit's optimizer workspace, besides the S and Y
/// histories (13 vectors, plus one vector's room for two int arrays).
pub(crate) const LBFGSB_VECTORS: usize = 14;

/// Doubles of optimizer workspace one block of `fit_lbfgsb` needs.
pub(crate) fn lbfgsb_workspace_doubles(n_params: usize, memory: usize) -> usize {
    (LBFGSB_VECTORS + 2 * memory) * n_params.max(1)
}

/// A `#[repr(C)]` kernel-argument struct and its C++ definition from one field list.
macro_rules! kernel_struct {
    ($(#[$meta:meta])* struct $name:ident { $($(#[$fmeta:meta])* $field:ident: $rust:ty => $c:literal,)* }) => {
        $(#[$meta])*
        #[repr(C)]
        #[derive(Clone, Copy, Debug, Default)]
        pub(crate) struct $name {
            $($(#[$fmeta])* pub(crate) $field: $rust,)*
        }

        impl $name {
            /// The C++ definition, fields in the same order, with its size checked at compile
            /// time (every field's offset is checked when a session opens: [`layout_kernel`]).
            pub(crate) fn c_definition() -> String {
                let mut c = format!("struct {} {{\n", stringify!($name));
                $(c.push_str(&format!("    {} {};\n", $c, stringify!($field)));)*
                c.push_str("};\n");
                c.push_str(&format!(
                    "static_assert(sizeof({0}) == {1}, \"{0} differs from its Rust twin in ns_compute::cuda::abi\");\n",
                    stringify!($name),
                    std::mem::size_of::<$name>()
                ));
                c
            }

            /// Every field as (`Struct::field`, its offset in Rust) in declaration order.
            pub(crate) fn field_offsets() -> Vec<(String, usize)> {
                vec![$((
                    format!("{}::{}", stringify!($name), stringify!($field)),
                    std::mem::offset_of!($name, $field),
                ),)*]
            }

            /// C++ that writes every field's offset, in declaration order, to `out[k++]`.
            fn c_offsets() -> String {
                let mut c = format!("    {{ {} s;\n", stringify!($name));
                $(c.push_str(&format!(
                    "      out[k++] = (unsigned long long)((const char*)&s.{} - (const char*)&s);\n",
                    stringify!($field)
                ));)*
                c.push_str("    }\n");
                c
            }
        }
    };
}

kernel_struct! {
    /// The uploaded model as the kernels see it: device pointers to the arrays of
    /// [`crate::layout::KernelLayout`], then the sizes and interpolation codes.
    struct ModelView {
        /// Per sample block, `BLOCK_WORDS` words: bin_start, n_bins, entry_start, scalar_start,
        /// scalar_end, histosys_start, histosys_end, histosys_delta_start.
        blocks: u64 => "const unsigned*",
        nominal: u64 => "const double*",
        entry_factor_start: u64 => "const unsigned*",
        entry_factor_param: u64 => "const unsigned*",
        entry_block: u64 => "const unsigned*",
        scalar_param: u64 => "const unsigned*",
        scalar_normsys: u64 => "const unsigned*",
        /// Per normsys term, `NORMSYS_WORDS` values.
        normsys: u64 => "const double*",
        histosys_param: u64 => "const unsigned*",
        histosys_block: u64 => "const unsigned*",
        histosys_delta: u64 => "const double*",
        bin_entry_start: u64 => "const unsigned*",
        bin_entries: u64 => "const unsigned*",
        gauss_param: u64 => "const unsigned*",
        gauss_aux: u64 => "const unsigned*",
        gauss_sigma: u64 => "const double*",
        /// Per Gaussian constraint, its width below the global observable; empty where
        /// `has_gauss_sigma_low` is 0.
        gauss_sigma_low: u64 => "const double*",
        pois_param: u64 => "const unsigned*",
        pois_aux: u64 => "const unsigned*",
        pois_tau: u64 => "const double*",
        range_param: u64 => "const unsigned*",
        /// Per range-normalised Gaussian: σ, low, high.
        range_values: u64 => "const double*",
        /// Per parameter, NS_NORMSYS_INPUT_WORDS values: the kind of its normsys input (0 none;
        /// 1 α' = τ(κ^θ − 1) with τ, κ; 2 α' = scale·(θ − 1) with scale; 3 α' = ln θ; 4 α' =
        /// ln(1 + vθ) with v); empty where `has_normsys_input` is 0.
        normsys_input: u64 => "const double*",
        pois_range_param: u64 => "const unsigned*",
        /// Per range-normalised Poisson: τ, high.
        pois_range_values: u64 => "const double*",
        /// Per sample block, its floored block or NS_NONE (empty where `n_floored` is 0); per
        /// floored block NS_FLOOR_WORDS values: floor, the total it is renormalised to (NaN:
        /// none), active bins, 1 where logarithmic.
        floor_block: u64 => "const unsigned*",
        floor_values: u64 => "const double*",
        /// Statistical terms (CMS Combine's autoMCStats; empty where `n_stats` is 0): per main
        /// bin its terms in order (CSR); per term its parameter, NS_STAT_WORDS values (a
        /// Poisson term's count, NaN for a Gaussian; an analytic term's range), its global
        /// observable where analytic (else NS_NONE), its entries with their σ (CSR).
        stat_bin_start: u64 => "const unsigned*",
        stat_terms: u64 => "const unsigned*",
        stat_param: u64 => "const unsigned*",
        stat_values: u64 => "const double*",
        stat_aux: u64 => "const unsigned*",
        stat_entry_start: u64 => "const unsigned*",
        stat_entries: u64 => "const unsigned*",
        stat_sigma: u64 => "const double*",
        /// Per parameter, 1 where fits set it analytically (empty where none is).
        param_analytic: u64 => "const unsigned*",
        param_slot_start: u64 => "const unsigned*",
        param_slots: u64 => "const unsigned*",
        n_params: i32 => "int",
        n_main: i32 => "int",
        n_aux: i32 => "int",
        n_blocks: i32 => "int",
        n_entries: i32 => "int",
        n_scalar: i32 => "int",
        n_histosys: i32 => "int",
        n_entry_factors: i32 => "int",
        n_gauss: i32 => "int",
        n_pois: i32 => "int",
        n_ranges: i32 => "int",
        n_pois_ranges: i32 => "int",
        /// 1: each sample's yield is clipped at zero.
        clip_sample_yields: i32 => "int",
        has_normsys_input: i32 => "int",
        has_gauss_sigma_low: i32 => "int",
        n_floored: i32 => "int",
        n_stats: i32 => "int",
        /// 1: the NLL and gradient are profiled over the analytic parameters (the objective of
        /// fits, ns_compute::cpu::CpuEvaluator::profiled).
        profile_analytic: i32 => "int",
        /// 1, 4 or 5 (AsymPow).
        normsys_code: i32 => "int",
        /// 0, 2 or 4 (code4p).
        histosys_code: i32 => "int",
    }
}

kernel_struct! {
    /// One launch of the device optimizer: per fit (row f of n_params) the full starting vector,
    /// the free parameters' indices (first n_free[f] entries), per free parameter the scaled
    /// bounds and the scale; the datasets; the outputs (scaled free variables and their gradient
    /// at the result, the objective there, counts and termination codes); the workspace.
    struct FitArgs {
        init: u64 => "const double*",
        free_index: u64 => "const unsigned*",
        n_free: u64 => "const int*",
        lower: u64 => "const double*",
        upper: u64 => "const double*",
        scale: u64 => "const double*",
        fit_dataset: u64 => "const unsigned*",
        main_data: u64 => "const double*",
        aux_data: u64 => "const double*",
        x_out: u64 => "double*",
        g_out: u64 => "double*",
        f_out: u64 => "double*",
        iterations_out: u64 => "int*",
        evaluations_out: u64 => "int*",
        termination_out: u64 => "int*",
        workspace: u64 => "double*",
        pg_tol: f64 => "double",
        n_fits: i32 => "int",
        memory: i32 => "int",
        max_iterations: i32 => "int",
        max_evaluations: i32 => "int",
    }
}

kernel_struct! {
    /// External signal yields ([`crate::signal`]) as the kernels see them: a row of `n_signal`
    /// yields per evaluation at `values` (null: the model's own yields), where ∂NLL/∂s goes, and
    /// the layout of [`crate::layout::SignalLayout`].
    struct SignalView {
        values: u64 => "const double*",
        /// Rows of ∂NLL/∂s (null: not wanted).
        d_signal: u64 => "double*",
        /// Per model entry: its signal index, or NS_NONE.
        entry_signal: u64 => "const unsigned*",
        /// Per signal index: its entry.
        signal_entry: u64 => "const unsigned*",
        /// Shaped like `ModelView::histosys_delta`; external entries' rows hold (hi, lo) templates.
        templates: u64 => "const double*",
        /// Per Gaussian constraint: its staterror link, or NS_NONE.
        gauss_link: u64 => "const unsigned*",
        /// Per link: its constraint, √(Σδ²), the nominal it covers that is not external, and
        /// its member signal indices (CSR).
        link_gauss: u64 => "const unsigned*",
        link_absolute: u64 => "const double*",
        link_fixed: u64 => "const double*",
        link_member_start: u64 => "const unsigned*",
        link_members: u64 => "const unsigned*",
        /// Per signal index: the links it is a member of (CSR, ascending).
        signal_link_start: u64 => "const unsigned*",
        signal_links: u64 => "const unsigned*",
        n_signal: i32 => "int",
        n_links: i32 => "int",
        /// 1: the NLL gains ln(σ/σ_model) of each linked width (the caller adds the data
        /// constant of the model's widths); 0: the deviance form of the model with the signal
        /// (fits, whose host side holds the constant of the signal's widths).
        width_terms: i32 => "int",
    }
}

kernel_struct! {
    /// The one argument of `nll_grad`: the model and the external signal (null values: the
    /// model's own yields); per evaluation (row) the parameters (`params_stride` apart: 0 shares
    /// one row) and its dataset; the datasets; the constant added to each NLL; the scratch and
    /// the outputs.
    struct NllGradArgs {
        model: ModelView => "ModelView",
        signal: SignalView => "SignalView",
        params: u64 => "const double*",
        eval_dataset: u64 => "const unsigned*",
        main_data: u64 => "const double*",
        aux_data: u64 => "const double*",
        scratch: u64 => "double*",
        nll_out: u64 => "double*",
        grad_out: u64 => "double*",
        nll_offset: f64 => "double",
        params_stride: i32 => "int",
        n_eval: i32 => "int",
    }
}

kernel_struct! {
    /// The one argument of `fit_lbfgsb`: the model, the fits' external signal, the fits and the
    /// evaluation scratch.
    struct FitLaunch {
        model: ModelView => "ModelView",
        signal: SignalView => "SignalView",
        fits: FitArgs => "FitArgs",
        scratch: u64 => "double*",
    }
}

kernel_struct! {
    /// The one argument of `sample_toys`: per ensemble the expected main data, the Gaussian
    /// means and the Poisson rates (rows), the constraints' widths and auxiliary positions, the
    /// generator's seed, streams and first toy index, and the outputs (toy after toy).
    struct ToyArgs {
        main_rate: u64 => "const double*",
        gauss_mean: u64 => "const double*",
        gauss_sigma: u64 => "const double*",
        /// Per Gaussian constraint, its width where θ lies below the observable (σ where the
        /// constraint is symmetric): a bifurcated draw where it differs.
        gauss_sigma_low: u64 => "const double*",
        gauss_aux: u64 => "const unsigned*",
        pois_rate: u64 => "const double*",
        /// Per ensemble, per Poisson constraint: ln λ, envelope, mode of its continuous density
        /// (rng::ContinuousPoisson).
        pois_shape: u64 => "const double*",
        /// Per Poisson constraint, the upper end of its continuous datum (infinite: a count).
        pois_high: u64 => "const double*",
        /// Per Gaussian constraint, low and high of its datum (infinite: unbounded).
        gauss_range: u64 => "const double*",
        pois_aux: u64 => "const unsigned*",
        streams: u64 => "const unsigned*",
        main_out: u64 => "double*",
        aux_out: u64 => "double*",
        seed: u64 => "unsigned long long",
        n_main: i32 => "int",
        n_gauss: i32 => "int",
        n_pois: i32 => "int",
        n_aux: i32 => "int",
        first_toy: u32 => "unsigned",
        n_toys: i32 => "int",
        n_ensembles: i32 => "int",
    }
}

// SAFETY (each): #[repr(C)] plain data (device pointers as u64, doubles, ints and structs of
// them) whose layout the generated C++ definition mirrors: its size by a static_assert at compile
// time, every field's offset by `ns_abi_layout` when a session opens; no references, no drop
// glue. The pointers are taken with `device_ptr(..).0`, dropping cudarc's sync guard at once:
// sound because a session disables event tracking and does all its work on one stream, in order.
unsafe impl DeviceRepr for ModelView {}
// SAFETY: as above.
unsafe impl DeviceRepr for FitArgs {}
// SAFETY: as above.
unsafe impl DeviceRepr for SignalView {}
// SAFETY: as above.
unsafe impl DeviceRepr for NllGradArgs {}
// SAFETY: as above.
unsafe impl DeviceRepr for FitLaunch {}
// SAFETY: as above.
unsafe impl DeviceRepr for ToyArgs {}

/// A double as a C literal that reads back to the same value.
fn c_double(v: f64) -> String {
    format!("{v:e}")
}

/// The C++ prepended to the kernel sources: constants, termination codes, struct definitions.
pub(crate) fn header() -> String {
    let mut h =
        String::from("// Generated by ns_compute::cuda::abi: do not edit in the kernels.\n");
    let defines: [(&str, String); 27] = [
        ("NS_BLOCK", BLOCK_THREADS.to_string()),
        ("NS_EVAL_MAX_BLOCK", EVAL_MAX_THREADS.to_string()),
        ("NS_BLOCK_WORDS", BLOCK_WORDS.to_string()),
        ("NS_NORMSYS_WORDS", NORMSYS_WORDS.to_string()),
        ("NS_NORMSYS_INPUT_WORDS", NORMSYS_INPUT_WORDS.to_string()),
        ("NS_AFFINE_FLOOR", c_double(ns_core::layout::AFFINE_FLOOR)),
        ("NS_FLOOR_WORDS", FLOOR_WORDS.to_string()),
        ("NS_STAT_WORDS", STAT_WORDS.to_string()),
        ("NS_STAT_SCRATCH_WORDS", STAT_SCRATCH_WORDS.to_string()),
        (
            "NS_BIN_STAT_FLOOR",
            c_double(ns_core::layout::BinStat::FLOOR),
        ),
        ("NS_MAX_REJECTIONS", crate::rng::MAX_REJECTIONS.to_string()),
        (
            "NS_POISSON_RANGE_PANELS",
            ns_core::layout::POISSON_RANGE_PANELS.to_string(),
        ),
        ("NS_LINEAR", format!("{:#x}u", ScalarFactor::LINEAR)),
        ("NS_NONE", format!("{NONE:#x}u")),
        ("NS_MAX_MEMORY", DEVICE_MAX_MEMORY.to_string()),
        ("NS_LBFGSB_VECTORS", LBFGSB_VECTORS.to_string()),
        ("NS_C1", c_double(WOLFE_C1)),
        ("NS_C2", c_double(WOLFE_C2)),
        ("NS_HZ_DELTA", c_double(HZ_DELTA)),
        ("NS_MAX_LS_EVALS", MAX_LINE_SEARCH_EVALUATIONS.to_string()),
        ("NS_DEVIANCE_TERMS", DEVIANCE_SERIES_TERMS.to_string()),
        (
            "NS_EMPTY_BIN_WALL",
            c_double(crate::poisson::EMPTY_BIN_WALL),
        ),
        // detmath.cuh's constants: the same doubles as detmath.rs's, for bit-identical toys.
        ("NS_LN2_HI", c_double(crate::detmath::LN2_HI)),
        ("NS_LN2_LO", c_double(crate::detmath::LN2_LO)),
        ("NS_INV_LN2", c_double(crate::detmath::INV_LN2)),
        ("NS_PI", c_double(crate::detmath::PI)),
        ("NS_SQRT_2", c_double(std::f64::consts::SQRT_2)),
    ];
    for (name, value) in defines {
        h.push_str(&format!("#define {name} {value}\n"));
    }
    h.push_str("#define NS_RUNNING -1\n");
    // The quadrature rule of ns_core::layout::PoissonRange::log_norm, the same doubles.
    let rule = |part: fn(&(f64, f64)) -> f64| {
        let values: Vec<String> = ns_core::layout::GAUSS_LEGENDRE_8
            .iter()
            .map(|p| c_double(part(p)))
            .collect();
        values.join(", ")
    };
    h.push_str(&format!(
        "__constant__ double NS_GL8_NODE[8] = {{{}}};\n__constant__ double NS_GL8_WEIGHT[8] = {{{}}};\n",
        rule(|p| p.0),
        rule(|p| p.1)
    ));
    for t in Termination::ALL {
        h.push_str(&format!("#define NS_{} {}\n", t.constant_name(), t.code()));
    }
    h.push_str(&ModelView::c_definition());
    h.push_str(&FitArgs::c_definition());
    h.push_str(&SignalView::c_definition());
    h.push_str(&NllGradArgs::c_definition());
    h.push_str(&FitLaunch::c_definition());
    h.push_str(&ToyArgs::c_definition());
    h.push_str(&layout_kernel());
    h
}

/// Every field of every kernel-argument struct as (`Struct::field`, offset in Rust), in the
/// order [`layout_kernel`] writes the device's offsets.
pub(crate) fn field_offsets() -> Vec<(String, usize)> {
    [
        ModelView::field_offsets(),
        FitArgs::field_offsets(),
        SignalView::field_offsets(),
        NllGradArgs::field_offsets(),
        FitLaunch::field_offsets(),
        ToyArgs::field_offsets(),
    ]
    .concat()
}

/// The kernel `ns_abi_layout`: it writes the offset of every field as the kernels' compiler laid
/// it out. NVRTC has no `offsetof` for a compile-time check, so a session compares these with
/// [`field_offsets`] when it opens: two swapped fields of one size are an error, not wrong
/// numbers.
fn layout_kernel() -> String {
    let mut c = String::from(
        "extern \"C\" __global__ void ns_abi_layout(unsigned long long* out) {\n    int k = 0;\n",
    );
    for part in [
        ModelView::c_offsets(),
        FitArgs::c_offsets(),
        SignalView::c_offsets(),
        NllGradArgs::c_offsets(),
        FitLaunch::c_offsets(),
        ToyArgs::c_offsets(),
    ] {
        c.push_str(&part);
    }
    c.push_str("}\n");
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cuda::compile::KERNEL_FILES;

    #[test]
    fn c_definitions_mirror_the_rust_structs() {
        let view = ModelView::c_definition();
        assert!(view.starts_with("struct ModelView {\n    const unsigned* blocks;\n"));
        assert!(
            view.contains("    int histosys_code;\n};\nstatic_assert(sizeof(ModelView) == 384,")
        );
        let args = FitArgs::c_definition();
        assert!(args.contains("    double* workspace;\n    double pg_tol;\n    int n_fits;\n"));
        assert!(args.contains("static_assert(sizeof(FitArgs) == 152,"));
        let signal = SignalView::c_definition();
        assert!(signal.contains("    double* d_signal;\n"));
        assert!(signal.contains("static_assert(sizeof(SignalView) == 120,"));
        let launch = NllGradArgs::c_definition();
        assert!(
            launch.starts_with(
                "struct NllGradArgs {\n    ModelView model;\n    SignalView signal;\n"
            )
        );
        // Every field's offset, in the order the layout kernel writes the device's.
        let offsets = field_offsets();
        assert!(offsets.contains(&("FitArgs::pg_tol".to_string(), 128)));
        assert!(offsets.contains(&("FitArgs::n_fits".to_string(), 136)));
        assert!(offsets.contains(&("NllGradArgs::signal".to_string(), 384)));
        let kernel = layout_kernel();
        assert_eq!(kernel.matches("out[k++]").count(), offsets.len());
        assert!(kernel.contains("{ FitArgs s;\n"));
    }

    #[test]
    fn header_defines_every_termination_code_and_constant_once() {
        let h = header();
        for t in Termination::ALL {
            let line = format!("#define NS_{} {}\n", t.constant_name(), t.code());
            assert_eq!(h.matches(&line).count(), 1, "{line}");
        }
        assert!(h.contains("#define NS_LINEAR 0xffffffffu\n"));
        assert!(h.contains("#define NS_C1 1e-4\n"));
        assert!(h.contains("#define NS_C2 9e-1\n"));
        // The kernels define none of the shared names themselves: one source of truth.
        for (file, source) in KERNEL_FILES {
            for line in h.lines().filter(|l| l.starts_with("#define ")) {
                let name = line.split_whitespace().nth(1).expect("a name");
                assert!(
                    !source.contains(&format!("#define {name} ")),
                    "{file} redefines {name}"
                );
            }
            for name in [
                "ModelView",
                "FitArgs",
                "SignalView",
                "NllGradArgs",
                "FitLaunch",
                "ToyArgs",
            ] {
                assert!(
                    !source.contains(&format!("struct {name} {{")),
                    "{file} defines {name}"
                );
            }
        }
    }
}
