//! The store's shared state, owned here alone: [`Inner`] (head, WAL, the blocks served, the
//! locks that order maintenance, the background threads' signals) with the [`Options`] it was
//! opened with, and the few rules every part that changes it follows (a checkpoint's records, a
//! failed WAL healed, a series' meta). `db.rs` (the API), `compact.rs`, `backfill.rs` and the
//! read path use it downward; it uses none of them.

use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::time::Duration;

use parca_profile::Meta;

use crate::block::Block;
use crate::commit::Waiting;
use crate::encoding::TableCounts;
use crate::head::Head;
use crate::wal::{self, Wal};
use crate::{Error, record};

/// One hour in milliseconds.
pub(crate) const HOUR_MS: i64 = 3_600_000;

/// How a store behaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// Profiles with more distinct stacks than this are refused (a guard against runaway
    /// producers; real profiles have thousands to tens of thousands).
    pub max_stacks_per_profile: usize,
    /// Time range of a block cut from the head (`--storage-block-duration`, default 2h).
    /// Blocks are compacted into ranges of 3×, 9×, 27×… this, up to a tenth of the retention
    /// time or 31 days.
    pub block_duration_ms: i64,
    /// Blocks whose whole time range is older than this, counted back from the newest profile
    /// stored, are deleted (`--storage-retention-time`, default 15d; 0 keeps everything).
    pub retention_ms: i64,
    /// When blocks and WAL together take more bytes than this, the oldest blocks are deleted
    /// (`--storage-retention-size`; 0, the default, means no limit).
    pub retention_bytes: u64,
    /// Profiles committed with [`Appender::commit_buffered`](crate::Appender::commit_buffered) are made durable by a background
    /// fsync at most this long after their commit; a machine crash (not a crash of the process)
    /// loses at most this much of them. Default 1 s.
    pub wal_sync_interval: Duration,
    /// Whether opening the store steps over damage in the middle of the write-ahead log
    /// (keeping every intact record, setting the damaged segments aside in `quarantine/`)
    /// instead of refusing to open (`--storage-wal-repair`, default true).
    pub wal_repair: bool,
    /// How far before its series' newest profile a profile may still be appended
    /// (`--storage-out-of-order-window`, default 2h): inside it, profiles of a series arrive in
    /// any order (a folder of saved profiles pushed as it lists). Never before the time already
    /// cut into blocks. 0: each profile must be newer than its series' last. Older profiles can
    /// be stored as blocks of their own ([`Db::stage_backfill`](crate::Db::stage_backfill), [`crate::Backfill`]).
    pub out_of_order_window_ms: i64,
    /// Whether blocks leave for an object store (uploaded by the caller, which marks them with
    /// [`Db::mark_shipped`](crate::Db::mark_shipped)): then blocks are never compacted, so the bucket never holds the
    /// same data twice from one server (as Thanos asks of Prometheus), and retention deletes
    /// only blocks already shipped. Default false.
    pub ship_blocks: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            max_stacks_per_profile: 1_000_000,
            block_duration_ms: 2 * HOUR_MS,
            retention_ms: 15 * 24 * HOUR_MS,
            retention_bytes: 0,
            wal_sync_interval: Duration::from_secs(1),
            wal_repair: true,
            out_of_order_window_ms: 2 * HOUR_MS,
            ship_blocks: false,
        }
    }
}

/// A block that failed its checks and was moved to `<data>/quarantine/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quarantined {
    /// The block's name.
    pub block: String,
    /// Where it is now.
    pub path: PathBuf,
    /// Why, naming the file and what is wrong with it.
    pub reason: String,
}

/// The blocks being served, oldest first. Replaced whole (copy on write): a query holds the
/// `Arc` of the set it started with, so blocks compacted or deleted meanwhile stay readable.
pub(crate) type BlockSet = Arc<Vec<Arc<Block>>>;

#[derive(Default)]
pub(crate) struct Worker {
    pub stop: bool,
    pub wake: bool,
    /// An async commit waits for the WAL sync thread ([`Inner::commits`]).
    pub commit: bool,
}

