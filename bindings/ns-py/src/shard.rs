//! Sharded work from Python (`nextstat.distributed`): a shard's part of a call's job on a loaded
//! model, a shard's part of a patchset grid, and the merge of parts (`ns_api::shard`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use ns_api::grid::Grid;
use ns_api::shard::{Shard, check_share};
use ns_source::{ModelRef, PyhfRef, Source};
use pyo3::prelude::*;
use serde_json::Value;

use crate::infer::{call_of, run_cancellable};
use crate::model::PyModel;
use crate::unbinned::PyUnbinnedModel;
use crate::{InvalidInputError, invalid, to_py};

fn parsed(text: &str, what: &str) -> PyResult<Value> {
    serde_json::from_str(text).map_err(|e| InvalidInputError::new_err(format!("{what}: {e}")))
}

/// Run `work` with a stop flag that Ctrl-C or `cancelled()` sets (`run_cancellable`).
fn stoppable(
    py: Python<'_>,
    cancelled: Option<&Bound<'_, PyAny>>,
    work: impl FnOnce(Arc<AtomicBool>) -> crate::NsResult<String> + Send,
) -> PyResult<String> {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    run_cancellable(
        py,
        None,
        &|| stop.store(true, Ordering::Relaxed),
        cancelled,
        move || work(flag),
    )
}

/// What the front ends add to a result of an unbinned model (its flows); none for a binned one.
type Annotate<'a> = Box<dyn Fn(&mut serde_json::Value) + Sync + 'a>;

/// The likelihood, the model reference (for the job's digest) and the annotation of a Python
/// model.
fn model_of<'a>(
    model: &'a Bound<'_, PyAny>,
) -> PyResult<(&'a dyn ns_compute::Likelihood, ModelRef, Annotate<'a>)> {
    if let Ok(m) = model.cast::<PyModel>() {
        let m = m.get();
        let source = m.source.as_ref().ok_or_else(|| {
            InvalidInputError::new_err(
                "this model was not built from a workspace, so its parts cannot name it",
            )
        })?;
        return Ok((&m.model, source.model_ref(), Box::new(|_| {})));
    }
    if let Ok(m) = model.cast::<crate::joint::PyJointModel>() {
        let m = m.get();
        return Ok((m.model.as_ref(), m.source.clone(), Box::new(|_| {})));
    }
    if let Ok(m) = model.cast::<PyUnbinnedModel>() {
        let m = m.get();
        let unbinned = m.model.as_ref();
        return Ok((
            unbinned,
            m.source.clone(),
            Box::new(move |report| ns_source::annotate_unbinned(unbinned, report)),
        ));
    }
    Err(pyo3::exceptions::PyTypeError::new_err(
        "model must be a nextstat Model, UnbinnedModel or JointModel",
    ))
}

/// Shard `index` of `count` of a call (JSON, without its model: the model is `model`): the part
/// document as JSON. `cancelled`, a callable asked while the shard runs, stops it when true.
#[pyfunction]
#[pyo3(signature = (model, call, index, count, cancelled=None))]
pub(crate) fn run_part(
    py: Python<'_>,
    model: &Bound<'_, PyAny>,
    call: &str,
    index: usize,
    count: usize,
    cancelled: Option<Bound<'_, PyAny>>,
) -> PyResult<String> {
    let call = call_of(call)?;
    let shard = Shard::new(index, count).map_err(to_py)?;
    let (likelihood, model_ref, annotate) = model_of(model)?;
    stoppable(py, cancelled.as_ref(), |stop| {
        let document = ns_api::shard::shard_part(
            &call,
            likelihood,
            model_ref.digest(&ns_source::Files)?,
            shard,
            Some(stop),
            &|_, _| {},
            &|document| annotate(document),
        )?;
        Ok(document.to_string())
    })
}

