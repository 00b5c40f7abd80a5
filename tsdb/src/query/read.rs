//! The bottom of the read path: one attempt at a read over one view of the store ([`Read`]:
//! the blocks and head generation it sees, the span selection, the summaries it may use), the
//! sources of a series' profiles and the duplicates among them, the headers and samples of a
//! source, and the errors that name a block's or the head's faulty profile. The other
//! modules of `query/` read through it.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLockReadGuard};

use parca_profile::{Meta, Samples, Tables};
use roaring::RoaringBitmap;
use rustc_hash::FxHashMap;

use crate::block::{self, Block, SeriesEntry};
use crate::block_profile::BlockProfile;
use crate::encoding::{self, IdLimits, Reader};
use crate::head::Head;
use crate::labels::{Labels, Matcher};
use crate::remote::LazyBlock;
use crate::state::{BlockSet, Inner};
use crate::summary::{self, Part};
use crate::{Error, postings};

/// A profile read out before the query's tables are frozen: time, meta, samples.
pub(super) type ExtractedProfile = (i64, Meta, Samples);

/// Where a series' profiles lie: a block's series (with its index entry) or a head series, and
/// which of its profiles another source holds too and counts instead.
pub(super) enum Source {
    Block(usize, Box<SeriesEntry>, Hidden),
    Head(u32, Hidden),
}

/// The times of a source's profiles that count in another source of the same series: a
/// profile is its series and its time, stored once however many blocks (imports, pushes past
/// the out-of-order window) and the head hold it. Sorted; empty unless sources overlap.
#[derive(Debug, Default)]
pub(super) struct Hidden(pub(super) Vec<i64>);

impl Hidden {
    pub(super) fn hides(&self, timestamp_ms: i64) -> bool {
        !self.0.is_empty() && self.0.binary_search(&timestamp_ms).is_ok()
    }
}

/// Matchers on the span attributes of samples (`span_id`, `trace_id`, …): a sample is kept when
/// every matcher matches its span's value of the matcher's name, the empty value for a name it
/// does not have, as for series labels.
#[derive(Debug, Clone)]
pub(crate) struct SpanMatchers(pub(super) Vec<Matcher>);

impl encoding::SpanSelect for SpanMatchers {
    fn keeps(&self, section: &encoding::SpanSection, g: usize) -> bool {
        self.0.iter().all(|m| m.matches(section.value(g, &m.name)))
    }

    fn keeps_unspanned(&self) -> bool {
        self.0.iter().all(|m| m.matches(""))
    }
}

/// The blocks and the head generation that a read sees, taken together.
#[derive(Clone)]
pub(crate) struct View {
    /// The blocks on disk.
    pub(super) blocks: BlockSet,
    /// The object store's blocks, opened by a read as it needs them.
    pub(super) remote: Arc<Vec<LazyBlock>>,
    pub(super) generation: u64,
}

impl View {
    pub(crate) fn of(inner: &Inner, local_only: bool) -> View {
        let head = inner.head.read().expect("head lock poisoned");
        // Taken under the head's lock: a cut swaps head and blocks under its write lock, so
        // the two are consistent.
        View {
            blocks: inner.block_set(),
            remote: if local_only {
                Arc::default()
            } else {
                inner.remote_blocks()
            },
            generation: head.generation,
        }
    }

    /// The names of the blocks this view reads, and of the blocks they replaced.
    pub(super) fn seen(&self) -> std::collections::HashSet<&str> {
        let mut seen: std::collections::HashSet<&str> = std::collections::HashSet::new();
        for b in self.blocks.iter() {
            seen.insert(b.name());
            seen.extend(b.meta.compaction.sources.iter().map(String::as_str));
        }
        for b in self.remote.iter() {
            seen.insert(b.name());
            seen.extend(b.sources().iter().map(String::as_str));
        }
        seen
    }

