//! The model reference and the registry of formats.

use std::path::{Path, PathBuf};

use ns_core::{Error, HistFactoryModel, Result};
use ns_translate::FromWorkspace;
use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use crate::access::Reader;
use crate::datacard::Datacard;
use crate::document::Source;
use crate::hs3::{Hs3, Hs3Ref};
use crate::pyhf::{Interpolation, Pyhf, PyhfRef};
use crate::xml::Xml;
use crate::{Format, LoadedModel};

type PathResult<T> = std::result::Result<T, serde_path_to_error::Error<serde_json::Error>>;

/// The registry: one line per format, `Variant => FormatType`. The variant's lower-case name is
/// the format's tag (a test holds it equal to `Format::NAME`); formats that claim documents by
/// content are asked in this order, the fallback last.
macro_rules! formats {
    ($($variant:ident => $format:ty),* $(,)?) => {
        /// A model reference that names its format.
        #[derive(Clone, Debug, PartialEq, Serialize, JsonSchema)]
        #[serde(tag = "format", rename_all = "lowercase")]
        pub enum Tagged {
            $($variant(<$format as Format>::Reference)),*
        }

        /// The tags of the registered formats.
        pub const FORMATS: &[&str] = &[$(<$format as Format>::NAME),*];

        impl Tagged {
            /// The reference of format `format` from the rest of its fields; `None` for a
            /// format that is not registered.
            fn read(format: &str, fields: Value) -> Option<PathResult<Tagged>> {
                $(if format == <$format>::NAME {
                    return Some(serde_path_to_error::deserialize(fields).map(Tagged::$variant));
                })*
                None
            }
            fn load(&self, read: &dyn Reader) -> Result<LoadedModel> {
                match self { $(Tagged::$variant(r) => <$format>::load(r, read)),* }
            }
            fn document(&self, read: &dyn Reader) -> Result<Value> {
                match self { $(Tagged::$variant(r) => <$format>::document(r, read)),* }
            }
            fn sources_mut(&mut self) -> Vec<&mut Source> {
                match self { $(Tagged::$variant(r) => <$format>::sources_mut(r)),* }
            }
            fn identity(&self) -> (Option<&str>, Interpolation) {
                match self { $(Tagged::$variant(r) => <$format>::identity(r)),* }
            }
            /// The reference of the format whose files start as `reference`'s file does (formats
            /// whose files are not JSON documents), if any.
            fn claimed_by_head(reference: &PyhfRef, read: &dyn Reader) -> Result<Option<Tagged>> {
                let Source::Path(path) = &reference.workspace else { return Ok(None) };
                let Some(head) = read.head(path) else { return Ok(None) };
                let head = head?;
                $(if <$format>::claims_head(&head) {
                    return Ok(Some(Tagged::$variant(<$format>::from_untagged(reference)?)));
                })*
                Ok(None)
            }
            /// The model of a JSON document read without a format: of the first format that
            /// claims it; a document none claims is read as a pyhf workspace, whose errors say
            /// what it lacks.
            fn model_by_content(
                reference: &PyhfRef,
                document: Value,
                read: &dyn Reader,
            ) -> Result<LoadedModel> {
                $(if <$format>::claims(&document) {
                    return <$format>::model(&<$format>::from_untagged(reference)?, document, read);
                })*
                Pyhf::model(reference, document, read)
            }
            /// The tag of this reference's format.
            pub fn format(&self) -> &'static str {
                match self { $(Tagged::$variant(_) => <$format>::NAME),* }
            }
        }
    };
}

formats! {
    Hs3 => Hs3,
    Xml => Xml,
    Datacard => Datacard,
    Pyhf => Pyhf,
}

/// Where a model comes from: a reference that names its format, or — without `"format"` — a
/// pyhf-shaped reference whose document's content decides (pyhf or HS3; for HS3, `measurement`
/// names the analysis and the patches apply to the document).
#[derive(Clone, Debug, PartialEq, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum ModelRef {
    Tagged(Tagged),
    ByContent(PyhfRef),
}

