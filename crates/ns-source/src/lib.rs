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
mod document;
mod hs3;
mod loaded;
mod pyhf;
mod reference;

pub use access::{Files, NoFiles, Reader};
pub use document::Source;
pub use hs3::{Hs3, Hs3Ref};
pub use loaded::LoadedModel;
pub use pyhf::{Interpolation, PatchsetPatch, Pyhf, PyhfRef};
pub use reference::{FORMATS, ModelRef, Tagged};

use ns_core::Result;
use serde_json::Value;

/// One input format: how its reference is read into a model.
pub trait Format {
    /// The format's tag in a model reference (`"format": NAME`).
    const NAME: &'static str;
    /// The documents and options a reference of this format carries.
    type Reference;
    /// Whether a JSON document read without a named format is of this format.
    fn claims(document: &Value) -> bool;
    /// The model document after its patches: what the model's digest covers.
    fn document(reference: &Self::Reference, read: &dyn Reader) -> Result<Value>;
    /// The model, every file read through `read` (and only as its policy allows).
    fn load(reference: &Self::Reference, read: &dyn Reader) -> Result<LoadedModel>;
    /// Every document the reference names.
    fn sources_mut(reference: &mut Self::Reference) -> Vec<&mut Source>;
    /// The options that make two equal documents different models: the selection (measurement
    /// or analysis) and the interpolation codes.
    fn identity(reference: &Self::Reference) -> (Option<&str>, Interpolation);
}
