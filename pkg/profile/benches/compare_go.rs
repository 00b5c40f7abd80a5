//! Decode + normalize throughput against Go's `profile.Parse` (google/pprof), same files, same
//! run, one core each. Prints a table with MB/s, samples/s and the ratio.
//!
//! `cargo bench -p parca-profile --bench compare_go`. Needs Debian's `golang-go` and
//! `golang-github-google-pprof-dev` (`tests/tools/pprof-oracle.sh` installs both); without Go it
//! prints our figures alone and says so.

// A bench binary's output is its product.
#![allow(clippy::print_stdout, clippy::print_stderr)]

/// The `parca` binary's allocator (jemalloc), so that the figures are those of the server and
/// of `parca profile`.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn corpus(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/testdata/pprof")
        .join(rel)
}

/// Best-of-5 time of one decode + normalize, each round running for at least 400 ms.
fn ours(data: &[u8]) -> (Duration, usize) {
    let options = parca_pprof::DecodeOptions::default();
    let samples = parca_pprof::decode(data, &options)
        .expect("corpus decodes")
        .n_samples();
    let mut best = Duration::MAX;
    for _ in 0..5 {
        let start = Instant::now();
        let mut n = 0u32;
        while start.elapsed() < Duration::from_millis(400) {
            let profiles =
                parca_profile::decode(std::hint::black_box(data), &options).expect("decodes");
            std::hint::black_box(profiles);
            n += 1;
        }
        best = best.min(start.elapsed() / n);
    }
    (best, samples)
}

/// Runs the Go program; `None` when Go or google/pprof's source is not installed.
fn go(files: &[PathBuf]) -> Option<Vec<Duration>> {
    let program = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/go/parse.go");
    let output = Command::new("go")
        .arg("run")
        .arg(&program)
        .args(files)
        .env("GO111MODULE", "off")
        .env("GOPATH", "/usr/share/gocode")
        .env("GOFLAGS", "")
        .env("GOMAXPROCS", "1")
        .output()
        .ok()?;
    if !output.status.success() {
        eprintln!("go run failed: {}", String::from_utf8_lossy(&output.stderr));
        return None;
    }
    Some(
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .map(|line| {
                Duration::from_nanos(
                    line.rsplit(' ')
                        .next()
                        .and_then(|n| n.parse().ok())
                        .expect("ns"),
                )
            })
            .collect(),
    )
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` passes nothing we need. Any filter
    // argument is ignored: this binary measures its fixed set.
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    // The project's largest corpus files, then typical scrapes of real programs.
    let mut files: Vec<PathBuf> = [
        "published/google-pprof/large.cpu",
        "published/parca/alloc_space_delta.pb.gz",
        "published/parca/profile-with-labels.pb.gz",
        "prometheus/prometheus-cpu.pb.gz",
        "prometheus/prometheus-allocs.pb.gz",
        "go/go-cpu.pb.gz",
    ]
    .iter()
    .map(|f| corpus(f))
    .collect();
    // Larger files of the team's shared corpus (AGPL, so not copied into the project), measured
    // when a checkout has them beside it.
    let shared = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/testdata/pprof");
    let path = shared.join("published/pyroscope/cpu_go_truncated_1.pb.gz");
    if path.exists() {
        files.insert(1, path);
    }
    let go_times = go(&files);
    if go_times.is_none() {
        eprintln!(
            "Go or google/pprof source missing: install golang-go golang-github-google-pprof-dev for the comparison"
        );
    }
    println!(
        "{:<42} {:>9} {:>8} {:>10} {:>12} {:>10} {:>8}",
        "file", "bytes", "samples", "ours MB/s", "ours samp/s", "Go MB/s", "ratio"
    );
    for (i, path) in files.iter().enumerate() {
        let data = std::fs::read(path).expect("corpus file");
        let (ours, samples) = ours(&data);
        let mbps = |d: Duration| data.len() as f64 / d.as_secs_f64() / 1e6;
        let name = path
            .strip_prefix(corpus(""))
            .or_else(|_| path.strip_prefix(&shared))
            .unwrap_or(path)
            .display()
            .to_string();
        let (go_mbps, ratio) = match &go_times {
            Some(t) => (
                format!("{:.1}", mbps(t[i])),
                format!("{:.2}x", t[i].as_secs_f64() / ours.as_secs_f64()),
            ),
            None => ("-".into(), "-".into()),
        };
        println!(
            "{:<42} {:>9} {:>8} {:>10.1} {:>12.0} {:>10} {:>8}",
            name,
            data.len(),
            samples,
            mbps(ours),
            samples as f64 / ours.as_secs_f64(),
            go_mbps,
            ratio
        );
    }
}
