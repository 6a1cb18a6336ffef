//! Inference verbs: their flags turned into one `ns_api::call::Call`, `--save-call`,
//! `nextstat run`, and the printing of a result (JSON, or the text of `text.rs`).

use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use ns_api::call::{Call, DEFAULT_DEVICE, DEFAULT_TOLERANCE, DataChoice, FitOptions, linspace};
use ns_api::request::{DEFAULT_CLS_LEVEL, DEFAULT_TEST_STATISTIC, Outcome, Request};
use ns_api::shard::Shard;
use ns_api::verbs;
use ns_core::{Error, Result};
use ns_inference::params::number_json;
use ns_inference::{Device, TestStatistic};
use serde_json::{Map, Value, json};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use crate::input::ModelArgs;
use crate::text::text_of;
use crate::{emit, to_json};

/// Options shared by the inference verbs.
#[derive(Args, Debug, Clone)]
pub struct InferArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub out: OutputArgs,
    /// Convergence tolerance on the projected gradient of twice_nll
    #[arg(long, default_value_t = DEFAULT_TOLERANCE, allow_negative_numbers = true)]
    pub tolerance: f64,
    /// Starting parameters (as eval --pars: a list in pyhf order or an object by name)
    #[arg(long, value_name = "FILE.json")]
    pub init: Option<PathBuf>,
    /// The parameters of interest, instead of the model's: the first is the one hypothesis
    /// tests, limits, scans and rankings test; the others float unless fixed with --fix. Each
    /// must be unconstrained (a normfactor)
    #[arg(long, value_name = "NAME[,NAME...]", value_delimiter = ',')]
    pub poi: Vec<String>,
    /// Fix parameters: NAME=VALUE (repeatable; NAME as in parameter_names)
    #[arg(long = "fix", value_name = "NAME=VALUE")]
    pub fix: Vec<String>,
    /// Parameter bounds NAME=LOW,HIGH (repeatable; NAME a parameter set or name[i])
    #[arg(long = "bound", value_name = "NAME=LOW,HIGH")]
    pub bounds: Vec<String>,
    /// Device for the fits: cpu, cuda (f64; GPU 0, or cuda:N, cuda:0,1, cuda:all to share batches
    /// between GPUs), vulkan or metal (f32, docs/gpu-f32.md), or auto (CUDA for large batches of
    /// fits on large models, where a GPU exists; see docs/benchmarks.md for the crossover).
    /// `nextstat devices` lists what this machine offers
    #[arg(long = "gpu", value_name = "DEVICE", default_value = DEFAULT_DEVICE, value_parser = device_name)]
    pub device: String,
    /// Fit this data instead of the workspace's observations: a JSON list of main bins (auxdata
    /// from the model) or of main bins followed by auxdata
    #[arg(long, value_name = "FILE.json", conflicts_with = "asimov")]
    pub data: Option<PathBuf>,
    /// Fit Asimov data generated at the conditional MLE for this POI value
    #[arg(long, value_name = "MU", allow_negative_numbers = true)]
    pub asimov: Option<f64>,
    /// Also write the call this command runs (model, request, fit options, device, data) as
    /// JSON to FILE: `nextstat run FILE` runs it again
    #[arg(long, value_name = "FILE.json")]
    pub save_call: Option<PathBuf>,
}

/// Options of `nextstat run`: a saved call and how to print its result.
#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    /// A call as `--save-call` writes it (docs/call.schema.json); relative paths in it are read
    /// from the call file's folder
    #[arg(value_name = "CALL.json")]
    pub call: PathBuf,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// Where and how a result is printed.
#[derive(Args, Debug, Clone)]
pub struct OutputArgs {
    /// Write the JSON result here instead of stdout
    #[arg(short = 'o', long = "output-file")]
    pub output: Option<PathBuf>,
    /// Output format: json (default) or a human-readable text summary
    #[arg(long, default_value = "json", value_parser = ["json", "text"])]
    pub format: String,
    /// Worker threads for parallel work (default: all cores; at most 4 per core)
    #[arg(long)]
    pub threads: Option<usize>,
}