impl<'de> Deserialize<'de> for ModelRef {
    /// By `"format"` where present; errors name the field at fault (an untagged enum would only
    /// say that no variant matched).
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        use serde::de::Error as _;
        let mut value = Value::deserialize(deserializer)?;
        let format = value.as_object_mut().and_then(|o| o.remove("format"));
        let result = match format {
            None => serde_path_to_error::deserialize(value).map(ModelRef::ByContent),
            Some(Value::String(name)) => match Tagged::read(&name, value) {
                Some(tagged) => tagged.map(ModelRef::Tagged),
                None => {
                    return Err(D::Error::custom(format!(
                        "format: no input format '{name}' (the formats are: {})",
                        FORMATS.join(", ")
                    )));
                }
            },
            Some(other) => {
                return Err(D::Error::custom(format!(
                    "format: a format is named by a string ({}), not {other}",
                    FORMATS.join(", ")
                )));
            }
        };
        result.map_err(|e| {
            let path = e.path().to_string();
            let inner = e.into_inner().to_string();
            if path == "." {
                D::Error::custom(inner)
            } else {
                D::Error::custom(format!("{path}: {inner}"))
            }
        })
    }
}

impl ModelRef {
    /// The model of a file with every default, its format told by content.
    pub fn file(path: impl Into<PathBuf>) -> Self {
        ModelRef::ByContent(PyhfRef::file(path))
    }

    /// The options that make two equal documents different models: the selection (measurement
    /// or analysis) and the interpolation codes, whatever the format.
    pub fn identity(&self) -> (Option<&str>, Interpolation) {
        match self {
            ModelRef::Tagged(t) => t.identity(),
            ModelRef::ByContent(r) => Pyhf::identity(r),
        }
    }

    /// Every document this reference reads.
    pub fn sources_mut(&mut self) -> Vec<&mut Source> {
        match self {
            ModelRef::Tagged(t) => t.sources_mut(),
            ModelRef::ByContent(r) => Pyhf::sources_mut(r),
        }
    }

    /// Relative file paths read from `base` instead of the current folder.
    pub fn resolve_paths(&mut self, base: &Path) {
        for source in self.sources_mut() {
            source.resolve_from(base);
        }
    }

    /// The model document after its patches (for a pyhf workspace: after the patchset patch
    /// and the patches).
    pub fn document(&self, read: &dyn Reader) -> Result<Value> {
        match self {
            ModelRef::Tagged(t) => t.document(read),
            ModelRef::ByContent(r) => match Tagged::claimed_by_head(r, read)? {
                Some(t) => t.document(read),
                None => r.patched(read),
            },
        }
    }

    /// SHA-256 of the model this names (pyhf's digest of `{"workspace", "measurement",
    /// "interpolation"}`, the document after its patches; for HS3 the analysis in the place of
    /// the measurement): equal digests, one model, wherever its files lie and whether or not the
    /// reference names its format. Event files an HS3 model reads are named, not hashed.
    pub fn digest(&self, read: &dyn Reader) -> Result<String> {
        if let ModelRef::ByContent(r) = self
            && let Some(t) = Tagged::claimed_by_head(r, read)?
        {
            return ModelRef::Tagged(t).digest(read);
        }
        let (document, (selection, interpolation)) = (self.document(read)?, self.identity());
        let identity = serde_json::json!({
            "workspace": document,
            "measurement": selection,
            "interpolation": interpolation,
        });
        Ok(ns_translate::pyjson::digest(&identity))
    }

    /// The reference with `workspace` (a patchset point's, its patch applied) in the place of
    /// its document and patchset: the model of one point of a patchset grid.
    pub fn with_workspace(&self, workspace: Value) -> Result<ModelRef> {
        let point = |r: &PyhfRef| PyhfRef {
            workspace: Source::Inline(workspace),
            patchset: None,
            ..r.clone()
        };
        match self {
            ModelRef::ByContent(r) => Ok(ModelRef::ByContent(point(r))),
            ModelRef::Tagged(Tagged::Pyhf(r)) => Ok(point(r).into()),
            // The XML's workspace, its ROOT semantics included, is a pyhf workspace from here.
            ModelRef::Tagged(Tagged::Xml(r)) => Ok(point(&Xml::pyhf_options(r)).into()),
            ModelRef::Tagged(t) => Err(Error::InvalidInput(format!(
                "patchsets apply to pyhf workspaces, not to {} models",
                t.format()
            ))),
        }
    }

