//! Server-side deltas of cumulative profiles: what happened between two consecutive scrapes.

use std::sync::Arc;

use parca_profile::tables::{LabelSetId, StackId};
use parca_profile::{Profile, Samples};
use rustc_hash::FxHashMap;

/// Sample types that only grow over a program's life (Go's allocations, block and mutex
/// contention): the difference of two snapshots is what happened in between.
pub(crate) fn is_cumulative(sample_type: &str) -> bool {
    matches!(
        sample_type,
        "alloc_objects" | "alloc_space" | "contentions" | "delay"
    )
}

/// The previous snapshot of one cumulative sample type of one loop.
#[derive(Debug)]
pub(crate) struct Baseline {
    profile: Profile,
    time_nanos: i64,
}

/// `current − previous` as a profile covering the time between them, and the new baseline.
/// Returns no delta when there is no previous snapshot, or when the total went down (the
/// program restarted: a counter reset, so the new snapshot only becomes the baseline).
pub(crate) fn delta(
    previous: Option<Baseline>,
    current: &Profile,
    time_nanos: i64,
) -> (Option<Profile>, Baseline) {
    let baseline = Baseline {
        profile: current.clone(),
        time_nanos,
    };
    let Some(previous) = previous else {
        return (None, baseline);
    };
    if current.total() < previous.profile.total() || time_nanos <= previous.time_nanos {
        return (None, baseline);
    }
    let (tables, samples) = if Arc::ptr_eq(&previous.profile.tables, &current.tables)
        || previous.profile.tables.same_ids_as(&current.tables)
    {
        // The usual case once a program has warmed up: the same symbols in the same order, so
        // samples compare by id, with no interning.
        (
            Arc::clone(&current.tables),
            growth_by_id(&previous.profile.samples, &current.samples),
        )
    } else {
        let Ok(both) = parca_profile::diff(&previous.profile, current) else {
            return (None, baseline);
        };
        let base = both.samples.diff_base.as_deref().unwrap_or(&[]);
        let mut samples = Samples::default();
        for i in 0..both.samples.len() {
            let grown = both.samples.values[i] - base.get(i).copied().unwrap_or(0);
            if grown > 0 {
                samples.stacks.push(both.samples.stacks[i]);
                samples.labels.push(both.samples.labels[i]);
                samples.values.push(grown);
            }
        }
        (both.tables, samples)
    };
    let mut meta = current.meta.clone();
    meta.time_nanos = previous.time_nanos;
    meta.duration_nanos = time_nanos - previous.time_nanos;
    let profile = Profile {
        tables,
        meta,
        samples,
    };
    (Some(profile), baseline)
}

/// The samples of `current` that grew since `previous`, by how much; both in the same tables.
fn growth_by_id(previous: &Samples, current: &Samples) -> Samples {
    let mut before: FxHashMap<(StackId, LabelSetId), i64> = FxHashMap::default();
    before.reserve(previous.len());
    for i in 0..previous.len() {
        *before
            .entry((previous.stacks[i], previous.labels[i]))
            .or_default() += previous.values[i];
    }
    let mut samples = Samples::default();
    for i in 0..current.len() {
        let key = (current.stacks[i], current.labels[i]);
        let grown = current.values[i] - before.get(&key).copied().unwrap_or(0);
        if grown > 0 {
            samples.stacks.push(key.0);
            samples.labels.push(key.1);
            samples.values.push(grown);
        }
    }
    samples
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allocs() -> Profile {
        let path = format!(
            "{}/../../tests/testdata/pprof/go/go-allocs.pb.gz",
            env!("CARGO_MANIFEST_DIR")
        );
        parca_profile::decode(&std::fs::read(path).unwrap(), &Default::default())
            .unwrap()
            .into_iter()
            .find(|p| p.meta.sample_type.kind == "alloc_space")
            .unwrap()
    }

    fn scaled(p: &Profile, factor: i64) -> Profile {
        let mut p = p.clone();
        p.samples.values.iter_mut().for_each(|v| *v *= factor);
        p
    }

    #[test]
    fn delta_is_the_growth_between_snapshots() {
        let first = allocs();
        let second = scaled(&first, 3);
        let (none, baseline) = delta(None, &first, 1_000);
        assert!(none.is_none(), "the first snapshot is only a baseline");
        let (grown, _) = delta(Some(baseline), &second, 11_000);
        let grown = grown.expect("a delta");
        assert_eq!(grown.total(), 2 * first.total());
        assert_eq!(grown.meta.duration_nanos, 10_000);
        assert_eq!(grown.meta.time_nanos, 1_000);
    }

    /// `current − previous` through a full diff, as the reference.
    fn growth_by_diff(previous: &Profile, current: &Profile) -> i64 {
        let both = parca_profile::diff(previous, current).unwrap();
        let base = both.samples.diff_base.unwrap();
        both.samples
            .values
            .iter()
            .zip(base)
            .map(|(v, b)| (v - b).max(0))
            .sum()
    }

    #[test]
    fn snapshots_with_the_same_or_other_tables_give_the_same_delta() {
        let first = allocs();
        // Some stacks only in the second snapshot, others grown.
        let mut partial = first.clone();
        let keep = partial.samples.len() / 2;
        partial.samples.stacks.truncate(keep);
        partial.samples.labels.truncate(keep);
        partial.samples.values.truncate(keep);
        let second = scaled(&first, 2);
        let expected = growth_by_diff(&partial, &second);
        assert!(expected > first.total());

        // Separately decoded: equal tables under other `Arc`s, compared by id.
        let decoded_again = allocs();
        assert!(partial.tables.same_ids_as(&decoded_again.tables));
        let (_, baseline) = delta(None, &partial, 1);
        let (by_id, _) = delta(Some(baseline), &scaled(&decoded_again, 2), 2);
        assert_eq!(by_id.unwrap().total(), expected);

        // Other tables (the same symbols under other ids): the full diff.
        let mut tables = parca_profile::Tables::new();
        tables.intern_string("a string first shifts every id");
        let samples = parca_profile::Importer::new().import(&mut tables, &partial);
        let renumbered = Profile {
            tables: Arc::new(tables),
            samples,
            meta: partial.meta.clone(),
        };
        assert!(!renumbered.tables.same_ids_as(&second.tables));
        let (_, baseline) = delta(None, &renumbered, 1);
        let (by_diff, _) = delta(Some(baseline), &second, 2);
        assert_eq!(by_diff.unwrap().total(), expected);
    }

    #[test]
    fn a_counter_reset_rebaselines() {
        let big = scaled(&allocs(), 5);
        let (_, baseline) = delta(None, &big, 1_000);
        let (none, baseline) = delta(Some(baseline), &allocs(), 2_000);
        assert!(none.is_none());
        let (some, _) = delta(Some(baseline), &scaled(&allocs(), 2), 3_000);
        assert_eq!(some.unwrap().total(), allocs().total());
    }
}
