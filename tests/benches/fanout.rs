//! The querier's fan-out overhead: the same queries asked of one release server holding every
//! profile and of a `--mode=query` server over two shards holding half each (in their heads:
//! the part of the fan-out the bucket benchmark, `cargo bench -p parca-objstore --bench
//! bucket`, does not cover). Both hold a real Go CPU profile every 10 s per instance. Prints
//! per query the median and 90th percentile of each, their ratio and the bytes the querier
//! fetched from the shards; asserts only that both give the same answer.
//!
//! `cargo bench -p parca-tests --bench fanout [-- INSTANCES MINUTES]` (default 40 instances,
//! 10 minutes). `PARCA_BIN` picks a server binary; otherwise a release one is built.

#![allow(clippy::print_stdout)] // A bench binary: its figures are its output.
#![allow(
    clippy::too_many_lines,
    reason = "a bench or test target is one scenario read top to bottom; the line budget is for product code"
)]

#[path = "../e2e/server_harness.rs"]
mod server_harness;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use server_harness::{Server, corpus_profile_at, encode, http_request, parca_binary};

const CPU: &str = "process_cpu:cpu:nanoseconds:cpu:nanoseconds:delta";

fn push(server: &Server, instance: &str, body: &[u8]) {
    let r = http_request(
        server.addr,
        "POST",
        &format!("/api/v1/write?__name__=process_cpu&job=bench&instance={instance}"),
        body,
        Duration::from_secs(30),
    )
    .expect("push");
    assert_eq!(r.status, 200, "{}", r.text());
}

/// Milliseconds each run of `path` took on `server`, and the last answer's body.
fn timings(server: &Server, path: &str, runs: usize) -> (Vec<f64>, Vec<u8>) {
    let mut out = Vec::with_capacity(runs);
    let mut body = Vec::new();
    for _ in 0..runs {
        let t = Instant::now();
        let r = server.get(path).expect("query");
        out.push(t.elapsed().as_secs_f64() * 1000.0);
        assert_eq!(r.status, 200, "{path}: {}", r.text());
        body = r.body;
    }
    out.sort_by(f64::total_cmp);
    (out, body)
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

fn metric(server: &Server, name: &str) -> f64 {
    let text = server.get("/metrics").expect("metrics").text();
    text.lines()
        .filter_map(|l| l.strip_prefix(name))
        .filter_map(|rest| rest.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn main() {
    let mut args = std::env::args().skip(1).filter(|a| !a.starts_with('-'));
    let instances: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(40);
    let minutes: i64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(10);
    let binary = parca_binary(true);
    let none = |_| "scrape_configs: []\n".to_owned();
    let shards = [
        Server::start(&binary, &[], none),
        Server::start(&binary, &[], none),
    ];
    let one = Server::start(&binary, &[], none);
    let querier = Server::start(
        &binary,
        &[
            "--mode=query",
            &format!(
                "--query-store=http://{},http://{}",
                shards[0].addr, shards[1].addr
            ),
        ],
        none,
    );
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64;
    let start_ms = now - minutes * 60_000;
    let loading = Instant::now();
    let mut n = 0;
    for step in 0..minutes * 6 {
        let at = start_ms + step * 10_000;
        let body = corpus_profile_at("go/go-cpu.pb.gz", at);
        for i in 0..instances {
            let instance = format!("i-{i}");
            push(&shards[i % 2], &instance, &body);
            push(&one, &instance, &body);
            n += 1;
        }
    }
    println!(
        "fan-out: {instances} instances × {} profiles ({n} per side) loaded in {:.1} s; two shards hold half each, in their heads",
        minutes * 6,
        loading.elapsed().as_secs_f64()
    );
    let window = format!(
        "start={}&end={}",
        start_ms as f64 / 1000.0,
        (now + 10_000) as f64 / 1000.0
    );
    let q = |text: &str| encode(text);
    let queries = [
        (
            "merge of every series, top",
            format!(
                "/api/v1/query?format=top&{window}&query={}",
                q(&format!("merge({CPU})"))
            ),
        ),
        (
            "merge of one series, top",
            format!(
                "/api/v1/query?format=top&{window}&query={}",
                q(&format!("merge({CPU}{{instance=\"i-3\"}})"))
            ),
        ),
        (
            "merge by job, pprof",
            format!(
                "/api/v1/query?format=pprof&{window}&query={}",
                q(&format!("merge by (job) ({CPU})"))
            ),
        ),
        (
            "query_range sum by instance",
            format!(
                "/api/v1/query_range?{window}&step=30&query={}",
                q(&format!("sum by (instance) ({CPU})"))
            ),
        ),
        (
            "query_range topk 5",
            format!(
                "/api/v1/query_range?{window}&step=30&query={}",
                q(&format!("topk(5, {CPU})"))
            ),
        ),
        (
            "series",
            format!("/api/v1/series?{window}&match[]={}", q("{job=\"bench\"}")),
        ),
    ];
    let runs = 20;
    println!(
        "  {:<38} {:>10} {:>10} {:>10} {:>10} {:>7} {:>14}",
        "query", "one p50", "one p90", "fan p50", "fan p90", "ratio", "fetched/query"
    );
    for (name, path) in &queries {
        // Warm both (page cache, allocator), then measure.
        let _ = timings(&one, path, 2);
        let _ = timings(&querier, path, 2);
        let (a, want) = timings(&one, path, runs);
        let fetched = metric(&querier, "parca_query_store_fetched_bytes_total");
        let (b, got) = timings(&querier, path, runs);
        let fetched =
            (metric(&querier, "parca_query_store_fetched_bytes_total") - fetched) / runs as f64;
        if !path.contains("format=pprof") {
            assert_eq!(got, want, "{name}: the querier's answer differs");
        }
        println!(
            "  {:<38} {:>8.2}ms {:>8.2}ms {:>8.2}ms {:>8.2}ms {:>6.2}x {:>11.0} B",
            name,
            quantile(&a, 0.5),
            quantile(&a, 0.9),
            quantile(&b, 0.5),
            quantile(&b, 0.9),
            quantile(&b, 0.5) / quantile(&a, 0.5),
            fetched
        );
    }
}