    /// The reference with its format named: a file's as its head tells (pyhf where none claims
    /// it).
    fn into_tagged(self, read: &dyn Reader) -> Result<Tagged> {
        Ok(match self {
            ModelRef::ByContent(r) => Tagged::claimed_by_head(&r, read)?.unwrap_or(Tagged::Pyhf(r)),
            ModelRef::Tagged(t) => t,
        })
    }

    /// The reference with HistFactory XML read with `semantics`; an error where the model is
    /// not HistFactory XML.
    pub fn with_xml_semantics(
        self,
        semantics: ns_xml::Semantics,
        read: &dyn Reader,
    ) -> Result<ModelRef> {
        match self.into_tagged(read)? {
            Tagged::Xml(mut r) => {
                r.semantics = semantics;
                Ok(ModelRef::Tagged(Tagged::Xml(r)))
            }
            other => Err(Error::InvalidInput(format!(
                "semantics '{}' apply to HistFactory XML; this model is {}",
                semantics.name(),
                other.format(),
            ))),
        }
    }

    /// The reference with a datacard's `$MASS` set (text2workspace's `-m`); an error where the
    /// model is not a datacard.
    pub fn with_datacard_mass(self, mass: &str, read: &dyn Reader) -> Result<ModelRef> {
        match self.into_tagged(read)? {
            Tagged::Datacard(mut r) => {
                r.mass = Some(mass.to_string());
                Ok(ModelRef::Tagged(Tagged::Datacard(r)))
            }
            other => Err(Error::InvalidInput(format!(
                "a mass (-m {mass}) applies to CMS Combine datacards; this model is {}",
                other.format(),
            ))),
        }
    }

    /// A datacard reference with physics-model options (text2workspace's `--PO` of
    /// multiSignalModel); another format is refused.
    pub fn with_datacard_physics(self, options: &[String], read: &dyn Reader) -> Result<ModelRef> {
        match self.into_tagged(read)? {
            Tagged::Datacard(mut r) => {
                r.physics = options.to_vec();
                Ok(ModelRef::Tagged(Tagged::Datacard(r)))
            }
            other => Err(Error::InvalidInput(format!(
                "physics-model options (--po) apply to CMS Combine datacards; this model is {}",
                other.format(),
            ))),
        }
    }

    /// The model as an HS3 document that ROOT 6.40 imports as the same likelihood: a binned
    /// model in ROOT's HistFactory dialect ([`ns_hs3::binned::write`]); an unbinned HS3 model as
    /// its document after its patches, where it holds nothing of nextstat's own (flows, Parquet
    /// data), which ROOT cannot read.
    pub fn to_hs3(&self, read: &dyn Reader) -> Result<Value> {
        match self.load_model(read)? {
            LoadedModel::Binned {
                workspace: Some(workspace),
                model,
                ..
            } => ns_hs3::binned::write(&workspace, &model),
            // A datacard where pyhf expresses its likelihood exactly (`datacard_as_pyhf`,
            // which names the term that has no pyhf form otherwise), through that workspace.
            LoadedModel::Binned {
                workspace: None,
                model: card,
                ..
            } => {
                let pyhf_form = self.datacard_as_pyhf(read).map_err(|e| match e {
                    Error::InvalidModel(why) => Error::InvalidModel(format!(
                        "{why}; export-hs3 writes a card through that exact pyhf form, so not as \
                         HS3 either"
                    )),
                    other => other,
                })?;
                let workspace = ns_translate::Workspace::from_value(pyhf_form)?;
                // Its symmetric lnN are κ^θ: normsys code1 (ROOT's code 1).
                let options = ns_translate::ModelOptions {
                    codes: ns_core::InterpCodes {
                        normsys: ns_core::NormsysCode::Code1,
                        ..ns_core::InterpCodes::default()
                    },
                    ..ns_translate::ModelOptions::default()
                };
                let mut model = HistFactoryModel::from_workspace(&workspace, &options)?;
                // The POIs the card's maps declare (the pyhf form holds its first only).
                let pois: Vec<&str> = card
                    .pois()
                    .iter()
                    .map(|&i| card.par_names[i].as_str())
                    .collect();
                if !pois.is_empty() {
                    model.set_pois(&pois)?;
                }
                ns_hs3::binned::write(&workspace, &model)
            }
            LoadedModel::Unbinned(_) | LoadedModel::Joint(_) => {
                let document = self.document(read)?;
                match ns_hs3::nextstat_entries(&document).first() {
                    Some(entry) => Err(Error::InvalidInput(format!(
                        "{entry} is nextstat's own and ROOT cannot read it; the HS3 document is \
                         written only for models of ROOT's types"
                    ))),
                    None => Ok(document),
                }
            }
        }
    }

