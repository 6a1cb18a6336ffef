//! HistFactory XML with its ROOT files (`ns_xml`), read into a pyhf workspace: from there on a
//! pyhf model, with the pyhf options (patchset, patches, measurement, interpolation codes).

use std::collections::BTreeMap;
use std::path::PathBuf;

use ns_core::{Error, Result};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::access::Reader;
use crate::document::Source;
use crate::pyhf::{Interpolation, PatchsetPatch, Pyhf, PyhfRef};
use crate::{Format, LoadedModel};
use ns_translate::model::root::ROOT_SEMANTICS_KEY;

/// The HistFactory XML format.
pub struct Xml;

/// A HistFactory model from a combination XML and the files it names.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct XmlRef {
    /// The top-level combination XML (a file).
    pub top: Source,
    /// The folder the XML's paths start from (default: the top XML's folder, or the nearest
    /// folder above it from which its first channel is found).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_dir: Option<PathBuf>,
    /// A patch of a HEPData patchset, applied to the workspace first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patchset: Option<PatchsetPatch>,
    /// RFC 6902 JSON patches of the workspace, applied in order after the patchset's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub patches: Vec<Source>,
    /// The measurement (default: the first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measurement: Option<String>,
    #[serde(default)]
    pub interpolation: Interpolation,
    /// Whose reading of the XML the model follows: `root` (hist2workspace's model, the
    /// default) or `pyhf` (pyhf.readxml's).
    #[serde(default, skip_serializing_if = "is_root")]
    #[schemars(with = "String")]
    pub semantics: ns_xml::Semantics,
    /// The files, sent with the reference, that the XML names — the top XML among them — each
    /// path (relative to the base folder) with its bytes in base64. Given, they are read instead
    /// of the disk (how the server takes an XML model).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub files: BTreeMap<String, String>,
}

fn is_root(semantics: &ns_xml::Semantics) -> bool {
    *semantics == ns_xml::Semantics::Root
}

impl XmlRef {
    /// The sent files, decoded.
    fn sent(&self) -> Result<Option<ns_xml::SentFiles>> {
        if self.files.is_empty() {
            return Ok(None);
        }
        use base64::Engine as _;
        self.files
            .iter()
            .map(|(name, encoded)| {
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(encoded.trim())
                    .map_err(|e| {
                        Error::InvalidInput(format!("files['{name}']: not base64 ({e})"))
                    })?;
                Ok((name.clone(), bytes))
            })
            .collect::<Result<_>>()
            .map(Some)
    }

    /// The pyhf reference of the workspace the XML gives, and apart from it the ROOT semantics
    /// the read found (a patchset's digest is over the pyhf workspace).
    fn pyhf(&self, read: &dyn Reader) -> Result<(PyhfRef, Option<Value>)> {
        let Source::Path(top) = &self.top else {
            return Err(Error::InvalidInput(
                "an XML model is read from its files: give the combination XML's path".into(),
            ));
        };
        let base = self.base_dir.as_deref();
        let sent = self.sent()?;
        let mut workspace = ns_xml::read(
            top,
            &ns_xml::ReadOptions {
                semantics: self.semantics,
                base_dir: base,
                access: read.data_files(base.or(top.parent())),
                sent: sent.as_ref(),
            },
        )?;
        let root = workspace
            .as_object_mut()
            .and_then(|w| w.remove(ROOT_SEMANTICS_KEY));
        let pyhf = PyhfRef {
            workspace: Source::Inline(workspace),
            patchset: self.patchset.clone(),
            patches: self.patches.clone(),
            measurement: self.measurement.clone(),
            interpolation: self.interpolation.clone(),
        };
        Ok((pyhf, root))
    }
}

impl Format for Xml {
    const NAME: &'static str = "xml";
    type Reference = XmlRef;

    /// A combination XML starts (after comments and the declaration) with its DOCTYPE or
    /// `<Combination>`.
    fn claims_head(head: &[u8]) -> bool {
        ns_xml::claims_head(head)
    }

    fn claims(_document: &Value) -> bool {
        false
    }

    fn from_untagged(reference: &PyhfRef) -> Result<XmlRef> {
        Ok(XmlRef {
            top: reference.workspace.clone(),
            base_dir: None,
            patchset: reference.patchset.clone(),
            patches: reference.patches.clone(),
            measurement: reference.measurement.clone(),
            interpolation: reference.interpolation.clone(),
            semantics: ns_xml::Semantics::default(),
            files: BTreeMap::new(),
        })
    }

    fn document(reference: &XmlRef, read: &dyn Reader) -> Result<Value> {
        let (pyhf, root) = reference.pyhf(read)?;
        let mut document = pyhf.into_patched(read)?;
        if let (Some(root), Some(object)) = (root, document.as_object_mut()) {
            object.insert(ROOT_SEMANTICS_KEY.into(), root);
        }
        Ok(document)
    }

    fn model(reference: &XmlRef, document: Value, read: &dyn Reader) -> Result<LoadedModel> {
        let mut loaded = Pyhf::model(&Xml::pyhf_options(reference), document, read)?;
        if let LoadedModel::Binned { xml_semantics, .. } = &mut loaded {
            *xml_semantics = Some(reference.semantics);
        }
        Ok(loaded)
    }

    fn sources_mut(reference: &mut XmlRef) -> Vec<&mut Source> {
        let mut sources = vec![&mut reference.top];
        if let Some(p) = &mut reference.patchset {
            sources.push(&mut p.patchset);
        }
        sources.extend(reference.patches.iter_mut());
        sources
    }

    fn identity(reference: &XmlRef) -> (Option<&str>, Interpolation) {
        (
            reference.measurement.as_deref(),
            reference.interpolation.clone(),
        )
    }
}

impl Xml {
    /// The pyhf options of an XML reference, its workspace named by the XML (for messages).
    pub(crate) fn pyhf_options(reference: &XmlRef) -> PyhfRef {
        PyhfRef {
            workspace: reference.top.clone(),
            patchset: reference.patchset.clone(),
            patches: reference.patches.clone(),
            measurement: reference.measurement.clone(),
            interpolation: reference.interpolation.clone(),
        }
    }
}
