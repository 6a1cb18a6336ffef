//! The serialisable call: everything one inference run needs — the model, the request, the fit
//! options, the device and the data — as one JSON document. The CLI (`--save-call`, `nextstat
//! run`), the Python package and the HTTP server build and run this type; its rules live in
//! [`Call::validate`] and [`Call::prepare`] only, its defaults here only. The JSON Schema of the
//! type is committed as `docs/call.schema.json` (a test fails when it drifts).
//!
//! ```json
//! {"model": {"workspace": "analysis.json"},
//!  "request": {"verb": "hypotest", "mu": 1.0},
//!  "fit": {"tolerance": 1e-6, "fixed": {"bkg_norm": 0.5}},
//!  "device": "cpu", "data": "observed"}
//! ```

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use ns_compute::{Device, Likelihood, PreparedData};
use ns_core::{Error, Result};
use ns_source::ModelRef;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::request::{Outcome, Request};
use ns_inference::fit::{FitConfig, Fitter};
use ns_inference::params::{bounds_from_json, number_json, number_of, params_from_json, prefixed};

/// The convergence tolerance of every fit unless a call sets one (`ns_core::optim`).
pub const DEFAULT_TOLERANCE: f64 = ns_core::optim::DEFAULT_PG_TOL;

/// Most points of a scan grid (each point is one or more fits).
pub const MAX_GRID_POINTS: usize = 100_000;

/// One inference run, as JSON.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Call {
    /// The model; a front door that holds a loaded model (a Python `Model`) may leave it out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelRef>,
    pub request: Request,
    #[serde(default)]
    pub fit: FitOptions,
    /// cpu, cuda, cuda:N, cuda:N,M, cuda:all, vulkan, metal or auto.
    #[serde(default = "cpu")]
    pub device: String,
    #[serde(default)]
    pub data: DataChoice,
}

/// The device of a call unless asked.
pub const DEFAULT_DEVICE: &str = "cpu";

fn cpu() -> String {
    DEFAULT_DEVICE.into()
}

fn default_tolerance() -> f64 {
    DEFAULT_TOLERANCE
}

/// Starting point, box, fixed parameters and tolerance of every fit of a call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FitOptions {
    /// Convergence tolerance on the projected gradient of twice_nll: positive and finite.
    #[serde(default = "default_tolerance")]
    pub tolerance: f64,
    /// Starting values: a list in parameter order, or an object by parameter or group name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init: Option<Value>,
    /// Bounds: a list of `[low, high]` in parameter order, or an object mapping a parameter or
    /// group name to `[low, high]` (the others keep the model's); `null`: no bound on that side.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bounds: Option<Value>,
    /// Fixed parameters: a list of flags in parameter order (fixed at their starting values),
    /// or an object mapping a parameter name to the value it is fixed at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fixed: Option<Value>,
    /// The parameters of interest, by name (the model's when absent): the first is the one
    /// hypothesis tests, limits, scans and rankings test; the others float in every fit unless
    /// fixed. Each must be unconstrained (a normfactor, not a constrained nuisance parameter).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub poi: Option<Vec<String>>,
}

impl Default for FitOptions {
    fn default() -> Self {
        FitOptions {
            tolerance: DEFAULT_TOLERANCE,
            init: None,
            bounds: None,
            fixed: None,
            poi: None,
        }
    }
}

impl FitOptions {
    /// The options of a front door that holds them as plain lists (Python's `init_pars`,
    /// `par_bounds`, `fixed_params`).
    pub fn from_lists(
        tolerance: f64,
        init: Option<Vec<f64>>,
        bounds: Option<Vec<(f64, f64)>>,
        fixed: Option<Vec<bool>>,
    ) -> Self {
        let number = number_json;
        FitOptions {
            tolerance,
            init: init.map(|v| Value::Array(v.into_iter().map(number).collect())),
            bounds: bounds.map(|v| {
                Value::Array(
                    v.into_iter()
                        .map(|(lo, hi)| Value::Array(vec![number(lo), number(hi)]))
                        .collect(),
                )
            }),
            fixed: fixed.map(|v| Value::Array(v.into_iter().map(Value::Bool).collect())),
            poi: None,
        }
    }

