//! The store's synchronous API: open, append in committed batches, query, statistics; and the
//! background thread that cuts the head into blocks, compacts them and applies retention.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, RwLock, RwLockWriteGuard, TryLockError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parca_profile::Profile;

use crate::backfill::{Backfill, WrittenBlock};
use crate::block::{Block, SealedBlock};
use crate::commit::{Commit, Waiting};
use crate::encoding::{self, Reader, TableCounts};
use crate::head::{Head, StoredProfile};
use crate::labels::{Labels, MatchOp, Matcher, NAME_LABEL};
use crate::query::Querier;
use crate::retention::RetentionHorizon;
use crate::state::{Inner, Options, Quarantined, Worker, heal_wal, series_meta, write_checkpoint};
use crate::wal::{self, Wal};
use crate::{Error, record};

/// How often the background thread looks for work when nobody wakes it.
const MAINTENANCE_INTERVAL: Duration = Duration::from_secs(30);

/// How often the background thread looks in the data directory for blocks written by another
/// process (`parca import` into the store of a running server): a directory listing.
const BLOCK_SCAN_INTERVAL: Duration = Duration::from_secs(5);

/// A block on disk, as [`Db::blocks`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockInfo {
    /// Its name, a ULID: the directory's name, and the name it keeps in an object store.
    pub name: String,
    /// Its directory.
    pub dir: PathBuf,
    /// Oldest profile time it may hold (inclusive).
    pub min_time_ms: i64,
    /// End of its time range (exclusive).
    pub max_time_ms: i64,
    /// Bytes of its files.
    pub size_bytes: u64,
    /// Of those, the bytes of its summaries' profiles (5-minute, hour and day windows; 0 for a
    /// block without).
    pub summary_bytes: u64,
}

/// Figures about what the store holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stats {
    /// Series in the head (those with recent profiles).
    pub n_series: usize,
    /// Stored profiles, in blocks and head.
    pub n_profiles: usize,
    /// Stored (stack, value) pairs, in blocks and head.
    pub n_samples: usize,
    /// Distinct stacks in the head.
    pub n_head_stacks: usize,
    /// Profiles in the head.
    pub n_head_profiles: usize,
    /// (stack, value) pairs in the head.
    pub n_head_samples: usize,
    /// Bytes of memory the head's profiles take: encoded samples and per-profile figures
    /// (the interned symbols and stacks they share are not included).
    pub head_sample_bytes: u64,
    /// Immutable blocks on disk.
    pub n_blocks: usize,
    /// Blocks of an object store served beside them ([`Db::set_remote_blocks`]).
    pub n_remote_blocks: usize,
    /// Bytes of the blocks' files on disk.
    pub block_bytes: u64,
    /// Bytes of the write-ahead log on disk.
    pub wal_bytes: u64,
    /// Blocks set aside as corrupt since the store was opened.
    pub n_quarantined: usize,
    /// Failed writes and syncs of the write-ahead log since the store was opened.
    pub n_wal_write_errors: u64,
    /// Whether the store refuses writes now, after a failed write (it heals by itself).
    pub read_only: bool,
}

/// A profile store in a directory. Cheap to share between threads (`&Db` is `Sync`; wrap it in
/// an `Arc` to share it with tasks). It runs two background threads, maintenance and WAL sync,
/// stopped when the `Db` is dropped or closed.
pub struct Db {
    inner: Arc<Inner>,
    threads: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for Db {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Db").field("dir", &self.inner.dir).finish()
    }
}

impl Db {
    /// Opens (or creates) the store in `dir`: opens and verifies its blocks (setting corrupt
    /// ones aside in `dir/quarantine/`), replays its write-ahead log, and starts the background
    /// thread that cuts, compacts and deletes blocks.
    pub fn open(dir: &Path, options: Options) -> Result<Db, Error> {
        std::fs::create_dir_all(dir).map_err(Error::io("cannot create data directory", dir))?;
        let (blocks, quarantined) = crate::compact::open_blocks(dir)?;
        // Profiles of the log older than the last cut are in blocks already. Blocks of
        // imported profiles say nothing of the head: their times may lie anywhere.
        let min_valid_ms = blocks
            .iter()
            .filter_map(|b| b.meta.head_cut_ms())
            .max()
            .unwrap_or(i64::MIN);
        let wal_dir = dir.join("wal");
        std::fs::create_dir_all(&wal_dir)
            .map_err(Error::io("cannot create WAL directory", &wal_dir))?;
        let (head, wal_damage) = replay(&wal_dir, min_valid_ms, options.wal_repair)?;
        tracing::info!(
            dir = %dir.display(),
            series = head.series.len(),
            blocks = blocks.len(),
            quarantined = quarantined.len(),
            wal_damage = wal_damage.len(),
            "opened store"
        );
        let wal = Wal::open(&wal_dir)?;
        if !wal_damage.is_empty() {
            set_aside_damaged_wal(dir, &wal, &head, &wal_damage)?;
        }
        let inner = Arc::new(Inner {
            dir: dir.to_owned(),
            options,
            head: RwLock::new(head),
            wal,
            blocks: RwLock::new(Arc::new(blocks)),
            remote: RwLock::new(Arc::new(Vec::new())),
            maintenance: Mutex::new(()),
            publish: Mutex::new(()),
            quarantined: Mutex::new(quarantined),
            shipped: Mutex::new(Default::default()),
            wal_damage,
            peers: RwLock::new(None),
            worker: Mutex::new(Worker {
                stop: false,
                wake: true, // look for work once at start
                commit: false,
            }),
            worker_cv: Condvar::new(),
            sync_cv: Condvar::new(),
            commits: Waiting::default(),
        });
        let mut db = Db {
            inner,
            threads: Vec::new(),
        };
        let loops: [(&str, BackgroundLoop); 2] = [
            ("tsdb-maintenance", maintenance_loop),
            ("tsdb-wal-sync", wal_sync_loop),
        ];
        for (name, body) in loops {
            let inner = Arc::clone(&db.inner);
            let thread = std::thread::Builder::new()
                .name(name.into())
                .spawn(move || body(&inner))
                .map_err(Error::io(
                    "cannot start a background thread of the store",
                    dir,
                ))?;
            db.threads.push(thread);
        }
        Ok(db)
    }

    #[cfg(test)]
    pub(crate) fn inner(&self) -> &Inner {
        &self.inner
    }

