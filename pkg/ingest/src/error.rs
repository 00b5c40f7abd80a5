//! The one error type of this crate.

/// Why a profile could not be turned into series.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The pprof is not valid.
    #[error("invalid profile: {0}")]
    Profile(#[from] parca_profile::Error),
    /// A label of the series is not valid.
    #[error("invalid labels: {0}")]
    Labels(#[source] parca_tsdb::Error),
    /// The profile name (first part of the profile type) is missing or malformed.
    #[error(
        "invalid profile name `{name}`: use letters, digits and `_`, such as `process_cpu` or `memory`"
    )]
    InvalidName {
        /// The name given.
        name: String,
    },
    /// A Pyroscope push request could not be decoded.
    #[error("invalid push request: {fault}")]
    Push {
        /// What is wrong.
        fault: String,
    },
    /// An OTLP profiles export request could not be converted.
    #[error("invalid OTLP profiles request: {fault}")]
    Otlp {
        /// What is wrong, and where in the request.
        fault: String,
    },
    /// A Parca Arrow write (`WriteArrow`, `Write`) could not be converted.
    #[error("invalid Arrow write: {fault}")]
    Arrow {
        /// What is wrong, and in which column.
        fault: String,
    },
    /// A file given to an import cannot be imported.
    #[error("`{}` {fault}", path.display())]
    ImportFile {
        /// The file (or directory).
        path: std::path::PathBuf,
        /// What is wrong with it.
        fault: String,
    },
    /// The store refused or failed a write.
    #[error("cannot write the blocks")]
    Store(#[source] parca_tsdb::Error),
    /// A Pyroscope `/ingest` request could not be understood.
    #[error("invalid ingest request: {fault}")]
    Ingest {
        /// What is wrong.
        fault: String,
    },
}