/// The inference verbs; each one's summary is its `ns_api::verbs` descriptor's.
#[derive(Subcommand)]
pub enum InferCommand {
    #[command(about = verbs::summary("fit"))]
    Fit {
        #[command(flatten)]
        args: InferArgs,
        /// Profile-likelihood (MINOS-like) interval for a parameter (repeatable; "all" for every free one)
        #[arg(long = "minos", value_name = "NAME")]
        minos: Vec<String>,
        /// Also write the covariance and correlation matrices (n×n; large on large models)
        #[arg(long)]
        covariance: bool,
        /// Also write pre- and post-fit yields per channel and sample with the uncertainty of
        /// the total (what `nextstat plot yields` draws)
        #[arg(long)]
        yields: bool,
    },
    #[command(about = verbs::summary("ranking"))]
    Ranking {
        #[command(flatten)]
        args: InferArgs,
        #[command(flatten)]
        shard: ShardArg,
    },
    #[command(about = verbs::summary("gof"))]
    Gof {
        #[command(flatten)]
        args: InferArgs,
    },
    #[command(about = verbs::summary("hypotest"))]
    Hypotest {
        #[command(flatten)]
        args: InferArgs,
        /// POI value tested
        #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
        mu: f64,
        /// Test statistic: qtilde (default), q, q0
        #[arg(long, default_value = DEFAULT_TEST_STATISTIC.name(), value_parser = test_statistic)]
        test_stat: TestStatistic,
        /// Every patch of --patchset, in parallel: one table of CLs per signal point
        #[arg(long, requires = "patchset", conflicts_with = "patch_name")]
        all: bool,
        #[command(flatten)]
        shard: ShardArg,
    },
    #[command(about = verbs::summary("hypotest-toys"))]
    HypotestToys {
        #[command(flatten)]
        args: InferArgs,
        /// POI value tested
        #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
        mu: f64,
        /// Test statistic: qtilde (default), q, q0
        #[arg(long, default_value = DEFAULT_TEST_STATISTIC.name(), value_parser = test_statistic)]
        test_stat: TestStatistic,
        /// Toys per hypothesis
        #[arg(long, default_value_t = 2000)]
        n_toys: usize,
        /// Seed of the counter-based generator (toy i of a seed is always the same dataset)
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Also write every toy's test statistic (what `nextstat plot toys` draws)
        #[arg(long)]
        teststats: bool,
        #[command(flatten)]
        shard: ShardArg,
    },
    #[command(about = verbs::summary("upper-limit"))]
    UpperLimit {
        #[command(flatten)]
        args: InferArgs,
        /// CLs level (0.05 = 95% CL)
        #[arg(long, default_value_t = DEFAULT_CLS_LEVEL, allow_negative_numbers = true)]
        level: f64,
        /// Linear scan instead of root finding: START STOP COUNT (pyhf's scan=np.linspace)
        #[arg(long, num_args = 3, value_names = ["START", "STOP", "COUNT"], allow_negative_numbers = true)]
        scan: Option<Vec<f64>>,
        /// CLs from N toys per hypothesis at each μ instead of asymptotic formulae: at the --scan
        /// values, or on a grid built around the asymptotic limits and refined near each crossing
        #[arg(long, value_name = "N", conflicts_with = "all")]
        toys: Option<usize>,
        /// Seed of the toys (every μ draws from it)
        #[arg(long, default_value_t = 0, requires = "toys")]
        seed: u64,
        /// Every patch of --patchset, in parallel: one table of limits per signal point (what
        /// `nextstat plot limit` draws as a Brazil band)
        #[arg(long, requires = "patchset", conflicts_with = "patch_name")]
        all: bool,
        #[command(flatten)]
        shard: ShardArg,
    },
    #[command(about = verbs::summary("significance"))]
    Significance {
        #[command(flatten)]
        args: InferArgs,
    },
    #[command(about = verbs::summary("posterior"))]
    Posterior {
        #[command(flatten)]
        args: InferArgs,
        /// Chains, run in parallel
        #[arg(long, default_value_t = ns_api::request::DEFAULT_CHAINS)]
        chains: usize,
        /// Adaptation iterations per chain (step size and metric), not kept
        #[arg(long, default_value_t = ns_api::request::DEFAULT_ITERATIONS)]
        warmup: usize,
        /// Draws kept per chain
        #[arg(long, default_value_t = ns_api::request::DEFAULT_ITERATIONS)]
        draws: usize,
        /// Seed of the chains' random streams
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Credibility of the POI's upper limit and central interval
        #[arg(long, default_value_t = ns_api::request::DEFAULT_CREDIBILITY)]
        cl: f64,
        /// Acceptance the step size adapts toward (raise toward 0.95 where chains diverge)
        #[arg(long, default_value_t = 0.8)]
        target_accept: f64,
        /// Most doublings of a trajectory (2^depth leapfrog steps per draw)
        #[arg(long, default_value_t = 10)]
        max_tree_depth: usize,
        /// Write every draw into the JSON (draws_by_chain: chains × draws × free parameters)
        #[arg(long)]
        keep_draws: bool,
        /// The POI's prior: flat (within its bounds) or inverse_sqrt (∝ 1/√μ, Combine's
        /// "1/sqrt(r)"); the other parameters' are flat, the constrained ones' their constraints
        #[arg(long, default_value = "flat", value_parser = prior_of)]
        prior: ns_api::request::Prior,
        #[command(flatten)]
        shard: ShardArg,
    },
    #[command(about = verbs::summary("scan"))]
    Scan {
        #[command(flatten)]
        args: InferArgs,
        /// Parameter to scan (default: the POI)
        #[arg(long, conflicts_with = "parameters")]
        parameter: Option<String>,
        /// START STOP COUNT of the scan grid
        #[arg(long, num_args = 3, value_names = ["START", "STOP", "COUNT"], default_values_t = [0.0, 2.0, 21.0], allow_negative_numbers = true)]
        range: Vec<f64>,
        /// Scan a grid of several parameters instead, comma-separated (a,b): each point fitted
        /// with them fixed there; for two, the 2ΔNLL contours
        #[arg(
            long,
            value_delimiter = ',',
            requires = "grid",
            conflicts_with = "range"
        )]
        parameters: Vec<String>,
        /// START STOP COUNT for each of --parameters, in their order
        #[arg(long, num_args = 3.., value_names = ["START", "STOP", "COUNT"], allow_negative_numbers = true, requires = "parameters")]
        grid: Vec<f64>,
        /// Confidence levels of the contours of a two-parameter grid, comma-separated (default
        /// 0.6827,0.9545: 2ΔNLL = 2.30 and 6.18)
        #[arg(long, value_delimiter = ',', requires = "grid")]
        cl: Option<Vec<f64>>,
        /// Rounds of refinement near the contours (two parameters, at most 5): each halves the
        /// grid intervals a contour crosses and fits only the points that adds
        #[arg(long, value_name = "ROUNDS", default_value_t = 0, requires = "grid")]
        refine: usize,
        #[command(flatten)]
        shard: ShardArg,
    },
}

