//! Maintenance: opening the blocks of a data directory (quarantining corrupt ones), cutting
//! the head into blocks, compacting adjacent blocks, and deleting blocks past retention.
//!
//! All of it runs in the store's background thread (or [`crate::Db::compact`]), one task at a
//! time under `Inner::maintenance`. Appends and queries go on meanwhile: a cut holds the head's
//! read lock while it copies the data out, writes the block with no lock held, and takes the
//! write lock only to swap in the new head, block set and WAL checkpoint.

use std::fs;
use std::path::Path;
use std::sync::Arc;

use parca_profile::{Extractor, Tables};

use crate::block::{self, Block, BlockWriter};
use crate::db::{Inner, Quarantined};
use crate::encoding::{IdLimits, Reader};
use crate::head::{self, ExtractedSeries, Remainder, StoredProfile};
use crate::{Error, encoding};

/// Compacted blocks never span more than this (Prometheus' cap too).
const MAX_BLOCK_RANGE_MS: i64 = 31 * 24 * 3_600_000;

/// A block being deleted is first renamed to `<name>.deleting` (one atomic step), so a crash
/// in the middle of removing its files never leaves a half block under a block's name.
const DELETING_SUFFIX: &str = ".deleting";

/// Deletes a block directory: rename, sync, then remove the files.
pub(crate) fn delete_block_dir(dir: &Path) -> Result<(), Error> {
    let mut doomed = dir.as_os_str().to_owned();
    doomed.push(DELETING_SUFFIX);
    let doomed = std::path::PathBuf::from(doomed);
    fs::rename(dir, &doomed).map_err(Error::io("cannot delete block", dir))?;
    if let Some(parent) = dir.parent() {
        block::sync_dir(parent)?;
    }
    fs::remove_dir_all(&doomed).map_err(Error::io("cannot delete block", &doomed))
}

/// Name of the folder corrupt blocks are moved to.
pub(crate) const QUARANTINE_DIR: &str = "quarantine";

/// Opens every block in `dir`, oldest first. Corrupt blocks are moved to `dir/quarantine/` and
/// reported; leftovers of interrupted writes (`*.tmp`) and blocks whose data a compacted block
/// already holds (a compaction interrupted before it deleted its sources) are removed.
pub(crate) fn open_blocks(dir: &Path) -> Result<(Vec<Arc<Block>>, Vec<Quarantined>), Error> {
    let mut blocks = Vec::new();
    let mut quarantined = Vec::new();
    let mut names = Vec::new();
    for entry in fs::read_dir(dir).map_err(Error::io("cannot list data directory", dir))? {
        let entry = entry.map_err(Error::io("cannot list data directory", dir))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        if name.ends_with(".tmp") || name.ends_with(DELETING_SUFFIX) {
            tracing::info!(dir = %entry.path().display(), "removing an interrupted block write or deletion");
            fs::remove_dir_all(entry.path())
                .map_err(Error::io("cannot remove temporary block", entry.path()))?;
        } else if is_block_name(&name) {
            names.push(name);
        }
    }
    names.sort();
    for name in names {
        let path = dir.join(&name);
        match Block::open(&path) {
            Ok(b) => blocks.push(Arc::new(b)),
            Err(e @ Error::BlockCorrupt { .. }) => quarantined.push(quarantine(dir, &name, &e)?),
            Err(e) => return Err(e),
        }
    }
    // Sources of a compacted block that survived a crash: the compacted block holds their data.
    let redundant: Vec<usize> = (0..blocks.len())
        .filter(|&i| {
            let b = &blocks[i];
            blocks.iter().enumerate().any(|(j, c)| {
                j != i
                    && c.meta.compaction.level > b.meta.compaction.level
                    && b.meta
                        .compaction
                        .sources
                        .iter()
                        .all(|s| c.meta.compaction.sources.contains(s))
            })
        })
        .collect();
    for &i in redundant.iter().rev() {
        let b = blocks.remove(i);
        tracing::info!(
            block = b.name(),
            "removing a block a compacted block supersedes"
        );
        delete_block_dir(&b.dir)?;
    }
    blocks.sort_by_key(|b| (b.meta.min_time_ms, b.meta.max_time_ms));
    for w in blocks.windows(2) {
        if w[1].meta.min_time_ms < w[0].meta.max_time_ms {
            tracing::warn!(
                first = w[0].name(),
                second = w[1].name(),
                "blocks overlap in time; queries may count profiles twice"
            );
        }
    }
    Ok((blocks, quarantined))
}

