//! CMS Combine datacards (`ns_datacard`): the card's text, parsed, is the document; its model has
//! Combine's likelihood. A card is read from its file (`"card": "card.txt"`), or sent as its text
//! (`"text": "imax 1 …"`, how the server takes one).

use ns_core::{Error, Result};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::access::Reader;
use crate::document::Source;
use crate::pyhf::{Interpolation, PyhfRef};
use crate::{Format, LoadedModel};

/// The datacard format.
pub struct Datacard;

/// A model from a datacard.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DatacardRef {
    /// The card's file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub card: Option<Source>,
    /// The card's text, instead of a file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// The mass `$MASS` in template names stands for (text2workspace's `-m`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mass: Option<String>,
    /// Physics-model options (text2workspace's `--PO` of multiSignalModel: `map=…`,
    /// `turnoff=…`); none: Combine's default model, the POI `r` on every signal process.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub physics: Vec<String>,
}

impl Format for Datacard {
    const NAME: &'static str = "datacard";
    type Reference = DatacardRef;

    fn claims_head(head: &[u8]) -> bool {
        ns_datacard::claims_head(head)
    }

    fn claims(_document: &Value) -> bool {
        false
    }

    fn from_untagged(reference: &PyhfRef) -> Result<DatacardRef> {
        let refused = [
            (reference.patchset.is_some(), "a patchset"),
            (!reference.patches.is_empty(), "patches"),
            (reference.measurement.is_some(), "a measurement"),
            (
                reference.interpolation != Interpolation::default(),
                "interpolation codes",
            ),
        ];
        if let Some((_, what)) = refused.iter().find(|(given, _)| *given) {
            return Err(Error::InvalidInput(format!(
                "{}: a CMS Combine datacard takes no {what} (those apply to pyhf workspaces)",
                reference.workspace.model_origin()
            )));
        }
        Ok(DatacardRef {
            card: Some(reference.workspace.clone()),
            text: None,
            mass: None,
            physics: Vec::new(),
        })
    }

    /// The parsed card, as JSON.
    fn document(reference: &DatacardRef, read: &dyn Reader) -> Result<Value> {
        let (text, origin) = match (&reference.card, &reference.text) {
            (Some(Source::Path(path)), None) => {
                // A reader that opens no files (the server's) says so as it does for any file,
                // nothing of the path in it.
                let text = read
                    .text(path)
                    .ok_or_else(|| Error::InvalidInput(ns_core::files::NO_FILES.into()))??;
                (text, path.display().to_string())
            }
            (None, Some(text)) => (text.clone(), "the datacard's text".into()),
            (Some(Source::Inline(_)), None) => {
                return Err(Error::InvalidInput(
                    "card: a datacard file is named by its path; its text goes in \"text\"".into(),
                ));
            }
            _ => {
                return Err(Error::InvalidInput(
                    "a datacard reference gives the card's file (\"card\") or its text \
                     (\"text\"), one of them"
                        .into(),
                ));
            }
        };
        let card = ns_datacard::parse(&text, &origin)?;
        serde_json::to_value(&card)
            .map_err(|e| Error::Computation(format!("the datacard as JSON: {e}")))
    }

    /// Templates are read from the card's folder, as the reader's policy allows (a card sent as
    /// text has no folder: its templates are refused where the reader opens no files).
    fn model(reference: &DatacardRef, document: Value, read: &dyn Reader) -> Result<LoadedModel> {
        let card = parsed(document)?;
        let files = ns_datacard::ShapeFiles::new(
            read.data_files(folder(reference)),
            reference.mass.clone(),
        );
        let maps = ns_datacard::SignalMaps::parse(&reference.physics)?;
        Ok(LoadedModel::Binned {
            workspace: None,
            model: Box::new(ns_datacard::model_with(&card, &files, &maps)?),
            xml_semantics: None,
        })
    }

    fn sources_mut(reference: &mut DatacardRef) -> Vec<&mut Source> {
        reference.card.iter_mut().collect()
    }

    fn identity(_reference: &DatacardRef) -> (Option<&str>, Interpolation) {
        (None, Interpolation::default())
    }
}

/// The card of a datacard document.
fn parsed(document: Value) -> Result<ns_datacard::Datacard> {
    serde_json::from_value(document)
        .map_err(|e| Error::InvalidInput(format!("a parsed datacard: {e}")))
}

/// The folder a card's templates are read from (none for a card sent as text).
fn folder(reference: &DatacardRef) -> Option<&std::path::Path> {
    match &reference.card {
        Some(Source::Path(path)) => path.parent(),
        _ => None,
    }
}

/// The card as a pyhf workspace (`ns_datacard::pyhf_workspace`), its templates read as its
/// model's are.
pub(crate) fn as_pyhf(reference: &DatacardRef, read: &dyn Reader) -> Result<Value> {
    let card = parsed(Datacard::document(reference, read)?)?;
    let files =
        ns_datacard::ShapeFiles::new(read.data_files(folder(reference)), reference.mass.clone());
    let maps = ns_datacard::SignalMaps::parse(&reference.physics)?;
    ns_datacard::pyhf_workspace(&card, &files, &maps)
}