    /// The blocks a read of `[min_ms, max_ms]` sees, by time: those on disk, and those of the
    /// object store that meet the range and are neither on disk nor replaced by a block on
    /// disk, opened (which may fetch their small files). A block `clamps` reads only before a
    /// time (a shard answers for the rest) is left closed when nothing of it is read.
    pub(crate) fn readable(
        &self,
        min_ms: i64,
        max_ms: i64,
        clamps: Option<&FxHashMap<String, i64>>,
    ) -> Result<BlockSet, Error> {
        if self.remote.is_empty() {
            return Ok(Arc::clone(&self.blocks));
        }
        let mut hidden: std::collections::HashSet<&str> =
            self.blocks.iter().map(|b| b.name()).collect();
        for b in self.blocks.iter() {
            hidden.extend(b.meta.compaction.sources.iter().map(String::as_str));
        }
        let mut all: Vec<Arc<Block>> = self.blocks.iter().cloned().collect();
        for b in self.remote.iter() {
            let (lo, hi) = b.time_range_ms();
            let until = clamps
                .and_then(|c| c.get(b.name()))
                .map_or(max_ms, |&from| max_ms.min(from.saturating_sub(1)));
            if hi > min_ms && lo <= until && min_ms <= until && !hidden.contains(b.name()) {
                all.push(b.open()?.block);
            }
        }
        if all.len() == self.blocks.len() {
            return Ok(Arc::clone(&self.blocks));
        }
        all.sort_by(|a, b| (a.meta.min_time_ms, a.name()).cmp(&(b.meta.min_time_ms, b.name())));
        Ok(Arc::new(all))
    }
}

/// Why one attempt at a read stopped.
pub(super) enum Fault {
    /// A cut replaced the head since the read's view was taken: read again.
    Stale,
    /// The store failed.
    Store(Error),
}

impl From<Error> for Fault {
    fn from(e: Error) -> Self {
        Fault::Store(e)
    }
}

/// One attempt at a read, over one view.
pub(super) struct Read<'q> {
    pub(super) inner: &'q Inner,
    /// The querier's span selection.
    pub(super) spans: Option<&'q SpanMatchers>,
    /// The coarsest summaries this read may use; 0 for none.
    pub(super) summaries_ms: i64,
    pub(super) blocks: BlockSet,
    /// Per block: the last time read from it (`max_ms`, or earlier for a shard's block in the
    /// bucket whose later profiles the shard answers for).
    pub(super) block_max: Vec<i64>,
    pub(super) generation: u64,
    pub(super) min_ms: i64,
    pub(super) max_ms: i64,
}

/// Empty tables for an extractor of the head between two holds of its lock.
pub(super) fn no_tables() -> &'static Tables {
    static EMPTY: std::sync::OnceLock<Tables> = std::sync::OnceLock::new();
    EMPTY.get_or_init(Tables::new)
}

