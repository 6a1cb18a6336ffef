//! Reading HS3 JSON (v0.2) into an [`UnbinnedModel`]: the standard's spellings and ROOT 6.40's
//! dialect (`ARGUS_dist`, `crystalball_doublesided_dist`, an exponential whose `c` is the
//! `generic_function` "-c", analyses with `domains` and `parameters_of_interest`, constraints as
//! factors of a `product_dist` on `const` global observables, axes with a `"value"`).
//!
//! Choices written down (docs/unbinned.md): variables marked `const` in the parameter point are
//! constants (global observables where a constraint reads them as its `x`); every other variable
//! a distribution reads is a fit parameter, in the order of the parameter point; an event outside
//! its observable's range is refused (an error naming it), as is a non-finite value or weight.

use std::collections::HashMap;

use ns_core::{Error, FileAccess, Result};
use serde_json::Value;

use crate::UnbinnedModel;
use crate::expr::Tape;
use crate::model::{Channel, Constraint, NodeKind};

/// The distribution type of a flow PDF (a nextstat extension: other readers skip it).
pub const FLOW_DIST: &str = "nextstat:flow_dist";

/// The deepest functions may be built from functions, and distributions from distributions:
/// a bound on the reader's recursion, far beyond what models need.
const MAX_NESTING: usize = 64;

mod data;
mod distributions;
mod functions;

use data::read_events;
use distributions::ChannelBuilder;
use functions::Reader;
use ns_hs3::{Document, index, invalid};

/// Which analysis of the file to read, and which files (Parquet events, flow manifests) it may
/// open: none by default.
#[derive(Clone, Debug)]
pub struct ReadOptions<'a> {
    pub analysis: Option<&'a str>,
    pub files: FileAccess<'a>,
}

impl Default for ReadOptions<'_> {
    fn default() -> Self {
        ReadOptions {
            analysis: None,
            files: FileAccess::Denied,
        }
    }
}

pub use ns_hs3::is_hs3;

/// Read the model of an HS3 document.
pub fn read(doc: &Value, options: &ReadOptions) -> Result<UnbinnedModel> {
    if !is_hs3(doc) {
        return Err(invalid(
            "the document is not HS3: it has no 'distributions' and 'likelihoods'".into(),
        ));
    }
    let Document {
        likelihood_name,
        pairs,
        variables,
        order,
        poi,
        ..
    } = Document::read(doc, options.analysis)?;
    let mut reader = Reader {
        distributions: index(doc, "distributions")?,
        functions: index(doc, "functions")?,
        variables,
        order,
        params: Vec::new(),
        globals: Vec::new(),
        tape: Tape::default(),
        built: HashMap::new(),
        expanding: Vec::new(),
        flows: HashMap::new(),
    };
    let mut channels = Vec::new();
    let mut observed = Vec::new();
    let mut raw_constraints = Vec::new();
    for (dist, dname, entry) in pairs {
        let (axes, events) = read_events(entry, dname, options.files)?;
        let mut b = ChannelBuilder {
            reader: &mut reader,
            files: options.files,
            axes,
            nodes: Vec::new(),
            constraints: Vec::new(),
            count: None,
            built: HashMap::new(),
            building: Vec::new(),
        };
        let root = b.build(dist, true)?;
        let ChannelBuilder {
            axes,
            mut nodes,
            constraints,
            count,
            ..
        } = b;
        raw_constraints.extend(constraints);
        // Flows without context: their log-densities become columns after the observables.
        let mut derived = axes.len();
        for node in &mut nodes {
            if let NodeKind::Flow { leaf, args } = &mut node.kind
                && args.is_empty()
            {
                leaf.derived_column = Some(derived);
                derived += 1;
            }
        }
        if count.is_some() && events.weights.is_some() && !(events.sum_weights() > 0.0) {
            return Err(Error::InvalidInput(format!(
                "data '{dname}': its weights sum to {} (an extended likelihood needs a positive total)",
                events.sum_weights()
            )));
        }
        let channel = Channel {
            name: dist.to_string(),
            axes,
            nodes,
            root,
            count,
        };
        channel.check_columns()?;
        channels.push(channel);
        observed.push(events);
    }
    // The same constraint may be a factor of several channels: keep one.
    let mut constraints = Vec::new();
    let mut aux = Vec::new();
    for (name, x, mean, sigma) in raw_constraints {
        if constraints.iter().any(|c: &Constraint| c.name == name) {
            continue;
        }
        let var = reader.variables.get(&x).cloned().unwrap_or_default();
        let slot = match reader.globals.iter().position(|g| *g == x) {
            Some(s) => s,
            None => {
                reader.globals.push(x.clone());
                aux.push(var.value.ok_or_else(|| {
                    invalid(format!(
                        "global observable '{x}' has no value in the parameter point"
                    ))
                })?);
                reader.globals.len() - 1
            }
        };
        constraints.push(Constraint {
            name,
            aux: slot,
            mean,
            sigma,
            range: var.range.unwrap_or((f64::NEG_INFINITY, f64::INFINITY)),
        });
    }

    // Parameters in the order of the parameter point, then of first use.
    let used = reader.params.clone();
    let mut names: Vec<String> = reader
        .order
        .iter()
        .filter(|n| used.contains(n))
        .cloned()
        .collect();
    let unlisted: Vec<String> = used
        .iter()
        .filter(|n| !names.contains(n))
        .cloned()
        .collect();
    names.extend(unlisted);
    let remap: Vec<usize> = used
        .iter()
        .map(|u| {
            names
                .iter()
                .position(|n| n == u)
                .expect("every used name is kept")
        })
        .collect();
    for c in &mut channels {
        for node in &mut c.nodes {
            node.remap(&remap);
        }
        if let Some(count) = &mut c.count {
            *count = count.remapped(&remap);
        }
    }
    for c in &mut constraints {
        c.mean = c.mean.remapped(&remap);
        c.sigma = c.sigma.remapped(&remap);
    }
    let mut init = Vec::new();
    let mut bounds = Vec::new();
    for n in &names {
        let var = &reader.variables[n];
        let range = var.range.ok_or_else(|| invalid(format!("parameter '{n}' has no domain: give it a range in 'domains' (or min/max in the parameter point)")))?;
        if !(range.0 <= range.1) {
            return Err(invalid(format!(
                "parameter '{n}' has the empty range [{}, {}]",
                range.0, range.1
            )));
        }
        init.push(var.value.unwrap_or(0.5 * (range.0 + range.1)));
        bounds.push(range);
    }
    let poi = match poi {
        Some(p) => names.iter().position(|n| n == p).ok_or_else(|| {
            format!("the parameter of interest '{p}' is not a free parameter of the likelihood")
        }),
        None => Err(format!(
            "likelihood '{likelihood_name}' names no parameter of interest (the analysis's 'parameters_of_interest')"
        )),
    };
    UnbinnedModel::new(crate::ModelParts {
        origin: format!("HS3 likelihood '{likelihood_name}'"),
        names,
        init,
        bounds,
        poi,
        channels,
        constraints,
        aux_names: reader.globals,
        observed,
        observed_aux: aux,
    })
}
