//! RFC 6902 JSON patches and HEPData patchsets (pyhf's `PatchSet`), with digest verification.

use ns_core::{Error, Result};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::HashSet;

use crate::load::from_value;
use crate::pyjson::digest;

/// Apply one RFC 6902 patch (a list of operations) to a JSON document: all of it, or (on an
/// error) none of it.
///
/// `test` operations compare numbers by value (`50` equals `50.0`) and booleans only with
/// booleans, as Python's `jsonpatch` (which pyhf uses) does; the `json-patch` crate would compare
/// `50` and `50.0` as different.
pub fn apply_patch(document: &mut Value, patch: &Value, origin: &str) -> Result<()> {
    let ops: json_patch::Patch = from_value(patch.clone(), &format!("patch {origin}"))?;
    let mut patched = document.clone();
    for (index, op) in ops.0.iter().enumerate() {
        match op {
            json_patch::PatchOperation::Test(test) => {
                let path = test.path.as_str();
                let found = patched.pointer(path).ok_or_else(|| {
                    Error::Patch(format!(
                        "{origin}: operation {index} (test) names '{path}', which the document lacks"
                    ))
                })?;
                if !json_equal(found, &test.value) {
                    return Err(Error::Patch(format!(
                        "{origin}: operation {index} (test) expects {} at '{path}', the document has {}",
                        test.value, found
                    )));
                }
            }
            other => json_patch::patch(&mut patched, std::slice::from_ref(other))
                .map_err(|e| Error::Patch(format!("{origin}: operation {index}: {e}")))?,
        }
    }
    *document = patched;
    Ok(())
}

/// JSON equality with numbers compared by value, as Python's `==` on parsed JSON (bool apart).
fn json_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(i), Some(j)) => i == j,
            _ => match (x.as_u64(), y.as_u64()) {
                (Some(i), Some(j)) => i == j,
                _ => x.as_f64() == y.as_f64(),
            },
        },
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_equal(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_equal(v, w)))
        }
        _ => a == b,
    }
}

/// Metadata of a patchset (extra keys are kept, as pyhf's schema allows).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PatchSetMetadata {
    pub description: String,
    pub digests: Map<String, Value>,
    pub labels: Vec<String>,
    pub references: Map<String, Value>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Metadata of one patch: its name and its values (one per label).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PatchMetadata {
    pub name: String,
    pub values: Vec<Value>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Patch {
    pub metadata: PatchMetadata,
    pub patch: Value,
}

/// A HEPData patchset: signal patches for one background-only workspace.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PatchSet {
    pub metadata: PatchSetMetadata,
    pub patches: Vec<Patch>,
    pub version: String,
}

