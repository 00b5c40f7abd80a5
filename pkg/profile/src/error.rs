//! The one error type of this crate.

/// Why a profile operation was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The pprof could not be decoded or is invalid.
    #[error(transparent)]
    Pprof(#[from] parca_pprof::Error),
    /// Profiles of different kinds cannot be merged or compared.
    #[error("cannot combine `{left}` with `{right}`: sample types differ")]
    IncompatibleTypes {
        /// The kind already held, e.g. `cpu/nanoseconds (period cpu/nanoseconds)`.
        left: String,
        /// The kind offered.
        right: String,
    },
    /// Nothing to merge.
    #[error("no profiles to merge")]
    NothingToMerge,
    /// No sample type of the profile has the requested name.
    #[error("profile has no sample type `{wanted}`; it has {available}")]
    NoSuchSampleType {
        /// The requested sample type.
        wanted: String,
        /// The sample types it has, comma-separated.
        available: String,
    },
    /// The profile's `drop_frames` or `keep_frames` is not a regular expression (google/pprof
    /// refuses such a profile too).
    #[error("cannot apply the profile's frame filters: {0}")]
    FrameFilter(String),
    /// A stack filter's regular expression does not compile.
    #[error("invalid stack filter regex `{pattern}`")]
    Regex {
        /// The pattern as given.
        pattern: String,
        /// Why it does not compile.
        #[source]
        source: Box<regex::Error>,
    },
}