/// Everything the store is, shared with its background thread.
pub(crate) struct Inner {
    pub dir: PathBuf,
    pub options: Options,
    pub head: RwLock<Head>,
    pub wal: Wal,
    pub blocks: RwLock<BlockSet>,
    /// Blocks read from an object store ([`Db::set_remote_blocks`](crate::Db::set_remote_blocks)); those also on disk are
    /// read from disk.
    pub remote: RwLock<Arc<Vec<crate::LazyBlock>>>,
    /// Held by whoever cuts, compacts or deletes blocks: one at a time.
    pub maintenance: Mutex<()>,
    /// Held while blocks written outside maintenance (backfill) are renamed into the data
    /// directory and added to the served set, and while the directory is scanned for blocks of
    /// other processes: so a scan never opens a block that is being added.
    pub publish: Mutex<()>,
    pub quarantined: Mutex<Vec<Quarantined>>,
    /// Blocks uploaded to an object store ([`Options::ship_blocks`]): only these may be
    /// deleted by retention.
    pub shipped: Mutex<std::collections::HashSet<String>>,
    /// Damage that opening the store stepped over in the write-ahead log.
    pub wal_damage: Vec<wal::Damage>,
    /// The shards read beside this store ([`Db::set_peers`](crate::Db::set_peers)).
    pub peers: RwLock<Option<Arc<dyn crate::Peers>>>,
    pub worker: Mutex<Worker>,
    pub worker_cv: Condvar,
    /// Wakes the WAL sync thread early (to stop, or for async commits); it shares `worker`'s
    /// lock.
    pub sync_cv: Condvar,
    /// Async commits waiting for the WAL sync thread ([`Appender::commit_async`](crate::Appender::commit_async)).
    pub commits: Waiting,
}

impl Inner {
    pub fn block_set(&self) -> BlockSet {
        Arc::clone(&self.blocks.read().expect("blocks lock poisoned"))
    }

    /// The blocks of the object store served ([`Db::set_remote_blocks`](crate::Db::set_remote_blocks)).
    pub fn remote_blocks(&self) -> Arc<Vec<crate::LazyBlock>> {
        Arc::clone(&self.remote.read().expect("remote blocks lock poisoned"))
    }

    pub fn peers(&self) -> Option<Arc<dyn crate::Peers>> {
        self.peers.read().expect("peers lock poisoned").clone()
    }

    /// Has the WAL sync thread make what async commits wait for durable, now.
    pub fn want_commit(&self) {
        self.worker.lock().expect("worker lock poisoned").commit = true;
        self.sync_cv.notify_one();
    }

    pub fn wake_worker(&self) {
        self.worker.lock().expect("worker lock poisoned").wake = true;
        self.worker_cv.notify_one();
    }
}

/// Writes the records that describe `head` whole, between checkpoint markers: replay adopts
/// them in place of everything before.
pub(crate) fn write_checkpoint(head: &Head, sink: &mut wal::RecordSink<'_>) -> Result<(), Error> {
    sink.put(&record::encode_checkpoint_begin(head.min_valid_ms))?;
    for (i, s) in head.series.iter().enumerate() {
        sink.put(&record::encode_series(i as u32, &s.labels, &s.meta))?;
    }
    if TableCounts::of(&head.tables) != TableCounts::empty() {
        sink.put(&record::encode_symbols(&head.tables, TableCounts::empty()))?;
    }
    for (i, s) in head.series.iter().enumerate() {
        for p in &s.profiles {
            sink.put(&record::encode_profile(
                i as u32,
                p.timestamp_ms,
                p.duration_nanos,
                p.period,
                p.capture_id,
                &p.data,
            ))?;
        }
    }
    sink.put(&record::encode_checkpoint_end())
}

/// Brings a failed write-ahead log back (see [`Wal::heal`]): takes the profiles whose records
/// were lost out of the head, so that no profile answered with an error stays stored, and
/// rewrites the head as a checkpoint. Runs under the maintenance lock, so no cut is in progress.
pub(crate) fn heal_wal(inner: &Inner) -> Result<bool, Error> {
    if inner.wal.failure().is_none() {
        return Ok(false);
    }
    let mut head = inner.head.write().expect("head lock poisoned");
    inner.wal.heal(|lost, sink| {
        for p in lost {
            head.remove_profile(p.series, p.timestamp_ms);
        }
        write_checkpoint(&head, sink)
    })
}

/// What a series keeps of its first profile's meta: types, comments and frame filters, not
/// time or capture (the head's appends and backfilled blocks alike).
pub(crate) fn series_meta(meta: &Meta) -> Meta {
    Meta {
        time_nanos: 0,
        duration_nanos: 0,
        period: 0,
        capture_id: 0,
        ..meta.clone()
    }
}
