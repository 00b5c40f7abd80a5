//! Rule evaluation in the real server: a group evaluated every second over pushed profiles,
//! seen through `GET /api/v1/rules` and `GET /api/v1/alerts` in Prometheus' shapes; an alert
//! goes pending, fires, and resolves once profiles stop; its value equals `/api/v1/query`'s at
//! the same evaluation time; a reload (SIGHUP and `/-/reload`) keeps the state of rules that did
//! not change, and a bad rule file keeps the old rules. Debian's real `prometheus` scrapes the
//! recorded series from `/federate` and stores the values the query API gives; another takes
//! them by remote write (`--web.enable-remote-write-receiver`).

use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::server_harness::{
    Process, Server, corpus_profile_at, encode, free_port, http_get, http_request, outside_target,
    parca_binary, poll, skip,
};

const HEAP: &str = "memory:inuse_space:bytes:space:bytes";

fn rules_file(extra: &str) -> String {
    format!(
        r#"groups:
  - name: heap
    interval: 1s
    labels: {{team: profiling}}
    rules:
      - record: job:heap_inuse:sum
        expr: sum by (job) ({HEAP})
      - record: job:heap_inuse:doubled
        expr: job:heap_inuse:sum * 2
      - alert: HeapInUse
        expr: sum by (job) ({HEAP}) > 0
        for: 2s
        labels: {{severity: "{{{{ if gt $value 0.0 }}}}page{{{{ end }}}}"}}
        annotations:
          summary: "{{{{ $labels.job }}}} holds {{{{ $value | humanize1024 }}}}B"
          total: '{{{{ with query "sum({HEAP})" }}}}{{{{ . | first | value }}}}{{{{ end }}}}'
{extra}"#
    )
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64
}

pub(crate) fn push_heap(server: &Server) {
    let heap = corpus_profile_at("go/go-heap.pb.gz", now_ms());
    let r = http_request(
        server.addr,
        "POST",
        "/api/v1/write?__name__=memory&job=api",
        &heap,
        Duration::from_secs(30),
    )
    .expect("push");
    assert_eq!(r.status, 200, "{}", r.text());
}

/// `POST /-/reload`.
fn reload(server: &Server) -> crate::server_harness::Response {
    http_request(
        server.addr,
        "POST",
        "/-/reload",
        &[],
        Duration::from_secs(30),
    )
    .expect("reload")
}

/// Sends the server SIGHUP (a reload).
fn sighup(server: &Server) {
    let status = Command::new("kill")
        .args(["-HUP", &server.process.pid().to_string()])
        .status()
        .expect("kill -HUP");
    assert!(status.success());
}

