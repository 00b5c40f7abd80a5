//! Pyroscope's two push protocols: the legacy `/ingest` request and the Connect
//! `push.v1.PusherService/Push` message that pyroscope-io 1.x sends.

use std::collections::BTreeMap;

use parca_pprof::proto;
use parca_profile::Profile;
use parca_tsdb::Labels;

use parca_vocab::sanitize_label_name;

use crate::{Error, Series, to_series};

/// `push.v1.PushRequest`, derived by hand from Pyroscope's `push.proto`.
#[derive(Clone, PartialEq, prost::Message)]
struct PushRequest {
    #[prost(message, repeated, tag = "1")]
    series: Vec<RawProfileSeries>,
}

/// `push.v1.RawProfileSeries`: one series' labels and its raw pprof samples.
#[derive(Clone, PartialEq, prost::Message)]
struct RawProfileSeries {
    #[prost(message, repeated, tag = "1")]
    labels: Vec<LabelPair>,
    #[prost(message, repeated, tag = "2")]
    samples: Vec<RawSample>,
}

/// `types.v1.LabelPair`.
#[derive(Clone, PartialEq, prost::Message)]
struct LabelPair {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(string, tag = "2")]
    value: String,
}

/// `push.v1.RawSample`: one pprof, gzipped or raw.
#[derive(Clone, PartialEq, prost::Message)]
struct RawSample {
    #[prost(bytes = "vec", tag = "1")]
    raw_profile: Vec<u8>,
    #[prost(string, tag = "2")]
    id: String,
}

/// Decodes a Connect `PushRequest` (already stripped of its content encoding) into series.
/// Each series' labels become series labels: `__name__` names the profile (`process_cpu`,
/// `memory`, …); other labels starting with `__` are Pyroscope's own and dropped. `now_ms` is the
/// time of profiles that carry none.
pub fn decode_push_request(
    body: &[u8],
    options: &parca_pprof::DecodeOptions,
    now_ms: i64,
) -> Result<Vec<Series>, Error> {
    let request: PushRequest = prost::Message::decode(body).map_err(|e| Error::Push {
        fault: format!("not a push.v1.PushRequest protobuf: {e}"),
    })?;
    let mut out = Vec::new();
    for (i, series) in request.series.into_iter().enumerate() {
        let mut name = None;
        let mut pairs = Vec::new();
        for label in series.labels {
            if label.name == "__name__" {
                name = Some(label.value);
            } else if !label.name.starts_with("__") {
                pairs.push((sanitize_label_name(&label.name), label.value));
            }
        }
        let name = name.ok_or_else(|| Error::Push {
            fault: format!("series {i} has no `__name__` label"),
        })?;
        let target = Labels::new(pairs).map_err(Error::Labels)?;
        for (j, sample) in series.samples.into_iter().enumerate() {
            let profiles =
                parca_profile::decode(&sample.raw_profile, options).map_err(|e| Error::Push {
                    fault: format!("series {i} sample {j}: {e}"),
                })?;
            out.extend(to_series(
                &sanitize_label_name(&name),
                &target,
                profiles,
                now_ms,
            )?);
        }
    }
    // Each span's samples come as a series of their own: one profile per series and time.
    Ok(crate::series::join_span_parts(out))
}

/// The query parameters of a legacy Pyroscope `/ingest` request.
#[derive(Debug, Clone, Default)]
pub struct LegacyIngest {
    /// `name`: the application and its tags, `app.cpu{env=prod,region=eu}`.
    pub name: String,
    /// `from`: start of the window, Unix time in seconds, milliseconds, microseconds or
    /// nanoseconds, told apart by size as Pyroscope does (the Go SDK sends nanoseconds, the
    /// Python and Node SDKs seconds).
    pub from: Option<i64>,
    /// `until`: end of the window, in the same units as `from`.
    pub until: Option<i64>,
    /// `format`: `pprof` (the default when the body is a pprof) or `folded` (also `lines`).
    pub format: Option<String>,
    /// `sampleRate`: samples per second of a folded CPU profile (default 100).
    pub sample_rate: Option<i64>,
    /// `spyName`: the agent that sent it, kept as the `spy_name` label.
    pub spy_name: Option<String>,
}

