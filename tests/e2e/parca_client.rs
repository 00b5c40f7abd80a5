//! Parca's own clients, unchanged, against our server: `@parca/client` from npm (0.17.24, the
//! code Parca's web UI uses) over protobuf-ts' gRPC-web transport (binary, and text as Parca's
//! UI sends it, under `/api`) and its native gRPC transport. A real server that scrapes itself
//! is written to with `WriteRaw` and read back through `ProfileTypes`, `Labels`, `Values`,
//! `QueryRange` and `Query` (TOP, FLAMEGRAPH_TABLE, PPROF, PROFILE_METADATA, a stack filter, and
//! the Arrow reports Parca's UI draws, read with `@uwdata/flechette` as the UI reads them);
//! every total equals what our HTTP API answers for the same selection. Connect's unary
//! protocol (protobuf and JSON) is checked with plain HTTP. Without npm's packages (`tests/tools/targets.sh
//! parca-client`) the test says so and passes, except under `PARCA_REQUIRE_TARGETS=1`.

use std::process::Command;
use std::time::Duration;

use crate::server_harness::{Server, encode, outside_target, parca_binary, poll, skip, tests_dir};

/// The server's own HTTP API's total of `query` over `[start, end]` (milliseconds).
fn http_total(server: &Server, query: &str, start_ms: i64, end_ms: i64) -> i64 {
    let data = server
        .api(&format!(
            "/api/v1/query?format=top&query={}&start={}&end={}",
            encode(query),
            start_ms as f64 / 1000.0,
            end_ms as f64 / 1000.0
        ))
        .expect("query");
    data["total"].as_i64().expect("total")
}

