//! pyhf's workspace operations: prune, rename, combine, sorted, and the `inspect` summary.

use ns_core::{Error, Result};
use serde_json::{Map, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::model::{FromWorkspace, ModelOptions};
use crate::spec::{Channel, Measurement, Modifier, Observation, Workspace};
use ns_core::model::{Constraint, HistFactoryModel};

fn op_error(m: String) -> Error {
    Error::Operation(m)
}

/// What to remove from a workspace (pyhf's `Workspace.prune`).
#[derive(Clone, Debug, Default)]
pub struct Prune {
    pub channels: Vec<String>,
    pub samples: Vec<String>,
    pub modifiers: Vec<String>,
    pub modifier_types: Vec<String>,
    pub measurements: Vec<String>,
}

/// What to rename (old → new), as pyhf's `Workspace.rename`.
#[derive(Clone, Debug, Default)]
pub struct Rename {
    pub channels: HashMap<String, String>,
    pub samples: HashMap<String, String>,
    pub modifiers: HashMap<String, String>,
    pub measurements: HashMap<String, String>,
}

/// How `combine` joins items of the same name (pyhf's `join`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Join {
    None,
    Outer,
    LeftOuter,
    RightOuter,
}

impl Join {
    pub const NAMES: [&'static str; 4] = ["none", "outer", "left outer", "right outer"];

    pub fn from_name(name: &str) -> Result<Join> {
        match name {
            "none" => Ok(Join::None),
            "outer" => Ok(Join::Outer),
            "left outer" => Ok(Join::LeftOuter),
            "right outer" => Ok(Join::RightOuter),
            other => Err(Error::InvalidInput(format!(
                "workspaces must be joined using one of {:?}, not '{other}'",
                Join::NAMES
            ))),
        }
    }
}

impl Workspace {
    /// Sorted unique (modifier name, type) pairs over all samples.
    pub fn modifier_pairs(&self) -> BTreeSet<(String, &'static str)> {
        self.channels
            .iter()
            .flat_map(|c| c.samples.iter())
            .flat_map(|s| s.modifiers.iter())
            .map(|m| (m.name.clone(), m.kind.type_name()))
            .collect()
    }

    fn sample_names(&self) -> BTreeSet<&str> {
        self.channels
            .iter()
            .flat_map(|c| c.samples.iter().map(|s| s.name.as_str()))
            .collect()
    }

    /// pyhf's existence checks of prune/rename, in pyhf's order.
    fn check_names(
        &self,
        types: &[String],
        modifiers: &[String],
        samples: &[String],
        channels: &[String],
        measurements: &[String],
    ) -> Result<()> {
        // pyhf checks types against dict(modifiers).values(): the last type per name (a quirk kept on purpose).
        let last_type: BTreeMap<String, &str> = self.modifier_pairs().into_iter().collect();
        let known_types: BTreeSet<&str> = last_type.values().copied().collect();
        if let Some(t) = types.iter().find(|t| !known_types.contains(t.as_str())) {
            return Err(op_error(format!(
                "{t} is not one of the modifier types in this workspace."
            )));
        }
        if let Some(m) = modifiers
            .iter()
            .find(|m| !last_type.contains_key(m.as_str()))
        {
            return Err(op_error(format!(
                "{m} is not one of the modifiers in this workspace."
            )));
        }
        let known_samples = self.sample_names();
        if let Some(s) = samples.iter().find(|s| !known_samples.contains(s.as_str())) {
            return Err(op_error(format!(
                "{s} is not one of the samples in this workspace."
            )));
        }
        if let Some(c) = channels
            .iter()
            .find(|c| !self.channels.iter().any(|x| x.name == **c))
        {
            return Err(op_error(format!(
                "{c} is not one of the channels in this workspace."
            )));
        }
        if let Some(m) = measurements
            .iter()
            .find(|m| !self.measurements.iter().any(|x| x.name == **m))
        {
            return Err(op_error(format!(
                "{m} is not one of the measurements in this workspace."
            )));
        }
        Ok(())
    }