/// A ULID: 26 characters of Crockford's base 32.
fn is_block_name(name: &str) -> bool {
    name.len() == 26
        && name
            .bytes()
            .all(|c| c.is_ascii_digit() || c.is_ascii_uppercase())
}

/// Moves block `name` into the quarantine folder and says so in the log.
fn quarantine(dir: &Path, name: &str, why: &Error) -> Result<Quarantined, Error> {
    let qdir = dir.join(QUARANTINE_DIR);
    fs::create_dir_all(&qdir).map_err(Error::io("cannot create quarantine directory", &qdir))?;
    let mut dst = qdir.join(name);
    let mut n = 1;
    while dst.exists() {
        dst = qdir.join(format!("{name}.{n}"));
        n += 1;
    }
    let src = dir.join(name);
    fs::rename(&src, &dst).map_err(Error::io("cannot move corrupt block to quarantine", &src))?;
    block::sync_dir(dir)?;
    let file = match why {
        Error::BlockCorrupt { file, .. } => *file,
        _ => "",
    };
    tracing::error!(
        block = name,
        file,
        error = %why,
        quarantined_to = %dst.display(),
        "corrupt block set aside; serving the rest"
    );
    Ok(Quarantined {
        block: name.to_owned(),
        path: dst,
        reason: why.to_string(),
    })
}

/// Cuts what is due, compacts what can be, applies retention; returns when nothing is left.
pub(crate) fn maintain(inner: &Inner) -> Result<(), Error> {
    let _one_at_a_time = inner.maintenance.lock().expect("maintenance lock poisoned");
    crate::db::heal_wal(inner)?;
    while cut_head(inner)? {}
    while let Some(plan) = plan_compaction(inner) {
        compact(inner, &plan)?;
    }
    apply_retention(inner)
}

/// Cuts the head's oldest block range into a block if the head spans half a block beyond it.
/// Returns whether it cut.
pub(crate) fn cut_head(inner: &Inner) -> Result<bool, Error> {
    let range_ms = inner.options.block_duration_ms.max(1);
    let (start, boundary) = {
        let head = inner.head.read().expect("head lock poisoned");
        let Some((min, max)) = head.time_range() else {
            return Ok(false);
        };
        let start = min.div_euclid(range_ms).saturating_mul(range_ms);
        let boundary = start.saturating_add(range_ms);
        if max < boundary.saturating_add(range_ms / 2) {
            return Ok(false);
        }
        (start, boundary)
    };
    // From here on appends below the boundary are refused: the block will hold that range.
    inner.head.write().expect("head lock poisoned").min_valid_ms = boundary;
    // What goes into the block must be durable in the log first: a profile whose write fails
    // is taken out of the head, and that cannot be done once it is in a block.
    inner.wal.sync_all()?;
    let (tables, series, remainder) = {
        let head = inner.head.read().expect("head lock poisoned");
        let (tables, series) = head::extract_before(&head, boundary);
        (tables, series, Remainder::build(&head, boundary))
    };
    let n_series = series.len();
    let block = block::write_block(&inner.dir, tables, series, (start, boundary))?;
    tracing::info!(
        block = block.name(),
        min_time_ms = start,
        max_time_ms = boundary,
        series = n_series,
        profiles = block.meta.stats.n_profiles,
        bytes = block.size_bytes,
        "cut head into a block"
    );
    let checkpoint = {
        let mut head = inner.head.write().expect("head lock poisoned");
        let (mut new, renumbered) = remainder.finish(&head, boundary);
        new.generation = head.generation + 1;
        *head = new;
        inner.wal.renumber_unsynced(&renumbered);
        let mut blocks = inner.blocks.write().expect("blocks lock poisoned");
        let mut set: Vec<Arc<Block>> = blocks.iter().cloned().collect();
        set.push(Arc::new(block));
        set.sort_by_key(|b| (b.meta.min_time_ms, b.meta.max_time_ms));
        *blocks = Arc::new(set);
        drop(blocks);
        // The block is on disk and served: a checkpoint that fails now leaves the log failed,
        // and healing it writes the checkpoint of this head. Until then a restart replays the
        // old segments and skips what the block holds.
        inner
            .wal
            .checkpoint(|sink| crate::db::write_checkpoint(&head, sink))
    };
    let (segment, end_seq) = checkpoint?;
    inner.wal.sync_through(end_seq)?;
    inner.wal.remove_segments_before(segment)?;
    Ok(true)
}