    fn check_tolerance(&self) -> Result<()> {
        let tol = self.tolerance;
        if !(tol > 0.0 && tol.is_finite()) {
            return Err(Error::InvalidInput(format!(
                "tolerance {tol}: it must be a positive, finite number (default {DEFAULT_TOLERANCE:e})"
            )));
        }
        Ok(())
    }

    /// The fit configuration: the model's suggestion with this tolerance, starting values,
    /// bounds and fixed parameters (in that order, so that a parameter fixed by name is fixed at
    /// the value given, within the bounds given).
    pub fn config(&self, model: &dyn Likelihood) -> Result<FitConfig> {
        self.check_tolerance()?;
        let mut config = FitConfig::suggested(model);
        config.optimizer.pg_tol = self.tolerance;
        if let Some(init) = &self.init {
            config.init = params_from_json(model, init, &config.init)?;
        }
        if let Some(bounds) = &self.bounds {
            config.bounds = bounds_from_json(model, bounds, &config.bounds)?;
        }
        if let Some(fixed) = &self.fixed {
            apply_fixed(model, fixed, &mut config)?;
        }
        if self.poi.is_some() {
            config.poi = self.pois(model)?.first().copied();
        }
        Ok(config)
    }

    /// The parameters of interest of these fits: those the options name (each an unconstrained
    /// parameter of `model`, named once), else the model's; the first is the one tested.
    pub fn pois(&self, model: &dyn Likelihood) -> Result<Vec<usize>> {
        let Some(names) = &self.poi else {
            return Ok(model.pois());
        };
        if names.is_empty() {
            return Err(Error::InvalidInput(
                "poi: an empty list: name at least one parameter of interest, or leave poi out \
                 for the model's"
                    .into(),
            ));
        }
        let mut indices = Vec::with_capacity(names.len());
        for name in names {
            let index = model
                .parameter_index(name)
                .map_err(|e| prefixed("poi", Error::InvalidInput(e)))?;
            if let Some((centre, width)) = model.constraint(index) {
                return Err(Error::InvalidInput(format!(
                    "poi: '{name}' is a constrained nuisance parameter (its constraint is \
                     centred on {centre} with width {width}, from {}): a parameter of interest \
                     is unconstrained, as a normfactor is; to see the likelihood along it, scan \
                     it (scan --parameter {name})",
                    model.origin()
                )));
            }
            if indices.contains(&index) {
                return Err(Error::InvalidInput(format!("poi: '{name}' is named twice")));
            }
            indices.push(index);
        }
        Ok(indices)
    }
}

/// The dataset a call fits.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum DataChoice {
    /// The model's observations.
    #[default]
    Observed,
    /// These observations (the auxiliary data then come from the model), or these observations
    /// followed by the auxiliary data.
    Values(Vec<f64>),
    /// Asimov data generated at the conditional MLE for this POI value, on the observations.
    Asimov(f64),
}

/// A call's model-dependent parts, resolved: the fit configuration and the dataset.
pub struct Prepared {
    pub config: FitConfig,
    pub data: PreparedData,
}

impl Call {
    /// A call of `request` on `model` with every default.
    pub fn new(model: Option<ModelRef>, request: Request) -> Self {
        Call {
            model,
            request,
            fit: FitOptions::default(),
            device: cpu(),
            data: DataChoice::Observed,
        }
    }

    /// The call from its JSON, naming the place of the first problem.
    pub fn from_json(value: Value) -> Result<Self> {
        if !value.is_object() {
            return Err(Error::InvalidInput(format!(
                "a call is a JSON object with \"request\" (and \"model\", \"fit\", \"device\", \
                 \"data\"; docs/call.schema.json), not {}",
                match value {
                    Value::Array(_) => "an array",
                    Value::String(_) => "a string",
                    Value::Number(_) => "a number",
                    Value::Bool(_) => "a boolean",
                    _ => "null",
                }
            )));
        }
        serde_path_to_error::deserialize(value).map_err(|e| {
            let path = e.path().to_string();
            if path == "." {
                Error::InvalidInput(format!("call: {}", e.inner()))
            } else {
                Error::InvalidInput(format!("call: {path}: {}", e.inner()))
            }
        })
    }