    fn prune_and_rename(&self, prune: &Prune, rename: &Rename) -> Result<Workspace> {
        let all = |a: &'_ [String], b: &'_ HashMap<String, String>| -> Vec<String> {
            a.iter().cloned().chain(b.keys().cloned()).collect()
        };
        let (mods, samples, channels, measurements) = (
            all(&prune.modifiers, &rename.modifiers),
            all(&prune.samples, &rename.samples),
            all(&prune.channels, &rename.channels),
            all(&prune.measurements, &rename.measurements),
        );
        self.check_names(
            &prune.modifier_types,
            &mods,
            &samples,
            &channels,
            &measurements,
        )?;
        let renamed = |map: &HashMap<String, String>, name: &str| {
            map.get(name).cloned().unwrap_or_else(|| name.to_string())
        };
        let contains = |list: &[String], name: &str| list.iter().any(|x| x == name);
        let new = Workspace {
            channels: self
                .channels
                .iter()
                .filter(|c| !contains(&prune.channels, &c.name))
                .map(|c| Channel {
                    name: renamed(&rename.channels, &c.name),
                    samples: c
                        .samples
                        .iter()
                        .filter(|s| !contains(&prune.samples, &s.name))
                        .map(|s| {
                            let mut s = s.clone();
                            s.name = renamed(&rename.samples, &s.name);
                            s.modifiers = s
                                .modifiers
                                .into_iter()
                                .filter(|m| {
                                    !contains(&prune.modifiers, &m.name)
                                        && !contains(&prune.modifier_types, m.kind.type_name())
                                })
                                .map(|m| Modifier {
                                    name: renamed(&rename.modifiers, &m.name),
                                    kind: m.kind,
                                })
                                .collect();
                            s
                        })
                        .collect(),
                })
                .collect(),
            measurements: self
                .measurements
                .iter()
                .filter(|m| !contains(&prune.measurements, &m.name))
                .map(|m| {
                    let mut m: Measurement = m.clone();
                    m.name = renamed(&rename.measurements, &m.name);
                    m.config
                        .parameters
                        .retain(|p| !contains(&prune.modifiers, &p.name));
                    for p in &mut m.config.parameters {
                        p.name = renamed(&rename.modifiers, &p.name);
                    }
                    m.config.poi = renamed(&rename.modifiers, &m.config.poi);
                    m
                })
                .collect(),
            observations: self
                .observations
                .iter()
                .filter(|o| !contains(&prune.channels, &o.name))
                .map(|o| Observation {
                    name: renamed(&rename.channels, &o.name),
                    data: o.data.clone(),
                })
                .collect(),
            version: self.version.clone(),
            root_semantics: self.root_semantics.clone(),
        };
        new.validate()
            .map_err(|e| op_error(format!("the result is not a valid workspace: {e}")))?;
        Ok(new)
    }

    /// pyhf's `Workspace.prune`.
    pub fn prune(&self, prune: &Prune) -> Result<Workspace> {
        self.prune_and_rename(prune, &Rename::default())
    }

    /// pyhf's `Workspace.rename`.
    pub fn rename(&self, rename: &Rename) -> Result<Workspace> {
        if self.root_semantics.is_some() {
            return Err(op_error(
                "a workspace read from HistFactory XML with ROOT's semantics cannot be renamed: \
                 its ROOT terms are keyed by the names (rename in the XML, or read it with \
                 --semantics pyhf)"
                    .into(),
            ));
        }
        self.prune_and_rename(&Prune::default(), rename)
    }

    /// pyhf's `Workspace.sorted`: channels, samples, modifiers (by name, type), measurements,
    /// their parameter configs and observations sorted by name.
    pub fn sorted(&self) -> Workspace {
        let mut ws = self.clone();
        ws.channels.sort_by(|a, b| a.name.cmp(&b.name));
        for c in &mut ws.channels {
            c.samples.sort_by(|a, b| a.name.cmp(&b.name));
            for s in &mut c.samples {
                s.modifiers.sort_by(|a, b| {
                    (&a.name, a.kind.type_name()).cmp(&(&b.name, b.kind.type_name()))
                });
            }
        }
        ws.measurements.sort_by(|a, b| a.name.cmp(&b.name));
        for m in &mut ws.measurements {
            m.config.parameters.sort_by(|a, b| a.name.cmp(&b.name));
        }
        ws.observations.sort_by(|a, b| a.name.cmp(&b.name));
        ws
    }