#[test]
fn parcas_own_client_writes_and_reads_over_grpc_web_and_grpc() {
    let client = match outside_target("parca-client") {
        Ok(path) => path,
        Err(why) => return skip("@parca/client (tests/tools/targets.sh parca-client)", &why),
    };
    let server = Server::start(&parca_binary(false), &[], |addr| {
        format!(
            "scrape_configs:\n  - job_name: self\n    scrape_interval: 1s\n    static_configs: [{{targets: [\"{addr}\"]}}]\n    profiling_config:\n      pprof_config:\n        memory: {{ path: /debug/pprof/heap }}\n        process_cpu: {{ enabled: false }}\n        block: {{ enabled: false }}\n        mutex: {{ enabled: false }}\n        goroutine: {{ enabled: false }}\n"
        )
    });
    // Real scraped data first: the server's own heap.
    poll(
        "the first scrape of the server's heap",
        Duration::from_secs(30),
        Duration::from_millis(200),
        || {
            let types = server.api("/api/v1/profile_types")?;
            if types.to_string().contains("\"memory\"") {
                Ok(())
            } else {
                Err(types.to_string())
            }
        },
    );
    // A real Go CPU profile, its time set to now so it lands in the open window.
    let source = tests_dir().join("testdata/pprof/go/go-cpu.pb.gz");
    let bytes = std::fs::read(&source).expect("go-cpu.pb.gz");
    let mut profile = parca_pprof::decode(&bytes, &Default::default())
        .expect("decodes")
        .to_proto();
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64;
    profile.time_nanos = now_ms * 1_000_000;
    let pprof = server.dir.path().join("go-cpu-now.pb.gz");
    std::fs::write(&pprof, parca_pprof::encode(&profile, true)).expect("write pprof");

    for transport in ["grpc-web-text", "grpc-web", "grpc"] {
        let job = format!("client-{transport}");
        let output = Command::new("node")
            .arg(&client)
            .args([transport, &server.addr.to_string()])
            .arg(&pprof)
            .args([&job, &now_ms.to_string()])
            .output()
            .expect("run node");
        assert!(
            output.status.success(),
            "{transport}: {}\n{}",
            String::from_utf8_lossy(&output.stderr),
            server.process.log_tail()
        );
        let got: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
            panic!(
                "{transport}: no JSON ({e}): {}",
                String::from_utf8_lossy(&output.stdout)
            )
        });
        let types = got["types"].to_string();
        assert!(
            types.contains("\"memory\""),
            "{transport}: scraped type missing: {types}"
        );
        assert!(
            types.contains("\"parca_client_cpu\""),
            "{transport}: {types}"
        );
        let selector = format!("{}{{job=\"{job}\"}}", got["type"].as_str().expect("type"));
        let (start, end) = (now_ms - 3_600_000, now_ms + 3_600_000);
        let expected = http_total(&server, &selector, start, end);
        assert_eq!(expected, 5_310_000_000, "{transport}: the file's CPU time");
        assert_eq!(got["top"]["total"], expected, "{transport}: {got}");
        assert_eq!(got["flame"]["total"], expected, "{transport}: {got}");
        assert_eq!(
            got["flame"]["rootCumulative"], expected,
            "{transport}: {got}"
        );
        assert_eq!(got["range"][0]["sum"], expected, "{transport}: {got}");
        assert_eq!(
            got["top"]["first"], "main.(*counter).inc",
            "{transport}: {got}"
        );
        assert_eq!(got["top"]["unit"], "nanoseconds", "{transport}: {got}");
        assert!(
            got["flame"]["names"].to_string().contains("main.spin"),
            "{transport}: {got}"
        );
        assert!(
            got["pprofBytes"].as_i64().unwrap_or(0) > 1000,
            "{transport}: {got}"
        );
        // The Arrow reports, decoded by the library Parca's UI uses.
        assert_eq!(got["flameArrow"]["total"], expected, "{transport}: {got}");
        assert_eq!(
            got["flameArrow"]["rootCumulative"], expected,
            "{transport}: {got}"
        );
        assert_eq!(got["flameArrow"]["hasSpin"], true, "{transport}: {got}");
        assert_eq!(
            got["flameArrow"]["height"], got["flame"]["height"],
            "{transport}: {got}"
        );
        // Grouped by the `worker` label: a label row per worker, their values adding up to
        // the total, each equal to that worker's merge over our HTTP API.
        let label_rows = got["byWorker"]["labelRows"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert!(label_rows.len() > 1, "{transport}: {got}");
        let sum: i64 = label_rows
            .iter()
            .filter_map(|r| r["cumulative"].as_i64())
            .sum();
        assert_eq!(sum, expected, "{transport}: {got}");
        for row in &label_rows {
            // A group without the label is the series without it: `worker=""`.
            let worker = row["worker"].as_str().unwrap_or("");
            let selector = selector.replacen('}', &format!(", worker=\"{worker}\"}}"), 1);
            let theirs = http_total(&server, &selector, start, end);
            assert_eq!(row["cumulative"], theirs, "{transport}: {worker}: {got}");
        }
        // Single mode at the pushed profile's time: the profiles then, as our API's instant
        // query gives them.
        let at = server
            .api(&format!(
                "/api/v1/query?format=top&query={}&time={}",
                encode(&selector),
                now_ms as f64 / 1000.0
            ))
            .expect("instant query");
        assert_eq!(got["single"]["total"], at["total"], "{transport}: {got}");
        assert_eq!(got["single"]["total"], expected, "{transport}: {got}");
        // Diff of the window against itself, absolute and relative: every row's diff is 0.
        for d in got["diffs"].as_array().expect("diffs") {
            assert_eq!(d["total"], expected, "{transport}: {d}");
            assert_eq!(d["rows"], got["top"]["rows"], "{transport}: {d}");
            assert_eq!(d["nonzero"], 0, "{transport}: {d}");
        }
        // Trimmed at 5%: fewer rows, the left-out value counted, the root's total unchanged.
        assert!(
            got["trimmed"]["rows"].as_i64() < got["flameArrow"]["rows"].as_i64(),
            "{transport}: {got}"
        );
        assert!(
            got["trimmed"]["trimmed"].as_i64().unwrap_or(0) > 0,
            "{transport}: {got}"
        );
        assert_eq!(
            got["trimmed"]["rootCumulative"], expected,
            "{transport}: {got}"
        );
        assert_eq!(got["hasData"], true, "{transport}: {got}");
        assert_eq!(got["tableArrow"]["total"], expected, "{transport}: {got}");
        assert_eq!(got["tableArrow"]["flat"], expected, "{transport}: {got}");
        assert_eq!(
            got["tableArrow"]["rows"], got["top"]["rows"],
            "{transport}: {got}"
        );
        let through_spin = http_total(&server, &format!("{selector} |= \"main.spin\""), start, end);
        assert!(through_spin > 0);
        assert_eq!(got["sandwich"]["total"], through_spin, "{transport}: {got}");
        assert_eq!(got["onlyLibc"]["total"], expected, "{transport}: {got}");
        assert_eq!(got["onlyLibc"]["roots"], 0, "{transport}: {got}");
        // Inverted: the functions that ran are the roots.
        assert_eq!(
            got["inverted"]["rootCumulative"], expected,
            "{transport}: {got}"
        );
        assert!(
            got["inverted"]["roots"]
                .to_string()
                .contains("main.(*counter).inc"),
            "{transport}: {got}"
        );
        assert_eq!(got["callgraph"]["total"], expected, "{transport}: {got}");
        assert_eq!(got["callgraph"]["flat"], expected, "{transport}: {got}");
        assert_eq!(
            got["callgraph"]["nodes"], got["top"]["rows"],
            "{transport}: {got}"
        );
        assert!(
            got["callgraph"]["edges"].as_i64().unwrap_or(0) > 0,
            "{transport}: {got}"
        );
        for label in ["job", "worker"] {
            assert!(
                got["labels"].to_string().contains(label),
                "{transport}: {got}"
            );
        }
        assert!(
            got["values"].to_string().contains(&job),
            "{transport}: {got}"
        );
        assert!(
            got["metadata"]["labels"].to_string().contains("worker"),
            "{transport}: {got}"
        );
        // Parca's filters compare without regard to case; ours by the text as given.
        let filtered = http_total(&server, &format!("{selector} |= \"runtime.\""), start, end);
        assert_eq!(got["filtered"]["total"], filtered, "{transport}: {got}");
        assert_eq!(
            got["filtered"]["filtered"],
            expected - filtered,
            "{transport}: {got}"
        );
        // Criteria on other fields: a frame filter keeps only `main.` frames (case aside), the
        // total unchanged; a stack filter on the source file keeps every Go sample.
        let main_frames: Vec<&str> = got["onlyMain"]["names"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|n| n.as_str())
            .collect();
        assert!(
            !main_frames.is_empty() && main_frames.iter().all(|n| n.starts_with("main.")),
            "{transport}: {got}"
        );
        assert_eq!(got["onlyMain"]["total"], expected, "{transport}: {got}");
        assert_eq!(
            got["onlyMain"]["rootCumulative"], expected,
            "{transport}: {got}"
        );
        assert_eq!(got["inGoFiles"]["total"], expected, "{transport}: {got}");
        assert_eq!(got["inGoFiles"]["filtered"], 0, "{transport}: {got}");
        assert_eq!(
            got["unimplemented"]["code"], "UNIMPLEMENTED",
            "{transport}: {got}"
        );
    }

    // Connect (unary, binary): ProfileTypes is an empty message; the answer is the bare
    // ProfileTypesResponse. A Connect error is JSON with its code.
    let url = |method: &str| {
        format!(
            "http://{}/parca.query.v1alpha1.QueryService/{method}",
            server.addr
        )
    };
    let connect = |method: &str, content_type: &str, body: &[u8]| {
        let output = Command::new("curl")
            .args(["-sS", "-X", "POST", "-H"])
            .arg(format!("Content-Type: {content_type}"))
            .args(["-H", "Connect-Protocol-Version: 1", "--data-binary", "@-"])
            .args(["-w", "\n%{http_code}"])
            .arg(url(method))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .and_then(|mut child| {
                use std::io::Write as _;
                child.stdin.take().expect("stdin").write_all(body)?;
                child.wait_with_output()
            })
            .expect("run curl");
        let mut out = output.stdout;
        let split = out.iter().rposition(|&b| b == b'\n').expect("status line");
        let status = String::from_utf8_lossy(&out[split + 1..]).into_owned();
        out.truncate(split);
        (status, out)
    };
    let (status, body) = connect("ProfileTypes", "application/proto", b"");
    assert_eq!(status, "200");
    let text = String::from_utf8_lossy(&body);
    assert!(
        text.contains("parca_client_cpu") && text.contains("memory"),
        "{text}"
    );
    // QueryRange without its times: Connect's invalid_argument, as JSON, with HTTP 400.
    let (status, body) = connect("QueryRange", "application/proto", b"");
    assert_eq!(status, "400", "{}", String::from_utf8_lossy(&body));
    let error: serde_json::Value = serde_json::from_slice(&body).expect("JSON error");
    assert_eq!(error["code"], "invalid_argument");
    assert!(
        error["message"]
            .as_str()
            .unwrap_or("")
            .contains("`start` is required"),
        "{error}"
    );
    // Connect's JSON: proto3's JSON mapping both ways.
    let (status, body) = connect("ProfileTypes", "application/json", b"{}");
    assert_eq!(status, "200", "{}", String::from_utf8_lossy(&body));
    let types: serde_json::Value = serde_json::from_slice(&body).expect("JSON answer");
    assert!(
        types["types"]
            .as_array()
            .is_some_and(|t| t.iter().any(|t| t["name"] == "parca_client_cpu")),
        "{types}"
    );
    let (status, body) = connect(
        "Values",
        "application/json",
        br#"{"labelName": "job", "match": ["{job=~\"client-.*\"}"]}"#,
    );
    assert_eq!(status, "200", "{}", String::from_utf8_lossy(&body));
    let values: serde_json::Value = serde_json::from_slice(&body).expect("JSON answer");
    assert_eq!(
        values["labelValues"],
        serde_json::json!(["client-grpc", "client-grpc-web", "client-grpc-web-text"]),
        "{values}"
    );
    let (status, body) = connect("Labels", "application/json", b"{\"nonsense\": 1}");
    assert_eq!(status, "400", "{}", String::from_utf8_lossy(&body));
    let error: serde_json::Value = serde_json::from_slice(&body).expect("JSON error");
    assert!(
        error["message"].as_str().unwrap_or("").contains("nonsense"),
        "{error}"
    );
}
