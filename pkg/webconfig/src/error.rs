//! Why a web configuration cannot be used.

use std::path::PathBuf;

/// Why a web configuration cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file could not be read.
    #[error("cannot read `{path}`")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a valid web configuration.
    #[error("web configuration `{path}`: {message}")]
    Invalid {
        /// The web configuration file (or the token file).
        path: PathBuf,
        /// What is wrong, in the file's own terms.
        message: String,
    },
}