    /// The directory the store lives in.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// A batch of appends; nothing is durable before [`Appender::commit`] returns.
    pub fn appender(&self) -> Appender<'_> {
        Appender {
            db: self,
            held: None,
            last_seq: 0,
            wake: false,
        }
    }

    /// The blocks served now, oldest first.
    pub fn blocks(&self) -> Vec<BlockInfo> {
        self.inner
            .block_set()
            .iter()
            .map(|b| BlockInfo {
                name: b.name().to_owned(),
                dir: b.dir.clone(),
                min_time_ms: b.meta.min_time_ms,
                max_time_ms: b.meta.max_time_ms,
                size_bytes: b.size_bytes,
                summary_bytes: b.meta.stats.summary_bytes,
            })
            .collect()
    }

    /// Serves `blocks` of an object store beside the local ones, in place of those given
    /// before: every read sees them, except a block also on disk (read from disk) and a block
    /// another one (local or given) lists among its sources (a compacted block replaced it).
    /// Each is opened when a read of its time range needs it. Returns how many are served now.
    pub fn set_remote_blocks(&self, blocks: Vec<crate::LazyBlock>) -> usize {
        let mut replaced = std::collections::HashSet::new();
        for b in &blocks {
            replaced.extend(b.sources().iter().filter(|s| *s != b.name()).cloned());
        }
        let mut kept: Vec<crate::LazyBlock> = blocks
            .into_iter()
            .filter(|b| !replaced.contains(b.name()))
            .collect();
        kept.sort_by(|a, b| (a.meta.min_time_ms, a.name()).cmp(&(b.meta.min_time_ms, b.name())));
        let n = kept.len();
        *self
            .inner
            .remote
            .write()
            .expect("remote blocks lock poisoned") = Arc::new(kept);
        n
    }

    /// Records that blocks `names` are safe in an object store ([`Options::ship_blocks`]), so
    /// retention may delete their local copies.
    pub fn mark_shipped(&self, names: impl IntoIterator<Item = String>) {
        self.inner
            .shipped
            .lock()
            .expect("shipped lock poisoned")
            .extend(names);
    }

    /// Reads profiles whose timestamp lies in `[min_ms, max_ms]`, from blocks and head.
    ///
    /// The querier holds no lock: appends go on while it reads (see [`Querier`]). Blocks it
    /// reads stay readable even if compaction replaces them meanwhile.
    pub fn querier(&self, min_ms: i64, max_ms: i64) -> Querier<'_> {
        Querier::new(&self.inner, min_ms, max_ms, crate::query::Reach::Everything)
    }

    /// A querier over this store and the object store's blocks it serves, without asking its
    /// shards ([`Db::set_peers`]): for a cheap check (does the selector match anything here?)
    /// before a read that asks them. It misses what only the shards hold: use it where a
    /// non-empty answer suffices, not for numbers.
    pub fn querier_without_shards(&self, min_ms: i64, max_ms: i64) -> Querier<'_> {
        Querier::new(
            &self.inner,
            min_ms,
            max_ms,
            crate::query::Reach::OwnStoreAndBucket,
        )
    }

    /// A querier over this store's own profiles only (head and blocks on disk): no blocks of
    /// the object store, no shards. What a shard reads for a querier
    /// ([`Querier::peer_answer`]).
    pub fn local_querier(&self, min_ms: i64, max_ms: i64) -> Querier<'_> {
        Querier::new(&self.inner, min_ms, max_ms, crate::query::Reach::OwnStore)
    }

    /// The shards read beside this store, if any ([`Db::set_peers`]).
    pub fn peers(&self) -> Option<Arc<dyn crate::Peers>> {
        self.inner.peers()
    }

    /// Reads `peers` (a querier's shards) beside this store: every [`Querier`] then splits its
    /// window between the bucket's blocks and the shards (each shard from the time before which
    /// the bucket holds all its profiles, as far as this store sees the bucket), and says
    /// in [`Querier::warnings`] what a shard that did not answer left out.
    pub fn set_peers(&self, peers: Arc<dyn crate::Peers>) {
        *self.inner.peers.write().expect("peers lock poisoned") = Some(peers);
    }

    /// With [`Options::ship_blocks`]: the time before which every profile of this store is in
    /// the object store — the start of the oldest block on disk not shipped yet, or, if all
    /// are shipped, the start of the head. `None` when nothing was cut yet, or not shipping.
    pub fn shipped_until(&self) -> Option<i64> {
        if !self.inner.options.ship_blocks {
            return None;
        }
        let blocks = self.inner.block_set();
        let shipped = self.inner.shipped.lock().expect("shipped lock poisoned");
        if let Some(t) = blocks
            .iter()
            .filter(|b| !shipped.contains(b.name()))
            .map(|b| b.meta.min_time_ms)
            .min()
        {
            return Some(t);
        }
        drop(shipped);
        let head_start = self
            .inner
            .head
            .read()
            .expect("head lock poisoned")
            .min_valid_ms;
        (head_start != i64::MIN).then_some(head_start)
    }

    /// How many blocks shipped to the object store are no longer on disk (retention deleted
    /// their local copies): only the bucket holds their profiles.
    pub fn shipped_only_in_bucket(&self) -> usize {
        let local: std::collections::HashSet<String> = self
            .inner
            .block_set()
            .iter()
            .map(|b| b.name().to_owned())
            .collect();
        let shipped = self.inner.shipped.lock().expect("shipped lock poisoned");
        shipped.iter().filter(|n| !local.contains(*n)).count()
    }

    /// Whether blocks leave for an object store ([`Options::ship_blocks`]).
    pub fn ships_blocks(&self) -> bool {
        self.inner.options.ship_blocks
    }

    /// Blocks on disk that are in the object store too, with their start time.
    pub fn shipped_blocks(&self) -> Vec<(String, i64)> {
        let shipped = self.inner.shipped.lock().expect("shipped lock poisoned");
        self.inner
            .block_set()
            .iter()
            .filter(|b| shipped.contains(b.name()))
            .map(|b| (b.name().to_owned(), b.meta.min_time_ms))
            .collect()
    }

    /// Does now what the background thread does from time to time: cuts the head's oldest
    /// part into blocks when it spans more than 1.5 block durations, compacts adjacent blocks,
    /// and deletes blocks past retention. Returns once nothing more is due.
    pub fn compact(&self) -> Result<(), Error> {
        crate::compact::maintain(&self.inner)
    }

    /// Whether the head takes a profile of series `labels` at `timestamp_ms` now: `false` when
    /// the profile is older than its series' newest by more than the out-of-order window, or
    /// older than the time already cut into blocks ([`Error::is_too_old`]). Such a profile
    /// can be stored as a block of its own ([`Db::stage_backfill`]).
    pub fn head_takes(&self, labels: &Labels, timestamp_ms: i64) -> bool {
        let head = self.inner.head.read().expect("head lock poisoned");
        head.takes(
            labels,
            timestamp_ms,
            self.inner.options.out_of_order_window_ms,
        )
    }

    /// The oldest profile time the store keeps: its retention time counted back from now, or
    /// from the newest profile stored if that is later (retention counts from the newest
    /// profile). `None` when retention by time is off. A profile older than this would be
    /// deleted by the next pass of retention, so writers refuse it
    /// ([`RetentionHorizon::check`]) rather than acknowledge it and lose it.
    pub fn retention_horizon(&self) -> Option<RetentionHorizon> {
        let head_newest = self
            .inner
            .head
            .read()
            .expect("head lock poisoned")
            .newest_ms;
        self.retention_horizon_after(head_newest)
    }

    /// [`Db::retention_horizon`] given the newest time in the head.
    fn retention_horizon_after(&self, head_newest: i64) -> Option<RetentionHorizon> {
        let blocks_newest = self
            .inner
            .block_set()
            .iter()
            .map(|b| b.meta.max_time_ms - 1)
            .max()
            .unwrap_or(i64::MIN);
        RetentionHorizon::new(
            self.inner.options.retention_ms,
            head_newest.max(blocks_newest),
        )
    }

    /// Whether the store holds a profile of series `labels` at `timestamp_ms`, in a block or in
    /// the head: the same profile, as queries count profiles.
    pub fn holds(&self, labels: &Labels, timestamp_ms: i64) -> Result<bool, Error> {
        let matchers = labels
            .iter()
            .map(|l| Matcher::new(MatchOp::Equal, &l.name, &l.value))
            .collect::<Result<Vec<_>, _>>()?;
        let found = self.querier(timestamp_ms, timestamp_ms).totals(&matchers)?;
        Ok(found
            .iter()
            .any(|s| s.labels == *labels && !s.points.is_empty()))
    }

    /// Writes `profiles` as complete blocks, one per block-duration window, synced under
    /// temporary names and not yet served: [`StagedBlocks::publish`] renames them into place
    /// and serves them, and dropping the staged blocks removes them. For profiles the head does
    /// not take (pushes older than the out-of-order window); they may overlap blocks and the
    /// head, where queries count each profile (series and time) once.
    ///
    /// Refusals (a series without `__name__`, too many stacks, the same series and time twice
    /// in `profiles`) come back beside the staged blocks; an error writing the blocks is
    /// [`Error::BackfillFailed`], and then nothing is left on disk.
    pub fn stage_backfill<'p>(
        &self,
        profiles: impl IntoIterator<Item = (&'p Labels, i64, &'p Profile)>,
    ) -> Result<(StagedBlocks<'_>, Vec<Error>), Error> {
        let mut backfill = Backfill::new(&self.inner.dir, &self.inner.options);
        let mut refused = Vec::new();
        let mut n_profiles = 0;
        let failed = |e: Error| Error::BackfillFailed {
            source: Box::new(e),
        };
        for (labels, timestamp_ms, profile) in profiles {
            match backfill.add(labels, timestamp_ms, profile) {
                Ok(true) => n_profiles += 1,
                Ok(false) => refused.push(Error::Duplicate {
                    labels: labels.to_string(),
                    timestamp_ms,
                }),
                Err(e) if e.is_refusal() => refused.push(e),
                Err(e) => return Err(failed(e)),
            }
        }
        let blocks = backfill.seal().map_err(failed)?;
        Ok((
            StagedBlocks {
                db: self,
                blocks,
                n_profiles,
            },
            refused,
        ))
    }

    /// Blocks set aside as corrupt since the store was opened.
    pub fn quarantined(&self) -> Vec<Quarantined> {
        self.inner
            .quarantined
            .lock()
            .expect("quarantine lock poisoned")
            .clone()
    }

    /// Why the store refuses writes now, if it does: the failed operation, its file and the
    /// operating system's reason. It retries in the background and takes writes again by itself.
    pub fn write_failure(&self) -> Option<String> {
        self.inner.wal.failure()
    }

    /// Damage in the write-ahead log that opening the store stepped over (the damaged segments
    /// are in `quarantine/wal-<time>/`).
    pub fn wal_damage(&self) -> &[wal::Damage] {
        &self.inner.wal_damage
    }

    /// What the store holds now.
    pub fn stats(&self) -> Stats {
        let blocks = self.inner.block_set();
        let head = self.inner.head.read().expect("head lock poisoned");
        let n_head_profiles = head.totals.n_profiles;
        let n_head_samples = head.totals.n_samples;
        let stats = Stats {
            n_series: head.series.len(),
            n_profiles: n_head_profiles
                + blocks
                    .iter()
                    .map(|b| b.meta.stats.n_profiles as usize)
                    .sum::<usize>(),
            n_samples: n_head_samples
                + blocks
                    .iter()
                    .map(|b| b.meta.stats.n_samples as usize)
                    .sum::<usize>(),
            n_head_stacks: head.tables.n_stacks(),
            n_head_profiles,
            n_head_samples,
            head_sample_bytes: head.totals.sample_bytes as u64,
            n_blocks: blocks.len(),
            n_remote_blocks: self
                .inner
                .remote
                .read()
                .expect("remote blocks lock poisoned")
                .len(),
            block_bytes: blocks.iter().map(|b| b.size_bytes).sum(),
            wal_bytes: 0,
            n_quarantined: self
                .inner
                .quarantined
                .lock()
                .expect("quarantine lock poisoned")
                .len(),
            n_wal_write_errors: self.inner.wal.n_write_errors(),
            read_only: false,
        };
        drop(head);
        Stats {
            wal_bytes: self.inner.wal.size_bytes(),
            read_only: self.inner.wal.failure().is_some(),
            ..stats
        }
    }

    /// Stops the background threads (waiting for work in progress to finish) and makes every
    /// appended profile durable. Dropping a `Db` does the same but cannot report a failed sync.
    pub fn close(mut self) -> Result<(), Error> {
        self.stop_threads();
        self.inner.wal.sync_all()
    }

    fn stop_threads(&mut self) {
        if self.threads.is_empty() {
            return;
        }
        self.inner.worker.lock().expect("worker lock poisoned").stop = true;
        self.inner.worker_cv.notify_all();
        self.inner.sync_cv.notify_all();
        for thread in self.threads.drain(..) {
            let name = thread.thread().name().unwrap_or("tsdb").to_owned();
            if thread.join().is_err() {
                tracing::error!(thread = name, "a background thread of the store panicked");
            }
        }
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        self.stop_threads();
        if let Err(e) = self.inner.wal.sync_all() {
            tracing::error!(error = %e, "cannot sync the WAL as the store closes");
        }
    }
}

