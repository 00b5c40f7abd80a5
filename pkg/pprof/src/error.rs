//! The one error type of this crate: every way a pprof can be refused, with the place named.

/// Why a pprof was refused. Messages name the fault and where it is, so that a user (or the
/// HTTP API's 400 answer) can act on them.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The input has no bytes at all.
    #[error("profile is empty (0 bytes)")]
    Empty,
    /// Decompressing would go past the configured limit; decompression stopped at the limit.
    #[error("profile is larger than the limit of {limit_bytes} bytes once decompressed")]
    TooLarge {
        /// The limit that was hit.
        limit_bytes: usize,
    },
    /// The input starts with the gzip magic but is not a valid gzip stream.
    #[error("profile is not valid gzip after {decompressed_bytes} decompressed bytes")]
    Gzip {
        /// How much had been decompressed when the stream broke.
        decompressed_bytes: usize,
        /// What the gzip decoder said.
        #[source]
        source: std::io::Error,
    },
    /// The (decompressed) bytes are not a pprof protobuf message.
    #[error("profile is not a valid pprof protobuf: {fault}")]
    Protobuf {
        /// Where and how the wire format broke, e.g. ``field `sample` (2) at byte 1234: length 57 runs past the end at byte 1260``.
        fault: String,
    },
    /// A string index points past the end of the string table.
    #[error("{place} refers to string index {index}, but the string table has {len} entries")]
    StringIndex {
        /// What holds the index, e.g. ``sample 12 label 0 key``.
        place: String,
        /// The index found.
        index: i64,
        /// The size of the string table.
        len: usize,
    },
    /// The first entry of the string table is not the empty string.
    #[error("string table entry 0 must be the empty string, found {found:?}")]
    StringTableStart {
        /// The entry that was found instead.
        found: String,
    },
    /// A reference to a location, function or mapping id that the profile does not define.
    #[error("{place} refers to {kind} id {id}, which the profile does not define")]
    UnknownId {
        /// What holds the reference, e.g. ``sample 7``.
        place: String,
        /// `location`, `function` or `mapping`.
        kind: &'static str,
        /// The id found.
        id: u64,
    },
    /// A location, function or mapping id is 0 or used twice.
    #[error("{kind} {idx} has id {id}, which is {why}")]
    BadId {
        /// `location`, `function` or `mapping`.
        kind: &'static str,
        /// Position of the entry in its table.
        idx: usize,
        /// The id found.
        id: u64,
        /// `zero` or `used twice`.
        why: &'static str,
    },
    /// A sample has a different number of values than the profile has sample types.
    #[error("sample {sample} has {found} values, but the profile declares {expected} sample types")]
    ValueCount {
        /// Position of the sample.
        sample: usize,
        /// Values found.
        found: usize,
        /// Sample types declared.
        expected: usize,
    },
    /// The input is in one of google/pprof's legacy (pre-protobuf) formats, but malformed.
    #[error("legacy {format} profile is malformed: {fault}")]
    Legacy {
        /// Which format, e.g. `Go CPU`, `heap`, `Java contention`.
        format: &'static str,
        /// What was wrong and where (line or byte).
        fault: String,
    },
    /// The input is in a legacy format, but converting it would take more memory than
    /// [`crate::DecodeOptions::max_decompressed_bytes`].
    #[error(
        "legacy profile is larger than the limit of {limit_bytes} bytes once converted to protobuf"
    )]
    LegacyTooLarge {
        /// The limit that was hit.
        limit_bytes: usize,
    },
    /// The (decompressed) bytes are in none of the formats google/pprof reads.
    #[error(
        "profile is {}not protobuf ({fault}){}, and not one of google/pprof's legacy formats \
         (Go or Java CPU, gperftools or Go heap, growth, contention or thread text)",
        if *gzipped { "gzip, but what it holds is " } else { "" },
        if *gzipped { "" } else { ", not gzip" }
    )]
    NotPprof {
        /// Where and how the protobuf wire format broke, as in [`Error::Protobuf`].
        fault: String,
        /// Whether the input was gzip.
        gzipped: bool,
    },
}
