//! The compiled model packed for the WGSL shader: every index array in one u32 buffer, every
//! value array in one f32 buffer (so the shader needs few storage buffers on any adapter), and the
//! `Meta` uniform with each array's offset.

use ns_core::CompiledModel;

use super::abi::Meta;
use crate::backend::Objective;
use crate::layout::{FLOOR_WORDS, KernelLayout, SignalLayout};
use crate::signal::ExternalSignal;

/// The packed buffers' contents and their uniform (without the dispatch's `n_eval`).
#[derive(Clone)]
pub(crate) struct PackedModel {
    pub(crate) ints: Vec<u32>,
    pub(crate) reals: Vec<f32>,
    pub(crate) meta: Meta,
    /// Length of the model's histosys delta array.
    n_deltas: usize,
}

impl PackedModel {
    /// The model's buffers for evaluations of `objective`.
    pub(crate) fn new(model: &CompiledModel, objective: Objective) -> Self {
        let l = KernelLayout::new(model);
        let mut ints: Vec<u32> = Vec::new();
        let mut reals: Vec<f32> = Vec::new();
        let mut int = |v: &[u32]| {
            let offset = ints.len() as u32;
            ints.extend_from_slice(v);
            offset
        };
        let mut meta = Meta {
            blocks: int(&l.blocks),
            entry_factor_start: int(&l.entry_factor_start),
            entry_factor_param: int(&l.entry_factor_param),
            entry_block: int(&l.entry_block),
            scalar_param: int(&l.scalar_param),
            scalar_normsys: int(&l.scalar_normsys),
            histosys_param: int(&l.histosys_param),
            histosys_block: int(&l.histosys_block),
            bin_entry_start: int(&l.bin_entry_start),
            bin_entries: int(&l.bin_entries),
            gauss_param: int(&l.gauss_param),
            gauss_aux: int(&l.gauss_aux),
            pois_param: int(&l.pois_param),
            pois_aux: int(&l.pois_aux),
            param_slot_start: int(&l.param_slot_start),
            param_slots: int(&l.param_slots),
            floor_block: int(&l.floor_block),
            stat_bin_start: int(&l.stat_bin_start),
            stat_terms: int(&l.stat_terms),
            stat_param: int(&l.stat_param),
            stat_aux: int(&l.stat_aux),
            stat_entry_start: int(&l.stat_entry_start),
            stat_entries: int(&l.stat_entries),
            param_analytic: int(&l.param_analytic),
            ..Default::default()
        };
        let mut real = |v: &[f64]| {
            let offset = reals.len() as u32;
            reals.extend(v.iter().map(|&x| x as f32));
            offset
        };
        meta.nominal = real(&l.nominal);
        meta.normsys = real(&l.normsys);
        meta.histosys_delta = real(&l.histosys_delta);
        meta.gauss_sigma = real(&l.gauss_sigma);
        meta.pois_tau = real(&l.pois_tau);
        meta.normsys_input = real(&l.normsys_input);
        meta.gauss_sigma_low = real(&l.gauss_sigma_low);
        // WGSL has no NaN test (and may assume none): the layout's NaN marks (a floored block
        // without a total to renormalise to, a Gaussian statistical term's count, the range of
        // a term that is not analytic) are packed as −1, which no total or count can be.
        let marked = |v: &[f64]| -> Vec<f64> {
            v.iter()
                .map(|&x| if x.is_nan() { -1.0 } else { x })
                .collect()
        };
        meta.floor_values = real(&marked(&l.floor_values));
        meta.stat_values = real(&marked(&l.stat_values));
        meta.stat_sigma = real(&l.stat_sigma);
        // A binding cannot be empty.
        ints.push(0);
        reals.push(0.0);
        meta.n_params = model.n_params as u32;
        meta.n_main = model.n_main as u32;
        meta.n_aux = model.n_aux as u32;
        meta.n_blocks = model.samples.len() as u32;
        meta.n_entries = model.n_entries() as u32;
        meta.n_scalar = l.scalar_param.len() as u32;
        meta.n_histosys = l.histosys_param.len() as u32;
        meta.n_entry_factors = l.entry_factor_param.len() as u32;
        meta.n_gauss = l.gauss_param.len() as u32;
        meta.n_pois = l.pois_param.len() as u32;
        meta.normsys_code = l.normsys_code as u32;
        meta.histosys_code = l.histosys_code as u32;
        meta.scratch_stride = l.scratch_doubles_per_block() as u32;
        meta.clip_sample_yields = l.clip_sample_yields as u32;
        meta.has_normsys_input = u32::from(!l.normsys_input.is_empty());
        meta.has_gauss_sigma_low = u32::from(!l.gauss_sigma_low.is_empty());
        meta.n_floored = (l.floor_values.len() / FLOOR_WORDS) as u32;
        meta.n_stats = l.stat_param.len() as u32;
        meta.profile_analytic =
            u32::from(objective == Objective::Profiled && !l.param_analytic.is_empty());
        PackedModel {
            ints,
            reals,
            meta,
            n_deltas: l.histosys_delta.len(),
        }
    }

    /// The model with `external`'s layout appended: evaluations read each row's external yields
    /// (and, with `width_terms`, the NLL gains the ln σ of the widths that follow them).
    pub(crate) fn with_signal(&self, external: &ExternalSignal) -> Self {
        let m = &self.meta;
        let l = SignalLayout::new(
            external,
            m.n_entries as usize,
            m.n_gauss as usize,
            self.n_deltas,
        );
        let mut packed = self.clone();
        let mut int = |v: &[u32]| {
            let offset = packed.ints.len() as u32;
            packed.ints.extend_from_slice(v);
            offset
        };
        let mut meta = packed.meta;
        meta.entry_signal = int(&l.entry_signal);
        meta.signal_entry = int(&l.signal_entry);
        meta.gauss_link = int(&l.gauss_link);
        meta.link_gauss = int(&l.link_gauss);
        meta.link_member_start = int(&l.link_member_start);
        meta.link_members = int(&l.link_members);
        meta.signal_link_start = int(&l.signal_link_start);
        meta.signal_links = int(&l.signal_links);
        let mut real = |v: &[f64]| {
            let offset = packed.reals.len() as u32;
            packed.reals.extend(v.iter().map(|&x| x as f32));
            offset
        };
        meta.templates = real(&l.templates);
        meta.link_absolute = real(&l.link_absolute);
        meta.link_fixed = real(&l.link_fixed);
        meta.n_signal = external.len() as u32;
        meta.n_links = external.staterror().len() as u32;
        meta.width_terms = 1;
        packed.ints.push(0);
        packed.reals.push(0.0);
        packed.meta = meta;
        packed
    }
}
