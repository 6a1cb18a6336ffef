//! pyhf JSON workspaces → validated [`Workspace`] → [`HistFactoryModel`] (lowered into the
//! compiled layout of `ns-core`); patches, patchsets and the pyhf workspace operations.

pub mod load;
pub mod model;
pub mod ops;
pub mod patch;
pub mod pyjson;
pub mod spec;

pub use model::{FromWorkspace, ModelOptions};
pub use ns_core::model::{ChannelInfo, Constraint, HistFactoryModel, ParameterSet};
pub use spec::Workspace;