impl Read<'_> {
    /// The head, read-locked, as long as no cut replaced it since the view was taken.
    pub(super) fn head(&self) -> Result<RwLockReadGuard<'_, Head>, Fault> {
        let head = self.inner.head.read().expect("head lock poisoned");
        if head.generation == self.generation {
            Ok(head)
        } else {
            Err(Fault::Stale)
        }
    }

    /// Whether a profile of block `bi` at `t` is in range.
    pub(super) fn in_block_range(&self, bi: usize, t: i64) -> bool {
        (self.min_ms..=self.block_max[bi]).contains(&t)
    }

    /// Blocks whose time range meets the query's, with their index in the set.
    pub(super) fn blocks_in_range(&self) -> impl Iterator<Item = (usize, &Arc<Block>)> {
        self.blocks.iter().enumerate().filter(|(bi, b)| {
            b.meta.max_time_ms > self.min_ms
                && b.meta.min_time_ms <= self.block_max[*bi]
                && self.min_ms <= self.block_max[*bi]
        })
    }

    /// Series of block `bi` selected by `matchers` with profiles in range.
    pub(super) fn block_series(
        &self,
        bi: usize,
        matchers: &[Matcher],
    ) -> Result<Vec<(u32, SeriesEntry)>, Error> {
        let b = &self.blocks[bi];
        let mut out = Vec::new();
        for i in postings::select(b.as_ref(), matchers).iter() {
            out.extend(self.stored_series(bi, i)?.map(|e| (i, e)));
        }
        Ok(out)
    }

    /// Series `i` of block `bi` as stored, if it has profiles in range.
    pub(super) fn stored_series(&self, bi: usize, i: u32) -> Result<Option<SeriesEntry>, Error> {
        let b = &self.blocks[bi];
        let e = b.series_entry(i).map_err(|e| b.index_corrupt(e))?;
        Ok(e.has_profiles_in(self.min_ms, self.block_max[bi])
            .then_some(e))
    }

    /// For every block in range, the series that match and have profiles in range.
    pub(super) fn within_blocks(
        &self,
        matchers: &[Matcher],
    ) -> Result<Vec<(&Arc<Block>, RoaringBitmap)>, Error> {
        self.blocks_in_range()
            .map(|(bi, b)| {
                // Whether a series has a profile in range, its summaries tell as well.
                let series = if b.has_summaries() {
                    self.summarized_series(bi, matchers, i64::MAX)?
                } else {
                    self.block_series(bi, matchers)?
                };
                let within = series.into_iter().map(|(i, _)| i).collect();
                Ok((b, within))
            })
            .collect()
    }

    /// Every matching series with profiles in range, by labels, its sources oldest first (the
    /// head last), each profile counted in one source only.
    pub(super) fn matched(
        &self,
        matchers: &[Matcher],
    ) -> Result<BTreeMap<Labels, Vec<Source>>, Fault> {
        let mut out: BTreeMap<Labels, Vec<Source>> = BTreeMap::new();
        let summarized = self.summarized_blocks()?;
        for (bi, _) in self.blocks_in_range() {
            let series = if summarized[bi] {
                self.summarized_series(bi, matchers, self.summaries_ms)?
            } else {
                self.block_series(bi, matchers)?
            };
            for (_, e) in series {
                out.entry(e.labels.clone()).or_default().push(Source::Block(
                    bi,
                    Box::new(e),
                    Hidden::default(),
                ));
            }
        }
        let head = self.head()?;
        // A profile the head took meanwhile in the time of a block read from its summaries
        // could be one of the block's too: read again (the next attempt reads that block's
        // profiles).
        let head_start = head_start(&head);
        if self
            .blocks
            .iter()
            .zip(&summarized)
            .any(|(b, &s)| s && b.meta.max_time_ms > head_start)
        {
            return Err(Fault::Stale);
        }
        for s in head.series_in_range(matchers, self.min_ms, self.max_ms) {
            out.entry(head.series[s as usize].labels.clone())
                .or_default()
                .push(Source::Head(s, Hidden::default()));
        }
        let head_min_valid_ms = head.min_valid_ms;
        drop(head);
        for sources in out.values_mut() {
            if sources.len() > 1 {
                self.hide_duplicates(sources, head_min_valid_ms, &summarized);
            }
        }
        Ok(out)
    }

    /// Per block, whether this read takes its summaries: when it may, the block holds them,
    /// and no other block nor the head holds profiles of its time (where sources overlap,
    /// each profile is weighed against the others by its time, which a summary hides).
    pub(super) fn summarized_blocks(&self) -> Result<Vec<bool>, Fault> {
        if self.summaries_ms <= 0 {
            return Ok(vec![false; self.blocks.len()]);
        }
        let head_start = head_start(&*self.head()?);
        Ok(self
            .blocks
            .iter()
            .enumerate()
            .map(|(bi, b)| {
                b.has_summaries()
                    && b.meta.max_time_ms <= head_start
                    && !self.blocks.iter().enumerate().any(|(bj, o)| {
                        bj != bi
                            && o.meta.min_time_ms < b.meta.max_time_ms
                            && b.meta.min_time_ms < o.meta.max_time_ms
                    })
            })
            .collect())
    }

    /// Series of block `bi` selected by `matchers` with profiles in range, each read from its
    /// summaries (up to `summaries_ms`) where they cover whole windows of the range
    /// ([`summary::plan`]) and from its profiles elsewhere: an entry whose profiles are those
    /// parts in time order.
    pub(super) fn summarized_series(
        &self,
        bi: usize,
        matchers: &[Matcher],
        summaries_ms: i64,
    ) -> Result<Vec<(u32, SeriesEntry)>, Error> {
        let b = &self.blocks[bi];
        let (first_ms, last_ms) = (self.min_ms, self.block_max[bi]);
        let corrupt = |e| b.index_corrupt(e);
        let mut out = Vec::new();
        for i in postings::select(b.as_ref(), matchers).iter() {
            let Some(summary) = b.summary_entry(i).map_err(corrupt)? else {
                out.extend(self.stored_series(bi, i)?.map(|e| (i, e)));
                continue;
            };
            if summary.last_ms < first_ms || summary.first_ms > last_ms {
                continue;
            }
            let resolutions: Vec<i64> = summary.levels.iter().map(|l| l.resolution_ms).collect();
            let parts = summary::plan(
                first_ms.saturating_sub(1),
                last_ms,
                &resolutions,
                summaries_ms,
            );
            let needs_profiles = parts.iter().any(|p| {
                matches!(*p, Part::Profiles { after, until }
                    if until >= summary.first_ms && after < summary.last_ms)
            });
            let stored = if needs_profiles {
                Some(b.series_entry(i).map_err(corrupt)?)
            } else {
                None
            };
            let mut profiles = Vec::new();
            let mut chunks = Vec::new();
            for part in parts {
                let (list, list_chunks, after, until) = match part {
                    Part::Level {
                        level,
                        after,
                        until,
                    } => {
                        let l = &summary.levels[level];
                        (&l.profiles, &l.chunks, after, until)
                    }
                    Part::Profiles { after, until } => match &stored {
                        Some(e) => (&e.profiles, &e.chunks, after, until),
                        None => continue,
                    },
                };
                let start = list.partition_point(|p| p.timestamp_ms <= after);
                let end = list.partition_point(|p| p.timestamp_ms <= until);
                if start < end {
                    profiles.extend_from_slice(&list[start..end]);
                    chunks.extend(block::chunks_of(list, list_chunks, start..end));
                }
            }
            if !profiles.is_empty() {
                out.push((
                    i,
                    SeriesEntry {
                        labels: summary.labels,
                        meta: summary.meta,
                        profiles,
                        chunks,
                    },
                ));
            }
        }
        Ok(out)
    }

    /// Marks the profiles of a series that several of its sources hold (the same time) so that
    /// each counts once: among blocks in the one written first (the smallest name, as
    /// compaction keeps it), and in any block rather than the head. Blocks cut from the head
    /// never overlap one another nor the head, so this costs a look at each source's time range
    /// unless imported blocks (or pushes past the out-of-order window) overlap.
    pub(super) fn hide_duplicates(
        &self,
        sources: &mut [Source],
        head_min_valid_ms: i64,
        summarized: &[bool],
    ) {
        // Per block source: its rank (by block name), its index, and its times in range.
        let mut blocks: Vec<(&str, usize, &[BlockProfile])> = sources
            .iter()
            .enumerate()
            .filter_map(|(k, s)| match s {
                // Its profiles are no other source's ([`Read::summarized_blocks`]).
                Source::Block(bi, _, _) if summarized[*bi] => None,
                Source::Block(bi, e, _) => {
                    let start = e.profiles.partition_point(|p| p.timestamp_ms < self.min_ms);
                    let end = e
                        .profiles
                        .partition_point(|p| p.timestamp_ms <= self.block_max[*bi]);
                    Some((
                        self.blocks[*bi].name(),
                        k,
                        &e.profiles[start..end.max(start)],
                    ))
                }
                Source::Head(..) => None,
            })
            .filter(|(_, _, ps)| !ps.is_empty())
            .collect();
        blocks.sort_by_key(|&(name, _, _)| name);
        let span = |ps: &[BlockProfile]| (ps[0].timestamp_ms, ps[ps.len() - 1].timestamp_ms);
        let mut by_start: Vec<(i64, i64)> = blocks.iter().map(|(_, _, ps)| span(ps)).collect();
        by_start.sort_unstable();
        let blocks_overlap = by_start.windows(2).any(|w| w[1].0 <= w[0].1);
        let reaches_head = blocks
            .iter()
            .any(|(_, _, ps)| span(ps).1 >= head_min_valid_ms);
        if !blocks_overlap && !reaches_head {
            return;
        }
        let mut hidden: Vec<Vec<i64>> = vec![Vec::new(); sources.len()];
        if blocks_overlap {
            // (time, rank, source): the first of equal times counts, the others are hidden.
            let mut all: Vec<(i64, usize, usize)> = blocks
                .iter()
                .enumerate()
                .flat_map(|(rank, (_, k, ps))| ps.iter().map(move |p| (p.timestamp_ms, rank, *k)))
                .collect();
            all.sort_unstable();
            for w in all.windows(2) {
                if w[0].0 == w[1].0 {
                    hidden[w[1].2].push(w[1].0);
                }
            }
        }
        // The head's profiles at or after its start may be in a block too: the block's count.
        let mut in_blocks: Vec<i64> = blocks
            .iter()
            .flat_map(|(_, _, ps)| ps.iter().map(|p| p.timestamp_ms))
            .filter(|&t| t >= head_min_valid_ms)
            .collect();
        in_blocks.sort_unstable();
        in_blocks.dedup();
        for (k, source) in sources.iter_mut().enumerate() {
            match source {
                Source::Block(_, _, h) => h.0 = std::mem::take(&mut hidden[k]),
                Source::Head(_, h) => h.0 = std::mem::take(&mut in_blocks),
            }
        }
    }

    pub(super) fn source_meta(&self, head: &Head, source: &Source) -> Meta {
        match source {
            Source::Block(_, e, _) => e.meta.clone(),
            Source::Head(s, _) => head.series[*s as usize].meta.clone(),
        }
    }

    /// Calls `each` with the header of every profile of a source in range (those that count
    /// in it).
    pub(super) fn for_each_header(
        &self,
        head: &Head,
        source: &Source,
        mut each: impl FnMut(&BlockProfile),
    ) {
        match source {
            Source::Block(bi, e, hidden) => e
                .profiles
                .iter()
                .filter(|p| {
                    self.in_block_range(*bi, p.timestamp_ms) && !hidden.hides(p.timestamp_ms)
                })
                .for_each(each),
            Source::Head(s, hidden) => head.series[*s as usize]
                .in_range(self.min_ms, self.max_ms)
                .iter()
                .filter(|p| !hidden.hides(p.timestamp_ms))
                .for_each(|p| each(&BlockProfile::from(p))),
        }
    }

    /// Whether a block's profile of time `t` counts in this read: within the block's part of
    /// the range, and not held by another source that counts it instead.
    pub(super) fn counts(&self, bi: usize, hidden: &Hidden, t: i64) -> bool {
        self.in_block_range(bi, t) && !hidden.hides(t)
    }

    /// Calls `each(header, encoded samples)` for every profile in range of a block's series
    /// that counts in it (not `hidden`).
    pub(super) fn for_each_block_profile(
        &self,
        bi: usize,
        e: &SeriesEntry,
        hidden: &Hidden,
        chunks: &mut block::ChunkReader,
        mut each: impl FnMut(&BlockProfile, &[u8]) -> Result<(), Error>,
    ) -> Result<(), Error> {
        let b = &self.blocks[bi];
        let wanted = |t: i64| self.counts(bi, hidden, t);
        let mut first = 0usize;
        for c in &e.chunks {
            let profiles = &e.profiles[first..first + c.n_profiles as usize];
            first += c.n_profiles as usize;
            if !profiles.iter().any(|p| wanted(p.timestamp_ms)) {
                continue;
            }
            let raw = chunks.read(b, c)?;
            let mut result = Ok(());
            block::split_chunk(raw, c, profiles, |p, bytes| {
                if result.is_ok() && wanted(p.timestamp_ms) {
                    result = each(p, bytes);
                }
            })
            .map_err(|e| Error::BlockCorrupt {
                block: b.name().to_owned(),
                file: "profiles",
                what: e.to_string(),
            })?;
            result?;
        }
        Ok(())
    }

    /// One stored profile's samples: all of them with their spans, or those of the selected
    /// spans.
    pub(super) fn decode(
        &self,
        bytes: &[u8],
        limits: IdLimits,
    ) -> Result<Samples, encoding::DecodeError> {
        let mut r = Reader::new(bytes);
        match self.spans {
            None => encoding::decode_samples(&mut r, limits),
            Some(select) => encoding::decode_selected(&mut r, limits, select),
        }
    }

    /// The tables of every block in range (index = block index; `None` out of range).
    pub(super) fn block_tables(&self) -> Result<Vec<Option<Arc<Tables>>>, Error> {
        let mut out = vec![None; self.blocks.len()];
        for (bi, b) in self.blocks_in_range() {
            out[bi] = Some(b.tables()?);
        }
        Ok(out)
    }
}

