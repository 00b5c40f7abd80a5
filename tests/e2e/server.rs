//! The server against real targets, end to end: one `parca` scrapes a Go program using
//! net/http/pprof (`tests/targets/go`, built with Debian's Go), Debian's `prometheus`, a Rust
//! program using the `pprof` crate (`tests/targets/rust`), a Python program serving pypprof
//! (`tests/targets/python`) and itself, plus three broken targets (a closed port, one that
//! never answers, one that answers junk). After a few intervals the broken ones are `down` with
//! a clear `lastError`, the real ones were scraped on their schedule all along, and the API's
//! series, labels, `query_range` and `query` in every format show each target's own hot
//! functions.
//!
//! Go, Python and prometheus come from `tests/tools/targets.sh`; a missing one is skipped with
//! a message (the rest still run), and is a failure under `PARCA_REQUIRE_TARGETS=1`.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use crate::server_harness::{
    Process, Server, encode, free_port, http_get, outside_target, parca_binary, poll, skip,
    tests_dir,
};

/// Every job's scrape interval. Short, so that a few intervals pass quickly; the CPU profile
/// (`process_cpu`, a delta endpoint) is asked for `seconds=2`.
const INTERVAL: Duration = Duration::from_secs(3);

/// How many successful scrapes of every endpoint of a real target the test waits for.
const SCRAPES: usize = 4;

/// One job of the test's parca.yaml and what its data must show.
struct Job {
    /// `job_name`.
    name: &'static str,
    /// Its one target.
    address: String,
    /// Profiles turned off (the target does not serve them).
    disabled: &'static [&'static str],
    /// Substrings of function names that the CPU profile must contain: the target's own code.
    hot: &'static [&'static str],
}

/// `disabled` of a target that serves every default profile.
const ALL_PROFILES: &[&str] = &[];

/// `disabled` of a target that serves only the CPU profile.
const CPU_ONLY: &[&str] = &["memory", "block", "mutex", "goroutine"];

/// The broken jobs: a closed port, a target that never answers, one that answers junk.
const BROKEN: [&str; 3] = ["down", "hang", "junk"];

/// A real program serving pprof, started for the test on a free port (`{port}` in its
/// arguments), once it answers 200 on `ready_path`.
pub(crate) fn start_target(
    name: &str,
    command: Command,
    ready_path: &str,
    dir: &Path,
) -> (Process, String) {
    start_target_with(name, command, ready_path, dir, |_| {})
}

/// [`start_target`], running `prepare` with the port first.
fn start_target_with(
    name: &str,
    command: Command,
    ready_path: &str,
    dir: &Path,
    prepare: impl FnOnce(u16),
) -> (Process, String) {
    let port = free_port();
    prepare(port);
    let address = format!("127.0.0.1:{port}");
    let log = dir.join(format!("{name}.log"));
    let mut process = Process::start(name, command_with_port(command, port), &log);
    let addr: SocketAddr = address.parse().expect("address");
    poll(
        &format!("{name} to serve {ready_path}"),
        Duration::from_secs(60),
        Duration::from_millis(100),
        || {
            process.assert_running();
            match http_get(addr, ready_path, Duration::from_secs(10)) {
                Ok(r) if r.status == 200 => Ok(()),
                Ok(r) => Err(format!("HTTP {}", r.status)),
                Err(e) => Err(e),
            }
        },
    );
    (process, address)
}

/// Replaces the `{port}` placeholder in a command's arguments.
fn command_with_port(command: Command, port: u16) -> Command {
    let mut out = Command::new(command.get_program());
    for arg in command.get_args() {
        out.arg(arg.to_string_lossy().replace("{port}", &port.to_string()));
    }
    if let Some(dir) = command.get_current_dir() {
        out.current_dir(dir);
    }
    out
}

