//! Profiles read out whole: a series' profiles over the query's tables (`select`), its totals
//! per profile (a metrics graph's points) and the largest spans of its samples.

use std::sync::Arc;

use parca_profile::{Extractor, Profile, Tables};

use super::answers::{SeriesProfiles, SeriesSpans, SeriesTotals, SpanTotal, TotalPoint};
use super::peers::with_peer_profiles;
use super::read::{
    ExtractedProfile, Fault, Read, Source, corrupt_profile, head_corrupt, no_tables, profile_meta,
};
use crate::block::{self};
use crate::block_profile::BlockProfile;
use crate::encoding::{self, IdLimits, Reader};
use crate::labels::{Labels, Matcher};
use crate::peer::PeerAnswer;

impl Read<'_> {
    #[expect(
        clippy::too_many_lines,
        reason = "reads each source of each series into the query's tables, head and blocks alike"
    )]
    pub(super) fn select(
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
}

impl Read<'_> {
    pub(super) fn largest_spans(
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

    pub(super) fn totals(&self, matchers: &[Matcher]) -> Result<Vec<SeriesTotals>, Fault> {
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

#[cfg(test)]
mod tests {
    use crate::Db;
    use crate::test_support::{answers, fill, store_options};

    /// Profiles, totals, label names and values read from blocks are those the head gave.
    #[test]
    fn blocks_answer_what_the_head_answered() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = Db::open(dir.path(), store_options(i64::MAX / 4)).expect("open");
        fill(&db, 11, 0, 3_000);
        let ranges = [
            (i64::MIN, i64::MAX),
            (450, 1_750),
            (2_999, 2_999),
            (5_000, 6_000),
        ];
        let from_head = answers(&db, &ranges);
        drop(db);

        let db = Db::open(dir.path(), store_options(1000)).expect("reopen");
        db.compact().expect("cut");
        assert!(db.stats().n_blocks >= 2, "{:?}", db.stats());
        assert_eq!(answers(&db, &ranges), from_head);
    }
}
