//! The compiled model flattened for the GPU kernels (CUDA and WGSL alike), with the derived index
//! arrays they need: entry → sample block, main bin → entries, histosys term → sample block, and
//! the gradient gather map (parameter → the contribution slots it sums).

use ns_core::CompiledModel;
use ns_core::interp::{HistosysCode, NormsysCode};
use ns_core::layout::{BinStat, NormsysTransform, ScalarFactor};

use crate::signal::ExternalSignal;

/// Words of one sample block in `KernelLayout::blocks` (the fields of `ns_core::layout::SampleBlock`).
pub(crate) const BLOCK_WORDS: usize = 8;
/// Values of one normsys term in `KernelLayout::normsys`: ln_hi, ln_lo, poly[6].
pub(crate) const NORMSYS_WORDS: usize = 8;
/// An absent index in the kernels' index arrays (an entry that is not external, a constraint
/// without a staterror link).
pub(crate) const NONE: u32 = u32::MAX;

/// Values of one floored block in `KernelLayout::floor_values`: floor, the total it is
/// renormalised to (NaN: none), its active bins, 1 where its values are logarithms.
pub(crate) const FLOOR_WORDS: usize = 4;
/// Values of one statistical term in `KernelLayout::stat_values`: the effective count of a
/// Poisson term (NaN: a Gaussian term), and the low and high end of an analytic term's range.
pub(crate) const STAT_WORDS: usize = 3;
/// Doubles of scratch per statistical term in the kernels: its error E, its bin's yield before
/// it, whether an analytic θ was held by its range, and the gradient's weights through μ and E.
pub(crate) const STAT_SCRATCH_WORDS: usize = 5;

/// Values per parameter in `KernelLayout::normsys_input`: kind (0 none, 1 LogNormal, 2 linear,
/// 3 logarithm, 4 affine) and two coefficients.
pub(crate) const NORMSYS_INPUT_WORDS: usize = 3;

/// Refuse, by name, a model with terms the f32 kernels (Vulkan, Metal) do not evaluate yet:
/// constraints normalised over their global observable's range (ROOT's semantics for HistFactory
/// XML; their normalisation needs erfc and lgamma, which WGSL lacks). CUDA evaluates them.
pub fn check_f32_device_terms(m: &CompiledModel) -> ns_core::Result<()> {
    if !m.gaussian_ranges.is_empty() || !m.poisson_ranges.is_empty() {
        return Err(ns_core::Error::Device(
            "this model has ROOT's HistFactory constraints normalised over their global \
             observable's range, which the f32 kernels (Vulkan, Metal) do not evaluate: run it \
             on the CPU or CUDA, or read the XML with pyhf's semantics (semantics \"pyhf\")"
                .into(),
        ));
    }
    Ok(())
}

/// Host copy of every array the kernels read, in the kernels' layout.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KernelLayout {
    pub blocks: Vec<u32>,
    pub nominal: Vec<f64>,
    pub entry_factor_start: Vec<u32>,
    pub entry_factor_param: Vec<u32>,
    pub entry_block: Vec<u32>,
    pub scalar_param: Vec<u32>,
    pub scalar_normsys: Vec<u32>,
    pub normsys: Vec<f64>,
    pub histosys_param: Vec<u32>,
    pub histosys_block: Vec<u32>,
    pub histosys_delta: Vec<f64>,
    pub bin_entry_start: Vec<u32>,
    pub bin_entries: Vec<u32>,
    pub gauss_param: Vec<u32>,
    pub gauss_aux: Vec<u32>,
    pub gauss_sigma: Vec<f64>,
    /// Per Gaussian constraint, its width below the global observable (a two-sided constraint,
    /// CMS Combine's asymmetric `param`; σ where there is none); empty where no constraint is
    /// two-sided.
    pub gauss_sigma_low: Vec<f64>,
    pub pois_param: Vec<u32>,
    pub pois_aux: Vec<u32>,
    pub pois_tau: Vec<f64>,
    /// Range-normalised Gaussian constraints: the parameter, and σ, low, high of each.
    pub range_param: Vec<u32>,
    pub range_values: Vec<f64>,
    /// 1 where each sample's yield is clipped at zero (ROOT's semantics).
    pub clip_sample_yields: i32,
    /// Per parameter, `NORMSYS_INPUT_WORDS` values: the transform its normsys terms read it
    /// through (ROOT's LogNormal: 1, τ, κ; Gamma: 2, scale, 0; a logarithm: 3; none: 0); empty
    /// where no parameter has one.
    pub normsys_input: Vec<f64>,
    /// Range-normalised Poisson constraints (ROOT's Gamma): the parameter, and τ, high of each.
    pub pois_range_param: Vec<u32>,
    pub pois_range_values: Vec<f64>,
    /// Per sample block, its index among the floored blocks or `NONE`; empty where no block
    /// is floored.
    pub floor_block: Vec<u32>,
    /// Per floored block, `FLOOR_WORDS` values.
    pub floor_values: Vec<f64>,
    /// The statistical terms (`ns_core::layout::BinStat`) of each main bin, in term order (CSR
    /// over `stat_terms`); empty where the model has none.
    pub stat_bin_start: Vec<u32>,
    pub stat_terms: Vec<u32>,
    /// Per statistical term: its parameter, `STAT_WORDS` values, its global observable where
    /// fits set it analytically (else `NONE`), and its entries with their template errors σ
    /// (CSR).
    pub stat_param: Vec<u32>,
    pub stat_values: Vec<f64>,
    pub stat_aux: Vec<u32>,
    pub stat_entry_start: Vec<u32>,
    pub stat_entries: Vec<u32>,
    pub stat_sigma: Vec<f64>,
    /// Per parameter, 1 where fits set it analytically; empty where none is.
    pub param_analytic: Vec<u32>,
    pub param_slot_start: Vec<u32>,
    pub param_slots: Vec<u32>,
    pub normsys_code: i32,
    pub histosys_code: i32,
}