/// The body of an `/ingest` request.
#[derive(Debug, Clone, Copy)]
pub enum IngestBody<'a> {
    /// The profile itself: pprof (gzipped or not) or folded text, as `format` says.
    Raw(&'a [u8]),
    /// The parts of a `multipart/form-data` body, as Pyroscope's Go SDK sends them.
    Form {
        /// `profile`: a pprof.
        profile: &'a [u8],
        /// `prev_profile`: the previous snapshot of a cumulative profile (older Go SDKs); the
        /// cumulative sample types are stored as what they gained since it.
        prev_profile: Option<&'a [u8]>,
        /// `sample_type_config`: JSON naming the sample types to keep and what they are.
        sample_type_config: Option<&'a [u8]>,
    },
}

/// Pyroscope's profile-name suffixes and the Parca profile name each maps to.
const SUFFIXES: &[(&str, &str)] = &[
    ("cpu", "process_cpu"),
    ("itimer", "process_cpu"),
    ("wall", "wall"),
    ("alloc_objects", "memory"),
    ("alloc_space", "memory"),
    ("inuse_objects", "memory"),
    ("inuse_space", "memory"),
    ("goroutines", "goroutine"),
    ("mutex_count", "mutex"),
    ("mutex_duration", "mutex"),
    ("block_count", "block"),
    ("block_duration", "block"),
];

/// One entry of `sample_type_config`, keyed by a pprof sample type such as `alloc_space`.
#[derive(Debug, Default, serde::Deserialize)]
struct SampleTypeConfig {
    /// The Pyroscope name of the type (`mutex_count`), which says which profile it belongs to.
    #[serde(rename = "display-name", default)]
    display_name: Option<String>,
    /// `average` for a snapshot (in-use memory, goroutines), `sum` (default) for a window.
    #[serde(default)]
    aggregation: Option<String>,
    /// Grows over the program's life: with a `prev_profile`, the growth since it is stored.
    #[serde(default)]
    cumulative: bool,
}

/// Sample types that are snapshots (stored at a time, not over a window) by default.
fn snapshot_by_default(kind: &str) -> bool {
    kind.starts_with("inuse_") || kind == "goroutine" || kind == "goroutines"
}

/// The Parca profile name of a sample type, by its Pyroscope name (display name or type), as
/// Pyroscope's own ingester tells them apart.
fn name_of_type(pyroscope_name: &str) -> Option<&'static str> {
    if let Some((_, name)) = SUFFIXES.iter().find(|(s, _)| *s == pyroscope_name) {
        return Some(name);
    }
    let n = pyroscope_name;
    Some(if n.contains("cpu") || n == "samples" {
        "process_cpu"
    } else if n.starts_with("alloc_") || n.starts_with("inuse_") || n == "space" || n == "objects" {
        "memory"
    } else if n.starts_with("mutex_") || n == "contentions" || n == "delay" {
        // Pyroscope's default for Go's contention types, which block and mutex share.
        "mutex"
    } else if n.starts_with("block_") {
        "block"
    } else if n.starts_with("goroutine") {
        "goroutine"
    } else {
        return None;
    })
}

/// A Unix time in seconds, milliseconds, microseconds or nanoseconds, in nanoseconds.
fn unix_nanos(t: i64) -> i64 {
    match t.unsigned_abs() {
        n if n >= 100_000_000_000_000_000 => t,
        n if n >= 100_000_000_000_000 => t.saturating_mul(1_000),
        n if n >= 100_000_000_000 => t.saturating_mul(1_000_000),
        _ => t.saturating_mul(1_000_000_000),
    }
}

