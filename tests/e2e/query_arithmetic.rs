//! Arithmetic over series sets through the HTTP API, as a Prometheus user asks it: a function's
//! share of each instance's CPU, inclusive (`|= "f"`) and self (`|= leaf "f"`), must equal
//! pprof's cum and flat over the total of the same profiles (`format=top`); `promtool query
//! instant` (Debian's prometheus package) reads the same vector; the instant value is computed
//! over `--query-lookback-delta`; numbers answer as Prometheus' scalars; matching and parse
//! errors are located and worded as PromQL's.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use crate::prometheus_clients::promtool_instant;
use crate::server_harness::{
    Server, corpus_profile_at, encode, http_request, parca_binary, skip, top_rows,
};

/// When the profiles are stamped (ms): 2023-11-14T22:13:20Z.
const T: i64 = 1_700_000_000_000;

/// `{instance → value}` of a vector answer's `data`.
fn by_instance(data: &serde_json::Value) -> BTreeMap<String, f64> {
    assert_eq!(data["resultType"], "vector", "{data}");
    data["result"]
        .as_array()
        .expect("a vector")
        .iter()
        .map(|s| {
            let instance = s["metric"]["instance"].as_str().unwrap_or("").to_owned();
            assert!(s["metric"].get("__name__").is_none(), "{s}");
            let value = s["value"][1]
                .as_str()
                .expect("a string")
                .parse()
                .expect("a number");
            (instance, value)
        })
        .collect()
}

#[test]
fn a_functions_share_of_cpu_over_http() {
    let binary = parca_binary(false);
    let server = Server::start(&binary, &["--query-lookback-delta=1h"], |_| {
        "scrape_configs: []\n".to_owned()
    });
    let cpu = corpus_profile_at("go/go-cpu.pb.gz", T);
    for instance in ["a", "b"] {
        let path = format!("/api/v1/write?__name__=process_cpu&job=push&instance={instance}");
        let r =
            http_request(server.addr, "POST", &path, &cpu, Duration::from_secs(30)).expect("push");
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let names = server
        .api("/api/v1/label/__name__/values")
        .expect("profile types");
    let x = names
        .as_array()
        .expect("names")
        .iter()
        .filter_map(|n| n.as_str())
        .find(|n| n.starts_with("process_cpu:cpu:nanoseconds:"))
        .unwrap_or_else(|| panic!("no CPU time type in {names}"))
        .to_owned();
    // Half an hour later: found only because the lookback is an hour.
    let at = T / 1000 + 1800;
    let query = |q: &str| server.api(&format!("/api/v1/query?query={}&time={at}", encode(q)));

    let top = server
        .api(&format!(
            "/api/v1/query?query={}&time={at}&format=top",
            encode(&format!(r#"{x}{{instance="a"}}[1h]"#))
        ))
        .expect("top");
    let rows = top_rows(&top);
    let total = top["total"].as_i64().expect("total") as f64;
    // The function with the most self time that calls others, whose name no other function's
    // contains (so that a substring selects it alone).
    let (name, (flat, cum)) = rows
        .iter()
        .filter(|(n, (flat, cum))| {
            *flat > 0 && flat < cum && !rows.keys().any(|o| o != *n && o.contains(n.as_str()))
        })
        .max_by_key(|(_, (flat, _))| *flat)
        .expect("a function with self time and callees");

    let inclusive = format!(r#"sum by (instance) ({x} |= "{name}") / sum by (instance) ({x})"#);
    let own = format!(r#"sum by (instance) ({x} |= leaf "{name}") / sum by (instance) ({x})"#);
    let shares = by_instance(&query(&inclusive).expect("inclusive share"));
    assert_eq!(shares.len(), 2, "{shares:?}");
    assert_eq!(shares["a"], *cum as f64 / total, "{name}");
    assert_eq!(shares["b"], shares["a"]);
    let shares = by_instance(&query(&own).expect("self share"));
    assert_eq!(shares["a"], *flat as f64 / total, "{name}");

    // A comparison filters: only what passes is left, with the left side's value.
    let over = by_instance(
        &query(&format!("{own} > {}", *flat as f64 / total / 2.0)).expect("comparison"),
    );
    assert_eq!(over.len(), 2);
    let under = by_instance(&query(&format!("{own} > 0.99")).expect("comparison"));
    assert!(under.is_empty(), "{under:?}");

    // query_range's step ending at the same time, an hour long, gives the same values.
    let range = server
        .api(&format!(
            "/api/v1/query_range?query={}&start={at}&end={at}&step=3600",
            encode(&own)
        ))
        .expect("query_range");
    let value: f64 = range["result"][0]["values"][0][1]
        .as_str()
        .expect("a value")
        .parse()
        .expect("a number");
    assert_eq!(value, *flat as f64 / total);

    // Two hours later, past the lookback: no value.
    let late = server
        .api(&format!(
            "/api/v1/query?query={}&time={}",
            encode(&own),
            T / 1000 + 7200
        ))
        .expect("late");
    assert_eq!(late["result"], serde_json::json!([]));

    // Numbers are Prometheus' scalars.
    let number = query("1 + 2 * 3 > bool 6").expect("a number");
    assert_eq!(
        number,
        serde_json::json!({"resultType": "scalar", "result": [at as f64, "1"]})
    );
    let inf = query(&format!("sum({x}) / 0")).expect("division by zero");
    assert_eq!(inf["result"][0]["value"][1], "+Inf");

    // Errors: PromQL's for matching, located for syntax and types.
    let error = |q: &str| {
        let r = server
            .get(&format!("/api/v1/query?query={}&time={at}", encode(q)))
            .expect("query");
        let json: serde_json::Value = serde_json::from_slice(&r.body).expect("json");
        (r.status, json["error"].as_str().unwrap_or("").to_owned())
    };
    let (status, message) = error(&format!("{x} / on (job) {x}"));
    assert_eq!(status, 422, "{message}");
    assert!(
        message.starts_with(r#"found duplicate series for the match group {job="push"} on the right hand-side of the operation"#),
        "{message}"
    );
    let (status, message) = error(&format!("sum({x}) / merge({x})"));
    assert_eq!(status, 400, "{message}");
    assert!(
        message.contains(&format!(
            "line 1, column {}: `/` takes series sets or numbers, got a profile",
            x.len() + 9
        )),
        "{message}"
    );

    if Command::new("promtool").arg("--version").output().is_err() {
        return skip("promtool (Debian's prometheus package)", "not installed");
    }
    let got = promtool_instant(server.addr, at, &inclusive);
    let got = by_instance(&serde_json::json!({"resultType": "vector", "result": got}));
    assert_eq!(got["a"], *cum as f64 / total);
    assert_eq!(got.len(), 2);
}
