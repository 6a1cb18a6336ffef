//! `nextstat report WS -o DIR`: the fit (with yields and correlations), the upper limit with its
//! CLs curve, a profile scan of the POI and the ranking of one workspace, each result's JSON and
//! figures in DIR, and an index.html that shows them on one page.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use clap::Args;
use ns_api::overview::{OVERVIEW_STEPS, Overview, overview};
use ns_api::request::Request;
use ns_core::{Error, Result};
use ns_plot::{Format, Options};
use serde_json::{Value, json};

use crate::infer_cmds::{InferArgs, progress};
use crate::{emit, to_json};

#[derive(Args, Debug, Clone)]
pub struct ReportArgs {
    /// The workspace and fit options; `-o DIR` is the folder the report is written to (created
    /// if missing)
    #[command(flatten)]
    pub args: InferArgs,
    /// Figures as svg (default: crisp in a browser) or png
    #[arg(long, default_value = "svg", value_parser = ["svg", "png"])]
    pub figures: String,
    /// Ranking: parameters shown
    #[arg(long, default_value_t = 20)]
    pub top: usize,
    /// Write into a folder that holds other files (the report's own files are replaced)
    #[arg(long)]
    pub overwrite: bool,
}

/// The file that marks a folder as a report (written first): a report is written again into
/// its own folder without asking, never into a folder of other files.
const MARKER: &str = ".nextstat-report";

/// One section of the report: its title, and per result the file stem, the result and the
/// figures drawn from it (kind, file stem, options).
struct Section {
    title: &'static str,
    results: Vec<(&'static str, Value)>,
    figures: Vec<(usize, &'static str, &'static str, Options)>,
}

pub fn run(report: ReportArgs) -> Result<()> {
    let ReportArgs {
        args,
        figures,
        top,
        overwrite,
    } = report;
    let dir: PathBuf = args
        .out
        .output
        .clone()
        .ok_or_else(|| Error::InvalidInput("give the report's folder with -o DIR".into()))?;
    if dir.is_file() {
        return Err(Error::InvalidInput(format!(
            "-o {}: that is a file; the report is a folder",
            dir.display()
        )));
    }
    refuse_foreign_folder(&dir, overwrite)?;
    args.out.configure_threads()?;
    let format = if figures == "png" {
        Format::Png
    } else {
        Format::Svg
    };
    // The model is loaded once; every step is a call of it.
    let template = args.call(Request::Significance)?;
    let model_ref = template
        .model
        .clone()
        .ok_or_else(|| Error::InvalidInput("the report needs a workspace".into()))?;
    let loaded = model_ref.load_model(&crate::input::Inputs)?;
    let poi = template
        .fit_config(loaded.likelihood())?
        .poi(loaded.likelihood())?;
    let bar = progress(OVERVIEW_STEPS.len() as u64, "report");
    let done = std::cell::Cell::new(0);
    let Overview {
        fit,
        upper_limit: limit,
        cls_scan: cls,
        scan,
        ranking,
        binned,
    } = overview(
        &template,
        &loaded,
        Arc::new(AtomicBool::new(false)),
        &|step| {
            bar.set_position(done.replace(done.get() + 1));
            bar.set_message(step.to_string());
        },
    )?;
    bar.finish_and_clear();

    let summary = summary_rows(&fit, &limit, poi);
    let mut fit_figures = vec![
        (0, "pulls", "pulls", Options::default()),
        (0, "correlation", "correlation", Options::default()),
    ];
    if binned {
        fit_figures.push((
            0,
            "yields",
            "yields_prefit",
            Options {
                prefit: true,
                ..Options::default()
            },
        ));
        fit_figures.push((0, "yields", "yields_postfit", Options::default()));
    }
    let sections = [
        Section {
            title: "Fit",
            results: vec![("fit", fit)],
            figures: fit_figures,
        },
        Section {
            title: "Upper limit",
            results: vec![("upper_limit", limit), ("cls_scan", cls)],
            figures: vec![(1, "limit", "cls", Options::default())],
        },
        Section {
            title: "Profile likelihood",
            results: vec![("scan", scan)],
            figures: vec![(0, "scan", "scan", Options::default())],
        },
        Section {
            title: "Ranking",
            results: vec![("ranking", ranking)],
            figures: vec![(
                0,
                "ranking",
                "ranking",
                Options {
                    top: Some(top),
                    ..Options::default()
                },
            )],
        },
    ];
    std::fs::create_dir_all(&dir).map_err(|e| Error::io(dir.display(), e))?;
    crate::output::write_file(&dir.join(MARKER), "a report written by nextstat report\n")?;
    let extension = if format == Format::Png { "png" } else { "svg" };
    let mut written = Vec::new();
    let mut results = Vec::new();
    let mut page = Vec::new();
    for section in &sections {
        let mut links = Vec::new();
        for (stem, result) in &section.results {
            let name = format!("{stem}.json");
            crate::output::write_file(&dir.join(&name), &format!("{}\n", to_json(result)))?;
            results.push(dir.join(&name));
            links.push(name);
        }
        let mut images = Vec::new();
        for (from, kind, stem, options) in &section.figures {
            // A figure the result cannot give (no constrained parameter, no correlation beyond
            // the threshold) is named on the page instead of stopping the report.
            match ns_plot::figure(kind, &section.results[*from].1, options) {
                Ok(figure) => {
                    let (bytes, _) = ns_plot::encode(&figure, format)?;
                    let name = format!("{stem}.{extension}");
                    crate::output::write_bytes_of("-o", &dir.join(&name), &bytes)?;
                    written.push(dir.join(&name));
                    images.push(Ok(name));
                }
                Err(e) => images.push(Err(format!("{stem}: {e}"))),
            }
        }
        page.push((section.title, links, images));
    }
    let index = dir.join("index.html");
    crate::output::write_file(&index, &html(&args.model.ws.path()?, &summary, &page))?;
    emit(
        &to_json(&json!({"index": index, "figures": written, "results": results})),
        None,
    )
}

/// A folder that holds files and is not a report (no [`MARKER`]) is the user's: refused
/// unless `overwrite`, so that a report never replaces someone's own `index.html`.
fn refuse_foreign_folder(dir: &Path, overwrite: bool) -> Result<()> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(()); // missing: created later
    };
    if overwrite || dir.join(MARKER).is_file() {
        return Ok(());
    }
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    if names.is_empty() {
        return Ok(());
    }
    names.sort();
    let shown = names.iter().take(3).cloned().collect::<Vec<_>>().join(", ");
    Err(Error::InvalidInput(format!(
        "-o {}: the folder holds other files ({shown}{}) and is not a report: choose an empty \
         or new folder, or give --overwrite to write the report's files into it",
        dir.display(),
        if names.len() > 3 { ", …" } else { "" }
    )))
}