    /// pyhf's `Workspace.combine(left, right, join, merge_channels)`.
    pub fn combine(
        left: &Workspace,
        right: &Workspace,
        join: Join,
        merge_channels: bool,
    ) -> Result<Workspace> {
        if merge_channels && join == Join::None {
            return Err(Error::InvalidInput(
                "channels can only be merged with the 'outer', 'left outer' or 'right outer' join"
                    .into(),
            ));
        }
        if left.root_semantics.is_some() || right.root_semantics.is_some() {
            return Err(op_error(
                "a workspace read from HistFactory XML with ROOT's semantics cannot be combined: \
                 combine pyhf workspaces (read the XML with --semantics pyhf) or the XML \
                 channels themselves"
                    .into(),
            ));
        }
        if left.version != right.version {
            return Err(op_error(format!(
                "workspaces of different versions cannot be combined: {} != {}",
                left.version, right.version
            )));
        }
        let to_values = |ws: &Workspace, key: &str| -> Vec<Value> {
            ws.to_value()[key].as_array().cloned().unwrap_or_default()
        };
        let hint = format!(
            "You can also try a different join operation: {:?}.",
            Join::NAMES
        );

        let channels = join_items(
            join,
            to_values(left, "channels"),
            to_values(right, "channels"),
            merge_channels.then_some("samples"),
        );
        check_joined(
            join,
            "channels",
            &to_values(left, "channels"),
            &to_values(right, "channels"),
            &channels,
            &hint,
        )?;
        let observations = join_items(
            join,
            to_values(left, "observations"),
            to_values(right, "observations"),
            None,
        );
        check_joined(
            join,
            "observations",
            &to_values(left, "observations"),
            &to_values(right, "observations"),
            &observations,
            &hint,
        )?;
        let left_m = to_values(left, "measurements");
        let right_m = to_values(right, "measurements");
        let mut measurements = join_items(join, left_m.clone(), right_m.clone(), None);
        if join == Join::None {
            let common = common_names(&left_m, &right_m);
            if !common.is_empty() {
                return Err(op_error(format!(
                    "workspaces cannot have any measurements in common with the same name: {common:?}. {hint}"
                )));
            }
        } else if join == Join::Outer {
            measurements = merge_measurements(measurements, &hint)?;
        }
        let combined = serde_json::json!({
            "channels": channels,
            "measurements": measurements,
            "observations": observations,
            "version": left.version,
        });
        Workspace::from_value(combined)
            .map_err(|e| op_error(format!("the combined workspace is not valid: {e}")))
    }
}

fn name_of(v: &Value) -> &str {
    v["name"].as_str().unwrap_or_default()
}

/// Python equality of JSON values: `1 == 1.0`; key order irrelevant.
fn py_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| py_eq(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| py_eq(v, w)))
        }
        _ => a == b,
    }
}

/// pyhf's `_join_items`.
fn join_items(
    join: Join,
    left: Vec<Value>,
    right: Vec<Value>,
    deep_merge_key: Option<&str>,
) -> Vec<Value> {
    let (primary, secondary) = if join == Join::RightOuter {
        (right, left)
    } else {
        (left, right)
    };
    let keys: Vec<String> = primary.iter().map(|v| name_of(v).to_string()).collect();
    let mut out = primary.clone();
    for item in secondary {
        let position = keys.iter().position(|k| k == name_of(&item));
        match (position, deep_merge_key) {
            (Some(i), Some(key)) => {
                let merged = join_items(
                    Join::LeftOuter,
                    out[i][key].as_array().cloned().unwrap_or_default(),
                    item[key].as_array().cloned().unwrap_or_default(),
                    None,
                );
                out[i][key] = Value::Array(merged);
            }
            _ => {
                let append = match join {
                    Join::None => true,
                    Join::Outer => !primary.iter().any(|p| py_eq(p, &item)),
                    Join::LeftOuter | Join::RightOuter => position.is_none(),
                };
                if append {
                    out.push(item);
                }
            }
        }
    }
    out
}

fn common_names(left: &[Value], right: &[Value]) -> BTreeSet<String> {
    let l: BTreeSet<&str> = left.iter().map(name_of).collect();
    right
        .iter()
        .map(name_of)
        .filter(|n| l.contains(n))
        .map(String::from)
        .collect()
}

fn check_joined(
    join: Join,
    what: &str,
    left: &[Value],
    right: &[Value],
    joined: &[Value],
    hint: &str,
) -> Result<()> {
    match join {
        Join::None => {
            let common = common_names(left, right);
            if !common.is_empty() {
                return Err(op_error(format!(
                    "workspaces cannot have any {what} in common with the same name: {common:?}. {hint}"
                )));
            }
        }
        Join::Outer => {
            let mut seen = BTreeSet::new();
            let mut duplicated = Vec::new();
            for n in joined.iter().map(name_of) {
                if !seen.insert(n) && !duplicated.contains(&n) {
                    duplicated.push(n);
                }
            }
            if !duplicated.is_empty() {
                return Err(op_error(format!(
                    "workspaces cannot have {what} in common with incompatible structure: {duplicated:?}. {hint}"
                )));
            }
        }
        Join::LeftOuter | Join::RightOuter => {}
    }
    Ok(())
}