/// Decodes a legacy `/ingest` request. The application name becomes the `service_name` label and
/// its tags series labels; each sample type is named by the name's suffix (`app.cpu`), else by
/// `sample_type_config`, else by the type itself, as Pyroscope does. Snapshot types (in-use
/// memory, goroutines) are stored at `until`, the others over the window `from`..`until`.
#[expect(
    clippy::too_many_lines,
    reason = "the request forms Pyroscope's /ingest takes (a raw body of folded or pprof, multipart with a previous profile and sample type config) read in one place"
)]
pub fn legacy_ingest(
    request: &LegacyIngest,
    body: IngestBody<'_>,
    options: &parca_pprof::DecodeOptions,
    now_ms: i64,
) -> Result<Vec<Series>, Error> {
    let fault = |fault: String| Error::Ingest { fault };
    let (app, tags) = parse_app_name(&request.name)?;
    let (service, named) = match app.rsplit_once('.') {
        Some((service, suffix)) => match SUFFIXES.iter().find(|(s, _)| *s == suffix) {
            Some((_, name)) => (service, Some(*name)),
            None => (app, None),
        },
        None => (app, None),
    };
    let mut pairs = vec![("service_name".to_owned(), service.to_owned())];
    if let Some(spy) = &request.spy_name {
        pairs.push(("spy_name".into(), spy.clone()));
    }
    pairs.extend(tags);
    let target = Labels::new(pairs).map_err(Error::Labels)?;

    let (mut profiles, previous, config) = match body {
        IngestBody::Raw(body) => {
            let profiles = match request.format.as_deref().unwrap_or("folded") {
                "pprof" => parca_profile::decode(body, options)?,
                "folded" | "lines" => {
                    vec![folded_profile(body, request.sample_rate.unwrap_or(100))?]
                }
                other => {
                    return Err(fault(format!(
                        "format `{other}` is not supported; send `pprof` or `folded`"
                    )));
                }
            };
            (profiles, Vec::new(), None)
        }
        IngestBody::Form {
            profile,
            prev_profile,
            sample_type_config,
        } => {
            let profiles = parca_profile::decode(profile, options)
                .map_err(|e| fault(format!("form part `profile`: {e}")))?;
            let previous = match prev_profile {
                Some(prev) => parca_profile::decode(prev, options)
                    .map_err(|e| fault(format!("form part `prev_profile`: {e}")))?,
                None => Vec::new(),
            };
            let config = sample_type_config
                .map(|json| {
                    serde_json::from_slice::<BTreeMap<String, SampleTypeConfig>>(json).map_err(
                        |e| fault(format!("form part `sample_type_config` is not valid: {e}")),
                    )
                })
                .transpose()?;
            (profiles, previous, config)
        }
    };
    if let Some(config) = &config {
        let kinds: Vec<String> = profiles
            .iter()
            .map(|p| p.meta.sample_type.kind.clone())
            .collect();
        profiles.retain(|p| config.contains_key(&p.meta.sample_type.kind));
        if profiles.is_empty() {
            return Err(fault(format!(
                "none of the profile's sample types ({}) is in `sample_type_config`",
                kinds.join(", ")
            )));
        }
    }

    let from_ns = request.from.map(unix_nanos);
    let until_ns = request.until.map(unix_nanos);
    let window_ns = match (from_ns, until_ns) {
        (Some(from), Some(until)) if until > from => until - from,
        _ => 0,
    };
    let no_config = SampleTypeConfig::default();
    let mut by_name: Vec<(&'static str, Vec<Profile>)> = Vec::new();
    for mut profile in profiles {
        let kind = profile.meta.sample_type.kind.clone();
        let entry = config.as_ref().and_then(|c| c.get(&kind));
        let settings = entry.unwrap_or(&no_config);
        let cumulative = if entry.is_some() {
            settings.cumulative
        } else {
            // Pyroscope's defaults: Go's cumulative types.
            parca_profile::is_cumulative(&kind)
        };
        let mut snapshot = match &settings.aggregation {
            Some(aggregation) => aggregation == "average",
            None => snapshot_by_default(&kind),
        };
        if cumulative {
            match previous
                .iter()
                .find(|p| p.meta.sample_type == profile.meta.sample_type)
            {
                Some(prev) => profile = parca_profile::growth(prev, &profile)?,
                // Without the previous snapshot, a cumulative profile is one itself.
                None => snapshot = true,
            }
        }
        let (time_ns, duration_ns) = if snapshot {
            (until_ns.or(from_ns), 0)
        } else {
            (from_ns, window_ns)
        };
        if let Some(time_ns) = time_ns {
            profile.meta.time_nanos = time_ns;
        }
        profile.meta.duration_nanos = duration_ns;
        let pyroscope_name = settings.display_name.as_deref().unwrap_or(&kind);
        let name = named.or_else(|| name_of_type(pyroscope_name)).unwrap_or(
            match profile.meta.period_type.kind.as_str() {
                "space" | "objects" => "memory",
                _ => "process_cpu",
            },
        );
        match by_name.iter_mut().find(|(n, _)| *n == name) {
            Some((_, group)) => group.push(profile),
            None => by_name.push((name, vec![profile])),
        }
    }
    let default_ms = from_ns.map_or(now_ms, |ns| ns / 1_000_000);
    let mut out = Vec::new();
    for (name, group) in by_name {
        out.extend(to_series(name, &target, group, default_ms)?);
    }
    Ok(out)
}

/// Tags of a Pyroscope application name, as (label name, value) pairs.
type Tags = Vec<(String, String)>;

/// Splits `app.cpu{env=prod,region=eu}` into the name and its tags.
fn parse_app_name(name: &str) -> Result<(&str, Tags), Error> {
    let fault = |what: String| Error::Ingest { fault: what };
    let Some((app, rest)) = name.split_once('{') else {
        return if name.is_empty() {
            Err(fault("the `name` parameter is missing".into()))
        } else {
            Ok((name, Vec::new()))
        };
    };
    let tags = rest.strip_suffix('}').ok_or_else(|| {
        fault(format!(
            "name `{name}`: tags must end with `}}`, as in app.cpu{{env=prod}}"
        ))
    })?;
    let mut out = Vec::new();
    for tag in tags.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        let (key, value) = tag.split_once('=').ok_or_else(|| {
            fault(format!(
                "name `{name}`: tag `{tag}` is not of the form key=value"
            ))
        })?;
        out.push((sanitize_label_name(key.trim()), value.trim().to_owned()));
    }
    if app.is_empty() {
        return Err(fault(format!("name `{name}` has no application name")));
    }
    Ok((app, out))
}