impl KernelLayout {
    pub fn new(m: &CompiledModel) -> Self {
        let mut l = KernelLayout {
            nominal: m.nominal.clone(),
            entry_factor_start: m.entry_factor_start.clone(),
            entry_factor_param: m.entry_factor_param.clone(),
            histosys_param: m.histosys_param.clone(),
            histosys_delta: m.histosys_delta.clone(),
            normsys_code: match m.codes.normsys {
                NormsysCode::Code1 => 1,
                NormsysCode::Code4 => 4,
                NormsysCode::AsymPow => 5,
            },
            histosys_code: match m.codes.histosys {
                HistosysCode::Code0 => 0,
                HistosysCode::Code2 => 2,
                HistosysCode::Code4p => 4,
            },
            ..Default::default()
        };
        l.entry_block = vec![0; m.n_entries()];
        l.histosys_block = vec![0; m.histosys_param.len()];
        let mut bin_entries: Vec<Vec<u32>> = vec![Vec::new(); m.n_main];
        for (b, block) in m.samples.iter().enumerate() {
            l.blocks.extend_from_slice(&[
                block.bin_start,
                block.n_bins,
                block.entry_start,
                block.scalar_start,
                block.scalar_end,
                block.histosys_start,
                block.histosys_end,
                block.histosys_delta_start,
            ]);
            for i in 0..block.n_bins {
                let e = block.entry_start + i;
                l.entry_block[e as usize] = b as u32;
                // Blocks in model order: the same summation order per bin as the CPU evaluator.
                bin_entries[(block.bin_start + i) as usize].push(e);
            }
            for h in block.histosys_start..block.histosys_end {
                l.histosys_block[h as usize] = b as u32;
            }
        }
        l.bin_entry_start.push(0);
        for entries in bin_entries {
            l.bin_entries.extend(entries);
            l.bin_entry_start.push(l.bin_entries.len() as u32);
        }
        for f in &m.scalar_factors {
            l.scalar_param.push(f.param);
            l.scalar_normsys.push(f.normsys);
        }
        for t in &m.normsys {
            l.normsys.extend_from_slice(&[t.ln_hi, t.ln_lo]);
            l.normsys.extend_from_slice(&t.poly);
        }
        debug_assert_eq!(l.normsys.len(), NORMSYS_WORDS * m.normsys.len());
        for c in &m.gaussian {
            l.gauss_param.push(c.param);
            l.gauss_aux.push(c.aux_index);
            l.gauss_sigma.push(c.sigma);
        }
        if !m.low_side_widths.is_empty() {
            l.gauss_sigma_low = crate::toys::low_side_widths(m);
        }
        for c in &m.poisson {
            l.pois_param.push(c.param);
            l.pois_aux.push(c.aux_index);
            l.pois_tau.push(c.tau);
        }
        for r in &m.gaussian_ranges {
            l.range_param.push(r.param);
            l.range_values.extend_from_slice(&[r.sigma, r.low, r.high]);
        }
        for r in &m.poisson_ranges {
            l.pois_range_param.push(r.param);
            l.pois_range_values.extend_from_slice(&[r.tau, r.high]);
        }
        l.clip_sample_yields = i32::from(m.clip_sample_yields);
        if !m.normsys_inputs.is_empty() {
            l.normsys_input = vec![0.0; NORMSYS_INPUT_WORDS * m.n_params];
            for input in &m.normsys_inputs {
                let at = NORMSYS_INPUT_WORDS * input.param as usize;
                l.normsys_input[at..at + NORMSYS_INPUT_WORDS].copy_from_slice(
                    &match input.transform {
                        NormsysTransform::LogNormal { tau, kappa } => [1.0, tau, kappa],
                        NormsysTransform::Linear { scale } => [2.0, scale, 0.0],
                        NormsysTransform::Log => [3.0, 0.0, 0.0],
                        NormsysTransform::Affine { slope } => [4.0, slope, 0.0],
                    },
                );
            }
        }
        if !m.floored_blocks.is_empty() {
            l.floor_block = vec![NONE; m.samples.len()];
            for (k, f) in m.floored_blocks.iter().enumerate() {
                l.floor_block[f.block as usize] = k as u32;
                l.floor_values.extend_from_slice(&[
                    f.floor,
                    f.renormalise_to.unwrap_or(f64::NAN),
                    f64::from(f.active_bins.min(m.samples[f.block as usize].n_bins)),
                    f64::from(u8::from(f.logarithmic)),
                ]);
            }
        }
        l.add_stats(m);
        // Gradient slots in the kernel's order: scalar factors, histosys terms, entry factors,
        // Gaussian constraints, Poisson constraints, Gaussian and Poisson range normalisations,
        // statistical terms.
        let slot_params = m
            .scalar_factors
            .iter()
            .map(|f| f.param)
            .chain(m.histosys_param.iter().copied())
            .chain(m.entry_factor_param.iter().copied())
            .chain(m.gaussian.iter().map(|c| c.param))
            .chain(m.poisson.iter().map(|c| c.param))
            .chain(m.gaussian_ranges.iter().map(|r| r.param))
            .chain(m.poisson_ranges.iter().map(|r| r.param))
            .chain(l.stat_param.iter().copied());
        let mut per_param: Vec<Vec<u32>> = vec![Vec::new(); m.n_params];
        for (slot, p) in slot_params.enumerate() {
            per_param[p as usize].push(slot as u32);
        }
        l.param_slot_start.push(0);
        for slots in per_param {
            l.param_slots.extend(slots);
            l.param_slot_start.push(l.param_slots.len() as u32);
        }
        debug_assert_eq!(l.blocks.len(), BLOCK_WORDS * m.samples.len());
        debug_assert!(
            m.scalar_factors.iter().all(
                |f| f.normsys == ScalarFactor::LINEAR || (f.normsys as usize) < m.normsys.len()
            )
        );
        l
    }