fn maintenance_loop(inner: &Inner) {
    let mut last_run: Option<Instant> = None;
    loop {
        let woken = {
            let mut w = inner.worker.lock().expect("worker lock poisoned");
            while !w.stop && !w.wake {
                let (guard, timeout) = inner
                    .worker_cv
                    .wait_timeout(w, BLOCK_SCAN_INTERVAL)
                    .expect("worker lock poisoned");
                w = guard;
                if timeout.timed_out() {
                    break;
                }
            }
            if w.stop {
                return;
            }
            std::mem::take(&mut w.wake)
        };
        let due = woken || last_run.is_none_or(|t| t.elapsed() >= MAINTENANCE_INTERVAL);
        if !due {
            // Between runs only a look for blocks other processes wrote (a listing of the
            // directory); what it finds may be due for compaction at once.
            let found = {
                let _one_at_a_time = inner.maintenance.lock().expect("maintenance lock poisoned");
                crate::compact::scan_new_blocks(inner)
            };
            match found {
                Ok(0) => continue,
                Ok(_) => {}
                Err(e) => {
                    tracing::error!(error = %e, "cannot scan the data directory for new blocks; will retry");
                    continue;
                }
            }
        }
        last_run = Some(Instant::now());
        if let Err(e) = crate::compact::maintain(inner) {
            tracing::error!(error = %e, "tsdb maintenance failed; will retry");
        }
    }
}

/// The body of one of the store's background threads.
type BackgroundLoop = fn(&Inner);

/// Makes records of buffered commits durable every [`Options::wal_sync_interval`], and those
/// of async commits as soon as they wait ([`settle_commits`]). Async commits still waiting
/// when the store stops are settled on the way out.
fn wal_sync_loop(inner: &Inner) {
    let mut w = inner.worker.lock().expect("worker lock poisoned");
    loop {
        if !w.commit && !w.stop {
            w = inner
                .sync_cv
                .wait_timeout(w, inner.options.wal_sync_interval)
                .expect("worker lock poisoned")
                .0;
        }
        let (stop, commit) = (w.stop, std::mem::take(&mut w.commit));
        drop(w);
        if stop {
            settle_commits(inner);
            return;
        }
        if commit {
            settle_commits(inner);
        } else if inner.wal.failure().is_some() {
            // A failed log is healed here, promptly, unless maintenance (which heals too) runs.
            if let Ok(_one_at_a_time) = inner.maintenance.try_lock() {
                // The log said when it failed; a heal that fails again only updates the cause.
                let _ = heal_wal(inner);
            }
        } else {
            // A failed sync stops the log, which logs it once; nothing more to say here.
            let _ = inner.wal.sync_all();
        }
        w = inner.worker.lock().expect("worker lock poisoned");
    }
}

/// Makes the records of every waiting async commit durable with one fsync (group commit) and
/// resolves each with what [`Appender::commit`] would have returned it: when the sync for the
/// newest fails, each is synced on its own, as blocking commits would be, so those before the
/// failure still succeed; then the log is healed (taking the failed profiles out of the head)
/// before anyone hears of the failure.
fn settle_commits(inner: &Inner) {
    let waiting = inner.commits.take();
    let Some(newest) = waiting.iter().map(|&(seq, _)| seq).max() else {
        return;
    };
    let outcomes: Vec<Result<(), Error>> = match inner.wal.sync_through(newest) {
        Ok(()) => waiting.iter().map(|_| Ok(())).collect(),
        Err(_) => waiting
            .iter()
            .map(|&(seq, _)| inner.wal.sync_through(seq))
            .collect(),
    };
    if outcomes.iter().any(Result::is_err)
        && let Ok(_one_at_a_time) = inner.maintenance.try_lock()
    {
        let _ = heal_wal(inner);
    }
    for ((_, waiter), outcome) in waiting.iter().zip(outcomes) {
        waiter.resolve(outcome);
    }
}

/// Rebuilds the head from the WAL in `wal_dir`. Profiles older than `min_valid_ms` are already
/// in blocks (a cut that crashed before its checkpoint) and are skipped. With `repair`, damaged
/// records are stepped over and returned instead of failing (see [`wal::replay`]).
fn replay(
    wal_dir: &Path,
    min_valid_ms: i64,
    repair: bool,
) -> Result<(Head, Vec<wal::Damage>), Error> {
    let mut head = Head::new(min_valid_ms);
    // A checkpoint being read: adopted at its end record, dropped if its segment ends first.
    let mut pending: Option<Head> = None;
    let mut segment_of_pending = PathBuf::new();
    let (mut n_records, mut n_skipped) = (0u64, 0u64);
    let damage = wal::replay(wal_dir, repair, |bytes, segment, offset| {
        n_records += 1;
        let corrupt = |what: String| Error::WalCorrupt {
            segment: segment.to_owned(),
            offset,
            what,
        };
        if pending.is_some() && segment != segment_of_pending {
            tracing::warn!(segment = %segment_of_pending.display(), "WAL checkpoint without its end (torn); ignoring it");
            pending = None;
        }
        let record = record::decode(bytes).map_err(corrupt)?;
        if let record::Record::CheckpointBegin { min_valid_ms: at } = record {
            pending = Some(Head::new(at.max(min_valid_ms)));
            segment_of_pending = segment.to_owned();
            return Ok(());
        }
        if let record::Record::CheckpointEnd = record {
            head = pending
                .take()
                .ok_or_else(|| corrupt("checkpoint end without a beginning".into()))?;
            return Ok(());
        }
        let h = pending.as_mut().unwrap_or(&mut head);
        if !apply_record(h, record, corrupt)? {
            n_skipped += 1;
        }
        Ok(())
    })?;
    if pending.is_some() {
        tracing::warn!(segment = %segment_of_pending.display(), "WAL ends inside a checkpoint (torn); ignoring it");
    }
    tracing::info!(
        dir = %wal_dir.display(),
        records = n_records,
        skipped_profiles = n_skipped,
        series = head.series.len(),
        "replayed WAL"
    );
    Ok((head, damage))
}