/// A broken target served from a thread of the test: it accepts connections and either never
/// answers (`hang`) or answers 200 with a body that is no profile (`junk`).
struct BrokenTarget {
    address: String,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl BrokenTarget {
    fn start(answer_junk: bool) -> BrokenTarget {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.set_nonblocking(true).expect("nonblocking");
        let address = listener.local_addr().expect("addr").to_string();
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            // Held open, never answered (hang), until the test ends.
            let mut held: Vec<TcpStream> = Vec::new();
            while !stop2.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((mut stream, _)) if answer_junk => {
                        let _ = stream.set_nonblocking(false);
                        let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
                        let mut buf = [0u8; 4096];
                        let _ = stream.read(&mut buf);
                        let body = "<html><body>this is not a profile</body></html>\n";
                        let _ = write!(
                            stream,
                            "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                            body.len()
                        );
                    }
                    Ok((stream, _)) => held.push(stream),
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        });
        BrokenTarget {
            address,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for BrokenTarget {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The test's parca.yaml.
fn config(jobs: &[Job], down: &str, hang: &str, junk: &str) -> String {
    let mut yaml = format!(
        "global:\n  scrape_interval: {}s\nscrape_configs:\n",
        INTERVAL.as_secs()
    );
    for job in jobs {
        yaml.push_str(&format!(
            "  - job_name: {}\n    static_configs: [{{targets: [\"{}\"]}}]\n",
            job.name, job.address
        ));
        if !job.disabled.is_empty() {
            yaml.push_str("    profiling_config:\n      pprof_config:\n");
            for profile in job.disabled {
                yaml.push_str(&format!("        {profile}: {{enabled: false}}\n"));
            }
        }
    }
    // The broken ones: only `memory` (a snapshot endpoint), so that a 1 s timeout is allowed.
    for (name, address, timeout) in [
        ("down", down, None),
        ("hang", hang, Some("1s")),
        ("junk", junk, None),
    ] {
        yaml.push_str(&format!(
            "  - job_name: {name}\n    static_configs: [{{targets: [\"{address}\"]}}]\n"
        ));
        if let Some(timeout) = timeout {
            yaml.push_str(&format!("    scrape_timeout: {timeout}\n"));
        }
        yaml.push_str(
            "    profiling_config:\n      pprof_config:\n        block: {enabled: false}\n        mutex: {enabled: false}\n        goroutine: {enabled: false}\n        process_cpu: {enabled: false}\n",
        );
    }
    yaml
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs_f64()
}

/// Seconds since the epoch of an RFC 3339 time.
fn parse_time(text: &str) -> Option<f64> {
    let t: jiff::Timestamp = text.parse().ok()?;
    Some(t.as_nanosecond() as f64 / 1e9)
}

/// What the test saw of one profile endpoint over the polls of `/api/v1/targets`.
#[derive(Debug, Default)]
struct Seen {
    /// Distinct `lastScrape` times (seconds since the epoch), in order.
    scrapes: Vec<f64>,
    /// Health, error and duration (seconds) of each.
    outcomes: Vec<(String, String, f64)>,
}

/// Polls `/api/v1/targets` until every endpoint of the real jobs has `SCRAPES` successful scrapes
/// and the broken ones have failed at least twice; returns what it saw and when it polled.
fn watch_targets(
    server: &mut Server,
    real: &[&str],
) -> (BTreeMap<(String, String), Seen>, Vec<f64>) {
    let mut seen: BTreeMap<(String, String), Seen> = BTreeMap::new();
    let mut polls = Vec::new();
    poll(
        "every endpoint to be scraped a few times",
        INTERVAL * (SCRAPES as u32 + 8),
        Duration::from_millis(200),
        || {
            server.process.assert_running();
            let data = server.api("/api/v1/targets")?;
            polls.push(unix_now());
            for target in data["activeTargets"].as_array().ok_or("no activeTargets")? {
                let job = target["scrapePool"].as_str().unwrap_or_default().to_owned();
                for p in target["profiles"].as_array().ok_or("no profiles[]")? {
                    let name = p["name"].as_str().unwrap_or_default().to_owned();
                    let Some(at) = p["lastScrape"].as_str().and_then(parse_time) else {
                        continue;
                    };
                    let entry = seen.entry((job.clone(), name)).or_default();
                    if entry.scrapes.last() != Some(&at) {
                        entry.scrapes.push(at);
                        entry.outcomes.push((
                            p["health"].as_str().unwrap_or_default().to_owned(),
                            p["lastError"].as_str().unwrap_or_default().to_owned(),
                            p["lastScrapeDuration"].as_f64().unwrap_or(0.0),
                        ));
                    }
                }
            }
            let mut waiting = Vec::new();
            for ((job, profile), s) in &seen {
                let enough = if real.contains(&job.as_str()) {
                    s.outcomes.iter().filter(|(h, _, _)| h == "up").count() >= SCRAPES
                } else {
                    s.scrapes.len() >= 2
                };
                if !enough {
                    waiting.push(format!("{job}/{profile}: {:?}", s.outcomes.last()));
                }
            }
            for job in real.iter().chain(&BROKEN) {
                if !seen.keys().any(|(j, _)| j == job) {
                    waiting.push(format!("{job}: not scraped yet"));
                }
            }
            if waiting.is_empty() {
                Ok(())
            } else {
                Err(waiting.join("; "))
            }
        },
    );
    (seen, polls)
}

/// What is wrong with one endpoint's scrapes if its loop's phase is that of `phase` (a
/// `lastScrape` time): a scrape off the phase that its predecessor's overrun does not explain,
/// or a tick with no scrape while the test was polling often enough to see it.
fn phase_faults(s: &Seen, phase: f64, interval: f64, slack: f64, polls: &[f64]) -> Vec<String> {
    // A difference of times as the nearest offset from a phase point, in (-interval/2, interval/2].
    let signed = |d: f64| {
        let d = d.rem_euclid(interval);
        if d > interval / 2.0 { d - interval } else { d }
    };
    let mut faults = Vec::new();
    for (i, &at) in s.scrapes.iter().enumerate() {
        let late = signed(at - phase);
        let previous_end = (i > 0).then(|| s.scrapes[i - 1] + s.outcomes[i - 1].2);
        if late.abs() <= slack {
            // On its phase.
        } else if previous_end.is_some_and(|end| (at - end).abs() <= slack) {
            // Started as the previous scrape ended: that one overran its interval, and the
            // tick it held up fired late (tokio's `Skip`, like Go's ticker in Prometheus). The
            // loop comes back to its phase once a scrape ends before the next tick.
        } else {
            faults.push(format!("scrape at {at:.3} is {late:+.3} s off its phase"));
        }
        if let Some(end) = previous_end
            && at - end > interval + slack
        {
            // Missed a tick, unless the test itself did not poll for a while then.
            let blind = polls
                .windows(2)
                .filter(|p| p[1] > s.scrapes[i - 1] && p[0] < at)
                .any(|p| p[1] - p[0] > interval / 2.0);
            if !blind {
                faults.push(format!(
                    "no scrape between {:.3} and {at:.3}",
                    s.scrapes[i - 1]
                ));
            }
        }
    }
    faults
}

/// Every scrape of every real endpoint succeeded and started on its loop's phase (within a
/// slack for a busy machine) or, after a scrape that outlasted its interval, right as that one
/// ended (a loop never overlaps itself); and no tick went without a scrape where the test
/// polled often enough to see every one.
fn check_schedule(seen: &BTreeMap<(String, String), Seen>, real: &[&str], polls: &[f64]) {
    let interval = INTERVAL.as_secs_f64();
    // A tick may run late when the machine is busy, never early.
    let slack = 0.5;
    let mut faults = Vec::new();
    for ((job, profile), s) in seen {
        if !real.contains(&job.as_str()) {
            continue;
        }
        for (at, (health, error, _)) in s.scrapes.iter().zip(&s.outcomes) {
            if health != "up" {
                faults.push(format!("{job}/{profile} at {at:.3}: {health}: {error}"));
            }
        }
        // The loop's phase is not known: take the one of the scrapes that explains the
        // others best (each on it, or started late because its predecessor overran).
        let endpoint_faults = s
            .scrapes
            .iter()
            .map(|&phase| phase_faults(s, phase, interval, slack, polls))
            .min_by_key(Vec::len)
            .unwrap_or_default();
        if !endpoint_faults.is_empty() {
            let history: Vec<String> = s
                .scrapes
                .iter()
                .zip(&s.outcomes)
                .map(|(at, (_, _, took))| format!("{at:.3} (took {took:.3} s)"))
                .collect();
            faults.push(format!(
                "{job}/{profile}: {}; its scrapes: {}",
                endpoint_faults.join("; "),
                history.join(", ")
            ));
        }
    }
    assert!(
        faults.is_empty(),
        "scrapes of the real targets were not on time:\n{}",
        faults.join("\n")
    );
}

/// Function names with a value in a `format=json` flame graph.
///
/// The tree nests two JSON levels per frame, and the server's own stacks are deeper than
/// serde_json's recursion limit of 128 allows (its `unbounded_depth` feature would be turned
/// on for the whole workspace): so this reads the answer as a stream of tokens, pairing each
/// node's `name` with the `value` that follows it, and checks that brackets balance.
fn json_functions(body: &[u8]) -> Result<BTreeSet<String>, String> {
    let text = std::str::from_utf8(body).map_err(|e| format!("not UTF-8: {e}"))?;
    if !text.starts_with(r#"{"status":"success","data":{"#) {
        return Err(format!("not a success envelope: {}", truncate(text)));
    }
    let mut names = BTreeSet::new();
    let (mut depth, mut key, mut name) = (0i64, String::new(), None::<String>);
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match c {
            '{' | '[' => depth += 1,
            '}' | ']' => depth -= 1,
            '"' => {
                // The string's end: the next quote not escaped.
                let mut end = None;
                let mut escaped = false;
                for (j, d) in chars.by_ref() {
                    match d {
                        '\\' if !escaped => escaped = true,
                        '"' if !escaped => {
                            end = Some(j);
                            break;
                        }
                        _ => escaped = false,
                    }
                }
                let end = end.ok_or("unterminated string")?;
                let string: String = serde_json::from_str(&text[i..=end])
                    .map_err(|e| format!("bad string at byte {i}: {e}"))?;
                while chars.peek().is_some_and(|(_, d)| d.is_whitespace()) {
                    chars.next();
                }
                if chars.peek().is_some_and(|(_, d)| *d == ':') {
                    key = string;
                } else if key == "name" {
                    name = Some(string);
                }
            }
            '-' | '0'..='9' if key == "value" => {
                let mut end = i + 1;
                while let Some((j, _)) = chars.next_if(|(_, d)| d.is_ascii_digit()) {
                    end = j + 1;
                }
                let value: i64 = text[i..end]
                    .parse()
                    .map_err(|_| format!("bad value at byte {i}"))?;
                if let Some(n) = name.take()
                    && value != 0
                {
                    names.insert(n);
                }
                key.clear();
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(format!(
            "brackets do not balance (depth {depth} at the end)"
        ));
    }
    if names.is_empty() {
        return Err(format!("no node with a value in {}", truncate(text)));
    }
    Ok(names)
}

/// Function names of a `format=pprof` answer, decoded with our own decoder.
fn pprof_functions(body: &[u8]) -> Result<BTreeSet<String>, String> {
    let profiles = parca_profile::decode(body, &parca_pprof::DecodeOptions::default())
        .map_err(|e| format!("the pprof answer does not decode: {e}"))?;
    let profile = profiles
        .first()
        .ok_or("the pprof answer has no sample type")?;
    if profile.total() == 0 {
        return Err("the pprof answer has no samples".into());
    }
    Ok(parca_profile::TopTable::build(profile)
        .rows
        .into_iter()
        .filter(|r| r.cum != 0)
        .map(|r| r.name)
        .collect())
}

/// Function names of a `format=top` answer.
fn top_functions(body: &[u8]) -> Result<BTreeSet<String>, String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("not JSON: {e}"))?;
    let rows = v["data"]["rows"]
        .as_array()
        .ok_or_else(|| format!("no data.rows in {}", truncate(&v.to_string())))?;
    Ok(rows
        .iter()
        .filter(|r| r["cum"].as_i64().unwrap_or(0) != 0)
        .filter_map(|r| r["name"].as_str().map(str::to_owned))
        .collect())
}

/// Frames of a `format=folded` answer (`a;b;c 42` lines).
fn folded_functions(body: &[u8]) -> Result<BTreeSet<String>, String> {
    let text = String::from_utf8(body.to_vec()).map_err(|e| format!("not UTF-8: {e}"))?;
    let mut names = BTreeSet::new();
    for line in text.lines() {
        let (stack, value) = line
            .rsplit_once(' ')
            .ok_or_else(|| format!("not a folded line: {line:?}"))?;
        value
            .parse::<i64>()
            .map_err(|_| format!("no value at the end of {line:?}"))?;
        names.extend(stack.split(';').map(str::to_owned));
    }
    Ok(names)
}

fn truncate(s: &str) -> String {
    s.chars().take(300).collect()
}

/// The server's answers to queries about one job.
struct Api<'a> {
    server: &'a Server,
    start: f64,
}

impl Api<'_> {
    fn window(&self) -> String {
        format!("start={:.3}&end={:.3}", self.start, unix_now() + 1.0)
    }

