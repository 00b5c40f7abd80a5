//! Server-side deltas of cumulative profiles: what happened between two consecutive scrapes.

use parca_profile::Profile;

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
    let Ok(grown) = parca_profile::growth(&previous.profile, current) else {
        return (None, baseline);
    };
    let mut meta = current.meta.clone();
    meta.time_nanos = previous.time_nanos;
    meta.duration_nanos = time_nanos - previous.time_nanos;
    (Some(Profile { meta, ..grown }), baseline)
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
