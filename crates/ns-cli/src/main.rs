//! `nextstat`: the command line. It parses flags, calls the engine crates and prints; nothing else.

mod input;
mod workspace_cmds;

use clap::{Parser, Subcommand};
use input::ModelArgs;
use ns_compute::{CpuEvaluator, PreparedData, Scratch};
use ns_core::{Error, Result};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "nextstat",
    version,
    about = "HistFactory binned-likelihood inference, numerically the same as pyhf"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Evaluate twice_nll, the NLL gradient and the expected data at a parameter point
    Eval {
        #[command(flatten)]
        model: ModelArgs,
        /// Parameters: a JSON list in pyhf order, or an object keyed by parameter-set name or name[i]
        #[arg(long, value_name = "FILE.json")]
        pars: Option<PathBuf>,
        /// Write the JSON here instead of stdout
        #[arg(short = 'o', long = "output-file")]
        output: Option<PathBuf>,
    },
    #[command(flatten)]
    Workspace(workspace_cmds::WorkspaceCommand),
}

/// Write text to a file or stdout.
pub fn emit(text: &str, output: Option<&PathBuf>) -> Result<()> {
    match output {
        Some(path) => std::fs::write(path, text).map_err(|e| Error::io(path.display(), e)),
        None => {
            println!("{text}");
            Ok(())
        }
    }
}

/// Pretty JSON for nextstat's own outputs.
pub fn to_json(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_default()
}

fn eval(model_args: &ModelArgs, pars: Option<&PathBuf>, output: Option<&PathBuf>) -> Result<()> {
    let loaded = model_args.load()?;
    let model = &loaded.model;
    let init = model.suggested_init();
    let params = match pars {
        Some(path) => model.params_from_json(&ns_translate::load::read_json(path)?, &init)?,
        None => init,
    };
    let data = PreparedData::from_full(&model.compiled, &loaded.workspace.data(model, true)?)?;
    let eval = CpuEvaluator::new(&model.compiled);
    let mut scratch = Scratch::new(&model.compiled);
    let mut gradient = vec![0.0; model.n_params()];
    let nll = eval.nll_with_gradient(&params, &data, &mut scratch, Some(&mut gradient))?;
    let (main, aux) = eval.expected_data(&params, &mut scratch)?;
    let finite_or_null = |x: f64| {
        if x.is_finite() {
            json!(x)
        } else {
            json!(x.to_string())
        }
    };
    let mut out = json!({
        "parameter_names": model.par_names,
        "parameters": params,
        "twice_nll": finite_or_null(2.0 * nll),
        "nll": finite_or_null(nll),
        "gradient": gradient.iter().map(|&g| finite_or_null(g)).collect::<Vec<_>>(),
        "expected_data": {"main": main, "aux": aux},
        "interp_codes": model.compiled.codes.to_string(),
    });
    if !nll.is_finite() {
        out["warning"] = json!(
            "a non-positive expected count makes the likelihood undefined here (pyhf gives the same NaN/inf)"
        );
    }
    emit(&to_json(&out), output)
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Eval {
            model,
            pars,
            output,
        } => eval(&model, pars.as_ref(), output.as_ref()),
        Command::Workspace(cmd) => workspace_cmds::run(cmd),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}
