//! OpenTelemetry profiles (OTLP `v1development`, proto release v1.10.0 as carried by the
//! `opentelemetry-proto` crate 0.33) turned into series: each `Profile` of the request becomes a
//! pprof with the request's dictionary, then goes the way every pushed pprof goes
//! ([`crate::to_series`]). Resource and scope attributes become series labels (names sanitized:
//! `service.name` → `service_name`, as Pyroscope does), with the scope's name and version as
//! `otel_scope_name` and `otel_scope_version` (Prometheus' OTLP translation); a sample's
//! attributes become its labels, which split the profile into series as pprof labels do. A
//! sample's `Link` becomes its `trace_id` and `span_id` (lowercase hex), stored per sample as
//! pprof's span labels are ([`parca_tsdb::span_labels`]).
//!
//! The protocol changes incompatibly between releases of the `v1development` protos: this
//! module reads v1.10.0 (dictionary with a stack table, one sample type per profile).

use opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::profiles::v1development::{Profile, ProfilesDictionary};
use parca_pprof::proto;
use parca_tsdb::Labels;
use parca_vocab::sanitize_label_name;
use prost::Message as _;

use crate::{Error, Series, to_series};

/// Decodes an `ExportProfilesServiceRequest` (protobuf) and converts every profile in it.
/// Nothing is returned unless every profile converts: a bad message is refused whole, with
/// the place of the fault.
pub fn decode_export_request(bytes: &[u8], now_ms: i64) -> Result<Vec<Series>, Error> {
    let request = ExportProfilesServiceRequest::decode(bytes).map_err(|e| Error::Otlp {
        fault: format!("not an ExportProfilesServiceRequest: {e}"),
    })?;
    export_request_series(&request, now_ms)
}

/// The series of every profile of `request`.
pub fn export_request_series(
    request: &ExportProfilesServiceRequest,
    now_ms: i64,
) -> Result<Vec<Series>, Error> {
    let empty = ProfilesDictionary::default();
    let dictionary = request.dictionary.as_ref().unwrap_or(&empty);
    let mut out = Vec::new();
    for (r, resource_profiles) in request.resource_profiles.iter().enumerate() {
        let mut target: Vec<(String, String)> = Vec::new();
        if let Some(resource) = &resource_profiles.resource {
            add_attributes(&mut target, &resource.attributes, &dictionary.string_table);
        }
        for (s, scope_profiles) in resource_profiles.scope_profiles.iter().enumerate() {
            let mut labels = target.clone();
            if let Some(scope) = &scope_profiles.scope {
                if !scope.name.is_empty() {
                    labels.push(("otel_scope_name".into(), scope.name.clone()));
                }
                if !scope.version.is_empty() {
                    labels.push(("otel_scope_version".into(), scope.version.clone()));
                }
                add_attributes(&mut labels, &scope.attributes, &dictionary.string_table);
            }
            for (p, profile) in scope_profiles.profiles.iter().enumerate() {
                let place = |fault: String| Error::Otlp {
                    fault: format!(
                        "resource_profiles[{r}].scope_profiles[{s}].profiles[{p}]: {fault}"
                    ),
                };
                let mut labels = labels.clone();
                for &i in &profile.attribute_indices {
                    let (key, value) = dictionary_attribute(dictionary, i).map_err(place)?;
                    push_label(&mut labels, &key, value);
                }
                let pprof = to_pprof(profile, dictionary).map_err(place)?;
                let pprof = parca_pprof::Pprof::from_proto(&pprof)
                    .map_err(|e| place(format!("not a valid profile: {e}")))?;
                let profiles =
                    parca_profile::from_pprof(&pprof).map_err(|e| place(e.to_string()))?;
                let name = profile_name(profiles.first().map(|p| &p.meta));
                let target = Labels::new(labels).map_err(Error::Labels)?;
                out.extend(to_series(&name, &target, profiles, now_ms)?);
            }
        }
    }
    Ok(out)
}

/// The body of OTLP/HTTP's success answer: an `ExportProfilesServiceResponse`, with a partial
/// success when `rejected` profiles were not stored (`message` says why).
pub fn export_response(rejected: i64, message: &str) -> Vec<u8> {
    use opentelemetry_proto::tonic::collector::profiles::v1development::{
        ExportProfilesPartialSuccess, ExportProfilesServiceResponse,
    };
    let response = ExportProfilesServiceResponse {
        partial_success: (rejected > 0).then(|| ExportProfilesPartialSuccess {
            rejected_profiles: rejected,
            error_message: message.to_owned(),
        }),
    };
    response.encode_to_vec()
}

