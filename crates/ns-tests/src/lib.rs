//! Shared helpers of the integration tests: where the reference data lives, the tolerances.

use ns_translate::FromWorkspace;
use serde_json::Value;
use std::path::PathBuf;

/// `../shared/pyhf-ref` beside the repository (override with `NEXTSTAT_PYHF_REF`).
pub fn pyhf_ref_dir() -> PathBuf {
    if let Ok(dir) = std::env::var("NEXTSTAT_PYHF_REF") {
        return PathBuf::from(dir);
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/pyhf-ref")
}

/// `../shared/likelihoods` beside the repository (override with `NEXTSTAT_LIKELIHOODS`): published
/// ATLAS likelihoods with pyhf's numbers. Tests that read it fail, never skip, without it.
pub fn likelihoods_dir() -> PathBuf {
    if let Ok(dir) = std::env::var("NEXTSTAT_LIKELIHOODS") {
        return PathBuf::from(dir);
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/likelihoods")
}

/// `../shared/combine` beside the repository (override with `NEXTSTAT_COMBINE`): CMS Combine's
/// datacards and its numbers (`reference.json`).
pub fn combine_dir() -> PathBuf {
    if let Ok(dir) = std::env::var("NEXTSTAT_COMBINE") {
        return PathBuf::from(dir);
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/combine")
}

/// The shape files of a card of the Combine corpus at `path` (its entry `card` in
/// `reference.json`) as its text2workspace command reads them: relative to the card, with its
/// `-m` mass.
pub fn combine_shape_files<'a>(
    card: &serde_json::Value,
    path: &'a std::path::Path,
) -> ns_datacard::ShapeFiles<'a> {
    let command = card["commands"]["text2workspace"].as_str().unwrap_or("");
    let mass = command
        .split_whitespace()
        .skip_while(|w| *w != "-m")
        .nth(1)
        .map(String::from);
    ns_datacard::ShapeFiles::new(
        ns_core::FileAccess::Local {
            base: path.parent(),
        },
        mass,
    )
}

/// The model of a card of the Combine corpus (its entry in `reference.json`), with the default
/// physics model.
pub fn combine_card_model(card: &serde_json::Value) -> ns_core::model::HistFactoryModel {
    let path = combine_dir().join(card["card"].as_str().expect("a card path"));
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let parsed = ns_datacard::parse(&text, &path.display().to_string())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    ns_datacard::model(&parsed, &combine_shape_files(card, &path))
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The published likelihoods of [`likelihoods_dir`]: (name, its folder), sorted by name.
pub fn published_likelihoods() -> Vec<(String, PathBuf)> {
    let dir = likelihoods_dir();
    let mut found: Vec<(String, PathBuf)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| {
            panic!(
                "cannot read {}: {e} (the published likelihoods live in ../shared beside the repository)",
                dir.display()
            )
        })
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.join("reference.json").is_file())
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), p))
        .collect();
    found.sort();
    assert!(!found.is_empty(), "no likelihoods in {}", dir.display());
    found
}

/// A JSON file, parsed.
pub fn read_json(path: &std::path::Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Names (file stems) of every stored reference, sorted.
pub fn reference_names() -> Vec<String> {
    let dir = pyhf_ref_dir().join("ref");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| {
            panic!(
                "cannot read {}: {e} (is ../shared beside the repository?)",
                dir.display()
            )
        })
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            e.path()
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
        })
        .collect();
    names.sort();
    names
}

