//! The HistFactory model as a [`Likelihood`]: pyhf's parameter layout over the compiled model,
//! binned datasets (main bin counts + auxiliary data), the backends of [`crate::backend::open`],
//! toys from [`ToyEnsembleRates`], and the bin coupling of its parameters.

use ns_core::{Constraint, Error, HistFactoryModel, Result};

use crate::backend::{Backend, SampledToys};
use crate::cpu::{CpuEvaluator, Scratch};
use crate::data::{MAX_COUNT, PreparedData};
use crate::device::{Device, Workload};
use crate::likelihood::{ChannelYields, Likelihood, NegativeEmptyBins, Reach, Saturated};
use crate::toys::ToyEnsembleRates;

/// Events below zero past which an empty bin under ROOT's semantics has broken through its
/// wall ([`crate::poisson::EMPTY_BIN_WALL`]): fits that end on the wall stay far closer.
const WALL_BREACH: f64 = 1e-3;

impl Likelihood for HistFactoryModel {
    fn parameter_names(&self) -> &[String] {
        &self.par_names
    }

    fn n_params(&self) -> usize {
        self.compiled.n_params
    }

    fn origin(&self) -> String {
        format!("measurement '{}'", self.measurement)
    }

    fn suggested_init(&self) -> Vec<f64> {
        HistFactoryModel::suggested_init(self)
    }

    fn suggested_bounds(&self) -> Vec<(f64, f64)> {
        HistFactoryModel::suggested_bounds(self)
    }

    fn suggested_fixed(&self) -> Vec<bool> {
        HistFactoryModel::suggested_fixed(self)
    }

    fn poi(&self) -> Result<usize> {
        HistFactoryModel::poi(self)
    }

    fn poi_index(&self) -> Option<usize> {
        HistFactoryModel::poi_index(self)
    }

    fn pois(&self) -> Vec<usize> {
        HistFactoryModel::pois(self)
    }

    fn parameter_index(&self, name: &str) -> std::result::Result<usize, String> {
        HistFactoryModel::parameter_index(self, name)
    }

    fn parameter_groups(&self) -> Vec<(String, std::ops::Range<usize>)> {
        self.parameter_sets
            .iter()
            .map(|s| (s.name.clone(), s.offset..s.offset + s.n_parameters))
            .collect()
    }

    fn constraint(&self, index: usize) -> Option<(f64, f64)> {
        let set = self
            .parameter_sets
            .iter()
            .find(|s| (s.offset..s.offset + s.n_parameters).contains(&index))?;
        let i = index - set.offset;
        Some((set.prefit_center(i)?, set.prefit_width(i)?))
    }

    fn parameter_kind(&self, index: usize) -> &str {
        self.parameter_sets
            .iter()
            .find(|s| (s.offset..s.offset + s.n_parameters).contains(&index))
            .map_or("free", |s| s.modifier_type)
    }

    fn sample_yields(&self, params: &[f64]) -> Result<Vec<ChannelYields>> {
        let m = &self.compiled;
        let entries = CpuEvaluator::new(m).entry_yields(params, &mut Scratch::new(m))?;
        let observed = self.observations.as_ref().ok();
        Ok(self
            .channels
            .iter()
            .map(|c| {
                let bins = c.bin_start..c.bin_start + c.n_bins;
                let samples = self
                    .samples
                    .iter()
                    .filter_map(|name| {
                        // A block starts at its channel's first bin and covers its bins.
                        let block = &m.samples[self.block_of(&c.name, name)?];
                        let e0 = block.entry_start as usize;
                        Some((name.clone(), entries[e0..e0 + c.n_bins].to_vec()))
                    })
                    .collect();
                ChannelYields {
                    channel: c.name.clone(),
                    observed: observed.map(|o| o[bins].to_vec()),
                    samples,
                }
            })
            .collect())
    }

    fn observed(&self) -> Result<PreparedData> {
        let main = self
            .observations
            .clone()
            .map_err(|why| Error::InvalidWorkspace(format!("{}: {why}", self.origin())))?;
        PreparedData::new(&self.compiled, main, self.auxdata.clone())
    }

