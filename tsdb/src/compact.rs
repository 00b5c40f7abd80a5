//! Maintenance: opening the blocks of a data directory (quarantining corrupt ones) and those
//! other processes write into it, cutting the head into blocks, compacting blocks (overlapping
//! ones first, profile by profile), and deleting blocks past retention.
//!
//! All of it runs in the store's background thread (or [`crate::Db::compact`]), one task at a
//! time under `Inner::maintenance`. Appends and queries go on meanwhile: a cut holds the head's
//! read lock while it copies the data out, writes the block with no lock held, and takes the
//! write lock only to swap in the new head, block set and WAL checkpoint.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parca_profile::{Extractor, Tables};

use crate::block::{self, Block, BlockWriter};
use crate::encoding::{IdLimits, Reader};
use crate::head::{self, ExtractedSeries, Remainder, StoredProfile};
use crate::remote::RemoteBlock;
use crate::state::{Inner, Quarantined};
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
    Ok((blocks, quarantined))
}

/// Opens the blocks that appeared in the data directory and are not served (written by
/// another process: `parca import` into the store of a running server) and serves them.
/// Returns how many. Runs under the maintenance lock, so no block of this process is being
/// cut, compacted or deleted meanwhile; and under the publish lock, so none is being added.
pub(crate) fn scan_new_blocks(inner: &Inner) -> Result<usize, Error> {
    let _publishing = inner.publish.lock().expect("publish lock poisoned");
    let served: std::collections::HashSet<String> = inner
        .block_set()
        .iter()
        .map(|b| b.name().to_owned())
        .collect();
    let dir = &inner.dir;
    let mut names = Vec::new();
    for entry in fs::read_dir(dir).map_err(Error::io("cannot list data directory", dir))? {
        let entry = entry.map_err(Error::io("cannot list data directory", dir))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if is_block_name(&name)
            && !served.contains(&name)
            && entry.file_type().is_ok_and(|t| t.is_dir())
        {
            names.push(name);
        }
    }
    if names.is_empty() {
        return Ok(0);
    }
    names.sort();
    let mut found = Vec::new();
    for name in names {
        match Block::open(&dir.join(&name)) {
            Ok(b) => {
                tracing::info!(
                    block = name,
                    min_time_ms = b.meta.min_time_ms,
                    max_time_ms = b.meta.max_time_ms,
                    profiles = b.meta.stats.n_profiles,
                    "serving a block written into the data directory by another process"
                );
                found.push(Arc::new(b));
            }
            Err(e @ Error::BlockCorrupt { .. }) => {
                let q = quarantine(dir, &name, &e)?;
                inner
                    .quarantined
                    .lock()
                    .expect("quarantine lock poisoned")
                    .push(q);
            }
            Err(e) => return Err(e),
        }
    }
    let n = found.len();
    serve_blocks(inner, found);
    Ok(n)
}

/// Adds `new` to the served set, kept in time order.
pub(crate) fn serve_blocks(inner: &Inner, new: Vec<Arc<Block>>) {
    if new.is_empty() {
        return;
    }
    let mut blocks = inner.blocks.write().expect("blocks lock poisoned");
    let mut set: Vec<Arc<Block>> = blocks.iter().cloned().chain(new).collect();
    set.sort_by_key(|b| (b.meta.min_time_ms, b.meta.max_time_ms));
    *blocks = Arc::new(set);
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
    crate::state::heal_wal(inner)?;
    scan_new_blocks(inner)?;
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
            .checkpoint(|sink| crate::state::write_checkpoint(&head, sink))
    };
    let (segment, end_seq) = checkpoint?;
    inner.wal.sync_through(end_seq)?;
    inner.wal.remove_segments_before(segment)?;
    Ok(true)
}

