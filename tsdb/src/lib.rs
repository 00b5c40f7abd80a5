//! The profile store: a time-series database whose samples are profiles.
//!
//! Modelled on Prometheus' TSDB: appends go to an in-memory head and a write-ahead log; every
//! block duration (default 2h) the head's oldest part is cut into an immutable block directory
//! (`meta.json`, an `index` with roaring-bitmap postings read through a memory map, `symbols`,
//! and zstd-compressed columnar `profiles`); a background thread compacts adjacent blocks and
//! deletes blocks past retention. Stacks and symbols are interned once per head and per block
//! (`parca_profile::Tables`), so a stored profile is a column of stack ids and values.
//! Profiles older than the head takes are written straight into complete blocks
//! ([`Backfill`], [`Db::stage_backfill`]); blocks may then overlap one another and the head:
//! queries count each profile (its series and time) once, and compaction merges overlapping
//! blocks first. `documentation/tsdb-format.md` specifies every file.
//!
//! # Design constraints
//!
//! - Synchronous: async callers go through `spawn_blocking`.
//! - A profile acknowledged to a writer survives a crash (`kill -9`): commit returns after fsync.
//! - Bad appends are refused with an error naming the series, and nothing stored is lost.
//! - Blocks are immutable and checksummed; a corrupt one is set aside (`quarantine/`), never
//!   served, and never stops the store from opening. Readers never panic on bad bytes.
//! - Queries read blocks and head together and answer the same before and after a cut or a
//!   compaction; background work never holds the head's write lock while it writes files.
//! - A profile is its series and its time: where blocks (imported ones) and the head overlap,
//!   it counts once. Blocks appear in the directory whole (written under a temporary name,
//!   synced, renamed), so another process may add blocks to the store of a running server.
//!
//! # Example
//!
//! ```
//! use parca_tsdb::{Db, Labels, MatchOp, Matcher, Options};
//! # use parca_pprof::proto;
//! # let pprof = proto::Profile {
//! #     sample_type: vec![proto::ValueType { r#type: 1, unit: 2 }],
//! #     sample: vec![proto::Sample { location_id: vec![1], value: vec![5], label: vec![] }],
//! #     location: vec![proto::Location { id: 1, line: vec![proto::Line { function_id: 1, line: 3, column: 0 }], ..Default::default() }],
//! #     function: vec![proto::Function { id: 1, name: 3, ..Default::default() }],
//! #     string_table: ["", "cpu", "nanoseconds", "main"].map(String::from).to_vec(),
//! #     ..Default::default()
//! # };
//! # let bytes = parca_pprof::encode(&pprof, true);
//! let profile = parca_profile::decode(&bytes, &Default::default()).unwrap().remove(0);
//! let dir = tempfile::tempdir().unwrap();
//! let db = Db::open(dir.path(), Options::default()).unwrap();
//!
//! let labels = Labels::new([("__name__", "process_cpu:cpu:nanoseconds:cpu:nanoseconds"), ("job", "api")]).unwrap();
//! let mut appender = db.appender();
//! appender.append(&labels, 1_700_000_000_000, &profile).unwrap();
//! appender.commit().unwrap(); // durable from here on
//!
//! let api = Matcher::new(MatchOp::Equal, "job", "api").unwrap();
//! let found = db.querier(0, i64::MAX).select(&[api]).unwrap();
//! assert_eq!(found[0].profiles[0].1.total(), 5);
//! ```

mod backfill;
mod block;
mod block_profile;
mod commit;
mod compact;
mod db;
mod differences;
mod encoding;
mod error;
mod head;
pub mod labels;
mod mmap;
mod peer;
pub mod postings;
mod query;
mod range_read;
mod record;
mod remote;
mod retention;
mod spans;
mod state;
mod summary;
pub mod wal;

#[cfg(test)]
mod test_support;

pub use backfill::{Backfill, WrittenBlock};
pub use block::meta_for_upload;
pub use commit::Commit;
pub use compact::compact_remote;
pub use db::{Appender, BlockInfo, Db, StagedBlocks, Stats};
pub use error::{Error, ErrorClass, with_causes};
pub use labels::{Label, Labels, MatchOp, Matcher, NAME_LABEL};
pub use peer::{
    PEER_CONTENT_TYPE, PeerAnswer, PeerProfile, PeerRead, PeerRequest, PeerSeries, PeerStore, Peers,
};
pub use postings::MemPostings;
pub use query::{
    MergedGroup, Querier, SeriesProfiles, SeriesSpans, SeriesTotals, SpanTotal, TotalPoint,
};
pub use range_read::RangeRead;
pub use remote::{LazyBlock, OpenBlock, RemoteBlock};
pub use retention::RetentionHorizon;
pub use spans::{DEFAULT_SPAN_LABELS, set_span_labels, span_labels};
pub use state::{Options, Quarantined};
pub use summary::SUMMARY_RESOLUTIONS_MS;
