//! Reading: a [`Querier`] over a time range sees the blocks and the head together, series
//! found through each one's postings and joined by their labels.

mod answers;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, RwLockReadGuard};

use parca_profile::tables::{LabelSetId, StackId};
use parca_profile::{Extractor, Meta, Profile, Samples, Tables};
use roaring::RoaringBitmap;
use rustc_hash::FxHashMap;

use crate::block::{self, Block, SeriesEntry};
use crate::block_profile::BlockProfile;
use crate::encoding::{self, IdLimits, Reader};
use crate::head::Head;
use crate::labels::{Labels, Matcher};
use crate::peer::{PeerAnswer, PeerProfile, PeerRead, PeerRequest, PeerSeries, Plan};
use crate::remote::LazyBlock;
use crate::state::{BlockSet, Inner};
use crate::summary::{self, Part, StackSums};
use crate::{Error, postings};

pub use answers::{SeriesProfiles, SeriesSpans, SeriesTotals, SpanTotal, TotalPoint};

/// One group's profile from [`Querier::merge_grouped`].
#[derive(Debug, Clone)]
pub struct MergedGroup<K> {
    /// The group's key, as the caller's `key` function gave it.
    pub key: K,
    /// The merge of the group's profiles in range.
    pub profile: Profile,
    /// How many stored profiles were merged into it.
    pub n_profiles: usize,
    /// The merged profiles' headers, when a shard's answer is being built.
    pub(crate) headers: Vec<PeerProfile>,
}

/// A profile read out before the query's tables are frozen: time, meta, samples.
type ExtractedProfile = (i64, Meta, Samples);

/// A matched series and where its profiles lie.
type MatchedSeries<'m> = (&'m Labels, &'m Vec<Source>);

/// The matched series by `key`, groups in the order their first series comes.
fn group_by_key<'m, K: Eq + std::hash::Hash + Clone>(
    matched: &'m BTreeMap<Labels, Vec<Source>>,
    key: &impl Fn(&Labels) -> K,
) -> Vec<(K, Vec<MatchedSeries<'m>>)> {
    let mut index_of: FxHashMap<K, usize> = FxHashMap::default();
    let mut grouped: Vec<(K, Vec<MatchedSeries<'m>>)> = Vec::new();
    for (labels, sources) in matched {
        let k = key(labels);
        let i = *index_of.entry(k.clone()).or_insert_with(|| {
            grouped.push((k, Vec::new()));
            grouped.len() - 1
        });
        grouped[i].1.push((labels, sources));
    }
    grouped
}

/// A group's reads of one block: the entries of its series there, each with the times another
/// source counts instead, and the number of (stack, value) pairs they hold in range.
#[derive(Default)]
struct BlockReads<'s> {
    series: Vec<(&'s Labels, &'s SeriesEntry, &'s Hidden)>,
    pairs: u64,
}

/// Per block, each group's reads of it.
type ReadsPerBlock<'s> = Vec<Vec<BlockReads<'s>>>;

/// Pairs below which a merge sums its blocks on the calling thread alone (about 0.2 s of work):
/// below, the threads' extra work (each share's tables copied, its stacks brought into the
/// first share's) costs about what they save (measured: a day of one series, 4.4 M pairs, was
/// as fast either way; an hour of ten series slower on threads). The unit tests take every
/// merge of several blocks through the threads.
#[cfg(not(test))]
const PARALLEL_MIN_PAIRS: u64 = 1 << 23;
#[cfg(test)]
const PARALLEL_MIN_PAIRS: u64 = 1;

/// A group's samples, before they share one set of tables.
struct SummedGroup<K> {
    key: K,
    /// The labels of its first series (groups come in their order).
    first: Labels,
    sum: GroupSum,
    /// Its samples in the blocks, over the tables of their merge ([`BlockMerge`]).
    blocks: Samples,
    /// `[head, shard answers…]`, each in its origin's stack ids.
    per_origin: Vec<Samples>,
}

/// Where the head's samples are in [`SummedGroup::per_origin`]; the shards' answers follow.
const HEAD_ORIGIN: usize = 0;

/// The groups' samples in the blocks, over one set of tables (none when no block has any).
struct BlockMerge {
    tables: Option<Tables>,
    groups: Vec<Samples>,
}

impl BlockMerge {
    fn empty(n_groups: usize) -> Self {
        BlockMerge {
            tables: None,
            groups: vec![Samples::default(); n_groups],
        }
    }
}

/// Where a series' profiles lie: a block's series (with its index entry) or a head series, and
/// which of its profiles another source holds too and counts instead.
enum Source {
    Block(usize, Box<SeriesEntry>, Hidden),
    Head(u32, Hidden),
}

/// The times of a source's profiles that count in another source of the same series: a
/// profile is its series and its time, stored once however many blocks (imports, pushes past
/// the out-of-order window) and the head hold it. Sorted; empty unless sources overlap.
#[derive(Debug, Default)]
struct Hidden(Vec<i64>);

impl Hidden {
    fn hides(&self, timestamp_ms: i64) -> bool {
        !self.0.is_empty() && self.0.binary_search(&timestamp_ms).is_ok()
    }
}

/// A read view of the store over a time range: blocks and head.
///
/// It holds no lock while it lives. Each read takes the head's read lock only while it reads
/// the head, one series at a time for the reads that decode samples, so appends go on between
/// (a query never stalls a push or a scrape for longer than one series takes). It reads the
/// block set it started with (compaction and retention never pull blocks from under it); if a
/// cut replaced the head meanwhile, the read starts again on the new head and blocks.
///
/// Every read returns a `Result`: a block whose data cannot be read fails the read with an
/// error naming the block and the file, never a quietly smaller answer.
pub struct Querier<'a> {
    inner: &'a Inner,
    view: Mutex<View>,
    min_ms: i64,
    max_ms: i64,
    /// Whether to read blocks of an object store too ([`crate::Db::set_remote_blocks`]).
    local_only: bool,
    /// The shards read beside this store, and how the window splits between them and the
    /// bucket ([`crate::Db::set_peers`]).
    peers: Option<(Arc<dyn crate::Peers>, Plan)>,
    /// What a read could not cover (a shard down), for the answer's warnings.
    warnings: Mutex<Vec<String>>,
    /// Matchers on per-sample span attributes ([`Querier::with_span_matchers`]).
    spans: Option<SpanMatchers>,
    /// The coarsest summaries reads may use ([`Querier::with_summaries`]); 0 for none.
    summaries_ms: i64,
}

/// Matchers on the span attributes of samples (`span_id`, `trace_id`, …): a sample is kept when
/// every matcher matches its span's value of the matcher's name, the empty value for a name it
/// does not have, as for series labels.
#[derive(Debug, Clone)]
pub(crate) struct SpanMatchers(Vec<Matcher>);

