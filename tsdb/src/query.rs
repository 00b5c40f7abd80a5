//! Reading: a [`Querier`] over a time range sees the blocks and the head together, series
//! found through each one's postings and joined by their labels.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, RwLockReadGuard};

use parca_profile::tables::{LabelSetId, StackId};
use parca_profile::{Extractor, Meta, Profile, Samples, Tables};
use roaring::RoaringBitmap;
use rustc_hash::FxHashMap;

use crate::block::{self, Block, BlockProfile, SeriesEntry};
use crate::db::BlockSet;
use crate::encoding::{self, IdLimits, Reader};
use crate::head::Head;
use crate::labels::{Labels, Matcher};
use crate::{Error, postings};

/// The profiles of one series over a query's time range, sharing the query's tables.
#[derive(Debug, Clone)]
pub struct SeriesProfiles {
    /// The series.
    pub labels: Labels,
    /// Its profiles with their timestamps, time-ordered.
    pub profiles: Vec<(i64, Profile)>,
}

/// The totals of one series' profiles over a query's time range.
#[derive(Debug, Clone)]
pub struct SeriesTotals {
    /// The series.
    pub labels: Labels,
    /// Its sample type and period type (time and duration are per point).
    pub meta: Meta,
    /// One point per profile, time-ordered.
    pub points: Vec<TotalPoint>,
}

/// The total of one stored profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TotalPoint {
    /// When the profile was taken.
    pub timestamp_ms: i64,
    /// The sum of its values.
    pub total: i64,
    /// Its sampling period, in the period type's unit.
    pub period: i64,
    /// The window it covers (0 for a snapshot).
    pub duration_nanos: i64,
}

/// One group's profile from [`Querier::merge_grouped`].
#[derive(Debug, Clone)]
pub struct MergedGroup<K> {
    /// The group's key, as the caller's `key` function gave it.
    pub key: K,
    /// The merge of the group's profiles in range.
    pub profile: Profile,
    /// How many stored profiles were merged into it.
    pub n_profiles: usize,
}

/// A profile read out before the query's tables are frozen: time, meta, samples.
type ExtractedProfile = (i64, Meta, Samples);

/// A matched series and where its profiles lie.
type MatchedSeries<'m> = (&'m Labels, &'m Vec<Source>);

/// Where a series' profiles lie: a block's series (with its index entry) or a head series.
enum Source {
    Block(usize, Box<SeriesEntry>),
    Head(u32),
}

/// A read view of the store over a time range: blocks and head.
///
/// Holds the head's read lock while it lives (appends wait), and an `Arc` of the block set it
/// started with (compaction and retention never pull blocks from under it).
pub struct Querier<'a> {
    head: RwLockReadGuard<'a, Head>,
    blocks: BlockSet,
    min_ms: i64,
    max_ms: i64,
}

/// Per-query reading state: one zstd context and one buffer for chunks.
struct ReadCtx {
    decompressor: Option<zstd::bulk::Decompressor<'static>>,
    chunk: Vec<u8>,
}

impl ReadCtx {
    fn new() -> Self {
        ReadCtx {
            decompressor: zstd::bulk::Decompressor::new().ok(),
            chunk: Vec::new(),
        }
    }
}

impl<'a> Querier<'a> {
    pub(crate) fn new(
        head: RwLockReadGuard<'a, Head>,
        blocks: BlockSet,
        min_ms: i64,
        max_ms: i64,
    ) -> Self {
        Querier {
            head,
            blocks,
            min_ms,
            max_ms,
        }
    }

    fn in_range(&self, t: i64) -> bool {
        (self.min_ms..=self.max_ms).contains(&t)
    }

    /// Blocks whose time range meets the query's, with their index in the set.
    fn blocks_in_range(&self) -> impl Iterator<Item = (usize, &Arc<Block>)> {
        self.blocks
            .iter()
            .enumerate()
            .filter(|(_, b)| b.meta.max_time_ms > self.min_ms && b.meta.min_time_ms <= self.max_ms)
    }

    /// Series of block `b` selected by `matchers` with profiles in range.
    fn block_series(&self, b: &Block, matchers: &[Matcher]) -> Vec<(u32, SeriesEntry)> {
        postings::select(b, matchers)
            .iter()
            .filter_map(|i| match b.series_entry(i) {
                Ok(e) => e.has_profiles_in(self.min_ms, self.max_ms).then_some((i, e)),
                Err(e) => {
                    tracing::error!(block = b.name(), series = i, error = %e, "unreadable series entry; skipped");
                    None
                }
            })
            .collect()
    }

