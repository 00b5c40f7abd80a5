//! Naming profiles with Parca's profile-type strings and turning sample labels into series labels.

use parca_profile::{Meta, Profile, split_by_string_labels};
use parca_querylang::{is_valid_label_name, sanitize_label_name};
use parca_tsdb::{Labels, NAME_LABEL};

use crate::Error;

/// One profile ready to be stored: its series labels (with `__name__`), time and samples.
#[derive(Debug, Clone)]
pub struct Series {
    /// The series, `__name__` included.
    pub labels: Labels,
    /// When the profile was taken, milliseconds since the Unix epoch.
    pub timestamp_ms: i64,
    /// The profile, of one sample type.
    pub profile: Profile,
}

/// Parca's profile-type string: `name:sample_type:sample_unit:period_type:period_unit`, with
/// `:delta` appended when the profile covers a window (a non-zero duration).
pub fn profile_type_name(name: &str, meta: &Meta) -> String {
    parca_querylang::ProfileTypeName::from_parts(
        name,
        &meta.sample_type.kind,
        &meta.sample_type.unit,
        &meta.period_type.kind,
        &meta.period_type.unit,
        meta.duration_nanos > 0,
    )
    .as_str()
    .to_owned()
}

/// A capture id unique across the store's life with overwhelming likelihood: a random start
/// per process, then a counter. Never 0 (unknown).
fn new_capture_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU64, Ordering};
    static START: OnceLock<u64> = OnceLock::new();
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let start = *START.get_or_init(|| {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
        );
        h.finish()
    });
    start
        .wrapping_add(NEXT.fetch_add(1, Ordering::Relaxed))
        .max(1)
}

/// Turns the profiles of one pprof (one per sample type, sharing tables) into series: the
/// `target` labels, `__name__` from `name` and each profile's types, and the samples' string
/// labels (a clash with a target label is renamed `exported_<name>`). `timestamp_ms` is used
/// when the profile does not carry its own time.
pub fn to_series(
    name: &str,
    target: &Labels,
    profiles: Vec<Profile>,
    timestamp_ms: i64,
) -> Result<Vec<Series>, Error> {
    if !is_valid_label_name(name) || name.starts_with("__") {
        return Err(Error::InvalidName { name: name.into() });
    }
    // Every series made of this pprof shares its capture: a merge counts its duration once.
    let capture_id = new_capture_id();
    let mut out = Vec::new();
    for group in split_by_string_labels(profiles) {
        let mut pairs: Vec<(String, String)> = target
            .iter()
            .filter(|l| l.name != NAME_LABEL)
            .map(|l| (l.name.clone(), l.value.clone()))
            .collect();
        for (key, value) in &group.labels {
            let mut key = sanitize_label_name(key);
            while key.starts_with("__") || pairs.iter().any(|(k, _)| *k == key) {
                key = format!("exported_{key}");
            }
            pairs.push((key, value.clone()));
        }
        for mut profile in group.profiles {
            profile.meta.capture_id = capture_id;
            let mut labels = pairs.clone();
            labels.push((NAME_LABEL.into(), profile_type_name(name, &profile.meta)));
            let labels = Labels::new(labels).map_err(Error::Labels)?;
            let timestamp_ms = if profile.meta.time_nanos > 0 {
                profile.meta.time_nanos / 1_000_000
            } else {
                timestamp_ms
            };
            out.push(Series {
                labels,
                timestamp_ms,
                profile,
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn corpus(path: &str) -> Vec<Profile> {
        let path = format!(
            "{}/../../tests/testdata/pprof/{path}",
            env!("CARGO_MANIFEST_DIR")
        );
        let bytes = std::fs::read(&path).expect("corpus file");
        parca_profile::decode(&bytes, &Default::default()).expect("valid")
    }

    #[test]
    fn names_follow_parcas_profile_types() {
        let target = Labels::new([("job", "go"), ("instance", "h:1")]).unwrap();
        let series = to_series("process_cpu", &target, corpus("go/go-cpu.pb.gz"), 7).unwrap();
        let names: std::collections::BTreeSet<_> = series
            .iter()
            .map(|s| s.labels.get(NAME_LABEL).unwrap().to_owned())
            .collect();
        assert_eq!(
            names.into_iter().collect::<Vec<_>>(),
            [
                "process_cpu:cpu:nanoseconds:cpu:nanoseconds:delta",
                "process_cpu:samples:count:cpu:nanoseconds:delta",
            ]
        );
        // The profile's pprof.Do labels split it into several series per sample type.
        assert!(series.len() > 2);
        assert!(series.iter().all(|s| s.labels.get("job") == Some("go")));
    }

    #[test]
    fn snapshots_have_no_delta_suffix() {
        let series =
            to_series("memory", &Labels::default(), corpus("go/go-heap.pb.gz"), 7).unwrap();
        assert!(
            series
                .iter()
                .all(|s| !s.labels.get(NAME_LABEL).unwrap().ends_with(":delta"))
        );
    }

    #[test]
    fn clashing_sample_labels_are_exported() {
        // pyroscope's Python profiles carry pid, thread_id, thread_name and step labels.
        let target = Labels::new([("pid", "1"), ("job", "py")]).unwrap();
        let series = to_series(
            "process_cpu",
            &target,
            corpus("python/pyroscope-io-cpu.pb.gz"),
            0,
        )
        .unwrap();
        assert!(series.len() > 1, "split by thread");
        for s in &series {
            assert_eq!(s.labels.get("pid"), Some("1"));
            assert!(s.labels.get("exported_pid").is_some(), "{}", s.labels);
            assert!(s.labels.get("thread_name").is_some());
        }
    }

    #[test]
    fn sanitizes_label_names() {}

    #[test]
    fn refuses_bad_names() {
        let err = to_series("cpu profile", &Labels::default(), Vec::new(), 0).unwrap_err();
        assert!(err.to_string().contains("`cpu profile`"), "{err}");
    }
}
