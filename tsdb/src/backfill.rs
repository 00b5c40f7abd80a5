//! Backfill: profiles written as complete blocks straight into a store's directory, for times
//! the head does not take (Prometheus' `tsdb.BlockWriter`, behind `promtool tsdb
//! create-blocks-from`). `parca import` writes folders of saved profiles this way, into the
//! store of a stopped or running server; pushes older than the out-of-order window take the
//! same path ([`crate::Db::stage_backfill`]).
//!
//! Profiles are grouped by the store's block duration, aligned as the head aligns its cuts, one
//! block per window. Each block is written under `<ulid>.tmp/`, every file and the directory
//! fsynced ("sealed"), and only then renamed into place in one atomic step ("published"): a
//! server scanning the directory sees a whole block or none. Blocks may overlap blocks already
//! there and the head; queries count each profile (series and time) once, and compaction
//! merges overlapping blocks into one.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parca_profile::{Importer, Meta, Profile, Tables};
use rustc_hash::{FxHashMap, FxHashSet};

use crate::block::{BlockMeta, BlockWriter, Compaction, SealedBlock};
use crate::head::{ExtractedSeries, StoredProfile};
use crate::labels::{Labels, NAME_LABEL};
use crate::state::series_meta;
use crate::{Error, Options};

/// Buffered bytes (encoded samples and an estimate of the symbols) past which the largest
/// window is sealed as a block early, so that a large import runs in bounded memory. A window
/// sealed early and met again later becomes a second block over the same time, which
/// compaction merges.
const DEFAULT_MAX_BUFFERED_BYTES: usize = 256 << 20;

/// Bytes an interned string, function, location or stack takes in memory, about: what the
/// buffer estimate charges per table entry.
const TABLE_ENTRY_BYTES: usize = 48;

/// A block written into a store's directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WrittenBlock {
    /// Its name (directory), a ULID.
    pub name: String,
    /// The start of its time range (inclusive): the block duration's window it lies in.
    pub min_time_ms: i64,
    /// The end of its time range (exclusive).
    pub max_time_ms: i64,
    /// Series it holds.
    pub n_series: u64,
    /// Profiles it holds.
    pub n_profiles: u64,
    /// (stack, value) pairs it holds.
    pub n_samples: u64,
}

impl WrittenBlock {
    pub(crate) fn of(meta: &BlockMeta) -> WrittenBlock {
        WrittenBlock {
            name: meta.ulid.clone(),
            min_time_ms: meta.min_time_ms,
            max_time_ms: meta.max_time_ms,
            n_series: meta.stats.n_series,
            n_profiles: meta.stats.n_profiles,
            n_samples: meta.stats.n_samples,
        }
    }
}

/// Profiles gathered into blocks, one per block-duration window, written into a store's
/// directory by [`Backfill::write`].
///
/// Nothing is visible in the directory before `write`, except blocks of windows sealed early
/// to bound memory, which stay under temporary names (`<ulid>.tmp`) until `write` publishes
/// everything; a `Backfill` dropped before that removes them.
pub struct Backfill {
    dir: PathBuf,
    block_duration_ms: i64,
    max_stacks_per_profile: usize,
    max_buffered_bytes: usize,
    windows: BTreeMap<i64, Window>,
    buffered_bytes: usize,
    sealed: Vec<SealedBlock>,
}

/// The profiles of one window, in tables of their own.
#[derive(Default)]
struct Window {
    tables: Tables,
    series: FxHashMap<Labels, WindowSeries>,
    /// The importer of the last added profile's tables (the profiles of one pprof share
    /// them), replaced when another pprof's come: holding every file's tables would hold
    /// every file.
    importer: Option<(Arc<Tables>, Importer)>,
    bytes: usize,
}

struct WindowSeries {
    meta: Meta,
    profiles: Vec<StoredProfile>,
    times: FxHashSet<i64>,
}

impl Window {
    fn table_entries(&self) -> usize {
        let t = &self.tables;
        t.n_strings() + t.n_functions() + t.n_locations() + t.n_stacks()
    }
}

impl std::fmt::Debug for Backfill {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backfill")
            .field("dir", &self.dir)
            .field("windows", &self.windows.len())
            .field("sealed", &self.sealed.len())
            .finish()
    }
}

