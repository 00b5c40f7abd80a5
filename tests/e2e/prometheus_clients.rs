//! Prometheus' own client against the server: `promtool query instant` (Debian's prometheus
//! package) asks a series-valued query (`sum by`, `topk`, `count`) and must get what Prometheus
//! would answer, a vector whose values equal what `query_range` gives for the step ending at
//! that time. Regression: such queries were answered 422, so promtool, Grafana's instant mode
//! and prometheus-api-client's `custom_query` failed on them.
//!
//! The same queries go through prometheus-api-client (PyPI, `tests/targets/python-promapi`),
//! whose `custom_query` is what users' Python scripts call.
//!
//! Without promtool (or the Python client's venv) the test says so and passes, except under
//! `PARCA_REQUIRE_TARGETS=1`.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use crate::server_harness::{
    Server, encode, http_request, outside_target, parca_binary, skip, tests_dir,
};
use crate::support::corpus_dir;

/// `(labels, value)` of a vector, from promtool's JSON or from our API's.
fn vector(result: &serde_json::Value) -> BTreeMap<String, f64> {
    result
        .as_array()
        .expect("a vector")
        .iter()
        .map(|s| {
            let value = s["value"][1]
                .as_str()
                .expect("a value string")
                .parse()
                .expect("a number");
            (s["metric"].to_string(), value)
        })
        .collect()
}

/// `promtool query instant` of `query` at `at` (Unix seconds) against the server at `addr`: the
/// result as promtool prints it (a vector's list of samples).
pub(crate) fn promtool_instant(
    addr: std::net::SocketAddr,
    at: i64,
    query: &str,
) -> serde_json::Value {
    let output = Command::new("promtool")
        .args(["query", "instant", "-o", "json", "--time", &at.to_string()])
        .arg(format!("http://{addr}"))
        .arg(query)
        .output()
        .expect("run promtool");
    assert!(
        output.status.success(),
        "promtool failed on {query}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("promtool prints JSON")
}

#[test]
fn promtool_instant_queries_get_prometheus_vectors() {
    if Command::new("promtool").arg("--version").output().is_err() {
        return skip("promtool (Debian's prometheus package)", "not installed");
    }
    let promapi = match outside_target("python-promapi") {
        Ok(python) => Some(python),
        Err(why) => {
            skip(
                "prometheus-api-client (tests/tools/targets.sh python-promapi)",
                &why,
            );
            None
        }
    };
    let binary = parca_binary(false);
    let server = Server::start(&binary, &[], |_| "scrape_configs: []\n".to_owned());
    let heap = std::fs::read(corpus_dir().join("go/go-heap.pb.gz")).expect("profile");
    for instance in ["a", "b", "c"] {
        let path = format!("/api/v1/write?__name__=memory&job=push&instance={instance}");
        let r =
            http_request(server.addr, "POST", &path, &heap, Duration::from_secs(30)).expect("push");
        assert_eq!(r.status, 200, "{}", r.text());
    }
    // The profiles keep the file's own time: ask just after it.
    let series = server
        .api("/api/v1/series?match[]=%7Bjob%3D%22push%22%7D")
        .expect("series");
    assert!(!series.as_array().expect("list").is_empty());
    let profile = parca_profile::decode(&heap, &Default::default()).expect("decodes");
    let at = profile[0].meta.time_nanos / 1_000_000_000 + 1;
    for query in [
        r#"sum by (instance) (memory:inuse_space:bytes:space:bytes{job="push"})"#,
        r#"topk(2, memory:alloc_space:bytes:space:bytes{job="push"})"#,
        r#"count(memory:inuse_objects:count:space:bytes)"#,
    ] {
        let got = promtool_instant(server.addr, at, query);
        let range = server
            .api(&format!(
                "/api/v1/query_range?query={}&start={at}&end={at}&step=300",
                encode(query)
            ))
            .expect("query_range");
        let want: BTreeMap<String, f64> = range["result"]
            .as_array()
            .expect("a matrix")
            .iter()
            .map(|s| {
                let value = s["values"][0][1]
                    .as_str()
                    .expect("a value")
                    .parse()
                    .expect("a number");
                (s["metric"].to_string(), value)
            })
            .collect();
        assert!(!want.is_empty(), "{query}: query_range found nothing");
        assert_eq!(vector(&got), want, "{query}");
        if let Some(python) = &promapi {
            let output = Command::new(python)
                .arg(tests_dir().join("targets/python-promapi/query.py"))
                .arg(format!("http://{}", server.addr))
                .arg(at.to_string())
                .arg(query)
                .output()
                .expect("run prometheus-api-client");
            assert!(
                output.status.success(),
                "prometheus-api-client failed on {query}: {}",
                String::from_utf8_lossy(&output.stderr)
            );
            let got: serde_json::Value =
                serde_json::from_slice(&output.stdout).expect("the script prints JSON");
            assert_eq!(vector(&got), want, "prometheus-api-client: {query}");
        }
        // And the envelope itself, as Prometheus' clients parse it.
        let ours = server
            .api(&format!("/api/v1/query?query={}&time={at}", encode(query)))
            .expect("query");
        assert_eq!(ours["resultType"], "vector", "{ours}");
        assert_eq!(ours["result"][0]["value"][0].as_f64(), Some(at as f64));
    }
    // `start=0` is the Unix epoch, as in Prometheus, not "no start": nothing was stored then.
    for path in [
        "/api/v1/series?match[]=%7Bjob%3D%22push%22%7D&start=0&end=1",
        "/api/v1/labels?start=0&end=1",
    ] {
        let data = server.api(path).expect(path);
        assert_eq!(data, serde_json::json!([]), "{path}");
    }
    let epoch = server
        .api("/api/v1/query_range?query=count(memory:inuse_objects:count:space:bytes)&start=0&end=1&step=1")
        .expect("query_range at the epoch");
    assert_eq!(epoch["result"], serde_json::json!([]));
}
