//! The one error type of the store.

use std::path::PathBuf;

/// Why a store operation failed. Messages name the series, file and offset concerned.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A label name breaks Prometheus' rule.
    #[error(
        "label name `{name}` is invalid: use letters, digits and `_`, not starting with a digit"
    )]
    InvalidLabelName {
        /// The name given.
        name: String,
    },
    /// A label name appears twice in one label set.
    #[error("label `{name}` is given twice")]
    DuplicateLabel {
        /// The repeated name.
        name: String,
    },
    /// A regex matcher does not compile.
    #[error("invalid regex in matcher `{matcher}`")]
    InvalidRegex {
        /// The matcher as written.
        matcher: String,
        /// Why.
        #[source]
        source: Box<regex::Error>,
    },
    /// A series has no profile type.
    #[error("series {labels} has no `__name__` label (the profile type)")]
    MissingName {
        /// The labels given.
        labels: String,
    },
    /// A profile is older than its series' newest by more than the out-of-order window.
    #[error(
        "series {labels}: profile at {timestamp_ms} ms is older than the last stored one at \
         {last_ms} ms by more than the out-of-order window of {window_ms} ms \
         (--storage-out-of-order-window)"
    )]
    OutOfOrder {
        /// The series.
        labels: String,
        /// The refused profile's time.
        timestamp_ms: i64,
        /// The series' newest stored time.
        last_ms: i64,
        /// The window.
        window_ms: i64,
    },
    /// The series holds a profile at this time already.
    #[error("series {labels}: a profile at {timestamp_ms} ms is stored already (at the same time)")]
    Duplicate {
        /// The series.
        labels: String,
        /// The refused profile's time.
        timestamp_ms: i64,
    },
    /// A profile has more stacks than the configured limit.
    #[error("series {labels}: profile has {n_stacks} stacks, more than the limit of {limit}")]
    TooManyStacks {
        /// The series.
        labels: String,
        /// Stacks in the profile.
        n_stacks: usize,
        /// The limit (`Options::max_stacks_per_profile`).
        limit: usize,
    },
    /// A profile is older than the part of the store still open for appends: that time range
    /// has been cut into an immutable block.
    #[error(
        "series {labels}: profile at {timestamp_ms} ms is older than {min_valid_ms} ms, the start of the time still open for appends"
    )]
    OutOfBounds {
        /// The series.
        labels: String,
        /// The refused profile's time.
        timestamp_ms: i64,
        /// The oldest time the head accepts.
        min_valid_ms: i64,
    },
    /// A profile is older than the retention time allows, counted back from now (or from the
    /// newest profile stored, if that is later): retention would delete it within seconds, so
    /// storing it would acknowledge what is then lost.
    #[error(
        "series {labels}: profile at {} is older than {}, the retention horizon \
         (`--storage-retention-time` is {}): retention would delete it at once",
        rfc3339(*timestamp_ms),
        rfc3339(*horizon_ms),
        parca_vocab::duration::format(std::time::Duration::from_millis((*retention_ms).max(0) as u64))
    )]
    PastRetention {
        /// The series.
        labels: String,
        /// The refused profile's time.
        timestamp_ms: i64,
        /// The oldest time retention keeps.
        horizon_ms: i64,
        /// The retention time.
        retention_ms: i64,
    },
    /// Profiles of different sample or period types cannot be merged.
    #[error("cannot merge profiles of type {left} with profiles of type {right}")]
    IncompatibleProfiles {
        /// The first type met.
        left: String,
        /// The other type.
        right: String,
    },
    /// A block file fails its checksum or structure check.
    #[error("block `{block}` is corrupt: `{file}` {what}")]
    BlockCorrupt {
        /// The block's name (directory).
        block: String,
        /// The file within the block.
        file: &'static str,
        /// What is wrong, with the byte offset where known.
        what: String,
    },
    /// A shard's request or answer does not decode (a querier and its shards of different
    /// versions, or damage on the way).
    #[error("a shard's {what}")]
    PeerWire {
        /// What is wrong.
        what: String,
    },
    /// A file operation failed.
    #[error("{action} `{}`", path.display())]
    Io {
        /// What was being done, e.g. `cannot write WAL segment`.
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The operating system's reason.
        #[source]
        source: std::io::Error,
    },
    /// The write-ahead log is damaged somewhere other than a torn last record.
    #[error("WAL segment `{}` is corrupt at byte {offset}: {what}", segment.display())]
    WalCorrupt {
        /// The segment file.
        segment: PathBuf,
        /// Offset of the bad record.
        offset: u64,
        /// What is wrong.
        what: String,
    },
    /// The store takes no writes for now: a write or sync of its write-ahead log failed (a full
    /// disk, an I/O error). Nothing of the refused write is stored; the store retries in the
    /// background and takes writes again once the disk does.
    #[error(
        "the store is not taking writes for now: {cause}; it resumes by itself once the disk takes writes again"
    )]
    ReadOnly {
        /// The failed operation, its file and the operating system's reason.
        cause: String,
        /// The operating system's kind of error (`StorageFull` for a full disk).
        kind: std::io::ErrorKind,
    },
    /// Profiles older than the head takes could not be written as a block of their own (a full
    /// disk, an I/O error). Nothing of the block is stored (its temporary directory is
    /// removed); the write may be retried.
    #[error("cannot store profiles older than the head takes as a block")]
    BackfillFailed {
        /// What failed: the file and the operating system's reason.
        #[source]
        source: Box<Error>,
    },
    /// A profile held in memory does not decode: the store's own bug, reported rather than
    /// skipped.
    #[error(
        "series {labels}: the profile at {timestamp_ms} ms in the head does not decode ({what}); this is a bug of the store"
    )]
    HeadCorrupt {
        /// The series.
        labels: String,
        /// The profile's time.
        timestamp_ms: i64,
        /// What is wrong.
        what: String,
    },
}