impl Backfill {
    /// Starts gathering profiles for blocks in the store directory `dir`, grouped by
    /// `options.block_duration_ms` and refusing profiles with more stacks than
    /// `options.max_stacks_per_profile`, as the store itself does.
    pub fn new(dir: &Path, options: &Options) -> Backfill {
        Backfill {
            dir: dir.to_owned(),
            block_duration_ms: options.block_duration_ms.max(1),
            max_stacks_per_profile: options.max_stacks_per_profile,
            max_buffered_bytes: DEFAULT_MAX_BUFFERED_BYTES,
            windows: BTreeMap::new(),
            buffered_bytes: 0,
            sealed: Vec::new(),
        }
    }

    /// Seals the largest window as a block once this many bytes are buffered (default 256 MiB).
    pub fn with_max_buffered_bytes(mut self, bytes: usize) -> Backfill {
        self.max_buffered_bytes = bytes;
        self
    }

    /// Adds `profile` to series `labels` at `timestamp_ms`. Returns `false`, keeping nothing,
    /// when this backfill holds a profile of the series at that time already (the same
    /// profile, as the store counts profiles: a file listed twice). Refuses, as the store's
    /// appends do, a series without `__name__` and a profile with too many stacks.
    pub fn add(
        &mut self,
        labels: &Labels,
        timestamp_ms: i64,
        profile: &Profile,
    ) -> Result<bool, Error> {
        if labels.get(NAME_LABEL).is_none() {
            return Err(Error::MissingName {
                labels: labels.to_string(),
            });
        }
        if profile.samples.len() > self.max_stacks_per_profile {
            return Err(Error::TooManyStacks {
                labels: labels.to_string(),
                n_stacks: profile.samples.len(),
                limit: self.max_stacks_per_profile,
            });
        }
        let start = window_start(timestamp_ms, self.block_duration_ms);
        let window = self.windows.entry(start).or_default();
        if window
            .series
            .get(labels)
            .is_some_and(|s| s.times.contains(&timestamp_ms))
        {
            return Ok(false);
        }
        let entries_before = window.table_entries();
        if !window
            .importer
            .as_ref()
            .is_some_and(|(source, _)| Arc::ptr_eq(source, &profile.tables))
        {
            window.importer = Some((Arc::clone(&profile.tables), Importer::new()));
        }
        let (_, importer) = window.importer.as_mut().expect("set above");
        let samples = importer.import(&mut window.tables, profile);
        let stored = StoredProfile::encode(
            timestamp_ms,
            profile.meta.duration_nanos,
            profile.meta.period,
            profile.meta.capture_id,
            &samples,
        );
        let grown = stored.data.len()
            + (window.table_entries() - entries_before) * TABLE_ENTRY_BYTES
            + std::mem::size_of::<StoredProfile>();
        window.bytes += grown;
        self.buffered_bytes += grown;
        let series = window
            .series
            .entry(labels.clone())
            .or_insert_with(|| WindowSeries {
                meta: series_meta(&profile.meta),
                profiles: Vec::new(),
                times: FxHashSet::default(),
            });
        series.times.insert(timestamp_ms);
        series.profiles.push(stored);
        if self.buffered_bytes > self.max_buffered_bytes {
            self.seal_largest()?;
        }
        Ok(true)
    }

    /// Whether no profile was added (sealed early or not).
    pub fn is_empty(&self) -> bool {
        self.windows.is_empty() && self.sealed.is_empty()
    }

    fn seal_largest(&mut self) -> Result<(), Error> {
        let Some(start) = self
            .windows
            .iter()
            .max_by_key(|(_, w)| w.bytes)
            .map(|(start, _)| *start)
        else {
            return Ok(());
        };
        let window = self.windows.remove(&start).expect("found above");
        self.buffered_bytes -= window.bytes;
        tracing::debug!(
            window_start_ms = start,
            bytes = window.bytes,
            "backfill buffer full; sealing its largest window as a block"
        );
        let sealed = seal_window(&self.dir, start, self.block_duration_ms, window)?;
        self.sealed.push(sealed);
        Ok(())
    }