/// The rule named `name` of `/api/v1/rules`.
fn rule(server: &Server, name: &str) -> Result<serde_json::Value, String> {
    let data = server.api("/api/v1/rules")?;
    data["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_array().into_iter().flatten())
        .find(|r| r["name"] == name)
        .cloned()
        .ok_or_else(|| format!("no rule {name} in {data}"))
}

#[test]
fn rules_record_alert_and_survive_reloads() {
    let binary = parca_binary(false);
    let server = Server::start(
        &binary,
        &["--query-lookback-delta=4s", "--web-enable-lifecycle"],
        |_| "rule_files: [rules.yml]\n".to_owned(),
    );
    let rules_path = server.dir.path().join("rules.yml");
    // Written after the start: a missing file is an empty glob, so the server starts without
    // rules and takes them at the first reload.
    std::fs::write(&rules_path, rules_file("")).expect("write rules");
    let r = reload(&server);
    assert_eq!(r.status, 200, "{}", r.text());

    // Pending while profiles keep coming, then firing after `for`.
    let firing = poll(
        "the alert to fire",
        Duration::from_secs(30),
        Duration::from_millis(200),
        || {
            push_heap(&server);
            let alert = rule(&server, "HeapInUse")?;
            if alert["state"] == "firing" {
                Ok(alert)
            } else {
                Err(format!("{alert}"))
            }
        },
    );
    assert_eq!(firing["type"], "alerting");
    assert_eq!(firing["health"], "ok", "{firing}");
    assert_eq!(firing["duration"], 2.0);
    assert_eq!(firing["labels"]["team"], "profiling");
    let alert = &firing["alerts"][0];
    assert_eq!(alert["state"], "firing");
    assert_eq!(alert["labels"]["alertname"], "HeapInUse");
    assert_eq!(alert["labels"]["severity"], "page");
    assert_eq!(alert["labels"]["job"], "api");
    assert!(
        alert["annotations"]["summary"]
            .as_str()
            .is_some_and(|s| s.starts_with("api holds ") && s.ends_with('B')),
        "{alert}"
    );
    let active_at = alert["activeAt"].as_str().expect("activeAt").to_owned();
    // The alert's value is the query API's at the rule's evaluation time.
    let at = firing["lastEvaluation"].as_str().expect("lastEvaluation");
    let vector = server
        .api(&format!(
            "/api/v1/query?query={}&time={}",
            encode(&format!("sum by (job) ({HEAP})")),
            encode(at)
        ))
        .expect("query");
    let queried: f64 = vector["result"][0]["value"][1]
        .as_str()
        .expect("value")
        .parse()
        .expect("number");
    let alerted: f64 = alert["value"]
        .as_str()
        .expect("value")
        .parse()
        .expect("number");
    assert_eq!(alerted, queried, "{alert} {vector}");
    // The template's `query` ran at the same evaluation time: one job, the same total.
    let total: f64 = alert["annotations"]["total"]
        .as_str()
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("no total annotation: {alert}"));
    assert_eq!(total, queried, "{alert}");
    let recording = rule(&server, "job:heap_inuse:sum").expect("recording rule");
    assert_eq!(recording["type"], "recording");
    assert_eq!(recording["health"], "ok");
    assert!(recording.get("alerts").is_none());
    // A rule reads what the rule before it recorded, at the same evaluation.
    let federated = server
        .get(&format!(
            "/federate?match[]={}&match[]={}",
            encode(r#"{__name__="job:heap_inuse:sum"}"#),
            encode(r#"{__name__="job:heap_inuse:doubled"}"#)
        ))
        .expect("federate")
        .text();
    let value_of = |name: &str| -> f64 {
        federated
            .lines()
            .find(|l| l.starts_with(&format!("{name}{{")))
            .and_then(|l| l.split(' ').nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in:\n{federated}"))
    };
    assert_eq!(
        value_of("job:heap_inuse:doubled"),
        2.0 * value_of("job:heap_inuse:sum"),
        "{federated}"
    );

    // Filters, as Prometheus'.
    let only_alerts = server.api("/api/v1/rules?type=alert").expect("filtered");
    let kinds: Vec<&str> = only_alerts["groups"][0]["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .filter_map(|r| r["type"].as_str())
        .collect();
    assert_eq!(kinds, ["alerting"]);
    assert_eq!(only_alerts["groups"][0]["interval"], 1.0);
    let r = server.get("/api/v1/rules?type=nope").expect("bad filter");
    assert_eq!(r.status, 400, "{}", r.text());
    // Evaluations are counted per group, as Prometheus' rule_group label names it.
    let metrics = server.get("/metrics").expect("metrics").text();
    let group = format!("{};heap", rules_path.display());
    assert!(
        metrics.lines().any(|l| l.starts_with(&format!(
            "parca_rule_evaluations_total{{rule_group=\"{group}\"}} "
        ))),
        "{metrics}"
    );
    assert!(
        metrics.contains(&format!(
            "parca_rule_evaluation_failures_total{{rule_group=\"{group}\"}} 0"
        )),
        "{metrics}"
    );
    let alerts = server.api("/api/v1/alerts").expect("alerts");
    assert_eq!(alerts["alerts"][0]["labels"]["alertname"], "HeapInUse");

    // A changed group (a rule added) keeps the alert's state: SIGHUP.
    push_heap(&server);
    std::fs::write(
        &rules_path,
        rules_file("      - record: heap:count\n        expr: count(") + HEAP + ")\n",
    )
    .expect("write rules");
    sighup(&server);
    let kept = poll(
        "the new rule after SIGHUP",
        Duration::from_secs(30),
        Duration::from_millis(100),
        || {
            push_heap(&server);
            rule(&server, "heap:count")?;
            rule(&server, "HeapInUse")
        },
    );
    assert_eq!(kept["state"], "firing", "{kept}");
    assert_eq!(kept["alerts"][0]["activeAt"], active_at.as_str(), "{kept}");

    // A bad file is refused, and the rules in force stay.
    std::fs::write(
        &rules_path,
        "groups:\n  - name: heap\n    rules:\n      - record: 1bad\n        expr: sum(a:b:c:d:e)\n",
    )
    .expect("write rules");
    let r = reload(&server);
    assert_ne!(r.status, 200, "{}", r.text());
    assert!(r.text().contains("rules.yml"), "{}", r.text());
    rule(&server, "heap:count").expect("old rules kept");

    // Without new profiles the condition goes away past the lookback: resolved.
    let resolved = poll(
        "the alert to resolve",
        Duration::from_secs(30),
        Duration::from_millis(200),
        || {
            let alert = rule(&server, "HeapInUse")?;
            if alert["state"] == "inactive" {
                Ok(alert)
            } else {
                Err(format!("{alert}"))
            }
        },
    );
    assert_eq!(resolved["alerts"], serde_json::json!([]));
    assert_eq!(
        server.api("/api/v1/alerts").expect("alerts")["alerts"],
        serde_json::json!([])
    );
}

/// Starts Debian's `prometheus` with `config` (a prometheus.yml) in `dir`, waiting until it is
/// ready; `None` (said loudly, or a failure under `PARCA_REQUIRE_TARGETS=1`) without it.
pub(crate) fn start_prometheus(
    dir: &std::path::Path,
    config: &str,
    extra_args: &[&str],
) -> Option<(Process, std::net::SocketAddr)> {
    let binary = match outside_target("prometheus") {
        Ok(binary) => binary,
        Err(why) => {
            skip("Debian's prometheus", &why);
            return None;
        }
    };
    let addr: std::net::SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let config_path = dir.join("prometheus.yml");
    std::fs::write(&config_path, config).expect("write prometheus.yml");
    let mut command = Command::new(binary);
    command
        .arg(format!("--config.file={}", config_path.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("prometheus-data").display()
        ))
        .arg(format!("--web.listen-address={addr}"))
        .arg("--log.level=warn")
        .args(extra_args);
    let mut process = Process::start("prometheus", command, &dir.join("prometheus.log"));
    poll(
        "prometheus to be ready",
        Duration::from_secs(60),
        Duration::from_millis(100),
        || {
            process.assert_running();
            match http_get(addr, "/-/ready", Duration::from_secs(5)) {
                Ok(r) if r.status == 200 => Ok(()),
                Ok(r) => Err(format!("HTTP {}", r.status)),
                Err(e) => Err(e),
            }
        },
    );
    Some((process, addr))
}

/// `data.result` of Prometheus' `/api/v1/query?query=…`.
pub(crate) fn prometheus_query(
    addr: std::net::SocketAddr,
    query: &str,
) -> Result<Vec<serde_json::Value>, String> {
    let r = http_get(
        addr,
        &format!("/api/v1/query?query={}", encode(query)),
        Duration::from_secs(10),
    )?;
    let json: serde_json::Value = serde_json::from_slice(&r.body).map_err(|e| e.to_string())?;
    json["data"]["result"]
        .as_array()
        .cloned()
        .ok_or_else(|| format!("HTTP {}: {json}", r.status))
}

#[test]
fn prometheus_federates_recorded_series() {
    let binary = parca_binary(false);
    let server = Server::start(&binary, &[], |_| {
        "global: {external_labels: {region: eu}}\nrule_files: [rules.yml]\n".to_owned()
    });
    std::fs::write(server.dir.path().join("rules.yml"), rules_file("")).expect("write rules");
    sighup(&server);
    push_heap(&server);
    // Our own side first: the text format, external labels added, selectors matched.
    let text = poll(
        "the recorded series at /federate",
        Duration::from_secs(30),
        Duration::from_millis(100),
        || {
            let r = server.get(&format!(
                "/federate?match[]={}&match[]={}",
                encode("job:heap_inuse:sum"),
                encode(r#"{__name__="ALERTS",alertstate="firing"}"#)
            ))?;
            let text = r.text();
            if r.status == 200 && text.contains("job:heap_inuse:sum{") && text.contains("ALERTS{") {
                Ok((text, r.header("content-type").map(str::to_owned)))
            } else {
                Err(format!("HTTP {}: {text}", r.status))
            }
        },
    );
    assert_eq!(
        text.1.as_deref(),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    assert!(
        text.0.lines().any(
            |l| l.starts_with(r#"job:heap_inuse:sum{job="api",region="eu",team="profiling"} "#)
        ),
        "{}",
        text.0
    );
    assert!(
        text.0.contains("# TYPE job:heap_inuse:sum untyped\n"),
        "{}",
        text.0
    );
    let r = server.get("/federate").expect("federate");
    assert_eq!(r.status, 400, "{}", r.text());

    let Some((_prometheus, prom)) = start_prometheus(
        server.dir.path(),
        &format!(
            "global: {{scrape_interval: 1s}}\nscrape_configs:\n  - job_name: federate\n    honor_labels: true\n    metrics_path: /federate\n    params: {{'match[]': ['{{__name__=~\"job:.*\"}}']}}\n    static_configs: [{{targets: ['{}']}}]\n",
            server.addr
        ),
        &[],
    ) else {
        return;
    };
    assert_stored_as_queried(prom, &server, "the federated series");
}

#[test]
fn prometheus_receives_recorded_series_by_remote_write() {
    let binary = parca_binary(false);
    let work = tempfile::tempdir().expect("tempdir");
    let Some((_prometheus, prom)) = start_prometheus(
        work.path(),
        "global: {scrape_interval: 1m}\n",
        &["--web.enable-remote-write-receiver"],
    ) else {
        return;
    };
    let rules = work.path().join("rules.yml");
    std::fs::write(&rules, rules_file("")).expect("write rules");
    let server = Server::start(&binary, &[], |_| {
        format!(
            "global: {{external_labels: {{region: eu}}}}\nrule_files: ['{}']\nremote_write:\n  - url: http://{prom}/api/v1/write\n    remote_timeout: 5s\n    headers: {{X-Scope-OrgID: parca}}\n    write_relabel_configs: [{{source_labels: [__name__], regex: 'job:.*|ALERTS_FOR_STATE', action: keep}}]\n    queue_config: {{max_samples_per_send: 1, min_shards: 2, max_shards: 4}}\n",
            rules.display()
        )
    });
    push_heap(&server);
    assert_stored_as_queried(prom, &server, "the remote-written series");
    // Sent a sample per request, in parallel shards: the alert's ALERTS_FOR_STATE too.
    poll(
        "prometheus to store ALERTS_FOR_STATE",
        Duration::from_secs(60),
        Duration::from_millis(250),
        || {
            let got = prometheus_query(prom, r#"ALERTS_FOR_STATE{alertname="HeapInUse"}"#)?;
            if got.is_empty() {
                push_heap(&server);
                Err("not yet".into())
            } else {
                Ok(())
            }
        },
    );
    // write_relabel_configs kept only `job:…` and ALERTS_FOR_STATE: no ALERTS reached it.
    assert_eq!(
        prometheus_query(prom, "ALERTS").expect("ALERTS"),
        Vec::<serde_json::Value>::new()
    );
}

/// Polls Prometheus at `prom` until it holds `job:heap_inuse:sum{job="api"}` (with the
/// server's external and the group's labels), then checks that its value is the server's
/// `/api/v1/query` value at the time Prometheus stored with it: the evaluation time.
fn assert_stored_as_queried(prom: std::net::SocketAddr, server: &Server, what: &str) {
    let (value, at) = poll(
        &format!("prometheus to store {what}"),
        Duration::from_secs(60),
        Duration::from_millis(250),
        || {
            let values = prometheus_query(prom, r#"job:heap_inuse:sum{job="api"}"#)?;
            let times = prometheus_query(prom, r#"timestamp(job:heap_inuse:sum{job="api"})"#)?;
            let (Some(value), Some(time)) = (values.first(), times.first()) else {
                return Err("not yet".into());
            };
            assert_eq!(value["metric"]["region"], "eu", "{value}");
            assert_eq!(value["metric"]["team"], "profiling", "{value}");
            let number = |v: &serde_json::Value| {
                v["value"][1]
                    .as_str()
                    .and_then(|s| s.parse::<f64>().ok())
                    .ok_or_else(|| format!("{v}"))
            };
            Ok((number(value)?, number(time)?))
        },
    );
    let vector = server
        .api(&format!(
            "/api/v1/query?query={}&time={at}",
            encode(&format!("sum by (job) ({HEAP})"))
        ))
        .expect("query");
    let queried: f64 = vector["result"][0]["value"][1]
        .as_str()
        .expect("value")
        .parse()
        .expect("number");
    assert_eq!(value, queried, "{vector}");
}

/// The `activeAt` of alert `name` in `/api/v1/alerts`, and its state.
fn active_at(server: &Server, name: &str) -> Result<(jiff::Timestamp, String), String> {
    let data = server.api("/api/v1/alerts")?;
    let alert = data["alerts"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|a| a["labels"]["alertname"] == name)
        .ok_or_else(|| format!("no alert {name} in {data}"))?;
    let at = alert["activeAt"]
        .as_str()
        .and_then(|t| t.parse::<jiff::Timestamp>().ok())
        .ok_or_else(|| format!("no activeAt in {alert}"))?;
    Ok((at, alert["state"].as_str().unwrap_or("").to_owned()))
}

/// An alert's `for` clock survives a restart, as Prometheus restores it from
/// `ALERTS_FOR_STATE`: pending for a while before the server stops, it is pending again after
/// the restart with the time it spent pending before (its `activeAt` moved on by the downtime
/// only), not started over at the restart; and `ALERTS_FOR_STATE` is served at `/federate`.
#[test]
fn alerts_keep_their_for_clock_across_a_restart() {
    let binary = parca_binary(false);
    let storage = tempfile::tempdir().unwrap();
    let rules_dir = tempfile::tempdir().unwrap();
    let rules_path = rules_dir.path().join("rules.yml");
    std::fs::write(
        &rules_path,
        format!(
            "groups:\n  - name: heap\n    interval: 1s\n    rules:\n      - alert: HeapHeld\n        \
             expr: sum by (job) ({HEAP}) > 0\n        for: 2m\n"
        ),
    )
    .unwrap();
    let config = format!("rule_files: [{}]\n", rules_path.display());
    let args = [
        "--query-lookback-delta=10m",
        "--rules-alert-for-grace-period=5s",
    ];
    let server =
        Server::start_with_storage(&binary, Some(storage.path()), &args, |_| config.clone());
    push_heap(&server);
    let (first_active, _) = poll(
        "the alert to be pending",
        Duration::from_secs(30),
        Duration::from_millis(200),
        || active_at(&server, "HeapHeld"),
    );
    // Pending a few seconds before the stop (the scenario: the time the restart must give
    // back); ALERTS_FOR_STATE holds when it became active, once an evaluation has written it.
    std::thread::sleep(Duration::from_secs(6));
    let seconds = first_active.as_second().to_string();
    poll(
        "ALERTS_FOR_STATE to be federated",
        Duration::from_secs(30),
        Duration::from_millis(200),
        || {
            let federated = server
                .get(&format!(
                    "/federate?match[]={}",
                    encode(r#"{__name__="ALERTS_FOR_STATE"}"#)
                ))?
                .text();
            if federated.lines().any(|l| {
                l.starts_with("ALERTS_FOR_STATE{")
                    && l.contains("HeapHeld")
                    && l.contains(&format!(" {seconds}"))
            }) {
                Ok(())
            } else {
                Err(format!(
                    "ALERTS_FOR_STATE of {seconds} not federated:\n{federated}"
                ))
            }
        },
    );
    drop(server);
    std::thread::sleep(Duration::from_secs(2));
    let restarted_at = jiff::Timestamp::now();
    let server =
        Server::start_with_storage(&binary, Some(storage.path()), &args, |_| config.clone());
    // Its first evaluation sees it pending afresh; the restore right after gives it back the
    // ~6 s it was pending before.
    let (restored, state) = poll(
        "the alert's for clock to be restored",
        Duration::from_secs(30),
        Duration::from_millis(200),
        || {
            let (at, state) = active_at(&server, "HeapHeld")?;
            if at < restarted_at - jiff::SignedDuration::from_secs(4) {
                Ok((at, state))
            } else {
                Err(format!(
                    "activeAt {at} (restarted at {restarted_at}), {state}"
                ))
            }
        },
    );
    assert_eq!(state, "pending");
    // Moved on by the downtime (a few seconds), never earlier than it was.
    assert!(restored >= first_active, "{restored} before {first_active}");
    assert!(
        restored - jiff::SignedDuration::from_secs(30) < first_active,
        "{restored} too far after {first_active}"
    );
}
