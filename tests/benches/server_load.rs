//! Load benchmark of the server on loopback (issue 5's "figures to reach"): a release `parca`
//! scrapes 1,000 targets at a 10 s interval, every target serving real corpus profiles (Go and
//! Prometheus files of `tests/testdata/pprof/`) on Parca's five default endpoints, so 5,000
//! scrape loops and 500 scrapes a second. It reports whether every scrape was on time, the
//! server's CPU (from `/proc/PID/stat`) as a percentage of one core, and then the error count and
//! latency percentiles of 100 concurrent clients on `/api/v1/query` and `/api/v1/query_range`.
//! It prints figures; it asserts nothing about time.
//!
//! Run: `cargo bench -p parca-tests --bench server_load` (options after `--`: `--targets N`,
//! `--interval SECONDS`, `--intervals N`, `--clients N`, `--requests N` per client,
//! `--profiles cpu` for the CPU endpoint only). `PARCA_BIN` picks a server binary; otherwise a
//! release one is built.
//!
//! The load target is this process: one listener per target on its own 127.0.0.1 port, so
//! that every target is a distinct `__address__` (and `instance`) exactly as 1,000 real
//! programs would be, with no relabeling tricks. A thread per listener and per connection is
//! plenty for 500 requests a second, answered from the files in memory; connections are kept
//! alive, as Go's net/http does.

#[path = "../e2e/server_harness.rs"]
mod server_harness;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use server_harness::{Server, cpu_seconds, encode, http_get, parca_binary, poll, tests_dir};

/// Options from the command line.
struct Options {
    targets: usize,
    interval: Duration,
    intervals: u32,
    clients: usize,
    requests: usize,
    cpu_only: bool,
}

impl Options {
    fn parse() -> Options {
        let mut o = Options {
            targets: 1000,
            interval: Duration::from_secs(10),
            intervals: 3,
            clients: 100,
            requests: 50,
            cpu_only: false,
        };
        let args: Vec<String> = std::env::args().skip(1).collect();
        let mut i = 0;
        while i < args.len() {
            let value = || {
                args.get(i + 1)
                    .unwrap_or_else(|| panic!("{} needs a value", args[i]))
            };
            let number = || -> u64 {
                value()
                    .parse()
                    .unwrap_or_else(|_| panic!("{} takes a whole number", args[i]))
            };
            match args[i].as_str() {
                "--targets" => o.targets = number() as usize,
                "--interval" => o.interval = Duration::from_secs(number()),
                "--intervals" => o.intervals = number() as u32,
                "--clients" => o.clients = number() as usize,
                "--requests" => o.requests = number() as usize,
                "--profiles" => o.cpu_only = value() == "cpu",
                // cargo bench passes `--bench`; filters mean nothing here.
                _ => {
                    i += 1;
                    continue;
                }
            }
            i += 2;
        }
        o
    }
}

/// The profiles one target serves, by request path.
type Files = BTreeMap<&'static str, Arc<Vec<u8>>>;

/// Go's and Prometheus' real profiles from the corpus, one set per kind of target.
fn corpus_sets() -> Vec<Files> {
    let dir = tests_dir().join("testdata/pprof");
    let read =
        |f: &str| Arc::new(std::fs::read(dir.join(f)).unwrap_or_else(|e| panic!("{f}: {e}")));
    ["go/go", "prometheus/prometheus"]
        .iter()
        .map(|prefix| {
            [
                ("/debug/pprof/allocs", "allocs"),
                ("/debug/pprof/block", "block"),
                ("/debug/pprof/mutex", "mutex"),
                ("/debug/pprof/goroutine", "goroutine"),
                ("/debug/pprof/profile", "cpu"),
            ]
            .into_iter()
            .map(|(path, kind)| (path, read(&format!("{prefix}-{kind}.pb.gz"))))
            .collect()
        })
        .collect()
}