    fn dataset(&self, values: &[f64]) -> Result<PreparedData> {
        if values.len() == self.compiled.n_main {
            PreparedData::new(&self.compiled, values.to_vec(), self.auxdata.clone())
        } else {
            PreparedData::from_full(&self.compiled, values)
        }
    }

    fn asimov(&self, params: &[f64]) -> Result<PreparedData> {
        let (main, aux) = self.expected(params)?;
        PreparedData::new(&self.compiled, main, aux)
    }

    fn expected(&self, params: &[f64]) -> Result<(Vec<f64>, Vec<f64>)> {
        CpuEvaluator::new(&self.compiled).expected_data(params, &mut Scratch::new(&self.compiled))
    }

    fn analytic_parameters(&self) -> Vec<usize> {
        self.compiled.analytic_parameters()
    }

    fn profile_analytic(&self, params: &mut [f64], data: &PreparedData) -> Result<()> {
        if self.compiled.bin_stats.is_empty() {
            return Ok(());
        }
        CpuEvaluator::new(&self.compiled).profile_analytic(
            params,
            data,
            &mut Scratch::new(&self.compiled),
        )
    }

    fn negative_empty_bins(
        &self,
        params: &[f64],
        data: &PreparedData,
    ) -> Option<NegativeEmptyBins> {
        // Empty bins are rare: most datasets have none, and then nothing is evaluated.
        if !data.main.contains(&0.0) {
            return None;
        }
        // Where yields are clipped (ROOT's semantics) an empty bin's term has a wall below zero
        // (`poisson::walled_empty_bin`) that a fit ends on, within far less than this; a bin
        // further below has broken through it (the rest of the likelihood gains more than the
        // wall's 10⁶ per event).
        let below = if self.compiled.clip_sample_yields {
            -WALL_BREACH
        } else {
            0.0
        };
        let (expected, _) = self.expected(params).ok()?;
        let negative = || {
            expected
                .iter()
                .zip(&data.main)
                .enumerate()
                .filter(|(_, (lambda, n))| **n == 0.0 && **lambda < below)
                .map(|(bin, (&lambda, _))| (bin, lambda))
        };
        let first = negative().next()?;
        Some(NegativeEmptyBins {
            first,
            gain: -2.0 * negative().map(|(_, lambda)| lambda).sum::<f64>(),
        })
    }

    fn sample_toys(
        &self,
        backend: &dyn Backend,
        ensembles: &[(&[f64], u32)],
        seed: u64,
        first: u32,
        n_toys: usize,
    ) -> Result<SampledToys> {
        let rates = ensembles
            .iter()
            .map(|&(params, stream)| ToyEnsembleRates::at(&self.compiled, params, stream))
            .collect::<Result<Vec<_>>>()?;
        backend.sample_toys(&self.compiled, &rates, seed, first, n_toys)
    }

    fn dataset_size(&self) -> usize {
        self.compiled.n_main + self.compiled.n_aux
    }

