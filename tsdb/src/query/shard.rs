//! This store's answer to a querier that reads it as a shard ([`Querier::peer_answer`](super::Querier::peer_answer)):
//! series, totals or merged profiles over tables holding only what the answer uses.

use std::sync::Arc;

use parca_profile::{Extractor, Meta, Tables};

use super::answers::TotalPoint;
use super::read::{Fault, Read};
use crate::labels::{Labels, Matcher};
use crate::peer::{PeerAnswer, PeerProfile, PeerRead, PeerSeries};
use crate::state::series_meta;

impl Read<'_> {
    /// This store's answer to a querier (see [`Querier::peer_answer`](super::Querier::peer_answer)), over tables holding
    /// only what the answer uses.
    #[expect(
        clippy::too_many_lines,
        reason = "one match over the four reads a shard answers, each arm short"
    )]
    pub(super) fn peer_answer(
        &self,
        read: PeerRead,
        matchers: &[Matcher],
    ) -> Result<PeerAnswer, Fault> {
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
    use crate::peer::PeerRead;
    use crate::test_support::{fill, store_options};
    use crate::{Db, MatchOp, Matcher};

    #[test]
    fn a_shards_answer_holds_what_the_querier_reads_itself() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = Db::open(dir.path(), store_options(1000)).expect("open");
        fill(&db, 5, 0, 2_500);
        db.compact().expect("cut");
        let api = [Matcher::new(MatchOp::Equal, "job", "api").expect("valid")];
        let q = db.querier(i64::MIN, i64::MAX);

        let series = q.peer_answer(PeerRead::Series, &api).expect("series");
        let labels: Vec<_> = series.series.iter().map(|s| s.labels.clone()).collect();
        assert_eq!(labels, q.series(&api).expect("series"));
        assert!(series.series.iter().all(|s| s.profiles.is_empty()));

        let totals = q.peer_answer(PeerRead::Totals, &api).expect("totals");
        let own = q.totals(&api).expect("totals");
        assert_eq!(totals.series.len(), own.len());
        for (answer, own) in totals.series.iter().zip(&own) {
            assert_eq!(answer.labels, own.labels);
            let points: Vec<_> = answer.profiles.iter().map(|p| p.point).collect();
            assert_eq!(points, own.points, "{}", own.labels);
            // A series' meta carries its types, never one profile's time.
            assert_eq!(answer.meta.time_nanos, 0);
        }

        let selected = q.peer_answer(PeerRead::Select, &api).expect("select");
        let own = q.select(&api).expect("select");
        for (answer, own) in selected.series.iter().zip(&own) {
            assert_eq!(answer.samples.len(), own.profiles.len(), "{}", own.labels);
            let samples: usize = answer.samples.iter().map(|s| s.len()).sum();
            let own_samples: usize = own.profiles.iter().map(|(_, p)| p.samples.len()).sum();
            assert_eq!(samples, own_samples, "{}", own.labels);
        }

        let merged = q.peer_answer(PeerRead::Merge, &api).expect("merge");
        for s in &merged.series {
            assert_eq!(s.samples.len(), 1, "one merge per series: {}", s.labels);
            assert!(!s.profiles.is_empty(), "with every profile's header");
        }
    }
}