impl encoding::SpanSelect for SpanMatchers {
    fn keeps(&self, section: &encoding::SpanSection, g: usize) -> bool {
        self.0.iter().all(|m| m.matches(section.value(g, &m.name)))
    }

    fn keeps_unspanned(&self) -> bool {
        self.0.iter().all(|m| m.matches(""))
    }
}

/// What a [`Querier`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reach {
    /// The head and the blocks on disk: what a shard answers for.
    OwnStore,
    /// Those, and the object store's blocks (whole, unclamped): no shard is asked.
    OwnStoreAndBucket,
    /// Those, and the shards ([`crate::Db::set_peers`]), each read for its own part.
    Everything,
}

/// The blocks and the head generation that a read sees, taken together.
#[derive(Clone)]
pub(crate) struct View {
    /// The blocks on disk.
    blocks: BlockSet,
    /// The object store's blocks, opened by a read as it needs them.
    remote: Arc<Vec<LazyBlock>>,
    generation: u64,
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
    fn seen(&self) -> std::collections::HashSet<&str> {
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
enum Fault {
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
struct Read<'q> {
    inner: &'q Inner,
    /// The querier's span selection.
    spans: Option<&'q SpanMatchers>,
    /// The coarsest summaries this read may use; 0 for none.
    summaries_ms: i64,
    blocks: BlockSet,
    /// Per block: the last time read from it (`max_ms`, or earlier for a shard's block in the
    /// bucket whose later profiles the shard answers for).
    block_max: Vec<i64>,
    generation: u64,
    min_ms: i64,
    max_ms: i64,
}

/// Empty tables for an extractor of the head between two holds of its lock.
fn no_tables() -> &'static Tables {
    static EMPTY: std::sync::OnceLock<Tables> = std::sync::OnceLock::new();
    EMPTY.get_or_init(Tables::new)
}

impl<'a> Querier<'a> {
    pub(crate) fn new(inner: &'a Inner, min_ms: i64, max_ms: i64, reach: Reach) -> Self {
        let local_only = reach == Reach::OwnStore;
        let view = View::of(inner, local_only);
        let peers = if reach != Reach::Everything {
            None
        } else {
            inner.peers().map(|peers| {
                let plan = Plan::new(
                    peers.stores(),
                    view.remote.iter().map(|b| (b.name(), b.external_labels())),
                    &view.seen(),
                    min_ms,
                    max_ms,
                );
                (peers, plan)
            })
        };
        let warnings = peers
            .as_ref()
            .map(|(_, plan)| plan.warnings.clone())
            .unwrap_or_default();
        Querier {
            inner,
            view: Mutex::new(view),
            min_ms,
            max_ms,
            local_only,
            peers,
            warnings: Mutex::new(warnings),
            spans: None,
            summaries_ms: 0,
        }
    }

    /// The same querier reading blocks' summaries ([`crate::SUMMARY_RESOLUTIONS_MS`]) of
    /// resolution up to `max_resolution_ms` where they cover whole windows of its range: a
    /// summary stands for the profiles of one series in one window, `(end - resolution, end]`,
    /// with their samples, durations and totals summed; it reads as one profile at the
    /// window's end ([`TotalPoint::latest_total`] keeps its latest profile's total).
    ///
    /// Merges read the same samples and totals as without summaries (only the merged
    /// profile's time may be a window's end rather than its first profile's). For
    /// [`Querier::totals`] (a metrics graph) and [`Querier::select`], a window's profiles read
    /// as one: use a resolution that the steps, their start and their reach are multiples of,
    /// and every step holds whole windows. Ignored by reads with span matchers, and for blocks
    /// that overlap another block or the head.
    pub fn with_summaries(mut self, max_resolution_ms: i64) -> Self {
        self.summaries_ms = max_resolution_ms.max(0);
        self
    }

    /// The same querier reading only the samples whose span attributes match all `matchers`
    /// (names the producer stored per sample, such as `span_id` and `trace_id`; see
    /// `parca_profile::SampleSpans`): in [`Querier::select`] and the merges. Series are still
    /// selected by the other matchers alone, and [`Querier::totals`] still counts whole
    /// profiles. Shards are not asked for such a read (their wire format carries no span
    /// selection): with shards configured, the answer covers this store and the bucket, and
    /// says so in [`Querier::warnings`]. An empty list selects nothing more.
    pub fn with_span_matchers(mut self, matchers: Vec<Matcher>) -> Self {
        if matchers.is_empty() {
            return self;
        }
        if let Some((_, plan)) = self.peers.take()
            && !plan.asks.is_empty()
        {
            self.warnings.lock().expect("warnings lock poisoned").push(
                "a selection by span reads this store and the bucket only: shards were not asked"
                    .to_owned(),
            );
        }
        self.spans = Some(SpanMatchers(matchers));
        self
    }

    /// What the reads so far could not cover: shards that could not be read, each named with
    /// what is missing. Empty for a whole answer.
    pub fn warnings(&self) -> Vec<String> {
        self.warnings
            .lock()
            .expect("warnings lock poisoned")
            .clone()
    }

