//! Merges: the matched series grouped by a key, their headers folded in the series' order,
//! each block's samples summed in its own ids (blocks shared among one thread per core when
//! the merge is large), then brought into one set of tables with the head's and the shards'.

use std::collections::BTreeMap;
use std::sync::Arc;

use parca_profile::tables::{LabelSetId, StackId};
use parca_profile::{Extractor, Meta, Profile, Samples, Tables};
use rustc_hash::FxHashMap;

use super::read::{Fault, Hidden, Read, Source, corrupt_profile, head_corrupt};
use crate::Error;
use crate::block::{self, SeriesEntry};
use crate::block_profile::BlockProfile;
use crate::encoding::IdLimits;
use crate::labels::{Labels, Matcher};
use crate::peer::{PeerAnswer, PeerProfile};
use crate::summary::StackSums;

/// One group's profile from [`Querier::merge_grouped`](super::Querier::merge_grouped).
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

impl Read<'_> {
    /// Merges the matched series per `key`: group the series and fold their headers; merge
    /// each group's samples of the blocks into one set of tables ([`Read::merge_blocks`]);
    /// then add the head's and the shards' (`peers`, each one series per group) samples to
    /// them. With `headers`, each group keeps its profiles' headers (for a shard's answer).
    pub(super) fn merge_grouped<K: Eq + std::hash::Hash + Clone>(
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

#[cfg(test)]
mod tests {
    use crate::test_support::{canonical, fill, store_options};
    use crate::{Db, Labels, MatchOp, Matcher, NAME_LABEL};

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

    #[test]
    fn merges_of_blocks_shared_among_threads_equal_the_heads() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = Db::open(dir.path(), store_options(i64::MAX / 4)).expect("open");
        fill(&db, 7, 0, 12_000);
        let baseline = merged_per_instance(&db);
        assert_eq!(baseline.len(), 3, "instances a, b and c");
        drop(db);

        // Blocks of a second (the unit tests share every merge of several blocks among threads).
        let db = Db::open(dir.path(), store_options(1000)).expect("reopen");
        db.compact().expect("compact");
        assert!(db.stats().n_blocks >= 3, "{:?}", db.stats());
        assert_eq!(merged_per_instance(&db), baseline);
    }
}