    /// Writes every window as a block under a temporary name, synced, oldest first; nothing is
    /// served until each is published.
    pub(crate) fn seal(mut self) -> Result<Vec<SealedBlock>, Error> {
        let windows = std::mem::take(&mut self.windows);
        for (start, window) in windows {
            let sealed = seal_window(&self.dir, start, self.block_duration_ms, window)?;
            self.sealed.push(sealed);
        }
        let mut sealed = std::mem::take(&mut self.sealed);
        sealed.sort_by_key(|b| b.meta.min_time_ms);
        Ok(sealed)
    }

    /// Writes the blocks: each is written and synced under a temporary name, and once all are,
    /// they are renamed into place, oldest first. A store open in another process picks them
    /// up at its next scan of the directory ([`crate::Db::compact`], and every few seconds in
    /// the background).
    pub fn write(self) -> Result<Vec<WrittenBlock>, Error> {
        let sealed = self.seal()?;
        let mut written = Vec::with_capacity(sealed.len());
        for block in sealed {
            written.push(WrittenBlock::of(&block.meta));
            block.publish()?;
        }
        Ok(written)
    }
}

/// The start of the block-duration window holding `timestamp_ms`, aligned as the head's cuts.
fn window_start(timestamp_ms: i64, block_duration_ms: i64) -> i64 {
    timestamp_ms
        .div_euclid(block_duration_ms)
        .saturating_mul(block_duration_ms)
}

