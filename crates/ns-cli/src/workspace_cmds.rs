//! Workspace verbs with the `pyhf` CLI's semantics and outputs: inspect, prune, rename, combine,
//! sort, digest, patchset.

use crate::input::read_json;
use clap::Subcommand;
use ns_core::Result;
use ns_translate::Workspace;
use ns_translate::ops::{Join, Prune, Rename, inspect};
use ns_translate::patch::PatchSet;
use ns_translate::pyjson::{DumpOptions, digest, dumps};
use std::collections::HashMap;
use std::path::PathBuf;

use crate::emit;
use crate::input::{ModelArgs, WorkspaceArg};

#[derive(Subcommand)]
pub enum WorkspaceCommand {
    /// Summarise a workspace (channels, samples, parameters, measurements) as `pyhf inspect`
    Inspect {
        #[command(flatten)]
        model: ModelArgs,
        /// Print the summary as JSON instead of the text table
        #[arg(long)]
        json: bool,
        /// Also write the JSON summary to this file (pyhf's --output-file)
        #[arg(short = 'o', long = "output-file")]
        output: Option<PathBuf>,
    },
    /// Remove channels, samples, modifiers, modifier types or measurements (`pyhf prune`)
    Prune {
        #[command(flatten)]
        ws: WorkspaceArg,
        #[arg(short = 'c', long = "channel")]
        channels: Vec<String>,
        #[arg(short = 's', long = "sample")]
        samples: Vec<String>,
        #[arg(short = 'm', long = "modifier")]
        modifiers: Vec<String>,
        #[arg(short = 't', long = "modifier-type", value_parser = ["histosys", "lumi", "normfactor", "normsys", "shapefactor", "shapesys", "staterror"])]
        modifier_types: Vec<String>,
        #[arg(long = "measurement")]
        measurements: Vec<String>,
        #[arg(short = 'o', long = "output-file")]
        output: Option<PathBuf>,
    },
    /// Rename channels, samples, modifiers or measurements (`pyhf rename`)
    Rename {
        #[command(flatten)]
        ws: WorkspaceArg,
        #[arg(short = 'c', long = "channel", num_args = 2, value_names = ["OLD", "NEW"])]
        channels: Vec<String>,
        #[arg(short = 's', long = "sample", num_args = 2, value_names = ["OLD", "NEW"])]
        samples: Vec<String>,
        #[arg(short = 'm', long = "modifier", num_args = 2, value_names = ["OLD", "NEW"])]
        modifiers: Vec<String>,
        #[arg(long = "measurement", num_args = 2, value_names = ["OLD", "NEW"])]
        measurements: Vec<String>,
        #[arg(short = 'o', long = "output-file")]
        output: Option<PathBuf>,
    },
    /// Combine two workspaces (`pyhf combine`)
    Combine {
        left: PathBuf,
        right: PathBuf,
        /// none, outer, 'left outer' or 'right outer'
        #[arg(short = 'j', long, default_value = "none")]
        join: String,
        /// Merge the samples of same-named channels (outer joins only)
        #[arg(long)]
        merge_channels: bool,
        #[arg(short = 'o', long = "output-file")]
        output: Option<PathBuf>,
    },
    /// Sort channels, samples, modifiers, measurements and observations by name (`pyhf sort`)
    Sort {
        #[command(flatten)]
        ws: WorkspaceArg,
        #[arg(short = 'o', long = "output-file")]
        output: Option<PathBuf>,
    },
    /// pyhf's sha256 digest of a workspace (`pyhf digest`)
    Digest {
        #[command(flatten)]
        ws: WorkspaceArg,
        /// Print {"sha256": ...} as JSON instead of `sha256:HEX`
        #[arg(short = 'j', long)]
        json: bool,
    },
    /// HEPData patchsets: extract, apply, verify, inspect
    #[command(subcommand)]
    Patchset(PatchsetCommand),
    /// A HistFactory combination XML and its ROOT files as a pyhf workspace (`pyhf xml2json`)
    Xml2json {
        /// The top-level combination XML
        #[arg(value_name = "COMBINATION.xml")]
        top: PathBuf,
        /// The folder the XML's paths start from (default: the XML's folder, or the nearest
        /// folder above it from which its first channel is found)
        #[arg(long)]
        basedir: Option<PathBuf>,
        #[arg(short = 'o', long = "output-file")]
        output: Option<PathBuf>,
    },
    /// A CMS Combine datacard as a pyhf workspace, where pyhf expresses its likelihood exactly
    /// (symmetric lnN, gmN, ranged rateParams, templates without shape systematics; fit it with
    /// normsys code1); any other term is refused by name (see docs/combine.md)
    Datacard2json {
        #[command(flatten)]
        model: ModelArgs,
        #[arg(short = 'o', long = "output-file")]
        output: Option<PathBuf>,
    },
    /// The model as an HS3 document that ROOT 6.40 imports as the same likelihood (binned:
    /// ROOT's HistFactory dialect; see docs/hs3-binned.md)
    ExportHs3 {
        #[command(flatten)]
        model: ModelArgs,
        #[arg(short = 'o', long = "output-file")]
        output: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
pub enum PatchsetCommand {
    /// Print one patch of a patchset
    Extract {
        patchset: PathBuf,
        #[arg(long)]
        name: String,
        /// Include the patch and patchset metadata
        #[arg(long)]
        with_metadata: bool,
        #[arg(short = 'o', long = "output-file")]
        output: Option<PathBuf>,
    },
    /// Verify the background-only workspace's digest and apply one patch
    Apply {
        background_only: PathBuf,
        patchset: PathBuf,
        #[arg(long)]
        name: String,
        #[arg(short = 'o', long = "output-file")]
        output: Option<PathBuf>,
    },
    /// Check that a patchset was made for this background-only workspace
    Verify {
        background_only: PathBuf,
        patchset: PathBuf,
    },
    /// List the patches of a patchset
    Inspect { patchset: PathBuf },
}

fn pyhf_json(ws: &Workspace) -> String {
    dumps(&ws.to_value(), DumpOptions::PYHF_CLI)
}

fn pairs(flat: &[String]) -> HashMap<String, String> {
    flat.chunks(2)
        .filter(|p| p.len() == 2)
        .map(|p| (p[0].clone(), p[1].clone()))
        .collect()
}

/// Output of a command that mirrors `pyhf`: byte-identical files.
fn emit_pyhf(text: &str, output: Option<&PathBuf>) -> Result<()> {
    crate::output::emit_as_pyhf(text, output.map(|p| p.as_path()))
}

fn load(ws: &WorkspaceArg) -> Result<Workspace> {
    load_path(&ws.path()?)
}

/// A workspace file, remembered as an input (no output may replace it).
fn load_path(path: &std::path::Path) -> Result<Workspace> {
    crate::input::remember(path);
    Workspace::from_path(path)
}

pub fn run(cmd: WorkspaceCommand) -> Result<()> {
    match cmd {
        WorkspaceCommand::Inspect {
            model,
            json,
            output,
        } => {
            let ws = Workspace::from_value(model.workspace_value()?)?;
            if let Some(name) = &model.measurement {
                ws.measurement(Some(name))?;
            }
            let orphans = ws.orphaned_observations();
            if !orphans.is_empty() {
                eprintln!(
                    "note: observations without a channel, ignored as pyhf does: {}",
                    orphans.join(", ")
                );
            }
            let summary = inspect(&ws)?;
            let json_text = dumps(&summary.json, DumpOptions::PYHF_CLI);
            if json {
                emit(&json_text, None)?;
            } else {
                crate::output::print(&summary.text)?;
            }
            if let Some(path) = output {
                emit_pyhf(&json_text, Some(&path))?;
            }
            Ok(())
        }
        WorkspaceCommand::Prune {
            ws,
            channels,
            samples,
            modifiers,
            modifier_types,
            measurements,
            output,
        } => {
            let pruned = load(&ws)?.prune(&Prune {
                channels,
                samples,
                modifiers,
                modifier_types,
                measurements,
            })?;
            emit_pyhf(&pyhf_json(&pruned), output.as_ref())
        }
        WorkspaceCommand::Rename {
            ws,
            channels,
            samples,
            modifiers,
            measurements,
            output,
        } => {
            let renamed = load(&ws)?.rename(&Rename {
                channels: pairs(&channels),
                samples: pairs(&samples),
                modifiers: pairs(&modifiers),
                measurements: pairs(&measurements),
            })?;
            emit_pyhf(&pyhf_json(&renamed), output.as_ref())
        }
        WorkspaceCommand::Combine {
            left,
            right,
            join,
            merge_channels,
            output,
        } => {
            let join = Join::from_name(&join)?;
            if matches!(join, Join::LeftOuter | Join::RightOuter) {
                // pyhf's warning, word for word.
                eprintln!(
                    "warning: You are using an unsafe join operation. This will silence exceptions \
                     that might be raised during a normal 'outer' operation."
                );
            }
            let combined = Workspace::combine(
                &load_path(&left)?,
                &load_path(&right)?,
                join,
                merge_channels,
            )?;
            emit_pyhf(&pyhf_json(&combined), output.as_ref())
        }
        WorkspaceCommand::Sort { ws, output } => {
            emit_pyhf(&pyhf_json(&load(&ws)?.sorted()), output.as_ref())
        }
        WorkspaceCommand::Digest { ws, json } => {
            // The digest is of the document as read, like pyhf's (validated first).
            let path = ws.path()?;
            let value = read_json(&path)?;
            let hex = digest(&value);
            Workspace::from_value(value)?;
            if json {
                emit(
                    &dumps(&serde_json::json!({"sha256": hex}), DumpOptions::PYHF_CLI),
                    None,
                )
            } else {
                emit(&format!("sha256:{hex}"), None)
            }
        }
        WorkspaceCommand::Patchset(cmd) => run_patchset(cmd),
        WorkspaceCommand::Xml2json {
            top,
            basedir,
            output,
        } => {
            crate::input::remember(&top);
            let value =
                ns_xml::workspace_of_files(&top, basedir.as_deref(), ns_xml::Semantics::Pyhf)?;
            emit_pyhf(&dumps(&value, DumpOptions::PYHF_CLI), output.as_ref())
        }
        WorkspaceCommand::Datacard2json { model, output } => {
            let value = model.model_ref()?.datacard_as_pyhf(&crate::input::Inputs)?;
            emit_pyhf(&dumps(&value, DumpOptions::PYHF_CLI), output.as_ref())?;
            eprintln!(
                "note: the lnN factors are exact under normsys code1: fit with \
                 `--interp-codes normsys=code1` (pyhf: modifier_settings={{\"normsys\": \
                 {{\"interpcode\": \"code1\"}}}})"
            );
            Ok(())
        }
        WorkspaceCommand::ExportHs3 { model, output } => {
            let document = model.model_ref()?.to_hs3(&crate::input::Inputs)?;
            emit(&crate::to_json(&document), output.as_ref())
        }
    }
}

fn run_patchset(cmd: PatchsetCommand) -> Result<()> {
    let load_ps = |p: &PathBuf| -> Result<PatchSet> { PatchSet::from_value(read_json(p)?) };
    match cmd {
        PatchsetCommand::Extract {
            patchset,
            name,
            with_metadata,
            output,
        } => {
            let value = load_ps(&patchset)?.extract(&name, with_metadata)?;
            emit_pyhf(&dumps(&value, DumpOptions::PYHF_CLI), output.as_ref())
        }
        PatchsetCommand::Apply {
            background_only,
            patchset,
            name,
            output,
        } => {
            let background = read_json(&background_only)?;
            Workspace::from_value(background.clone())?;
            let patched = Workspace::from_value(load_ps(&patchset)?.apply(&background, &name)?)?;
            emit_pyhf(&pyhf_json(&patched), output.as_ref())
        }
        PatchsetCommand::Verify {
            background_only,
            patchset,
        } => {
            let background = read_json(&background_only)?;
            Workspace::from_value(background.clone())?;
            load_ps(&patchset)?.verify(&background)?;
            emit("All good.", None)
        }
        PatchsetCommand::Inspect { patchset } => {
            crate::output::print(&load_ps(&patchset)?.inspect_text())
        }
    }
}
