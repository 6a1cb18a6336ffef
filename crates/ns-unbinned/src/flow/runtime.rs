//! ONNX Runtime, loaded at run time from the library the settings name (the PyPI `onnxruntime`
//! wheel's `capi/libonnxruntime.so.*`), and ONNX models run on the configured execution
//! providers: each provider of the order is tried in turn (TensorRT, CUDA, CPU); one that cannot
//! register or build the session is skipped with its reason recorded, and the CPU provider is
//! always the last resort.

use std::path::Path;
use std::sync::{Mutex, OnceLock};

use ns_core::{Error, Result};
use ort::environment::Environment;
use ort::ep;
use ort::session::Session;
use ort::value::{Tensor, TensorElementType, ValueType};
use rayon::prelude::*;

/// Events per ONNX Runtime call on the CPU provider: calls run in parallel, one session per
/// thread (ONNX Runtime spreads a small flow's element-wise operators badly over threads). A
/// fixed size, so that events are batched the same way on any thread count.
pub const CPU_EVENTS_PER_RUN: usize = 16_384;

/// Events per call on a GPU provider (one session): bounds the memory of a call's activations.
pub const GPU_EVENTS_PER_RUN: usize = 1 << 20;

fn environment() -> Result<&'static Environment> {
    static ENV: OnceLock<std::result::Result<Environment, String>> = OnceLock::new();
    ENV.get_or_init(|| {
        let settings = ns_core::settings::settings();
        let path = settings.onnxruntime.as_ref().ok_or_else(|| {
            "ONNX Runtime was not found: flow PDFs need the library of the PyPI 'onnxruntime' package (pip install onnxruntime); set ORT_DYLIB_PATH to its capi/libonnxruntime.so.* (or run inside the virtual environment that has it)".to_string()
        })?;
        if path.is_dir() {
            return Err(format!(
                "ONNX Runtime's library {} is a folder (ORT_DYLIB_PATH): name the library file in it, capi/libonnxruntime.so.*",
                path.display()
            ));
        }
        if !path.is_file() {
            return Err(format!(
                "ONNX Runtime's library {} does not exist (ORT_DYLIB_PATH)",
                path.display()
            ));
        }
        ort::init_from(path)
            .map_err(|e| format!("cannot load ONNX Runtime from {}: {e}", path.display()))?
            .with_name("nextstat")
            .build()
            .map_err(|e| format!("cannot start ONNX Runtime from {}: {e}", path.display()))
    })
    .as_ref()
    .map_err(|e| Error::Computation(e.clone()))
}

/// Element type of a model's floating-point inputs and outputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precision {
    F32,
    F64,
}

impl Precision {
    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "float32",
            Precision::F64 => "float64",
        }
    }
}

/// A provider that was tried and not used, with why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fallback {
    pub provider: String,
    pub reason: String,
}

/// An ONNX model with named float inputs of shape [n, width] and one float output of shape [n]
/// or [n, width], on the provider that accepted it.
pub struct OnnxModel {
    /// On the CPU provider one session per thread (each single-threaded), else one.
    sessions: Vec<Mutex<Session>>,
    events_per_run: usize,
    /// Input names and widths, in the model's order.
    inputs: Vec<(String, usize)>,
    output: String,
    pub precision: Precision,
    /// The provider the session runs on (ONNX Runtime's name, e.g. `CPUExecutionProvider`).
    pub provider: String,
    pub fallbacks: Vec<Fallback>,
}

fn provider_dispatch(
    name: &str,
    model: &Path,
    inputs: &[(&str, usize)],
) -> Option<ep::ExecutionProviderDispatch> {
    let s = ns_core::settings::settings();
    match name {
        "cpu" => Some(ep::CPU::default().build()),
        "cuda" => Some(ep::CUDA::default().build()),
        "tensorrt" => {
            let [lo, opt, hi] = s.trt_profile;
            let shapes = |n: u64| {
                inputs
                    .iter()
                    .map(|(name, width)| format!("{name}:{n}x{width}"))
                    .collect::<Vec<_>>()
                    .join(",")
            };
            let mut trt = ep::TensorRT::default()
                .with_fp16(s.trt_fp16)
                .with_profile_min_shapes(shapes(lo))
                .with_profile_opt_shapes(shapes(opt))
                .with_profile_max_shapes(shapes(hi));
            if let Some(dir) = &s.trt_cache {
                let stem = model.file_stem().and_then(|f| f.to_str()).unwrap_or("flow");
                trt = trt
                    .with_engine_cache(true)
                    .with_engine_cache_path(dir.display())
                    .with_engine_cache_prefix(stem)
                    .with_timing_cache(true)
                    .with_timing_cache_path(dir.display());
            }
            Some(trt.build())
        }
        _ => None,
    }
}