/// Shard `index` of `count` of a patchset grid: every patch of the share applied to the
/// background (JSON texts), the call (JSON, an upper limit or a hypotest, without its model) run
/// on each. The part document as JSON.
#[pyfunction]
#[pyo3(signature = (background, patchset, call, index, count, skip_verify=false, measurement=None, cancelled=None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_grid_part(
    py: Python<'_>,
    background: &str,
    patchset: &str,
    call: &str,
    index: usize,
    count: usize,
    skip_verify: bool,
    measurement: Option<String>,
    cancelled: Option<Bound<'_, PyAny>>,
) -> PyResult<String> {
    let mut template = call_of(call)?;
    let shard = Shard::new(index, count).map_err(to_py)?;
    let background = parsed(background, "background")?;
    let patchset_value = parsed(patchset, "patchset")?;
    let patchset =
        ns_translate::patch::PatchSet::from_value(patchset_value.clone()).map_err(to_py)?;
    if !skip_verify {
        patchset.verify(&background).map_err(|e| {
            to_py(invalid(format!(
                "{e}; skip_verify=True applies its patches anyway"
            )))
        })?;
    }
    template.model = Some(ModelRef::ByContent(PyhfRef {
        workspace: Source::Inline(background.clone()),
        measurement,
        ..PyhfRef::file("")
    }));
    stoppable(py, cancelled.as_ref(), |stop| {
        let grid = Grid {
            background: &background,
            patchset: &patchset,
            template: &template,
        };
        grid.check()?;
        let digest = template
            .model
            .as_ref()
            .expect("set above")
            .digest(&ns_source::Files)?;
        let job = grid.job(digest, &patchset_value, count)?;
        let share = check_share(shard, patchset.patches.len(), "signal points")?;
        let part = grid.run_part(share, &ns_source::Files, &stop, &|_| {})?;
        Ok(job.partial(shard, part).to_string())
    })
}

/// The result of a sharded job from its parts (`(name, JSON text)` pairs, any order), as JSON.
#[pyfunction]
pub(crate) fn merge_parts(parts: Vec<(String, String)>) -> PyResult<String> {
    let docs = parts
        .iter()
        .map(|(name, text)| Ok((name.clone(), parsed(text, name)?)))
        .collect::<PyResult<Vec<_>>>()?;
    ns_api::shard::merge(&docs)
        .map(|v| v.to_string())
        .map_err(to_py)
}

/// The model a call's `"model"` names (JSON of `ns_source::ModelRef`, the workspace inline or
/// a path), loaded: a `Model` or an `UnbinnedModel`. How a worker builds the model a job ships.
#[pyfunction]
pub(crate) fn load_model_ref(py: Python<'_>, text: &str) -> PyResult<Py<PyAny>> {
    let model_ref: ModelRef = serde_json::from_str(text)
        .map_err(|e| InvalidInputError::new_err(format!("model reference: {e}")))?;
    match model_ref.load_model(&ns_source::Files).map_err(to_py)? {
        ns_source::LoadedModel::Binned {
            workspace, model, ..
        } => {
            // The measurement and codes the model was built with, whatever its format.
            let (measurement, interpolation) = model_ref.identity();
            let source = workspace.map(|workspace| crate::model::ModelSource {
                workspace: Arc::from(workspace),
                measurement: measurement.map(String::from),
                interpolation,
            });
            Ok(Py::new(
                py,
                PyModel {
                    model: *model,
                    source,
                },
            )?
            .into_any())
        }
        ns_source::LoadedModel::Joint(model) => Ok(Py::new(
            py,
            crate::joint::PyJointModel {
                model: Arc::from(model),
                source: model_ref,
            },
        )?
        .into_any()),
        ns_source::LoadedModel::Unbinned(model) => Ok(Py::new(
            py,
            PyUnbinnedModel {
                model: Arc::from(model),
                source: model_ref,
            },
        )?
        .into_any()),
    }
}

/// How many units (toys, scan values, ranked parameters, μ values) a call's work on `model`
/// splits into: what a shard count is sized by.
#[pyfunction]
pub(crate) fn shard_units(model: &Bound<'_, PyAny>, call: &str) -> PyResult<usize> {
    let call = call_of(call)?;
    let (likelihood, _, _) = model_of(model)?;
    ns_api::shard::units(&call, likelihood).map_err(to_py)
}
