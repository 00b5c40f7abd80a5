//! Pyroscope's two push protocols: the legacy `/ingest` request and the Connect
//! `push.v1.PusherService/Push` message that pyroscope-io 1.x sends.

use parca_pprof::proto;
use parca_profile::Profile;
use parca_tsdb::Labels;

use crate::{Error, Series, sanitize_label_name, to_series};

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
    Ok(out)
}

/// The query parameters of a legacy Pyroscope `/ingest` request.
#[derive(Debug, Clone, Default)]
pub struct LegacyIngest {
    /// `name`: the application and its tags, `app.cpu{env=prod,region=eu}`.
    pub name: String,
    /// `from`: start of the window, Unix seconds.
    pub from_s: Option<i64>,
    /// `until`: end of the window, Unix seconds.
    pub until_s: Option<i64>,
    /// `format`: `pprof` (the default when the body is a pprof) or `folded` (also `lines`).
    pub format: Option<String>,
    /// `sampleRate`: samples per second of a folded CPU profile (default 100).
    pub sample_rate: Option<i64>,
    /// `spyName`: the agent that sent it, kept as the `spy_name` label.
    pub spy_name: Option<String>,
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

/// Decodes a legacy `/ingest` request: `body` is a pprof (gzipped or raw) or folded text.
/// The application name becomes the `service_name` label and the tags series labels.
pub fn legacy_ingest(
    request: &LegacyIngest,
    body: &[u8],
    options: &parca_pprof::DecodeOptions,
    now_ms: i64,
) -> Result<Vec<Series>, Error> {
    let (app, tags) = parse_app_name(&request.name)?;
    let (service, name) = match app.rsplit_once('.') {
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

    let from_ms = request.from_s.map(|s| s.saturating_mul(1000));
    let duration_ns = match (request.from_s, request.until_s) {
        (Some(from), Some(until)) if until > from => (until - from).saturating_mul(1_000_000_000),
        _ => 0,
    };
    let format = request.format.as_deref().unwrap_or("folded");
    let mut profiles = match format {
        "pprof" => parca_profile::decode(body, options)?,
        "folded" | "lines" => vec![folded_profile(body, request.sample_rate.unwrap_or(100))?],
        other => {
            return Err(Error::Ingest {
                fault: format!("format `{other}` is not supported; send `pprof` or `folded`"),
            });
        }
    };
    for p in &mut profiles {
        if duration_ns > 0 {
            p.meta.duration_nanos = duration_ns;
        }
        if let Some(from_ms) = from_ms {
            p.meta.time_nanos = from_ms.saturating_mul(1_000_000);
        }
    }
    let name =
        name.unwrap_or_else(
            || match profiles.first().map(|p| p.meta.period_type.kind.as_str()) {
                Some("space" | "objects") => "memory",
                _ => "process_cpu",
            },
        );
    to_series(name, &target, profiles, from_ms.unwrap_or(now_ms))
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
    let mut strings = vec![String::new(), "samples".into(), "count".into()];
    strings.extend(["cpu".into(), "nanoseconds".into()]);
    let mut profile = proto::Profile {
        sample_type: vec![proto::ValueType { r#type: 1, unit: 2 }],
        period_type: Some(proto::ValueType { r#type: 3, unit: 4 }),
        period: 1_000_000_000 / sample_rate,
        ..Default::default()
    };
    let mut function_of = std::collections::HashMap::new();
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
        let mut location_id = Vec::new();
        for frame in stack.split(';').rev() {
            let next = function_of.len() as u64 + 1;
            let id = *function_of.entry(frame.to_owned()).or_insert_with(|| {
                strings.push(frame.to_owned());
                profile.function.push(proto::Function {
                    id: next,
                    name: strings.len() as i64 - 1,
                    ..Default::default()
                });
                profile.location.push(proto::Location {
                    id: next,
                    line: vec![proto::Line {
                        function_id: next,
                        line: 0,
                        column: 0,
                    }],
                    ..Default::default()
                });
                next
            });
            location_id.push(id);
        }
        profile.sample.push(proto::Sample {
            location_id,
            value: vec![count],
            label: Vec::new(),
        });
    }
    profile.string_table = strings;
    let pprof = parca_pprof::Pprof::from_proto(&profile).map_err(parca_profile::Error::from)?;
    Ok(parca_profile::from_pprof(&pprof)
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
            from_s: Some(1795310670),
            until_s: Some(1795310680),
            format: Some("pprof".into()),
            sample_rate: Some(100),
            spy_name: Some("pyspy".into()),
        };
        let series = legacy_ingest(&request, &body, &Default::default(), 1).expect("valid");
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
            from_s: Some(100),
            until_s: Some(110),
            ..Default::default()
        };
        let series = legacy_ingest(
            &request,
            b"main;work 3\nmain;idle 1\n",
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
            legacy_ingest(&request, body, &Default::default(), 1)
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
}
