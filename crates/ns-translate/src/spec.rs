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
    /// ROOT HistFactory's semantics, where the workspace was read from HistFactory XML with
    /// them; a workspace without them is pyhf's.
    #[serde(
        rename = "nextstat:root_semantics",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub root_semantics: Option<crate::model::root::RootSemantics>,
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
    data: RawData,
}

/// A modifier's `data` as parsed. The shapes pyhf's schema allows stay typed (a published
/// workspace has tens of thousands of such numbers, and a `Value` per number is most of the
/// cost of reading it); anything else is kept as a `Value`, for the error message.
enum RawData {
    Null,
    Number(Number),
    Numbers(Vec<Number>),
    /// The keys in document order; a repeated key keeps its last value, as `Value` does.
    Object(Vec<(String, RawData)>),
    Other(Value),
}

impl RawData {
    fn into_value(self) -> Value {
        match self {
            RawData::Null => Value::Null,
            RawData::Number(n) => Value::Number(n),
            RawData::Numbers(v) => Value::Array(v.into_iter().map(Value::Number).collect()),
            RawData::Object(fields) => Value::Object(
                fields
                    .into_iter()
                    .map(|(k, v)| (k, v.into_value()))
                    .collect(),
            ),
            RawData::Other(v) => v,
        }
    }

    /// Remove `key` from an object's fields.
    fn take(fields: &mut Vec<(String, RawData)>, key: &str) -> Option<RawData> {
        let at = fields.iter().position(|(k, _)| k == key)?;
        Some(fields.remove(at).1)
    }
}

impl Serialize for RawData {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        match self {
            RawData::Null => serializer.serialize_unit(),
            RawData::Number(n) => n.serialize(serializer),
            RawData::Numbers(v) => v.serialize(serializer),
            RawData::Object(fields) => {
                let mut map = serializer.serialize_map(Some(fields.len()))?;
                for (k, v) in fields {
                    map.serialize_entry(k, v)?;
                }
                map.end()
            }
            RawData::Other(v) => v.serialize(serializer),
        }
    }
}

impl<'de> Deserialize<'de> for RawData {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(RawDataVisitor)
    }
}

struct RawDataVisitor;