    /// Profile types (`__name__`) of a job's series.
    fn types(&self, job: &str) -> Result<BTreeSet<String>, String> {
        let selector = format!("{{__name__=~\".+\", job=\"{job}\"}}");
        let data = self.server.api(&format!(
            "/api/v1/series?match[]={}&{}",
            encode(&selector),
            self.window()
        ))?;
        Ok(data
            .as_array()
            .ok_or("series is not a list")?
            .iter()
            .filter_map(|s| s["__name__"].as_str().map(str::to_owned))
            .collect())
    }

    /// The CPU profile type of a job that counts samples (`process_cpu:samples:count:…`).
    fn cpu_type(&self, job: &str) -> Result<String, String> {
        let types = self.types(job)?;
        types
            .iter()
            .find(|t| t.starts_with("process_cpu:") && t.split(':').nth(2) == Some("count"))
            .cloned()
            .ok_or_else(|| {
                format!("job `{job}` has no process_cpu series yet; its types: {types:?}")
            })
    }

    /// `/api/v1/query` of `merge(TYPE{job="…"})` over the test's window, in `format`.
    fn query(&self, profile_type: &str, job: &str, format: &str) -> Result<Vec<u8>, String> {
        let query = format!("merge({profile_type}{{job=\"{job}\"}})");
        let r = self.server.get(&format!(
            "/api/v1/query?query={}&{}&format={format}",
            encode(&query),
            self.window()
        ))?;
        if r.status != 200 {
            return Err(format!(
                "{query} format={format}: HTTP {}: {}",
                r.status,
                truncate(&r.text())
            ));
        }
        let expected_type = match format {
            "pprof" => "application/vnd.google.protobuf+gzip",
            "svg" => "image/svg+xml",
            "folded" => "text/plain",
            _ => "application/json",
        };
        let content_type = r.header("content-type").unwrap_or_default();
        if !content_type.starts_with(expected_type) {
            return Err(format!(
                "format={format} answered Content-Type {content_type}"
            ));
        }
        Ok(r.body)
    }