/// The key numbers of the page: best fit of the POI, the fit's state and the limits.
fn summary_rows(fit: &Value, limit: &Value, poi: usize) -> Vec<(&'static str, String)> {
    let number = |v: &Value| v.as_f64().map_or("—".to_string(), |x| format!("{x:.4}"));
    let poi_name = fit["parameter_names"][poi].as_str().unwrap_or("POI");
    let cl = limit["level"].as_f64().map_or(95.0, |l| 100.0 * (1.0 - l));
    vec![
        ("parameter of interest", escape(poi_name)),
        (
            "best fit",
            format!(
                "{} ± {}",
                number(&fit["bestfit"][poi]),
                number(&fit["uncertainties"][poi])
            ),
        ),
        ("twice NLL at the best fit", number(&fit["twice_nll"])),
        ("fit converged", fit["converged"].to_string()),
        (
            "observed upper limit",
            format!("{} ({cl:.0} % CL)", number(&limit["obs"])),
        ),
        (
            "expected upper limit (−2σ, −1σ, median, +1σ, +2σ)",
            (0..5)
                .map(|k| number(&limit["exp"][k]))
                .collect::<Vec<_>>()
                .join(", "),
        ),
    ]
}

/// Text for HTML.
fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The index page: the key numbers, then each section's figures and links to its JSON.
type PageSection = (
    &'static str,
    Vec<String>,
    Vec<std::result::Result<String, String>>,
);

fn html(workspace: &Path, summary: &[(&str, String)], sections: &[PageSection]) -> String {
    let mut page = format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>nextstat report: {ws}</title>\n\
         <style>body{{font-family:sans-serif;max-width:1250px;margin:2em auto;color:#222}}\
         table{{border-collapse:collapse}}td{{padding:4px 12px;border-bottom:1px solid #ddd}}\
         img{{max-width:100%;border:1px solid #eee;margin:8px 0}}h2{{margin-top:1.6em}}\
         .missing{{color:#a33}}</style></head>\n\
         <body><h1>nextstat report</h1><p>Workspace <code>{ws}</code>, nextstat {version}.</p>\n<table>\n",
        ws = escape(&workspace.display().to_string()),
        version = env!("CARGO_PKG_VERSION"),
    );
    for (key, value) in summary {
        page += &format!("<tr><td>{key}</td><td>{value}</td></tr>\n");
    }
    page += "</table>\n";
    for (title, links, images) in sections {
        let links: Vec<String> = links
            .iter()
            .map(|f| format!("<a href=\"{f}\">{f}</a>"))
            .collect();
        page += &format!("<h2>{title}</h2><p>{}</p>\n", links.join(" · "));
        for image in images {
            page += &match image {
                Ok(file) => format!("<img src=\"{file}\" alt=\"{file}\">\n"),
                Err(why) => format!("<p class=\"missing\">No figure: {}</p>\n", escape(why)),
            };
        }
    }
    page + "</body></html>\n"
}
