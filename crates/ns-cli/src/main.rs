//! `nextstat`: the command line. It parses flags, calls the engine crates and prints; nothing else.

mod grid;
mod infer_cmds;
mod input;
mod output;
mod plot_cmds;
mod report_cmds;
mod text;
mod workspace_cmds;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use input::ModelArgs;
use ns_api::call::Call;
use ns_api::request::Request;
use ns_core::Result;
use serde_json::Value;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "nextstat",
    version,
    about = "Likelihood inference on pyhf JSON workspaces (numerically the same as pyhf), HS3 models (binned and unbinned), HistFactory XML with ROOT files and CMS Combine datacards"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    #[command(about = ns_api::verbs::summary("eval"))]
    Eval {
        #[command(flatten)]
        model: ModelArgs,
        /// Parameters: a JSON list in pyhf order, or an object keyed by parameter-set name or name[i]
        #[arg(long, value_name = "FILE.json")]
        pars: Option<PathBuf>,
        /// Write the JSON here instead of stdout
        #[arg(short = 'o', long = "output-file")]
        output: Option<PathBuf>,
        /// Also write the call this command runs as JSON to FILE (`nextstat run FILE` runs it)
        #[arg(long, value_name = "FILE.json")]
        save_call: Option<PathBuf>,
        /// Device of the evaluation: cpu, cuda (f64), vulkan or metal (f32), auto
        #[arg(long = "gpu", value_name = "DEVICE", default_value = "cpu", value_parser = infer_cmds::device_name)]
        device: String,
    },
    /// Run a call saved with --save-call (or written by hand: docs/call.schema.json) and print
    /// what its verb prints
    Run(infer_cmds::RunArgs),
    /// Print what this build is: version, git commit, backends, embedded CUDA architectures
    Version {
        /// JSON for scripts instead of text
        #[arg(long)]
        json: bool,
    },
    /// List the compute devices of this machine: CPU threads, CUDA GPUs, Vulkan/Metal adapters
    Devices {
        /// JSON for scripts instead of the text list
        #[arg(long)]
        json: bool,
    },
    #[command(flatten)]
    Infer(infer_cmds::InferCommand),
    #[command(flatten)]
    Workspace(workspace_cmds::WorkspaceCommand),
    /// Join the parts of a sharded job (written with --shard I/N) into the result one process
    /// gives, after checking that they are of one job and cover it exactly once
    Merge {
        /// The part files, in any order
        #[arg(value_name = "PART.json", required = true)]
        parts: Vec<PathBuf>,
        /// Write the result here instead of stdout
        #[arg(short = 'o', long = "output-file")]
        output: Option<PathBuf>,
    },
    /// Draw a figure from a verb's JSON result: limit, ranking, pulls, correlation, scan,
    /// yields, toys (SVG, PNG or PDF)
    Plot(plot_cmds::PlotArgs),
    /// Fit, ranking, profile scan and upper limit of a workspace, with their figures and an
    /// index.html, in the folder -o DIR
    Report(report_cmds::ReportArgs),
}

/// Write text to a file (atomically) or stdout, with a trailing newline.
pub fn emit(text: &str, output: Option<&PathBuf>) -> Result<()> {
    output::emit(text, output.map(|p| p.as_path()))
}

/// Pretty JSON for nextstat's own outputs.
pub fn to_json(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_default()
}