    /// The names of functions with a value in `merge(TYPE{job})`, as the `format` shows them
    /// (for `svg`, the picture's text).
    fn functions(
        &self,
        profile_type: &str,
        job: &str,
        format: &str,
    ) -> Result<BTreeSet<String>, String> {
        let body = self.query(profile_type, job, format)?;
        match format {
            "json" => json_functions(&body),
            "pprof" => pprof_functions(&body),
            "top" => top_functions(&body),
            "folded" => folded_functions(&body),
            "svg" => {
                let text = String::from_utf8(body).map_err(|e| format!("svg not UTF-8: {e}"))?;
                if !text.contains("<svg") {
                    return Err(format!("not an SVG: {}", truncate(&text)));
                }
                Ok(BTreeSet::from([text]))
            }
            _ => unreachable!("formats are listed in the test"),
        }
    }
}

/// Which of `hot` no name in `names` contains.
fn missing<'h>(names: &BTreeSet<String>, hot: &[&'h str]) -> Vec<&'h str> {
    hot.iter()
        .filter(|h| !names.iter().any(|n| n.contains(*h)))
        .copied()
        .collect()
}

/// Starts the real targets that can be had: (a) Go, (b) prometheus, (c) Rust, (d) Python.
fn start_real_targets(dir: &Path) -> (Vec<Process>, Vec<Job>) {
    let mut processes = Vec::new();
    let mut jobs = Vec::new();
    // (a) Go with net/http/pprof, built with Debian's Go.
    match outside_target("go") {
        Ok(go) => {
            let mut command = Command::new(go);
            command.args(["-addr", "127.0.0.1:{port}", "-duty", "0.05"]);
            let (process, address) = start_target("go-target", command, "/debug/pprof/", dir);
            processes.push(process);
            jobs.push(Job {
                name: "go",
                address,
                disabled: ALL_PROFILES,
                hot: &["main.goHotHash", "main.goHotSort"],
            });
        }
        Err(why) => skip("the Go target", &why),
    }
    // (b) Debian's prometheus, scraping itself five times a second so that its CPU profile
    // shows its own scrape loop.
    match outside_target("prometheus") {
        Ok(prometheus) => {
            let home = dir.join("prometheus");
            let config = home.join("prometheus.yml");
            std::fs::create_dir_all(home.join("data")).expect("mkdir");
            let mut command = Command::new(prometheus);
            command
                .arg(format!("--config.file={}", config.display()))
                .arg(format!(
                    "--storage.tsdb.path={}",
                    home.join("data").display()
                ))
                .arg("--web.listen-address=127.0.0.1:{port}")
                .arg("--log.level=warn");
            // Its config names its own port: written once the port is known.
            let (process, address) = start_target_with(
                "prometheus",
                command,
                "/-/ready",
                dir,
                |port| {
                    std::fs::write(
                        &config,
                        format!(
                            "global: {{scrape_interval: 200ms}}\nscrape_configs:\n  - job_name: self\n    static_configs: [{{targets: [\"127.0.0.1:{port}\"]}}]\n"
                        ),
                    )
                    .expect("write prometheus.yml");
                },
            );
            processes.push(process);
            jobs.push(Job {
                name: "prometheus",
                address,
                disabled: ALL_PROFILES,
                hot: &["github.com/prometheus/prometheus/scrape."],
            });
        }
        Err(why) => skip("Debian's prometheus", &why),
    }
    // (c) Rust with the pprof crate: a binary of this package.
    let mut command = Command::new(env!("CARGO_BIN_EXE_e2e-rust-target"));
    command.args(["--addr", "127.0.0.1:{port}", "--duty", "0.05"]);
    let (process, address) = start_target("rust-target", command, "/healthz", dir);
    processes.push(process);
    jobs.push(Job {
        name: "rust",
        address,
        disabled: CPU_ONLY,
        hot: &["rust_hot_fnv", "rust_hot_xorshift"],
    });
    // (d) Python with pypprof, in a venv with pinned versions.
    match outside_target("python") {
        Ok(python) => {
            let mut command = Command::new(python);
            command
                .arg(tests_dir().join("targets/python/app.py"))
                .args(["--port", "{port}", "--duty", "0.05"]);
            let (process, address) = start_target("python-target", command, "/debug/pprof/", dir);
            processes.push(process);
            jobs.push(Job {
                name: "python",
                address,
                disabled: &["memory", "block", "mutex"],
                hot: &["py_hot_fib", "py_hot_hash"],
            });
        }
        Err(why) => skip("the Python target", &why),
    }
    (processes, jobs)
}

