//! Push throughput of the server (issue 32's write path): `wrk` POSTs Prometheus' own 16 KB CPU
//! profile (two sample types) to `/api/v1/write` over keep-alive connections, each push a new
//! series (a new `instance` label), each answered only once durable (WAL fsynced; group commits
//! across connections). For each connection count it prints pushes a second, latency
//! percentiles, refusals, the server's CPU per push (from `/proc/PID/stat`, so the load
//! generator beside it is not counted) and its resident memory. It asserts nothing about time.
//!
//! Run: `cargo bench -p parca-tests --bench push_load` (options after `--`: `--seconds N` per
//! run, default 10; `--connections 1,16`; `--rules 0,100`: runs without rules and with a group
//! of that many recording rules, evaluated every `--rules-interval` seconds (default 1), over
//! a fleet of 1,000 series pushed first (job `app`; the load's pushes go to job `bench`), to
//! show whether evaluation holds up pushes). Needs `wrk` (`apt-get
//! install wrk`). `PARCA_BIN` picks a server binary; otherwise a release one is built.

#![allow(clippy::print_stdout)] // A bench binary: its figures are its output.
#![allow(
    clippy::too_many_lines,
    reason = "a bench or test target is one scenario read top to bottom; the line budget is for product code"
)]

#[path = "../e2e/server_harness.rs"]
mod server_harness;

use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use server_harness::{Server, corpus_profile_at, cpu_seconds, http_request, parca_binary};

/// Series the rules read, pushed before the load.
const FLEET_SERIES: usize = 1_000;

/// wrk's script: every request a new series; the body read once per thread.
const SCRIPT: &str = r#"
local threads = 0
function setup(thread)
  threads = threads + 1
  thread:set("id", "t" .. threads)
end
local counter = 0
function init(args)
  local f = assert(io.open(args[1], "rb"))
  body = f:read("*all")
  f:close()
  wrk.headers["Content-Type"] = "application/octet-stream"
end
function request()
  counter = counter + 1
  return wrk.format("POST", "/api/v1/write?__name__=process_cpu&job=bench&instance=" .. id .. "-" .. counter, nil, body)
end
"#;

struct Options {
    seconds: u64,
    connections: Vec<usize>,
    rules: Vec<usize>,
    rules_interval: u64,
}

impl Options {
    fn parse() -> Options {
        let mut o = Options {
            seconds: 10,
            connections: vec![1, 16],
            rules: vec![0],
            rules_interval: 1,
        };
        let args: Vec<String> = std::env::args().skip(1).collect();
        let mut i = 0;
        while i < args.len() {
            // `cargo bench` passes `--bench`.
            if args[i] == "--bench" {
                i += 1;
                continue;
            }
            let value = args
                .get(i + 1)
                .unwrap_or_else(|| panic!("{} needs a value", args[i]));
            match args[i].as_str() {
                "--seconds" => o.seconds = value.parse().expect("--seconds N"),
                "--connections" => o.connections = numbers(value, "--connections N,M"),
                "--rules" => o.rules = numbers(value, "--rules N,M"),
                "--rules-interval" => o.rules_interval = value.parse().expect("--rules-interval S"),
                other => panic!("unknown option {other}"),
            }
            i += 2;
        }
        o
    }
}

/// A comma-separated list of numbers.
fn numbers(value: &str, usage: &str) -> Vec<usize> {
    value.split(',').map(|n| n.parse().expect(usage)).collect()
}

/// A group of `n` recording rules over the pushed series, in the four shapes of
/// `pkg/rules/benches/evaluate.rs` (a job's total, per instance, and two stack filters' shares).
fn rules_yaml(n: usize, interval_s: u64) -> String {
    const TYPE: &str = "process_cpu:cpu:nanoseconds:cpu:nanoseconds:delta{job=\"app\"}";
    let mut yaml = format!("groups:\n  - name: bench\n    interval: {interval_s}s\n    rules:\n");
    for i in 0..n {
        let expr = match i % 4 {
            0 => format!("sum by (job) ({TYPE})"),
            1 => format!("sum by (instance) ({TYPE})"),
            2 => format!("sum by (job) ({TYPE} |= \"runtime.mallocgc\") / sum by (job) ({TYPE})"),
            _ => {
                format!("sum by (job) ({TYPE} |= leaf \"runtime.memmove\") / sum by (job) ({TYPE})")
            }
        };
        yaml.push_str(&format!(
            "      - record: bench:rule_{i}\n        expr: '{expr}'\n"
        ));
    }
    yaml
}

