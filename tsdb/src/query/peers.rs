//! The shards' answers brought into this store's: their profile headers as a block's, and
//! their series' profiles into the query's tables beside the local ones.

use std::collections::BTreeMap;

use parca_profile::{Extractor, Tables};

use super::answers::TotalPoint;
use super::read::{ExtractedProfile, profile_meta};
use crate::block_profile::BlockProfile;
use crate::labels::Labels;
use crate::peer::{PeerAnswer, PeerProfile};

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

/// `local` (series by labels, each with its profiles) with the shards' profiles, brought into
/// `tables`.
pub(super) fn with_peer_profiles(
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use parca_profile::{Meta, Tables};

    use super::with_peer_profiles;
    use crate::block_profile::BlockProfile;
    use crate::peer::{PeerAnswer, PeerProfile, PeerSeries};
    use crate::test_support::{corpus, series_labels};

    #[test]
    fn a_header_crosses_to_a_shard_and_back_unchanged() {
        let p = BlockProfile {
            timestamp_ms: 5_000,
            duration_nanos: 1_000_000_000,
            period: 1_000_000,
            capture_id: 9,
            total: 77,
            n_samples: 4,
            len: 30,
            merged: 1,
            latest_total: 77,
        };
        let back = BlockProfile::from(&PeerProfile::from(&p));
        // Where the samples lie is the block's own business; the rest crosses.
        assert_eq!(
            back,
            BlockProfile {
                n_samples: 0,
                len: 0,
                ..p
            }
        );
    }

    #[test]
    fn a_shards_profiles_join_the_local_series_in_time_order() {
        let cpu = corpus("go/go-cpu.pb.gz", "cpu");
        let a = series_labels("cpu", "api", "a");
        let b = series_labels("cpu", "api", "b");
        let mut tables = Tables::new();
        let local_samples =
            parca_profile::Extractor::new(&cpu.tables).samples(&mut tables, &cpu.samples);
        let local = vec![(a.clone(), vec![(2_000, cpu.meta.clone(), local_samples)])];
        let header = |t: i64| PeerProfile {
            point: crate::TotalPoint {
                timestamp_ms: t,
                total: 1,
                period: cpu.meta.period,
                duration_nanos: cpu.meta.duration_nanos,
                latest_total: 1,
            },
            capture_id: 0,
        };
        let series = |labels: &crate::Labels, t: i64| PeerSeries {
            labels: labels.clone(),
            meta: Meta {
                time_nanos: 0,
                ..cpu.meta.clone()
            },
            profiles: vec![header(t)],
            samples: vec![cpu.samples.clone()],
        };
        let answer = PeerAnswer {
            tables: Arc::clone(&cpu.tables),
            series: vec![series(&a, 1_000), series(&b, 3_000)],
        };
        let joined = with_peer_profiles(local, &[answer], &mut tables);
        let shape: Vec<(crate::Labels, Vec<i64>)> = joined
            .iter()
            .map(|(l, ps)| (l.clone(), ps.iter().map(|p| p.0).collect()))
            .collect();
        assert_eq!(shape, vec![(a, vec![1_000, 2_000]), (b, vec![3_000])]);
        // The shard's samples now point into the query's tables, as the local ones do.
        assert_eq!(joined[0].1[0].2, joined[0].1[1].2);
        assert_eq!(joined[0].1[0].1.time_nanos, 1_000_000_000);
    }
}