/// The time from which the head may hold profiles: its oldest profile's, or the time it takes
/// profiles from if later (`i64::MAX` for an empty head that takes any time).
pub(super) fn head_start(head: &Head) -> i64 {
    head.oldest_ms.max(head.min_valid_ms)
}

/// A stored profile's meta: its series' types with the profile's own time, duration, period.
pub(super) fn profile_meta(series: &Meta, p: &BlockProfile) -> Meta {
    Meta {
        time_nanos: p.timestamp_ms.saturating_mul(1_000_000),
        duration_nanos: p.duration_nanos,
        period: p.period,
        capture_id: p.capture_id,
        ..series.clone()
    }
}

/// A block's profile whose samples do not decode.
pub(super) fn corrupt_profile(
    b: &Block,
    labels: &Labels,
    p: &BlockProfile,
    e: encoding::DecodeError,
) -> Error {
    Error::BlockCorrupt {
        block: b.name().to_owned(),
        file: "profiles",
        what: format!("series {labels}: the profile at {} ms {e}", p.timestamp_ms),
    }
}

/// A head profile whose samples do not decode: the store's own bug.
pub(super) fn head_corrupt(labels: &Labels, timestamp_ms: i64, e: encoding::DecodeError) -> Error {
    Error::HeadCorrupt {
        labels: labels.to_string(),
        timestamp_ms,
        what: e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::Hidden;
    use crate::test_support::{corpus, series_labels, store_options};
    use crate::{Backfill, Db};

    #[test]
    fn hidden_times_are_the_ones_listed() {
        let hidden = Hidden(vec![100, 500, 900]);
        assert!(hidden.hides(500));
        assert!(!hidden.hides(400));
        assert!(!Hidden::default().hides(0));
    }

    #[test]
    fn a_profile_held_by_two_blocks_and_the_head_is_read_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = Db::open(dir.path(), store_options(1000)).expect("open");
        let cpu = corpus("go/go-cpu.pb.gz", "cpu");
        let labels = series_labels("cpu", "api", "a");
        let mut app = db.appender();
        for t in (0..3_000).step_by(100) {
            app.append(&labels, t, &cpu).expect("append");
        }
        app.commit().expect("commit");
        let q = db.querier(i64::MIN, i64::MAX);
        let (want_samples, want_totals) = (
            q.n_samples(&[]).expect("n_samples"),
            q.totals(&[]).expect("totals"),
        );
        db.compact().expect("cut");
        // The same profiles again, imported as another process would: one in each cut block
        // and one still in the head.
        let mut backfill = Backfill::new(dir.path(), &store_options(1000));
        for t in [500, 1_500, 2_900] {
            backfill.add(&labels, t, &cpu).expect("add");
        }
        backfill.write().expect("write");
        crate::compact::scan_new_blocks(db.inner()).expect("scan");
        assert!(db.stats().n_blocks >= 3, "{:?}", db.stats());

        let q = db.querier(i64::MIN, i64::MAX);
        assert_eq!(q.n_samples(&[]).expect("n_samples"), want_samples);
        assert_eq!(
            q.totals(&[]).expect("totals")[0].points,
            want_totals[0].points
        );
        let selected = q.select(&[]).expect("select");
        let times: Vec<i64> = selected[0].profiles.iter().map(|(t, _)| *t).collect();
        assert_eq!(times, (0..3_000).step_by(100).collect::<Vec<i64>>());
    }
}
