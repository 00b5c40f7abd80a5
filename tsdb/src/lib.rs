//! The profile store: a time-series database whose samples are profiles.
//!
//! Modelled on Prometheus' TSDB: appends go to an in-memory head and a write-ahead log; the head
//! is cut into immutable blocks; series are found through roaring-bitmap postings per label
//! name=value. Stacks and symbols are interned once (`parca_profile::Tables`), so a stored
//! profile is a column of stack ids and values.
//!
//! # Design constraints
//!
//! - Synchronous: async callers go through `spawn_blocking`.
//! - A profile acknowledged to a writer survives a crash (`kill -9`): commit returns after fsync.
//! - Bad appends are refused with an error naming the series, and nothing stored is lost.

mod db;
mod error;
pub mod labels;
pub mod postings;
mod record;
pub mod wal;

pub use db::{Appender, Db, Options, Querier, SeriesProfiles, Stats};
pub use error::Error;
pub use labels::{Label, Labels, MatchOp, Matcher, NAME_LABEL};
pub use postings::MemPostings;