/// A CPU profile from folded lines (`main;work;spin 42`), counting samples at `sample_rate` Hz.
fn folded_profile(body: &[u8], sample_rate: i64) -> Result<Profile, Error> {
    let text = std::str::from_utf8(body).map_err(|e| Error::Ingest {
        fault: format!("folded body is not UTF-8: {e}"),
    })?;
    if sample_rate <= 0 {
        return Err(Error::Ingest {
            fault: format!("sampleRate must be positive, got {sample_rate}"),
        });
    }
    let mut b = parca_pprof::ProfileBuilder::new();
    let samples = b.value_type("samples", "count");
    let cpu = b.value_type("cpu", "nanoseconds");
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let (stack, count) = line.rsplit_once(' ').ok_or_else(|| Error::Ingest {
            fault: format!("folded line {}: expected `frame;frame value`", n + 1),
        })?;
        let count: i64 = count.parse().map_err(|_| Error::Ingest {
            fault: format!("folded line {}: `{count}` is not a number", n + 1),
        })?;
        let location_id = stack
            .split(';')
            .rev()
            .map(|frame| {
                let function = b.function(frame, "", "", 0);
                b.location(0, 0, &[(function, 0)])
            })
            .collect();
        b.sample(location_id, vec![count], Vec::new());
    }
    let profile = proto::Profile {
        sample_type: vec![samples],
        period_type: Some(cpu),
        period: 1_000_000_000 / sample_rate,
        ..b.finish()
    };
    let pprof = parca_pprof::Pprof::from_proto(&profile).map_err(parca_profile::Error::from)?;
    Ok(parca_profile::from_pprof(&pprof)?
        .pop()
        .expect("one sample type"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use parca_tsdb::NAME_LABEL;

    fn capture(name: &str) -> Vec<u8> {
        let path = format!(
            "{}/../../tests/testdata/pprof/ingest/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        std::fs::read(path).expect("captured request")
    }

    #[test]
    fn decodes_pyroscope_io_push() {
        let body = capture("pyroscope-io-1.4.0-push.body");
        let body = parca_pprof::decompress(&body, &Default::default()).expect("gzip");
        let series = decode_push_request(&body, &Default::default(), 1).expect("valid");
        let names: std::collections::BTreeSet<_> = series
            .iter()
            .map(|s| s.labels.get(NAME_LABEL).unwrap().to_owned())
            .collect();
        assert!(
            names.contains("process_cpu:cpu:nanoseconds:cpu:nanoseconds:delta"),
            "{names:?}"
        );
        assert!(
            series
                .iter()
                .all(|s| s.labels.get("service_name").is_some())
        );
    }

    #[test]
    fn decodes_pyroscope_io_legacy_ingest() {
        let body = capture("pyroscope-io-0.8.16-ingest.body");
        let request = LegacyIngest {
            name: "peers.python.legacy".into(),
            from: Some(1795310670),
            until: Some(1795310680),
            format: Some("pprof".into()),
            sample_rate: Some(100),
            spy_name: Some("pyspy".into()),
        };
        let series =
            legacy_ingest(&request, IngestBody::Raw(&body), &Default::default(), 1).expect("valid");
        let first = &series[0];
        assert_eq!(
            first.labels.get("service_name"),
            Some("peers.python.legacy")
        );
        assert_eq!(first.timestamp_ms, 1_795_310_670_000);
        assert!(
            first
                .labels
                .get(NAME_LABEL)
                .unwrap()
                .starts_with("process_cpu:"),
            "{}",
            first.labels
        );
    }

    #[test]
    fn folded_ingest_with_tags() {
        let request = LegacyIngest {
            name: "shop.cpu{env=prod, region=eu}".into(),
            from: Some(100),
            until: Some(110),
            ..Default::default()
        };
        let series = legacy_ingest(
            &request,
            IngestBody::Raw(b"main;work 3\nmain;idle 1\n"),
            &Default::default(),
            1,
        )
        .expect("valid");
        assert_eq!(series.len(), 1);
        let s = &series[0];
        assert_eq!(
            s.labels.to_string(),
            r#"{__name__="process_cpu:samples:count:cpu:nanoseconds:delta", env="prod", region="eu", service_name="shop"}"#
        );
        assert_eq!(s.profile.total(), 4);
        assert_eq!(s.profile.meta.period, 10_000_000);
    }

    #[test]
    fn bad_requests_name_the_fault() {
        let err = |name: &str, body: &[u8], format: Option<&str>| {
            let request = LegacyIngest {
                name: name.into(),
                format: format.map(Into::into),
                ..Default::default()
            };
            legacy_ingest(&request, IngestBody::Raw(body), &Default::default(), 1)
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            err("app{env", b"", None),
            "invalid ingest request: name `app{env`: tags must end with `}`, as in app.cpu{env=prod}"
        );
        assert_eq!(
            err("app", b"main 1x", None),
            "invalid ingest request: folded line 1: `1x` is not a number"
        );
        assert_eq!(
            err("app", b"", Some("trie")),
            "invalid ingest request: format `trie` is not supported; send `pprof` or `folded`"
        );
        assert!(
            decode_push_request(b"\xff\xff", &Default::default(), 0)
                .unwrap_err()
                .to_string()
                .starts_with("invalid push request: not a push.v1.PushRequest protobuf")
        );
    }

    /// A corpus pprof, re-encoded with its values multiplied by `factor`.
    fn scaled_pprof(path: &str, factor: i64) -> Vec<u8> {
        let bytes = std::fs::read(format!(
            "{}/../../tests/testdata/pprof/{path}",
            env!("CARGO_MANIFEST_DIR")
        ))
        .expect("corpus file");
        let mut proto = parca_pprof::decode(&bytes, &Default::default())
            .expect("valid")
            .to_proto();
        for sample in &mut proto.sample {
            sample.value.iter_mut().for_each(|v| *v *= factor);
        }
        parca_pprof::encode(&proto, true)
    }

    fn names(series: &[Series]) -> Vec<String> {
        series
            .iter()
            .map(|s| s.labels.get(NAME_LABEL).unwrap().to_owned())
            .collect()
    }

    /// The Go SDK (1.x) sends heap profiles whose allocations it already made deltas of, with a
    /// `sample_type_config` saying so, and times in nanoseconds.
    #[test]
    fn go_sdk_heap_form() {
        let profile = scaled_pprof("go/go-heap.pb.gz", 1);
        let config = br#"{"alloc_objects":{"units":"objects"},"alloc_space":{"units":"bytes"},
            "inuse_space":{"units":"bytes","aggregation":"average"},
            "inuse_objects":{"units":"objects","aggregation":"average"}}"#;
        let request = LegacyIngest {
            name: "shop{env=prod}".into(),
            from: Some(1_700_000_000_000_000_000),
            until: Some(1_700_000_010_000_000_000),
            spy_name: Some("gospy".into()),
            ..Default::default()
        };
        let body = IngestBody::Form {
            profile: &profile,
            prev_profile: None,
            sample_type_config: Some(config),
        };
        let series = legacy_ingest(&request, body, &Default::default(), 1).expect("valid");
        assert_eq!(
            names(&series),
            [
                "memory:alloc_objects:count:space:bytes:delta",
                "memory:alloc_space:bytes:space:bytes:delta",
                "memory:inuse_objects:count:space:bytes",
                "memory:inuse_space:bytes:space:bytes",
            ]
        );
        assert_eq!(series[0].timestamp_ms, 1_700_000_000_000);
        assert_eq!(series[0].profile.meta.duration_nanos, 10_000_000_000);
        // Snapshots are stored at the end of the window.
        assert_eq!(series[3].timestamp_ms, 1_700_000_010_000);
        assert_eq!(series[3].labels.get("env"), Some("prod"));
    }

    /// Older Go SDKs send cumulative contention with the previous snapshot; display names say
    /// whether it is the block or the mutex profile.
    #[test]
    fn prev_profile_makes_cumulative_types_deltas() {
        let previous = scaled_pprof("go/go-mutex.pb.gz", 1);
        let current = scaled_pprof("go/go-mutex.pb.gz", 3);
        let config = br#"{"contentions":{"display-name":"block_count","cumulative":true},
            "delay":{"display-name":"block_duration","cumulative":true}}"#;
        let request = LegacyIngest {
            name: "shop".into(),
            from: Some(1_700_000_000),
            until: Some(1_700_000_010),
            ..Default::default()
        };
        let body = |prev_profile| IngestBody::Form {
            profile: &current,
            prev_profile,
            sample_type_config: Some(config),
        };
        let series =
            legacy_ingest(&request, body(Some(&previous)), &Default::default(), 1).expect("valid");
        assert_eq!(
            names(&series),
            [
                "block:contentions:count:contentions:count:delta",
                "block:delay:nanoseconds:contentions:count:delta",
            ]
        );
        let single = legacy_ingest(&request, IngestBody::Raw(&previous), &Default::default(), 1);
        assert!(single.is_err(), "a raw body defaults to folded text");
        let once: i64 = parca_profile::decode(&previous, &Default::default())
            .unwrap()
            .iter()
            .map(|p| p.total())
            .sum();
        let grown: i64 = series.iter().map(|s| s.profile.total()).sum();
        assert_eq!(grown, 2 * once);
        // Without the previous snapshot, the cumulative profile is stored as a snapshot.
        let series = legacy_ingest(&request, body(None), &Default::default(), 1).expect("valid");
        assert_eq!(
            names(&series)[0],
            "block:contentions:count:contentions:count"
        );
    }

    #[test]
    fn bad_forms_name_the_part() {
        let profile = scaled_pprof("go/go-heap.pb.gz", 1);
        let request = LegacyIngest {
            name: "shop".into(),
            ..Default::default()
        };
        let err = |profile: &[u8], config: &[u8]| {
            let body = IngestBody::Form {
                profile,
                prev_profile: None,
                sample_type_config: Some(config),
            };
            legacy_ingest(&request, body, &Default::default(), 1)
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            err(&profile, br#"{"cpu": {}}"#),
            "invalid ingest request: none of the profile's sample types (alloc_objects, \
             alloc_space, inuse_objects, inuse_space) is in `sample_type_config`"
        );
        assert!(
            err(&profile, b"{nope").starts_with(
                "invalid ingest request: form part `sample_type_config` is not valid: key must \
                 be a string"
            ),
            "{}",
            err(&profile, b"{nope")
        );
        assert!(
            err(b"junk", b"{}").starts_with("invalid ingest request: form part `profile`: "),
            "{}",
            err(b"junk", b"{}")
        );
    }

    #[test]
    fn times_in_any_unit() {
        for t in [
            1_700_000_000,
            1_700_000_000_000,
            1_700_000_000_000_000,
            1_700_000_000_000_000_000,
        ] {
            assert_eq!(unix_nanos(t), 1_700_000_000_000_000_000, "{t}");
        }
    }
}