/// The broken targets are down, each with an error that says what happened, and `/metrics`
/// counts their scrapes by that result.
fn check_broken(server: &Server, seen: &BTreeMap<(String, String), Seen>) {
    let metrics = server.get("/metrics").expect("metrics").text();
    for (job, expected, result) in [
        ("down", "refused", "error"),
        ("hang", "timed out", "timeout"),
        ("junk", "invalid profile", "error"),
    ] {
        let s = &seen[&(job.to_owned(), "memory".to_owned())];
        let (health, error, _) = s.outcomes.last().expect("scraped");
        assert_eq!(health, "down", "{job} is {health} ({error})");
        assert!(
            error.to_lowercase().contains(expected),
            "{job}'s lastError does not say `{expected}`: {error}"
        );
        assert!(
            metrics
                .lines()
                .any(|l| l.starts_with("parca_scrapes_total{")
                    && l.contains(&format!("job=\"{job}\""))
                    && l.contains(&format!("result=\"{result}\""))),
            "/metrics has no parca_scrapes_total of job {job} with result {result}"
        );
    }
}

/// A list of strings from a metadata endpoint.
fn strings(server: &Server, path: &str) -> BTreeSet<String> {
    let data = server.api(path).unwrap_or_else(|e| panic!("{e}"));
    serde_json::from_value(data).unwrap_or_else(|e| panic!("{path}: not a list of strings: {e}"))
}