/// `google.rpc.Status`, the body of OTLP/HTTP's error answers.
#[derive(Clone, PartialEq, prost::Message)]
struct RpcStatus {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
}

/// The body of an OTLP/HTTP error answer: a `google.rpc.Status` with the gRPC `code` and
/// `message`.
pub fn rpc_status(code: i32, message: &str) -> Vec<u8> {
    RpcStatus {
        code,
        message: message.to_owned(),
    }
    .encode_to_vec()
}

/// The profile name (`__name__`'s first part) of an OTLP profile, which has none of its own:
/// `process_cpu` for CPU (period type `cpu`, as the OpenTelemetry eBPF profiler and the Go
/// SDK send), `memory` for allocations (unit bytes or objects), else `otlp`.
fn profile_name(meta: Option<&parca_profile::Meta>) -> String {
    let Some(meta) = meta else {
        return "otlp".into();
    };
    let kind = meta.sample_type.kind.as_str();
    if meta.period_type.kind == "cpu" || kind == "cpu" {
        "process_cpu".into()
    } else if kind.starts_with("alloc_") || kind.starts_with("inuse_") || kind == "space" {
        "memory".into()
    } else {
        "otlp".into()
    }
}

/// One OTLP profile as a pprof over the request's dictionary: table entry `i` gets id `i + 1`,
/// and index 0 of the mapping table (the dictionary's zero element) means "no mapping".
#[expect(
    clippy::too_many_lines,
    reason = "one pass mapping OTLP's dictionary and samples to pprof's tables in the order of the messages' fields"
)]
fn to_pprof(profile: &Profile, d: &ProfilesDictionary) -> Result<proto::Profile, String> {
    let n_strings = d.string_table.len();
    let string = |i: i32, what: &str| -> Result<i64, String> {
        usize::try_from(i)
            .ok()
            .filter(|&i| i < n_strings || (i == 0 && n_strings == 0))
            .map(|i| i as i64)
            .ok_or_else(|| format!("{what} refers to string {i}, outside the string table"))
    };
    if d.string_table.first().is_some_and(|s| !s.is_empty()) {
        return Err("the string table's first entry must be the empty string".into());
    }
    // The dictionary's strings keep their ids; labels made here (attribute values as text,
    // span ids) are added once each.
    let mut strings = parca_pprof::StringTable::from_strings(d.string_table.clone());
    let mut out = proto::Profile::default();
    let value_type =
        |vt: &Option<opentelemetry_proto::tonic::profiles::v1development::ValueType>,
         what: &str|
         -> Result<Option<proto::ValueType>, String> {
            vt.as_ref()
                .map(|vt| {
                    Ok(proto::ValueType {
                        r#type: string(vt.type_strindex, what)?,
                        unit: string(vt.unit_strindex, what)?,
                    })
                })
                .transpose()
        };
    let sample_type =
        value_type(&profile.sample_type, "sample_type")?.ok_or("the profile has no sample_type")?;
    out.sample_type = vec![sample_type];
    out.period_type = value_type(&profile.period_type, "period_type")?;
    out.period = profile.period;
    out.time_nanos = i64::try_from(profile.time_unix_nano).unwrap_or(i64::MAX);
    out.duration_nanos = i64::try_from(profile.duration_nano).unwrap_or(i64::MAX);
    out.mapping = d
        .mapping_table
        .iter()
        .enumerate()
        .map(|(i, m)| {
            Ok(proto::Mapping {
                id: i as u64 + 1,
                memory_start: m.memory_start,
                memory_limit: m.memory_limit,
                file_offset: m.file_offset,
                filename: string(m.filename_strindex, "a mapping's filename")?,
                ..Default::default()
            })
        })
        .collect::<Result<_, String>>()?;
    out.function = d
        .function_table
        .iter()
        .enumerate()
        .map(|(i, f)| {
            Ok(proto::Function {
                id: i as u64 + 1,
                name: string(f.name_strindex, "a function's name")?,
                system_name: string(f.system_name_strindex, "a function's system name")?,
                filename: string(f.filename_strindex, "a function's filename")?,
                start_line: f.start_line,
            })
        })
        .collect::<Result<_, String>>()?;
    let n_functions = d.function_table.len();
    let n_mappings = d.mapping_table.len();
    out.location = d
        .location_table
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let mapping_id = match usize::try_from(l.mapping_index) {
                Ok(0) => 0,
                Ok(m) if m < n_mappings => m as u64 + 1,
                _ => {
                    return Err(format!(
                        "location {i} refers to mapping {}, outside the mapping table",
                        l.mapping_index
                    ));
                }
            };
            let line = l
                .lines
                .iter()
                .map(|line| match usize::try_from(line.function_index) {
                    Ok(f) if f < n_functions => Ok(proto::Line {
                        function_id: f as u64 + 1,
                        line: line.line,
                        column: line.column,
                    }),
                    _ => Err(format!(
                        "location {i} refers to function {}, outside the function table",
                        line.function_index
                    )),
                })
                .collect::<Result<_, String>>()?;
            Ok(proto::Location {
                id: i as u64 + 1,
                mapping_id,
                address: l.address,
                line,
                ..Default::default()
            })
        })
        .collect::<Result<_, String>>()?;
    let n_locations = d.location_table.len();
    for (j, sample) in profile.samples.iter().enumerate() {
        let stack = usize::try_from(sample.stack_index)
            .ok()
            .and_then(|k| d.stack_table.get(k))
            .ok_or_else(|| {
                format!(
                    "sample {j} refers to stack {}, outside the stack table",
                    sample.stack_index
                )
            })?;
        let location_id = stack
            .location_indices
            .iter()
            .map(|&l| match usize::try_from(l) {
                Ok(l) if l < n_locations => Ok(l as u64 + 1),
                _ => Err(format!(
                    "sample {j}'s stack refers to location {l}, outside the location table"
                )),
            })
            .collect::<Result<_, String>>()?;
        // With timestamps and no values, each timestamp is one occurrence.
        let value = match sample.values.as_slice() {
            [] => vec![sample.timestamps_unix_nano.len() as i64],
            [v] => vec![*v],
            more => {
                return Err(format!(
                    "sample {j} has {} values; the profile has one sample type",
                    more.len()
                ));
            }
        };
        let mut label = Vec::with_capacity(sample.attribute_indices.len());
        for &a in &sample.attribute_indices {
            let kv = usize::try_from(a)
                .ok()
                .and_then(|a| d.attribute_table.get(a))
                .ok_or_else(|| {
                    format!("sample {j} refers to attribute {a}, outside the attribute table")
                })?;
            let key = string(kv.key_strindex, "an attribute's key")?;
            let value = kv.value.as_ref().and_then(|v| v.value.as_ref());
            let l = match value {
                Some(any_value::Value::IntValue(n)) => proto::Label {
                    key,
                    num: *n,
                    num_unit: string(kv.unit_strindex, "an attribute's unit")?,
                    ..Default::default()
                },
                Some(v) => {
                    let text = any_to_string(v, &d.string_table);
                    proto::Label {
                        key,
                        str: strings.id(&text),
                        ..Default::default()
                    }
                }
                None => continue,
            };
            label.push(l);
        }
        // The sample's span: its trace and span ids as labels named as the SDKs name them, which
        // `to_series` stores per sample (index 0 is the table's empty link: none).
        if sample.link_index != 0 {
            let link = usize::try_from(sample.link_index)
                .ok()
                .and_then(|i| d.link_table.get(i))
                .ok_or_else(|| {
                    format!(
                        "sample {j} refers to link {}, outside the link table",
                        sample.link_index
                    )
                })?;
            for (name, id) in [("trace_id", &link.trace_id), ("span_id", &link.span_id)] {
                if id.is_empty() || id.iter().all(|&b| b == 0) {
                    continue;
                }
                let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
                label.push(proto::Label {
                    key: strings.id(name),
                    str: strings.id(&hex),
                    ..Default::default()
                });
            }
        }
        out.sample.push(proto::Sample {
            location_id,
            value,
            label,
        });
    }
    out.string_table = strings.into_strings();
    Ok(out)
}

