//! What a cumulative profile (Go's allocations, block and mutex contention) gained between two
//! snapshots of the same program.

use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::tables::{LabelSetId, StackId};
use crate::{Error, Profile, Samples};

/// Sample types that only grow over a program's life (Go's allocations, block and mutex
/// contention): the difference of two snapshots is what happened in between.
pub fn is_cumulative(sample_type: &str) -> bool {
    matches!(
        sample_type,
        "alloc_objects" | "alloc_space" | "contentions" | "delay"
    )
}

/// `current − previous`, stack by stack (and label set by label set): the samples that grew,
/// by how much, with `current`'s meta. Samples that did not grow are left out, so a counter
/// that went back (a restarted program) contributes nothing where it shrank.
///
/// Snapshots with the same tables (the usual case once a program has warmed up: the same
/// symbols in the same order) are compared by id, with no interning; others through a full
/// [`diff`](crate::diff).
pub fn growth(previous: &Profile, current: &Profile) -> Result<Profile, Error> {
    let (tables, samples) = if Arc::ptr_eq(&previous.tables, &current.tables)
        || previous.tables.same_ids_as(&current.tables)
    {
        (
            Arc::clone(&current.tables),
            growth_by_id(&previous.samples, &current.samples),
        )
    } else {
        let both = crate::diff(previous, current)?;
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
    Ok(Profile {
        tables,
        meta: current.meta.clone(),
        samples,
    })
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
        crate::decode(&std::fs::read(path).unwrap(), &Default::default())
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

    /// `current − previous` through a full diff, as the reference.
    fn growth_by_diff(previous: &Profile, current: &Profile) -> i64 {
        let both = crate::diff(previous, current).unwrap();
        let base = both.samples.diff_base.unwrap();
        both.samples
            .values
            .iter()
            .zip(base)
            .map(|(v, b)| (v - b).max(0))
            .sum()
    }

    #[test]
    fn snapshots_with_the_same_or_other_tables_give_the_same_growth() {
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
        let by_id = growth(&partial, &scaled(&decoded_again, 2)).unwrap();
        assert_eq!(by_id.total(), expected);

        // Other tables (the same symbols under other ids): the full diff.
        let mut tables = crate::Tables::new();
        tables.intern_string("a string first shifts every id");
        let samples = crate::Importer::new().import(&mut tables, &partial);
        let renumbered = Profile {
            tables: Arc::new(tables),
            samples,
            meta: partial.meta.clone(),
        };
        assert!(!renumbered.tables.same_ids_as(&second.tables));
        assert_eq!(growth(&renumbered, &second).unwrap().total(), expected);
    }

    #[test]
    fn what_shrank_adds_nothing() {
        let big = scaled(&allocs(), 3);
        assert_eq!(growth(&big, &allocs()).unwrap().total(), 0);
        assert_eq!(
            growth(&allocs(), &big).unwrap().total(),
            2 * allocs().total()
        );
    }
}