/// Label names and values: every real job and none of the broken ones stored anything, every
/// target is an `instance`, and sample labels (Go's pprof.Do labels, pprof-rs' thread names)
/// became series labels.
fn check_labels(server: &Server, jobs: &[Job]) {
    let stored = strings(server, "/api/v1/label/job/values");
    let instances = strings(server, "/api/v1/label/instance/values");
    for job in jobs {
        assert!(
            stored.contains(job.name),
            "no series of job `{}`: {stored:?}",
            job.name
        );
        assert!(
            instances.contains(&job.address),
            "instance {} missing: {instances:?}",
            job.address
        );
    }
    for job in BROKEN {
        assert!(!stored.contains(job), "broken job `{job}` has series");
    }
    let names = strings(server, "/api/v1/labels");
    for name in ["__name__", "job", "instance", "thread"] {
        assert!(
            names.contains(name),
            "label `{name}` missing from {names:?}"
        );
    }
    if jobs.iter().any(|j| j.name == "go") {
        let workers = strings(server, "/api/v1/label/e2e_worker/values");
        assert!(
            workers.contains("hash") && workers.contains("sort"),
            "the Go target's pprof.Do labels are not series labels: {workers:?}"
        );
    }
}

/// Series and profile types: every enabled endpoint of every real job, and the server-side
/// deltas of cumulative Go profiles.
fn check_series(api: &Api, jobs: &[Job]) {
    for job in jobs {
        let types = api.types(job.name).expect("series");
        for profile in ["memory", "block", "mutex", "goroutine", "process_cpu"] {
            assert!(
                job.disabled.contains(&profile)
                    || types.iter().any(|t| t.starts_with(&format!("{profile}:"))),
                "job `{}` has no `{profile}` series: {types:?}",
                job.name
            );
        }
        if job.name == "go" {
            for t in [
                "memory:alloc_space:bytes:space:bytes:delta",
                "block:contentions:count:contentions:count:delta",
            ] {
                assert!(
                    types.contains(t),
                    "no server-side delta `{t}` for go: {types:?}"
                );
            }
        }
    }
    let profile_types = api
        .server
        .api("/api/v1/profile_types")
        .expect("profile_types");
    assert!(
        profile_types.as_array().is_some_and(|a| a
            .iter()
            .any(|t| t["name"] == "process_cpu" && t["delta"] == true)),
        "no process_cpu delta type in {profile_types}"
    );
}

/// `query_range`: totals per step of each job's CPU type, some of them non-zero.
fn check_query_range(api: &Api, jobs: &[Job]) {
    for job in jobs {
        let cpu = api.cpu_type(job.name).expect("a CPU type");
        let query = format!("{cpu}{{job=\"{}\"}}", job.name);
        let data = api
            .server
            .api(&format!(
                "/api/v1/query_range?query={}&{}&step=1s",
                encode(&query),
                api.window()
            ))
            .expect("query_range");
        assert_eq!(data["resultType"], "matrix");
        let points: Vec<f64> = data["result"]
            .as_array()
            .expect("result list")
            .iter()
            .flat_map(|s| s["values"].as_array().cloned().unwrap_or_default())
            .filter_map(|p| p[1].as_str().and_then(|v| v.parse().ok()))
            .collect();
        assert!(
            points.len() >= 2 && points.iter().any(|v| *v > 0.0),
            "query_range {query}: too little data: {data}"
        );
    }
}

/// `query`: each job's own hot functions in its CPU profile, in every format. CPU samples of
/// lightly loaded programs come in slowly: polls until they are there.
fn check_hot_functions(api: &Api, jobs: &[Job]) {
    for job in jobs {
        for format in ["json", "pprof", "top", "folded", "svg"] {
            poll(
                &format!("the hot functions of `{}` in format={format}", job.name),
                // A busy machine (CI builds beside the test) slows the targets' own work.
                INTERVAL * 20,
                Duration::from_millis(500),
                || {
                    let cpu = api.cpu_type(job.name)?;
                    let names = api.functions(&cpu, job.name, format)?;
                    let gone = missing(&names, job.hot);
                    if !gone.is_empty() {
                        let shown: Vec<&String> = names.iter().take(40).collect();
                        return Err(format!("{cpu}: no {gone:?} among {shown:?}"));
                    }
                    if format == "top" {
                        let found: Vec<&String> = names
                            .iter()
                            .filter(|n| job.hot.iter().any(|h| n.contains(h)))
                            .take(3)
                            .collect();
                        report(&format!("{} {cpu} shows {found:?}", job.name));
                    }
                    Ok(())
                },
            );
        }
    }
}

