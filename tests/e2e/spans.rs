//! Span profiles end to end, with real clients: span and trace ids that SDKs put on samples are
//! stored per sample, never as series, and select their samples.
//!
//! Go (`tests/targets/go-spans`, Debian's Go): CPU profiles whose samples carry `runtime/pprof`
//! labels `span_id`, `trace_id` (and `handler`), pushed to `/api/v1/write`. After two rounds of
//! 5 spans and two more of 20, the series are the same two (cpu and samples types, by
//! `handler`), no label lists `span_id` or `trace_id`, every span's profile
//! (`{span_id="…"}`) equals the samples the Go runtime labelled with it in the pushed file,
//! a trace's (`{trace_id="…"}`) those of its round, a list (`span_id=~"a|b"`) their sum, and
//! `/api/v1/query_exemplars` lists the spans with those values.
//!
//! Python (`tests/targets/python-push/spans.py` in the pinned pyroscope-io venv, with
//! OpenTelemetry's SDK and `pyroscope-otel`'s `PyroscopeSpanProcessor`, as Grafana documents
//! span profiles): requests of 5 and then 20 root spans, each burning CPU in `span_hot_work`,
//! pushed by pyroscope-io's Connect push (each span's samples as a series of their own). The
//! series stay the same, each span's profile is `span_hot_work`'s, and exemplars list every
//! span.
//!
//! OTLP (`tests/targets/python-otlp/send.py`, PyPI `opentelemetry-proto`): profiles of 3 and then
//! 12 samples, each linked (`Sample.link_index`) to a span of its own; the series stay the same,
//! each span's profile is its sample's value, exemplars list the spans.
//!
//! Links to traces: `--web-trace-url-template` is checked at start (a template without
//! `{trace_id}` or with an unknown placeholder stops the server with the fault named) and served
//! at `/api/v1/status/flags`, where the web UI reads it (its browser test follows the link).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use parca_profile::tables::LabelValue;
use serde_json::Value;

use crate::server_harness::{
    Process, Server, encode, outside_target, parca_binary, poll, run_json_script, skip, top_rows,
    top_total,
};

const CPU: &str = "process_cpu:cpu:nanoseconds:cpu:nanoseconds:delta";
/// The series of the Go program, and of the Python one.
const GO_SERIES: &str = "{job=\"go-spans\"}";
const PYTHON_SERIES: &str = "{service_name=\"e2e-python-spans\"}";

/// Per span id, the CPU nanoseconds of the samples labelled with it in a pushed pprof file, and
/// the span's trace.
fn spans_in_file(path: &Path) -> BTreeMap<String, (String, i64)> {
    let bytes = std::fs::read(path).expect("pushed profile");
    let profiles = parca_profile::decode(&bytes, &Default::default()).expect("decodes");
    let cpu = profiles
        .into_iter()
        .find(|p| p.meta.sample_type.kind == "cpu")
        .expect("a cpu sample type");
    let t = &cpu.tables;
    let mut out: BTreeMap<String, (String, i64)> = BTreeMap::new();
    for i in 0..cpu.samples.len() {
        let mut span = None;
        let mut trace = String::new();
        for l in t.label_set(cpu.samples.labels[i]) {
            if let LabelValue::Str(v) = l.value {
                match t.string(l.key) {
                    "span_id" => span = Some(t.string(v).to_owned()),
                    "trace_id" => trace = t.string(v).to_owned(),
                    _ => {}
                }
            }
        }
        if let Some(span) = span {
            let entry = out.entry(span).or_insert((trace, 0));
            entry.1 += cpu.samples.values[i];
        }
    }
    out
}

/// Runs the Go program for `rounds` rounds of `spans` spans from round `first`, to its end.
fn run_go(binary: &Path, server: &Server, out: &Path, first: usize, rounds: usize, spans: usize) {
    let mut command = Command::new(binary);
    command
        .arg("-server")
        .arg(format!("http://{}", server.addr))
        .arg("-out")
        .arg(out)
        .args(["-first", &first.to_string()])
        .args(["-rounds", &rounds.to_string()])
        .args(["-spans", &spans.to_string()]);
    let mut process = Process::start(
        "e2e-go-spans",
        command,
        &out.join(format!("go-{first}.log")),
    );
    let status = poll(
        "the Go program to push its profiles",
        Duration::from_secs(120),
        Duration::from_millis(100),
        || process.exited().ok_or_else(|| "still running".to_owned()),
    );
    assert!(
        status.success(),
        "e2e-go-spans failed: {}",
        process.log_tail()
    );
}