/// A figure of wrk's report: the word after `label` on the line that starts with it.
fn figure<'a>(report: &'a str, label: &str) -> &'a str {
    report
        .lines()
        .find_map(|l| l.trim_start().strip_prefix(label))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or("?")
}

/// VmRSS of `pid` in MiB.
fn rss_mib(pid: u32) -> f64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .unwrap_or(0.0)
        / 1024.0
}

fn main() {
    let options = Options::parse();
    if Command::new("wrk").arg("--version").output().is_err() {
        println!("push_load: wrk is missing (apt-get install wrk)");
        return;
    }
    let binary = parca_binary(true);
    let work = tempfile::tempdir().expect("tempdir");
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_millis() as i64;
    let body = work.path().join("prometheus-cpu.pb.gz");
    std::fs::write(
        &body,
        corpus_profile_at("prometheus/prometheus-cpu.pb.gz", now_ms),
    )
    .expect("write the body");
    let script = work.path().join("push.lua");
    std::fs::write(&script, SCRIPT).expect("write the script");
    println!(
        "push_load: {} bytes a push, {} s a run, server {}",
        std::fs::metadata(&body).expect("body").len(),
        options.seconds,
        binary.display()
    );
    println!(
        "rules  connections  pushes/s  p50      p99      non-2xx  server CPU/push  RSS after  head series  evaluations"
    );
    for &rules in &options.rules {
        for &connections in &options.connections {
            let rule_file = work.path().join(format!("rules-{rules}.yml"));
            std::fs::write(&rule_file, rules_yaml(rules, options.rules_interval)).expect("rules");
            let config = if rules == 0 {
                "scrape_configs: []\n".to_owned()
            } else {
                format!(
                    "scrape_configs: []\nrule_files: ['{}']\n",
                    rule_file.display()
                )
            };
            let server = Server::start(&binary, &[], |_| config);
            if rules > 0 {
                let profile = std::fs::read(&body).expect("body");
                for i in 0..FLEET_SERIES {
                    let path =
                        format!("/api/v1/write?__name__=process_cpu&job=app&instance=app-{i}");
                    let r = http_request(
                        server.addr,
                        "POST",
                        &path,
                        &profile,
                        Duration::from_secs(30),
                    )
                    .expect("push the fleet");
                    assert_eq!(r.status, 200, "{}", r.text());
                }
            }
            let pid = server.process.pid();
            let cpu0 = cpu_seconds(pid);
            let output = Command::new("wrk")
                .args(["--latency", "-t"])
                .arg(connections.min(2).to_string())
                .arg("-c")
                .arg(connections.to_string())
                .arg("-d")
                .arg(format!("{}s", options.seconds))
                .arg("-s")
                .arg(&script)
                .arg(format!("http://{}", server.addr))
                .arg("--")
                .arg(&body)
                .output()
                .expect("run wrk");
            let cpu = cpu_seconds(pid) - cpu0;
            let report = String::from_utf8_lossy(&output.stdout);
            // "  123456 requests in 10.00s, 1.23MB read"
            let requests: f64 = report
                .lines()
                .find_map(|l| l.trim().split_once(" requests in"))
                .and_then(|(n, _)| n.parse().ok())
                .unwrap_or(0.0);
            let refused = figure(&report, "Non-2xx or 3xx responses:");
            let refused = if refused == "?" { "0" } else { refused };
            let metrics = server.get("/metrics").map(|r| r.text()).unwrap_or_default();
            let head_series = metrics
                .lines()
                .find_map(|l| l.strip_prefix("parca_tsdb_head_series "))
                .unwrap_or("?")
                .to_owned();
            // Rule evaluations while the pushes ran.
            let evaluations: f64 = metrics
                .lines()
                .filter_map(|l| l.strip_prefix("parca_rule_evaluations_total"))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum();
            println!(
                "{rules:<6} {connections:<12} {:<9} {:<8} {:<8} {refused:<8} {:<16} {:<10} {head_series:<12} {evaluations}",
                figure(&report, "Requests/sec:"),
                figure(&report, "50%"),
                figure(&report, "99%"),
                if requests > 0.0 {
                    format!("{:.0} µs", cpu * 1e6 / requests)
                } else {
                    "?".into()
                },
                format!("{:.0} MiB", rss_mib(pid))
            );
            if !output.status.success() || requests == 0.0 {
                println!("wrk: {report}{}", String::from_utf8_lossy(&output.stderr));
            }
        }
    }
}
