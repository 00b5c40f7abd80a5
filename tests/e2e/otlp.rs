//! OpenTelemetry profiles from a client nobody here wrote: Python's `opentelemetry-proto`
//! (PyPI 1.45.2, the same v1.10.0 protos as the Rust crate) sends `ExportProfilesServiceRequest`s
//! over OTLP/HTTP (and gRPC, `grpcio`), built as the OpenTelemetry eBPF profiler builds them.
//! What arrives must be queryable with the resource's `service.name` as `service_name` and the
//! samples' `thread.name` as `thread_name`; a bad request is refused whole with the place of its
//! fault. Without the venv (`tests/tools/targets.sh python-otlp`) the test says so and passes,
//! except under `PARCA_REQUIRE_TARGETS=1`.

use std::collections::BTreeMap;
use std::path::Path;

use crate::server_harness::{
    Server, encode, outside_target, parca_binary, run_json_script, skip, top_rows,
};

/// Runs `send.py` with `args`; its one line of JSON.
fn send(python: &Path, args: &[&str]) -> serde_json::Value {
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    run_json_script(python, "python-otlp/send.py", &args)
}

/// Function → (flat, cum) of the merged CPU samples of `service`.
fn top(server: &Server, service: &str) -> Result<BTreeMap<String, (i64, i64)>, String> {
    let query = format!(
        "merge(process_cpu:samples:count:cpu:nanoseconds:delta{{service_name=\"{service}\"}}[10m])"
    );
    let data = server.api(&format!(
        "/api/v1/query?format=top&query={}",
        encode(&query)
    ))?;
    Ok(top_rows(&data))
}

#[test]
fn opentelemetry_profiles_arrive_over_otlp_http_and_grpc() {
    let python = match outside_target("python-otlp") {
        Ok(python) => python,
        Err(why) => {
            return skip(
                "opentelemetry-proto (tests/tools/targets.sh python-otlp)",
                &why,
            );
        }
    };
    let server = Server::start(&parca_binary(false), &[], |_| "scrape_configs: []\n".into());
    let url = format!("http://{}/v1development/profiles", server.addr);

    let answer = send(&python, &["http", &url, "otlp-http"]);
    assert_eq!(answer, serde_json::json!({"status": 200, "rejected": 0}));
    let rows = top(&server, "otlp-http").expect("query");
    assert_eq!(rows.get("work"), Some(&(4, 4)), "{rows:?}");
    assert_eq!(rows.get("main"), Some(&(2, 6)), "{rows:?}");
    let series = server
        .api(&format!(
            "/api/v1/series?match[]={}",
            encode("{service_name=\"otlp-http\"}")
        ))
        .expect("series");
    let threads: Vec<&str> = series
        .as_array()
        .expect("list")
        .iter()
        .filter_map(|s| s["thread_name"].as_str())
        .collect();
    assert_eq!(threads, ["t1", "t2"], "{series}");
    assert_eq!(series[0]["otel_scope_name"], "python-otlp-test", "{series}");

    // A sample naming a stack that is not there: 400, the fault's place, nothing stored.
    let bad = send(&python, &["http-bad", &url]);
    assert_eq!(bad["status"], 400, "{bad}");
    let message = bad["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("profiles[0]: sample 0 refers to stack 9"),
        "{bad}"
    );
    let stored = server
        .api(&format!(
            "/api/v1/series?match[]={}",
            encode("{service_name=\"bad\"}")
        ))
        .expect("series");
    assert_eq!(stored, serde_json::json!([]));
}