/// Serves one keep-alive connection: GET requests for the files, 404 for anything else.
fn serve_connection(stream: TcpStream, files: &Files) {
    let Ok(write_half) = stream.try_clone() else {
        return;
    };
    let mut writer = write_half;
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line).map_or(true, |n| n == 0) {
            return;
        }
        let path = line
            .split_whitespace()
            .nth(1)
            .unwrap_or("/")
            .split('?')
            .next()
            .unwrap_or("/")
            .to_owned();
        let mut header = String::new();
        loop {
            header.clear();
            if reader.read_line(&mut header).map_or(true, |n| n == 0) {
                return;
            }
            if header.trim_end().is_empty() {
                break;
            }
        }
        let written = match files.get(path.as_str()) {
            Some(body) => write!(
                writer,
                "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: {}\r\n\r\n",
                body.len()
            )
            .and_then(|()| writer.write_all(body)),
            None => writer.write_all(
                b"HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nContent-Length: 10\r\n\r\nnot found\n",
            ),
        };
        if written.is_err() {
            return;
        }
    }
}

/// Starts `n` targets, each on its own port, and returns their addresses.
fn start_load_target(n: usize, sets: &[Files]) -> Vec<SocketAddr> {
    let mut addresses = Vec::with_capacity(n);
    for i in 0..n {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a target port");
        addresses.push(listener.local_addr().expect("addr"));
        let files = sets[i % sets.len()].clone();
        std::thread::Builder::new()
            .stack_size(64 << 10)
            .spawn(move || {
                for stream in listener.incoming().flatten() {
                    let files = files.clone();
                    let _ = std::thread::Builder::new()
                        .stack_size(64 << 10)
                        .spawn(move || serve_connection(stream, &files));
                }
            })
            .expect("spawn a listener thread");
    }
    addresses
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs_f64()
}

fn parse_time(text: &str) -> Option<f64> {
    let t: jiff::Timestamp = text.parse().ok()?;
    Some(t.as_nanosecond() as f64 / 1e9)
}

/// `parca_scrapes_total` summed by result.
fn scrapes_by_result(server: &Server) -> BTreeMap<String, u64> {
    let text = server.get("/metrics").expect("/metrics").text();
    let mut out = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| l.starts_with("parca_scrapes_total{"))
    {
        let result = line
            .split("result=\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .unwrap_or("?")
            .to_owned();
        let value: u64 = line
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        *out.entry(result).or_insert(0) += value;
    }
    out
}

/// One look at `/api/v1/targets`: per endpoint (instance, profile), its last scrape time,
/// health and duration.
struct Snapshot {
    at: f64,
    endpoints: BTreeMap<(String, String), (f64, bool, f64)>,
}

fn snapshot(server: &Server) -> Snapshot {
    let data = server.api("/api/v1/targets").expect("/api/v1/targets");
    let at = unix_now();
    let mut endpoints = BTreeMap::new();
    for target in data["activeTargets"].as_array().expect("activeTargets") {
        let instance = target["labels"]["instance"].as_str().unwrap_or_default();
        for p in target["profiles"].as_array().expect("profiles") {
            let last = p["lastScrape"].as_str().and_then(parse_time).unwrap_or(0.0);
            endpoints.insert(
                (
                    instance.to_owned(),
                    p["name"].as_str().unwrap_or_default().to_owned(),
                ),
                (
                    last,
                    p["health"] == "up",
                    p["lastScrapeDuration"].as_f64().unwrap_or(0.0),
                ),
            );
        }
    }
    Snapshot { at, endpoints }
}

/// The `q`-quantile of sorted values.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

/// What the scrapes did over a window of snapshots one interval apart.
struct ScrapeFigures {
    endpoints: usize,
    on_time: usize,
    late_or_missed: usize,
    down: usize,
    durations: Vec<f64>,
}

/// An endpoint is on time in a window when, at every snapshot, it is up, its last scrape is
/// less than one interval (plus 1 s for the scrape itself) old, and every last scrape falls on
/// the same phase of the interval (within 0.5 s).
fn scrape_figures(snapshots: &[Snapshot], interval: f64) -> ScrapeFigures {
    let mut figures = ScrapeFigures {
        endpoints: 0,
        on_time: 0,
        late_or_missed: 0,
        down: 0,
        durations: Vec::new(),
    };
    let Some(last) = snapshots.last() else {
        return figures;
    };
    for key in last.endpoints.keys() {
        figures.endpoints += 1;
        let mut ok = true;
        let mut up = true;
        let mut phase0 = None;
        for s in snapshots {
            let Some(&(at, healthy, duration)) = s.endpoints.get(key) else {
                ok = false;
                continue;
            };
            figures.durations.push(duration);
            up &= healthy;
            if s.at - at > interval + 1.0 {
                ok = false;
            }
            let phase = at.rem_euclid(interval);
            let p0 = *phase0.get_or_insert(phase);
            let off = (phase - p0).rem_euclid(interval);
            if off.min(interval - off) > 0.5 {
                ok = false;
            }
        }
        if !up {
            figures.down += 1;
        } else if ok {
            figures.on_time += 1;
        } else {
            figures.late_or_missed += 1;
        }
    }
    figures.durations.sort_by(f64::total_cmp);
    figures
}