/// The blocks to merge next, if any: the ranges are 3, 9, 27… block durations (up to a tenth
/// of the retention time, at most 31 days), aligned; a window of one range that the head has
/// moved past and that holds two or more blocks becomes one block.
fn plan_compaction(inner: &Inner) -> Option<Vec<Arc<Block>>> {
    let blocks = inner.block_set();
    let min_valid_ms = inner.head.read().expect("head lock poisoned").min_valid_ms;
    let base = inner.options.block_duration_ms.max(1);
    let mut max_range = MAX_BLOCK_RANGE_MS;
    if inner.options.retention_ms > 0 {
        max_range = max_range.min(inner.options.retention_ms / 10);
    }
    let mut range = base.saturating_mul(3);
    while range <= max_range {
        let mut i = 0;
        while i < blocks.len() {
            let window = blocks[i]
                .meta
                .min_time_ms
                .div_euclid(range)
                .saturating_mul(range);
            let end = window.saturating_add(range);
            let group: Vec<Arc<Block>> = blocks[i..]
                .iter()
                .take_while(|b| b.meta.min_time_ms >= window && b.meta.max_time_ms <= end)
                .cloned()
                .collect();
            if group.len() >= 2 && end <= min_valid_ms {
                return Some(group);
            }
            i += group.len().max(1);
        }
        range = range.saturating_mul(3);
    }
    None
}

/// Merges `sources` (adjacent, oldest first) into one block: series joined by labels, symbols
/// and stacks deduplicated into one set of tables. The sources are deleted once the new block
/// is in place.
pub(crate) fn compact(inner: &Inner, sources: &[Arc<Block>]) -> Result<(), Error> {
    let tables: Vec<Arc<Tables>> = sources
        .iter()
        .map(|b| b.tables())
        .collect::<Result<_, _>>()?;
    let limits: Vec<IdLimits> = tables.iter().map(|t| IdLimits::of(t)).collect();
    let mut extractors: Vec<Extractor<'_>> = tables.iter().map(|t| Extractor::new(t)).collect();
    // Every (labels, source, series) sorted by labels, then by source (time).
    let mut entries = Vec::new();
    for (bi, b) in sources.iter().enumerate() {
        for i in 0..b.n_series() {
            let e = b.series_entry(i).map_err(|e| Error::BlockCorrupt {
                block: b.name().to_owned(),
                file: "index",
                what: e.to_string(),
            })?;
            entries.push((bi, e));
        }
    }
    entries.sort_by(|a, b| a.1.labels.cmp(&b.1.labels).then(a.0.cmp(&b.0)));
    let mut writer = BlockWriter::new(&inner.dir, Tables::new())?;
    let mut decompressor =
        zstd::bulk::Decompressor::new().map_err(Error::io("cannot start zstd", &inner.dir))?;
    let mut chunk = Vec::new();
    let mut i = 0;
    while i < entries.len() {
        let labels = entries[i].1.labels.clone();
        let mut out = ExtractedSeries {
            labels: labels.clone(),
            meta: entries[i].1.meta.clone(),
            profiles: Vec::new(),
        };
        while i < entries.len() && entries[i].1.labels == labels {
            let (bi, e) = &entries[i];
            let b = &sources[*bi];
            let mut first = 0usize;
            for c in &e.chunks {
                let profiles = &e.profiles[first..first + c.n_profiles as usize];
                first += c.n_profiles as usize;
                b.read_chunk(c, &mut decompressor, &mut chunk)?;
                let mut failed = None;
                block::split_chunk(&chunk, profiles, |p, bytes| {
                    if failed.is_some() {
                        return;
                    }
                    match encoding::decode_samples(&mut Reader::new(bytes), limits[*bi]) {
                        Ok(samples) => {
                            let samples = extractors[*bi].samples(writer.tables_mut(), &samples);
                            out.profiles.push(StoredProfile::encode(
                                p.timestamp_ms,
                                p.duration_nanos,
                                p.period,
                                p.capture_id,
                                &samples,
                            ));
                        }
                        Err(e) => failed = Some(e),
                    }
                });
                if let Some(e) = failed {
                    return Err(Error::BlockCorrupt {
                        block: b.name().to_owned(),
                        file: "profiles",
                        what: e.to_string(),
                    });
                }
            }
            i += 1;
        }
        writer.add_series(out)?;
    }
    let level = sources
        .iter()
        .map(|b| b.meta.compaction.level)
        .max()
        .unwrap_or(1)
        + 1;
    let mut source_names: Vec<String> = sources
        .iter()
        .flat_map(|b| b.meta.compaction.sources.iter().cloned())
        .collect();
    source_names.sort();
    source_names.dedup();
    let range = (
        sources
            .iter()
            .map(|b| b.meta.min_time_ms)
            .min()
            .unwrap_or(0),
        sources
            .iter()
            .map(|b| b.meta.max_time_ms)
            .max()
            .unwrap_or(0),
    );
    let dir = writer.finish(Some(range), level, source_names)?;
    let merged = Arc::new(Block::open(&dir)?);
    tracing::info!(
        block = merged.name(),
        level,
        sources = sources.len(),
        bytes = merged.size_bytes,
        bytes_before = sources.iter().map(|b| b.size_bytes).sum::<u64>(),
        "compacted blocks"
    );
    replace_blocks(inner, sources, Some(merged))
}