/// The series `selector` matches, as label maps.
fn series(server: &Server, selector: &str) -> Vec<Value> {
    let data = server
        .api(&format!("/api/v1/series?match[]={}", encode(selector)))
        .expect("series");
    data.as_array().cloned().expect("a list")
}

/// Of `all`, the series with label `name`: those of the program's own labelled work. Samples
/// taken outside it (the Go runtime's own, Python code outside any span) land in a series
/// without it, or not, depending on where the samples fell: that one may come and go, but never
/// one series per span.
fn with_label(all: &[Value], name: &str) -> Vec<Value> {
    all.iter()
        .filter(|s| s.get(name).is_some())
        .cloned()
        .collect()
}

/// The CPU total of `merge(CPU{job="go-spans", <matchers>}[1d])` now.
fn merged_total(server: &Server, matchers: &str) -> i64 {
    let query = format!("merge({CPU}{{job=\"go-spans\", {matchers}}}[1d])");
    match server.api(&format!(
        "/api/v1/query?query={}&format=top",
        encode(&query)
    )) {
        Ok(data) => top_total(&data),
        Err(e) if e.contains("no_profiles") => 0,
        Err(e) => panic!("{query}: {e}"),
    }
}

/// The target `which` of `tests/tools/targets.sh` and a server without scrape jobs; `None`
/// (the test skipped, saying why) without the target.
fn target_and_server(which: &str, what: &str) -> Option<(std::path::PathBuf, Server)> {
    match outside_target(which) {
        Ok(path) => Some((
            path,
            Server::start(&parca_binary(false), &[], |_| {
                "scrape_configs: []\n".to_owned()
            }),
        )),
        Err(why) => {
            skip(what, &why);
            None
        }
    }
}

#[test]
fn go_runtime_pprof_span_labels_are_per_sample_and_select_each_span() {
    let _exclusive = crate::support::exclusive();
    let Some((go, server)) = target_and_server("go-spans", "the Go span program") else {
        return;
    };
    let out = tempfile::tempdir().expect("tempdir");

    run_go(&go, &server, out.path(), 0, 2, 5);
    let before = with_label(&series(&server, GO_SERIES), "handler");
    assert_eq!(before.len(), 2, "one series per sample type: {before:?}");
    run_go(&go, &server, out.path(), 2, 2, 20);
    let all = series(&server, GO_SERIES);
    let after = with_label(&all, "handler");
    assert_eq!(after, before, "50 spans, the same series");
    // At most the same two without `handler` besides (the runtime's own samples).
    assert!(all.len() <= 4, "{all:?}");
    for s in &after {
        assert_eq!(s["handler"], "/work", "{s}");
        assert!(
            s.get("span_id").is_none() && s.get("trace_id").is_none(),
            "{s}"
        );
    }
    let names = server.api("/api/v1/labels").expect("labels");
    let names: Vec<&str> = names
        .as_array()
        .expect("list")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        !names.contains(&"span_id") && !names.contains(&"trace_id"),
        "{names:?}"
    );
    let values = server.api("/api/v1/label/span_id/values").expect("values");
    assert_eq!(values, serde_json::json!([]));

    // Each span's profile is the samples the Go runtime labelled with it.
    let mut all: BTreeMap<String, (String, i64)> = BTreeMap::new();
    for round in 0..4 {
        let file = out.path().join(format!("round-{round}.pb.gz"));
        let spans = spans_in_file(&file);
        assert!(
            spans.len() >= 3,
            "round {round}: {} spans with samples",
            spans.len()
        );
        let trace = spans.values().next().expect("a span").0.clone();
        let trace_total: i64 = spans.values().map(|(_, v)| v).sum();
        assert_eq!(
            merged_total(&server, &format!("trace_id=\"{trace}\"")),
            trace_total,
            "trace {trace}"
        );
        all.extend(spans);
    }
    for (span, (_, want)) in &all {
        assert_eq!(
            merged_total(&server, &format!("span_id=\"{span}\"")),
            *want,
            "span {span}"
        );
    }
    let two: Vec<&String> = all.keys().take(2).collect();
    assert_eq!(
        merged_total(&server, &format!("span_id=~\"{}|{}\"", two[0], two[1])),
        all[two[0]].1 + all[two[1]].1
    );
    assert_eq!(merged_total(&server, "span_id=\"00000000deadbeef\""), 0);

    // Exemplars: every span with samples, with its value.
    let selector = format!("{CPU}{{job=\"go-spans\"}}");
    let data = server
        .api(&format!(
            "/api/v1/query_exemplars?query={}&start=0&end=9999999999",
            encode(&selector)
        ))
        .expect("exemplars");
    let series = data.as_array().expect("a list");
    assert_eq!(series.len(), 1, "{data}");
    assert_eq!(series[0]["seriesLabels"]["handler"], "/work");
    let exemplars = series[0]["exemplars"].as_array().expect("exemplars");
    assert_eq!(exemplars.len(), all.len(), "one exemplar per span: {data}");
    for e in exemplars {
        let span = e["labels"]["span_id"].as_str().expect("span_id");
        let (trace, value) = &all[span];
        assert_eq!(e["labels"]["trace_id"], trace.as_str(), "{e}");
        assert_eq!(e["value"], value.to_string(), "{e}");
        assert!(e["timestamp"].as_f64().is_some_and(|t| t > 1e9), "{e}");
    }
    let limited = server
        .api(&format!(
            "/api/v1/query_exemplars?query={}&start=0&end=9999999999&limit=3",
            encode(&selector)
        ))
        .expect("exemplars");
    assert_eq!(limited[0]["exemplars"].as_array().map(Vec::len), Some(3));
}