/// Writes one window's profiles as a level-1 block over the window, under its temporary name.
fn seal_window(
    dir: &Path,
    start: i64,
    block_duration_ms: i64,
    window: Window,
) -> Result<SealedBlock, Error> {
    let mut series: Vec<(Labels, WindowSeries)> = window.series.into_iter().collect();
    series.sort_by(|a, b| a.0.cmp(&b.0));
    let range = (start, start.saturating_add(block_duration_ms));
    let summarize = crate::summary::summarizes(range);
    let mut writer = BlockWriter::new(dir, window.tables, summarize)?;
    for (labels, mut s) in series {
        s.profiles.sort_by_key(|p| p.timestamp_ms);
        writer.add_series(ExtractedSeries {
            labels,
            meta: s.meta,
            profiles: s.profiles,
        })?;
    }
    let compaction = Compaction {
        level: 1,
        sources: Vec::new(),
    };
    // None of it came from the head: replay must not skip the head's profiles for it.
    writer.seal(Some(range), compaction, None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{corpus, series_labels};
    use crate::{Db, MatchOp, Matcher};

    const HOUR_MS: i64 = 3_600_000;

    fn options() -> Options {
        Options {
            retention_ms: 0,
            ..Options::default()
        }
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut out: Vec<String> = std::fs::read_dir(dir)
            .expect("list")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        out.sort();
        out
    }

    #[test]
    fn profiles_are_grouped_into_one_block_per_aligned_window() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cpu = corpus("go/go-cpu.pb.gz", "cpu");
        let heap = corpus("go/go-heap.pb.gz", "alloc_space");
        let mut backfill = Backfill::new(dir.path(), &options());
        // Three windows of 2 h, in no order; one profile is added twice.
        let base = 1_644_500_000_000 - 1_644_500_000_000 % (2 * HOUR_MS);
        for t in [5 * HOUR_MS + 7, 10, 2 * HOUR_MS, HOUR_MS, 5 * HOUR_MS] {
            assert!(
                backfill
                    .add(&series_labels("cpu", "api", "a"), base + t, &cpu)
                    .expect("added")
            );
        }
        assert!(
            backfill
                .add(&series_labels("heap", "api", "a"), base + 10, &heap)
                .expect("added")
        );
        assert!(
            !backfill
                .add(&series_labels("cpu", "api", "a"), base + 10, &cpu)
                .expect("a duplicate is no error"),
            "the same series and time is kept once"
        );
        assert!(names(dir.path()).is_empty(), "nothing before write");
        let written = backfill.write().expect("written");
        let ranges: Vec<(i64, i64, u64, u64)> = written
            .iter()
            .map(|b| {
                (
                    b.min_time_ms - base,
                    b.max_time_ms - base,
                    b.n_series,
                    b.n_profiles,
                )
            })
            .collect();
        assert_eq!(
            ranges,
            [
                (0, 2 * HOUR_MS, 2, 3),
                (2 * HOUR_MS, 4 * HOUR_MS, 1, 1),
                (4 * HOUR_MS, 6 * HOUR_MS, 1, 2)
            ]
        );
        assert_eq!(
            names(dir.path()),
            written.iter().map(|b| b.name.clone()).collect::<Vec<_>>(),
            "only the blocks, no temporary directories left"
        );
        // A store opened on the directory serves them, in time order, with their numbers.
        let db = Db::open(dir.path(), options()).expect("open");
        let q = db.querier(i64::MIN, i64::MAX);
        let cpu_series = q
            .totals(&[Matcher::new(MatchOp::Equal, NAME_LABEL, "cpu").expect("valid")])
            .expect("query");
        let points: Vec<(i64, i64)> = cpu_series[0]
            .points
            .iter()
            .map(|p| (p.timestamp_ms - base, p.total))
            .collect();
        assert_eq!(
            points,
            [10, HOUR_MS, 2 * HOUR_MS, 5 * HOUR_MS, 5 * HOUR_MS + 7].map(|t| (t, cpu.total()))
        );
        let merged = q
            .merge(&[Matcher::new(MatchOp::Equal, NAME_LABEL, "heap").expect("valid")])
            .expect("merge")
            .expect("some");
        assert_eq!(merged.total(), heap.total());
        assert_eq!(
            parca_profile::TopTable::build(&merged).rows,
            parca_profile::TopTable::build(&heap).rows
        );
        // Imported blocks say none of their profiles came from the head.
        assert!(
            db.inner()
                .block_set()
                .iter()
                .all(|b| b.meta.head_cut_ms().is_none())
        );
    }

    #[test]
    fn a_full_buffer_seals_a_window_early_and_write_publishes_all() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cpu = corpus("go/go-cpu.pb.gz", "cpu");
        let mut backfill = Backfill::new(dir.path(), &options()).with_max_buffered_bytes(1);
        for t in 0..3 {
            backfill
                .add(&series_labels("cpu", "api", "a"), t * 1000, &cpu)
                .expect("added");
        }
        // Sealed, not published: a server scanning the directory sees nothing yet.
        let listed = names(dir.path());
        assert_eq!(listed.len(), 3, "{listed:?}");
        assert!(listed.iter().all(|n| n.ends_with(".tmp")), "{listed:?}");
        let written = backfill.write().expect("written");
        assert_eq!(
            written.len(),
            3,
            "one block per sealing, over the same window"
        );
        let db = Db::open(dir.path(), options()).expect("open");
        assert_eq!(db.stats().n_profiles, 3);
        db.compact().expect("compact");
        assert_eq!(db.stats().n_blocks, 1, "overlapping blocks are merged");
        let totals = db.querier(i64::MIN, i64::MAX).totals(&[]).expect("query");
        assert_eq!(totals[0].points.len(), 3);
    }

    #[test]
    fn a_backfill_dropped_before_write_leaves_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cpu = corpus("go/go-cpu.pb.gz", "cpu");
        let mut backfill = Backfill::new(dir.path(), &options()).with_max_buffered_bytes(1);
        backfill
            .add(&series_labels("cpu", "api", "a"), 0, &cpu)
            .expect("added");
        backfill
            .add(&series_labels("cpu", "api", "a"), 1, &cpu)
            .expect("added");
        assert_eq!(names(dir.path()).len(), 2);
        drop(backfill);
        assert!(names(dir.path()).is_empty());
    }

    #[test]
    fn backfill_refuses_what_appends_refuse() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cpu = corpus("go/go-cpu.pb.gz", "cpu");
        let mut backfill = Backfill::new(
            dir.path(),
            &Options {
                max_stacks_per_profile: 3,
                ..options()
            },
        );
        let err = backfill
            .add(&series_labels("cpu", "api", "a"), 0, &cpu)
            .expect_err("too many stacks");
        assert!(err.is_refusal(), "{err}");
        let nameless = Labels::new([("job", "x")]).expect("valid");
        let err = backfill
            .add(&nameless, 0, &cpu.retain_samples(|i| i < 2))
            .expect_err("no name");
        assert!(matches!(err, Error::MissingName { .. }), "{err}");
        assert!(backfill.is_empty());
        assert!(backfill.write().expect("nothing to write").is_empty());
    }
}