/// A profile-level attribute from the dictionary as (name, value) text.
fn dictionary_attribute(d: &ProfilesDictionary, i: i32) -> Result<(String, String), String> {
    let kv = usize::try_from(i)
        .ok()
        .and_then(|i| d.attribute_table.get(i))
        .ok_or_else(|| format!("attribute {i} is outside the attribute table"))?;
    let key = usize::try_from(kv.key_strindex)
        .ok()
        .and_then(|k| d.string_table.get(k))
        .ok_or_else(|| format!("attribute {i}'s key is outside the string table"))?;
    let value = kv
        .value
        .as_ref()
        .and_then(|v| v.value.as_ref())
        .map(|v| any_to_string(v, &d.string_table))
        .unwrap_or_default();
    Ok((key.clone(), value))
}

/// Resource or scope attributes as labels; keys and string values may be given inline or as
/// references into the dictionary's string table.
fn add_attributes(labels: &mut Vec<(String, String)>, attributes: &[KeyValue], strings: &[String]) {
    for kv in attributes {
        let value = kv
            .value
            .as_ref()
            .and_then(|v: &AnyValue| v.value.as_ref())
            .map(|v| any_to_string(v, strings))
            .unwrap_or_default();
        let key = if kv.key.is_empty() {
            usize::try_from(kv.key_strindex)
                .ok()
                .and_then(|k| strings.get(k))
                .map_or("", String::as_str)
        } else {
            kv.key.as_str()
        };
        if !key.is_empty() {
            push_label(labels, key, value);
        }
    }
}