    /// Every matching series with profiles in range, by labels, its sources oldest first.
    fn matched(&self, matchers: &[Matcher]) -> BTreeMap<Labels, Vec<Source>> {
        let mut out: BTreeMap<Labels, Vec<Source>> = BTreeMap::new();
        for (bi, b) in self.blocks_in_range() {
            for (_, e) in self.block_series(b, matchers) {
                out.entry(e.labels.clone())
                    .or_default()
                    .push(Source::Block(bi, Box::new(e)));
            }
        }
        for s in self
            .head
            .series_in_range(matchers, self.min_ms, self.max_ms)
        {
            out.entry(self.head.series[s as usize].labels.clone())
                .or_default()
                .push(Source::Head(s));
        }
        out
    }

    fn source_meta(&self, source: &Source) -> Meta {
        match source {
            Source::Block(_, e) => e.meta.clone(),
            Source::Head(s) => self.head.series[*s as usize].meta.clone(),
        }
    }

    /// Headers of a source's profiles in range.
    fn headers(&self, source: &Source) -> Vec<BlockProfile> {
        match source {
            Source::Block(_, e) => e
                .profiles
                .iter()
                .filter(|p| self.in_range(p.timestamp_ms))
                .copied()
                .collect(),
            Source::Head(s) => self.head.series[*s as usize]
                .in_range(self.min_ms, self.max_ms)
                .iter()
                .map(BlockProfile::from)
                .collect(),
        }
    }

    /// Calls `each(header, encoded samples)` for every profile of `source` in range. Block
    /// damage found while reading is logged and ends the source early.
    fn for_each_profile(
        &self,
        source: &Source,
        ctx: &mut ReadCtx,
        mut each: impl FnMut(&BlockProfile, &[u8]),
    ) {
        match source {
            Source::Head(s) => {
                for p in self.head.series[*s as usize].in_range(self.min_ms, self.max_ms) {
                    each(&BlockProfile::from(p), &p.data);
                }
            }
            Source::Block(bi, e) => {
                let b = &self.blocks[*bi];
                let mut first = 0usize;
                for c in &e.chunks {
                    let profiles = &e.profiles[first..first + c.n_profiles as usize];
                    first += c.n_profiles as usize;
                    if !profiles.iter().any(|p| self.in_range(p.timestamp_ms)) {
                        continue;
                    }
                    let Some(decompressor) = &mut ctx.decompressor else {
                        tracing::error!("cannot start zstd; block data skipped");
                        return;
                    };
                    if let Err(err) = b.read_chunk(c, decompressor, &mut ctx.chunk) {
                        tracing::error!(block = b.name(), error = %err, "unreadable chunk; series skipped");
                        return;
                    }
                    block::split_chunk(&ctx.chunk, profiles, |p, bytes| {
                        if self.in_range(p.timestamp_ms) {
                            each(p, bytes);
                        }
                    });
                }
            }
        }
    }

    /// The tables of every block in range whose symbols can be read (index = block index).
    fn block_tables(&self) -> Vec<Option<Arc<Tables>>> {
        self.blocks
            .iter()
            .enumerate()
            .map(|(bi, b)| {
                if !self.blocks_in_range().any(|(i, _)| i == bi) {
                    return None;
                }
                b.tables()
                    .inspect_err(|e| tracing::error!(block = b.name(), error = %e, "unreadable symbols; block skipped"))
                    .ok()
            })
            .collect()
    }

