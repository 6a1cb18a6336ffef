//! Binned HS3: `histfactory_dist` channels in ROOT 6.40's dialect, read as a pyhf workspace
//! with ROOT's semantics ([`read`]) and written from a HistFactory model ([`write`]).
//!
//! The names below are ROOT's (what `RooJSONFactoryWSTool` writes for a HistFactory
//! workspace); the reader maps them back to nextstat's and the writer to ROOT's, so a model
//! written and read again keeps its parameter names.

mod read;
mod write;

pub use read::{BinnedWorkspace, read};
pub use write::write;

/// The distribution of channel `channel`.
fn channel_distribution(channel: &str) -> String {
    format!("model_{channel}")
}

/// The channel of distribution `dist` (the distribution's name where it has no prefix).
fn channel_of(dist: &str) -> &str {
    dist.strip_prefix("model_").unwrap_or(dist)
}

/// The observable of channel `channel`.
fn channel_observable(channel: &str) -> String {
    format!("obs_x_{channel}")
}

/// The prefix of the α of a normsys or histosys.
const ALPHA_PREFIX: &str = "alpha_";

/// The α of a normsys or histosys `name`.
fn alpha(name: &str) -> String {
    format!("{ALPHA_PREFIX}{name}")
}

/// The γ of bin `i` of a shapesys or shapefactor `name`.
fn gamma(name: &str, i: usize) -> String {
    format!("gamma_{name}_bin_{i}")
}

/// The prefix of nextstat's name of a channel's staterror set (`staterror_<channel>`, the XML
/// route's), whose γ are ROOT's `gamma_stat_<channel>_bin_<i>`.
const STAT_SET_PREFIX: &str = "staterror_";

/// The γ of bin `i` of channel `channel`'s staterror.
fn stat_gamma(channel: &str, i: usize) -> String {
    gamma(&format!("stat_{channel}"), i)
}

/// ROOT's name of the luminosity (nextstat's `lumi`).
const ROOT_LUMI: &str = "Lumi";

/// The global observable of a constrained parameter.
fn global_observable(parameter: &str) -> String {
    format!("nom_{parameter}")
}

/// ROOT's FlexibleInterpVar codes of a normsys: 5 is pyhf's code4 (a sixth-order polynomial
/// inside |α| < 1, exponential outside), 1 pyhf's code1 (exponential).
const ROOT_CODE4: i64 = 5;
const ROOT_CODE1: i64 = 1;
/// ROOT's FlexibleInterpVar code 4, what its importer gives a normsys without a key (ATLAS's
/// ROOT 6.32 exports): ROOT 6.40 evaluates it exactly as code 5.
const ROOT_CODE4_AS_5: i64 = 4;
/// ROOT's PiecewiseInterpolation code of a histosys: pyhf's code4p (ROOT writes no code).
const ROOT_HISTOSYS_CODE4P: i64 = 4;