/// pyhf's outer join of measurements: same-named measurements must share the POI; their
/// parameter configs are joined and must not conflict.
fn merge_measurements(measurements: Vec<Value>, hint: &str) -> Result<Vec<Value>> {
    let mut groups: Vec<(String, Vec<Value>)> = Vec::new();
    for m in measurements {
        match groups.iter_mut().find(|(n, _)| n == name_of(&m)) {
            Some((_, g)) => g.push(m),
            None => groups.push((name_of(&m).to_string(), vec![m])),
        }
    }
    let incompatible: Vec<&str> = groups
        .iter()
        .filter(|(_, g)| {
            g.iter()
                .map(|m| m["config"]["poi"].to_string())
                .collect::<BTreeSet<_>>()
                .len()
                > 1
        })
        .map(|(n, _)| n.as_str())
        .collect();
    if !incompatible.is_empty() {
        return Err(op_error(format!(
            "workspaces cannot have the same measurements with incompatible POI: {incompatible:?}."
        )));
    }
    let mut out = Vec::new();
    for (name, group) in groups {
        let mut iter = group.into_iter();
        let Some(first) = iter.next() else { continue };
        let Some(second) = iter.next() else {
            out.push(first);
            continue;
        };
        let params = |m: &Value| {
            m["config"]["parameters"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        };
        let joined = join_items(Join::Outer, params(&first), params(&second), None);
        let mut seen = BTreeSet::new();
        let dup: Vec<&str> = joined
            .iter()
            .map(name_of)
            .filter(|n| !seen.insert(*n))
            .collect();
        if !dup.is_empty() {
            return Err(op_error(format!(
                "workspaces cannot have a measurement ({name}) with incompatible parameter configs: {dup:?}. {hint}"
            )));
        }
        out.push(serde_json::json!({"name": name, "config": {"poi": first["config"]["poi"], "parameters": joined}}));
    }
    Ok(out)
}

/// pyhf's `inspect` summary of a workspace, as text and as JSON.
pub struct Inspection {
    pub json: Value,
    pub text: String,
}

/// Summarise a workspace as `pyhf inspect` does (the model is built from the first measurement).
pub fn inspect(ws: &Workspace) -> Result<Inspection> {
    let summary = Summary::of(ws)?;
    Ok(Inspection {
        json: summary.json(),
        text: summary.text(ws.measurements.first().map(|m| m.name.as_str())),
    })
}

/// What `inspect` reports, gathered once for its JSON and its text.
struct Summary<'w> {
    /// The last modifier type of each name (pyhf's `modifiers`).
    last_type: BTreeMap<String, &'w str>,
    samples: Vec<&'w str>,
    channels: Vec<(String, usize)>,
    /// (parameter set, constraint description), sorted.
    parameters: Vec<(String, &'static str)>,
    /// Every modifier type of each name, in order of appearance.
    types_by_name: HashMap<String, Vec<&'w str>>,
    /// (name, POI, configured parameters).
    measurements: Vec<(&'w str, &'w str, Vec<&'w str>)>,
}

impl<'w> Summary<'w> {
    fn of(ws: &'w Workspace) -> Result<Self> {
        let model = HistFactoryModel::from_workspace(ws, &ModelOptions::default())?;
        let pairs = ws.modifier_pairs();
        let last_type: BTreeMap<String, &str> = pairs.iter().cloned().collect();
        let samples: Vec<&str> = ws.sample_names().into_iter().collect();
        let channels: Vec<(String, usize)> = model
            .channels
            .iter()
            .map(|c| (c.name.clone(), c.n_bins))
            .collect();
        let descr = |c: Constraint| match c {
            Constraint::None => "unconstrained",
            Constraint::Gaussian => "constrained_by_normal",
            Constraint::Poisson => "constrained_by_poisson",
        };
        let mut parameters: Vec<(String, &'static str)> = model
            .parameter_sets
            .iter()
            .map(|s| (s.name.clone(), descr(s.constraint)))
            .collect();
        parameters.sort();
        // One pass: linear in modifiers.
        let mut types_by_name: HashMap<String, Vec<&str>> = HashMap::new();
        for (n, t) in &pairs {
            types_by_name.entry(n.clone()).or_default().push(*t);
        }
        let measurements = ws
            .measurements
            .iter()
            .map(|m| {
                (
                    m.name.as_str(),
                    m.config.poi.as_str(),
                    m.config
                        .parameters
                        .iter()
                        .map(|p| p.name.as_str())
                        .collect(),
                )
            })
            .collect();
        Ok(Summary {
            last_type,
            samples,
            channels,
            parameters,
            types_by_name,
            measurements,
        })
    }

    fn types_of(&self, name: &str) -> Vec<&'w str> {
        self.types_by_name.get(name).cloned().unwrap_or_default()
    }

    /// pyhf's `inspect` JSON.
    fn json(&self) -> Value {
        let (samples, channels, parameters, measurements, last_type) = (
            &self.samples,
            &self.channels,
            &self.parameters,
            &self.measurements,
            &self.last_type,
        );
        let types_of = |n: &str| self.types_of(n);
        serde_json::json!({
            "samples": samples,
            "channels": channels.iter().map(|(c, n)| serde_json::json!([c, n])).collect::<Vec<_>>(),
            "modifiers": last_type.iter().map(|(n, t)| (n.clone(), Value::from(*t))).collect::<Map<String, Value>>(),
            "parameters": parameters.iter().map(|(n, d)| serde_json::json!([n, d])).collect::<Vec<_>>(),
            "systematics": parameters.iter().map(|(n, d)| serde_json::json!([n, d, types_of(n)])).collect::<Vec<_>>(),
            "measurements": measurements.iter().map(|(n, p, ps)| serde_json::json!([n, p, ps])).collect::<Vec<_>>(),
        })
    }

    /// pyhf's `inspect` table; `default` is the measurement marked `(*)`. Long, but one linear
    /// run of five small tables in pyhf's layout.
    fn text(&self, default: Option<&str>) -> String {
        let (samples, channels, parameters, measurements, last_type) = (
            &self.samples,
            &self.channels,
            &self.parameters,
            &self.measurements,
            &self.last_type,
        );
        let width = channels
            .iter()
            .map(|c| c.0.as_str())
            .chain(samples.iter().copied())
            .chain(parameters.iter().map(|p| p.0.as_str()))
            .chain(measurements.iter().map(|m| m.0))
            .map(|s| s.chars().count())
            .max()
            .unwrap_or(0);
        // Padding by hand: `format!("{s:>w$}")` panics for widths beyond 65,535 (a name can be longer).
        let r =
            |s: &str, w: usize| format!("{}{s}", " ".repeat(w.saturating_sub(s.chars().count())));
        let l =
            |s: &str, w: usize| format!("{s}{}", " ".repeat(w.saturating_sub(s.chars().count())));
        let c = |s: &str, w: usize| {
            let pad = w.saturating_sub(s.chars().count());
            format!("{}{s}{}", " ".repeat(pad / 2), " ".repeat(pad - pad / 2))
        };
        let mut out = String::new();
        let mut line = |s: String| {
            out.push_str(&s);
            out.push('\n');
        };
        line(r("     Summary     ", width + 7) + "  ");
        line(r(&"-".repeat(18), width + 7) + "  ");
        for (k, n) in [
            ("channels", channels.len()),
            ("samples", samples.len()),
            ("parameters", parameters.len()),
            ("modifiers", last_type.len()),
        ] {
            line(format!("{}  {n}", r(k, width)));
        }
        line(String::new());
        line(format!("{}  {}", r("channels", width), c("nbins", 5)));
        line(format!("{}  -----", r(&"-".repeat(10), width)));
        for (name, n) in channels.iter() {
            line(format!("{}  {}", r(name, width), c(&n.to_string(), 5)));
        }
        line(String::new());
        line(r("samples", width));
        line(r(&"-".repeat(10), width));
        for s in samples.iter() {
            line(r(s, width));
        }
        line(String::new());
        line(format!(
            "{}  {}  modifiers",
            r("parameters", width),
            l("constraint", 22)
        ));
        line(format!(
            "{}  {}  {}",
            r(&"-".repeat(10), width),
            l(&"-".repeat(10), 22),
            "-".repeat(10)
        ));
        for (name, d) in parameters.iter() {
            let mut types = self.types_of(name);
            types.sort();
            types.dedup();
            line(format!(
                "{}  {}  {}",
                r(name, width),
                l(d, 22),
                types.join(",")
            ));
        }
        line(String::new());
        line(format!(
            "{}  {}  parameters",
            r("measurement", width),
            c("poi", 22)
        ));
        line(format!(
            "{}  {}  {}",
            r(&"-".repeat(10), width),
            c(&"-".repeat(10), 22),
            "-".repeat(10)
        ));
        for (name, poi, params) in measurements.iter() {
            let label = if Some(*name) == default {
                format!("(*) {name}")
            } else {
                name.to_string()
            };
            let params = if params.is_empty() {
                "(none)".to_string()
            } else {
                params.join(",")
            };
            line(format!("{}  {}  {params}", r(&label, width), c(poi, 22)));
        }
        line(String::new());
        out
    }
}