/// The spans a run of spans.py made: (span id, trace id).
fn run_python(python: &Path, server: &Server, requests: usize) -> Vec<(String, String)> {
    let out = run_json_script(
        python,
        "python-push/spans.py",
        &[
            "--server".into(),
            format!("http://{}", server.addr),
            "--app".into(),
            "e2e-python-spans".into(),
            "--requests".into(),
            requests.to_string(),
        ],
    );
    out["spans"]
        .as_array()
        .expect("spans")
        .iter()
        .map(|s| {
            (
                s["span_id"].as_str().expect("span_id").to_owned(),
                s["trace_id"].as_str().expect("trace_id").to_owned(),
            )
        })
        .collect()
}

/// Waits until every span of `spans` has a profile whose largest function is `span_hot_work`.
fn check_python_spans(server: &Server, spans: &[(String, String)]) {
    poll(
        "every span's profile to be served",
        Duration::from_secs(30),
        Duration::from_millis(250),
        || {
            for (span, trace) in spans {
                for matcher in [
                    format!("span_id=\"{span}\""),
                    format!("trace_id=\"{trace}\""),
                ] {
                    let query =
                        format!("merge({CPU}{{service_name=\"e2e-python-spans\", {matcher}}}[1d])");
                    let data = server
                        .api(&format!(
                            "/api/v1/query?query={}&format=top",
                            encode(&query)
                        ))
                        .map_err(|e| format!("{query}: {e}"))?;
                    let rows = top_rows(&data);
                    let largest = rows.iter().max_by_key(|(_, (flat, _))| *flat);
                    match largest {
                        Some((name, _)) if name == "span_hot_work" => {}
                        _ => return Err(format!("{query}: {rows:?}")),
                    }
                }
            }
            Ok(())
        },
    );
}

#[test]
fn python_spans_of_pyroscope_otel_are_per_sample_and_select_each_span() {
    let _exclusive = crate::support::exclusive();
    let Some((python, server)) =
        target_and_server("python-push", "pyroscope-io with pyroscope-otel")
    else {
        return;
    };
    let first = run_python(&python, &server, 5);
    check_python_spans(&server, &first);
    let before = with_label(&series(&server, PYTHON_SERIES), "span_name");
    assert!(!before.is_empty() && before.len() <= 2, "{before:?}");
    let second = run_python(&python, &server, 20);
    check_python_spans(&server, &second);
    let all = series(&server, PYTHON_SERIES);
    let after = with_label(&all, "span_name");
    assert_eq!(after, before, "25 spans, the same series");
    // At most the same without `span_name` besides (samples outside any span).
    assert!(all.len() <= 2 * before.len(), "{all:?}");
    for s in &all {
        assert!(
            s.get("span_id").is_none() && s.get("trace_id").is_none(),
            "{s}"
        );
    }

    let selector = format!("{CPU}{{service_name=\"e2e-python-spans\"}}");
    let data = server
        .api(&format!(
            "/api/v1/query_exemplars?query={}&start=0&end=9999999999",
            encode(&selector)
        ))
        .expect("exemplars");
    let listed: std::collections::BTreeSet<&str> = data
        .as_array()
        .expect("a list")
        .iter()
        .flat_map(|s| s["exemplars"].as_array().into_iter().flatten())
        .filter_map(|e| e["labels"]["span_id"].as_str())
        .collect();
    for (span, _) in first.iter().chain(&second) {
        assert!(
            listed.contains(span.as_str()),
            "span {span} is not among the exemplars: {data}"
        );
    }
}