/// `--prior`: a POI prior as a call names it.
fn prior_of(text: &str) -> std::result::Result<ns_api::request::Prior, String> {
    serde_json::from_value(Value::String(text.into()))
        .map_err(|_| format!("'{text}': the POI's prior is flat or inverse_sqrt"))
}

/// `--shard I/N` of the verbs whose work splits into independent units.
#[derive(Args, Debug, Clone, Default)]
pub struct ShardArg {
    /// Compute shard I of N (I from 0 to N − 1) and write a part that `nextstat merge` joins
    /// with the others into this command's result, bit for bit (an array job's task:
    /// docs/scale-out.md)
    #[arg(long, value_name = "I/N", value_parser = shard_of, allow_hyphen_values = true)]
    pub shard: Option<Shard>,
}

fn shard_of(text: &str) -> std::result::Result<Shard, String> {
    Shard::parse(text).map_err(|e| match e {
        Error::InvalidInput(m) => m,
        other => other.to_string(),
    })
}

/// `--gpu`'s value, refused here with the parser's message when it names no device.
pub fn device_name(name: &str) -> std::result::Result<String, String> {
    Device::from_name(name)
        .map(|_| name.to_string())
        .map_err(|e| e.to_string())
}

/// `--test-stat`'s value.
fn test_statistic(name: &str) -> std::result::Result<TestStatistic, String> {
    TestStatistic::from_name(name).map_err(|e| e.to_string())
}