    /// Runs `read` over the querier's view, again over a fresh view as long as a cut
    /// replaced the head under it (a cut happens once per block duration).
    fn attempt<T>(&self, read: impl Fn(&Read<'_>) -> Result<T, Fault>) -> Result<T, Error> {
        let summaries_ms = if self.spans.is_some() {
            0
        } else {
            self.summaries_ms
        };
        self.attempt_with(summaries_ms, read)
    }

    /// [`Querier::attempt`] reading summaries up to `summaries_ms`.
    fn attempt_with<T>(
        &self,
        summaries_ms: i64,
        read: impl Fn(&Read<'_>) -> Result<T, Fault>,
    ) -> Result<T, Error> {
        loop {
            let view = self.view.lock().expect("view lock poisoned").clone();
            let clamps = self.peers.as_ref().map(|(_, plan)| &plan.clamps);
            let blocks = view.readable(self.min_ms, self.max_ms, clamps)?;
            let block_max = blocks
                .iter()
                .map(|b| match clamps.and_then(|c| c.get(b.name())) {
                    Some(&from) => self.max_ms.min(from.saturating_sub(1)),
                    None => self.max_ms,
                })
                .collect();
            let attempt = Read {
                inner: self.inner,
                spans: self.spans.as_ref(),
                summaries_ms,
                blocks,
                block_max,
                generation: view.generation,
                min_ms: self.min_ms,
                max_ms: self.max_ms,
            };
            match read(&attempt) {
                Ok(v) => return Ok(v),
                Err(Fault::Store(e)) => return Err(e),
                Err(Fault::Stale) => {
                    *self.view.lock().expect("view lock poisoned") =
                        View::of(self.inner, self.local_only);
                }
            }
        }
    }

    /// The shards' answers for `read` over their part of the window; a shard that does not
    /// answer adds a warning.
    fn ask_peers(&self, read: PeerRead, matchers: &[Matcher]) -> Vec<PeerAnswer> {
        let Some((peers, plan)) = &self.peers else {
            return Vec::new();
        };
        if plan.asks.is_empty() {
            return Vec::new();
        }
        let asks: Vec<(usize, PeerRequest)> = plan
            .asks
            .iter()
            .map(|&(store, from)| {
                (
                    store,
                    PeerRequest {
                        read,
                        matchers: matchers.to_vec(),
                        min_ms: from,
                        max_ms: self.max_ms,
                    },
                )
            })
            .collect();
        let mut answers = Vec::with_capacity(asks.len());
        for answer in peers.read(&asks) {
            match answer {
                Ok(a) => answers.push(a),
                Err(why) => self
                    .warnings
                    .lock()
                    .expect("warnings lock poisoned")
                    .push(why),
            }
        }
        answers
    }

    /// This store's part of a querier's read ([`PeerRequest`]): its head and local blocks, never
    /// the bucket (the querier reads that itself). Use on a querier from
    /// [`crate::Db::local_querier`].
    pub fn peer_answer(&self, read: PeerRead, matchers: &[Matcher]) -> Result<PeerAnswer, Error> {
        self.attempt(|r| r.peer_answer(read, matchers))
    }

    /// The series that match all `matchers` and have profiles in range, with those profiles,
    /// series sorted by labels. All returned profiles share one set of tables holding only
    /// what they use, so merging them is an array add.
    pub fn select(&self, matchers: &[Matcher]) -> Result<Vec<SeriesProfiles>, Error> {
        let peers = self.ask_peers(PeerRead::Select, matchers);
        self.attempt(|r| r.select(matchers, &peers))
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
        let peers = self.ask_peers(PeerRead::Merge, matchers);
        self.attempt(|r| r.merge_grouped(matchers, &key, &peers, false))
    }

    /// Per series matching all `matchers` (sorted by labels; those without a span in range are
    /// left out), its `per_series` largest spans in range by value (of the spans
    /// [`Querier::with_span_matchers`] selects, if any), each as its part of one stored profile:
    /// what exemplars of a series show. Reads each profile's span section and values only.
    /// Shards are not asked.
    pub fn largest_spans(
        &self,
        matchers: &[Matcher],
        per_series: usize,
    ) -> Result<Vec<SeriesSpans>, Error> {
        self.attempt(|r| r.largest_spans(matchers, per_series))
    }

    /// The labels of the series that match all `matchers` and have profiles in range, sorted,
    /// without reading any profile. Cheap: use it to check limits before [`Querier::select`].
    pub fn series(&self, matchers: &[Matcher]) -> Result<Vec<Labels>, Error> {
        let peers = self.ask_peers(PeerRead::Series, matchers);
        // Whether a series has a profile in range, its summaries tell as well as its profiles.
        let mut out: Vec<Labels> =
            self.attempt_with(i64::MAX, |r| Ok(r.matched(matchers)?.into_keys().collect()))?;
        if !peers.is_empty() {
            out.extend(peers.into_iter().flat_map(|a| a.series).map(|s| s.labels));
            out.sort();
            out.dedup();
        }
        Ok(out)
    }

    /// Number of (stack, value) pairs the matching profiles in range hold: what a
    /// [`Querier::select`] would read from this store (shards check their own limits).
    pub fn n_samples(&self, matchers: &[Matcher]) -> Result<usize, Error> {
        self.attempt(|r| {
            let matched = r.matched(matchers)?;
            let head = r.head()?;
            let mut n = 0usize;
            for source in matched.values().flatten() {
                r.for_each_header(&head, source, |p| n += p.n_samples as usize);
            }
            Ok(n)
        })
    }

    /// The total (sum of values) of every matching profile in range, per series, without
    /// reading samples: what a metrics graph needs.
    pub fn totals(&self, matchers: &[Matcher]) -> Result<Vec<SeriesTotals>, Error> {
        let peers = self.ask_peers(PeerRead::Totals, matchers);
        let local = self.attempt(|r| r.totals(matchers))?;
        if peers.is_empty() {
            return Ok(local);
        }
        let mut by_labels: BTreeMap<Labels, SeriesTotals> =
            local.into_iter().map(|s| (s.labels.clone(), s)).collect();
        for s in peers.into_iter().flat_map(|a| a.series) {
            let entry = by_labels
                .entry(s.labels.clone())
                .or_insert_with(|| SeriesTotals {
                    labels: s.labels,
                    meta: s.meta,
                    points: Vec::new(),
                });
            entry.points.extend(s.profiles.iter().map(|p| p.point));
        }
        Ok(by_labels
            .into_values()
            .map(|mut s| {
                s.points.sort_by_key(|p| p.timestamp_ms);
                s
            })
            .collect())
    }

    /// Label names of the matching series with profiles in range, sorted.
    pub fn label_names(&self, matchers: &[Matcher]) -> Result<Vec<String>, Error> {
        let peers = self.ask_peers(PeerRead::Series, matchers);
        let local = self.attempt(|r| {
            let mut out: BTreeSet<String> = {
                let head = r.head()?;
                let within = head.series_in_range(matchers, r.min_ms, r.max_ms);
                head.postings.label_names(&within).into_iter().collect()
            };
            for (b, within) in r.within_blocks(matchers)? {
                b.label_names(&within, &mut out)?;
            }
            Ok(out)
        })?;
        Ok(with_peer_labels(local, &peers, |l, out| {
            out.extend(l.iter().map(|l| l.name.clone()));
        }))
    }

    /// Values of label `name` among the matching series with profiles in range, sorted.
    pub fn label_values(&self, name: &str, matchers: &[Matcher]) -> Result<Vec<String>, Error> {
        let peers = self.ask_peers(PeerRead::Series, matchers);
        let local = self.attempt(|r| {
            let mut out: BTreeSet<String> = {
                let head = r.head()?;
                let within = head.series_in_range(matchers, r.min_ms, r.max_ms);
                head.postings
                    .label_values(name, &within)
                    .into_iter()
                    .collect()
            };
            for (b, within) in r.within_blocks(matchers)? {
                b.label_values(name, &within, &mut out)?;
            }
            Ok(out)
        })?;
        Ok(with_peer_labels(local, &peers, |l, out| {
            out.extend(l.get(name).map(str::to_owned));
        }))
    }
}

/// `local` with what `each` takes from the labels of the shards' series, sorted.
fn with_peer_labels(
    mut local: BTreeSet<String>,
    peers: &[PeerAnswer],
    each: impl Fn(&Labels, &mut BTreeSet<String>),
) -> Vec<String> {
    for s in peers.iter().flat_map(|a| &a.series) {
        each(&s.labels, &mut local);
    }
    local.into_iter().collect()
}

impl Read<'_> {
    /// The head, read-locked, as long as no cut replaced it since the view was taken.
    fn head(&self) -> Result<RwLockReadGuard<'_, Head>, Fault> {
        let head = self.inner.head.read().expect("head lock poisoned");
        if head.generation == self.generation {
            Ok(head)
        } else {
            Err(Fault::Stale)
        }
    }