/// ONNX Runtime's name of a provider of the settings.
pub fn provider_name(name: &str) -> &str {
    match name {
        "cpu" => "CPUExecutionProvider",
        "cuda" => "CUDAExecutionProvider",
        "tensorrt" => "TensorrtExecutionProvider",
        other => other,
    }
}

fn float_type(t: &ValueType) -> Option<Precision> {
    match t.tensor_type() {
        Some(TensorElementType::Float32) => Some(Precision::F32),
        Some(TensorElementType::Float64) => Some(Precision::F64),
        _ => None,
    }
}

impl OnnxModel {
    /// Load `path`, whose inputs must be exactly `expected` (name, width) in any order and whose
    /// one output is `output`; `what` names the model in errors.
    pub fn load(path: &Path, expected: &[(&str, usize)], output: &str, what: &str) -> Result<Self> {
        let env = environment()?;
        if !path.is_file() {
            return Err(Error::InvalidModel(format!(
                "{what}: {} does not exist",
                path.display()
            )));
        }
        let mut order: Vec<String> = ns_core::settings::settings().flow_providers.clone();
        if order.last().map(String::as_str) != Some("cpu") {
            order.push("cpu".into());
        }
        let mut fallbacks = Vec::new();
        let mut session = None;
        for name in &order {
            let Some(dispatch) = provider_dispatch(name, path, expected) else {
                fallbacks.push(Fallback {
                    provider: name.clone(),
                    reason: "unknown provider (nextstat knows tensorrt, cuda, cpu)".into(),
                });
                continue;
            };
            let single_threaded = name == "cpu";
            let build = || {
                Session::builder(env)
                    .and_then(|b| {
                        let b =
                            b.with_execution_providers([dispatch.clone().error_on_failure()])?;
                        if single_threaded {
                            b.with_intra_threads(1)?.with_inter_threads(1)
                        } else {
                            Ok(b)
                        }
                        .map_err(ort::Error::from)
                    })
                    .and_then(|mut b| b.commit_from_file(path))
            };
            match build() {
                Ok(first) => {
                    let mut all = vec![first];
                    if single_threaded {
                        for _ in 1..rayon::current_num_threads() {
                            all.push(build().map_err(|e| {
                                Error::Computation(format!("{what}: a further session: {e}"))
                            })?);
                        }
                    }
                    session = Some((all, provider_name(name).to_string()));
                    break;
                }
                Err(e) => fallbacks.push(Fallback {
                    provider: provider_name(name).to_string(),
                    reason: e.to_string(),
                }),
            }
        }
        let Some((sessions, provider)) = session else {
            let reasons: Vec<String> = fallbacks
                .iter()
                .map(|f| format!("{}: {}", f.provider, f.reason))
                .collect();
            return Err(Error::InvalidModel(format!(
                "{what}: ONNX Runtime cannot run {} ({})",
                path.display(),
                reasons.join("; ")
            )));
        };
        let session = &sessions[0];
        let mut inputs = Vec::new();
        let mut precision = None;
        for outlet in session.inputs() {
            let Some(&(_, width)) = expected.iter().find(|(n, _)| *n == outlet.name()) else {
                return Err(Error::InvalidModel(format!(
                    "{what}: {} has an input '{}'; it takes {}",
                    path.display(),
                    outlet.name(),
                    expected
                        .iter()
                        .map(|(n, w)| format!("'{n}' [events, {w}]"))
                        .collect::<Vec<_>>()
                        .join(" and ")
                )));
            };
            let p = float_type(outlet.dtype()).ok_or_else(|| {
                Error::InvalidModel(format!(
                    "{what}: input '{}' of {} is not float32 or float64",
                    outlet.name(),
                    path.display()
                ))
            })?;
            // A fixed width that differs from the manifest's is an error now, not at the first
            // evaluation; a dynamic one (-1) is checked by ONNX Runtime when it runs.
            if let Some(shape) = outlet.dtype().tensor_shape() {
                let fits = match **shape {
                    [_, w] => w < 0 || w as usize == width,
                    _ => false,
                };
                if !fits {
                    return Err(Error::InvalidModel(format!(
                        "{what}: input '{}' of {} has shape {:?}; it must be [events, {width}]",
                        outlet.name(),
                        path.display(),
                        &**shape
                    )));
                }
            }
            if precision.is_some_and(|q| q != p) {
                return Err(Error::InvalidModel(format!(
                    "{what}: the inputs of {} mix float32 and float64",
                    path.display()
                )));
            }
            precision = Some(p);
            inputs.push((outlet.name().to_string(), width));
        }
        for (name, _) in expected {
            if !inputs.iter().any(|(n, _)| n == name) {
                return Err(Error::InvalidModel(format!(
                    "{what}: {} has no input '{name}'",
                    path.display()
                )));
            }
        }
        let out = session
            .outputs()
            .iter()
            .find(|o| o.name() == output)
            .ok_or_else(|| {
                Error::InvalidModel(format!(
                    "{what}: {} has no output '{output}' (outputs: {})",
                    path.display(),
                    session
                        .outputs()
                        .iter()
                        .map(|o| o.name().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            })?;
        if float_type(out.dtype()) != precision {
            return Err(Error::InvalidModel(format!(
                "{what}: output '{output}' of {} is not of its inputs' type",
                path.display()
            )));
        }
        let events_per_run = if provider == provider_name("cpu") {
            CPU_EVENTS_PER_RUN
        } else {
            GPU_EVENTS_PER_RUN
        };
        Ok(OnnxModel {
            sessions: sessions.into_iter().map(Mutex::new).collect(),
            events_per_run,
            inputs,
            output: output.to_string(),
            precision: precision.unwrap_or(Precision::F32),
            provider,
            fallbacks,
        })
    }

    /// Run on `n` events: `inputs` gives each named input's values row-major ([n, width]);
    /// the output, `out_width` values per event, in f64. Batches of the provider's events per
    /// run, in parallel over the sessions, joined in event order.
    pub fn run(&self, n: usize, inputs: &[(&str, &[f64])], out_width: usize) -> Result<Vec<f64>> {
        for (name, width) in &self.inputs {
            let given = inputs.iter().find(|(i, _)| i == name).map(|(_, d)| d.len());
            if given != Some(n * width) {
                return Err(Error::Computation(format!(
                    "ONNX input '{name}' needs {} values for {n} events, not {given:?}",
                    n * width
                )));
            }
        }
        let starts: Vec<usize> = (0..n).step_by(self.events_per_run).collect();
        let batch = |(k, &start): (usize, &usize)| {
            let len = self.events_per_run.min(n - start);
            let slot = &self.sessions[k % self.sessions.len()];
            let mut session = slot
                .lock()
                .map_err(|_| Error::Computation("an ONNX Runtime session was poisoned".into()))?;
            self.run_batch(&mut session, start, len, inputs, out_width)
        };
        let parts: Vec<Vec<f64>> = if self.sessions.len() > 1 && starts.len() > 1 {
            starts
                .par_iter()
                .enumerate()
                .map(batch)
                .collect::<Result<_>>()?
        } else {
            starts
                .iter()
                .enumerate()
                .map(batch)
                .collect::<Result<_>>()?
        };
        Ok(parts.concat())
    }

    fn run_batch(
        &self,
        session: &mut Session,
        start: usize,
        len: usize,
        inputs: &[(&str, &[f64])],
        out_width: usize,
    ) -> Result<Vec<f64>> {
        let mut values = Vec::with_capacity(self.inputs.len());
        for (name, width) in &self.inputs {
            let data = inputs
                .iter()
                .find(|(i, _)| i == name)
                .map(|(_, d)| &d[start * width..(start + len) * width])
                .ok_or_else(|| Error::Computation(format!("no values for input '{name}'")))?;
            let shape = [len as i64, *width as i64];
            let value = match self.precision {
                Precision::F64 => Tensor::from_array((shape, data.to_vec())).map(|t| t.into_dyn()),
                Precision::F32 => {
                    Tensor::from_array((shape, data.iter().map(|&v| v as f32).collect::<Vec<_>>()))
                        .map(|t| t.into_dyn())
                }
            }
            .map_err(|e| Error::Computation(format!("ONNX input '{name}': {e}")))?;
            values.push((name.clone(), value));
        }
        let outputs = session
            .run(values)
            .map_err(|e| Error::Computation(format!("ONNX Runtime failed: {e}")))?;
        let value = &outputs[self.output.as_str()];
        let bad = |got: usize| {
            Error::Computation(format!(
                "ONNX output '{}' has {got} values for {len} events ({out_width} each expected)",
                self.output
            ))
        };
        let extract = |e: ort::Error| Error::Computation(format!("ONNX output: {e}"));
        let out: Vec<f64> = match self.precision {
            Precision::F64 => value
                .try_extract_tensor::<f64>()
                .map_err(extract)?
                .1
                .to_vec(),
            Precision::F32 => value
                .try_extract_tensor::<f32>()
                .map_err(extract)?
                .1
                .iter()
                .map(|&x| f64::from(x))
                .collect(),
        };
        if out.len() != len * out_width {
            return Err(bad(out.len()));
        }
        Ok(out)
    }
}