impl OutputArgs {
    /// The thread pool `--threads` asks for.
    pub fn configure_threads(&self) -> Result<()> {
        if let Some(n) = self.threads {
            let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
            if n == 0 || n > 4 * cores {
                return Err(Error::InvalidInput(format!(
                    "--threads {n}: give between 1 and {} (4 per core on this machine's {cores}); \
                     leave it out to use every core",
                    4 * cores
                )));
            }
            // Only the first configuration of the global pool takes effect; later calls are no-ops.
            let _ = rayon_pool(n);
        }
        Ok(())
    }

    fn finish(&self, value: Value, text: String) -> Result<()> {
        if self.format == "text" {
            crate::emit(&text, self.output.as_ref())
        } else {
            emit(&to_json(&value), self.output.as_ref())
        }
    }
}

/// `NAME=REST` of a repeatable option, split.
fn name_value<'a>(flag: &str, item: &'a str, shape: &str) -> Result<(&'a str, &'a str)> {
    item.split_once('=')
        .map(|(n, v)| (n.trim(), v.trim()))
        .ok_or_else(|| Error::InvalidInput(format!("{flag} '{item}' must look like {shape}")))
}

impl InferArgs {
    /// The call these options make with `request`.
    pub fn call(&self, request: Request) -> Result<Call> {
        let init = self
            .init
            .as_ref()
            .map(|path| crate::input::read_json(path))
            .transpose()?;
        let mut bounds = Map::new();
        for item in &self.bounds {
            let (name, range) = name_value("--bound", item, "NAME=LOW,HIGH")?;
            let bad =
                || Error::InvalidInput(format!("--bound '{item}' must look like NAME=LOW,HIGH"));
            let (lo, hi) = range.split_once(',').ok_or_else(bad)?;
            let (lo, hi): (f64, f64) = (
                lo.trim().parse().map_err(|_| bad())?,
                hi.trim().parse().map_err(|_| bad())?,
            );
            bounds.insert(name.to_string(), json!([number_json(lo), number_json(hi)]));
        }
        let mut fixed = Map::new();
        for item in &self.fix {
            let (name, value) = name_value("--fix", item, "NAME=VALUE")?;
            let value: f64 = value.parse().map_err(|_| {
                Error::InvalidInput(format!("--fix {name}: '{value}' is not a number"))
            })?;
            fixed.insert(name.to_string(), number_json(value));
        }
        let data = match (&self.data, self.asimov) {
            (Some(path), _) => {
                let values = crate::input::read_json(path)?;
                DataChoice::Values(
                    values
                        .as_array()
                        .and_then(|a| a.iter().map(|v| v.as_f64()).collect())
                        .ok_or_else(|| {
                            Error::InvalidInput(format!(
                                "{}: data must be a JSON list of numbers",
                                path.display()
                            ))
                        })?,
                )
            }
            (None, Some(mu)) => DataChoice::Asimov(mu),
            (None, None) => DataChoice::Observed,
        };
        Ok(Call {
            model: Some(self.model.model_ref()?),
            request,
            fit: FitOptions {
                tolerance: self.tolerance,
                init,
                bounds: (!bounds.is_empty()).then_some(Value::Object(bounds)),
                fixed: (!fixed.is_empty()).then_some(Value::Object(fixed)),
                poi: (!self.poi.is_empty()).then(|| self.poi.clone()),
            },
            device: self.device.clone(),
            data,
        })
    }
}

/// Configure the global thread pool used by the engine's parallel loops.
fn rayon_pool(n: usize) -> std::result::Result<(), String> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(n)
        .build_global()
        .map_err(|e| e.to_string())
}