    /// A CMS Combine datacard as a pyhf workspace, where pyhf expresses its likelihood exactly
    /// (`ns_datacard::pyhf_workspace`); other models are refused.
    pub fn datacard_as_pyhf(&self, read: &dyn Reader) -> Result<Value> {
        let tagged = match self {
            ModelRef::Tagged(t) => Some(t.clone()),
            ModelRef::ByContent(r) => Tagged::claimed_by_head(r, read)?,
        };
        match tagged {
            Some(Tagged::Datacard(reference)) => crate::datacard::as_pyhf(&reference, read),
            _ => Err(Error::InvalidInput(
                "datacard2json reads CMS Combine datacards, and this model is not one (pyhf \
                 workspaces are pyhf JSON already; HistFactory XML: xml2json)"
                    .into(),
            )),
        }
    }

    /// The model, every file read through `read`.
    pub fn load_model(&self, read: &dyn Reader) -> Result<LoadedModel> {
        match self {
            ModelRef::Tagged(t) => t.load(read),
            ModelRef::ByContent(r) => load_by_content(r, read),
        }
    }
}

/// A reference without a format: the file's first bytes or the document's content decide.
fn load_by_content(reference: &PyhfRef, read: &dyn Reader) -> Result<LoadedModel> {
    if let Some(tagged) = Tagged::claimed_by_head(reference, read)? {
        return tagged.load(read);
    }
    match reference.document_or_workspace(read)? {
        Err(workspace) => reference.binned(workspace),
        Ok(document) => Tagged::model_by_content(reference, document, read),
    }
}

impl From<PyhfRef> for ModelRef {
    fn from(reference: PyhfRef) -> Self {
        ModelRef::Tagged(Tagged::Pyhf(reference))
    }
}

