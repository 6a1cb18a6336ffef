//! Model sources: where a model comes from and how it is read, above the readers.
//!
//! A [`ModelRef`] names a model: `{"format": "pyhf", "workspace": …}` or `{"format": "hs3",
//! "document": …}`, each with the options of its format; without `"format"` (the form every
//! earlier call used) the document's content decides between the formats of the registry. Every
//! front door loads models through [`ModelRef::load_model`] under a file-access policy
//! ([`Reader`]): local files for the CLI and Python, none for the server.
//!
//! The registry is the one `formats!` list below: a format is a module implementing [`Format`]
//! and one line there (docs/ARCHITECTURE.md, "Add an input format").

mod access;
mod datacard;
mod document;
mod hs3;
mod loaded;
mod pyhf;
mod reference;
mod xml;

pub use access::{Files, HEAD_BYTES, NoFiles, Reader, file_head};
pub use datacard::{Datacard, DatacardRef};
pub use document::Source;
pub use hs3::{Hs3, Hs3Ref};
pub use loaded::{LoadedModel, annotate_unbinned};
pub use pyhf::{Interpolation, PatchsetPatch, Pyhf, PyhfRef};
pub use reference::{FORMATS, ModelRef, Tagged};
pub use xml::{Xml, XmlRef};

use ns_core::Result;
use serde_json::Value;

/// One input format: how its reference is read into a model.
pub trait Format {
    /// The format's tag in a model reference (`"format": NAME`).
    const NAME: &'static str;
    /// The documents and options a reference of this format carries.
    type Reference;
    /// Whether a file named without a format is of this format by its first bytes: formats
    /// whose files are not JSON documents claim them here; JSON formats by [`Format::claims`].
    fn claims_head(_head: &[u8]) -> bool {
        false
    }
    /// Whether a JSON document read without a named format is of this format.
    fn claims(document: &Value) -> bool;
    /// This format's reference from a reference that names no format (the options the front
    /// ends' model arguments give), or an error naming an option this format does not take.
    fn from_untagged(reference: &PyhfRef) -> Result<Self::Reference>;
    /// The model document after its patches (for a format of other files: the canonical spec
    /// its reader gives): what the model's digest covers.
    fn document(reference: &Self::Reference, read: &dyn Reader) -> Result<Value>;
    /// The model of `document`, the reference's [`Format::document`]; data files read through
    /// `read` (and only as its policy allows).
    fn model(
        reference: &Self::Reference,
        document: Value,
        read: &dyn Reader,
    ) -> Result<LoadedModel>;
    /// The model.
    fn load(reference: &Self::Reference, read: &dyn Reader) -> Result<LoadedModel> {
        Self::model(reference, Self::document(reference, read)?, read)
    }
    /// Every document the reference names.
    fn sources_mut(reference: &mut Self::Reference) -> Vec<&mut Source>;
    /// The options that make two equal documents different models: the selection (measurement
    /// or analysis) and the interpolation codes.
    fn identity(reference: &Self::Reference) -> (Option<&str>, Interpolation);
}
