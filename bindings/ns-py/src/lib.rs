//! `nextstat._core`: the Rust engine for Python. Thin by design — it converts arguments, releases
//! the GIL around every computation and returns results as the JSON documents of
//! `ns_api::report` (the CLI's key names); `python/nextstat` builds the typed result
//! objects and the pyhf-compatible `nextstat.infer` on top.

mod differentiable;
mod flow;
mod infer;
mod joint;
mod model;
mod reduce;
mod shard;
mod unbinned;
mod workspace;

use pyo3::create_exception;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

create_exception!(
    nextstat,
    NextStatError,
    PyValueError,
    "An error from the nextstat engine: the message says what is wrong and where."
);
create_exception!(
    nextstat,
    InvalidInputError,
    NextStatError,
    "The request cannot be answered as given: a malformed workspace, patch or argument, or a \
     model whose likelihood is undefined. Fix the input."
);
create_exception!(
    nextstat,
    ComputationError,
    NextStatError,
    "A valid request whose computation failed: a GPU error, or fits that failed everywhere."
);

pub(crate) fn to_py(e: ns_core::Error) -> PyErr {
    match e {
        ns_core::Error::Interrupted => {
            pyo3::exceptions::PyKeyboardInterrupt::new_err(e.to_string())
        }
        ns_core::Error::Device(_) | ns_core::Error::Computation(_) => {
            ComputationError::new_err(e.to_string())
        }
        _ => InvalidInputError::new_err(e.to_string()),
    }
}

pub(crate) type NsResult<T> = std::result::Result<T, ns_core::Error>;

pub(crate) fn invalid(message: String) -> ns_core::Error {
    ns_core::Error::InvalidInput(message)
}

/// Whether a CUDA driver and device are present (never raises).
#[pyfunction]
fn has_cuda() -> bool {
    ns_compute::cuda::has_cuda()
}

/// A HistFactory combination XML and its ROOT files as a workspace (JSON): with `semantics`
/// "pyhf" as `pyhf.readxml.parse(top, base_dir)` gives it, with "root" the model ROOT's
/// hist2workspace builds; `base_dir` `None`: the XML's folder or the nearest folder above it
/// from which its first channel is found.
#[pyfunction]
#[pyo3(signature = (top, base_dir=None, semantics="pyhf"))]
fn readxml(
    top: std::path::PathBuf,
    base_dir: Option<std::path::PathBuf>,
    semantics: &str,
) -> PyResult<String> {
    let semantics = ns_xml::Semantics::from_name(semantics).map_err(to_py)?;
    let workspace =
        ns_xml::workspace_of_files(&top, base_dir.as_deref(), semantics).map_err(to_py)?;
    Ok(workspace.to_string())
}

/// The verb registry (`ns_api::verbs`) as JSON: each verb's `name` (the call's `request.verb`),
/// `route` (CLI subcommand, server path), `summary` and Python `result` class.
#[pyfunction]
fn verbs() -> String {
    let verbs: Vec<_> = ns_api::verbs::VERBS
        .iter()
        .map(|v| {
            serde_json::json!({"name": v.name, "route": v.route, "summary": v.summary,
                               "result": v.result})
        })
        .collect();
    serde_json::Value::from(verbs).to_string()
}

/// What this build is (version, git commit, backends, embedded CUDA architectures), as JSON.
#[pyfunction]
fn build_info() -> String {
    serde_json::json!(ns_build_info::BuildInfo::current(env!("CARGO_PKG_VERSION"))).to_string()
}

/// Whether a Metal adapter is present (never raises).
#[pyfunction]
fn has_metal() -> bool {
    // Only Apple systems have Metal: elsewhere the answer needs no adapter enumeration, which
    // would load the Vulkan drivers (lavapipe brings its own LLVM, and a process that also holds
    // ROOT's and XLA's was seen to abort there in the test suite).
    cfg!(target_vendor = "apple")
        && ns_compute::wgpu::adapters()
            .iter()
            .any(|a| a.backend == "metal")
}