/// Adds a label under its sanitized name; a later one of the same name wins, as an inner
/// scope's attribute overrides its resource's.
fn push_label(labels: &mut Vec<(String, String)>, key: &str, value: String) {
    let name = sanitize_label_name(key);
    labels.retain(|(n, _)| *n != name);
    if !value.is_empty() {
        labels.push((name, value));
    }
}

/// An attribute value as a label value: strings as they are, numbers and booleans as
/// written in JSON, arrays and maps as their JSON.
fn any_to_string(value: &any_value::Value, strings: &[String]) -> String {
    use any_value::Value;
    match value {
        Value::StringValue(s) => s.clone(),
        Value::BoolValue(b) => b.to_string(),
        Value::IntValue(n) => n.to_string(),
        Value::DoubleValue(x) => x.to_string(),
        Value::BytesValue(b) => b.iter().map(|x| format!("{x:02x}")).collect(),
        Value::ArrayValue(a) => {
            let items: Vec<String> = a
                .values
                .iter()
                .filter_map(|v| v.value.as_ref())
                .map(|v| any_to_string(v, strings))
                .collect();
            serde_json::to_string(&items).unwrap_or_default()
        }
        Value::KvlistValue(kv) => {
            let map: std::collections::BTreeMap<&str, String> = kv
                .values
                .iter()
                .map(|kv| {
                    (
                        kv.key.as_str(),
                        kv.value
                            .as_ref()
                            .and_then(|v| v.value.as_ref())
                            .map(|v| any_to_string(v, strings))
                            .unwrap_or_default(),
                    )
                })
                .collect();
            serde_json::to_string(&map).unwrap_or_default()
        }
        Value::StringValueStrindex(i) => usize::try_from(*i)
            .ok()
            .and_then(|i| strings.get(i))
            .cloned()
            .unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::common::v1::InstrumentationScope;
    use opentelemetry_proto::tonic::profiles::v1development::{
        Function, KeyValueAndUnit, Line, Location, ResourceProfiles, Sample, ScopeProfiles, Stack,
        ValueType,
    };
    use opentelemetry_proto::tonic::resource::v1::Resource;

    fn string_value(s: &str) -> Option<AnyValue> {
        Some(AnyValue {
            value: Some(any_value::Value::StringValue(s.into())),
        })
    }

    /// What the OpenTelemetry eBPF profiler sends, in small: CPU samples of two threads, the
    /// service in the resource.
    #[expect(
        clippy::too_many_lines,
        reason = "one function per OTLP message kind would each need the whole dictionary; this walks the request's nesting once"
    )]
    fn request() -> ExportProfilesServiceRequest {
        let strings = [
            "",
            "samples",
            "count",
            "cpu",
            "nanoseconds",
            "main",
            "work",
            "thread.name",
            "t1",
            "t2",
        ];
        let dictionary = ProfilesDictionary {
            string_table: strings.map(String::from).to_vec(),
            function_table: vec![
                Function::default(),
                Function {
                    name_strindex: 5,
                    ..Default::default()
                },
                Function {
                    name_strindex: 6,
                    ..Default::default()
                },
            ],
            location_table: vec![
                Location::default(),
                Location {
                    lines: vec![Line {
                        function_index: 1,
                        line: 3,
                        column: 0,
                    }],
                    ..Default::default()
                },
                Location {
                    lines: vec![Line {
                        function_index: 2,
                        line: 7,
                        column: 0,
                    }],
                    ..Default::default()
                },
            ],
            stack_table: vec![
                Stack::default(),
                Stack {
                    location_indices: vec![2, 1],
                },
                Stack {
                    location_indices: vec![1],
                },
            ],
            attribute_table: vec![
                KeyValueAndUnit::default(),
                KeyValueAndUnit {
                    key_strindex: 7,
                    value: string_value("t1"),
                    unit_strindex: 0,
                },
                KeyValueAndUnit {
                    key_strindex: 7,
                    value: string_value("t2"),
                    unit_strindex: 0,
                },
            ],
            ..Default::default()
        };
        let profile = Profile {
            sample_type: Some(ValueType {
                type_strindex: 1,
                unit_strindex: 2,
            }),
            period_type: Some(ValueType {
                type_strindex: 3,
                unit_strindex: 4,
            }),
            period: 50_000_000,
            time_unix_nano: 1_700_000_000_000_000_000,
            duration_nano: 10_000_000_000,
            samples: vec![
                Sample {
                    stack_index: 1,
                    attribute_indices: vec![1],
                    values: vec![4],
                    ..Default::default()
                },
                Sample {
                    stack_index: 2,
                    attribute_indices: vec![2],
                    values: vec![],
                    timestamps_unix_nano: vec![1, 2],
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        ExportProfilesServiceRequest {
            resource_profiles: vec![ResourceProfiles {
                resource: Some(Resource {
                    attributes: vec![KeyValue {
                        key: "service.name".into(),
                        value: string_value("shop"),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
                scope_profiles: vec![ScopeProfiles {
                    scope: Some(InstrumentationScope {
                        name: "ebpf-profiler".into(),
                        ..Default::default()
                    }),
                    profiles: vec![profile],
                    ..Default::default()
                }],
                ..Default::default()
            }],
            dictionary: Some(dictionary),
        }
    }

    #[test]
    fn converts_resource_scope_and_sample_attributes_to_series() {
        let bytes = request().encode_to_vec();
        let series = decode_export_request(&bytes, 0).unwrap();
        let described: Vec<(String, i64, i64)> = series
            .iter()
            .map(|s| (s.labels.to_string(), s.timestamp_ms, s.profile.total()))
            .collect();
        let name = "process_cpu:samples:count:cpu:nanoseconds:delta";
        assert_eq!(
            described,
            [
                (
                    format!(
                        "{{__name__=\"{name}\", otel_scope_name=\"ebpf-profiler\", service_name=\"shop\", thread_name=\"t1\"}}"
                    ),
                    1_700_000_000_000,
                    4
                ),
                (
                    format!(
                        "{{__name__=\"{name}\", otel_scope_name=\"ebpf-profiler\", service_name=\"shop\", thread_name=\"t2\"}}"
                    ),
                    1_700_000_000_000,
                    2
                ),
            ]
        );
    }

    #[test]
    fn a_bad_reference_refuses_the_request_and_says_where() {
        let mut bad = request();
        bad.resource_profiles[0].scope_profiles[0].profiles[0].samples[0].stack_index = 9;
        let error = export_request_series(&bad, 0).unwrap_err().to_string();
        assert!(
            error.contains(
                "resource_profiles[0].scope_profiles[0].profiles[0]: sample 0 refers to stack 9"
            ),
            "{error}"
        );
        let error = decode_export_request(b"\xff\xff", 0)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("not an ExportProfilesServiceRequest"),
            "{error}"
        );
    }

    #[test]
    fn links_become_per_sample_spans_not_series() {
        use opentelemetry_proto::tonic::profiles::v1development::Link;
        let mut req = request();
        let d = req.dictionary.as_mut().unwrap();
        d.link_table = vec![
            Link::default(),
            Link {
                trace_id: (1..=16).collect(),
                span_id: (1..=8).collect(),
            },
        ];
        let samples = &mut req.resource_profiles[0].scope_profiles[0].profiles[0].samples;
        samples[0].link_index = 1;
        let series = export_request_series(&req, 0).unwrap();
        assert_eq!(series.len(), 2, "the link made no series");
        assert!(series.iter().all(|s| s.labels.get("span_id").is_none()));
        let spans = series[0].profile.samples.spans.as_ref().expect("spans");
        assert_eq!(
            spans.span_of(0).unwrap(),
            ["0102030405060708", "0102030405060708090a0b0c0d0e0f10", ""]
        );
        assert!(series[1].profile.samples.spans.is_none());

        samples_of(&mut req)[0].link_index = 5;
        let error = export_request_series(&req, 0).unwrap_err().to_string();
        assert!(error.contains("sample 0 refers to link 5"), "{error}");
    }

    fn samples_of(req: &mut ExportProfilesServiceRequest) -> &mut Vec<Sample> {
        &mut req.resource_profiles[0].scope_profiles[0].profiles[0].samples
    }
}