/// A progress bar on stderr when it is a terminal; hidden otherwise.
pub fn progress(len: u64, what: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template("{msg} {bar:30} {pos}/{len} [{elapsed_precise}]")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.set_message(what.to_string());
    bar
}

/// `START STOP COUNT` of a grid option.
fn grid(option: &str, spec: &[f64]) -> Result<Vec<f64>> {
    linspace(spec[0], spec[1], spec[2]).map_err(|e| match e {
        Error::InvalidInput(m) => Error::InvalidInput(format!("{option} {m}")),
        other => other,
    })
}

/// The shared options of a command and its engine request (`ns_api::request`).
fn request_of(cmd: InferCommand) -> Result<(InferArgs, Request)> {
    Ok(match cmd {
        InferCommand::Fit {
            args,
            minos,
            covariance,
            yields,
        } => (
            args,
            Request::Fit {
                uncertainties: true,
                minos,
                covariance,
                yields,
            },
        ),
        InferCommand::Ranking { args, .. } => (args, Request::Ranking),
        InferCommand::Gof { args } => (args, Request::Gof),
        InferCommand::Hypotest {
            args,
            mu,
            test_stat,
            ..
        } => (args, Request::Hypotest { mu, test_stat }),
        InferCommand::HypotestToys {
            args,
            mu,
            test_stat,
            n_toys,
            seed,
            teststats,
            ..
        } => (
            args,
            Request::HypotestToys {
                mu,
                test_stat,
                n_toys,
                seed,
                teststats,
            },
        ),
        InferCommand::UpperLimit {
            args,
            level,
            scan,
            toys,
            seed,
            ..
        } => {
            let scan = scan.map(|spec| grid("--scan", &spec)).transpose()?;
            let request = Request::UpperLimit {
                level,
                scan,
                n_toys: toys,
                seed,
            };
            (args, request)
        }
        InferCommand::Significance { args } => (args, Request::Significance),
        InferCommand::Posterior {
            args,
            chains,
            warmup,
            draws,
            seed,
            cl,
            target_accept,
            max_tree_depth,
            keep_draws,
            prior,
            ..
        } => (
            args,
            Request::Posterior {
                chains,
                warmup,
                draws,
                seed,
                cl,
                target_accept,
                max_tree_depth,
                keep_draws,
                prior,
            },
        ),
        InferCommand::Scan {
            args,
            parameter,
            range,
            parameters,
            grid: spec,
            cl,
            refine,
            ..
        } => {
            let request = if parameters.is_empty() {
                Request::ProfileScan {
                    parameter,
                    values: grid("--range", &range)?,
                    parameters,
                    grid: Vec::new(),
                    cl,
                    refine,
                }
            } else {
                if spec.len() != 3 * parameters.len() {
                    return Err(Error::InvalidInput(format!(
                        "--grid: {} numbers for {} parameters; give START STOP COUNT for each \
                         of --parameters ({})",
                        spec.len(),
                        parameters.len(),
                        parameters.join(", ")
                    )));
                }
                let axes = spec
                    .chunks(3)
                    .map(|c| grid("--grid", c))
                    .collect::<Result<Vec<_>>>()?;
                Request::ProfileScan {
                    parameter: None,
                    values: Vec::new(),
                    parameters,
                    grid: axes,
                    cl,
                    refine,
                }
            };
            (args, request)
        }
    })
}

/// The progress bar's label for a request.
fn label(request: &Request) -> &'static str {
    match request {
        Request::HypotestToys { .. } => "toys",
        Request::Ranking => "ranking refits",
        Request::Posterior { .. } => "NUTS iterations",
        Request::ProfileScan { .. } => "scan",
        Request::UpperLimit {
            n_toys: Some(_), ..
        } => "toys",
        Request::UpperLimit { scan: Some(_), .. } => "CLs scan",
        Request::UpperLimit { scan: None, .. } => "hypotests",
        _ => "fits",
    }
}