fn is_identifier(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

impl PatchSet {
    /// Typed, validated patchset with pyhf's checks (unique names and values, one value per label).
    pub fn from_value(value: Value) -> Result<PatchSet> {
        let ps: PatchSet = from_value(value, "patchset")?;
        let bad = |m: String| Err(Error::Patch(format!("invalid patchset: {m}")));
        if ps.version != "1.0.0" {
            return bad(format!(
                "version is '{}', only '1.0.0' is supported",
                ps.version
            ));
        }
        if ps.patches.is_empty() {
            return bad("'patches' must contain at least one patch".into());
        }
        if ps.metadata.labels.is_empty() || !ps.metadata.labels.iter().all(|l| is_identifier(l)) {
            return bad(
                "metadata.labels must be a non-empty list of identifiers ([a-zA-Z0-9_]+)".into(),
            );
        }
        if ps.metadata.digests.is_empty() {
            return bad("metadata.digests must name at least one digest".into());
        }
        for (alg, d) in &ps.metadata.digests {
            let Some(hex) = d.as_str() else {
                return bad(format!("metadata.digests.{alg} must be a string"));
            };
            let ok = match alg.as_str() {
                "sha256" => hex.len() == 64,
                "md5" => hex.len() == 32,
                _ => false,
            } && hex.chars().all(|c| c.is_ascii_hexdigit());
            if !ok {
                return bad(format!(
                    "metadata.digests.{alg} = '{hex}' is not a valid digest (sha256 or md5 in hex)"
                ));
            }
        }
        let mut names = HashSet::new();
        let mut values = HashSet::new();
        for (i, p) in ps.patches.iter().enumerate() {
            let at = format!("patches[{i}] '{}'", p.metadata.name);
            if !is_identifier(&p.metadata.name) {
                return bad(format!("{at}: a patch name must match [a-zA-Z0-9_]+"));
            }
            if !names.insert(p.metadata.name.clone()) {
                return bad(format!(
                    "{at}: multiple patches are named '{}'",
                    p.metadata.name
                ));
            }
            // pyhf compares values with Python equality: 100 == 100.0.
            let key: Vec<String> = p
                .metadata
                .values
                .iter()
                .map(|v| v.as_f64().map_or(v.to_string(), |x| format!("{x:e}")))
                .collect();
            if !values.insert(key) {
                return bad(format!(
                    "{at}: multiple patches have the values {}",
                    Value::Array(p.metadata.values.clone())
                ));
            }
            if p.metadata.values.len() != ps.metadata.labels.len() {
                return bad(format!(
                    "{at}: {} values for {} labels ({})",
                    p.metadata.values.len(),
                    ps.metadata.labels.len(),
                    ps.metadata.labels.join(", ")
                ));
            }
            if !p.patch.is_array() {
                return bad(format!(
                    "{at}: 'patch' must be a list of JSON patch operations"
                ));
            }
        }
        Ok(ps)
    }

    /// The patch named `name`.
    pub fn patch(&self, name: &str) -> Result<&Patch> {
        self.patches
            .iter()
            .find(|p| p.metadata.name == name)
            .ok_or_else(|| {
                let known: Vec<&str> = self
                    .patches
                    .iter()
                    .map(|p| p.metadata.name.as_str())
                    .collect();
                Error::Patch(format!(
                    "no patch named '{name}' in the patchset (it has: {})",
                    known.join(", ")
                ))
            })
    }

    /// pyhf's `PatchSet.verify`: every digest in the metadata must match the background-only
    /// workspace exactly as read (the hex digits in either case).
    pub fn verify(&self, background: &Value) -> Result<()> {
        // The digest is pyhf's, of the pyhf workspace: a workspace read from XML with ROOT's
        // semantics is checked without them.
        let without_root;
        let background = match background.get(crate::model::root::ROOT_SEMANTICS_KEY) {
            Some(_) => {
                let mut copy = background.clone();
                copy.as_object_mut()
                    .map(|o| o.remove(crate::model::root::ROOT_SEMANTICS_KEY));
                without_root = copy;
                &without_root
            }
            None => background,
        };
        for (alg, expected) in &self.metadata.digests {
            let expected = expected.as_str().unwrap_or_default();
            let got = match alg.as_str() {
                "sha256" => digest(background),
                other => {
                    return Err(Error::Patch(format!(
                        "digest algorithm '{other}' is not supported for verification (use sha256)"
                    )));
                }
            };
            // Hex digits name the same digest in either case (pyhf compares the strings and
            // would call an upper-case digest a different workspace).
            if !got.eq_ignore_ascii_case(expected) {
                return Err(Error::Patch(format!(
                    "the digest verification failed for hash algorithm '{alg}': expected {expected}, got {got} \
                     (the patchset was made for a different background-only workspace)"
                )));
            }
        }
        Ok(())
    }

    /// Verify, then apply the patch `name` to the background-only workspace.
    pub fn apply(&self, background: &Value, name: &str) -> Result<Value> {
        self.verify(background)?;
        self.apply_unverified(background, name)
    }

    /// Apply the patch `name` without checking the digest (pyhf's `Workspace.model(patches=…)`).
    pub fn apply_unverified(&self, background: &Value, name: &str) -> Result<Value> {
        let patch = self.patch(name)?;
        let mut doc = background.clone();
        apply_patch(&mut doc, &patch.patch, &format!("patchset patch '{name}'"))?;
        Ok(doc)
    }

    /// pyhf's `patchset extract`: the patch operations, optionally with the merged metadata.
    pub fn extract(&self, name: &str, with_metadata: bool) -> Result<Value> {
        let patch = self.patch(name)?;
        if !with_metadata {
            return Ok(patch.patch.clone());
        }
        let mut metadata = match serde_json::to_value(&patch.metadata) {
            Ok(Value::Object(m)) => m,
            _ => Map::new(),
        };
        if let Ok(Value::Object(set)) = serde_json::to_value(&self.metadata) {
            metadata.extend(set);
        }
        Ok(serde_json::json!({"metadata": Value::Object(metadata), "patch": patch.patch}))
    }

    /// pyhf's `patchset inspect` text.
    pub fn inspect_text(&self) -> String {
        let mut out = format!(
            "\n    {} patches found in Patchset\n---------------------------------\n\n",
            self.patches.len()
        );
        for p in &self.patches {
            out.push_str(&p.metadata.name);
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn test_operations_compare_numbers_by_value_and_booleans_apart() {
        let doc = json!({"data": [50.0, 60.0], "flag": true, "one": 1});
        let passes = |value: Value, path: &str| {
            let patch = json!([{"op": "test", "path": path, "value": value}]);
            apply_patch(&mut doc.clone(), &patch, "p.json").is_ok()
        };
        assert!(passes(json!([50, 60]), "/data"));
        assert!(passes(json!(1.0), "/one"));
        assert!(passes(
            json!({"data": [50, 60.0], "flag": true, "one": 1.0}),
            ""
        ));
        assert!(!passes(json!([50, 61]), "/data"));
        assert!(!passes(json!(1), "/flag"));
        assert!(!passes(json!(true), "/one"));
        assert!(!passes(json!(1), "/missing"));
    }

    #[test]
    fn a_failing_operation_leaves_the_document_unchanged() {
        let mut doc = json!({"a": 1});
        let patch = json!([
            {"op": "add", "path": "/b", "value": 2},
            {"op": "test", "path": "/a", "value": 3}
        ]);
        let e = apply_patch(&mut doc, &patch, "p.json")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("operation 1 (test)") && e.contains("p.json"),
            "{e}"
        );
        assert_eq!(doc, json!({"a": 1}));
    }
}
