//! The HistFactory model as inference sees it: pyhf's parameter layout (names, parameter sets,
//! suggested init, bounds and fixed flags, the POI) beside the [`CompiledModel`] the evaluators
//! read. `ns-translate` builds it from a workspace; everything above it only reads it.

use crate::{CompiledModel, Error, Result};

/// How a parameter set is constrained.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Constraint {
    None,
    Gaussian,
    Poisson,
}

/// One named set of parameters (a scalar like `mu`, or one per bin like `staterror_SR`).
#[derive(Clone, Debug, PartialEq)]
pub struct ParameterSet {
    pub name: String,
    /// The modifier type that declared it first in pyhf's order.
    pub modifier_type: &'static str,
    /// Index of its first parameter in the model's parameter vector.
    pub offset: usize,
    pub n_parameters: usize,
    pub is_scalar: bool,
    pub constraint: Constraint,
    pub inits: Vec<f64>,
    pub bounds: Vec<(f64, f64)>,
    pub fixed: Vec<bool>,
    /// Auxiliary data of constrained sets.
    pub auxdata: Vec<f64>,
    /// Gaussian widths (1 unless configured; staterror: the relative MC uncertainty).
    pub sigmas: Vec<f64>,
    /// Poisson τ factors (shapesys).
    pub factors: Vec<f64>,
}

impl ParameterSet {
    /// The constraint width of parameter `i`: σ for Gaussian, 1/√τ for Poisson, `None` if free.
    pub fn prefit_width(&self, i: usize) -> Option<f64> {
        match self.constraint {
            Constraint::None => None,
            Constraint::Gaussian => Some(self.sigmas[i]),
            Constraint::Poisson => Some(1.0 / self.factors[i].sqrt()),
        }
    }

    /// The value parameter `i`'s constraint is centred on (what pulls are measured from, as in
    /// cabinetry): the auxiliary datum for Gaussian, aux/τ (1 for a shapesys γ) for Poisson,
    /// `None` if free.
    pub fn prefit_center(&self, i: usize) -> Option<f64> {
        match self.constraint {
            Constraint::None => None,
            Constraint::Gaussian => Some(self.auxdata[i]),
            Constraint::Poisson => Some(self.auxdata[i] / self.factors[i]),
        }
    }
}

/// A channel of the model: its bins occupy `bin_start..bin_start + n_bins` of the main data.
#[derive(Clone, Debug, PartialEq)]
pub struct ChannelInfo {
    pub name: String,
    pub n_bins: usize,
    pub bin_start: usize,
}

/// The position of `name` in `names`; an error for an unknown name, and for a name two
/// parameters share (it would address either), the message then ending with `clash`.
pub fn index_by_name(
    names: &[String],
    name: &str,
    clash: &str,
) -> std::result::Result<usize, String> {
    let mut hits = names
        .iter()
        .enumerate()
        .filter(|(_, n)| *n == name)
        .map(|(i, _)| i);
    match (hits.next(), hits.next()) {
        (Some(i), None) => Ok(i),
        (None, _) => Err(format!("unknown parameter '{name}' (see parameter_names)")),
        (Some(a), Some(b)) => Err(format!(
            "'{name}' names two parameters (positions {a} and {b} of parameter_names){clash}"
        )),
    }
}

/// A HistFactory model with pyhf's parameter layout, lowered into a [`CompiledModel`].
#[derive(Clone, Debug)]
pub struct HistFactoryModel {
    pub measurement: String,
    pub channels: Vec<ChannelInfo>,
    pub samples: Vec<String>,
    pub parameter_sets: Vec<ParameterSet>,
    pub par_names: Vec<String>,
    /// The measurement's POI name (it may not exist in a background-only workspace).
    pub poi_name: String,
    poi_index: Option<usize>,
    /// Parameters of interest the model declares beside its POI (a datacard's multiSignalModel
    /// maps, an HS3 analysis's list): each verb tests the POI and lets these float.
    other_pois: Vec<usize>,
    pub auxdata: Vec<f64>,
    pub compiled: CompiledModel,
    /// The sample of each block of `compiled.samples` (its channel follows from the block's bins).
    pub block_samples: Vec<String>,
    /// The workspace's observed main data in channel order, or why there are none (a channel
    /// without observations).
    pub observations: std::result::Result<Vec<f64>, String>,
}

impl HistFactoryModel {
    /// A model from its parts; parameter names, the POI index and the auxdata follow from the
    /// parameter sets (in order, each at its `offset`).
    pub fn new(
        measurement: String,
        channels: Vec<ChannelInfo>,
        samples: Vec<String>,
        parameter_sets: Vec<ParameterSet>,
        poi_name: String,
        compiled: CompiledModel,
        block_samples: Vec<String>,
    ) -> Self {
        let par_names = parameter_sets
            .iter()
            .flat_map(|s| {
                (0..s.n_parameters).map(move |i| {
                    if s.is_scalar {
                        s.name.clone()
                    } else {
                        format!("{}[{i}]", s.name)
                    }
                })
            })
            .collect();
        let poi_index = parameter_sets
            .iter()
            .find(|s| s.name == poi_name && s.n_parameters == 1)
            .map(|s| s.offset);
        let auxdata = parameter_sets
            .iter()
            .flat_map(|s| s.auxdata.iter().copied())
            .collect();
        HistFactoryModel {
            measurement,
            channels,
            samples,
            parameter_sets,
            par_names,
            poi_name,
            poi_index,
            other_pois: Vec::new(),
            auxdata,
            compiled,
            block_samples,
            observations: Err("the model was built without a workspace's observations".into()),
        }
    }