    fn open(&self, device: Device) -> Result<Box<dyn Backend + '_>> {
        crate::backend::open(device, &self.compiled)
    }

    fn held_at_kinks(&self, params: &[f64]) -> Result<bool> {
        CpuEvaluator::new(&self.compiled).held_at_kinks(params, &mut Scratch::new(&self.compiled))
    }

    fn open_smoothed(&self, width: f64) -> Option<Box<dyn Backend + '_>> {
        crate::CpuEvaluator::has_smoothable_kinks(&self.compiled).then(|| {
            Box::new(
                crate::cpu::CpuBackend::new(&self.compiled)
                    .profiled()
                    .smoothed(width),
            ) as Box<dyn Backend + '_>
        })
    }

    fn open_for_fits(&self, device: Device) -> Result<Box<dyn Backend + '_>> {
        crate::backend::open_for(device, &self.compiled, crate::backend::Objective::Profiled)
    }

    fn worth_a_gpu(&self, workload: Workload) -> bool {
        Device::worth_weighing(&self.compiled, workload)
    }

    /// A parameter couples to another only through a main bin both act on: constraint terms
    /// hold one parameter each.
    fn reach(&self) -> Option<Vec<Reach>> {
        let model = &self.compiled;
        let mut reach = vec![Reach::Nothing; model.n_params];
        let mut touch = |p: usize, bin: usize| {
            reach[p] = match reach[p] {
                Reach::Nothing => Reach::One(bin),
                Reach::One(b) if b == bin => Reach::One(b),
                _ => Reach::Several,
            };
        };
        for block in &model.samples {
            let (b0, n, e0) = (
                block.bin_start as usize,
                block.n_bins as usize,
                block.entry_start as usize,
            );
            let block_params = model.scalar_factors
                [block.scalar_start as usize..block.scalar_end as usize]
                .iter()
                .map(|f| f.param as usize)
                .chain(
                    model.histosys_param
                        [block.histosys_start as usize..block.histosys_end as usize]
                        .iter()
                        .map(|&p| p as usize),
                );
            for p in block_params {
                for bin in b0..b0 + n {
                    touch(p, bin);
                }
            }
            for i in 0..n {
                let e = e0 + i;
                for &p in model.entry_factor_params(e) {
                    touch(p as usize, b0 + i);
                }
            }
        }
        Some(reach)
    }

    /// Poisson(n | n) in every bin and every constraint at its maximum: the data-only constant
    /// itself. ndof: main bins minus free unconstrained parameters (cabinetry's definition).
    fn saturated(&self, data: &PreparedData, fixed: &[bool]) -> Result<Saturated> {
        let unconstrained_free = self
            .parameter_sets
            .iter()
            .filter(|s| s.constraint == Constraint::None)
            .map(|s| {
                (0..s.n_parameters)
                    .filter(|&i| !fixed[s.offset + i])
                    .count()
            })
            .sum::<usize>();
        Ok(Saturated {
            twice_nll: 2.0 * data.constant,
            ndof: self.compiled.n_main.saturating_sub(unconstrained_free),
        })
    }

    /// The first main bin (channel and bin index) whose Poisson term is undefined, else a
    /// constraint term.
    fn where_undefined(&self, params: &[f64], data: &PreparedData) -> Option<String> {
        let expected = self.expected(params).map(|(main, _)| main).ok()?;
        let Some(bin) = expected.iter().zip(&data.main).position(|(&lambda, &n)| {
            !(lambda <= MAX_COUNT) || lambda < 0.0 || (lambda == 0.0 && n > 0.0)
        }) else {
            return Some("a constraint term is not finite".into());
        };
        Some(
            match self
                .channels
                .iter()
                .find(|c| (c.bin_start..c.bin_start + c.n_bins).contains(&bin))
            {
                Some(c) => format!(
                    "channel '{}' bin {} expects {} events and observes {}",
                    c.name,
                    bin - c.bin_start,
                    count(expected[bin]),
                    count(data.main[bin])
                ),
                None => format!("main bin {bin} expects {}", count(expected[bin])),
            },
        )
    }

    fn settings(&self) -> Vec<(&'static str, String)> {
        let mut settings = vec![("interp_codes", self.compiled.codes.to_string())];
        if self.compiled.clip_sample_yields {
            // Every output that names the model's settings says its yields are ROOT's.
            settings.push(("sample_yields", "clipped at zero (ROOT)".into()));
        }
        settings
    }
}

/// A count for a message: plain where short, in exponent form where huge or tiny, and said to
/// overflow where it passes what the likelihood's arithmetic holds.
fn count(v: f64) -> String {
    if v.is_infinite() || v > MAX_COUNT {
        format!("{v:e} (beyond f64's range for a likelihood: at most {MAX_COUNT:e})")
    } else if v != 0.0 && !(1e-3..1e6).contains(&v.abs()) {
        format!("{v:e}")
    } else {
        format!("{v}")
    }
}