/// Sends a profile of `n` linked spans as `service`; (span id, trace id, value) of each.
fn send_links(python: &Path, server: &Server, n: usize) -> Vec<(String, String, i64)> {
    let url = format!("http://{}/v1development/profiles", server.addr);
    let out = run_json_script(
        python,
        "python-otlp/send.py",
        &["http-links".into(), url, "otlp-spans".into(), n.to_string()],
    );
    assert_eq!(out["status"], 200, "{out}");
    out["spans"]
        .as_array()
        .expect("spans")
        .iter()
        .map(|s| {
            (
                s["span_id"].as_str().expect("span_id").to_owned(),
                s["trace_id"].as_str().expect("trace_id").to_owned(),
                s["value"].as_i64().expect("value"),
            )
        })
        .collect()
}

#[test]
fn otlp_links_are_per_sample_spans() {
    let Some((python, server)) = target_and_server("python-otlp", "opentelemetry-proto") else {
        return;
    };
    let otlp_series = || series(&server, "{service_name=\"otlp-spans\"}");
    let mut spans = send_links(&python, &server, 3);
    let before = otlp_series();
    assert_eq!(before.len(), 1, "{before:?}");
    spans.extend(send_links(&python, &server, 12));
    assert_eq!(otlp_series(), before, "15 spans, the same series");
    const SAMPLES: &str = "process_cpu:samples:count:cpu:nanoseconds:delta";
    for (span, trace, value) in &spans {
        for matcher in [
            format!("span_id=\"{span}\""),
            format!("trace_id=\"{trace}\""),
        ] {
            let query = format!("merge({SAMPLES}{{service_name=\"otlp-spans\", {matcher}}}[1d])");
            let data = server
                .api(&format!(
                    "/api/v1/query?query={}&format=top",
                    encode(&query)
                ))
                .expect("query");
            assert_eq!(top_total(&data), *value, "{query}");
        }
    }
    let data = server
        .api(&format!(
            "/api/v1/query_exemplars?query={}&start=0&end=9999999999",
            encode(&format!("{SAMPLES}{{service_name=\"otlp-spans\"}}"))
        ))
        .expect("exemplars");
    let exemplars = data[0]["exemplars"].as_array().expect("exemplars");
    assert_eq!(exemplars.len(), spans.len(), "{data}");
    for (span, trace, value) in &spans {
        assert!(
            exemplars
                .iter()
                .any(|e| e["labels"]["span_id"] == span.as_str()
                    && e["labels"]["trace_id"] == trace.as_str()
                    && e["value"].as_str().and_then(|v| v.parse::<i64>().ok()) == Some(*value)),
            "span {span} with {value}: {data}"
        );
    }
}

#[test]
fn a_trace_url_template_is_checked_at_start_and_served_with_the_flags() {
    let template = "http://jaeger:16686/trace/{trace_id}?uiFind={span_id}";
    let flag = format!("--web-trace-url-template={template}");
    let server = Server::start(&parca_binary(false), &[&flag], |_| {
        "scrape_configs: []\n".to_owned()
    });
    let flags = server.api("/api/v1/status/flags").expect("flags");
    assert_eq!(flags["web-trace-url-template"], template);
    assert_eq!(
        flags["storage-retention-time"], "0",
        "every flag is listed: {flags}"
    );
    drop(server);

    for (bad, fault) in [
        ("http://jaeger:16686/trace/", "has no `{trace_id}`"),
        (
            "http://jaeger:16686/trace/{traceId}",
            "unknown placeholder `{traceId}`",
        ),
        ("jaeger:16686/trace/{trace_id}", "is not an http(s) URL"),
    ] {
        let out = Command::new(parca_binary(false))
            .arg(format!("--web-trace-url-template={bad}"))
            .output()
            .expect("run parca");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{bad}: started");
        assert!(
            stderr.contains("--web-trace-url-template") && stderr.contains(fault),
            "{bad}: {stderr}"
        );
    }
}