    /// The compiled sample block of `sample` in `channel`, if that channel has that sample.
    pub fn block_of(&self, channel: &str, sample: &str) -> Option<usize> {
        let c = self.channels.iter().find(|c| c.name == channel)?;
        self.compiled
            .samples
            .iter()
            .zip(&self.block_samples)
            .position(|(b, name)| b.bin_start as usize == c.bin_start && name == sample)
    }

    pub fn n_params(&self) -> usize {
        self.compiled.n_params
    }

    /// Index of the POI, or an error naming why there is none (e.g. a background-only workspace).
    pub fn poi(&self) -> Result<usize> {
        self.poi_index
            .ok_or_else(|| match self.parameter_set(&self.poi_name) {
                Some(set) => Error::InvalidModel(format!(
                    "the POI '{}' has {} components; only a single parameter can be the POI",
                    self.poi_name, set.n_parameters
                )),
                None => Error::InvalidModel(format!(
                    "measurement '{}' names the POI '{}', which is not a parameter of the model \
                 (a background-only workspace? apply a signal patch or a patchset patch)",
                    self.measurement, self.poi_name
                )),
            })
    }

    /// The POI index if the model has one.
    pub fn poi_index(&self) -> Option<usize> {
        self.poi_index
    }

    /// Make parameter set `name` the POI (pyhf's `config.set_poi`): a scalar set of the model.
    /// It replaces the POI; the other parameters of interest the model declares stay declared.
    pub fn set_poi(&mut self, name: &str) -> Result<()> {
        let index = self.scalar_poi(name)?;
        self.other_pois.retain(|&p| p != index);
        self.poi_index = Some(index);
        self.poi_name = name.to_string();
        Ok(())
    }

    /// The parameters of interest: the POI first, then the others the model declares.
    pub fn pois(&self) -> Vec<usize> {
        self.poi_index
            .into_iter()
            .chain(self.other_pois.iter().copied())
            .collect()
    }

    /// Declare `names` the parameters of interest, the first the POI each verb tests (each a
    /// scalar parameter set of the model, named once).
    pub fn set_pois(&mut self, names: &[&str]) -> Result<()> {
        let Some((first, _)) = names.split_first() else {
            return Err(Error::InvalidModel(
                "an empty list of parameters of interest".into(),
            ));
        };
        let mut indices: Vec<usize> = Vec::with_capacity(names.len());
        for name in names {
            let index = self.scalar_poi(name)?;
            if indices.contains(&index) {
                return Err(Error::InvalidModel(format!(
                    "the parameter of interest '{name}' is named twice"
                )));
            }
            indices.push(index);
        }
        self.poi_index = Some(indices[0]);
        self.poi_name = first.to_string();
        self.other_pois = indices.split_off(1);
        Ok(())
    }

    /// The index of parameter set `name` where it can be a POI: a scalar set of the model.
    fn scalar_poi(&self, name: &str) -> Result<usize> {
        let set = self.parameter_set(name).ok_or_else(|| {
            Error::InvalidModel(format!(
                "the POI '{name}' is not a parameter of the model (its parameters: {})",
                self.parameter_sets
                    .iter()
                    .map(|s| s.name.as_str())
                    .take(8)
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })?;
        if !set.is_scalar {
            return Err(Error::InvalidModel(format!(
                "the POI '{name}' has {} components; only a single parameter can be the POI",
                set.n_parameters
            )));
        }
        Ok(set.offset)
    }

    pub fn parameter_set(&self, name: &str) -> Option<&ParameterSet> {
        self.parameter_sets.iter().find(|s| s.name == name)
    }

    /// Index of a parameter by its `par_names` entry (`mu`, `staterror_SR[1]`).
    /// A name that two parameters share (a scalar parameter named like an element `uncorr[0]` of
    /// a vector parameter `uncorr`, which pyhf allows) is refused: it would address either.
    pub fn parameter_index(&self, name: &str) -> std::result::Result<usize, String> {
        index_by_name(
            &self.par_names,
            name,
            ": a parameter is named like an element of a vector parameter; rename one of the \
             modifiers (the rename operation) to address it",
        )
    }

    /// pyhf's `par_order`: the parameter-set names in order.
    pub fn par_order(&self) -> Vec<&str> {
        self.parameter_sets
            .iter()
            .map(|s| s.name.as_str())
            .collect()
    }

    pub fn suggested_init(&self) -> Vec<f64> {
        self.parameter_sets
            .iter()
            .flat_map(|s| s.inits.iter().copied())
            .collect()
    }

    pub fn suggested_bounds(&self) -> Vec<(f64, f64)> {
        self.parameter_sets
            .iter()
            .flat_map(|s| s.bounds.iter().copied())
            .collect()
    }

    pub fn suggested_fixed(&self) -> Vec<bool> {
        self.parameter_sets
            .iter()
            .flat_map(|s| s.fixed.iter().copied())
            .collect()
    }
}