impl InferCommand {
    /// `--shard` where the verb takes one.
    fn shard(&self) -> Option<Shard> {
        match self {
            InferCommand::Hypotest { shard, .. }
            | InferCommand::HypotestToys { shard, .. }
            | InferCommand::Ranking { shard, .. }
            | InferCommand::UpperLimit { shard, .. }
            | InferCommand::Posterior { shard, .. }
            | InferCommand::Scan { shard, .. } => shard.shard,
            _ => None,
        }
    }

    /// `--all`: every patch of the patchset.
    fn grid(&self) -> bool {
        matches!(
            self,
            InferCommand::Hypotest { all: true, .. } | InferCommand::UpperLimit { all: true, .. }
        )
    }
}

pub fn run(cmd: InferCommand) -> Result<()> {
    let (shard, grid) = (cmd.shard(), cmd.grid());
    let (args, request) = request_of(cmd)?;
    args.out.configure_threads()?;
    if shard.is_some() && args.out.format == "text" {
        return Err(Error::InvalidInput(
            "--shard writes a part for `nextstat merge` (JSON): leave out --format text".into(),
        ));
    }
    if grid {
        return crate::grid::run(&args, request, shard);
    }
    let call = args.call(request)?;
    if let Some(path) = &args.save_call {
        check_save_call(path, args.out.output.as_deref())?;
        save_call(&call, path)?;
    }
    match shard {
        Some(shard) => execute_shard(&call, shard, &args.out),
        None => execute(&call, Path::new(""), &args.out),
    }
}

/// `--shard I/N`: this shard's share of the call's work, written as a part of the job.
fn execute_shard(call: &Call, shard: Shard, out: &OutputArgs) -> Result<()> {
    let model_ref = call.model.clone().ok_or_else(|| {
        Error::InvalidInput("the call names no model (\"model\": {\"workspace\": ...})".into())
    })?;
    let loaded = model_ref.load_model(&crate::input::Inputs)?;
    let bar = progress(0, label(&call.request));
    let part = ns_api::shard::shard_part(
        call,
        loaded.likelihood(),
        model_ref.digest(&crate::input::Inputs)?,
        shard,
        None,
        &|total, done| {
            bar.set_length(total);
            bar.set_position(done as u64);
        },
        &|doc| loaded.annotate(doc),
    );
    bar.finish_and_clear();
    let doc = part?;
    if let Some(auto) = doc.get("auto") {
        let text = |key: &str| auto[key].as_str().unwrap_or_default();
        note_auto(text("device"), text("reason"));
    }
    emit(&to_json(&doc), out.output.as_ref())
}

/// `nextstat merge PARTS… -o RESULT.json`: the parts of a sharded job joined into its result.
pub fn merge(parts: &[PathBuf], output: Option<&PathBuf>) -> Result<()> {
    let docs = parts
        .iter()
        .map(|p| Ok((p.display().to_string(), crate::input::read_json(p)?)))
        .collect::<Result<Vec<_>>>()?;
    let result = ns_api::shard::merge(&docs)?;
    if let Some(w) = result["warning"].as_str() {
        eprintln!("warning: {w}");
    }
    crate::grid::warn_errors(&result);
    emit(&to_json(&result), output)
}

/// Run a call built by a verb without the shared inference options (`eval`): JSON to `output`.
pub fn run_call(call: &Call, save: Option<&Path>, output: Option<PathBuf>) -> Result<()> {
    if let Some(path) = save {
        check_save_call(path, output.as_deref())?;
        save_call(call, path)?;
    }
    let out = OutputArgs {
        output,
        format: "json".into(),
        threads: None,
    };
    execute(call, Path::new(""), &out)
}

/// `nextstat run CALL.json`.
pub fn run_saved(args: RunArgs) -> Result<()> {
    args.output.configure_threads()?;
    let call = Call::from_json(crate::input::read_json(&args.call)?)?;
    let base = args.call.parent().unwrap_or(Path::new("")).to_path_buf();
    execute(&call, &base, &args.output)
}

