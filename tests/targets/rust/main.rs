//! e2e-rust-target: a small Rust program for the end-to-end tests of the server. It samples
//! itself with the `pprof` crate (pprof-rs: SIGPROF, backtrace unwinding, in-process
//! symbols) and serves the result Go-style at `GET /debug/pprof/profile?seconds=N` (gzipped
//! pprof), while two worker threads keep recognisable functions busy:
//! `rust_hot_fnv` (FNV-1a over a buffer) and `rust_hot_xorshift` (a xorshift spin).
//!
//! The profile is laid out as pprof-rs' own encoder lays it out (one location per frame, no
//! mappings, a `thread` string label, sample types `samples/count` and `cpu/nanoseconds`), but
//! is encoded with our `parca_pprof::proto` messages: pprof-rs' encoder needs prost 0.12 and
//! prost-build, a second protobuf stack the workspace would build for this program alone.
//!
//! Usage: `e2e-rust-target --addr 127.0.0.1:PORT [--duty 0.1]`. Only std for HTTP: one
//! request per connection, and one CPU profile at a time (a second answers 500, as Go does).
#![allow(
    clippy::too_many_lines,
    reason = "a bench or test target is one scenario read top to bottom; the line budget is for product code"
)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parca_pprof::proto;

/// Samples per second, pprof-rs' usual rate.
const FREQUENCY_HZ: i32 = 100;

/// Set while a CPU profile is being taken.
static PROFILING: AtomicBool = AtomicBool::new(false);