/// The Go target's other profiles name its own code too (allocations, block and mutex through
/// the server-side deltas), and prometheus' goroutines show its scrape loop.
fn check_other_profiles(api: &Api, jobs: &[Job]) {
    let mut checks = Vec::new();
    if jobs.iter().any(|j| j.name == "go") {
        checks.extend([
            (
                "go",
                "memory:alloc_space:bytes:space:bytes:delta",
                "main.goHotAlloc",
            ),
            (
                "go",
                "memory:inuse_space:bytes:space:bytes",
                "main.goHotAlloc",
            ),
            (
                "go",
                "mutex:delay:nanoseconds:contentions:count:delta",
                "main.goHotLock",
            ),
            (
                "go",
                "block:delay:nanoseconds:contentions:count:delta",
                "main.goHotChanWait",
            ),
            (
                "go",
                "goroutine:goroutine:count:goroutine:count",
                "main.goHotChanWait",
            ),
        ]);
    }
    if jobs.iter().any(|j| j.name == "prometheus") {
        checks.push((
            "prometheus",
            "goroutine:goroutine:count:goroutine:count",
            "github.com/prometheus/prometheus/scrape.",
        ));
    }
    for (job, profile_type, hot) in checks {
        poll(
            &format!("`{hot}` in {profile_type} of {job}"),
            INTERVAL * 5,
            Duration::from_millis(500),
            || {
                let names = api.functions(profile_type, job, "json")?;
                if missing(&names, &[hot]).is_empty() {
                    Ok(())
                } else {
                    Err(format!("not among {} functions", names.len()))
                }
            },
        );
    }
}

/// A line of the test's own report on stderr (shown with `--nocapture`).
fn report(line: &str) {
    #[allow(clippy::print_stderr)]
    {
        eprintln!("server e2e: {line}");
    }
}

#[test]
fn server_scrapes_real_targets_and_serves_their_profiles() {
    let _exclusive = crate::support::exclusive();
    let t0 = Instant::now();
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut processes, mut jobs) = start_real_targets(dir.path());

    // Broken targets: nothing listens on `down`; `hang` never answers; `junk` answers HTML.
    let down = format!("127.0.0.1:{}", free_port());
    let hang = BrokenTarget::start(false);
    let junk = BrokenTarget::start(true);

    // (e) The server itself, scraping its own address too.
    let binary = parca_binary(false);
    let mut server = Server::start(&binary, &[], |addr| {
        jobs.push(Job {
            name: "parca",
            address: addr.to_string(),
            disabled: CPU_ONLY,
            hot: &["parca_"],
        });
        config(&jobs, &down, &hang.address, &junk.address)
    });
    let started = unix_now();
    let real: Vec<&str> = jobs.iter().map(|j| j.name).collect();
    let (seen, polls) = watch_targets(&mut server, &real);
    for p in &mut processes {
        p.assert_running();
    }
    check_broken(&server, &seen);
    check_schedule(&seen, &real, &polls);

    let api = Api {
        server: &server,
        start: started - 1.0,
    };
    check_labels(&server, &jobs);
    check_series(&api, &jobs);
    check_query_range(&api, &jobs);
    check_hot_functions(&api, &jobs);
    check_other_profiles(&api, &jobs);
    server.process.assert_running();
    report(&format!(
        "{} real targets, {} scrapes watched, {:.1} s",
        jobs.len(),
        seen.values().map(|s| s.scrapes.len()).sum::<usize>(),
        t0.elapsed().as_secs_f64()
    ));
}

/// The functions that are a leaf of some sample of `pprof`'s sample type `kind`.
fn leaves_of(pprof: &[u8], kind: &str) -> Vec<String> {
    let profiles = parca_profile::decode(pprof, &Default::default()).expect("normalizes");
    let profile = profiles
        .iter()
        .find(|p| p.meta.sample_type.kind == kind)
        .unwrap_or_else(|| panic!("no {kind} samples"));
    let leaves: Vec<String> = parca_profile::TopTable::build(profile)
        .rows
        .into_iter()
        .filter(|r| r.flat != 0)
        .map(|r| r.name)
        .collect();
    assert!(!leaves.is_empty(), "no {kind} samples");
    leaves
}

/// The server's heap profile once it holds a sampled allocation with named frames. jemalloc
/// samples one allocation per 512 KiB on average: a server just started may hold none yet (its
/// idle heap is small), so it is given work until it does.
fn heap_profile_with_a_sample(server: &Server) -> crate::server_harness::Response {
    poll(
        "the heap profile to hold a sample",
        Duration::from_secs(30),
        Duration::from_millis(200),
        || {
            let r = server.get("/debug/pprof/heap")?;
            let _ = server.get("/api/v1/status/tsdb");
            let profiles =
                parca_profile::decode(&r.body, &Default::default()).map_err(|e| e.to_string())?;
            let sampled = profiles.iter().any(|p| {
                p.meta.sample_type.kind == "inuse_space"
                    && parca_profile::TopTable::build(p)
                        .rows
                        .iter()
                        .any(|row| row.flat != 0)
            });
            let named = parca_pprof::decode(&r.body, &Default::default())
                .is_ok_and(|pprof| !pprof.to_proto().function.is_empty());
            if sampled && named {
                Ok(r)
            } else {
                Err("no named inuse_space sample yet".to_owned())
            }
        },
    )
}