/// Watches the scrapes for `n` intervals: snapshots one interval apart, CPU and scrape counts.
fn watch(server: &Server, o: &Options, label: &str) {
    let interval = o.interval.as_secs_f64();
    let pid = server.process.pid();
    let cpu0 = cpu_seconds(pid);
    let count0 = scrapes_by_result(server);
    let t0 = Instant::now();
    let mut snapshots = vec![snapshot(server)];
    let mut per_interval = Vec::new();
    let (mut cpu_at, mut t_at) = (cpu0, Instant::now());
    for k in 1..=o.intervals {
        let next = o.interval * k;
        if let Some(wait) = next.checked_sub(t0.elapsed()) {
            std::thread::sleep(wait);
        }
        let (cpu_now, t_now) = (cpu_seconds(pid), Instant::now());
        per_interval.push(format!(
            "{:.1}",
            100.0 * (cpu_now - cpu_at) / (t_now - t_at).as_secs_f64()
        ));
        (cpu_at, t_at) = (cpu_now, t_now);
        snapshots.push(snapshot(server));
    }
    let elapsed = t0.elapsed().as_secs_f64();
    let cpu = cpu_seconds(pid) - cpu0;
    let count1 = scrapes_by_result(server);
    let done = count1.values().sum::<u64>() - count0.values().sum::<u64>();
    let failed: u64 = count1
        .iter()
        .filter(|(r, _)| *r != "success")
        .map(|(r, v)| v - count0.get(r).copied().unwrap_or(0))
        .sum();
    let f = scrape_figures(&snapshots, interval);
    let expected = f.endpoints as f64 * elapsed / interval;
    report(&format!(
        "{label}: server CPU {:.1}% of one core over {elapsed:.1} s (per interval: {}%)",
        100.0 * cpu / elapsed,
        per_interval.join("%, ")
    ));
    report(&format!(
        "{label}: scrapes {done} done, {expected:.0} expected ({:.1}%), {failed} failed; \
         endpoints on time at every look: {}/{} (late or missed: {}, down: {})",
        100.0 * done as f64 / expected,
        f.on_time,
        f.endpoints,
        f.late_or_missed,
        f.down
    ));
    report(&format!(
        "{label}: scrape duration p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        1e3 * quantile(&f.durations, 0.5),
        1e3 * quantile(&f.durations, 0.99),
        1e3 * f.durations.last().copied().unwrap_or(f64::NAN)
    ));
}