/// The call and the result go to different places: one JSON document per file or stream.
fn check_save_call(save: &Path, output: Option<&Path>) -> Result<()> {
    let stdout = |p: Option<&Path>| p.is_none_or(|p| p.as_os_str() == "-");
    if save.as_os_str() == "-" && stdout(output) {
        return Err(Error::InvalidInput(
            "--save-call -: the call would go to standard output with the result after it; \
             give the result a file (-o FILE) or the call one (--save-call FILE)"
                .into(),
        ));
    }
    if let Some(output) = output
        && !stdout(Some(output))
        && same_file(save, output)
    {
        return Err(Error::InvalidInput(format!(
            "--save-call {} and -o {}: the result would replace the call; give them different files",
            save.display(),
            output.display()
        )));
    }
    Ok(())
}

/// Whether two paths name one file (compared as written, and as resolved where both exist).
fn same_file(a: &Path, b: &Path) -> bool {
    if a == b {
        return true;
    }
    let absolute = |p: &Path| {
        std::path::absolute(p)
            .ok()
            .map(|p| p.components().collect::<PathBuf>())
    };
    absolute(a).is_some_and(|x| Some(x) == absolute(b))
        || matches!((std::fs::canonicalize(a), std::fs::canonicalize(b)), (Ok(x), Ok(y)) if x == y)
}

/// Write `call` with absolute paths (it runs from any folder on this machine), after its
/// model-independent checks; never over one of the files it reads.
fn save_call(call: &Call, path: &Path) -> Result<()> {
    call.validate()?;
    call.check_serialisable()?;
    let mut call = call.clone();
    if let Some(model) = &mut call.model {
        let cwd = std::env::current_dir().map_err(|e| Error::io("the current folder", e))?;
        model.resolve_paths(&cwd);
        for source in model.sources_mut() {
            if let ns_source::Source::Path(p) = source {
                crate::input::remember(p);
            }
        }
    }
    let text = format!("{}\n", to_json(&call.to_json()));
    crate::output::write_file_of("--save-call", path, &text)
}

/// What `--gpu auto` chose and why, on stderr (the report's `"auto"` says it too).
fn note_auto(device: &str, reason: &str) {
    let device = if device == "cpu" { "the CPU" } else { device };
    eprintln!("note: --gpu auto runs on {device}: {reason}");
}

/// Run a call (its relative paths read from `base`) and print its result as the verb does.
fn execute(call: &Call, base: &Path, out: &OutputArgs) -> Result<()> {
    let mut model_ref = call.model.clone().ok_or_else(|| {
        Error::InvalidInput("the call names no model (\"model\": {\"workspace\": ...})".into())
    })?;
    model_ref.resolve_paths(base);
    call.validate()?;
    let loaded = model_ref.load_model(&crate::input::Inputs)?;
    let model = loaded.likelihood();
    let fitter = call.open(model, Arc::new(AtomicBool::new(false)))?;
    let request = &call.request;
    let bar = progress(request.progress_steps(model), label(request));
    let outcome = call.run_on(&fitter, &|k| bar.set_position(k as u64));
    bar.finish_and_clear();
    let outcome = outcome?;
    // Said once the work ran: a request refused has no device to speak of.
    if let Some(auto) = fitter.auto_choice() {
        note_auto(&auto.device.spec(), &auto.reason);
    }
    let warning = match &outcome {
        Outcome::Fit { fit, .. } => fit.warning.clone(),
        Outcome::HypotestToys { result, .. } => result.warning.clone(),
        Outcome::UpperLimit { result, .. } => result.outside_in_words(),
        Outcome::UpperLimitToys(result) => result.warning(),
        Outcome::Posterior { result, .. } => {
            (!result.warnings.is_empty()).then(|| result.warnings.join("; "))
        }
        _ => None,
    };
    if let Some(w) = warning {
        eprintln!("warning: {w}");
    }
    let matrices = matches!(
        request,
        Request::Fit {
            covariance: true,
            ..
        }
    );
    let mut report = call.report(&outcome, model, matrices);
    ns_api::report::add_auto(&mut report, fitter.auto_choice());
    loaded.annotate(&mut report);
    out.finish(report, text_of(&outcome, model, matrices))
}