/// What a caller should make of a store error; the HTTP status and the retry advice follow from
/// it, in one place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// The request was refused for what it asked (bad labels, out of order, too large): do not
    /// retry it as it is.
    Refused,
    /// The store cannot take it now (its disk failed or is full): retry later.
    Unavailable,
    /// The store failed (a file unreadable, data damaged).
    Internal,
}

impl Error {
    /// What kind of failure this is, for callers that answer someone (HTTP status, retry).
    pub fn class(&self) -> ErrorClass {
        if self.is_refusal() {
            ErrorClass::Refused
        } else if matches!(self, Error::ReadOnly { .. } | Error::BackfillFailed { .. }) {
            ErrorClass::Unavailable
        } else {
            ErrorClass::Internal
        }
    }

    /// Whether this error refuses one appended profile (bad labels, out of order, too large)
    /// rather than reporting a fault of the store: the appender stays usable after a refusal.
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            Error::InvalidLabelName { .. }
                | Error::DuplicateLabel { .. }
                | Error::InvalidRegex { .. }
                | Error::MissingName { .. }
                | Error::OutOfOrder { .. }
                | Error::Duplicate { .. }
                | Error::OutOfBounds { .. }
                | Error::TooManyStacks { .. }
                | Error::PastRetention { .. }
        )
    }

    /// Whether this refusal says the profile is older than the head takes: older than its
    /// series' newest by more than the out-of-order window, or older than the time already cut
    /// into blocks. Such a profile can still be stored as a block ([`crate::Backfill`],
    /// [`crate::Db::stage_backfill`]).
    pub fn is_too_old(&self) -> bool {
        matches!(self, Error::OutOfOrder { .. } | Error::OutOfBounds { .. })
    }

    pub(crate) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> Error {
        let path = path.into();
        move |source| Error::Io {
            action,
            path,
            source,
        }
    }
}

/// A time in RFC 3339 (UTC), or in milliseconds where it is out of the calendar's range.
fn rfc3339(ms: i64) -> String {
    jiff::Timestamp::from_millisecond(ms).map_or_else(|_| format!("{ms} ms"), |t| t.to_string())
}

pub use parca_vocab::with_causes;
