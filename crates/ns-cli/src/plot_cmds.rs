//! `nextstat plot KIND RESULT.json -o FILE.{svg,png,pdf}`: a figure from a verb's JSON (no fit
//! runs), drawn by `ns-plot`; stdout gets what was drawn as JSON (the numbers of the figure).

use std::path::PathBuf;

use clap::Args;
use ns_core::{Error, Result};
use ns_plot::{Format, Options};
use serde_json::json;

use crate::input::read_json;
use crate::{emit, to_json};

#[derive(Args, Debug, Clone)]
pub struct PlotArgs {
    /// What to draw: limit (Brazil band from `upper-limit --patchset PS --all`, or CLs against μ
    /// from `upper-limit --scan`), ranking, pulls (`fit`), correlation (`fit --covariance`),
    /// scan, yields (`fit --yields`), toys (`hypotest-toys --teststats`)
    #[arg(value_name = "KIND")]
    pub kind: String,
    /// The verb's JSON result ("-": standard input)
    #[arg(value_name = "RESULT.json")]
    pub result: PathBuf,
    /// The figure: .svg, .png or .pdf
    #[arg(short = 'o', long = "output-file", value_name = "FILE")]
    pub output: PathBuf,
    /// Entries shown at most (ranking: 20, correlation: 40)
    #[arg(long)]
    pub top: Option<usize>,
    /// correlation: keep parameters with some |ρ| at least this with another (default 0.2)
    #[arg(long)]
    pub threshold: Option<f64>,
    /// pulls: only parameters whose name contains this
    #[arg(long)]
    pub filter: Option<String>,
    /// limit: the patch label on the x axis (default: the patchset's first label)
    #[arg(long, value_name = "LABEL")]
    pub x: Option<String>,
    /// limit: only points whose LABEL has VALUE (a slice of a grid of several labels; repeatable)
    #[arg(long = "select", value_name = "LABEL=VALUE")]
    pub select: Vec<String>,
    /// limit: a theory curve, a JSON list of one value per point in x order
    #[arg(long, value_name = "FILE.json")]
    pub theory: Option<PathBuf>,
    /// yields: the pre-fit yields (default: post-fit)
    #[arg(long)]
    pub prefit: bool,
    /// toys: an asymptotic `hypotest` result at the same μ and test statistic, whose asymptotic
    /// densities are drawn over the toys
    #[arg(long, value_name = "HYPOTEST.json")]
    pub asymptotic: Option<PathBuf>,
}

impl PlotArgs {
    fn options(&self) -> Result<Options> {
        let select = self
            .select
            .iter()
            .map(|item| {
                let bad =
                    || Error::InvalidInput(format!("--select '{item}' must look like LABEL=VALUE"));
                let (label, value) = item.split_once('=').ok_or_else(bad)?;
                let value: f64 = value.trim().parse().map_err(|_| bad())?;
                Ok((label.trim().to_string(), value))
            })
            .collect::<Result<_>>()?;
        let theory = self
            .theory
            .as_ref()
            .map(|path| {
                let value = read_json(path)?;
                value
                    .as_array()
                    .and_then(|a| {
                        a.iter()
                            .map(|v| v.as_f64().filter(|x| x.is_finite()))
                            .collect()
                    })
                    .ok_or_else(|| {
                        Error::InvalidInput(format!(
                            "{}: the theory curve is a JSON list of finite numbers",
                            path.display()
                        ))
                    })
            })
            .transpose()?;
        if let Some(t) = self.threshold
            && !(0.0..=1.0).contains(&t)
        {
            return Err(Error::InvalidInput(format!(
                "--threshold {t}: a correlation threshold is between 0 and 1"
            )));
        }
        Ok(Options {
            top: self.top,
            threshold: self.threshold,
            filter: self.filter.clone(),
            x: self.x.clone(),
            select,
            theory,
            prefit: self.prefit,
            asymptotic: self.asymptotic.as_ref().map(|p| read_json(p)).transpose()?,
        })
    }
}

pub fn run(args: PlotArgs) -> Result<()> {
    let format = Format::of_path(&args.output)?;
    let options = args.options()?;
    // Errors name the result file (once: its message is not wrapped twice).
    let at_file = |e: Error| {
        let message = match e {
            Error::InvalidInput(m) => m,
            other => other.to_string(),
        };
        Error::InvalidInput(format!("{}: {message}", args.result.display()))
    };
    let result = read_json(&args.result)?; // its errors name the file
    let figure = ns_plot::figure(&args.kind, &result, &options).map_err(at_file)?;
    let (bytes, (width, height)) = ns_plot::encode(&figure, format)?;
    crate::output::write_bytes_of("-o", &args.output, &bytes)?;
    emit(
        &to_json(&json!({
            "file": args.output, "kind": args.kind, "width": width, "height": height,
            "figure": figure,
        })),
        None,
    )
}