/// Swaps `old` out of the served set (adding `new`), then deletes their directories.
fn replace_blocks(inner: &Inner, old: &[Arc<Block>], new: Option<Arc<Block>>) -> Result<(), Error> {
    {
        let mut blocks = inner.blocks.write().expect("blocks lock poisoned");
        let mut set: Vec<Arc<Block>> = blocks
            .iter()
            .filter(|b| !old.iter().any(|o| Arc::ptr_eq(o, b)))
            .cloned()
            .collect();
        set.extend(new);
        set.sort_by_key(|b| (b.meta.min_time_ms, b.meta.max_time_ms));
        *blocks = Arc::new(set);
    }
    // Queries still holding the old set keep reading through their maps: unlinking a mapped
    // file leaves the mapping valid.
    for b in old {
        delete_block_dir(&b.dir)?;
    }
    Ok(())
}

/// Deletes blocks wholly older than the retention time (counted back from the newest profile
/// stored), then the oldest blocks while blocks and WAL exceed the retention size.
fn apply_retention(inner: &Inner) -> Result<(), Error> {
    let blocks = inner.block_set();
    if blocks.is_empty() {
        return Ok(());
    }
    let head_newest = inner
        .head
        .read()
        .expect("head lock poisoned")
        .time_range()
        .map(|(_, max)| max);
    let newest = blocks
        .iter()
        .map(|b| b.meta.max_time_ms - 1)
        .chain(head_newest)
        .max()
        .unwrap_or(i64::MIN);
    let mut doomed: Vec<Arc<Block>> = Vec::new();
    if inner.options.retention_ms > 0 {
        let horizon = newest.saturating_sub(inner.options.retention_ms);
        doomed.extend(
            blocks
                .iter()
                .filter(|b| b.meta.max_time_ms <= horizon)
                .cloned(),
        );
    }
    if inner.options.retention_bytes > 0 {
        let mut total: u64 =
            inner.wal.size_bytes() + blocks.iter().map(|b| b.size_bytes).sum::<u64>();
        for b in blocks.iter() {
            if total <= inner.options.retention_bytes {
                break;
            }
            total -= b.size_bytes;
            if !doomed.iter().any(|d| Arc::ptr_eq(d, b)) {
                doomed.push(Arc::clone(b));
            }
        }
    }
    if doomed.is_empty() {
        return Ok(());
    }
    for b in &doomed {
        tracing::info!(
            block = b.name(),
            max_time_ms = b.meta.max_time_ms,
            bytes = b.size_bytes,
            "deleting block past retention"
        );
    }
    replace_blocks(inner, &doomed, None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    use crate::test_support::{Lcg, answers, corpus, series_labels, vary};
    use crate::{Db, Options};

    /// Ranges the comparisons query: everything, one block's worth, ranges across block edges,
    /// one instant, and the head's part.
    const RANGES: [(i64, i64); 5] = [
        (i64::MIN, i64::MAX),
        (0, 999),
        (950, 3050),
        (2500, 2500),
        (11_000, i64::MAX),
    ];

    fn options(block_duration_ms: i64) -> Options {
        Options {
            block_duration_ms,
            retention_ms: 0,
            ..Options::default()
        }
    }

    /// Appends a profile every 100 ms in `[from_ms, to_ms)` to four series of two types.
    fn fill(db: &Db, seed: u64, from_ms: i64, to_ms: i64) {
        let cpu = corpus("go/go-cpu.pb.gz", "cpu");
        let cpu2 = corpus("prometheus/prometheus-cpu.pb.gz", "cpu");
        let heap = corpus("go/go-heap.pb.gz", "alloc_space");
        let mut rng = Lcg(seed);
        let mut t = from_ms;
        while t < to_ms {
            let mut app = db.appender();
            app.append(&series_labels("cpu", "api", "a"), t, &vary(&cpu, &mut rng))
                .expect("append");
            app.append(&series_labels("cpu", "api", "b"), t, &vary(&cpu2, &mut rng))
                .expect("append");
            app.append(
                &series_labels("cpu", "db", "c"),
                t + 7,
                &vary(&cpu, &mut rng),
            )
            .expect("append");
            app.append(
                &series_labels("heap", "api", "a"),
                t,
                &vary(&heap, &mut rng),
            )
            .expect("append");
            app.commit().expect("commit");
            t += 100;
        }
    }

    fn blocks_of(db: &Db) -> Vec<Arc<Block>> {
        db.inner().block_set().to_vec()
    }

    #[test]
    fn queries_agree_before_and_after_cut_compaction_and_reopen() {
        let dir = tempfile::tempdir().expect("tempdir");
        // A block duration nothing reaches: everything stays in the head for the baseline.
        let db = Db::open(dir.path(), options(i64::MAX / 4)).expect("open");
        fill(&db, 1, 0, 12_000);
        let baseline = answers(&db, &RANGES);
        assert!(baseline.len() > 100);
        drop(db);

        let db = Db::open(dir.path(), options(1000)).expect("reopen");
        db.compact().expect("compact");
        let blocks = blocks_of(&db);
        assert!(blocks.len() >= 2, "{} blocks", blocks.len());
        assert!(
            blocks.iter().any(|b| b.meta.compaction.level >= 2),
            "some blocks were compacted"
        );
        let stats = db.stats();
        assert!(stats.n_head_profiles > 0 && stats.n_head_profiles < stats.n_profiles);
        assert_eq!(stats.n_profiles, 4 * 120);
        let after = answers(&db, &RANGES);
        for (i, (a, b)) in baseline.iter().zip(&after).enumerate() {
            assert_eq!(a, b, "answer {i} differs after cut and compaction");
        }
        assert_eq!(baseline.len(), after.len());
        drop(db);

        let db = Db::open(dir.path(), options(1000)).expect("reopen");
        assert_eq!(answers(&db, &RANGES), baseline, "after reopen");

        // The cut time range is closed to appends; newer times are open.
        let cpu = corpus("go/go-cpu.pb.gz", "cpu");
        let mut app = db.appender();
        let err = app
            .append(&series_labels("cpu", "new", "x"), 50, &cpu)
            .expect_err("too old");
        assert!(err.is_refusal(), "{err}");
        assert!(err.to_string().contains("older than"), "{err}");
        app.append(&series_labels("cpu", "new", "x"), 20_000, &cpu)
            .expect("new time");
        app.commit().expect("commit");
    }

    #[test]
    fn a_cut_truncates_the_wal_and_keeps_head_memory_small() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = Db::open(dir.path(), options(i64::MAX / 4)).expect("open");
        fill(&db, 2, 0, 6_000);
        let before = db.stats();
        assert!(
            before.head_sample_bytes <= 10 * before.n_head_samples as u64,
            "head holds {} bytes for {} samples",
            before.head_sample_bytes,
            before.n_head_samples
        );
        drop(db);
        let db = Db::open(dir.path(), options(1000)).expect("reopen");
        db.compact().expect("compact");
        let after = db.stats();
        assert!(after.n_blocks > 0);
        assert!(
            after.wal_bytes < before.wal_bytes / 2,
            "WAL {} bytes before, {} after",
            before.wal_bytes,
            after.wal_bytes
        );
        assert!(after.block_bytes > 0);
    }

    #[test]
    fn a_cut_interrupted_before_its_checkpoint_loses_and_doubles_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = Db::open(dir.path(), options(i64::MAX / 4)).expect("open");
        fill(&db, 3, 0, 5_000);
        let baseline = answers(&db, &RANGES);
        drop(db);
        let wal = dir.path().join("wal");
        let saved: Vec<(PathBuf, Vec<u8>)> = fs::read_dir(&wal)
            .expect("wal")
            .map(|e| {
                let p = e.expect("entry").path();
                let bytes = fs::read(&p).expect("read");
                (p, bytes)
            })
            .collect();
        let db = Db::open(dir.path(), options(1000)).expect("reopen");
        db.compact().expect("compact");
        assert!(db.stats().n_blocks > 0);
        drop(db);
        // As if the process died after renaming the blocks, before any checkpoint.
        fs::remove_dir_all(&wal).expect("remove wal");
        fs::create_dir(&wal).expect("mkdir");
        for (p, bytes) in saved {
            fs::write(p, bytes).expect("restore");
        }
        let db = Db::open(dir.path(), options(1000)).expect("reopen after crash");
        db.compact().expect("compact");
        assert_eq!(answers(&db, &RANGES), baseline);
    }

    #[test]
    fn retention_deletes_old_blocks_by_time_and_by_size() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = Db::open(
            dir.path(),
            Options {
                retention_ms: 3_000,
                ..options(1000)
            },
        )
        .expect("open");
        fill(&db, 4, 0, 10_000);
        db.compact().expect("compact");
        let blocks = blocks_of(&db);
        assert!(!blocks.is_empty());
        let newest = 9_907;
        assert!(
            blocks.iter().all(|b| b.meta.max_time_ms > newest - 3_000),
            "{:?}",
            blocks.iter().map(|b| &b.meta).collect::<Vec<_>>()
        );
        // Recent data still answers.
        let q = db.querier(8_000, i64::MAX);
        assert_eq!(q.series(&[]).expect("query").len(), 4);
        drop(q);
        drop(db);

        let db = Db::open(
            dir.path(),
            Options {
                retention_bytes: 1,
                ..options(1000)
            },
        )
        .expect("reopen");
        db.compact().expect("compact");
        assert_eq!(db.stats().n_blocks, 0, "every block is beyond 1 byte");
        assert_eq!(
            db.querier(i64::MIN, i64::MAX)
                .series(&[])
                .expect("query")
                .len(),
            4
        );
    }

    #[test]
    fn appends_and_queries_go_on_while_blocks_are_cut_and_compacted() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = Db::open(dir.path(), options(200)).expect("open");
        let p = corpus("prometheus/prometheus-cpu.pb.gz", "cpu");
        let done = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                for t in 0..300 {
                    let mut app = db.appender();
                    app.append(&series_labels("cpu", "api", "a"), t * 10, &p)
                        .expect("append");
                    app.append(&series_labels("cpu", "api", "b"), t * 10, &p)
                        .expect("append");
                    app.commit().expect("commit");
                }
                done.store(true, std::sync::atomic::Ordering::SeqCst);
            });
            s.spawn(|| {
                while !done.load(std::sync::atomic::Ordering::SeqCst) {
                    db.compact().expect("compact");
                    let q = db.querier(i64::MIN, i64::MAX);
                    for series in q.totals(&[]).expect("query") {
                        let times: Vec<i64> =
                            series.points.iter().map(|p| p.timestamp_ms).collect();
                        assert!(
                            times.windows(2).all(|w| w[0] < w[1]),
                            "time order, no duplicates"
                        );
                        assert!(series.points.iter().all(|x| x.total == p.total()));
                    }
                }
            });
        });
        db.compact().expect("compact");
        assert!(db.stats().n_blocks > 0);
        let all = db.querier(i64::MIN, i64::MAX).select(&[]).expect("query");
        assert_eq!(all.len(), 2);
        for s in &all {
            assert_eq!(s.profiles.len(), 300);
            assert!(s.profiles.iter().all(|(_, q)| q.total() == p.total()));
        }
    }
}