/// Applies one replayed series, symbols or profile record to `h`; `Ok(false)` for a profile
/// `h` already holds (a checkpoint repeats the head) or that is older than its blocks' end.
/// `corrupt` makes the error naming where the record is.
fn apply_record(
    h: &mut Head,
    record: record::Record<'_>,
    corrupt: impl Fn(String) -> Error,
) -> Result<bool, Error> {
    match record {
        record::Record::CheckpointBegin { .. } | record::Record::CheckpointEnd => {
            unreachable!("checkpoint markers are handled by the replay")
        }
        record::Record::Series {
            series,
            labels,
            meta,
        } => {
            if series as usize != h.series.len() {
                return Err(corrupt(format!(
                    "series {series} out of sequence (expected {})",
                    h.series.len()
                )));
            }
            h.add_series(labels, meta);
        }
        record::Record::Symbols(bytes) => {
            let mut r = Reader::new(bytes);
            encoding::decode_tables(&mut r, &mut h.tables)
                .map_err(|e| corrupt(format!("symbols {e}")))?;
        }
        record::Record::Profile {
            series,
            timestamp_ms,
            duration_nanos,
            period,
            capture_id,
            samples,
        } => {
            if series as usize >= h.series.len() {
                return Err(corrupt(format!("profile of unknown series {series}")));
            }
            let (mut n, mut total) = (0u32, 0i64);
            let mut r = Reader::new(samples);
            encoding::for_each_sample(&mut r, h.limits(), |_, _, v| {
                n += 1;
                total = total.wrapping_add(v);
            })
            .map_err(|e| corrupt(format!("profile samples {e}")))?;
            let s = &mut h.series[series as usize];
            // A profile already replayed is skipped; one appended out of order is put in its
            // place.
            if timestamp_ms < h.min_valid_ms
                || s.profiles
                    .binary_search_by_key(&timestamp_ms, |p| p.timestamp_ms)
                    .is_ok()
            {
                return Ok(false);
            }
            h.push(
                series,
                StoredProfile {
                    timestamp_ms,
                    duration_nanos,
                    period,
                    capture_id,
                    total,
                    n_samples: n,
                    data: samples.into(),
                },
            );
        }
    }
    Ok(true)
}

/// After a replay that stepped over damage: writes what was recovered as a checkpoint in a new
/// segment and moves the old segments into `quarantine/wal-<time>/`, so the damage is kept for
/// inspection and never read again.
fn set_aside_damaged_wal(
    dir: &Path,
    wal: &Wal,
    head: &Head,
    damage: &[wal::Damage],
) -> Result<(), Error> {
    let (segment, end_seq) = wal.checkpoint(|sink| write_checkpoint(head, sink))?;
    wal.sync_through(end_seq)?;
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let to = dir.join("quarantine").join(format!("wal-{stamp}"));
    wal.set_aside_segments_before(segment, &to)?;
    for d in damage {
        tracing::warn!(
            segment = %d.segment.display(),
            offset = d.offset,
            skipped_bytes = d.skipped_bytes,
            what = d.what,
            set_aside_in = %to.display(),
            "WAL damage stepped over; the intact records before and after it are kept"
        );
    }
    Ok(())
}

/// Blocks of profiles written and synced under temporary names by [`Db::stage_backfill`], not
/// yet served. Dropped unpublished, they are removed.
#[derive(Debug)]
pub struct StagedBlocks<'a> {
    db: &'a Db,
    blocks: Vec<SealedBlock>,
    n_profiles: usize,
}

impl StagedBlocks<'_> {
    /// Profiles the blocks hold.
    pub fn n_profiles(&self) -> usize {
        self.n_profiles
    }

    /// Renames the blocks into place (each one atomic step, the data directory synced after
    /// it) and serves them; queries see them when this returns. Compaction merges them with
    /// the blocks they overlap.
    pub fn publish(self) -> Result<Vec<WrittenBlock>, Error> {
        let inner = &self.db.inner;
        let mut written = Vec::with_capacity(self.blocks.len());
        let mut opened = Vec::with_capacity(self.blocks.len());
        let result = {
            let _publishing = inner.publish.lock().expect("publish lock poisoned");
            let mut result = Ok(());
            for block in self.blocks {
                let meta = WrittenBlock::of(&block.meta);
                match block.publish().and_then(|dir| Block::open(&dir)) {
                    Ok(b) => {
                        opened.push(Arc::new(b));
                        written.push(meta);
                    }
                    Err(e) => {
                        result = Err(e);
                        break;
                    }
                }
            }
            // What is in place is served, even when a later block failed.
            crate::compact::serve_blocks(inner, opened);
            result
        };
        result.map_err(|e| Error::BackfillFailed {
            source: Box::new(e),
        })?;
        for b in &written {
            tracing::info!(
                block = b.name,
                min_time_ms = b.min_time_ms,
                max_time_ms = b.max_time_ms,
                profiles = b.n_profiles,
                "stored profiles older than the head takes as a block"
            );
        }
        inner.wake_worker();
        Ok(written)
    }
}

/// Appends profiles; [`Appender::commit`] makes them durable.
///
/// An appended profile is visible to queries at once and durable once `commit` returns; a crash in
/// between may lose it, and its writer was never told it was stored.
pub struct Appender<'a> {
    db: &'a Db,
    /// The head's write lock, when [`Appender::try_hold`] took it for all appends to come.
    held: Option<RwLockWriteGuard<'a, Head>>,
    last_seq: u64,
    /// Whether the head has grown enough that the background thread should look at it.
    wake: bool,
}