/// The blocks to merge next, if any. First blocks whose time ranges overlap (imported ones,
/// pushes past the out-of-order window), each set that overlaps one another merged vertically,
/// as Prometheus does; then by level: the ranges are 3, 9, 27… block durations (up to a tenth
/// of the retention time, at most 31 days), aligned; a window of one range that the head has
/// moved past and that holds two or more blocks becomes one block.
fn plan_compaction(inner: &Inner) -> Option<Vec<Arc<Block>>> {
    if inner.options.ship_blocks {
        return None;
    }
    let blocks = inner.block_set();
    if let Some(group) = overlapping(&blocks) {
        return Some(group);
    }
    // A block in an older format is rewritten in today's, on its own, before the windows below.
    if let Some(old) = blocks
        .iter()
        .find(|b| b.meta.version < crate::encoding::FORMAT_VERSION)
    {
        return Some(vec![Arc::clone(old)]);
    }
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

/// The first run of blocks (in time order) each of which overlaps the time range of those
/// before it, if one holds two blocks or more.
fn overlapping(blocks: &[Arc<Block>]) -> Option<Vec<Arc<Block>>> {
    let mut i = 0;
    while i < blocks.len() {
        let mut end = blocks[i].meta.max_time_ms;
        let mut j = i + 1;
        while j < blocks.len() && blocks[j].meta.min_time_ms < end {
            end = end.max(blocks[j].meta.max_time_ms);
            j += 1;
        }
        if j - i >= 2 {
            return Some(blocks[i..j].to_vec());
        }
        i = j;
    }
    None
}

/// Merges `sources` (oldest first) into one block: series joined by labels, symbols and stacks
/// deduplicated into one set of tables. Sources may overlap in time (vertical compaction): a
/// series' profiles from all of them are merged in time order, and a profile held by several
/// (the same series and time) is kept once, from the source written first (the smallest
/// name), as queries count it. The sources are deleted once the new block is in place.
pub(crate) fn compact(inner: &Inner, sources: &[Arc<Block>]) -> Result<(), Error> {
    let dir = merge_blocks(&inner.dir, sources)?;
    let merged = Arc::new(Block::open(&dir)?);
    tracing::info!(
        block = merged.name(),
        level = merged.meta.compaction.level,
        sources = sources.len(),
        bytes = merged.size_bytes,
        bytes_before = sources.iter().map(|b| b.size_bytes).sum::<u64>(),
        "compacted blocks"
    );
    replace_blocks(inner, sources, Some(merged))
}

/// Merges `sources` into one new block in `dir` (see [`compact`]) and returns its directory;
/// the sources are left as they are.
#[expect(
    clippy::too_many_lines,
    reason = "the merge of blocks series by series shares the writer, the readers and the extractors across its steps"
)]
pub(crate) fn merge_blocks(dir: &Path, sources: &[Arc<Block>]) -> Result<PathBuf, Error> {
    let tables: Vec<Arc<Tables>> = sources
        .iter()
        .map(|b| b.tables())
        .collect::<Result<_, _>>()?;
    let limits: Vec<IdLimits> = tables.iter().map(|t| IdLimits::of(t)).collect();
    let mut extractors: Vec<Extractor<'_>> = tables.iter().map(|t| Extractor::new(t)).collect();
    // Which source wins a profile held twice: the one written first.
    let mut by_name: Vec<usize> = (0..sources.len()).collect();
    by_name.sort_by(|&a, &b| sources[a].name().cmp(sources[b].name()));
    let mut rank = vec![0usize; sources.len()];
    for (r, &bi) in by_name.iter().enumerate() {
        rank[bi] = r;
    }
    // Every (source, series) sorted by labels, then by rank.
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
    entries.sort_by(|a, b| a.1.labels.cmp(&b.1.labels).then(rank[a.0].cmp(&rank[b.0])));
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
    let mut writer = BlockWriter::new(dir, Tables::new(), crate::summary::summarizes(range))?;
    let mut chunks = block::ChunkReader::new(dir, sources.len())?;
    let mut n_duplicates = 0usize;
    let mut i = 0;
    while i < entries.len() {
        let labels = entries[i].1.labels.clone();
        let n = entries[i..]
            .iter()
            .take_while(|(_, e)| e.labels == labels)
            .count();
        let group = &entries[i..i + n];
        i += n;
        let keep = kept_profiles(group.iter().map(|(_, e)| e));
        n_duplicates += group
            .iter()
            .zip(&keep)
            .map(|((_, e), k)| e.profiles.len() - k.iter().filter(|&&k| k).count())
            .sum::<usize>();
        let mut out = ExtractedSeries {
            labels,
            meta: group[0].1.meta.clone(),
            profiles: Vec::new(),
        };
        for ((bi, e), keep) in group.iter().zip(&keep) {
            let b = &sources[*bi];
            let mut first = 0usize;
            for c in &e.chunks {
                let range = first..first + c.n_profiles as usize;
                first = range.end;
                if !keep[range.clone()].iter().any(|&k| k) {
                    continue;
                }
                let raw = chunks.read(b, c)?;
                let mut failed = None;
                let mut at = range.start;
                let failed = block::split_chunk(raw, c, &e.profiles[range], |p, bytes| {
                    let kept = keep[at];
                    at += 1;
                    if failed.is_some() || !kept {
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
                })
                .err()
                .or(failed);
                if let Some(e) = failed {
                    return Err(Error::BlockCorrupt {
                        block: b.name().to_owned(),
                        file: "profiles",
                        what: e.to_string(),
                    });
                }
            }
        }
        // Sources that overlap interleave: put the series back in time order.
        if !out
            .profiles
            .windows(2)
            .all(|w| w[0].timestamp_ms < w[1].timestamp_ms)
        {
            out.profiles.sort_by_key(|p| p.timestamp_ms);
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
    let head_cut_ms = sources.iter().filter_map(|b| b.meta.head_cut_ms()).max();
    let compaction = block::Compaction {
        level,
        sources: source_names,
    };
    if n_duplicates > 0 {
        tracing::info!(
            duplicates = n_duplicates,
            "profiles held by more than one source were kept once"
        );
    }
    writer.finish(Some(range), compaction, head_cut_ms)
}

/// Which profiles of one series' entries (in rank order) are kept: each time once, from the
/// first entry that holds it. One mask per entry.
fn kept_profiles<'e>(entries: impl Iterator<Item = &'e block::SeriesEntry>) -> Vec<Vec<bool>> {
    let entries: Vec<&block::SeriesEntry> = entries.collect();
    let mut keep: Vec<Vec<bool>> = entries
        .iter()
        .map(|e| vec![true; e.profiles.len()])
        .collect();
    if entries.len() < 2 {
        return keep;
    }
    // (time, entry, profile), stable in entry order for equal times.
    let mut all: Vec<(i64, usize, usize)> = entries
        .iter()
        .enumerate()
        .flat_map(|(k, e)| {
            e.profiles
                .iter()
                .enumerate()
                .map(move |(j, p)| (p.timestamp_ms, k, j))
        })
        .collect();
    all.sort_by_key(|&(t, k, _)| (t, k));
    for w in 0..all.len().saturating_sub(1) {
        let (t, _, _) = all[w];
        let (t2, k2, j2) = all[w + 1];
        if t == t2 {
            keep[k2][j2] = false;
        }
    }
    keep
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
    if inner.options.ship_blocks {
        // A block not yet in the object store is the only copy: it stays until shipped. So
        // does every block that starts after it: a querier reads this store from the oldest
        // block not shipped on (`Db::shipped_until`), so what lies after it must be here.
        let shipped = inner.shipped.lock().expect("shipped lock poisoned");
        let first_unshipped = blocks
            .iter()
            .filter(|b| !shipped.contains(b.name()))
            .map(|b| b.meta.min_time_ms)
            .min()
            .unwrap_or(i64::MAX);
        doomed.retain(|b| shipped.contains(b.name()) && b.meta.min_time_ms < first_unshipped);
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

/// Merges `sources` (blocks of an object store, read by ranges) into one new block in `dir`, as
/// the store compacts its own blocks: series joined by labels, symbols and stacks deduplicated,
/// a profile held by several sources kept once, the new block's `compaction.sources` the union
/// of theirs (so readers that see it ignore them). Returns the new block's directory.
pub fn compact_remote(dir: &Path, sources: &[RemoteBlock]) -> Result<std::path::PathBuf, Error> {
    let mut blocks: Vec<Arc<Block>> = sources.iter().map(|b| Arc::clone(&b.block)).collect();
    blocks.sort_by(|a, b| (a.meta.min_time_ms, a.name()).cmp(&(b.meta.min_time_ms, b.name())));
    merge_blocks(dir, &blocks)
}

#[cfg(test)]
#[allow(
    clippy::too_many_lines,
    reason = "tests are scenarios read top to bottom; the line budget is for product code"
)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    use crate::test_support::{Lcg, answers, corpus, fill, series_labels, store_options, vary};
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

    fn blocks_of(db: &Db) -> Vec<Arc<Block>> {
        db.inner().block_set().to_vec()
    }

    #[test]
    fn queries_agree_before_and_after_cut_compaction_and_reopen() {
        let dir = tempfile::tempdir().expect("tempdir");
        // A block duration nothing reaches: everything stays in the head for the baseline.
        let db = Db::open(dir.path(), store_options(i64::MAX / 4)).expect("open");
        fill(&db, 1, 0, 12_000);
        let baseline = answers(&db, &RANGES);
        assert!(baseline.len() > 100);
        drop(db);

        let db = Db::open(dir.path(), store_options(1000)).expect("reopen");
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

        let db = Db::open(dir.path(), store_options(1000)).expect("reopen");
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

    /// `p` with its samples spread over three spans (of one trace), row `i` in span `i % 3`,
    /// every fifth row in none.
    fn with_spans(p: &parca_profile::Profile, t: i64) -> parca_profile::Profile {
        let mut p = p.clone();
        let mut b = parca_profile::SpansBuilder::new(vec!["span_id".into(), "trace_id".into()]);
        for i in 0..p.samples.len() {
            if i % 5 == 4 {
                b.push(&[String::new(), String::new()]);
            } else {
                b.push(&[
                    format!("{:016x}", t * 10 + (i % 3) as i64),
                    format!("{t:032x}"),
                ]);
            }
        }
        p.samples.spans = b.finish();
        p
    }

    #[test]
    fn span_selections_agree_before_and_after_cut_compaction_and_reopen() {
        use crate::{MatchOp, Matcher};
        let dir = tempfile::tempdir().expect("tempdir");
        let cpu = corpus("go/go-cpu.pb.gz", "cpu");
        let labels = series_labels("cpu", "api", "a");
        let mut rng = Lcg(3);
        let mut want_span = 0i64; // span 1 of time 500
        let mut want_trace = 0i64; // every span of time 500
        let db = Db::open(dir.path(), store_options(i64::MAX / 4)).expect("open");
        for t in (0..6000).step_by(100) {
            let p = with_spans(&vary(&cpu, &mut rng), t);
            if t == 500 {
                let spans = p.samples.spans.as_ref().expect("spans");
                for i in 0..p.samples.len() {
                    if let Some(span) = spans.span_of(i) {
                        want_trace += p.samples.values[i];
                        if span[0] == format!("{:016x}", 5001) {
                            want_span += p.samples.values[i];
                        }
                    }
                }
            }
            let mut app = db.appender();
            app.append(&labels, t, &p).expect("append");
            app.commit().expect("commit");
        }
        assert!(want_span > 0 && want_trace > want_span);
        let span = |v: &str| vec![Matcher::new(MatchOp::Equal, "span_id", v).expect("valid")];
        let check = |db: &Db, when: &str| {
            let merged = |m: Vec<Matcher>| {
                db.querier(i64::MIN, i64::MAX)
                    .with_span_matchers(m)
                    .merge(&[])
                    .expect("merge")
                    .map_or(0, |p| p.total())
            };
            assert_eq!(merged(span(&format!("{:016x}", 5001))), want_span, "{when}");
            let trace = vec![
                Matcher::new(MatchOp::Equal, "trace_id", format!("{:032x}", 500)).expect("valid"),
            ];
            assert_eq!(merged(trace), want_trace, "{when}");
            let list = vec![
                Matcher::new(
                    MatchOp::Re,
                    "span_id",
                    format!("{:016x}|{:016x}", 5001, 5000),
                )
                .expect("valid"),
            ];
            let two = merged(list);
            assert!(two > want_span && two < want_trace, "{when}");
            assert_eq!(merged(span("ffffffffffffffff")), 0, "{when}");
            // The largest spans of the series; of one trace, all three.
            let largest = db
                .querier(i64::MIN, i64::MAX)
                .largest_spans(&[], 4)
                .expect("spans");
            assert_eq!(largest.len(), 1, "{when}");
            assert_eq!(largest[0].spans.len(), 4, "{when}");
            let trace = vec![
                Matcher::new(MatchOp::Equal, "trace_id", format!("{:032x}", 500)).expect("valid"),
            ];
            let of_trace = db
                .querier(i64::MIN, i64::MAX)
                .with_span_matchers(trace)
                .largest_spans(&[], 10)
                .expect("spans");
            let spans = &of_trace[0].spans;
            assert_eq!(spans.len(), 3, "{when}");
            assert_eq!(
                spans.iter().map(|s| s.value).sum::<i64>(),
                want_trace,
                "{when}"
            );
            assert!(spans.iter().all(|s| s.timestamp_ms == 500), "{when}");
            assert_eq!(spans[0].attributes[1].0, "trace_id", "{when}");
            let one = spans
                .iter()
                .find(|s| s.attributes[0].1 == format!("{:016x}", 5001))
                .expect("span 5001");
            assert_eq!(one.value, want_span, "{when}");
            // Selected profiles keep their spans.
            let all = db.querier(i64::MIN, i64::MAX).select(&[]).expect("select");
            let (_, p) = &all[0].profiles[5];
            let spans = p.samples.spans.as_ref().expect("spans survive");
            assert_eq!(spans.names, ["span_id", "trace_id"], "{when}");
            assert_eq!(spans.spans.len(), 3, "{when}");
        };
        check(&db, "in the head");
        drop(db);
        let db = Db::open(dir.path(), store_options(i64::MAX / 4)).expect("reopen");
        check(&db, "after WAL replay");
        drop(db);
        let db = Db::open(dir.path(), store_options(1000)).expect("reopen");
        db.compact().expect("compact");
        assert!(blocks_of(&db).iter().any(|b| b.meta.compaction.level >= 2));
        check(&db, "in blocks");
        drop(db);
        let db = Db::open(dir.path(), store_options(1000)).expect("reopen");
        check(&db, "after reopen");
    }

    #[test]
    fn a_cut_truncates_the_wal_and_keeps_head_memory_small() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = Db::open(dir.path(), store_options(i64::MAX / 4)).expect("open");
        fill(&db, 2, 0, 6_000);
        let before = db.stats();
        assert!(
            before.head_sample_bytes <= 10 * before.n_head_samples as u64,
            "head holds {} bytes for {} samples",
            before.head_sample_bytes,
            before.n_head_samples
        );
        drop(db);
        let db = Db::open(dir.path(), store_options(1000)).expect("reopen");
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
        let db = Db::open(dir.path(), store_options(i64::MAX / 4)).expect("open");
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
        let db = Db::open(dir.path(), store_options(1000)).expect("reopen");
        db.compact().expect("compact");
        assert!(db.stats().n_blocks > 0);
        drop(db);
        // As if the process died after renaming the blocks, before any checkpoint.
        fs::remove_dir_all(&wal).expect("remove wal");
        fs::create_dir(&wal).expect("mkdir");
        for (p, bytes) in saved {
            fs::write(p, bytes).expect("restore");
        }
        let db = Db::open(dir.path(), store_options(1000)).expect("reopen after crash");
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
                ..store_options(1000)
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
                ..store_options(1000)
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
        let db = Db::open(dir.path(), store_options(200)).expect("open");
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

    /// The profiles of the overlap tests: each series' profile at a time is the same whenever
    /// it is asked for, so a profile stored twice is the same profile.
    struct Profiles {
        bases: [parca_profile::Profile; 3],
    }

    impl Profiles {
        fn new() -> Self {
            Profiles {
                bases: [
                    corpus("go/go-cpu.pb.gz", "cpu"),
                    corpus("prometheus/prometheus-cpu.pb.gz", "cpu"),
                    corpus("go/go-heap.pb.gz", "alloc_space"),
                ],
            }
        }

        fn series(which: usize) -> crate::Labels {
            match which {
                0 => series_labels("cpu", "api", "a"),
                1 => series_labels("cpu", "api", "b"),
                2 => series_labels("heap", "api", "a"),
                _ => series_labels("cpu", "batch", "z"),
            }
        }

        fn at(&self, which: usize, t: i64) -> parca_profile::Profile {
            let mut rng = Lcg(t as u64 * 31 + which as u64);
            vary(&self.bases[which % 3], &mut rng)
        }
    }

    #[test]
    fn overlapping_blocks_count_each_profile_once_and_compact_vertically() {
        let profiles = Profiles::new();
        // Scraped: three series every 100 ms, cut into blocks of 1 s.
        let scraped: Vec<(usize, i64)> = (0..60)
            .flat_map(|i| (0..3).map(move |w| (w, i * 100)))
            .collect();
        // Imported: other times, the same profile at some scraped times (in blocks and in the
        // head), a new series, and one time twice (two imports).
        let mut imported: Vec<(usize, i64)> = (0..24)
            .flat_map(|i| [(0, 50 + i * 250), (2, 75 + i * 250), (3, i * 250)])
            .collect();
        imported.extend([(0, 300), (2, 2_500), (0, 5_900), (1, 5_800), (3, 1_000)]);

        // What the store must answer: every distinct profile, all in one head.
        let baseline_dir = tempfile::tempdir().expect("tempdir");
        let baseline = Db::open(baseline_dir.path(), store_options(i64::MAX / 4)).expect("open");
        let mut app = baseline.appender();
        for &(w, t) in scraped.iter().chain(&imported) {
            match app.append(&Profiles::series(w), t, &profiles.at(w, t)) {
                Ok(()) => {}
                Err(Error::Duplicate { .. }) => {}
                Err(e) => panic!("{e}"),
            }
        }
        app.commit().expect("commit");
        let want = answers(&baseline, &RANGES);

        let dir = tempfile::tempdir().expect("tempdir");
        let db = Db::open(dir.path(), store_options(1000)).expect("open");
        let mut app = db.appender();
        for &(w, t) in &scraped {
            app.append(&Profiles::series(w), t, &profiles.at(w, t))
                .expect("append");
        }
        app.commit().expect("commit");
        db.compact().expect("cut");
        let min_valid = db.inner().head.read().expect("head").min_valid_ms;
        assert!(min_valid > 3_000 && min_valid <= 5_800, "{min_valid}");
        // Imported as another process would: two imports, one of them repeating a profile.
        let (first, second) = imported.split_at(imported.len() - 1);
        for part in [first, second] {
            let mut backfill = crate::Backfill::new(dir.path(), &store_options(1000));
            for &(w, t) in part {
                backfill
                    .add(&Profiles::series(w), t, &profiles.at(w, t))
                    .expect("add");
            }
            backfill.write().expect("write");
        }
        // Served as they are, overlapping cut blocks, one another and the head.
        assert!(scan_new_blocks(db.inner()).expect("scan") >= 7);
        let overlapping_blocks = blocks_of(&db)
            .windows(2)
            .filter(|w| w[1].meta.min_time_ms < w[0].meta.max_time_ms)
            .count();
        assert!(overlapping_blocks >= 3, "{overlapping_blocks}");
        let before = answers(&db, &RANGES);
        assert_eq!(before.len(), want.len());
        for (i, (a, b)) in want.iter().zip(&before).enumerate() {
            assert_eq!(a, b, "answer {i} over overlapping blocks");
        }

        // Compaction merges them profile by profile: no overlap is left, the answers stay.
        db.compact().expect("compact");
        let blocks = blocks_of(&db);
        assert!(
            blocks
                .windows(2)
                .all(|w| w[1].meta.min_time_ms >= w[0].meta.max_time_ms),
            "{:?}",
            blocks
                .iter()
                .map(|b| (b.meta.min_time_ms, b.meta.max_time_ms))
                .collect::<Vec<_>>()
        );
        assert_eq!(answers(&db, &RANGES), want, "after vertical compaction");
        // The block over the head's start keeps the last cut for replay.
        let last_cut = blocks
            .iter()
            .filter_map(|b| b.meta.head_cut_ms())
            .max()
            .expect("cut blocks");
        assert_eq!(last_cut, min_valid);
        drop(db);
        let db = Db::open(dir.path(), store_options(1000)).expect("reopen");
        assert_eq!(answers(&db, &RANGES), want, "after reopen");
        // Cut and compacted to the end: still the same profiles.
        drop(db);
        let db = Db::open(dir.path(), store_options(1000)).expect("reopen");
        let mut app = db.appender();
        app.append(&Profiles::series(0), 20_000, &profiles.at(0, 20_000))
            .expect("append");
        app.commit().expect("commit");
        db.compact().expect("compact");
        let ranges = [(i64::MIN, 10_000), (4_000, 10_000)];
        assert_eq!(answers(&db, &ranges), answers(&baseline, &ranges));
    }

    #[test]
    fn of_two_blocks_holding_one_profile_differently_the_first_written_counts() {
        let profiles = Profiles::new();
        let dir = tempfile::tempdir().expect("tempdir");
        let db = Db::open(dir.path(), store_options(1000)).expect("open");
        let labels = Profiles::series(0);
        let (one, other) = (profiles.at(0, 1), profiles.at(0, 2));
        assert_ne!(one.total(), other.total());
        for p in [&one, &other] {
            let mut backfill = crate::Backfill::new(dir.path(), &store_options(1000));
            backfill.add(&labels, 500, p).expect("add");
            backfill.write().expect("write");
            // Names sort by time to the millisecond.
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        // The head's profile at that time gives way to the blocks'.
        let mut app = db.appender();
        app.append(&labels, 500, &profiles.at(0, 3))
            .expect("the head takes it");
        app.commit().expect("commit");
        assert_eq!(scan_new_blocks(db.inner()).expect("scan"), 2);
        let points = |db: &Db| -> Vec<(i64, i64)> {
            db.querier(i64::MIN, i64::MAX).totals(&[]).expect("query")[0]
                .points
                .iter()
                .map(|p| (p.timestamp_ms, p.total))
                .collect()
        };
        assert_eq!(points(&db), [(500, one.total())]);
        let merged = db
            .querier(0, 1000)
            .merge(&[])
            .expect("merge")
            .expect("some");
        assert_eq!(merged.total(), one.total());
        db.compact().expect("compact");
        assert_eq!(db.stats().n_blocks, 1);
        assert_eq!(
            points(&db),
            [(500, one.total())],
            "compaction keeps the same one"
        );
    }
}