impl<'de> serde::de::Visitor<'de> for RawDataVisitor {
    type Value = RawData;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_unit<E>(self) -> Result<RawData, E> {
        Ok(RawData::Null)
    }
    fn visit_none<E>(self) -> Result<RawData, E> {
        Ok(RawData::Null)
    }
    fn visit_bool<E>(self, v: bool) -> Result<RawData, E> {
        Ok(RawData::Other(Value::Bool(v)))
    }
    fn visit_i64<E>(self, v: i64) -> Result<RawData, E> {
        Ok(RawData::Number(v.into()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<RawData, E> {
        Ok(RawData::Number(v.into()))
    }
    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<RawData, E> {
        Number::from_f64(v)
            .map(RawData::Number)
            .ok_or_else(|| E::custom(format!("{v} is not a JSON number")))
    }
    fn visit_str<E>(self, v: &str) -> Result<RawData, E> {
        Ok(RawData::Other(Value::String(v.to_string())))
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<RawData, A::Error> {
        let mut numbers = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(item) = seq.next_element::<RawData>()? {
            match item {
                RawData::Number(n) => numbers.push(n),
                other => {
                    // Not a list of numbers: keep the whole list as a `Value`.
                    let mut items: Vec<Value> = numbers.into_iter().map(Value::Number).collect();
                    items.push(other.into_value());
                    while let Some(item) = seq.next_element::<Value>()? {
                        items.push(item);
                    }
                    return Ok(RawData::Other(Value::Array(items)));
                }
            }
        }
        Ok(RawData::Numbers(numbers))
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<RawData, A::Error> {
        let mut fields: Vec<(String, RawData)> = Vec::new();
        while let Some((key, value)) = map.next_entry::<String, RawData>()? {
            match fields.iter_mut().find(|(k, _)| *k == key) {
                Some((_, old)) => *old = value,
                None => fields.push((key, value)),
            }
        }
        Ok(RawData::Object(fields))
    }
}

/// The numbers of a modifier's data list; `what` names it in an error (built only then: a
/// published workspace has thousands of lists).
fn numbers(data: RawData, what: impl Fn() -> String) -> Result<Vec<Number>, String> {
    match data {
        RawData::Numbers(v) if !v.is_empty() => Ok(v),
        RawData::Numbers(_) => Err(format!("{} must be a non-empty list of numbers", what())),
        RawData::Other(Value::Array(items)) => {
            let (i, other) = items
                .iter()
                .enumerate()
                .find(|(_, v)| !v.is_number())
                .map_or((0, Value::Null), |(i, v)| (i, v.clone()));
            Err(format!("{}[{i}] must be a number, found {other}", what()))
        }
        other => Err(format!(
            "{} must be a list of numbers, found {}",
            what(),
            short(&other.into_value())
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
        let expect_null = |data: RawData, kind: &str| match data {
            RawData::Null => Ok(()),
            other => Err(format!(
                "{kind} modifier '{name}': data must be null, found {}",
                short(&other.into_value())
            )),
        };
        // The fields of an object's data, taken by key; what is left over is an error.
        let unknown_key =
            |fields: &[(String, RawData)], kind: &str| match fields.iter().map(|(k, _)| k).min() {
                Some(extra) => Err(format!(
                    "{kind} modifier '{name}': unknown key data.{extra}"
                )),
                None => Ok(()),
            };
        let kind = match raw.kind.as_str() {
            "normfactor" => {
                expect_null(raw.data, "normfactor").map(|_| ModifierKind::NormFactor)?
            }
            "shapefactor" => {
                expect_null(raw.data, "shapefactor").map(|_| ModifierKind::ShapeFactor)?
            }
            "lumi" => {
                expect_null(raw.data, "lumi")?;
                if name != "lumi" {
                    return Err(format!(
                        "lumi modifier must be named 'lumi' (pyhf schema), found '{name}'"
                    ));
                }
                ModifierKind::Lumi
            }
            "normsys" => {
                let RawData::Object(mut fields) = raw.data else {
                    return Err(format!(
                        "normsys modifier '{name}': data must be an object {{\"hi\": number, \"lo\": number}}"
                    ));
                };
                let mut take = |key: &str| match RawData::take(&mut fields, key) {
                    Some(RawData::Number(n)) => Ok(n),
                    Some(other) => Err(format!(
                        "normsys modifier '{name}': data.{key} must be a number, found {}",
                        short(&other.into_value())
                    )),
                    None => Err(format!("normsys modifier '{name}': data.{key} is missing")),
                };
                let (hi, lo) = (take("hi")?, take("lo")?);
                unknown_key(&fields, "normsys")?;
                ModifierKind::NormSys { hi, lo }
            }
            "histosys" => {
                let RawData::Object(mut fields) = raw.data else {
                    return Err(format!(
                        "histosys modifier '{name}': data must be an object {{\"hi_data\": [...], \"lo_data\": [...]}}"
                    ));
                };
                let mut take = |key: &str| match RawData::take(&mut fields, key) {
                    Some(v) => numbers(v, || format!("histosys modifier '{name}': data.{key}")),
                    None => Err(format!("histosys modifier '{name}': data.{key} is missing")),
                };
                let (hi_data, lo_data) = (take("hi_data")?, take("lo_data")?);
                unknown_key(&fields, "histosys")?;
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
        let data = match m.kind {
            ModifierKind::NormFactor | ModifierKind::ShapeFactor | ModifierKind::Lumi => {
                RawData::Null
            }
            ModifierKind::NormSys { hi, lo } => RawData::Object(vec![
                ("hi".into(), RawData::Number(hi)),
                ("lo".into(), RawData::Number(lo)),
            ]),
            ModifierKind::HistoSys { hi_data, lo_data } => RawData::Object(vec![
                ("hi_data".into(), RawData::Numbers(hi_data)),
                ("lo_data".into(), RawData::Numbers(lo_data)),
            ]),
            ModifierKind::ShapeSys(v) | ModifierKind::StatError(v) => RawData::Numbers(v),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Modifier, String> {
        serde_json::from_str::<Modifier>(text).map_err(|e| e.to_string())
    }

    #[test]
    fn every_modifier_type_reads_the_same_from_text_and_from_a_value_and_writes_back() {
        let list = r#"[
            {"name": "mu", "type": "normfactor", "data": null},
            {"name": "lumi", "type": "lumi", "data": null},
            {"name": "sf", "type": "shapefactor", "data": null},
            {"name": "n", "type": "normsys", "data": {"lo": 0.9, "hi": 1}},
            {"name": "h", "type": "histosys", "data": {"lo_data": [1, 2.5], "hi_data": [3, 4e-1]}},
            {"name": "s", "type": "shapesys", "data": [0.5, 7]},
            {"name": "st", "type": "staterror", "data": [1e300, -0.0]}
        ]"#;
        let from_text: Vec<Modifier> = serde_json::from_str(list).unwrap();
        let value: Value = serde_json::from_str(list).unwrap();
        let from_value: Vec<Modifier> = serde_json::from_value(value.clone()).unwrap();
        assert_eq!(from_text, from_value);
        assert_eq!(
            from_text[3].kind,
            ModifierKind::NormSys {
                hi: 1.into(),
                lo: Number::from_f64(0.9).unwrap()
            }
        );
        // Written back, the same document (as values: key order is not part of JSON).
        assert_eq!(serde_json::to_value(&from_text).unwrap(), value);
        // A repeated key keeps its last value, as a `Value` does.
        let repeated =
            parse(r#"{"name": "n", "type": "normsys", "data": {"hi": 2, "lo": 0.5, "hi": 3}}"#);
        assert_eq!(
            repeated.unwrap().kind,
            ModifierKind::NormSys {
                hi: 3.into(),
                lo: Number::from_f64(0.5).unwrap()
            }
        );
    }

    #[test]
    fn malformed_modifier_data_is_named_with_what_was_found() {
        let cases = [
            (
                r#"{"name": "mu", "type": "normfactor", "data": [1]}"#,
                "normfactor modifier 'mu': data must be null, found [1]",
            ),
            (
                r#"{"name": "n", "type": "normsys", "data": [1, 2]}"#,
                "normsys modifier 'n': data must be an object",
            ),
            (
                r#"{"name": "n", "type": "normsys", "data": {"hi": 1}}"#,
                "normsys modifier 'n': data.lo is missing",
            ),
            (
                r#"{"name": "n", "type": "normsys", "data": {"hi": "1", "lo": 1}}"#,
                "normsys modifier 'n': data.hi must be a number, found \"1\"",
            ),
            (
                r#"{"name": "n", "type": "normsys", "data": {"hi": 1, "lo": 1, "z": 0, "mid": 0}}"#,
                "normsys modifier 'n': unknown key data.mid",
            ),
            (
                r#"{"name": "h", "type": "histosys", "data": {"hi_data": [1, 2, "x"], "lo_data": [1]}}"#,
                "histosys modifier 'h': data.hi_data[2] must be a number, found \"x\"",
            ),
            (
                r#"{"name": "h", "type": "histosys", "data": {"hi_data": [1], "lo_data": []}}"#,
                "histosys modifier 'h': data.lo_data must be a non-empty list of numbers",
            ),
            (
                r#"{"name": "h", "type": "histosys", "data": {"hi_data": [[1]], "lo_data": [1]}}"#,
                "histosys modifier 'h': data.hi_data[0] must be a number, found [1]",
            ),
            (
                r#"{"name": "st", "type": "staterror", "data": null}"#,
                "staterror modifier 'st': data must be a list of numbers, found null",
            ),
            (
                r#"{"name": "s", "type": "shapesys", "data": {"a": true}}"#,
                "shapesys modifier 's': data must be a list of numbers, found {\"a\":true}",
            ),
            (
                r#"{"name": "x", "type": "other", "data": null}"#,
                "modifier 'x' has unknown type 'other'",
            ),
        ];
        for (text, message) in cases {
            let error = parse(text).expect_err(text);
            assert!(error.contains(message), "{text}: {error}");
            // The same message from a `Value` (the path that names the file and position).
            let value: Value = serde_json::from_str(text).unwrap();
            let error = serde_json::from_value::<Modifier>(value)
                .expect_err(text)
                .to_string();
            assert!(error.contains(message), "{text}: {error}");
        }
    }
}