impl Appender<'_> {
    /// Takes the head's write lock for every append until the commit, if nobody holds it now,
    /// and says whether it did. A caller that must not wait (an async task on a runtime's
    /// worker) appends only when this is true: a query or a cut into blocks can hold the head
    /// for seconds. Appends to a held head also skip taking the lock once per profile.
    pub fn try_hold(&mut self) -> bool {
        if self.held.is_none() {
            self.held = match self.db.inner.head.try_write() {
                Ok(head) => Some(head),
                Err(TryLockError::WouldBlock) => return false,
                Err(TryLockError::Poisoned(_)) => panic!("head lock poisoned"),
            };
        }
        true
    }

    /// Appends `profile` to the series `labels` at `timestamp_ms`. Refuses, and stores nothing
    /// of, a profile without a `__name__` label, one not newer than the series' last, one older
    /// than the time already cut into blocks, or one with more stacks than
    /// [`Options::max_stacks_per_profile`].
    pub fn append(
        &mut self,
        labels: &Labels,
        timestamp_ms: i64,
        profile: &Profile,
    ) -> Result<(), Error> {
        if labels.get(NAME_LABEL).is_none() {
            return Err(Error::MissingName {
                labels: labels.to_string(),
            });
        }
        let inner = &self.db.inner;
        let limit = inner.options.max_stacks_per_profile;
        if profile.samples.len() > limit {
            return Err(Error::TooManyStacks {
                labels: labels.to_string(),
                n_stacks: profile.samples.len(),
                limit,
            });
        }
        let mut taken;
        let head: &mut Head = match &mut self.held {
            Some(held) => held,
            None => {
                taken = inner.head.write().expect("head lock poisoned");
                &mut taken
            }
        };
        let existing =
            head.check_time(labels, timestamp_ms, inner.options.out_of_order_window_ms)?;
        let series = match existing {
            Some(series) => series,
            None => {
                let meta = series_meta(&profile.meta);
                inner.wal.write(&record::encode_series(
                    head.series.len() as u32,
                    labels,
                    &meta,
                ))?;
                head.add_series(labels.clone(), meta)
            }
        };
        let before = TableCounts::of(&head.tables);
        let samples = head.import(profile);
        if TableCounts::of(&head.tables) != before {
            inner
                .wal
                .write(&record::encode_symbols(&head.tables, before))?;
        }
        let stored = StoredProfile::encode(
            timestamp_ms,
            profile.meta.duration_nanos,
            profile.meta.period,
            profile.meta.capture_id,
            &samples,
        );
        self.last_seq = inner.wal.write_profile(
            &record::encode_profile(
                series,
                timestamp_ms,
                stored.duration_nanos,
                stored.period,
                stored.capture_id,
                &stored.data,
            ),
            wal::ProfileRef {
                series,
                timestamp_ms,
            },
        )?;
        head.push(series, stored);
        let block = inner.options.block_duration_ms.max(1);
        if timestamp_ms.saturating_sub(head.oldest_ms) >= block.saturating_add(block / 2) {
            self.wake = true;
        }
        Ok(())
    }

    /// Returns once every profile appended so far is on disk. Concurrent commits share fsyncs.
    /// On error none of them is stored: they are taken out of the head before this returns.
    pub fn commit(mut self) -> Result<(), Error> {
        // Queries need not wait for the disk.
        self.held = None;
        if self.last_seq > 0 {
            let synced = self.db.inner.wal.sync_through(self.last_seq);
            self.settle(synced)?;
        }
        self.finish();
        Ok(())
    }

    /// [`Appender::commit`] that waits in a future rather than on this thread: the appends are
    /// handed to the store's WAL sync thread, which syncs them together with every other
    /// commit waiting (one fsync for all) and resolves the future with the same outcome
    /// [`Appender::commit`] would have had. For async callers, which would otherwise park a
    /// thread of a blocking pool per commit. (The appends themselves may wait for the WAL's
    /// lock, held while records are written out: an async caller appends on a blocking thread
    /// and awaits only the commit.)
    pub fn commit_async(mut self) -> Commit {
        // Queries need not wait for the disk.
        self.held = None;
        let commit = if self.last_seq > 0 {
            let waiter = self.db.inner.commits.add(self.last_seq);
            self.db.inner.want_commit();
            Commit::waiting(waiter)
        } else {
            Commit::done()
        };
        self.finish();
        commit
    }

    /// Whether a synced write of a profile of series `labels` at `timestamp_ms` is an append to
    /// the head and nothing more: the head takes it ([`Db::head_takes`]) and retention keeps it
    /// ([`Db::retention_horizon`]). Asked of the head this appender holds
    /// ([`Appender::try_hold`]) without taking a lock, so a caller that must not block can ask;
    /// the answer holds until the commit, as no cut can come between. `None` when the appender
    /// holds no lock.
    pub fn held_head_takes(&self, labels: &Labels, timestamp_ms: i64) -> Option<bool> {
        let head = self.held.as_deref()?;
        let window_ms = self.db.inner.options.out_of_order_window_ms;
        let kept = self
            .db
            .retention_horizon_after(head.newest_ms)
            .is_none_or(|horizon| horizon.check(labels, timestamp_ms).is_ok());
        Some(kept && head.takes(labels, timestamp_ms, window_ms))
    }

    /// After a failed commit, tries to heal the log at once, which takes the failed profiles
    /// out of the head, so no query sees what the writer is told was not stored. (If
    /// maintenance runs now, it heals.)
    fn settle(&self, result: Result<(), Error>) -> Result<(), Error> {
        if result.is_err()
            && let Ok(_one_at_a_time) = self.db.inner.maintenance.try_lock()
        {
            let _ = heal_wal(&self.db.inner);
        }
        result
    }

    /// Hands every profile appended so far to the operating system and returns without waiting
    /// for the disk: the profiles survive the server being killed, and the background sync makes
    /// them durable within [`Options::wal_sync_interval`], so a crash of the machine loses at
    /// most that much. For data that would be fetched again anyway, such as scrapes, as
    /// Prometheus does; whoever was promised durability (a push) needs [`Appender::commit`].
    pub fn commit_buffered(mut self) -> Result<(), Error> {
        self.held = None;
        if self.last_seq > 0 {
            let flushed = self.db.inner.wal.flush();
            self.settle(flushed)?;
        }
        self.finish();
        Ok(())
    }

    fn finish(self) {
        if self.wake {
            self.db.inner.wake_worker();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Backfill;
    use crate::state::HOUR_MS;

    fn corpus_cpu(rel: &str) -> Profile {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/testdata/pprof")
            .join(rel);
        let bytes = std::fs::read(&path).expect("corpus file");
        let profiles = parca_profile::decode(&bytes, &Default::default()).expect("decodes");
        parca_profile::select_sample_type(profiles, Some("cpu"), None).expect("cpu")
    }

    fn labels(job: &str, instance: &str) -> Labels {
        Labels::new([
            (
                NAME_LABEL,
                "process_cpu:cpu:nanoseconds:cpu:nanoseconds:delta",
            ),
            ("job", job),
            ("instance", instance),
        ])
        .expect("valid")
    }

    fn fill(db: &Db) -> Profile {
        let cpu = corpus_cpu("go/go-cpu.pb.gz");
        let mut app = db.appender();
        for (i, instance) in ["a", "b"].iter().enumerate() {
            for t in 0..3 {
                app.append(&labels("api", instance), 1_000 * t + i as i64, &cpu)
                    .expect("append");
            }
        }
        app.append(&labels("db", "a"), 5, &cpu).expect("append");
        app.commit().expect("commit");
        cpu
    }

    fn totals(db: &Db, matchers: &[Matcher]) -> Vec<(String, Vec<(i64, i64)>)> {
        db.querier(i64::MIN, i64::MAX)
            .select(matchers)
            .expect("query")
            .into_iter()
            .map(|s| {
                (
                    s.labels.to_string(),
                    s.profiles.iter().map(|(t, p)| (*t, p.total())).collect(),
                )
            })
            .collect()
    }

    /// Copies a directory tree (a committed store) into `to`.
    fn copy_tree(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).expect("mkdir");
        for entry in std::fs::read_dir(from).expect("read dir") {
            let entry = entry.expect("entry");
            let target = to.join(entry.file_name());
            if entry.path().is_dir() {
                copy_tree(&entry.path(), &target);
            } else {
                std::fs::copy(entry.path(), &target).expect("copy");
            }
        }
    }

    /// A copy of the committed store `tests/testdata/tsdb/<name>` (written with a block
    /// duration of one minute), and the options it was written with.
    fn committed_store(name: &str) -> (tempfile::TempDir, Options) {
        let dir = tempfile::tempdir().expect("tempdir");
        let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/testdata/tsdb")
            .join(name);
        copy_tree(&fixture, dir.path());
        let options = Options {
            block_duration_ms: 60_000,
            retention_ms: i64::MAX / 2,
            ..Options::default()
        };
        (dir, options)
    }

    #[test]
    fn a_store_written_in_format_1_opens_and_reads_whole() {
        // Written by the build before format 2 (`tests/testdata/tsdb/README.md`): a block of
        // the first profiles and a WAL holding the rest, four profiles of one series.
        let (dir, options) = committed_store("store-v1");
        let db = Db::open(dir.path(), options).expect("a format 1 store opens");
        assert!(db.stats().n_blocks >= 1, "{:?}", db.stats());
        let cpu = corpus_cpu("go/go-cpu.pb.gz");
        let api = [Matcher::new(MatchOp::Equal, "job", "api").expect("valid")];
        let got = totals(&db, &api);
        assert_eq!(got.len(), 1);
        assert_eq!(
            got[0].1,
            (0..4)
                .map(|t| (1_700_000_000_000 + 60_000 * t, cpu.total()))
                .collect::<Vec<_>>()
        );
        let back = db.querier(i64::MIN, i64::MAX).select(&api).expect("query");
        assert_eq!(back[0].profiles[0].1.meta.drop_frames, "");
    }

    #[test]
    fn a_store_written_in_format_2_opens_reads_whole_and_compacts_into_the_new_format() {
        // Written by the build before format 3 (`tests/testdata/tsdb/README.md`).
        opens_reads_whole_and_compacts_into_the_new_format("store-v2");
    }

    #[test]
    fn a_store_written_in_format_3_opens_reads_whole_and_compacts_into_the_new_format() {
        // Written by the build before format 4 (`tests/testdata/tsdb/README.md`).
        opens_reads_whole_and_compacts_into_the_new_format("store-v3");
    }

    #[test]
    fn a_store_written_in_format_4_opens_reads_whole_and_compacts_into_the_new_format() {
        // Written by the build before format 5 (`tests/testdata/tsdb/README.md`).
        opens_reads_whole_and_compacts_into_the_new_format("store-v4");
    }

    #[test]
    fn a_store_written_in_format_5_opens_reads_whole_and_compacts_into_the_new_format() {
        // Written by the build before format 6 (`tests/testdata/tsdb/README.md`).
        opens_reads_whole_and_compacts_into_the_new_format("store-v5");
    }

    /// Opens the committed store `name` (blocks and a WAL, five profiles each of a CPU series
    /// and the four series of a heap profile), reads it whole, compacts it into today's format
    /// and reads it again, then once more after a reopen.
    fn opens_reads_whole_and_compacts_into_the_new_format(name: &str) {
        let (dir, options) = committed_store(name);
        let cpu = corpus_cpu("go/go-cpu.pb.gz");
        let heap = parca_profile::decode(
            &std::fs::read(
                Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("../tests/testdata/pprof/go/go-heap.pb.gz"),
            )
            .expect("corpus file"),
            &Default::default(),
        )
        .expect("decodes");
        let times = |total: i64| {
            (0..5)
                .map(|t| (1_700_000_000_000 + 60_000 * t, total))
                .collect::<Vec<_>>()
        };
        let mut want = vec![(
            "process_cpu:cpu:nanoseconds:cpu:nanoseconds:delta".to_owned(),
            times(cpu.total()),
        )];
        for p in &heap {
            want.push((
                format!(
                    "memory:{}:{}:space:bytes",
                    p.meta.sample_type.kind, p.meta.sample_type.unit
                ),
                times(p.total()),
            ));
        }
        want.sort();
        let read = |db: &Db| {
            let mut got: Vec<(String, Vec<(i64, i64)>)> = db
                .querier(i64::MIN, i64::MAX)
                .select(&[])
                .expect("query")
                .into_iter()
                .map(|s| {
                    (
                        s.labels.get(NAME_LABEL).unwrap_or_default().to_owned(),
                        s.profiles.iter().map(|(t, p)| (*t, p.total())).collect(),
                    )
                })
                .collect();
            got.sort();
            got
        };
        let db = Db::open(dir.path(), options.clone()).expect("an old store opens");
        assert!(db.stats().n_blocks >= 1, "{:?}", db.stats());
        assert_eq!(read(&db), want);
        // Compaction rewrites the old blocks in today's format and loses nothing.
        let mut app = db.appender();
        app.append(&labels("api", "a"), 1_700_000_000_000 + 60_000 * 20, &cpu)
            .expect("append");
        app.commit().expect("commit");
        db.compact().expect("compact");
        let versions: Vec<u32> = db
            .inner
            .block_set()
            .iter()
            .map(|b| b.meta.version)
            .collect();
        assert!(
            versions.iter().all(|v| *v == encoding::FORMAT_VERSION),
            "{versions:?}"
        );
        let mut after = read(&db);
        after.retain(|(name, _)| name.starts_with("memory"));
        want.retain(|(name, _)| name.starts_with("memory"));
        assert_eq!(after, want);
        drop(db);
        let db = Db::open(dir.path(), options).expect("reopens");
        let mut again = read(&db);
        again.retain(|(name, _)| name.starts_with("memory"));
        assert_eq!(again, want);
    }

    #[test]
    fn drop_and_keep_frames_survive_the_wal_and_blocks() {
        let dir = tempfile::tempdir().expect("tempdir");
        let options = Options {
            block_duration_ms: 60_000,
            retention_ms: i64::MAX / 2,
            ..Options::default()
        };
        let mut cpu = corpus_cpu("go/go-cpu.pb.gz");
        cpu.meta.drop_frames = "malloc|free".into();
        cpu.meta.keep_frames = "free_list".into();
        {
            let db = Db::open(dir.path(), options.clone()).expect("open");
            let mut app = db.appender();
            for t in 0..4 {
                app.append(&labels("api", "a"), 1_700_000_000_000 + 60_000 * t, &cpu)
                    .expect("append");
            }
            app.commit().expect("commit");
            db.compact().expect("compact");
            assert!(db.stats().n_blocks >= 1);
        }
        // Reopened: the oldest profiles from a block, the newest replayed from the WAL.
        let db = Db::open(dir.path(), options).expect("reopen");
        let api = [Matcher::new(MatchOp::Equal, "job", "api").expect("valid")];
        let back = db.querier(i64::MIN, i64::MAX).select(&api).expect("query");
        for (t, p) in &back[0].profiles {
            assert_eq!(
                (p.meta.drop_frames.as_str(), p.meta.keep_frames.as_str()),
                ("malloc|free", "free_list"),
                "profile at {t}"
            );
        }
        assert_eq!(back[0].profiles.len(), 4);
    }

    #[test]
    fn profiles_within_the_out_of_order_window_arrive_in_any_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cpu = corpus_cpu("go/go-cpu.pb.gz");
        let order = [5_000, 1_000, 3_000, 2_000, 4_000];
        {
            let db = Db::open(dir.path(), Options::default()).expect("open");
            for t in order {
                let mut app = db.appender();
                app.append(&labels("api", "a"), t, &cpu)
                    .expect("in the window");
                app.commit().expect("commit");
            }
            let times: Vec<i64> = totals(&db, &[])[0].1.iter().map(|(t, _)| *t).collect();
            assert_eq!(times, [1_000, 2_000, 3_000, 4_000, 5_000]);
        }
        // The WAL replays them in their places.
        let db = Db::open(dir.path(), Options::default()).expect("reopen");
        let times: Vec<i64> = totals(&db, &[])[0].1.iter().map(|(t, _)| *t).collect();
        assert_eq!(times, [1_000, 2_000, 3_000, 4_000, 5_000]);
        // And a block cut from them holds them in order.
        drop(db);
        let options = Options {
            block_duration_ms: 60_000,
            ..Options::default()
        };
        let db = Db::open(dir.path(), options.clone()).expect("reopen");
        let mut app = db.appender();
        app.append(&labels("api", "a"), 200_000, &cpu)
            .expect("newer");
        app.commit().expect("commit");
        db.compact().expect("cut");
        assert!(db.stats().n_blocks >= 1);
        let times: Vec<i64> = totals(&db, &[])[0].1.iter().map(|(t, _)| *t).collect();
        assert_eq!(times, [1_000, 2_000, 3_000, 4_000, 5_000, 200_000]);
        // Without a window, each profile must be newer than its series' last.
        let strict = Options {
            out_of_order_window_ms: 0,
            ..Options::default()
        };
        let dir = tempfile::tempdir().expect("tempdir");
        let db = Db::open(dir.path(), strict).expect("open");
        let mut app = db.appender();
        app.append(&labels("api", "a"), 2_000, &cpu).expect("first");
        assert!(app.append(&labels("api", "a"), 1_000, &cpu).is_err());
    }

    #[test]
    fn appended_profiles_come_back_by_matchers_and_after_reopen() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = Db::open(dir.path(), Options::default()).expect("open");
        let cpu = fill(&db);
        let api = [Matcher::new(MatchOp::Equal, "job", "api").expect("valid")];
        let before = totals(&db, &api);
        assert_eq!(before.len(), 2);
        assert_eq!(
            before[0].1,
            vec![(0, cpu.total()), (1000, cpu.total()), (2000, cpu.total())]
        );
        let stats = db.stats();
        assert_eq!((stats.n_series, stats.n_profiles), (3, 7));
        drop(db);
        let db = Db::open(dir.path(), Options::default()).expect("reopen");
        assert_eq!(totals(&db, &api), before);
        assert_eq!(db.stats().n_samples, stats.n_samples);
        // The profiles read back are the ones written, stack for stack.
        let back = db.querier(0, 0).select(&api).expect("query");
        let original = parca_profile::TopTable::build(&cpu);
        assert_eq!(
            parca_profile::TopTable::build(&back[0].profiles[0].1).rows,
            original.rows
        );
    }

    #[test]
    fn a_held_head_takes_appends_without_waiting_and_one_being_read_refuses_to_hold() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = Db::open(dir.path(), Options::default()).expect("open");
        let cpu = corpus_cpu("go/go-cpu.pb.gz");
        // A querier holds nothing between reads; a read in progress holds the head.
        let querier = db.querier(0, 0);
        let reading = db.inner().head.read().expect("lock");
        let mut appender = db.appender();
        assert!(!appender.try_hold(), "a read holds the head");
        drop(reading);
        assert!(appender.try_hold(), "a live querier does not");
        drop(querier);
        assert!(appender.try_hold(), "holding twice is holding");
        for t in 0..2 {
            appender
                .append(&labels("api", "a"), t, &cpu)
                .expect("append");
        }
        appender.commit_buffered().expect("commit");
        // The commit let the head go.
        assert_eq!(
            totals(&db, &[])[0].1,
            vec![(0, cpu.total()), (1, cpu.total())]
        );
        drop(db);
        let db = Db::open(dir.path(), Options::default()).expect("reopen");
        assert_eq!(db.stats().n_profiles, 2);
    }

    #[test]
    fn buffered_commits_are_synced_in_the_background() {
        let dir = tempfile::tempdir().expect("tempdir");
        let options = Options {
            wal_sync_interval: Duration::from_millis(10),
            ..Options::default()
        };
        let db = Db::open(dir.path(), options).expect("open");
        let cpu = corpus_cpu("go/go-cpu.pb.gz");
        let mut app = db.appender();
        app.append(&labels("api", "a"), 1, &cpu).expect("append");
        app.commit_buffered().expect("commit");
        let wal = &db.inner().wal;
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while wal.has_unsynced() {
            assert!(
                std::time::Instant::now() < deadline,
                "the sync thread never synced"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        drop(db);
        let db = Db::open(dir.path(), Options::default()).expect("reopen");
        assert_eq!(db.stats().n_profiles, 1);
    }

    /// A commit (by `commit`) of a profile whose WAL write meets `fault` fails, stores nothing,
    /// and leaves the store healed and taking writes; those acknowledged before and after
    /// survive a reopen, and nothing else.
    fn a_failed_commit_stores_nothing_and_heals(
        fault: crate::wal::Fault,
        commit: impl Fn(&Db, &Labels, i64, &Profile) -> Result<(), Error>,
    ) {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = Db::open(dir.path(), Options::default()).expect("open");
        let cpu = corpus_cpu("go/go-cpu.pb.gz");
        let series = labels("api", "a");
        commit(&db, &series, 1, &cpu).expect("stored");
        db.inner()
            .wal
            .inject_fault(fault, std::io::ErrorKind::StorageFull);
        let err = commit(&db, &series, 2, &cpu).expect_err("the disk fails");
        assert_eq!(err.class(), crate::ErrorClass::Unavailable);
        // The failed profile is not served, and the store healed at once (one fault only).
        assert_eq!(totals(&db, &[])[0].1, vec![(1, cpu.total())]);
        assert!(db.write_failure().is_none());
        let stats = db.stats();
        assert_eq!((stats.n_wal_write_errors, stats.n_head_profiles), (1, 1));
        assert_eq!(stats.n_head_samples, cpu.samples.len());
        commit(&db, &series, 3, &cpu).expect("takes writes again");
        drop(db);
        let db = Db::open(dir.path(), Options::default()).expect("reopen");
        assert_eq!(
            totals(&db, &[])[0].1,
            vec![(1, cpu.total()), (3, cpu.total())],
            "every acknowledged profile and nothing else"
        );
    }

    #[test]
    fn a_commit_that_fails_stores_nothing_and_the_store_heals() {
        a_failed_commit_stores_nothing_and_heals(crate::wal::Fault::Write, |db, series, t, p| {
            let mut app = db.appender();
            app.append(series, t, p)?;
            app.commit()
        });
    }

    /// Runs a future to its end on this thread (the store's futures need no runtime).
    fn block_on<F: std::future::Future>(future: F) -> F::Output {
        struct Unpark(std::thread::Thread);
        impl std::task::Wake for Unpark {
            fn wake(self: Arc<Self>) {
                self.0.unpark();
            }
        }
        let waker = Arc::new(Unpark(std::thread::current())).into();
        let mut cx = std::task::Context::from_waker(&waker);
        let mut future = std::pin::pin!(future);
        loop {
            if let std::task::Poll::Ready(v) = future.as_mut().poll(&mut cx) {
                return v;
            }
            std::thread::park();
        }
    }

    #[test]
    fn async_commits_from_many_threads_are_all_durable_when_they_resolve() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = Db::open(dir.path(), Options::default()).expect("open");
        let cpu = corpus_cpu("go/go-cpu.pb.gz");
        std::thread::scope(|s| {
            for thread in 0..8 {
                let (db, cpu) = (&db, &cpu);
                s.spawn(move || {
                    for t in 1..=20 {
                        let mut app = db.appender();
                        app.append(&labels("api", &format!("t{thread}")), t, cpu)
                            .expect("append");
                        block_on(app.commit_async()).expect("durable");
                    }
                });
            }
        });
        // Nothing appended: nothing to wait for.
        block_on(db.appender().commit_async()).expect("an empty commit");
        drop(db);
        let db = Db::open(dir.path(), Options::default()).expect("reopen");
        assert_eq!(db.stats().n_profiles, 160);
    }

    #[test]
    fn an_async_commit_whose_sync_fails_stores_nothing_and_the_store_heals() {
        // Healed before the future resolves.
        a_failed_commit_stores_nothing_and_heals(crate::wal::Fault::Sync, |db, series, t, p| {
            let mut app = db.appender();
            assert!(app.try_hold(), "nobody else holds the head");
            app.append(series, t, p)?;
            block_on(app.commit_async())
        });
    }

    #[test]
    fn a_held_head_says_whether_a_synced_write_is_an_append_and_nothing_more() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = Db::open(dir.path(), Options::default()).expect("open");
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_millis() as i64;
        let series = labels("api", "a");
        let mut app = db.appender();
        assert_eq!(app.held_head_takes(&series, now_ms), None, "no lock held");
        assert!(app.try_hold());
        assert_eq!(app.held_head_takes(&series, now_ms), Some(true));
        // Past the 15 days retention keeps: refused by a synced write, not appended.
        assert_eq!(app.held_head_takes(&series, 1), Some(false));
        app.append(&series, now_ms, &corpus_cpu("go/go-cpu.pb.gz"))
            .expect("append");
        // Older than the series' newest by more than the out-of-order window: a block's.
        let window_ms = Options::default().out_of_order_window_ms;
        assert_eq!(
            app.held_head_takes(&series, now_ms - window_ms - 1),
            Some(false)
        );
        block_on(app.commit_async()).expect("durable");
    }

    #[test]
    fn a_store_whose_wal_is_damaged_in_the_middle_opens_with_the_rest() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cpu = corpus_cpu("go/go-cpu.pb.gz");
        {
            let db = Db::open(dir.path(), Options::default()).expect("open");
            for t in 1..=3 {
                let mut app = db.appender();
                app.append(&labels("api", "a"), t, &cpu).expect("append");
                app.commit().expect("commit");
            }
        }
        // Tear the second profile record as a full disk did before the store failed closed.
        let segment = dir.path().join("wal/00000000");
        let mut bytes = std::fs::read(&segment).expect("read");
        let mut offsets = Vec::new();
        let mut pos = 0;
        while pos + 8 <= bytes.len() {
            offsets.push(pos);
            pos += 8 + u32::from_le_bytes(bytes[pos..pos + 4].try_into().expect("4")) as usize;
        }
        let profiles: Vec<usize> = offsets.into_iter().filter(|&o| bytes[o + 8] == 7).collect();
        let torn = profiles[1];
        bytes.drain(torn + 20..torn + 40);
        std::fs::write(&segment, &bytes).expect("write");
        let err = Db::open(dir.path(), strict_options()).expect_err("strict refuses");
        assert!(err.to_string().contains("is corrupt at byte"), "{err}");
        let db = Db::open(dir.path(), Options::default()).expect("repairs");
        assert_eq!(
            totals(&db, &[])[0].1,
            vec![(1, cpu.total()), (3, cpu.total())]
        );
        assert_eq!(db.wal_damage().len(), 1);
        assert_eq!(db.wal_damage()[0].offset, torn as u64);
        let quarantine = std::fs::read_dir(dir.path().join("quarantine"))
            .expect("quarantine")
            .count();
        assert_eq!(quarantine, 1, "the damaged segments are set aside");
        drop(db);
        let db = Db::open(dir.path(), strict_options()).expect("clean after repair");
        assert_eq!(db.stats().n_profiles, 2);
    }

    fn strict_options() -> Options {
        Options {
            wal_repair: false,
            ..Options::default()
        }
    }

    #[test]
    fn the_store_is_shared_between_threads() {
        fn shared<T: Send + Sync>() {}
        shared::<Db>();
        shared::<std::sync::Arc<Db>>();
    }

    #[test]
    fn selected_profiles_share_tables_and_merge() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = Db::open(dir.path(), Options::default()).expect("open");
        let cpu = fill(&db);
        let all = db.querier(0, 10_000).select(&[]).expect("query");
        let profiles: Vec<&Profile> = all
            .iter()
            .flat_map(|s| s.profiles.iter().map(|(_, p)| p))
            .collect();
        assert!(
            profiles
                .windows(2)
                .all(|w| Arc::ptr_eq(&w[0].tables, &w[1].tables))
        );
        let merged = parca_profile::merge(profiles.iter().copied()).expect("merge");
        assert_eq!(merged.total(), 7 * cpu.total());
    }

    #[test]
    fn grouped_merge_equals_merging_the_selected_profiles() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = Db::open(dir.path(), Options::default()).expect("open");
        let cpu = fill(&db);
        let q = db.querier(0, 10_000);
        let by_job = |l: &Labels| l.get("job").unwrap_or("").to_owned();
        let groups = q.merge_grouped(&[], by_job).expect("merge");
        assert_eq!(
            groups
                .iter()
                .map(|g| (g.key.as_str(), g.n_profiles, g.profile.total()))
                .collect::<Vec<_>>(),
            [("api", 6, 6 * cpu.total()), ("db", 1, cpu.total())]
        );
        // Per stack, the same values as merging the materialized profiles of the group.
        for g in &groups {
            let selected = q
                .select(&[Matcher::new(MatchOp::Equal, "job", &g.key).expect("valid")])
                .expect("query");
            let want = parca_profile::merge(
                selected
                    .iter()
                    .flat_map(|s| s.profiles.iter().map(|(_, p)| p)),
            )
            .expect("merge");
            let folded = |p: &Profile| {
                let mut out = Vec::new();
                parca_profile::FlameGraph::build(p)
                    .write_folded(&mut out)
                    .expect("in memory");
                let mut lines: Vec<String> = String::from_utf8(out)
                    .expect("utf-8")
                    .lines()
                    .map(String::from)
                    .collect();
                lines.sort();
                lines
            };
            assert_eq!(folded(&g.profile), folded(&want), "group {}", g.key);
        }
        assert!(Arc::ptr_eq(
            &groups[0].profile.tables,
            &groups[1].profile.tables
        ));
        assert!(q.merge_grouped(&[], |_| ()).expect("merge").len() == 1);
    }

    #[test]
    fn time_range_limits_profiles_and_labels() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = Db::open(dir.path(), Options::default()).expect("open");
        fill(&db);
        let q = db.querier(500, 1500);
        assert_eq!(q.label_values("job", &[]).expect("query"), vec!["api"]);
        assert_eq!(
            q.label_names(&[]).expect("query"),
            vec!["__name__", "instance", "job"]
        );
        let series = q.select(&[]).expect("query");
        assert_eq!(series.iter().map(|s| s.profiles.len()).sum::<usize>(), 2);
    }

    #[test]
    fn bad_appends_are_refused_and_store_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = Db::open(
            dir.path(),
            Options {
                max_stacks_per_profile: 10,
                ..Options::default()
            },
        )
        .expect("open");
        let cpu = corpus_cpu("go/go-cpu.pb.gz");
        let small = cpu.retain_samples(|i| i < 5);
        let mut app = db.appender();
        app.append(&labels("api", "a"), 100, &small).expect("first");
        let err = app
            .append(&labels("api", "a"), 100, &small)
            .expect_err("duplicate");
        assert_eq!(
            err.to_string(),
            r#"series {__name__="process_cpu:cpu:nanoseconds:cpu:nanoseconds:delta", instance="a", job="api"}: a profile at 100 ms is stored already (at the same time)"#
        );
        app.append(&labels("api", "a"), 10_000_000, &small)
            .expect("newer");
        let err = app
            .append(&labels("api", "a"), 50, &small)
            .expect_err("older than the window");
        assert!(
            err.to_string().contains(
                "profile at 50 ms is older than the last stored one at 10000000 ms by more than \
                 the out-of-order window of 7200000 ms (--storage-out-of-order-window)"
            ),
            "{err}"
        );
        let err = app
            .append(&labels("api", "b"), 200, &cpu)
            .expect_err("too many stacks");
        assert!(
            err.to_string().ends_with(&format!(
                "profile has {} stacks, more than the limit of 10",
                cpu.samples.len()
            )),
            "{err}"
        );
        let nameless = Labels::new([("job", "x")]).expect("valid");
        let err = app.append(&nameless, 1, &small).expect_err("no name");
        assert_eq!(
            err.to_string(),
            r#"series {job="x"} has no `__name__` label (the profile type)"#
        );
        app.commit().expect("commit");
        drop(db);
        let db = Db::open(dir.path(), Options::default()).expect("reopen");
        let stats = db.stats();
        assert_eq!(
            (stats.n_series, stats.n_profiles),
            (1, 2),
            "only the two good profiles were stored"
        );
    }

    /// Regression: opening a store took the end of its newest block as the end of the time cut
    /// from the head, and replay skipped the log's profiles before it. An imported block lying
    /// after the head's profiles made every one of them vanish on restart.
    #[test]
    fn an_imported_block_newer_than_the_head_hides_nothing_of_the_wal_on_reopen() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cpu = corpus_cpu("go/go-cpu.pb.gz");
        {
            let db = Db::open(dir.path(), Options::default()).expect("open");
            let mut app = db.appender();
            for t in [1_000, 2_000] {
                app.append(&labels("api", "a"), t, &cpu).expect("append");
            }
            app.commit().expect("commit");
        }
        let mut backfill = Backfill::new(dir.path(), &Options::default());
        backfill
            .add(&labels("api", "a"), 10 * HOUR_MS, &cpu)
            .expect("add");
        backfill.write().expect("write");
        let db = Db::open(dir.path(), Options::default()).expect("reopen");
        let times: Vec<i64> = totals(&db, &[])[0].1.iter().map(|(t, _)| *t).collect();
        assert_eq!(times, [1_000, 2_000, 10 * HOUR_MS]);
        // And the head still takes appends before the imported block.
        let mut app = db.appender();
        app.append(&labels("api", "a"), 3_000, &cpu)
            .expect("the head's time is open");
        app.commit().expect("commit");
    }

    #[test]
    fn a_running_store_serves_blocks_another_process_writes_within_seconds() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cpu = corpus_cpu("go/go-cpu.pb.gz");
        let db = Db::open(dir.path(), Options::default()).expect("open");
        let mut app = db.appender();
        app.append(&labels("api", "a"), 5 * HOUR_MS, &cpu)
            .expect("append");
        app.commit().expect("commit");
        // As `parca import` would, from another process: straight into the directory.
        let mut backfill = Backfill::new(dir.path(), &Options::default());
        for t in [1_000, 2_000] {
            backfill.add(&labels("api", "a"), t, &cpu).expect("add");
        }
        backfill.write().expect("write");
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while db.stats().n_blocks == 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "the background scan never picked the block up"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let times: Vec<i64> = totals(&db, &[])[0].1.iter().map(|(t, _)| *t).collect();
        assert_eq!(times, [1_000, 2_000, 5 * HOUR_MS]);
    }

    #[test]
    fn profiles_the_head_does_not_take_are_staged_as_blocks_and_served_once_published() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cpu = corpus_cpu("go/go-cpu.pb.gz");
        let db = Db::open(dir.path(), Options::default()).expect("open");
        let mut app = db.appender();
        app.append(&labels("api", "a"), 10 * HOUR_MS, &cpu)
            .expect("append");
        app.commit().expect("commit");
        let (old, recent) = (HOUR_MS, 9 * HOUR_MS);
        assert!(!db.head_takes(&labels("api", "a"), old), "past the window");
        assert!(db.head_takes(&labels("api", "a"), recent), "in the window");
        assert!(db.head_takes(&labels("api", "b"), old), "a new series");
        let stage = |times: &[i64]| {
            let l = labels("api", "a");
            let batch: Vec<(&Labels, i64, &Profile)> =
                times.iter().map(|&t| (&l, t, &cpu)).collect();
            let (staged, refused) = db.stage_backfill(batch).expect("staged");
            (staged.n_profiles(), staged.publish(), refused)
        };
        // Staged and dropped: nothing stays on disk, nothing is served.
        {
            let l = labels("api", "a");
            let (staged, _) = db.stage_backfill([(&l, old, &cpu)]).expect("staged");
            assert_eq!(staged.n_profiles(), 1);
            drop(staged);
        }
        let entries = std::fs::read_dir(dir.path()).expect("list").count();
        assert_eq!(entries, 1, "only the WAL directory");
        let (n, written, refused) = stage(&[old, old + 1, old]);
        assert_eq!(n, 2);
        assert_eq!(refused.len(), 1, "the same time twice");
        assert!(
            matches!(refused[0], Error::Duplicate { .. }),
            "{}",
            refused[0]
        );
        let written = written.expect("published");
        assert_eq!(written.len(), 1);
        assert_eq!(written[0].n_profiles, 2);
        let times: Vec<i64> = totals(&db, &[])[0].1.iter().map(|(t, _)| *t).collect();
        assert_eq!(times, [old, old + 1, 10 * HOUR_MS]);
        drop(db);
        let db = Db::open(dir.path(), Options::default()).expect("reopen");
        assert_eq!(totals(&db, &[])[0].1.len(), 3);
    }
}
