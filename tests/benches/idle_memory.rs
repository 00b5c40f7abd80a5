//! Memory of an idle server on the default configuration (issue 15, point 4): a release
//! `parca` runs the repository's `parca.yaml` (it scrapes its own CPU and heap profiles every
//! 10 s) for a while, and its resident memory is read from `/proc/PID/status` every few
//! seconds. Prints figures; asserts nothing about them.
//!
//! `cargo bench -p parca-tests --bench idle_memory [-- SECONDS]` (default 120). `PARCA_BIN`
//! picks a server binary; otherwise a release one is built.

#![allow(clippy::print_stdout)] // A bench binary: its figures are its output.

#[path = "../e2e/server_harness.rs"]
mod server_harness;

use std::time::{Duration, Instant};

use server_harness::{Server, parca_binary, tests_dir};

fn main() {
    let seconds: u64 = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .and_then(|a| a.parse().ok())
        .unwrap_or(120);
    let default_config = std::fs::read_to_string(tests_dir().join("../parca.yaml"))
        .expect("the repository's parca.yaml");
    let server = Server::start(&parca_binary(true), &[], |addr| {
        default_config.replace("127.0.0.1:7070", &addr.to_string())
    });
    let pid = server.process.pid();
    let started = Instant::now();
    let mut peak_kib = 0;
    let mut last = Default::default();
    while started.elapsed() < Duration::from_secs(seconds) {
        std::thread::sleep(Duration::from_secs(5));
        last = status(pid);
        peak_kib = peak_kib.max(last.0);
    }
    let metrics = server.get("/metrics").expect("metrics").text();
    let metric = |name: &str| {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .unwrap_or("-")
            .to_owned()
    };
    println!("idle server on the default parca.yaml, {seconds} s:");
    println!(
        "  VmRSS {:.1} MB (anon {:.1}, file {:.1}); highest seen {:.1} MB; VmHWM {:.1} MB",
        mb(last.0),
        mb(last.1),
        mb(last.2),
        mb(peak_kib),
        mb(last.3)
    );
    println!(
        "  heap allocated {} B, allocator resident {} B, heap per stored sample {} B, samples stored {}",
        metric("parca_memory_heap_allocated_bytes"),
        metric("parca_memory_heap_resident_bytes"),
        metric("parca_memory_heap_bytes_per_stored_sample"),
        metric("parca_tsdb_samples"),
    );
}

/// (VmRSS, RssAnon, RssFile, VmHWM) in KiB.
fn status(pid: u32) -> (u64, u64, u64, u64) {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    };
    (
        field("VmRSS:"),
        field("RssAnon:"),
        field("RssFile:"),
        field("VmHWM:"),
    )
}

fn mb(kib: u64) -> f64 {
    kib as f64 / 1024.0
}