    /// The statistical terms: per bin its terms, per term its parameter, values, entries and
    /// (where fits set it analytically) its global observable.
    fn add_stats(&mut self, m: &CompiledModel) {
        if m.bin_stats.is_empty() {
            return;
        }
        let mut terms_of_bin: Vec<Vec<u32>> = vec![Vec::new(); m.n_main];
        self.stat_entry_start.push(0);
        let analytic = m.analytic_parameters();
        for (t, stat) in m.bin_stats.iter().enumerate() {
            match stat {
                BinStat::Gaussian { entries, .. } => {
                    for &(e, sigma) in entries {
                        self.stat_entries.push(e);
                        self.stat_sigma.push(sigma);
                    }
                    let ((low, high), aux) =
                        stat.analytic(m).unwrap_or(((f64::NAN, f64::NAN), NONE));
                    self.stat_values.extend_from_slice(&[f64::NAN, low, high]);
                    self.stat_aux.push(aux);
                }
                BinStat::Poisson { entry, count, .. } => {
                    self.stat_entries.push(*entry);
                    self.stat_sigma.push(0.0);
                    self.stat_values
                        .extend_from_slice(&[*count, f64::NAN, f64::NAN]);
                    self.stat_aux.push(NONE);
                }
            }
            let (bin, param) = (stat.main_bin(m), stat.param());
            self.stat_param.push(param);
            self.stat_entry_start.push(self.stat_entries.len() as u32);
            terms_of_bin[bin as usize].push(t as u32);
        }
        self.stat_bin_start.push(0);
        for terms in terms_of_bin {
            self.stat_terms.extend(terms);
            self.stat_bin_start.push(self.stat_terms.len() as u32);
        }
        if !analytic.is_empty() {
            self.param_analytic = vec![0; m.n_params];
            for p in analytic {
                self.param_analytic[p] = 1;
            }
        }
    }

    /// Number of gradient contribution slots.
    pub fn n_slots(&self) -> usize {
        self.param_slots.len()
    }

    /// Doubles of scratch one thread block needs (`ns_scratch_stride` in `nll_grad.cu`).
    pub fn scratch_doubles_per_block(&self) -> usize {
        2 * self.scalar_param.len()
            + self.blocks.len() / BLOCK_WORDS
            + 2 * self.nominal.len()
            + (self.bin_entry_start.len() - 1)
            + self.n_slots()
            + self.floor_scratch_doubles()
            + self.stat_scratch_doubles()
    }