impl From<Hs3Ref> for ModelRef {
    fn from(reference: Hs3Ref) -> Self {
        ModelRef::Tagged(Tagged::Hs3(reference))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Files;

    const ANALYSIS: &str = include_str!("../../../examples/analysis.json");
    const RESONANCE: &str = include_str!("../../../examples/unbinned/resonance.json");

    fn inline(text: &str) -> Source {
        Source::Inline(serde_json::from_str(text).unwrap())
    }

    #[test]
    fn every_tag_is_its_formats_name() {
        let pyhf = ModelRef::from(PyhfRef::file("a.json"));
        let hs3 = ModelRef::from(Hs3Ref {
            document: Source::Path("b.json".into()),
            patches: Vec::new(),
            analysis: None,
        });
        for (reference, name) in [(pyhf, Pyhf::NAME), (hs3, Hs3::NAME)] {
            let ModelRef::Tagged(tagged) = &reference else {
                panic!("a reference made from a format's options names the format")
            };
            assert_eq!(tagged.format(), name);
            let json = serde_json::to_value(&reference).unwrap();
            assert_eq!(json["format"], name);
            assert_eq!(serde_json::from_value::<ModelRef>(json).unwrap(), reference);
        }
        assert_eq!(FORMATS, &[Hs3::NAME, Xml::NAME, Datacard::NAME, Pyhf::NAME]);
    }

    #[test]
    fn a_reference_without_format_reads_as_before() {
        let legacy: ModelRef =
            serde_json::from_str(r#"{"workspace": "a.json", "measurement": "m"}"#).unwrap();
        assert!(matches!(&legacy, ModelRef::ByContent(r) if r.measurement.as_deref() == Some("m")));
        assert_eq!(
            serde_json::to_string(&legacy).unwrap(),
            r#"{"workspace":"a.json","measurement":"m","interpolation":{"defaults":"pyhf"}}"#
        );
    }

    #[test]
    fn errors_name_the_field_and_the_formats() {
        let error = |text: &str| {
            serde_json::from_str::<ModelRef>(text)
                .unwrap_err()
                .to_string()
        };
        assert!(
            error(r#"{"format": "root", "workspace": "a.json"}"#)
                .contains("the formats are: hs3, xml, datacard, pyhf")
        );
        assert!(
            error(r#"{"format": "hs3", "workspace": "a.json"}"#)
                .contains("unknown field `workspace`")
        );
        assert!(
            error(r#"{"workspace": "a.json", "analysis": "x"}"#)
                .contains("unknown field `analysis`")
        );
        assert!(
            error(r#"{"format": "pyhf", "workspace": "a.json", "measurement": 3}"#)
                .starts_with("measurement: ")
        );
    }

    #[test]
    fn a_tagged_reference_loads_its_format_only() {
        let hs3_as_pyhf = ModelRef::from(PyhfRef {
            workspace: inline(RESONANCE),
            ..PyhfRef::file("")
        });
        let message = hs3_as_pyhf.load_model(&Files).err().unwrap().to_string();
        assert!(
            message.contains("is an HS3 model, not a pyhf workspace"),
            "{message}"
        );
        let pyhf_as_hs3 = ModelRef::from(Hs3Ref {
            document: inline(ANALYSIS),
            patches: Vec::new(),
            analysis: None,
        });
        assert!(pyhf_as_hs3.load_model(&Files).is_err());
    }

    #[test]
    fn every_format_reports_its_selection_and_codes() {
        let xml: ModelRef = serde_json::from_str(
            r#"{"format": "xml", "top": "c.xml", "measurement": "m", "interpolation": {"defaults": "legacy"}}"#,
        )
        .unwrap();
        let (selection, codes) = xml.identity();
        assert_eq!((selection, codes.defaults.as_str()), (Some("m"), "legacy"));
        let hs3: ModelRef =
            serde_json::from_str(r#"{"format": "hs3", "document": "d.json", "analysis": "a"}"#)
                .unwrap();
        assert_eq!(hs3.identity().0, Some("a"));
    }

    #[test]
    fn one_model_one_digest_tagged_or_not() {
        for (text, tagged) in [
            (
                ANALYSIS,
                ModelRef::from(PyhfRef {
                    workspace: inline(ANALYSIS),
                    ..PyhfRef::file("")
                }),
            ),
            (
                RESONANCE,
                ModelRef::from(Hs3Ref {
                    document: inline(RESONANCE),
                    patches: Vec::new(),
                    analysis: None,
                }),
            ),
        ] {
            let by_content = ModelRef::ByContent(PyhfRef {
                workspace: inline(text),
                ..PyhfRef::file("")
            });
            assert_eq!(
                tagged.digest(&Files).unwrap(),
                by_content.digest(&Files).unwrap()
            );
            let (a, b) = (
                tagged.load_model(&Files).unwrap(),
                by_content.load_model(&Files).unwrap(),
            );
            assert_eq!(
                a.likelihood().parameter_names(),
                b.likelihood().parameter_names()
            );
        }
    }
}