/// The figure of `kind` from a result's JSON text and the options as JSON text.
fn figure_of(kind: &str, result: &str, options: &str) -> PyResult<ns_plot::Figure> {
    let result: serde_json::Value = serde_json::from_str(result)
        .map_err(|e| InvalidInputError::new_err(format!("the result is not JSON: {e}")))?;
    let options: ns_plot::Options = serde_json::from_str(options)
        .map_err(|e| InvalidInputError::new_err(format!("plot options: {e}")))?;
    ns_plot::figure(kind, &result, &options).map_err(to_py)
}

/// What a figure of `kind` shows: the content `nextstat plot` draws, as JSON text
/// (`nextstat.plot` draws it with matplotlib).
#[pyfunction]
fn plot_figure(kind: &str, result: &str, options: &str) -> PyResult<String> {
    let figure = figure_of(kind, result, options)?;
    serde_json::to_string(&figure).map_err(|e| NextStatError::new_err(e.to_string()))
}

/// The figure drawn by nextstat's own renderer (the CLI's), written to `path` (.svg, .png or
/// .pdf); its size in pixels.
#[pyfunction]
fn plot_file(
    kind: &str,
    result: &str,
    options: &str,
    path: std::path::PathBuf,
) -> PyResult<(u32, u32)> {
    let figure = figure_of(kind, result, options)?;
    let format = ns_plot::Format::of_path(&path).map_err(to_py)?;
    let (bytes, size) = ns_plot::encode(&figure, format).map_err(to_py)?;
    std::fs::write(&path, bytes)
        .map_err(|e| InvalidInputError::new_err(format!("{}: {e}", path.display())))?;
    Ok(size)
}

/// The compute devices of this machine as JSON text (`nextstat devices --json`).
#[pyfunction]
fn devices() -> String {
    ns_api::report::devices(&ns_compute::Inventory::probe()).to_string()
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // The engine's environment settings, read once at import.
    ns_core::settings::install(ns_core::settings::Settings::from_environment());
    m.add("NextStatError", m.py().get_type::<NextStatError>())?;
    m.add("InvalidInputError", m.py().get_type::<InvalidInputError>())?;
    m.add("ComputationError", m.py().get_type::<ComputationError>())?;
    m.add_class::<workspace::PyWorkspace>()?;
    m.add_class::<model::PyModel>()?;
    m.add_class::<unbinned::PyUnbinnedModel>()?;
    m.add_class::<joint::PyJointModel>()?;
    m.add_class::<flow::PyFlow>()?;
    m.add_class::<differentiable::PyDifferentiable>()?;
    for f in [
        wrap_pyfunction!(infer::infer, m)?,
        wrap_pyfunction!(verbs, m)?,
        wrap_pyfunction!(readxml, m)?,
        wrap_pyfunction!(unbinned::load_unbinned, m)?,
        wrap_pyfunction!(flow::load_flow, m)?,
        wrap_pyfunction!(reduce::mixture_nll_host, m)?,
        wrap_pyfunction!(reduce::mixture_nll_device, m)?,
        wrap_pyfunction!(infer::call_json, m)?,
        wrap_pyfunction!(infer::run_call, m)?,
        wrap_pyfunction!(has_cuda, m)?,
        wrap_pyfunction!(build_info, m)?,
        wrap_pyfunction!(has_metal, m)?,
        wrap_pyfunction!(devices, m)?,
        wrap_pyfunction!(plot_figure, m)?,
        wrap_pyfunction!(plot_file, m)?,
        wrap_pyfunction!(workspace::verify_patchset, m)?,
        wrap_pyfunction!(shard::run_part, m)?,
        wrap_pyfunction!(shard::run_grid_part, m)?,
        wrap_pyfunction!(shard::merge_parts, m)?,
        wrap_pyfunction!(shard::load_model_ref, m)?,
        wrap_pyfunction!(shard::shard_units, m)?,
    ] {
        m.add_function(f)?;
    }
    Ok(())
}