#[inline(never)]
fn rust_hot_fnv(buf: &mut [u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for round in 0..100u64 {
        for b in buf.iter_mut() {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
            *b = (h >> 24) as u8 ^ round as u8;
        }
    }
    h
}

#[inline(never)]
fn rust_hot_xorshift(mut acc: u64) -> u64 {
    for _ in 0..200_000 {
        acc ^= acc << 13;
        acc ^= acc >> 7;
        acc ^= acc << 17;
    }
    std::hint::black_box(acc)
}

/// Runs `work` for `duty` of the wall time, forever.
fn busy(duty: f64, mut work: impl FnMut()) {
    loop {
        let started = Instant::now();
        work();
        std::thread::sleep(started.elapsed().mul_f64((1.0 - duty) / duty));
    }
}

/// Samples this process for `window` and returns the gzipped pprof.
fn cpu_profile(window: Duration) -> Result<Vec<u8>, String> {
    if PROFILING.swap(true, Ordering::SeqCst) {
        return Err("cpu profiling already in use".into());
    }
    let result = (|| {
        let guard = pprof::ProfilerGuardBuilder::default()
            .frequency(FREQUENCY_HZ)
            .blocklist(&["libc", "libgcc", "pthread", "vdso"])
            .build()
            .map_err(|e| e.to_string())?;
        std::thread::sleep(window);
        let report = guard.report().build().map_err(|e| e.to_string())?;
        Ok(parca_pprof::encode(&to_pprof(&report, window), true))
    })();
    PROFILING.store(false, Ordering::SeqCst);
    result
}

/// A pprof-rs report as pprof-rs lays it out: one location (and function) per frame.
fn to_pprof(report: &pprof::Report, window: Duration) -> proto::Profile {
    let period_ns = 1_000_000_000 / i64::from(FREQUENCY_HZ);
    let mut strings: Vec<String> = ["", "samples", "count", "cpu", "nanoseconds", "thread"]
        .map(String::from)
        .to_vec();
    let mut string_ids: HashMap<String, i64> = strings
        .iter()
        .enumerate()
        .map(|(i, s)| (s.clone(), i as i64))
        .collect();
    let mut intern = |s: String| -> i64 {
        *string_ids.entry(s).or_insert_with_key(|s| {
            strings.push(s.clone());
            strings.len() as i64 - 1
        })
    };
    let mut functions: HashMap<(i64, i64), u64> = HashMap::new();
    let mut function_list = Vec::new();
    let mut location_list = Vec::new();
    let mut samples = Vec::new();
    for (frames, &count) in &report.data {
        let mut location_id = Vec::new();
        for symbol in frames.frames.iter().flatten() {
            let name = intern(symbol.name());
            let file = intern(
                symbol
                    .filename
                    .as_ref()
                    .map(|f| f.display().to_string())
                    .unwrap_or_default(),
            );
            let next = function_list.len() as u64 + 1;
            let function_id = *functions.entry((name, file)).or_insert_with(|| {
                function_list.push(proto::Function {
                    id: next,
                    name,
                    system_name: name,
                    filename: file,
                    start_line: 0,
                });
                next
            });
            let id = location_list.len() as u64 + 1;
            location_list.push(proto::Location {
                id,
                line: vec![proto::Line {
                    function_id,
                    line: i64::from(symbol.lineno.unwrap_or(0)),
                    column: 0,
                }],
                ..Default::default()
            });
            location_id.push(id);
        }
        let count = count as i64;
        let thread = intern(frames.thread_name.clone());
        samples.push(proto::Sample {
            location_id,
            value: vec![count, count * period_ns],
            label: vec![proto::Label {
                key: 5,
                str: thread,
                ..Default::default()
            }],
        });
    }
    let time_nanos = report
        .timing
        .start_time
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64);
    proto::Profile {
        sample_type: vec![
            proto::ValueType { r#type: 1, unit: 2 },
            proto::ValueType { r#type: 3, unit: 4 },
        ],
        sample: samples,
        location: location_list,
        function: function_list,
        string_table: strings,
        time_nanos,
        duration_nanos: window.as_nanos() as i64,
        period_type: Some(proto::ValueType { r#type: 3, unit: 4 }),
        period: period_ns,
        ..Default::default()
    }
}

fn respond(stream: &mut TcpStream, status: &str, content_type: &str, body: &[u8]) {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    // The client may have gone (a scrape timeout): nothing to do about it.
    let _ = stream.write_all(head.as_bytes());
    let _ = stream.write_all(body);
}

fn handle(mut stream: TcpStream) {
    let Ok(reader) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(reader);
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).is_err() {
        return;
    }
    let mut header = String::new();
    while reader.read_line(&mut header).is_ok_and(|n| n > 0) && header.trim_end() != "" {
        header.clear();
    }
    let target = request_line.split_whitespace().nth(1).unwrap_or("/");
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let seconds = query
        .split('&')
        .find_map(|kv| kv.strip_prefix("seconds="))
        .map_or(Ok(30), str::parse::<u64>);
    match (path.trim_end_matches('/'), seconds) {
        ("/debug/pprof/profile", Ok(seconds @ 1..=300)) => {
            match cpu_profile(Duration::from_secs(seconds)) {
                Ok(body) => respond(&mut stream, "200 OK", "application/octet-stream", &body),
                Err(e) => respond(
                    &mut stream,
                    "500 Internal Server Error",
                    "text/plain",
                    e.as_bytes(),
                ),
            }
        }
        ("/debug/pprof/profile", _) => respond(
            &mut stream,
            "400 Bad Request",
            "text/plain",
            b"seconds must be a whole number from 1 to 300\n",
        ),
        ("/healthz", _) => respond(&mut stream, "200 OK", "text/plain", b"ok\n"),
        _ => respond(&mut stream, "404 Not Found", "text/plain", b"not found\n"),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let flag = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let addr = flag("--addr").unwrap_or_else(|| "127.0.0.1:18083".into());
    let duty: f64 = flag("--duty")
        .and_then(|d| d.parse().ok())
        .unwrap_or(0.1f64)
        .clamp(0.01, 1.0);
    std::thread::Builder::new()
        .name("fnv".into())
        .spawn(move || {
            let mut buf = vec![1u8; 4096];
            busy(duty, || {
                std::hint::black_box(rust_hot_fnv(&mut buf));
            })
        })
        .expect("spawn a worker");
    std::thread::Builder::new()
        .name("xorshift".into())
        .spawn(move || {
            let mut seed = 0x9e37_79b9_7f4a_7c15u64;
            busy(duty, || seed = rust_hot_xorshift(seed))
        })
        .expect("spawn a worker");
    let listener =
        TcpListener::bind(&addr).unwrap_or_else(|e| panic!("cannot listen on {addr}: {e}"));
    #[allow(clippy::print_stderr)]
    {
        eprintln!(
            "e2e-rust-target serving pprof-rs CPU profiles on http://{addr}/debug/pprof/profile"
        );
    }
    for stream in listener.incoming().flatten() {
        std::thread::spawn(move || handle(stream));
    }
}