/// The server's own heap profile names the code that allocated as each sample's leaf, not
/// jemalloc's sampler (`prof_backtrace_impl`) or Rust's allocation shims: the profile carries
/// `drop_frames` for them, which every reader (google/pprof, our ingest) applies.
#[test]
fn the_servers_heap_profile_leaves_out_the_allocators_frames() {
    let server = Server::start(&parca_binary(false), &[], |_| {
        "scrape_configs: []\n".to_owned()
    });
    let r = heap_profile_with_a_sample(&server);
    assert_eq!(r.status, 200, "{}", r.text());
    let pprof = parca_pprof::decode(&r.body, &Default::default()).expect("decodes");
    assert!(
        pprof.string(pprof.header().drop_frames).contains("prof_"),
        "drop_frames: {:?}",
        pprof.string(pprof.header().drop_frames)
    );
    let leaves = leaves_of(&r.body, "inuse_space");
    for leaf in &leaves {
        assert!(
            ![
                "prof_",
                "_rjem_",
                "je_",
                "imalloc",
                "__rust_alloc",
                "__rustc::",
                "alloc::alloc::"
            ]
            .iter()
            .any(|p| leaf.starts_with(p))
                && !["malloc", "realloc", "calloc"].contains(&leaf.as_str()),
            "an allocator frame is a leaf: {leaf} (leaves: {leaves:?})"
        );
    }
}

/// The server's own CPU profile over 3 s while `path` is asked again and again: work for the
/// profiler to see.
fn busy_cpu_profile(server: &Server, path: &str) -> crate::server_harness::Response {
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let worker = scope.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                let _ = server.get(path);
            }
        });
        let r = server.get("/debug/pprof/profile?seconds=3");
        stop.store(true, Ordering::Relaxed);
        worker.join().expect("worker");
        r
    })
    .expect("cpu profile")
}

/// The server's own CPU profile names the code that ran as each sample's leaf, not the
/// profiler's signal handler walking the stack (`backtrace::backtrace::libunwind::trace` was the
/// leaf of every sample with pprof-rs).
#[test]
fn the_servers_cpu_profile_leaves_out_the_profilers_frames() {
    let server = Server::start(&parca_binary(false), &[], |_| {
        "scrape_configs: []\n".to_owned()
    });
    let r = busy_cpu_profile(&server, "/api/v1/status/buildinfo");
    assert_eq!(r.status, 200, "{}", r.text());
    let leaves = leaves_of(&r.body, "cpu");
    // The signal handler's frames. The profiling thread's own work (`sampler::drain` emptying
    // the ring) is CPU the server spends, and may be a leaf, as Go's profiles show theirs.
    for leaf in &leaves {
        assert!(
            ![
                "backtrace::",
                "parca_selfprof::sampler::on_sigprof",
                "parca_selfprof::sampler::record",
                "parca_selfprof::sampler::interrupted_pc",
                "on_sigprof",
                "__restore_rt"
            ]
            .iter()
            .any(|p| leaf.starts_with(p)),
            "a profiler frame is a leaf: {leaf} (leaves: {leaves:?})"
        );
    }
}

/// Every frame of the server's own profiles has its full path: inlined functions were named
/// `poll`, `run`, `new` or `{closure#0}`, so different functions fell into one row of the top
/// table.
#[test]
fn the_servers_own_profiles_name_frames_with_their_full_paths() {
    let server = Server::start(&parca_binary(false), &[], |_| {
        "scrape_configs: []\n".to_owned()
    });
    let cpu = busy_cpu_profile(&server, "/api/v1/labels");
    let heap = heap_profile_with_a_sample(&server);
    for (kind, r) in [("cpu", cpu), ("heap", heap)] {
        assert_eq!(r.status, 200, "{kind}: {}", r.text());
        let pprof = parca_pprof::decode(&r.body, &Default::default()).expect("decodes");
        let names: Vec<String> = pprof
            .to_proto()
            .function
            .iter()
            .map(|f| pprof.string(f.name).to_owned())
            .collect();
        let bare: Vec<&String> = names
            .iter()
            .filter(|n| {
                [
                    "poll",
                    "run",
                    "new",
                    "call_once",
                    "{closure#0}",
                    "{{closure}}",
                    "alloc",
                ]
                .contains(&n.as_str())
            })
            .collect();
        assert!(
            bare.is_empty(),
            "{kind}: functions without their path: {bare:?}"
        );
        assert!(
            names.iter().any(|n| n.starts_with("tokio::runtime::")),
            "{kind}: no tokio::runtime:: frame in {names:?}"
        );
        let mangled: Vec<&String> = names
            .iter()
            .filter(|n| n.starts_with("_ZN") || n.starts_with("_R") || n.contains("$LT$"))
            .collect();
        assert!(
            mangled.is_empty(),
            "{kind}: names left mangled: {mangled:?}"
        );
    }
}
