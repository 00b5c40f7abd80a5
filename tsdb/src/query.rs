//! Reading: a [`Querier`] over a time range sees the blocks and the head together, series
//! found through each one's postings and joined by their labels.
//!
//! The modules below, each using only those before it: `answers` (the answer types), `read`
//! (one attempt at a read over one view of the store), `peers` (shards' answers joined to
//! local ones), `select` (profiles, totals and spans read out whole), `merge` and `shard`
//! (this store's answer to a querier that reads it as a shard). This file holds the
//! [`Querier`], which retries a read whose view a cut replaced and asks the shards.

mod answers;
mod merge;
mod peers;
mod read;
mod select;
mod shard;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use parca_profile::Profile;

use crate::Error;
use crate::labels::{Labels, Matcher};
use crate::peer::{PeerAnswer, PeerRead, PeerRequest, Plan};
use crate::state::Inner;
use read::{Fault, Read, SpanMatchers};

pub use answers::{SeriesProfiles, SeriesSpans, SeriesTotals, SpanTotal, TotalPoint};

pub use merge::MergedGroup;
pub(crate) use read::View;

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