    /// The call's JSON (what `--save-call` writes).
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// An error where the call holds a number JSON cannot carry (NaN or ±∞ in the request, where
    /// only finite numbers mean something): its JSON would not be this call.
    pub fn check_serialisable(&self) -> Result<()> {
        match Call::from_json(self.to_json()) {
            Ok(read_back) if read_back == *self => Ok(()),
            _ => Err(Error::InvalidInput(
                "the call holds a number that is not finite (NaN or infinity) where only finite \
                 ones mean something (mu, level, scan points, data): it cannot be saved"
                    .into(),
            )),
        }
    }

    /// The rules that need no model: tolerance, device, grids and request values.
    pub fn validate(&self) -> Result<Device> {
        self.fit.check_tolerance()?;
        let device = Device::from_name(&self.device)?;
        match &self.request {
            Request::UpperLimit {
                scan, n_toys, seed, ..
            } => {
                if let Some(grid) = scan {
                    check_grid("upper-limit scan", grid)?;
                }
                if n_toys.is_none() && *seed != 0 {
                    return Err(Error::InvalidInput(format!(
                        "seed {seed} without n_toys: a seed belongs to a toy-based limit"
                    )));
                }
            }
            Request::ProfileScan { values, grid, .. } => {
                if self.request.is_grid_scan()? {
                    for axis in grid {
                        check_grid("grid scan", axis)?;
                    }
                } else {
                    check_grid("profile scan", values)?;
                }
            }
            _ => {}
        }
        if let DataChoice::Asimov(mu) = self.data
            && !mu.is_finite()
        {
            return Err(Error::InvalidInput(format!(
                "Asimov data at POI value {mu}: it must be a finite number"
            )));
        }
        Ok(device)
    }

    /// The fit configuration and the dataset of this call on `model` (the data-only parts: no
    /// fit runs unless Asimov data are asked for, which `fitter` then fits).
    pub fn prepare(&self, model: &dyn Likelihood, fitter: &Fitter) -> Result<Prepared> {
        let config = self.fit_config(model)?;
        let data = match &self.data {
            DataChoice::Observed => model.observed()?,
            DataChoice::Values(values) => model.dataset(values)?,
            DataChoice::Asimov(mu) => {
                // Generated with the model's fixed parameters: the call's fixes apply to the
                // fits of the Asimov data, not to the fit that makes them.
                let unfixed = FitOptions {
                    fixed: None,
                    ..self.fit.clone()
                }
                .config(model)?;
                ns_inference::hypotest::asimov_data(fitter, *mu, &model.observed()?, &unfixed)?.0
            }
        };
        Ok(Prepared { config, data })
    }

    /// The JSON of `outcome`, this call's result on `model` ([`Outcome::report`]), naming the
    /// parameter of interest a test tested (`"poi"`) and giving a fit's parameters of interest
    /// with their best fits and uncertainties (`"pois"`).
    pub fn report(&self, outcome: &Outcome, model: &dyn Likelihood, matrices: bool) -> Value {
        let mut report = outcome.report(model, matrices);
        let names = model.parameter_names();
        let pois = self.fit.pois(model).unwrap_or_default();
        if let (Some(object), Some(&tested)) = (report.as_object_mut(), pois.first()) {
            if self.request.tests_poi() {
                object.insert("poi".into(), Value::from(names[tested].as_str()));
            }
            if let Outcome::Fit { fit, .. } = outcome {
                let entry = |&i: &usize| {
                    serde_json::json!({
                        "name": names[i],
                        "bestfit": number_json(fit.parameters[i]),
                        "uncertainty": fit.uncertainties.as_ref().map(|u| number_json(u[i])),
                    })
                };
                object.insert("pois".into(), pois.iter().map(entry).collect());
            }
        }
        report
    }

    /// The fit configuration of this call on `model` ([`FitOptions::config`]).
    pub fn fit_config(&self, model: &dyn Likelihood) -> Result<FitConfig> {
        self.fit.config(model)
    }