/// The stored pyhf reference of a workspace.
pub fn reference(name: &str) -> Value {
    let path = pyhf_ref_dir().join("ref").join(format!("{name}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Path of a shared workspace file.
pub fn workspace_path(file: &str) -> PathBuf {
    pyhf_ref_dir().join("workspaces").join(file)
}

/// Every shared workspace (file name, workspace); patchsets are not workspaces.
pub fn shared_workspaces() -> Vec<(String, ns_translate::Workspace)> {
    let dir = workspace_path("");
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|f| f.ends_with(".json") && f != "manifest.json" && !f.contains("patchset"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|f| {
            let ws = ns_translate::Workspace::from_path(&workspace_path(&f))
                .unwrap_or_else(|e| panic!("{f}: {e}"));
            (f, ws)
        })
        .collect()
}

/// Column `j` of a Hessian by Richardson-extrapolated differences of `gradient_at` on the upper
/// side of `p` (steps h/2 and h, h = 10⁻⁴·max(|p_j|, 1)): at a kink (code 0 and code 1 at
/// α = 0) it is the upper branch's.
pub fn hessian_column_by_differences(
    p: &[f64],
    j: usize,
    mut gradient_at: impl FnMut(&[f64]) -> Vec<f64>,
) -> Vec<f64> {
    let h = 1e-4 * p[j].abs().max(1.0);
    let mut moved = |step: f64| {
        let mut q = p.to_vec();
        q[j] += step;
        gradient_at(&q)
    };
    let (g0, g_half, g_full) = (moved(0.0), moved(h / 2.0), moved(h));
    (0..g0.len())
        .map(|i| 2.0 * (g_half[i] - g0[i]) / (h / 2.0) - (g_full[i] - g0[i]) / h)
        .collect()
}

/// Toy `t` alone of the published likelihoods' stress runs (`bench/stress_toys.py`: μ = 1, q̃,
/// 1000 toys per hypothesis, seed 1): the toys a test names by their index there.
pub fn stress_toy<'a>(
    data: &'a ns_compute::PreparedData,
    config: &'a ns_inference::FitConfig,
    t: usize,
) -> ns_inference::toys::ToyTest<'a> {
    ns_inference::toys::ToyTest {
        mu: 1.0,
        data,
        config,
        stat: ns_inference::TestStatistic::QTilde,
        n_toys: 1000,
        seed: 1,
        toys: t..t + 1,
    }
}

/// Parameter points to compare backends at: the suggested init, the POI at 0 (gradients at
/// μ = 0 must be right too), and `count` random points.
pub fn points_for(
    model: &ns_translate::HistFactoryModel,
    seed: u64,
    count: usize,
) -> Vec<Vec<f64>> {
    let mut rng = TestRng::new(seed);
    let mut points = vec![model.suggested_init()];
    if let Ok(poi) = model.poi() {
        let mut at_zero = model.suggested_init();
        at_zero[poi] = 0.0;
        points.push(at_zero);
    }
    points.extend((0..count).map(|_| random_point(model, &mut rng)));
    points
}

/// A tolerance of the parity contract (`tests/tolerances.json`).
pub fn tolerance(key: &str) -> f64 {
    let all: Value = serde_json::from_str(include_str!("../../../tests/tolerances.json"))
        .expect("tolerances.json parses");
    all[key]
        .as_f64()
        .unwrap_or_else(|| panic!("tolerance '{key}' missing"))
}

/// A tolerance of the backend under test against the CPU f64 reference (`tests/tolerances.json`):
/// `f32_KEY` on the f32 backends (Vulkan, Metal), `f64_backend_KEY` on the others.
pub fn backend_tolerance(device: ns_compute::Device, key: &str) -> f64 {
    match device {
        ns_compute::Device::Vulkan | ns_compute::Device::Metal => tolerance(&format!("f32_{key}")),
        _ => tolerance(&format!("f64_backend_{key}")),
    }
}

/// Floats of a JSON array.
pub fn floats(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap_or_else(|| panic!("expected an array, found {v}"))
        .iter()
        .map(|x| x.as_f64().unwrap_or(f64::NAN))
        .collect()
}

/// `|a − b| ≤ rtol·max(|a|, |b|)`, with NaN equal only to NaN.
pub fn close(a: f64, b: f64, rtol: f64) -> bool {
    if a.is_nan() || b.is_nan() {
        return a.is_nan() && b.is_nan();
    }
    a == b || (a - b).abs() <= rtol * a.abs().max(b.abs())
}

/// A small deterministic generator for test points (xorshift64* and Box–Muller).
pub struct TestRng(u64);

impl TestRng {
    pub fn new(seed: u64) -> Self {
        TestRng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn uniform(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    }
    pub fn normal(&mut self) -> f64 {
        let (u, v) = (self.uniform().max(1e-300), self.uniform());
        (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
    }
}

/// A random point of the kind the parity contract asks for: α ~ N(0,1) away from the kinks at
/// 0 and ±1, constrained γ within 1 ± 2σ, free factors in [0, 2]; fixed parameters keep init.
pub fn random_point(model: &ns_translate::HistFactoryModel, rng: &mut TestRng) -> Vec<f64> {
    use ns_translate::Constraint;
    let mut p = model.suggested_init();
    for set in &model.parameter_sets {
        for i in 0..set.n_parameters {
            if set.fixed[i] {
                continue;
            }
            p[set.offset + i] = match (set.constraint, set.auxdata.get(i).copied()) {
                (Constraint::None, _) => 2.0 * rng.uniform(),
                (Constraint::Gaussian, Some(0.0)) => {
                    let mut a = rng.normal();
                    if a.abs() < 0.01 || (a.abs() - 1.0).abs() < 0.01 {
                        a += 0.05;
                    }
                    a
                }
                _ => {
                    let width = set.prefit_width(i).unwrap_or(1.0);
                    let centre = if set.constraint == Constraint::Poisson {
                        1.0
                    } else {
                        set.auxdata[i]
                    };
                    (centre + (4.0 * rng.uniform() - 2.0) * width).max(1e-3)
                }
            };
        }
    }
    p
}

/// Every interpolation pair pyhf accepts.
pub fn all_code_pairs() -> Vec<ns_core::InterpCodes> {
    use ns_core::{HistosysCode, InterpCodes, NormsysCode};
    let mut out = vec![];
    for normsys in [NormsysCode::Code1, NormsysCode::Code4] {
        for histosys in [
            HistosysCode::Code0,
            HistosysCode::Code2,
            HistosysCode::Code4p,
        ] {
            out.push(InterpCodes { normsys, histosys });
        }
    }
    out
}

/// The shared workspace a stored reference was computed from.
pub fn reference_workspace(reference: &Value) -> ns_translate::Workspace {
    let file = reference["workspace"]
        .as_str()
        .expect("reference names its workspace")
        .trim_start_matches("workspaces/");
    ns_translate::Workspace::from_path(&workspace_path(file))
        .unwrap_or_else(|e| panic!("{file}: {e}"))
}

/// A workspace's model with the given interpolation codes and its observed data (main + aux).
pub fn model_and_data(
    ws: &ns_translate::Workspace,
    codes: ns_core::InterpCodes,
) -> (ns_translate::HistFactoryModel, ns_compute::PreparedData) {
    model_and_data_with(
        ws,
        &ns_translate::ModelOptions {
            codes,
            ..Default::default()
        },
    )
}

/// A workspace's model built with `options` (ROOT's clipping, a measurement, codes) and its
/// observed data (main + aux).
pub fn model_and_data_with(
    ws: &ns_translate::Workspace,
    options: &ns_translate::ModelOptions,
) -> (ns_translate::HistFactoryModel, ns_compute::PreparedData) {
    let model = ns_translate::HistFactoryModel::from_workspace(ws, options).expect("model builds");
    let data = ns_compute::PreparedData::from_full(
        &model.compiled,
        &ws.data(&model, true).expect("observations"),
    )
    .expect("data fits the model");
    (model, data)
}

/// Whether a CUDA device is present; a CUDA test run without one fails saying so (on a GPU
/// machine a missing device is an error, not a skip).
pub fn require_cuda(test: &str) {
    // GPU runs choose the kernel cache and launch settings through the environment
    // (bench/gpu_run.sh): the tests are a front door.
    ns_core::settings::install(ns_core::settings::Settings::from_environment());
    assert!(
        ns_compute::cuda::has_cuda(),
        "{test}: no CUDA device on this machine"
    );
}

/// A backend sharing every batch between all of the host's GPUs, for the several-GPU tests:
/// where the host has one, two sessions of it, so that the sharding is still what is tested.
pub fn all_gpus_backend(model: &ns_core::CompiledModel) -> Box<dyn ns_compute::Backend> {
    let count = ns_compute::cuda::device_count().expect("the CUDA driver counts its devices");
    let ordinals: Vec<usize> = if count >= 2 {
        (0..count).collect()
    } else {
        vec![0, 0]
    };
    eprintln!("sharing between GPUs {ordinals:?}");
    Box::new(
        ns_compute::cuda::MultiCudaBackend::new(
            model,
            &ordinals,
            ns_compute::CudaGpus::All,
            ns_compute::Objective::Likelihood,
        )
        .expect("every GPU opens"),
    )
}

/// One test per behaviour and backend: `test_device!(body)` turns `fn body(device: Device)` into
/// `body::cpu` (always run), `body::vulkan` (the f32 backend: Mesa's lavapipe in CI, NVIDIA's
/// Vulkan driver on the GPU machine; never skipped — without an adapter it fails with the reason)
/// and `body::cuda`, `#[ignore]`d so that CI, which has no GPU, reports it as ignored, never as
/// passed; GPU machines run it with `--include-ignored` (`bench/gpu_run.sh`).
/// `test_device!(f64: body)` leaves out the f32 arm, for behaviours only f64 arithmetic has
/// (toy-by-toy test statistics, published likelihoods near f32's range). Tolerances come from
/// [`backend_tolerance`]. A new backend adds one arm here.
#[macro_export]
macro_rules! test_device {
    ($body:ident) => {
        $crate::test_device!(@arms $body, vulkan);
    };
    (f64: $body:ident) => {
        $crate::test_device!(@arms $body);
    };
    (@arms $body:ident $(, $f32:ident)?) => {
        mod $body {
            #[test]
            fn cpu() {
                super::$body(ns_compute::Device::Cpu)
            }

            $(
                #[test]
                fn $f32() {
                    super::$body(ns_compute::Device::Vulkan)
                }
            )?

            #[test]
            #[ignore = "needs an NVIDIA GPU: run with --include-ignored on a GPU machine (bench/gpu_run.sh)"]
            fn cuda() {
                $crate::require_cuda(concat!(stringify!($body), "::cuda"));
                super::$body(ns_compute::Device::Cuda(ns_compute::CudaGpus::FIRST))
            }
        }
    };
}

/// A workspace whose likelihood has a kink where ROOT clips yields: one observed-empty bin with a
/// background of 1 event and a small sample whose normsys has pyhf's code4 polynomial below zero
/// for 0.1 ≲ α ≲ 0.6 (hi 0.998, lo 230.5: the published sleptons likelihood has such a pair),
/// and a second bin that holds the background's normalisation. Without the small sample, its
/// yields are zero (the same parameters, the sample's contribution removed).
pub fn kinked_workspace(with_small_sample: bool) -> ns_translate::Workspace {
    let small = if with_small_sample { 0.5 } else { 0.0 };
    let spec = serde_json::json!({
        "channels": [{"name": "sr", "samples": [
            {"name": "background", "data": [1.0, 20.0], "modifiers": [
                {"name": "mu", "type": "normfactor", "data": null},
                {"name": "bkg_norm", "type": "normsys", "data": {"hi": 1.1, "lo": 0.9}}]},
            {"name": "small", "data": [small, 0.0], "modifiers": [
                {"name": "k", "type": "normsys", "data": {"hi": 0.998, "lo": 230.5}},
                {"name": "bkg_norm", "type": "normsys", "data": {"hi": 1.2, "lo": 0.8}}]}]}],
        "observations": [{"name": "sr", "data": [0.0, 21.0]}],
        "measurements": [{"name": "m", "config": {"poi": "mu", "parameters": []}}],
        "version": "1.0.0"
    });
    ns_translate::Workspace::from_value(spec).expect("the workspace loads")
}

/// A workspace with an empty bin that a normalisation free to turn negative drives below zero,
/// as toys of the published sleptons likelihood have: the first bin observes nothing and
/// expects 1 + 0.5·α + 5·μ (μ bounded to [−5, 5], α a histosys shared with the second bin, which
/// observes 4). pyhf's likelihood falls without bound as μ falls; under ROOT's semantics the
/// empty bin meets a wall at 1 + 0.5·α + 5·μ = 0, where the minimum lies.
pub fn negative_normalisation_workspace() -> ns_translate::Workspace {
    let spec = serde_json::json!({
        "channels": [{"name": "sr", "samples": [
            {"name": "signal", "data": [5.0, 1.0], "modifiers": [
                {"name": "mu", "type": "normfactor", "data": null}]},
            {"name": "background", "data": [1.0, 4.0], "modifiers": [
                {"name": "shift", "type": "histosys",
                 "data": {"hi_data": [1.5, 6.0], "lo_data": [0.5, 2.0]}}]}]}],
        "observations": [{"name": "sr", "data": [0.0, 4.0]}],
        "measurements": [{"name": "m", "config": {"poi": "mu", "parameters": [
            {"name": "mu", "bounds": [[-5.0, 5.0]]}]}}],
        "version": "1.0.0"
    });
    ns_translate::Workspace::from_value(spec).expect("the workspace loads")
}

/// A workspace whose likelihood has a wall along one parameter, as the published sleptons
/// likelihood has: in the signal region, a sample of 10¹² events whose normsys `k` (hi 0.998,
/// lo 230.5) crosses zero at α ≈ 0.0108, scaled by a normalisation `mu_t` that a control
/// region (2 observed over a background of 10) holds near −1.6. Where `k`'s code4 factor is below
/// zero, ROOT's clipping makes the sample yield nothing; just above, it yields −10¹² times the
/// factor, and the region's count turns negative within 10⁻¹¹ of the crossing: undefined. The
/// constraint on `k` pulls it from the clipped side onto that wall.
pub fn walled_workspace() -> ns_translate::Workspace {
    let spec = serde_json::json!({
        "channels": [
            {"name": "sr", "samples": [
                {"name": "signal", "data": [1.0], "modifiers": [
                    {"name": "mu", "type": "normfactor", "data": null}]},
                {"name": "background", "data": [4.0], "modifiers": [
                    {"name": "bkg_syst", "type": "normsys", "data": {"hi": 1.1, "lo": 0.9}}]},
                {"name": "runaway", "data": [1e12], "modifiers": [
                    {"name": "k", "type": "normsys", "data": {"hi": 0.998, "lo": 230.5}},
                    {"name": "mu_t", "type": "normfactor", "data": null}]}]},
            {"name": "cr", "samples": [
                {"name": "background", "data": [10.0], "modifiers": []},
                {"name": "runaway", "data": [5.0], "modifiers": [
                    {"name": "mu_t", "type": "normfactor", "data": null}]}]}],
        "observations": [{"name": "sr", "data": [6.0]}, {"name": "cr", "data": [2.0]}],
        "measurements": [{"name": "m", "config": {"poi": "mu", "parameters": [
            {"name": "mu_t", "bounds": [[-5.0, 5.0]], "inits": [1.0]}]}}],
        "version": "1.0.0"
    });
    ns_translate::Workspace::from_value(spec).expect("the workspace loads")
}
