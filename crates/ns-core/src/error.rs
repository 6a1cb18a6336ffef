//! The one error type of the engine. Every variant names what is wrong and where.

/// Errors produced by the nextstat engine crates.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Malformed JSON or a value of the wrong type; `path` is the JSON path (`channels[0].samples[1].data`).
    #[error("invalid JSON at {path}: {message}")]
    Json { path: String, message: String },
    /// A workspace that parses but is not a valid HistFactory workspace.
    #[error("invalid workspace: {0}")]
    InvalidWorkspace(String),
    /// A model that cannot be built from a valid workspace (configuration conflicts, unknown POI, ...).
    #[error("invalid model: {0}")]
    InvalidModel(String),
    /// A parameter vector, dataset or option that does not fit the model.
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// A JSON patch or patchset that does not apply or does not verify.
    #[error("patch error: {0}")]
    Patch(String),
    /// An operation on a workspace (prune, rename, combine) that cannot be carried out.
    #[error("workspace operation failed: {0}")]
    Operation(String),
    /// A GPU backend that is missing or failed (no driver, no device, out of memory, a kernel
    /// that does not compile or launch).
    #[error("GPU device error: {0}")]
    Device(String),
    /// A valid request whose computation failed (every toy fit failed, say).
    #[error("computation failed: {0}")]
    Computation(String),
    /// The caller asked the computation to stop (Ctrl-C in Python, say) before it finished.
    #[error("interrupted before the computation finished")]
    Interrupted,
    /// Reading or writing a file.
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
}

impl Error {
    /// Build an [`Error::Io`] naming the file.
    pub fn io(path: impl std::fmt::Display, source: std::io::Error) -> Self {
        Error::Io {
            path: path.to_string(),
            source,
        }
    }
}

/// Result alias for the engine crates.
pub type Result<T> = std::result::Result<T, Error>;

/// A number for a message: plain where that is short, in exponent form where it is huge or
/// tiny (1e308 is not written as 309 digits).
pub fn short_number(x: f64) -> String {
    if x != 0.0 && x.is_finite() && !(1e-4..1e15).contains(&x.abs()) {
        format!("{x:e}")
    } else {
        format!("{x}")
    }
}