    /// The series that match all `matchers` and have profiles in range, with those profiles,
    /// series sorted by labels. All returned profiles share one set of tables holding only
    /// what they use, so merging them is an array add.
    pub fn select(&self, matchers: &[Matcher]) -> Vec<SeriesProfiles> {
        let matched = self.matched(matchers);
        let block_tables = self.block_tables();
        let mut extractors: Vec<Option<(Extractor<'_>, IdLimits)>> = block_tables
            .iter()
            .map(|t| t.as_deref().map(|t| (Extractor::new(t), IdLimits::of(t))))
            .collect();
        let mut head_extractor = Extractor::new(&self.head.tables);
        let head_limits = self.head.limits();
        let mut tables = Tables::new();
        let mut ctx = ReadCtx::new();
        let mut out: Vec<(Labels, Vec<ExtractedProfile>)> = Vec::new();
        for (labels, sources) in matched {
            let mut profiles = Vec::new();
            for source in &sources {
                let series_meta = self.source_meta(source);
                let (extractor, limits) = match source {
                    Source::Head(_) => (&mut head_extractor, head_limits),
                    Source::Block(bi, _) => match &mut extractors[*bi] {
                        Some((e, l)) => (e, *l),
                        None => continue,
                    },
                };
                self.for_each_profile(source, &mut ctx, |p, bytes| {
                    match encoding::decode_samples(&mut Reader::new(bytes), limits) {
                        Ok(samples) => profiles.push((
                            p.timestamp_ms,
                            Meta {
                                time_nanos: p.timestamp_ms.saturating_mul(1_000_000),
                                duration_nanos: p.duration_nanos,
                                period: p.period,
                                ..series_meta.clone()
                            },
                            extractor.samples(&mut tables, &samples),
                        )),
                        Err(e) => {
                            tracing::error!(series = %labels, timestamp_ms = p.timestamp_ms, error = %e, "undecodable profile; skipped")
                        }
                    }
                });
            }
            out.push((labels, profiles));
        }
        let tables = Arc::new(tables);
        out.into_iter()
            .map(|(labels, profiles)| SeriesProfiles {
                labels,
                profiles: profiles
                    .into_iter()
                    .map(|(t, meta, samples)| {
                        (
                            t,
                            Profile {
                                tables: Arc::clone(&tables),
                                meta,
                                samples,
                            },
                        )
                    })
                    .collect(),
            })
            .collect()
    }

    /// Merges every matching profile in range into one profile, without materializing them one
    /// by one (see [`Querier::merge_grouped`]). `None` if nothing matches; an error if the
    /// matching series have different sample or period types.
    pub fn merge(&self, matchers: &[Matcher]) -> Result<Option<Profile>, Error> {
        Ok(self
            .merge_grouped(matchers, |_| ())?
            .pop()
            .map(|g| g.profile))
    }

    /// Merges the matching profiles in range into one profile per group, the group of a series
    /// being `key(labels)`: the work behind `merge by (…)` and the implicit merge of a query.
    ///
    /// Nothing is materialized per profile: values are added per stored stack id first, and only
    /// the distinct stacks are copied into the result's tables, which all groups share. Those
    /// tables start as a copy of the largest source's (a block's or the head's), so they may hold
    /// symbols no sample uses. Groups come in the order of their first series by labels; groups
    /// with no profile in range are left out. An error if the series of one group have different
    /// sample or period types.
    ///
    /// Meta follows google/pprof's merge: the earliest time, the sum of durations, the largest
    /// period.
    pub fn merge_grouped<K: Eq + std::hash::Hash + Clone>(
        &self,
        matchers: &[Matcher],
        key: impl Fn(&Labels) -> K,
    ) -> Result<Vec<MergedGroup<K>>, Error> {
        let matched = self.matched(matchers);
        let mut index_of: FxHashMap<K, usize> = FxHashMap::default();
        let mut grouped: Vec<(K, Vec<MatchedSeries<'_>>)> = Vec::new();
        for (labels, sources) in &matched {
            let k = key(labels);
            let i = *index_of.entry(k.clone()).or_insert_with(|| {
                grouped.push((k, Vec::new()));
                grouped.len() - 1
            });
            grouped[i].1.push((labels, sources));
        }
        let block_tables = self.block_tables();
        // Origins are the blocks, then the head. Per origin: values by stack id (reused across
        // groups; `touched` lists the ids to read back and reset).
        let n_origins = self.blocks.len() + 1;
        let mut dense: Vec<Vec<i64>> = vec![Vec::new(); n_origins];
        let mut touched: Vec<Vec<u32>> = vec![Vec::new(); n_origins];
        let mut ctx = ReadCtx::new();
        // Per group: key, meta, profiles merged, and its samples per origin in that origin's ids.
        let mut summed: Vec<(K, Meta, usize, Vec<Samples>)> = Vec::with_capacity(grouped.len());
        for (k, series) in grouped {
            let mut labelled: Vec<FxHashMap<(StackId, LabelSetId), i64>> =
                vec![FxHashMap::default(); n_origins];
            let mut meta: Option<Meta> = None;
            let mut n_profiles = 0;
            for (labels, sources) in series {
                for source in sources {
                    let series_meta = self.source_meta(source);
                    let (origin, limits) = match source {
                        Source::Head(_) => (n_origins - 1, self.head.limits()),
                        Source::Block(bi, _) => match &block_tables[*bi] {
                            Some(t) => (*bi, IdLimits::of(t)),
                            None => continue,
                        },
                    };
                    let acc = &mut dense[origin];
                    if acc.is_empty() {
                        acc.resize(limits.n_stacks as usize, 0);
                    }
                    let touched = &mut touched[origin];
                    let lab = &mut labelled[origin];
                    let mut result = Ok(());
                    self.for_each_profile(source, &mut ctx, |p, bytes| {
                        if result.is_err() {
                            return;
                        }
                        result = merge_meta(&mut meta, &series_meta, p);
                        if result.is_err() {
                            return;
                        }
                        n_profiles += 1;
                        let decoded = encoding::for_each_sample(
                            &mut Reader::new(bytes),
                            limits,
                            |s, l, v| {
                                if l == LabelSetId::EMPTY {
                                    let slot = &mut acc[s.idx()];
                                    if *slot == 0 {
                                        touched.push(s.0);
                                    }
                                    *slot = slot.wrapping_add(v);
                                } else {
                                    let slot = lab.entry((s, l)).or_insert(0);
                                    *slot = slot.wrapping_add(v);
                                }
                            },
                        );
                        if let Err(e) = decoded {
                            tracing::error!(series = %labels, timestamp_ms = p.timestamp_ms, error = %e, "undecodable profile; skipped");
                        }
                    });
                    result?;
                }
            }
            let Some(meta) = meta else {
                continue;
            };
            let per_origin = (0..n_origins)
                .map(|origin| {
                    let mut samples = Samples::default();
                    let ids = &mut touched[origin];
                    // In stack-id order, as a dense scan would give; an id touched again after
                    // summing to zero appears twice and is read once.
                    ids.sort_unstable();
                    for &s in ids.iter() {
                        let v = std::mem::take(&mut dense[origin][s as usize]);
                        if v != 0 {
                            samples.stacks.push(StackId(s));
                            samples.labels.push(LabelSetId::EMPTY);
                            samples.values.push(v);
                        }
                    }
                    ids.clear();
                    for (&(s, l), &v) in &labelled[origin] {
                        samples.stacks.push(s);
                        samples.labels.push(l);
                        samples.values.push(v);
                    }
                    samples
                })
                .collect();
            summed.push((k, meta, n_profiles, per_origin));
        }
        let source_tables = |origin: usize| -> Option<&Tables> {
            if origin == n_origins - 1 {
                Some(&self.head.tables)
            } else {
                block_tables[origin].as_deref()
            }
        };
        // The result's tables start as a copy of the largest contributing origin's (a clone
        // costs far less than interning its stacks again); the other origins are imported.
        let base = (0..n_origins)
            .filter(|&o| summed.iter().any(|g| !g.3[o].is_empty()))
            .max_by_key(|&o| source_tables(o).map_or(0, Tables::n_stacks));
        let mut tables = base
            .and_then(source_tables)
            .map_or_else(Tables::new, Tables::clone);
        let mut extractors: Vec<Option<Extractor<'_>>> = (0..n_origins).map(|_| None).collect();
        let mut merged = Vec::with_capacity(summed.len());
        for (k, meta, n_profiles, per_origin) in summed {
            let mut out = MergeAcc::default();
            for (origin, samples) in per_origin.iter().enumerate() {
                if samples.is_empty() {
                    continue;
                }
                if Some(origin) == base {
                    out.add(samples);
                } else if let Some(source) = source_tables(origin) {
                    let extractor =
                        extractors[origin].get_or_insert_with(|| Extractor::new(source));
                    out.add(&extractor.samples(&mut tables, samples));
                }
            }
            merged.push((k, meta, n_profiles, out.finish()));
        }
        let tables = Arc::new(tables);
        Ok(merged
            .into_iter()
            .map(|(key, meta, n_profiles, samples)| MergedGroup {
                key,
                profile: Profile {
                    tables: Arc::clone(&tables),
                    meta,
                    samples,
                },
                n_profiles,
            })
            .collect())
    }

    /// The labels of the series that match all `matchers` and have profiles in range, sorted,
    /// without reading any profile. Cheap: use it to check limits before [`Querier::select`].
    pub fn series(&self, matchers: &[Matcher]) -> Vec<Labels> {
        self.matched(matchers).into_keys().collect()
    }

    /// Number of (stack, value) pairs the matching profiles in range hold: what a
    /// [`Querier::select`] would read.
    pub fn n_samples(&self, matchers: &[Matcher]) -> usize {
        self.matched(matchers)
            .values()
            .flatten()
            .flat_map(|s| self.headers(s))
            .map(|p| p.n_samples as usize)
            .sum()
    }

    /// The total (sum of values) of every matching profile in range, per series, without
    /// reading samples: what a metrics graph needs.
    pub fn totals(&self, matchers: &[Matcher]) -> Vec<SeriesTotals> {
        self.matched(matchers)
            .into_iter()
            .map(|(labels, sources)| SeriesTotals {
                labels,
                meta: self.source_meta(&sources[0]),
                points: sources
                    .iter()
                    .flat_map(|s| self.headers(s))
                    .map(|p| TotalPoint {
                        timestamp_ms: p.timestamp_ms,
                        total: p.total,
                        period: p.period,
                        duration_nanos: p.duration_nanos,
                    })
                    .collect(),
            })
            .collect()
    }

    /// For every block in range, the series that match and have profiles in range.
    fn within_blocks(&self, matchers: &[Matcher]) -> Vec<(&Arc<Block>, RoaringBitmap)> {
        self.blocks_in_range()
            .map(|(_, b)| {
                let within = self
                    .block_series(b, matchers)
                    .into_iter()
                    .map(|(i, _)| i)
                    .collect();
                (b, within)
            })
            .collect()
    }

    /// Label names of the matching series with profiles in range, sorted.
    pub fn label_names(&self, matchers: &[Matcher]) -> Vec<String> {
        let within = self
            .head
            .series_in_range(matchers, self.min_ms, self.max_ms);
        let mut out: BTreeSet<String> = self
            .head
            .postings
            .label_names(&within)
            .into_iter()
            .collect();
        for (b, within) in self.within_blocks(matchers) {
            b.label_names(&within, &mut out);
        }
        out.into_iter().collect()
    }

    /// Values of label `name` among the matching series with profiles in range, sorted.
    pub fn label_values(&self, name: &str, matchers: &[Matcher]) -> Vec<String> {
        let within = self
            .head
            .series_in_range(matchers, self.min_ms, self.max_ms);
        let mut out: BTreeSet<String> = self
            .head
            .postings
            .label_values(name, &within)
            .into_iter()
            .collect();
        for (b, within) in self.within_blocks(matchers) {
            b.label_values(name, &within, &mut out);
        }
        out.into_iter().collect()
    }
}

/// Folds one profile's meta into a merge's, google/pprof's way.
fn merge_meta(held: &mut Option<Meta>, series: &Meta, p: &BlockProfile) -> Result<(), Error> {
    let time_nanos = p.timestamp_ms.saturating_mul(1_000_000);
    match held {
        None => {
            *held = Some(Meta {
                time_nanos,
                duration_nanos: p.duration_nanos,
                period: p.period,
                ..series.clone()
            })
        }
        Some(m) => {
            if !m.compatible(series) {
                return Err(Error::IncompatibleProfiles {
                    left: format!("{} (period {})", m.sample_type, m.period_type),
                    right: format!("{} (period {})", series.sample_type, series.period_type),
                });
            }
            m.time_nanos = m.time_nanos.min(time_nanos);
            m.duration_nanos = m.duration_nanos.saturating_add(p.duration_nanos);
            m.period = m.period.max(p.period);
            for c in &series.comments {
                if !m.comments.contains(c) {
                    m.comments.push(c.clone());
                }
            }
        }
    }
    Ok(())
}

/// Sums values per (stack, labels) in the result's ids.
#[derive(Default)]
struct MergeAcc {
    row_of_stack: Vec<u32>,
    row_of_labelled: FxHashMap<(StackId, LabelSetId), u32>,
    samples: Samples,
}

impl MergeAcc {
    fn add(&mut self, s: &Samples) {
        for i in 0..s.len() {
            let (stack, labels) = (s.stacks[i], s.labels[i]);
            let rows = &mut self.samples;
            let mut new_row = || {
                rows.stacks.push(stack);
                rows.labels.push(labels);
                rows.values.push(0);
                (rows.values.len() - 1) as u32
            };
            let row = if labels == LabelSetId::EMPTY {
                if self.row_of_stack.len() <= stack.idx() {
                    self.row_of_stack.resize(stack.idx() + 1, u32::MAX);
                }
                let slot = &mut self.row_of_stack[stack.idx()];
                if *slot == u32::MAX {
                    *slot = new_row();
                }
                *slot
            } else {
                *self
                    .row_of_labelled
                    .entry((stack, labels))
                    .or_insert_with(new_row)
            };
            let v = &mut self.samples.values[row as usize];
            *v = v.wrapping_add(s.values[i]);
        }
    }

    fn finish(self) -> Samples {
        let s = self.samples;
        if s.values.iter().all(|&v| v != 0) {
            return s;
        }
        let keep: Vec<usize> = (0..s.len()).filter(|&i| s.values[i] != 0).collect();
        Samples {
            stacks: keep.iter().map(|&i| s.stacks[i]).collect(),
            labels: keep.iter().map(|&i| s.labels[i]).collect(),
            values: keep.iter().map(|&i| s.values[i]).collect(),
            diff_base: None,
        }
    }
}
