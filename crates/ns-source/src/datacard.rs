//! CMS Combine datacards (`ns_datacard`): the card's text, parsed, is the document; its model has
//! Combine's likelihood. A card is read from its file, or sent as text (`"card": "imax 1 …"`).

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
    /// The card: its file, or its text as a JSON string.
    pub card: Source,
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
            card: reference.workspace.clone(),
        })
    }

    /// The parsed card, as JSON.
    fn document(reference: &DatacardRef, read: &dyn Reader) -> Result<Value> {
        let (text, origin) = match &reference.card {
            Source::Path(path) => {
                let text = read.text(path).ok_or_else(|| {
                    Error::InvalidInput(format!(
                        "{}: a datacard is read from a file or sent as text",
                        path.display()
                    ))
                })??;
                (text, path.display().to_string())
            }
            Source::Inline(Value::String(text)) => (text.clone(), "the inline datacard".into()),
            Source::Inline(_) => {
                return Err(Error::InvalidInput(
                    "card: a datacard is sent as its text (a JSON string)".into(),
                ));
            }
        };
        let card = ns_datacard::parse(&text, &origin)?;
        serde_json::to_value(&card)
            .map_err(|e| Error::Computation(format!("the datacard as JSON: {e}")))
    }

    fn model(_reference: &DatacardRef, document: Value, _read: &dyn Reader) -> Result<LoadedModel> {
        let card: ns_datacard::Datacard = serde_json::from_value(document)
            .map_err(|e| Error::InvalidInput(format!("a parsed datacard: {e}")))?;
        Ok(LoadedModel::Binned {
            workspace: None,
            model: Box::new(ns_datacard::model(&card)?),
            xml_semantics: None,
        })
    }

    fn sources_mut(reference: &mut DatacardRef) -> Vec<&mut Source> {
        vec![&mut reference.card]
    }

    fn identity(_reference: &DatacardRef) -> (Option<&str>, Interpolation) {
        (None, Interpolation::default())
    }
}