/// `clients` threads, each sending `requests` queries (alternately `/api/v1/query` and
/// `/api/v1/query_range` over one target), with latencies and errors per endpoint.
fn query_load(server: &Server, o: &Options, instances: &[SocketAddr]) {
    let addr = server.addr;
    let profile_type = "process_cpu:samples:count:cpu:nanoseconds:delta";
    let end = unix_now();
    let start = end - 2.0 * 60.0;
    let pid = server.process.pid();
    let cpu0 = cpu_seconds(pid);
    let t0 = Instant::now();
    let handles: Vec<_> = (0..o.clients)
        .map(|c| {
            let instances = instances.to_vec();
            let requests = o.requests;
            std::thread::spawn(move || {
                let mut out: Vec<(&'static str, f64, Option<String>)> = Vec::new();
                for r in 0..requests {
                    let instance = instances[(c * 7919 + r * 104_729) % instances.len()];
                    let selector = format!("{profile_type}{{instance=\"{instance}\"}}");
                    let (endpoint, path) = if r % 2 == 0 {
                        (
                            "query",
                            format!(
                                "/api/v1/query?query={}&start={start:.3}&end={end:.3}",
                                encode(&format!("merge({selector})"))
                            ),
                        )
                    } else {
                        (
                            "query_range",
                            format!(
                                "/api/v1/query_range?query={}&start={start:.3}&end={end:.3}&step=10s",
                                encode(&selector)
                            ),
                        )
                    };
                    let began = Instant::now();
                    let result = http_get(addr, &path, Duration::from_secs(60));
                    let took = began.elapsed().as_secs_f64();
                    let error = match result {
                        Ok(r) if r.status == 200 => None,
                        Ok(r) => Some(format!("HTTP {}: {}", r.status, r.text().chars().take(200).collect::<String>())),
                        Err(e) => Some(e),
                    };
                    out.push((endpoint, took, error));
                }
                out
            })
        })
        .collect();
    let mut by_endpoint: BTreeMap<&str, (Vec<f64>, Vec<String>)> = BTreeMap::new();
    for h in handles {
        for (endpoint, took, error) in h.join().expect("client thread") {
            let entry = by_endpoint.entry(endpoint).or_default();
            entry.0.push(took);
            entry.1.extend(error);
        }
    }
    let elapsed = t0.elapsed().as_secs_f64();
    let cpu = cpu_seconds(pid) - cpu0;
    for (endpoint, (mut latencies, errors)) in by_endpoint {
        latencies.sort_by(f64::total_cmp);
        report(&format!(
            "{} clients on /api/v1/{endpoint}: {} requests, {} errors, latency p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
            o.clients,
            latencies.len(),
            errors.len(),
            1e3 * quantile(&latencies, 0.5),
            1e3 * quantile(&latencies, 0.99),
            1e3 * latencies.last().copied().unwrap_or(f64::NAN)
        ));
        if let Some(first) = errors.first() {
            report(&format!("  first error: {first}"));
        }
    }
    report(&format!(
        "queries: {:.0} requests/s; server CPU {:.1}% of one core over {elapsed:.1} s (scraping goes on)",
        (o.clients * o.requests) as f64 / elapsed,
        100.0 * cpu / elapsed
    ));
}

#[allow(clippy::print_stdout)]
fn report(line: &str) {
    println!("{line}");
}

fn main() {
    let o = Options::parse();
    let sets = corpus_sets();
    let addresses = start_load_target(o.targets, &sets);
    let binary = parca_binary(true);
    let disabled = if o.cpu_only {
        "    profiling_config:\n      pprof_config:\n        memory: {enabled: false}\n        block: {enabled: false}\n        mutex: {enabled: false}\n        goroutine: {enabled: false}\n"
    } else {
        ""
    };
    let targets: Vec<String> = addresses.iter().map(|a| format!("\"{a}\"")).collect();
    let server = Server::start(&binary, &[], |_| {
        format!(
            "scrape_configs:\n  - job_name: load\n    scrape_interval: {}s\n    static_configs:\n      - targets: [{}]\n{disabled}",
            o.interval.as_secs(),
            targets.join(", ")
        )
    });
    let endpoints_per_target = if o.cpu_only { 1 } else { 5 };
    report(&format!(
        "server_load: {} targets x {endpoints_per_target} profiles every {} s ({:.0} scrapes/s), server {}",
        o.targets,
        o.interval.as_secs(),
        (o.targets * endpoints_per_target) as f64 / o.interval.as_secs_f64(),
        binary.display()
    ));
    // Warm-up: every loop starts at its own phase, so the first interval is still filling in.
    poll(
        "every endpoint to be scraped once",
        o.interval * 3,
        Duration::from_millis(500),
        || {
            let s = snapshot(&server);
            let pending = s.endpoints.values().filter(|(at, _, _)| *at == 0.0).count();
            if pending == 0 && s.endpoints.len() == o.targets * endpoints_per_target {
                Ok(())
            } else {
                Err(format!(
                    "{pending} of {} not scraped yet",
                    s.endpoints.len()
                ))
            }
        },
    );
    watch(&server, &o, "scraping");
    query_load(&server, &o, &addresses);
    let status = server.api("/api/v1/status/tsdb").expect("status");
    report(&format!("store: {status}"));
}
