//! `nextstat`: the command line. It parses flags, calls the engine crates and prints; nothing else.

mod infer_cmds;
mod input;
mod output;
mod workspace_cmds;

use clap::{Parser, Subcommand};
use input::ModelArgs;
use ns_compute::{CpuEvaluator, PreparedData, Scratch};
use ns_core::Result;
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
    Infer(infer_cmds::InferCommand),
    #[command(flatten)]
    Workspace(workspace_cmds::WorkspaceCommand),
}

/// Write text to a file (atomically) or stdout, with a trailing newline.
pub fn emit(text: &str, output: Option<&PathBuf>) -> Result<()> {
    output::emit(text, output.map(|p| p.as_path()))
}

/// Pretty JSON for nextstat's own outputs.
pub fn to_json(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_default()
}

/// One evaluated point (its JSON comes from `ns_inference::report`).
fn eval_point(
    eval: &CpuEvaluator,
    data: &PreparedData,
    scratch: &mut Scratch,
    params: Vec<f64>,
) -> Result<Value> {
    let mut gradient = vec![0.0; params.len()];
    let nll = eval.nll_with_gradient(&params, data, scratch, Some(&mut gradient))?;
    let (main, aux) = eval.expected_data(&params, scratch)?;
    Ok(ns_inference::report::eval_point(
        &params, nll, &gradient, &main, &aux,
    ))
}

fn eval(model_args: &ModelArgs, pars: Option<&PathBuf>, output: Option<&PathBuf>) -> Result<()> {
    let loaded = model_args.load()?;
    let model = &loaded.model;
    let init = model.suggested_init();
    let data = PreparedData::from_full(&model.compiled, &loaded.workspace.data(model, true)?)?;
    let eval = CpuEvaluator::new(&model.compiled);
    let mut scratch = Scratch::new(&model.compiled);
    let header = json!({"parameter_names": model.par_names, "interp_codes": model.compiled.codes.to_string()});
    let mut out = match pars.map(|p| ns_translate::load::read_json(p)).transpose()? {
        // A list of points (lists or objects) evaluates each; the output has one entry per point.
        Some(Value::Array(points))
            if points
                .first()
                .is_some_and(|p| p.is_array() || p.is_object()) =>
        {
            let results = points
                .iter()
                .map(|p| {
                    eval_point(
                        &eval,
                        &data,
                        &mut scratch,
                        model.params_from_json(p, &init)?,
                    )
                })
                .collect::<Result<Vec<_>>>()?;
            json!({"points": results})
        }
        Some(point) => eval_point(
            &eval,
            &data,
            &mut scratch,
            model.params_from_json(&point, &init)?,
        )?,
        None => eval_point(&eval, &data, &mut scratch, init.clone())?,
    };
    if let (Value::Object(out), Value::Object(header)) = (&mut out, header) {
        out.extend(header);
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
        Command::Infer(cmd) => infer_cmds::run(cmd),
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
