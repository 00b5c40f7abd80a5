//! Deploy insights in the real server: a service pushes CPU profiles of version 1 (its time in
//! `parse`), then of version 2 (its time in `encode`); once version 2's window is complete,
//! `GET /api/v1/insights` names `encode` first with its inclusive shares before and after, and
//! `/federate` gives it as `parca_insight_share_change`. A restart of the server on the same
//! store serves the same insight, and does not make it twice.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::server_harness::{Server, http_request, parca_binary, poll};

const CPU: &str = "process_cpu:cpu:nanoseconds:cpu:nanoseconds:delta";

fn config() -> String {
    format!(
        "insights:\n  - profile_type: {CPU}\n    by: [job]\n    change_label: version\n    window: 10s\n"
    )
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64
}

/// A 5 s CPU profile at `ms` from `("main;serve;parse", nanoseconds)` stacks, gzipped.
fn cpu_profile(ms: i64, stacks: &[(&str, i64)]) -> Vec<u8> {
    let mut b = parca_pprof::ProfileBuilder::new();
    for &(folded, value) in stacks {
        let locations = folded
            .split(';')
            .rev()
            .map(|name| {
                let f = b.function(name, name, "shop.go", 1);
                b.location(0, 0, &[(f, 1)])
            })
            .collect();
        b.sample(locations, vec![value], Vec::new());
    }
    let cpu = b.value_type("cpu", "nanoseconds");
    let mut profile = b.finish();
    profile.sample_type = vec![cpu];
    profile.period_type = Some(cpu);
    profile.period = 10_000_000;
    profile.time_nanos = ms * 1_000_000;
    profile.duration_nanos = 5_000_000_000;
    parca_pprof::encode(&profile, true)
}

fn push(server: &Server, version: &str, ms: i64, stacks: &[(&str, i64)]) {
    let r = http_request(
        server.addr,
        "POST",
        &format!("/api/v1/write?__name__=process_cpu&job=shop&version={version}"),
        &cpu_profile(ms, stacks),
        Duration::from_secs(30),
    )
    .expect("push");
    assert_eq!(r.status, 200, "{}", r.text());
}

fn insights(server: &Server) -> Vec<serde_json::Value> {
    server
        .api("/api/v1/insights")
        .expect("insights")
        .as_array()
        .cloned()
        .expect("a list")
}

#[test]
fn a_deploy_names_the_function_that_got_hot_and_survives_a_restart() {
    let storage = tempfile::tempdir().expect("tempdir");
    let binary = parca_binary(false);
    let server = Server::start_with_storage(&binary, Some(storage.path()), &[], |_| config());
    assert!(insights(&server).is_empty());
    // Version 1 for 30 s, then version 2 for 30 s, ending 10 s ago: version 2's window of
    // 10 s is complete.
    let start = now_ms() - 70_000;
    let v1 = [
        ("main;serve;parse", 800_000_000),
        ("main;serve;encode", 200_000_000),
    ];
    let v2 = [
        ("main;serve;parse", 300_000_000),
        ("main;serve;encode", 700_000_000),
    ];
    for i in 0..6 {
        push(&server, "1", start + i * 5_000, &v1);
    }
    for i in 6..12 {
        push(&server, "2", start + i * 5_000, &v2);
    }
    let list = poll(
        "the insight",
        Duration::from_secs(60),
        Duration::from_millis(200),
        || {
            let list = insights(&server);
            if list.is_empty() {
                Err("none yet".to_owned())
            } else {
                Ok(list)
            }
        },
    );
    assert_eq!(list.len(), 1, "{list:?}");
    let insight = &list[0];
    assert_eq!(insight["labels"], serde_json::json!({"job": "shop"}));
    assert_eq!(
        insight["change"],
        serde_json::json!({"label": "version", "from": "1", "to": "2"})
    );
    assert_eq!(insight["profile_type"], CPU);
    let at = insight["at"].as_f64().expect("at");
    assert_eq!(at, (start + 30_000) as f64 / 1000.0);
    let functions = insight["functions"].as_array().expect("functions");
    let names: Vec<&str> = functions
        .iter()
        .filter_map(|f| f["name"].as_str())
        .collect();
    assert_eq!(
        names,
        ["encode", "parse"],
        "main and serve did not move: {insight}"
    );
    let share = |f: &serde_json::Value, k: &str| f[k].as_f64().expect("share");
    let encode = &functions[0];
    assert!((share(encode, "before") - 0.2).abs() < 1e-9, "{encode}");
    assert!((share(encode, "after") - 0.7).abs() < 1e-9, "{encode}");
    assert!((share(encode, "self_after") - 0.7).abs() < 1e-9, "{encode}");
    let parse = &functions[1];
    assert!((share(parse, "before") - 0.8).abs() < 1e-9, "{parse}");
    assert!((share(parse, "after") - 0.3).abs() < 1e-9, "{parse}");

    // The series an alerting rule reads.
    let federate = server
        .get("/federate?match[]=parca_insight_share_change")
        .expect("federate");
    assert_eq!(federate.status, 200);
    let text = federate.text();
    let line = text
        .lines()
        .find(|l| l.contains("function=\"encode\""))
        .unwrap_or_else(|| panic!("no encode series in {text}"));
    assert!(
        line.starts_with("parca_insight_share_change{")
            && line.contains("job=\"shop\"")
            && line.contains("to=\"2\""),
        "{line}"
    );
    let value: f64 = line
        .split(' ')
        .nth(1)
        .and_then(|v| v.parse().ok())
        .expect("value");
    assert!((value - 0.5).abs() < 1e-9, "{line}");

    // A restart on the same store: the same insight at once, and not made twice.
    drop(server);
    let server = Server::start_with_storage(&binary, Some(storage.path()), &[], |_| config());
    assert_eq!(insights(&server), list);
    // Version 2 keeps running; the server reads the store again (ticks every 2.5 s).
    push(&server, "2", now_ms(), &v2);
    poll(
        "the restarted server to read the store",
        Duration::from_secs(30),
        Duration::from_millis(200),
        || {
            let text = std::fs::read_to_string(storage.path().join("insights.json"))
                .map_err(|e| e.to_string())?;
            let state: serde_json::Value =
                serde_json::from_str(&text).map_err(|e| e.to_string())?;
            let watermark = state["watches"]
                .as_object()
                .and_then(|w| w.values().next())
                .and_then(|w| w["watermark_ms"].as_i64())
                .unwrap_or(0);
            if watermark > start + 60_000 {
                Ok(())
            } else {
                Err(format!("watermark {watermark}"))
            }
        },
    );
    assert_eq!(insights(&server), list);
}
