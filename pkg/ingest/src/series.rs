//! Naming profiles with Parca's profile-type strings and turning sample labels into series labels.

use std::sync::Arc;

use parca_profile::{Meta, Profile, Samples, SpansBuilder, split_by_string_labels};
use parca_tsdb::{Labels, NAME_LABEL, span_labels};
use parca_vocab::{is_valid_label_name, sanitize_label_name};

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
    parca_vocab::ProfileTypeName::from_parts(
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

/// Labels split into the series' and the span's: `(series labels, value per span name)`.
fn take_spans(
    names: &[String],
    labels: impl IntoIterator<Item = (String, String)>,
) -> (Vec<(String, String)>, Vec<String>) {
    let mut values = vec![String::new(); names.len()];
    let mut rest = Vec::new();
    for (k, v) in labels {
        match names.iter().position(|n| *n == k) {
            Some(i) => values[i] = v,
            None => rest.push((k, v)),
        }
    }
    (rest, values)
}

/// Turns the profiles of one pprof (one per sample type, sharing tables) into series: the
/// `target` labels, `__name__` from `name` and each profile's types, and the samples' string
/// labels (a clash with a target label is renamed `exported_<name>`). `timestamp_ms` is used
/// when the profile does not carry its own time.
///
/// Labels named in [`parca_tsdb::span_labels`] (`span_id`, `trace_id`, …), on samples or in `target`, make
/// no series: their values are stored per sample (`parca_profile::SampleSpans`), the samples of
/// all spans of one series in one profile.
pub fn to_series(
    name: &str,
    target: &Labels,
    profiles: Vec<Profile>,
    timestamp_ms: i64,
) -> Result<Vec<Series>, Error> {
    if !is_valid_label_name(name) || name.starts_with("__") {
        return Err(Error::InvalidName { name: name.into() });
    }
    let span_names = span_labels();
    let (target_pairs, target_span) = take_spans(
        &span_names,
        target
            .iter()
            .filter(|l| l.name != NAME_LABEL)
            .map(|l| (l.name.clone(), l.value.clone())),
    );
    // Every series made of this pprof shares its capture: a merge counts its duration once.
    let capture_id = new_capture_id();
    // Per series (its labels without `__name__`): per sample type, the profiles of its spans.
    type SpanParts = Vec<(Vec<String>, Profile)>;
    type SeriesParts = (Vec<(String, String)>, Vec<SpanParts>);
    let mut by_series: Vec<SeriesParts> = Vec::new();
    for group in split_by_string_labels(profiles) {
        let (sample_pairs, mut span) = take_spans(&span_names, group.labels);
        for (own, from_target) in span.iter_mut().zip(&target_span) {
            if own.is_empty() {
                own.clone_from(from_target);
            }
        }
        let mut pairs = target_pairs.clone();
        for (key, value) in sample_pairs {
            let mut key = sanitize_label_name(&key);
            while key.starts_with("__") || pairs.iter().any(|(k, _)| *k == key) {
                key = format!("exported_{key}");
            }
            pairs.push((key, value));
        }
        let at = match by_series.iter().position(|(p, _)| *p == pairs) {
            Some(at) => at,
            None => {
                by_series.push((pairs, Vec::new()));
                by_series.len() - 1
            }
        };
        let types = &mut by_series[at].1;
        for profile in group.profiles {
            let at = types
                .iter()
                .position(|parts| parts[0].1.meta.sample_type == profile.meta.sample_type);
            match at {
                Some(i) => types[i].push((span.clone(), profile)),
                None => types.push(vec![(span.clone(), profile)]),
            }
        }
    }
    let mut out = Vec::new();
    for (pairs, types) in by_series {
        for parts in types {
            let mut profile = with_spans(&span_names, parts);
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

/// One profile of the samples of `parts` (each a span's values and its samples, all of one
/// sample type over the same tables), with a span column when any part has a span.
fn with_spans(names: &[String], mut parts: Vec<(Vec<String>, Profile)>) -> Profile {
    let no_span = |values: &[String]| values.iter().all(String::is_empty);
    if parts.len() == 1 && no_span(&parts[0].0) {
        return parts.pop().expect("one part").1;
    }
    let mut builder = SpansBuilder::new(names.to_vec());
    let mut samples = Samples::default();
    let first = parts[0].1.clone();
    for (values, p) in &parts {
        samples.stacks.extend_from_slice(&p.samples.stacks);
        samples.labels.extend_from_slice(&p.samples.labels);
        samples.values.extend_from_slice(&p.samples.values);
        builder.push_n(values, p.samples.len());
    }
    samples.spans = builder.finish();
    Profile {
        tables: first.tables,
        meta: first.meta,
        samples,
    }
}

/// Joins series of one batch that are the same series at the same time, and differ only by
/// their spans (as Pyroscope's SDKs push each span's samples under its own tags): one profile
/// holding every span's samples, since a series holds one profile per millisecond. Others pass
/// through in order.
pub(crate) fn join_span_parts(batch: Vec<Series>) -> Vec<Series> {
    let mut at: std::collections::HashMap<(Labels, i64), usize> = Default::default();
    let mut out: Vec<Vec<Series>> = Vec::new();
    for s in batch {
        match at.entry((s.labels.clone(), s.timestamp_ms)) {
            std::collections::hash_map::Entry::Occupied(e)
                if out[*e.get()][0].profile.samples.spans.is_some()
                    && s.profile.samples.spans.is_some() =>
            {
                out[*e.get()].push(s);
            }
            std::collections::hash_map::Entry::Occupied(_) => out.push(vec![s]),
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(out.len());
                out.push(vec![s]);
            }
        }
    }
    out.into_iter().map(join_series).collect()
}

/// The series of `parts` (one series at one time, each with spans) as one profile in tables of
/// its own, each row's span kept.
fn join_series(mut parts: Vec<Series>) -> Series {
    if parts.len() == 1 {
        return parts.pop().expect("one part");
    }
    let mut names: Vec<String> = Vec::new();
    for p in &parts {
        for n in &p
            .profile
            .samples
            .spans
            .as_ref()
            .expect("joined parts have spans")
            .names
        {
            if !names.contains(n) {
                names.push(n.clone());
            }
        }
    }
    let mut tables = parca_profile::Tables::new();
    let mut importer = parca_profile::Importer::new();
    let mut builder = SpansBuilder::new(names.clone());
    let mut samples = Samples::default();
    let mut values = vec![String::new(); names.len()];
    for p in &parts {
        let imported = importer.import(&mut tables, &p.profile);
        let spans = imported.spans.as_ref().expect("joined parts have spans");
        for i in 0..imported.len() {
            values.iter_mut().for_each(String::clear);
            if let Some(span) = spans.span_of(i) {
                for (name, v) in spans.names.iter().zip(span) {
                    let k = names.iter().position(|n| n == name).expect("collected");
                    values[k].clone_from(v);
                }
            }
            builder.push(&values);
            samples.stacks.push(imported.stacks[i]);
            samples.labels.push(imported.labels[i]);
            samples.values.push(imported.values[i]);
        }
    }
    samples.spans = builder.finish();
    let first = parts.swap_remove(0);
    Series {
        labels: first.labels,
        timestamp_ms: first.timestamp_ms,
        profile: Profile {
            tables: Arc::new(tables),
            meta: first.profile.meta,
            samples,
        },
    }
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
    fn span_labels_are_stored_per_sample_not_as_series() {
        use parca_pprof::proto;
        // Two spans (and samples of no span) of one handler: one series, every sample kept.
        let strings = [
            "",
            "cpu",
            "nanoseconds",
            "main",
            "span_id",
            "handler",
            "a",
            "b",
            "/x",
        ];
        let label = |key: i64, str: i64| proto::Label {
            key,
            str,
            ..Default::default()
        };
        let sample = |v: i64, span: Option<i64>| proto::Sample {
            location_id: vec![1],
            value: vec![v],
            label: [Some(label(5, 8)), span.map(|s| label(4, s))]
                .into_iter()
                .flatten()
                .collect(),
        };
        let pprof = proto::Profile {
            sample_type: vec![proto::ValueType { r#type: 1, unit: 2 }],
            sample: vec![sample(5, Some(6)), sample(7, Some(7)), sample(11, None)],
            location: vec![proto::Location {
                id: 1,
                line: vec![proto::Line {
                    function_id: 1,
                    line: 3,
                    column: 0,
                }],
                ..Default::default()
            }],
            function: vec![proto::Function {
                id: 1,
                name: 3,
                ..Default::default()
            }],
            string_table: strings.map(String::from).to_vec(),
            ..Default::default()
        };
        let bytes = parca_pprof::encode(&pprof, false);
        let profiles = parca_profile::decode(&bytes, &Default::default()).unwrap();
        let target = Labels::new([("job", "py"), ("trace_id", "t1")]).unwrap();
        let series = to_series("process_cpu", &target, profiles, 7).unwrap();
        assert_eq!(series.len(), 1);
        let s = &series[0];
        assert_eq!(s.labels.get("handler"), Some("/x"));
        assert_eq!(s.labels.get("span_id"), None);
        assert_eq!(
            s.labels.get("trace_id"),
            None,
            "a target's span label is per sample too"
        );
        assert_eq!(s.profile.total(), 23);
        let spans = s.profile.samples.spans.as_ref().expect("spans");
        let mut per_span: Vec<(Vec<String>, i64)> = (0..s.profile.samples.len())
            .map(|i| {
                let span = spans.span_of(i).map(<[_]>::to_vec).unwrap_or_default();
                (span, s.profile.samples.values[i])
            })
            .collect();
        per_span.sort();
        let v = |s: &str| s.to_owned();
        assert_eq!(
            per_span,
            [
                (vec![v(""), v("t1"), v("")], 11),
                (vec![v("a"), v("t1"), v("")], 5),
                (vec![v("b"), v("t1"), v("")], 7),
            ]
        );
    }

    #[test]
    fn spans_pushed_as_series_of_their_own_join_into_one_profile() {
        let target = |span: &str| Labels::new([("job", "py"), ("span_id", span)]).unwrap();
        let mut batch = Vec::new();
        for span in ["00000000000000aa", "00000000000000bb"] {
            batch.extend(
                to_series("process_cpu", &target(span), corpus("go/go-cpu.pb.gz"), 7).unwrap(),
            );
        }
        let n = batch.len();
        let total: i64 = batch.iter().map(|s| s.profile.total()).sum();
        let joined = join_span_parts(batch);
        assert_eq!(joined.len() * 2, n);
        assert_eq!(joined.iter().map(|s| s.profile.total()).sum::<i64>(), total);
        for s in &joined {
            let spans = s.profile.samples.spans.as_ref().expect("spans");
            assert_eq!(spans.spans.len(), 2, "{}", s.labels);
        }
    }

    #[test]
    fn refuses_bad_names() {
        let err = to_series("cpu profile", &Labels::default(), Vec::new(), 0).unwrap_err();
        assert!(err.to_string().contains("`cpu profile`"), "{err}");
    }
}
