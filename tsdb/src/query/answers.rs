//! What a read answers besides merged profiles: a series' profiles, its totals over time
//! (a metrics graph's points), its largest spans. Plain data, shared with the shards' wire
//! format (`peer.rs`).

use parca_profile::{Meta, Profile};

use crate::block_profile::BlockProfile;
use crate::labels::Labels;

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
    /// The total of the latest profile it stands for: `total` itself, unless the point sums
    /// a window's profiles (a summary, read by [`Querier::with_summaries`](crate::Querier::with_summaries)); what a graph of
    /// a snapshot type shows.
    pub latest_total: i64,
}

/// The largest spans of one series over a query's time range ([`Querier::largest_spans`](crate::Querier::largest_spans)).
#[derive(Debug, Clone)]
pub struct SeriesSpans {
    /// The series.
    pub labels: Labels,
    /// Its largest spans, time-ordered.
    pub spans: Vec<SpanTotal>,
}

/// One span's part of one stored profile: the sum of the values of its samples.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpanTotal {
    /// The profile's time.
    pub timestamp_ms: i64,
    /// The span's attributes (`span_id`, `trace_id`, …) that it has, as stored.
    pub attributes: Vec<(String, String)>,
    /// The sum of its samples' values.
    pub value: i64,
}

impl From<&BlockProfile> for TotalPoint {
    fn from(p: &BlockProfile) -> Self {
        TotalPoint {
            timestamp_ms: p.timestamp_ms,
            total: p.total,
            period: p.period,
            duration_nanos: p.duration_nanos,
            latest_total: p.latest_total,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::TotalPoint;
    use crate::block_profile::BlockProfile;

    #[test]
    fn a_point_keeps_what_a_graph_shows_of_a_profile() {
        let p = BlockProfile {
            timestamp_ms: 1_000,
            duration_nanos: 10_000_000_000,
            period: 10_000_000,
            capture_id: 7,
            total: 420,
            n_samples: 12,
            len: 96,
            merged: 3,
            latest_total: 150,
        };
        let point = TotalPoint::from(&p);
        assert_eq!(
            point,
            TotalPoint {
                timestamp_ms: 1_000,
                total: 420,
                period: 10_000_000,
                duration_nanos: 10_000_000_000,
                latest_total: 150,
            }
        );
    }
}
