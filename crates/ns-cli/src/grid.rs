//! `upper-limit BKG.json --patchset PS.json --all` (and `hypotest … --all`): the limit (CLs) of
//! every signal point of a HEPData patchset, the points in parallel, as one table — patch name,
//! its metadata values, observed and expected limits — what `nextstat plot limit` draws as a
//! Brazil band; with `--shard I/N`, a part of that table for `nextstat merge`.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use ns_api::grid::Grid;
use ns_api::request::Request;
use ns_api::shard::{Shard, check_share};
use ns_core::{Error, Result};
use serde_json::Value;

use crate::infer_cmds::{InferArgs, progress};
use crate::input::read_json;
use crate::{emit, to_json};

/// The grid of `args`' patchset for `request`: the whole table, or `shard`'s part of it.
pub fn run(args: &InferArgs, request: Request, shard: Option<Shard>) -> Result<()> {
    let path = args
        .model
        .patchset
        .as_ref()
        .ok_or_else(|| Error::InvalidInput("--all needs --patchset PS.json".into()))?;
    let named = |e: Error| Error::InvalidInput(format!("{}: {e}", path.display()));
    // The patchset read and validated once (pyhf's checks); every point applies its patch to the
    // background from it.
    let patchset_value = read_json(path)?;
    let patchset =
        ns_translate::patch::PatchSet::from_value(patchset_value.clone()).map_err(named)?;
    // The background as its format reads it (a pyhf workspace, or the one a HistFactory XML
    // gives), before the `-p` patches, which every point applies after its own patch.
    let background = args
        .model
        .background_ref()?
        .document(&crate::input::Inputs)?;
    // The digest is checked once for the whole grid.
    if args.model.skip_verify {
        args.model.warn_unverified();
    } else {
        patchset.verify(&background).map_err(|e| {
            let root = background
                .get(ns_translate::model::root::ROOT_SEMANTICS_KEY)
                .is_some();
            Error::InvalidInput(format!(
                "{}: {e}; {}--skip-verify applies its patches anyway",
                path.display(),
                if root {
                    "the background is HistFactory XML read with ROOT's semantics, whose \
                     workspace differs from pyhf's reading (a patchset made for that verifies \
                     with --semantics pyhf); "
                } else {
                    ""
                }
            ))
        })?;
    }
    // The call of every point: the options given, on the background (the point's patch first).
    let mut template_args = args.clone();
    template_args.model.patchset = None;
    let template = template_args.call(request)?;
    let grid = Grid {
        background: &background,
        patchset: &patchset,
        template: &template,
    };
    grid.check().map_err(named)?;
    let n = patchset.patches.len();
    let stop = Arc::new(AtomicBool::new(false));
    let share = match shard {
        Some(s) => check_share(s, n, "signal points")?,
        None => 0..n,
    };
    let bar = progress(share.len() as u64, "signal points");
    let step = |k: usize| bar.set_position(k as u64);
    let document = match shard {
        None => grid
            .run(&crate::input::Inputs, &stop, &step)
            .inspect(warn_errors),
        Some(s) => {
            let model = template
                .model
                .as_ref()
                .ok_or_else(|| Error::InvalidInput("no model".into()))?;
            let job = grid.job(
                model.digest(&crate::input::Inputs)?,
                &patchset_value,
                s.count,
            )?;
            grid.run_part(share, &crate::input::Inputs, &stop, &step)
                .map(|part| job.partial(s, part))
        }
    };
    bar.finish_and_clear();
    let document = document.map_err(|e| match e {
        Error::Computation(m) => Error::Computation(format!("{}: {m}", path.display())),
        other => other,
    })?;
    emit(&to_json(&document), args.out.output.as_ref())
}

/// Each point of a grid's table that failed, said on stderr (the table lists them too).
pub fn warn_errors(table: &Value) {
    for e in table["errors"].as_array().into_iter().flatten() {
        eprintln!(
            "warning: patch {}: {}",
            e["patch"],
            e["error"].as_str().unwrap_or_default()
        );
    }
}