/// `eval`: the engine's eval request at the suggested init or the given points.
fn eval(
    model_args: &ModelArgs,
    pars: Option<&PathBuf>,
    output: Option<&PathBuf>,
    save_call: Option<&PathBuf>,
    device: &str,
) -> Result<()> {
    let request = Request::Eval {
        pars: pars.map(|p| crate::input::read_json(p)).transpose()?,
    };
    let mut call = Call::new(Some(model_args.model_ref()?), request);
    call.device = device.to_string();
    infer_cmds::run_call(&call, save_call.map(PathBuf::as_path), output.cloned())
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Eval {
            model,
            pars,
            output,
            save_call,
            device,
        } => eval(
            &model,
            pars.as_ref(),
            output.as_ref(),
            save_call.as_ref(),
            &device,
        ),
        Command::Run(args) => infer_cmds::run_saved(args),
        Command::Version { json } => {
            let info = ns_build_info::BuildInfo::current(env!("CARGO_PKG_VERSION"));
            if json {
                emit(&to_json(&serde_json::json!(info)), None)
            } else {
                println!("nextstat {}", info.long());
                Ok(())
            }
        }
        Command::Devices { json } => devices(json),
        Command::Infer(cmd) => infer_cmds::run(cmd),
        Command::Merge { parts, output } => infer_cmds::merge(&parts, output.as_ref()),
        Command::Workspace(cmd) => workspace_cmds::run(cmd),
        Command::Plot(args) => plot_cmds::run(args),
        Command::Report(args) => report_cmds::run(args),
    }
}

/// `devices`: the inventory as text (what `--gpu` can name) or JSON.
fn devices(as_json: bool) -> Result<()> {
    let inventory = ns_compute::Inventory::probe();
    if as_json {
        return emit(&to_json(&ns_api::report::devices(&inventory)), None);
    }
    let mut text = format!(
        "cpu     f64  {} threads   (--gpu cpu)\n",
        inventory.cpu_threads
    );
    match &inventory.cuda {
        Ok(names) => {
            for (i, name) in names.iter().enumerate() {
                text += &format!("cuda:{i}  f64  {name}   (--gpu cuda:{i})\n");
            }
            if names.len() > 1 {
                text += &format!(
                    "cuda:all f64  {} GPUs sharing each batch   (--gpu cuda:all)\n",
                    names.len()
                );
            }
            let archs = ns_compute::cuda::prebuilt_archs();
            text += &if archs.is_empty() {
                "        kernels compiled by NVRTC at first use (this build embeds none)\n"
                    .to_string()
            } else {
                format!(
                    "        kernels built in for {}\n",
                    ns_build_info::sm_names(&archs)
                )
            };
        }
        Err(why) => text += &format!("cuda    none: {why}\n"),
    }
    match &inventory.adapters {
        Ok(list) if list.is_empty() => {
            text += &format!("wgpu    none: {}\n", ns_api::report::NO_WGPU_ADAPTER)
        }
        Ok(list) => {
            for a in list {
                text += &format!(
                    "{:<7} f32  {} ({}, {})   (--gpu {})\n",
                    a.backend, a.name, a.kind, a.driver, a.backend
                );
            }
        }
        Err(why) => text += &format!("wgpu    none: {why}\n"),
    }
    emit(text.trim_end(), None)
}

fn main() -> ExitCode {
    // Vulkan's window-system layers want a runtime folder and print errors (twice) without one;
    // a compute-only program gives them the temporary folder. Set before any thread starts.
    if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
        // SAFETY: the process is single-threaded here; nothing reads the environment concurrently.
        unsafe { std::env::set_var("XDG_RUNTIME_DIR", std::env::temp_dir()) };
    }
    // The engine's environment settings, read once here.
    ns_core::settings::install(ns_core::settings::Settings::from_environment());
    // `--version` tells which build ran: commit, backends, embedded CUDA architectures.
    let info = ns_build_info::BuildInfo::current(env!("CARGO_PKG_VERSION"));
    let command = Cli::command()
        .version(&*Box::leak(info.short().into_boxed_str()))
        .long_version(&*Box::leak(info.long().into_boxed_str()));
    let cli = match Cli::from_arg_matches(&command.get_matches()) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn every_verb_of_the_registry_is_a_subcommand_with_its_summary() {
        let cli = super::Cli::command();
        for verb in ns_api::verbs::VERBS {
            let Some(route) = verb.route else { continue };
            let command = cli
                .find_subcommand(route)
                .unwrap_or_else(|| panic!("no subcommand '{route}'"));
            assert_eq!(
                command.get_about().map(ToString::to_string).as_deref(),
                Some(verb.summary)
            );
        }
    }
}