    /// Per entry whether it was raised to its floor, per floored block its renormalisation
    /// and the mean its histosys weights lose.
    fn floor_scratch_doubles(&self) -> usize {
        let floored = self.floor_values.len() / FLOOR_WORDS;
        if floored == 0 {
            0
        } else {
            self.nominal.len() + 2 * floored
        }
    }

    /// Per entry its Poisson multiplier and factor weight, per term `STAT_SCRATCH_WORDS`
    /// values, and the evaluation point (with the analytic parameters set).
    fn stat_scratch_doubles(&self) -> usize {
        let terms = self.stat_param.len();
        let n_params = self.param_slot_start.len() - 1;
        if terms == 0 {
            0
        } else {
            2 * self.nominal.len() + STAT_SCRATCH_WORDS * terms + n_params
        }
    }
}

/// Host copy of the arrays of `SignalView`: where the external yields sit in the model, their
/// histosys templates, and the staterror links their widths follow.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SignalLayout {
    pub entry_signal: Vec<u32>,
    pub signal_entry: Vec<u32>,
    pub templates: Vec<f64>,
    pub gauss_link: Vec<u32>,
    pub link_gauss: Vec<u32>,
    pub link_absolute: Vec<f64>,
    pub link_fixed: Vec<f64>,
    pub link_member_start: Vec<u32>,
    pub link_members: Vec<u32>,
    pub signal_link_start: Vec<u32>,
    pub signal_links: Vec<u32>,
}

impl SignalLayout {
    /// The layout of `external` in a model of `n_entries` entries, `n_gauss` Gaussian
    /// constraints and `n_deltas` histosys delta values (the rows of other entries in
    /// `templates` are never read: zeros).
    pub fn new(
        external: &ExternalSignal,
        n_entries: usize,
        n_gauss: usize,
        n_deltas: usize,
    ) -> Self {
        let mut l = SignalLayout {
            entry_signal: vec![NONE; n_entries],
            signal_entry: vec![0; external.len()],
            templates: vec![0.0; n_deltas],
            gauss_link: vec![NONE; n_gauss],
            ..Default::default()
        };
        for x in external.blocks() {
            let b = x.layout;
            let (e0, d0) = (b.entry_start as usize, b.histosys_delta_start as usize);
            let terms = (b.histosys_end - b.histosys_start) as usize;
            for i in 0..x.n_bins {
                l.entry_signal[e0 + i] = (x.offset + i) as u32;
                l.signal_entry[x.offset + i] = (e0 + i) as u32;
                for t in 0..terms {
                    let (hi, lo) = x.templates[i * terms + t];
                    let row = d0 + i * 2 * terms + 2 * t;
                    l.templates[row] = hi;
                    l.templates[row + 1] = lo;
                }
            }
        }
        let mut links_of: Vec<Vec<u32>> = vec![Vec::new(); external.len()];
        l.link_member_start.push(0);
        for (k, link) in external.staterror().iter().enumerate() {
            l.gauss_link[link.constraint] = k as u32;
            l.link_gauss.push(link.constraint as u32);
            l.link_absolute.push(link.absolute);
            l.link_fixed.push(link.fixed_nominal);
            for &i in &link.members {
                l.link_members.push(i as u32);
                links_of[i].push(k as u32);
            }
            l.link_member_start.push(l.link_members.len() as u32);
        }
        l.signal_link_start.push(0);
        for links in links_of {
            l.signal_links.extend(links);
            l.signal_link_start.push(l.signal_links.len() as u32);
        }
        l
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_term_has_exactly_one_gradient_slot() {
        let ws =
            ns_translate::Workspace::from_json_str(include_str!("../../../examples/analysis.json"))
                .unwrap();
        let model =
            <ns_translate::HistFactoryModel as ns_translate::FromWorkspace>::from_workspace(
                &ws,
                &Default::default(),
            )
            .unwrap();
        let m = &model.compiled;
        let l = KernelLayout::new(m);
        let terms = m.scalar_factors.len()
            + m.histosys_param.len()
            + m.entry_factor_param.len()
            + m.gaussian.len()
            + m.poisson.len();
        assert_eq!(l.n_slots(), terms);
        let mut seen = l.param_slots.clone();
        seen.sort_unstable();
        assert_eq!(seen, (0..terms as u32).collect::<Vec<_>>());
        assert_eq!(l.bin_entries.len(), m.n_entries());
        assert_eq!(*l.bin_entry_start.last().unwrap() as usize, m.n_entries());
    }
}