    /// Whether a profile of block `bi` at `t` is in range.
    fn in_block_range(&self, bi: usize, t: i64) -> bool {
        (self.min_ms..=self.block_max[bi]).contains(&t)
    }

    /// Blocks whose time range meets the query's, with their index in the set.
    fn blocks_in_range(&self) -> impl Iterator<Item = (usize, &Arc<Block>)> {
        self.blocks.iter().enumerate().filter(|(bi, b)| {
            b.meta.max_time_ms > self.min_ms
                && b.meta.min_time_ms <= self.block_max[*bi]
                && self.min_ms <= self.block_max[*bi]
        })
    }

    /// Series of block `bi` selected by `matchers` with profiles in range.
    fn block_series(
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
    fn stored_series(&self, bi: usize, i: u32) -> Result<Option<SeriesEntry>, Error> {
        let b = &self.blocks[bi];
        let e = b.series_entry(i).map_err(|e| b.index_corrupt(e))?;
        Ok(e.has_profiles_in(self.min_ms, self.block_max[bi])
            .then_some(e))
    }

    /// For every block in range, the series that match and have profiles in range.
    fn within_blocks(
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
    fn matched(&self, matchers: &[Matcher]) -> Result<BTreeMap<Labels, Vec<Source>>, Fault> {
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
    fn summarized_blocks(&self) -> Result<Vec<bool>, Fault> {
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
    fn summarized_series(
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
    fn hide_duplicates(&self, sources: &mut [Source], head_min_valid_ms: i64, summarized: &[bool]) {
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

    fn source_meta(&self, head: &Head, source: &Source) -> Meta {
        match source {
            Source::Block(_, e, _) => e.meta.clone(),
            Source::Head(s, _) => head.series[*s as usize].meta.clone(),
        }
    }

    /// Calls `each` with the header of every profile of a source in range (those that count
    /// in it).
    fn for_each_header(&self, head: &Head, source: &Source, mut each: impl FnMut(&BlockProfile)) {
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
    fn counts(&self, bi: usize, hidden: &Hidden, t: i64) -> bool {
        self.in_block_range(bi, t) && !hidden.hides(t)
    }

    /// Calls `each(header, encoded samples)` for every profile in range of a block's series
    /// that counts in it (not `hidden`).
    fn for_each_block_profile(
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
    fn decode(&self, bytes: &[u8], limits: IdLimits) -> Result<Samples, encoding::DecodeError> {
        let mut r = Reader::new(bytes);
        match self.spans {
            None => encoding::decode_samples(&mut r, limits),
            Some(select) => encoding::decode_selected(&mut r, limits, select),
        }
    }

    /// The tables of every block in range (index = block index; `None` out of range).
    fn block_tables(&self) -> Result<Vec<Option<Arc<Tables>>>, Error> {
        let mut out = vec![None; self.blocks.len()];
        for (bi, b) in self.blocks_in_range() {
            out[bi] = Some(b.tables()?);
        }
        Ok(out)
    }

    fn select(
        &self,
        matchers: &[Matcher],
        peers: &[PeerAnswer],
    ) -> Result<Vec<SeriesProfiles>, Fault> {
        let matched = self.matched(matchers)?;
        let block_tables = self.block_tables()?;
        let mut extractors: Vec<Option<(Extractor<'_>, IdLimits)>> = block_tables
            .iter()
            .map(|t| t.as_deref().map(|t| (Extractor::new(t), IdLimits::of(t))))
            .collect();
        // The head's extractor keeps its memo between holds of the head's lock.
        let mut head_extractor = Extractor::new(no_tables());
        let mut tables = Tables::new();
        let mut chunks = block::ChunkReader::new(&self.inner.dir, self.blocks.len())?;
        let mut out: Vec<(Labels, Vec<ExtractedProfile>)> = Vec::new();
        for (labels, sources) in matched {
            let mut profiles = Vec::new();
            for source in &sources {
                match source {
                    Source::Block(bi, e, hidden) => {
                        let (extractor, limits) = extractors[*bi]
                            .as_mut()
                            .expect("tables of every block in range");
                        let b = &self.blocks[*bi];
                        self.for_each_block_profile(*bi, e, hidden, &mut chunks, |p, bytes| {
                            let samples = self
                                .decode(bytes, *limits)
                                .map_err(|err| corrupt_profile(b, &labels, p, err))?;
                            profiles.push((
                                p.timestamp_ms,
                                profile_meta(&e.meta, p),
                                extractor.samples(&mut tables, &samples),
                            ));
                            Ok(())
                        })?;
                    }
                    Source::Head(s, hidden) => {
                        let head = self.head()?;
                        let mut extractor = head_extractor.rebind(&head.tables);
                        let limits = head.limits();
                        let series = &head.series[*s as usize];
                        for p in series.in_range(self.min_ms, self.max_ms) {
                            if hidden.hides(p.timestamp_ms) {
                                continue;
                            }
                            let samples = self
                                .decode(&p.data, limits)
                                .map_err(|err| head_corrupt(&labels, p.timestamp_ms, err))?;
                            profiles.push((
                                p.timestamp_ms,
                                profile_meta(&series.meta, &BlockProfile::from(p)),
                                extractor.samples(&mut tables, &samples),
                            ));
                        }
                        head_extractor = extractor.rebind(no_tables());
                    }
                }
            }
            // Sources that overlap in time (imported blocks) interleave.
            if !profiles.windows(2).all(|w| w[0].0 < w[1].0) {
                profiles.sort_by_key(|p| p.0);
            }
            out.push((labels, profiles));
        }
        if !peers.is_empty() {
            out = with_peer_profiles(out, peers, &mut tables);
        }
        let tables = Arc::new(tables);
        Ok(out
            .into_iter()
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
            .collect())
    }

    /// Merges the matched series per `key`: group the series and fold their headers; merge
    /// each group's samples of the blocks into one set of tables ([`Read::merge_blocks`]);
    /// then add the head's and the shards' (`peers`, each one series per group) samples to
    /// them. With `headers`, each group keeps its profiles' headers (for a shard's answer).
    fn merge_grouped<K: Eq + std::hash::Hash + Clone>(
        &self,
        matchers: &[Matcher],
        key: &impl Fn(&Labels) -> K,
        peers: &[PeerAnswer],
        headers: bool,
    ) -> Result<Vec<MergedGroup<K>>, Fault> {
        let matched = self.matched(matchers)?;
        let grouped = group_by_key(&matched, key);
        let block_tables = self.block_tables()?;
        let (mut summed, reads) = self.fold_groups(grouped, headers)?;
        let blocks = self.merge_blocks(&reads, &block_tables, summed.len())?;
        for (group, samples) in summed.iter_mut().zip(blocks.groups) {
            group.blocks = samples;
        }
        if !peers.is_empty() {
            add_peer_groups(&mut summed, peers, key, 1)?;
        }
        self.over_shared_tables(summed, blocks.tables, peers)
    }

    /// Per group: its profiles' headers folded (meta, count) in the series' order, and its
    /// samples in the head summed; per block, each group's reads of it. Groups with no
    /// profile in range are left out.
    fn fold_groups<'m, K>(
        &self,
        grouped: Vec<(K, Vec<MatchedSeries<'m>>)>,
        headers: bool,
    ) -> Result<(Vec<SummedGroup<K>>, ReadsPerBlock<'m>), Fault> {
        let n_blocks = self.blocks.len();
        let mut head_sums = StackSums::default();
        let mut summed = Vec::with_capacity(grouped.len());
        let mut reads: ReadsPerBlock<'m> = (0..n_blocks).map(|_| Vec::new()).collect();
        for (key, series) in grouped {
            let mut group = GroupSum {
                headers: headers.then(Vec::new),
                ..GroupSum::default()
            };
            let first = series[0].0.clone();
            let mut group_reads: Vec<BlockReads<'m>> =
                (0..n_blocks).map(|_| BlockReads::default()).collect();
            for (labels, sources) in series {
                for source in sources {
                    match source {
                        Source::Block(bi, e, hidden) => {
                            let read = &mut group_reads[*bi];
                            for p in &e.profiles {
                                if self.counts(*bi, hidden, p.timestamp_ms) {
                                    group.fold(&e.meta, p)?;
                                    read.pairs += u64::from(p.n_samples);
                                }
                            }
                            read.series.push((labels, &**e, hidden));
                        }
                        Source::Head(s, hidden) => {
                            // One series per hold of the lock: appends go on in between.
                            let head = self.head()?;
                            let limits = head.limits();
                            let series = &head.series[*s as usize];
                            for p in series.in_range(self.min_ms, self.max_ms) {
                                if hidden.hides(p.timestamp_ms) {
                                    continue;
                                }
                                group.fold(&series.meta, &BlockProfile::from(p))?;
                                head_sums
                                    .add_encoded(&p.data, limits, self.spans)
                                    .map_err(|err| head_corrupt(labels, p.timestamp_ms, err))?;
                            }
                        }
                    }
                }
            }
            let head = head_sums.take();
            if group.meta.is_some() {
                for (block, read) in reads.iter_mut().zip(group_reads) {
                    block.push(read);
                }
                summed.push(SummedGroup {
                    key,
                    first,
                    sum: group,
                    blocks: Samples::default(),
                    per_origin: vec![head],
                });
            }
        }
        Ok((summed, reads))
    }

    /// The groups' samples in every block (`reads[block][group]`) over one set of tables: on
    /// this thread when they are few; else the blocks are shared among up to one thread per
    /// core (the largest first, each to the least loaded share: the same shares every time),
    /// each share merged over a copy of its largest block's tables, then the shares into the
    /// first.
    fn merge_blocks(
        &self,
        reads: &ReadsPerBlock<'_>,
        block_tables: &[Option<Arc<Tables>>],
        n_groups: usize,
    ) -> Result<BlockMerge, Error> {
        let mut load: Vec<(usize, u64)> = reads
            .iter()
            .enumerate()
            .filter(|(_, groups)| groups.iter().any(|read| !read.series.is_empty()))
            .map(|(bi, groups)| (bi, groups.iter().map(|read| read.pairs).sum()))
            .collect();
        let pairs: u64 = load.iter().map(|&(_, pairs)| pairs).sum();
        let threads = std::thread::available_parallelism()
            .map_or(1, usize::from)
            .min(load.len());
        let mut chunks = block::ChunkReader::new(&self.inner.dir, self.blocks.len())?;
        if pairs < PARALLEL_MIN_PAIRS || threads < 2 {
            let all: Vec<usize> = load.iter().map(|&(bi, _)| bi).collect();
            return self.merge_share(&all, reads, block_tables, n_groups, &mut chunks);
        }
        load.sort_by_key(|&(bi, pairs)| (std::cmp::Reverse(pairs), bi));
        let mut shares: Vec<(u64, Vec<usize>)> = vec![(0, Vec::new()); threads];
        for (bi, pairs) in load {
            if let Some(share) = shares.iter_mut().min_by_key(|(load, _)| *load) {
                share.0 += pairs;
                share.1.push(bi);
            }
        }
        for (_, blocks) in &mut shares {
            blocks.sort_unstable();
        }
        let partials = std::thread::scope(|scope| {
            let helpers: Vec<_> = shares[1..]
                .iter()
                .map(|(_, blocks)| {
                    scope.spawn(move || {
                        let mut chunks =
                            block::ChunkReader::new(&self.inner.dir, self.blocks.len())?;
                        self.merge_share(blocks, reads, block_tables, n_groups, &mut chunks)
                    })
                })
                .collect();
            let mut partials =
                vec![self.merge_share(&shares[0].1, reads, block_tables, n_groups, &mut chunks)];
            partials.extend(helpers.into_iter().map(|h| {
                h.join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            }));
            partials
        });
        let mut partials = partials
            .into_iter()
            .collect::<Result<Vec<_>, _>>()?
            .into_iter()
            .filter_map(|p| Some((p.tables?, p.groups)));
        let Some((mut tables, first)) = partials.next() else {
            return Ok(BlockMerge::empty(n_groups));
        };
        let mut accs: Vec<MergeAcc> = first.iter().map(MergeAcc::of).collect();
        for (source, groups) in partials {
            let mut extractor = Extractor::new(&source);
            for (acc, samples) in accs.iter_mut().zip(&groups) {
                if !samples.is_empty() {
                    acc.add(&extractor.samples(&mut tables, samples));
                }
            }
        }
        Ok(BlockMerge {
            tables: Some(tables),
            groups: accs.into_iter().map(MergeAcc::finish).collect(),
        })
    }

    /// The groups' samples in `blocks` (in block order) over one set of tables: each block's
    /// sums in its own ids, then brought into a copy of the largest contributing block's
    /// tables (a copy costs far less than interning its stacks again).
    fn merge_share(
        &self,
        blocks: &[usize],
        reads: &ReadsPerBlock<'_>,
        block_tables: &[Option<Arc<Tables>>],
        n_groups: usize,
        chunks: &mut block::ChunkReader,
    ) -> Result<BlockMerge, Error> {
        let source = |bi: usize| block_tables[bi].as_deref().expect("block in range");
        let mut sums = StackSums::default();
        let mut per_block: Vec<(usize, Vec<Samples>)> = Vec::with_capacity(blocks.len());
        for &bi in blocks {
            let mut groups = Vec::with_capacity(n_groups);
            for read in &reads[bi] {
                self.sum_block(bi, read, source(bi), &mut sums, chunks)?;
                groups.push(sums.take());
            }
            per_block.push((bi, groups));
        }
        let Some(base) = per_block
            .iter()
            .filter(|(_, groups)| groups.iter().any(|s| !s.is_empty()))
            .max_by_key(|(bi, _)| source(*bi).n_stacks())
            .map(|(bi, _)| *bi)
        else {
            return Ok(BlockMerge::empty(n_groups));
        };
        let mut tables = source(base).clone();
        let mut extractors: Vec<Option<Extractor<'_>>> = per_block.iter().map(|_| None).collect();
        let mut groups = Vec::with_capacity(n_groups);
        for g in 0..n_groups {
            let mut out = MergeAcc::default();
            for ((bi, sums), extractor) in per_block.iter().zip(&mut extractors) {
                let samples = &sums[g];
                if samples.is_empty() {
                    continue;
                }
                if *bi == base {
                    out.add(samples);
                } else {
                    let extractor = extractor.get_or_insert_with(|| Extractor::new(source(*bi)));
                    out.add(&extractor.samples(&mut tables, samples));
                }
            }
            groups.push(out.finish());
        }
        Ok(BlockMerge {
            tables: Some(tables),
            groups,
        })
    }

    /// Sums block `bi`'s samples of the series in `read` (in the block's ids, `tables`) into
    /// `sums`.
    fn sum_block(
        &self,
        bi: usize,
        read: &BlockReads<'_>,
        tables: &Tables,
        sums: &mut StackSums,
        chunks: &mut block::ChunkReader,
    ) -> Result<(), Error> {
        let limits = IdLimits::of(tables);
        let b = &self.blocks[bi];
        for &(labels, e, hidden) in &read.series {
            self.for_each_block_profile(bi, e, hidden, chunks, |p, bytes| {
                sums.add_encoded(bytes, limits, self.spans)
                    .map_err(|err| corrupt_profile(b, labels, p, err))
            })?;
        }
        Ok(())
    }

    /// The groups' profiles over one set of tables: the blocks' (`blocks_tables`, over which
    /// each group's `blocks` samples are), else a copy of the largest contributing origin's,
    /// into which the head's and the shards' stacks are imported.
    fn over_shared_tables<K>(
        &self,
        summed: Vec<SummedGroup<K>>,
        blocks_tables: Option<Tables>,
        peers: &[PeerAnswer],
    ) -> Result<Vec<MergedGroup<K>>, Fault> {
        let n_origins = 1 + peers.len();
        let contributes = |origin: usize| summed.iter().any(|g| !g.per_origin[origin].is_empty());
        // The head's tables are read once more, under one hold of its lock; they only grew.
        let head = if contributes(HEAD_ORIGIN) {
            Some(self.head()?)
        } else {
            None
        };
        let source_tables = |origin: usize| -> Option<&Tables> {
            if origin == HEAD_ORIGIN {
                head.as_deref().map(|h| &h.tables)
            } else {
                Some(&peers[origin - 1].tables)
            }
        };
        let (mut tables, base) = match blocks_tables {
            Some(tables) => (tables, None),
            None => {
                let base = (0..n_origins)
                    .filter(|&o| contributes(o))
                    .max_by_key(|&o| source_tables(o).map_or(0, Tables::n_stacks));
                let tables = base
                    .and_then(source_tables)
                    .map_or_else(Tables::new, Tables::clone);
                (tables, base)
            }
        };
        let mut extractors: Vec<Option<Extractor<'_>>> = (0..n_origins).map(|_| None).collect();
        let mut merged = Vec::with_capacity(summed.len());
        for group in summed {
            let mut out = MergeAcc::of(&group.blocks);
            for (origin, samples) in group.per_origin.iter().enumerate() {
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
            merged.push((group.key, group.sum, out.finish()));
        }
        drop(extractors);
        drop(head);
        let tables = Arc::new(tables);
        Ok(merged
            .into_iter()
            .map(|(key, sum, samples)| MergedGroup {
                key,
                profile: Profile {
                    tables: Arc::clone(&tables),
                    meta: sum.meta.expect("a summed group has a profile"),
                    samples,
                },
                n_profiles: sum.n_profiles,
                headers: sum.headers.unwrap_or_default(),
            })
            .collect())
    }

    fn largest_spans(
        &self,
        matchers: &[Matcher],
        per_series: usize,
    ) -> Result<Vec<SeriesSpans>, Fault> {
        use std::cmp::Reverse;
        use std::collections::BinaryHeap;
        let matched = self.matched(matchers)?;
        let mut chunks = block::ChunkReader::new(&self.inner.dir, self.blocks.len())?;
        let mut out = Vec::new();
        for (labels, sources) in matched {
            // The largest so far (value, time, attributes), smallest on top; of equal values
            // the earlier span stays.
            type Candidate = (i64, Reverse<i64>, Vec<(String, String)>);
            let mut heap: BinaryHeap<Reverse<Candidate>> = BinaryHeap::new();
            let mut add = |t: i64, bytes: &[u8]| {
                encoding::for_each_span_total(&mut Reader::new(bytes), self.spans, |s, g, v| {
                    let key = (v, Reverse(t));
                    if heap.len() == per_series
                        && heap
                            .peek()
                            .is_some_and(|Reverse(min)| (min.0, min.1) >= key)
                    {
                        return;
                    }
                    let attributes = s
                        .names
                        .iter()
                        .zip(&s.groups[g].1)
                        .filter(|(_, v)| !v.is_empty())
                        .map(|(n, v)| (n.clone(), v.clone()))
                        .collect();
                    heap.push(Reverse((v, Reverse(t), attributes)));
                    if heap.len() > per_series {
                        heap.pop();
                    }
                })
            };
            for source in &sources {
                match source {
                    Source::Block(bi, e, hidden) => {
                        let b = &self.blocks[*bi];
                        self.for_each_block_profile(*bi, e, hidden, &mut chunks, |p, bytes| {
                            add(p.timestamp_ms, bytes)
                                .map_err(|err| corrupt_profile(b, &labels, p, err))
                        })?;
                    }
                    Source::Head(s, hidden) => {
                        let head = self.head()?;
                        for p in head.series[*s as usize].in_range(self.min_ms, self.max_ms) {
                            if hidden.hides(p.timestamp_ms) {
                                continue;
                            }
                            add(p.timestamp_ms, &p.data)
                                .map_err(|err| head_corrupt(&labels, p.timestamp_ms, err))?;
                        }
                    }
                }
            }
            if per_series == 0 || heap.is_empty() {
                continue;
            }
            let mut spans: Vec<SpanTotal> = heap
                .into_iter()
                .map(
                    |Reverse((value, Reverse(timestamp_ms), attributes))| SpanTotal {
                        timestamp_ms,
                        attributes,
                        value,
                    },
                )
                .collect();
            spans.sort_by(|a, b| {
                (a.timestamp_ms, Reverse(a.value)).cmp(&(b.timestamp_ms, Reverse(b.value)))
            });
            out.push(SeriesSpans { labels, spans });
        }
        Ok(out)
    }

    fn totals(&self, matchers: &[Matcher]) -> Result<Vec<SeriesTotals>, Fault> {
        let matched = self.matched(matchers)?;
        let head = self.head()?;
        Ok(matched
            .into_iter()
            .map(|(labels, sources)| {
                let mut points: Vec<TotalPoint> = Vec::new();
                for s in &sources {
                    self.for_each_header(&head, s, |p| points.push(TotalPoint::from(p)));
                }
                // Sources that overlap in time (imported blocks) interleave.
                if !points
                    .windows(2)
                    .all(|w| w[0].timestamp_ms < w[1].timestamp_ms)
                {
                    points.sort_by_key(|p| p.timestamp_ms);
                }
                SeriesTotals {
                    labels,
                    meta: self.source_meta(&head, &sources[0]),
                    points,
                }
            })
            .collect())
    }
}

/// The time from which the head may hold profiles: its oldest profile's, or the time it takes
/// profiles from if later (`i64::MAX` for an empty head that takes any time).
fn head_start(head: &Head) -> i64 {
    head.oldest_ms.max(head.min_valid_ms)
}

/// A stored profile's meta: its series' types with the profile's own time, duration, period.
fn profile_meta(series: &Meta, p: &BlockProfile) -> Meta {
    Meta {
        time_nanos: p.timestamp_ms.saturating_mul(1_000_000),
        duration_nanos: p.duration_nanos,
        period: p.period,
        capture_id: p.capture_id,
        ..series.clone()
    }
}

/// A block's profile whose samples do not decode.
fn corrupt_profile(
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
fn head_corrupt(labels: &Labels, timestamp_ms: i64, e: encoding::DecodeError) -> Error {
    Error::HeadCorrupt {
        labels: labels.to_string(),
        timestamp_ms,
        what: e.to_string(),
    }
}

/// What a group's merge has gathered: meta and the number of profiles.
#[derive(Default)]
struct GroupSum {
    meta: Option<Meta>,
    /// Captures merged: a pprof split into several series counts its duration once.
    captures: parca_profile::CaptureDurations,
    n_profiles: usize,
    /// The headers of the profiles merged, when asked for.
    headers: Option<Vec<PeerProfile>>,
}

impl GroupSum {
    /// Counts one profile, by its header, into the group's meta.
    fn fold(&mut self, series_meta: &Meta, p: &BlockProfile) -> Result<(), Error> {
        merge_meta(&mut self.meta, &mut self.captures, series_meta, p)?;
        self.n_profiles += p.merged as usize;
        if let Some(headers) = &mut self.headers {
            headers.push(PeerProfile::from(p));
        }
        Ok(())
    }
}

/// Folds one profile's meta into a merge's, google/pprof's way.
fn merge_meta(
    held: &mut Option<Meta>,
    captures: &mut parca_profile::CaptureDurations,
    series: &Meta,
    p: &BlockProfile,
) -> Result<(), Error> {
    let time_nanos = p.timestamp_ms.saturating_mul(1_000_000);
    let duration = captures.add(p.capture_id, p.duration_nanos);
    match held {
        None => {
            *held = Some(Meta {
                time_nanos,
                duration_nanos: duration,
                period: p.period,
                capture_id: p.capture_id,
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
            m.duration_nanos = m.duration_nanos.saturating_add(duration);
            m.capture_id = captures.merged_id(m.capture_id);
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
    /// An accumulator holding `s`.
    fn of(s: &Samples) -> Self {
        let mut acc = MergeAcc::default();
        acc.add(s);
        acc
    }

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
            spans: None,
        }
    }
}

impl From<&BlockProfile> for PeerProfile {
    fn from(p: &BlockProfile) -> Self {
        PeerProfile {
            point: TotalPoint::from(p),
            capture_id: p.capture_id,
        }
    }
}

impl From<&PeerProfile> for BlockProfile {
    fn from(p: &PeerProfile) -> Self {
        BlockProfile {
            timestamp_ms: p.point.timestamp_ms,
            duration_nanos: p.point.duration_nanos,
            period: p.point.period,
            capture_id: p.capture_id,
            total: p.point.total,
            n_samples: 0,
            len: 0,
            merged: 1,
            latest_total: p.point.latest_total,
        }
    }
}

/// Adds the shards' merged series to the groups (creating groups only shards hold), each
/// answer an origin after this store's `n_local` ones, and orders the groups by their first
/// series' labels, as one store holding everything orders them.
fn add_peer_groups<K: Eq + std::hash::Hash + Clone>(
    summed: &mut Vec<SummedGroup<K>>,
    peers: &[PeerAnswer],
    key: &impl Fn(&Labels) -> K,
    n_local: usize,
) -> Result<(), Error> {
    let n_origins = n_local + peers.len();
    let mut index: FxHashMap<K, usize> = FxHashMap::default();
    for (i, g) in summed.iter_mut().enumerate() {
        g.per_origin.resize_with(n_origins, Samples::default);
        index.insert(g.key.clone(), i);
    }
    for (a, answer) in peers.iter().enumerate() {
        for s in &answer.series {
            let Some(samples) = s.samples.first() else {
                continue;
            };
            if s.profiles.is_empty() {
                continue;
            }
            let k = key(&s.labels);
            let i = *index.entry(k.clone()).or_insert_with(|| {
                summed.push(SummedGroup {
                    key: k,
                    first: s.labels.clone(),
                    sum: GroupSum::default(),
                    blocks: Samples::default(),
                    per_origin: vec![Samples::default(); n_origins],
                });
                summed.len() - 1
            });
            let g = &mut summed[i];
            for p in &s.profiles {
                g.sum.fold(&s.meta, &BlockProfile::from(p))?;
            }
            if s.labels < g.first {
                g.first = s.labels.clone();
            }
            let into = &mut g.per_origin[n_local + a];
            into.stacks.extend_from_slice(&samples.stacks);
            into.labels.extend_from_slice(&samples.labels);
            into.values.extend_from_slice(&samples.values);
        }
    }
    summed.sort_by(|a, b| a.first.cmp(&b.first));
    Ok(())
}

/// `local` (series by labels, each with its profiles) with the shards' profiles, brought into
/// `tables`.
fn with_peer_profiles(
    local: Vec<(Labels, Vec<ExtractedProfile>)>,
    peers: &[PeerAnswer],
    tables: &mut Tables,
) -> Vec<(Labels, Vec<ExtractedProfile>)> {
    let mut by_labels: BTreeMap<Labels, Vec<ExtractedProfile>> = local.into_iter().collect();
    for answer in peers {
        let mut extractor = Extractor::new(&answer.tables);
        for s in &answer.series {
            let profiles = by_labels.entry(s.labels.clone()).or_default();
            for (p, samples) in s.profiles.iter().zip(&s.samples) {
                profiles.push((
                    p.point.timestamp_ms,
                    profile_meta(&s.meta, &BlockProfile::from(p)),
                    extractor.samples(tables, samples),
                ));
            }
        }
    }
    by_labels
        .into_iter()
        .map(|(labels, mut profiles)| {
            profiles.sort_by_key(|p| p.0);
            (labels, profiles)
        })
        .collect()
}

impl Read<'_> {
    /// This store's answer to a querier (see [`Querier::peer_answer`]), over tables holding
    /// only what the answer uses.
    fn peer_answer(&self, read: PeerRead, matchers: &[Matcher]) -> Result<PeerAnswer, Fault> {
        let series_meta = |meta: &Meta| Meta {
            time_nanos: 0,
            duration_nanos: 0,
            period: 0,
            capture_id: 0,
            ..meta.clone()
        };
        let no_tables = || Arc::new(Tables::new());
        match read {
            PeerRead::Series => Ok(PeerAnswer {
                tables: no_tables(),
                series: self
                    .matched(matchers)?
                    .into_keys()
                    .map(|labels| PeerSeries {
                        labels,
                        meta: Meta::default(),
                        profiles: Vec::new(),
                        samples: Vec::new(),
                    })
                    .collect(),
            }),
            PeerRead::Totals => {
                let matched = self.matched(matchers)?;
                let head = self.head()?;
                let series = matched
                    .iter()
                    .map(|(labels, sources)| {
                        let mut profiles: Vec<PeerProfile> = Vec::new();
                        for s in sources {
                            self.for_each_header(&head, s, |p| profiles.push(PeerProfile::from(p)));
                        }
                        profiles.sort_by_key(|p| p.point.timestamp_ms);
                        PeerSeries {
                            labels: labels.clone(),
                            meta: series_meta(&self.source_meta(&head, &sources[0])),
                            profiles,
                            samples: Vec::new(),
                        }
                    })
                    .collect();
                Ok(PeerAnswer {
                    tables: no_tables(),
                    series,
                })
            }
            PeerRead::Merge => {
                let groups = self.merge_grouped(matchers, &|l: &Labels| l.clone(), &[], true)?;
                let mut tables = Tables::new();
                let series = match groups.first() {
                    None => Vec::new(),
                    Some(first) => {
                        let mut extractor = Extractor::new(&first.profile.tables);
                        groups
                            .iter()
                            .map(|g| {
                                let mut profiles = g.headers.clone();
                                profiles.sort_by_key(|p| p.point.timestamp_ms);
                                PeerSeries {
                                    labels: g.key.clone(),
                                    meta: series_meta(&g.profile.meta),
                                    profiles,
                                    samples: vec![
                                        extractor.samples(&mut tables, &g.profile.samples),
                                    ],
                                }
                            })
                            .collect()
                    }
                };
                Ok(PeerAnswer {
                    tables: Arc::new(tables),
                    series,
                })
            }
            PeerRead::Select => {
                let selected = self.select(matchers, &[])?;
                let tables = selected
                    .iter()
                    .flat_map(|s| s.profiles.first())
                    .map(|(_, p)| Arc::clone(&p.tables))
                    .next()
                    .unwrap_or_else(no_tables);
                let series = selected
                    .into_iter()
                    .filter_map(|s| {
                        let (_, first) = s.profiles.first()?;
                        let meta = series_meta(&first.meta);
                        let (profiles, samples) = s
                            .profiles
                            .into_iter()
                            .map(|(t, p)| {
                                let total = p.samples.values.iter().sum();
                                let header = PeerProfile {
                                    point: TotalPoint {
                                        timestamp_ms: t,
                                        total,
                                        period: p.meta.period,
                                        duration_nanos: p.meta.duration_nanos,
                                        latest_total: total,
                                    },
                                    capture_id: p.meta.capture_id,
                                };
                                (header, p.samples)
                            })
                            .unzip();
                        Some(PeerSeries {
                            labels: s.labels,
                            meta,
                            profiles,
                            samples,
                        })
                    })
                    .collect();
                Ok(PeerAnswer { tables, series })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::test_support::{canonical, fill};
    use crate::{Db, Labels, MatchOp, Matcher, NAME_LABEL, Options};

    type GroupAnswer = (String, usize, i64, Vec<(Vec<String>, String, i64)>);

    /// The CPU profiles merged per instance, in canonical form with their counts and durations.
    fn merged_per_instance(db: &Db) -> Vec<GroupAnswer> {
        let cpu = [Matcher::new(MatchOp::Equal, NAME_LABEL, "cpu").expect("valid")];
        db.querier(i64::MIN, i64::MAX)
            .merge_grouped(&cpu, |l: &Labels| {
                l.get("instance").unwrap_or_default().to_owned()
            })
            .expect("merge")
            .into_iter()
            .map(|g| {
                let rows = canonical(&g.profile);
                (g.key, g.n_profiles, g.profile.meta.duration_nanos, rows)
            })
            .collect()
    }

    fn options(block_duration_ms: i64) -> Options {
        Options {
            block_duration_ms,
            retention_ms: 0,
            ..Options::default()
        }
    }

    #[test]
    fn merges_of_blocks_shared_among_threads_equal_the_heads() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = Db::open(dir.path(), options(i64::MAX / 4)).expect("open");
        fill(&db, 7, 0, 12_000);
        let baseline = merged_per_instance(&db);
        assert_eq!(baseline.len(), 3, "instances a, b and c");
        drop(db);

        // Blocks of a second (the unit tests share every merge of several blocks among threads).
        let db = Db::open(dir.path(), options(1000)).expect("reopen");
        db.compact().expect("compact");
        assert!(db.stats().n_blocks >= 3, "{:?}", db.stats());
        assert_eq!(merged_per_instance(&db), baseline);
    }
}