    /// Validate, prepare and run the call on `model` (the model this call names, loaded by the
    /// front door), stopping once `stop` is set; `progress` receives the steps done.
    pub fn run(
        &self,
        model: &dyn Likelihood,
        stop: Arc<AtomicBool>,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Outcome> {
        self.run_on(&self.open(model, stop)?, progress)
    }

    /// The fitter this call runs with on `model`, on the device it names (`auto` weighed for
    /// its workload: [`Fitter::auto_choice`] says what it chose), stopping once `stop` is set.
    pub fn open<'m>(&self, model: &'m dyn Likelihood, stop: Arc<AtomicBool>) -> Result<Fitter<'m>> {
        let device = self.validate()?;
        Ok(Fitter::on_device(model, device, self.request.workload(model))?.with_interrupt(stop))
    }

    /// Validate, prepare and run the call with an open `fitter` (of the call's model, on the
    /// device it names: a front door that keeps device sessions open between calls).
    pub fn run_on(&self, fitter: &Fitter, progress: &(dyn Fn(usize) + Sync)) -> Result<Outcome> {
        self.validate()?;
        let Prepared { config, data } = self.prepare_on(fitter)?;
        self.request.run(fitter, &data, &config, progress)
    }

    /// [`prepare`](Self::prepare) for a run on `fitter`: Asimov data's own fit runs on the CPU,
    /// as a single fit would.
    pub(crate) fn prepare_on(&self, fitter: &Fitter) -> Result<Prepared> {
        let model = fitter.model();
        if matches!(self.data, DataChoice::Asimov(_)) {
            self.prepare(
                model,
                &Fitter::new(model).with_interrupt(fitter.interrupt().clone()),
            )
        } else {
            self.prepare(model, fitter)
        }
    }
}

/// A grid of at most [`MAX_GRID_POINTS`] finite values.
fn check_grid(what: &str, grid: &[f64]) -> Result<()> {
    if grid.is_empty() || grid.len() > MAX_GRID_POINTS {
        return Err(Error::InvalidInput(format!(
            "the {what} has {} points: give from 1 to {MAX_GRID_POINTS}",
            grid.len()
        )));
    }
    if let Some(v) = grid.iter().find(|v| !v.is_finite()) {
        return Err(Error::InvalidInput(format!(
            "the {what} holds {v}: every point must be a finite number"
        )));
    }
    Ok(())
}

/// `count` evenly spaced values from `start` to `stop` (numpy's linspace), `count` a whole
/// number from 2 to [`MAX_GRID_POINTS`].
pub fn linspace(start: f64, stop: f64, count: f64) -> Result<Vec<f64>> {
    if !((2.0..=MAX_GRID_POINTS as f64).contains(&count) && count.fract() == 0.0) {
        return Err(Error::InvalidInput(format!(
            "START STOP COUNT: COUNT must be a whole number from 2 to {MAX_GRID_POINTS}, not {count}"
        )));
    }
    if !(start.is_finite() && stop.is_finite()) {
        return Err(Error::InvalidInput(format!(
            "START STOP COUNT: START and STOP must be finite numbers, not {start} and {stop}"
        )));
    }
    let n = count as usize;
    Ok((0..n)
        .map(|i| start + (stop - start) * i as f64 / (n - 1) as f64)
        .collect())
}

/// Fixed parameters by position (flags: fixed at their starting values) or by name (fixed at
/// the value given).
fn apply_fixed(model: &dyn Likelihood, fixed: &Value, config: &mut FitConfig) -> Result<()> {
    let n = model.n_params();
    match fixed {
        Value::Array(items) => {
            if items.len() != n {
                return Err(Error::InvalidInput(format!(
                    "fixed has {} entries but the model has {n} parameters",
                    items.len()
                )));
            }
            for (i, item) in items.iter().enumerate() {
                config.fixed[i] = item.as_bool().ok_or_else(|| {
                    Error::InvalidInput(format!(
                        "fixed[{i}] ('{}') must be true or false, not {item}",
                        model.parameter_names()[i]
                    ))
                })?;
            }
        }
        Value::Object(map) => {
            for (name, item) in map {
                let index = model
                    .parameter_index(name)
                    .map_err(|e| prefixed("fixed", Error::InvalidInput(e)))?;
                // NaN and ±inf (as "NaN", "inf", "-inf") reach the fit's own check.
                let value = number_of(item, None).ok_or_else(|| {
                    Error::InvalidInput(format!("fixed {name}: '{item}' is not a number"))
                })?;
                *config = config.with_fixed(index, value);
            }
        }
        other => {
            return Err(Error::InvalidInput(format!(
                "fixed must be a list of flags or an object by parameter name, not {other}"
            )));
        }
    }
    Ok(())
}
