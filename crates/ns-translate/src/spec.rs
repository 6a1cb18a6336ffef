//! Typed pyhf workspace JSON (schema v1.0.0).
//!
//! Numbers are kept as [`serde_json::Number`] so that an integer stays an integer from parse to
//! output: pyhf's digest hashes `json.dumps` text, in which `20` and `20.0` differ.

use serde::{Deserialize, Serialize};
use serde_json::{Number, Value};

/// A pyhf workspace: channels, measurements, observations.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Workspace {
    pub channels: Vec<Channel>,
    pub measurements: Vec<Measurement>,
    pub observations: Vec<Observation>,
    pub version: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Channel {
    pub name: String,
    pub samples: Vec<Sample>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sample {
    pub name: String,
    pub data: Vec<Number>,
    pub modifiers: Vec<Modifier>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Observation {
    pub name: String,
    pub data: Vec<Number>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Measurement {
    pub name: String,
    pub config: MeasurementConfig,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MeasurementConfig {
    pub poi: String,
    pub parameters: Vec<ParameterConfig>,
}

/// A measurement's configuration of one parameter set; absent keys keep the modifier's defaults.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParameterConfig {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inits: Option<Vec<Number>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bounds: Option<Vec<Vec<Number>>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auxdata: Option<Vec<Number>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub factors: Option<Vec<Number>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sigmas: Option<Vec<Number>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fixed: Option<bool>,
}

/// One modifier of a sample. (De)serialised as pyhf's `{"name", "type", "data"}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "RawModifier", into = "RawModifier")]
pub struct Modifier {
    pub name: String,
    pub kind: ModifierKind,
}

/// The seven HistFactory modifier types with their data.
#[derive(Clone, Debug, PartialEq)]
pub enum ModifierKind {
    HistoSys {
        hi_data: Vec<Number>,
        lo_data: Vec<Number>,
    },
    Lumi,
    NormFactor,
    NormSys {
        hi: Number,
        lo: Number,
    },
    ShapeFactor,
    ShapeSys(Vec<Number>),
    StatError(Vec<Number>),
}

/// pyhf's modifier type names, in pyhf's parameter-order grouping.
pub const MODIFIER_TYPES: [&str; 7] = [
    "histosys",
    "lumi",
    "normfactor",
    "normsys",
    "shapefactor",
    "shapesys",
    "staterror",
];

impl ModifierKind {
    pub fn type_name(&self) -> &'static str {
        match self {
            ModifierKind::HistoSys { .. } => "histosys",
            ModifierKind::Lumi => "lumi",
            ModifierKind::NormFactor => "normfactor",
            ModifierKind::NormSys { .. } => "normsys",
            ModifierKind::ShapeFactor => "shapefactor",
            ModifierKind::ShapeSys(_) => "shapesys",
            ModifierKind::StatError(_) => "staterror",
        }
    }
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawModifier {
    name: String,
    #[serde(rename = "type")]
    kind: String,
    data: Value,
}

/// The numbers of a modifier's data list; `what` names it in an error (built only then: a
/// published workspace has thousands of lists).
fn numbers(value: Value, what: impl Fn() -> String) -> Result<Vec<Number>, String> {
    match value {
        Value::Array(items) if !items.is_empty() => items
            .into_iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::Number(n) => Ok(n),
                other => Err(format!("{}[{i}] must be a number, found {other}", what())),
            })
            .collect(),
        Value::Array(_) => Err(format!("{} must be a non-empty list of numbers", what())),
        other => Err(format!(
            "{} must be a list of numbers, found {}",
            what(),
            short(&other)
        )),
    }
}

fn short(value: &Value) -> String {
    let text = value.to_string();
    if text.len() > 60 {
        format!("{}…", &text[..text.floor_char_boundary(60)])
    } else {
        text
    }
}

impl TryFrom<RawModifier> for Modifier {
    type Error = String;

    fn try_from(raw: RawModifier) -> Result<Self, String> {
        let name = raw.name;
        let expect_null = |data: &Value, kind: &str| {
            if data.is_null() {
                Ok(())
            } else {
                Err(format!(
                    "{kind} modifier '{name}': data must be null, found {}",
                    short(data)
                ))
            }
        };
        let kind = match raw.kind.as_str() {
            "normfactor" => {
                expect_null(&raw.data, "normfactor").map(|_| ModifierKind::NormFactor)?
            }
            "shapefactor" => {
                expect_null(&raw.data, "shapefactor").map(|_| ModifierKind::ShapeFactor)?
            }
            "lumi" => {
                expect_null(&raw.data, "lumi")?;
                if name != "lumi" {
                    return Err(format!(
                        "lumi modifier must be named 'lumi' (pyhf schema), found '{name}'"
                    ));
                }
                ModifierKind::Lumi
            }
            "normsys" => {
                let Value::Object(mut map) = raw.data else {
                    return Err(format!(
                        "normsys modifier '{name}': data must be an object {{\"hi\": number, \"lo\": number}}"
                    ));
                };
                let mut take = |key: &str| match map.remove(key) {
                    Some(Value::Number(n)) => Ok(n),
                    Some(other) => Err(format!(
                        "normsys modifier '{name}': data.{key} must be a number, found {}",
                        short(&other)
                    )),
                    None => Err(format!("normsys modifier '{name}': data.{key} is missing")),
                };
                let (hi, lo) = (take("hi")?, take("lo")?);
                if let Some(extra) = map.keys().next() {
                    return Err(format!(
                        "normsys modifier '{name}': unknown key data.{extra}"
                    ));
                }
                ModifierKind::NormSys { hi, lo }
            }
            "histosys" => {
                let Value::Object(mut map) = raw.data else {
                    return Err(format!(
                        "histosys modifier '{name}': data must be an object {{\"hi_data\": [...], \"lo_data\": [...]}}"
                    ));
                };
                let mut take = |key: &str| match map.remove(key) {
                    Some(v) => numbers(v, || format!("histosys modifier '{name}': data.{key}")),
                    None => Err(format!("histosys modifier '{name}': data.{key} is missing")),
                };
                let (hi_data, lo_data) = (take("hi_data")?, take("lo_data")?);
                if let Some(extra) = map.keys().next() {
                    return Err(format!(
                        "histosys modifier '{name}': unknown key data.{extra}"
                    ));
                }
                ModifierKind::HistoSys { hi_data, lo_data }
            }
            "shapesys" => ModifierKind::ShapeSys(numbers(raw.data, || {
                format!("shapesys modifier '{name}': data")
            })?),
            "staterror" => ModifierKind::StatError(numbers(raw.data, || {
                format!("staterror modifier '{name}': data")
            })?),
            other => {
                return Err(format!(
                    "modifier '{name}' has unknown type '{other}' (expected one of {})",
                    MODIFIER_TYPES.join(", ")
                ));
            }
        };
        Ok(Modifier { name, kind })
    }
}

impl From<Modifier> for RawModifier {
    fn from(m: Modifier) -> Self {
        let kind = m.kind.type_name().to_string();
        let array = |v: Vec<Number>| Value::Array(v.into_iter().map(Value::Number).collect());
        let data = match m.kind {
            ModifierKind::NormFactor | ModifierKind::ShapeFactor | ModifierKind::Lumi => {
                Value::Null
            }
            ModifierKind::NormSys { hi, lo } => serde_json::json!({"hi": hi, "lo": lo}),
            ModifierKind::HistoSys { hi_data, lo_data } => {
                serde_json::json!({"hi_data": array(hi_data), "lo_data": array(lo_data)})
            }
            ModifierKind::ShapeSys(v) | ModifierKind::StatError(v) => array(v),
        };
        RawModifier {
            name: m.name,
            kind,
            data,
        }
    }
}

/// A JSON number as f64 (integers convert exactly up to 2⁵³).
pub fn f64_of(n: &Number) -> f64 {
    n.as_f64().unwrap_or(f64::NAN)
}

/// A list of JSON numbers as f64.
pub fn f64s(v: &[Number]) -> Vec<f64> {
    v.iter().map(f64_of).collect()
}
