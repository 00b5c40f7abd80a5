//! The CPU of one push, stage by stage, in process: Prometheus' own 16 KB CPU profile (the
//! `push_load` bench's body) inflated, parsed, normalized, named as series and written to a store
//! (appended, then committed with its fsync), each push a new series. Prints microseconds a push
//! per stage, as CPU time of the pushing thread (so time the shared machine gave to other work,
//! and the wait for the disk, are left out), and the process's CPU a push (the WAL's sync thread
//! included): the least of nine rounds, the one least disturbed by other work, and their median.
//! It asserts nothing about time.
//!
//! Run: `cargo bench -p parca-ingest --bench push_path` (`-- --pushes N`, default 2,000 a round;
//! `--fresh-tables` decodes each push into tables of its own, as the server did before it kept
//! its decoders' tables from push to push).

#![allow(clippy::print_stdout)] // A bench binary: its figures are its output.
#![allow(
    clippy::too_many_lines,
    reason = "a bench or test target is one scenario read top to bottom; the line budget is for product code"
)]

use parca_ingest::to_series;
use parca_tsdb::{Db, Labels, Options};

#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() {
    let mut pushes = 2_000usize;
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(i) = args.iter().position(|a| a == "--pushes") {
        pushes = args[i + 1].parse().expect("--pushes N");
    }
    // The server decodes into tables kept from push to push (`parca_ingest::TablesPool`), as
    // here by default; with this flag each push gets fresh tables, as before that pool.
    let fresh_tables = args.iter().any(|a| a == "--fresh-tables");
    let mut kept: Option<std::sync::Arc<parca_profile::Tables>> = None;
    let body = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/testdata/pprof/prometheus/prometheus-cpu.pb.gz"
    ))
    .expect("corpus file");
    let options = parca_pprof::DecodeOptions::default();
    let raw = parca_pprof::decompress(&body, &options).expect("inflates");
    let pprof = parca_pprof::Pprof::parse(&raw).expect("parses");
    println!(
        "push_path: {} bytes gzipped, {} raw; {} strings ({} bytes), {} functions, {} locations, {} samples",
        body.len(),
        raw.len(),
        pprof.n_strings(),
        pprof.n_string_bytes(),
        pprof.functions().len(),
        pprof.locations().len(),
        pprof.n_samples()
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(dir.path(), Options::default()).expect("store opens");
    let stages = [
        "inflate",
        "parse",
        "normalize",
        "to_series",
        "append",
        "commit",
        "drop",
        "total",
        "process CPU",
    ];
    let mut rounds: Vec<[f64; 9]> = Vec::new();
    let mut n = 0usize;
    for _ in 0..9 {
        let mut t = [0f64; 9];
        let cpu0 = cpu_seconds();
        for _ in 0..pushes {
            n += 1;
            let t0 = thread_cpu();
            let raw = parca_pprof::decompress(&body, &options).expect("inflates");
            let t1 = thread_cpu();
            let pprof = parca_pprof::Pprof::parse(&raw).expect("parses");
            let t2 = thread_cpu();
            let profiles = if fresh_tables {
                parca_profile::from_pprof(&pprof).expect("normalizes")
            } else {
                let mut tables = kept.take().unwrap_or_default();
                let profiles =
                    parca_profile::from_pprof_into(&pprof, &mut tables).expect("normalizes");
                drop(tables);
                profiles
            };
            let t3 = thread_cpu();
            let target =
                Labels::new([("job", "bench"), ("instance", &format!("i-{n}"))]).expect("labels");
            let batch = to_series("process_cpu", &target, profiles, 1).expect("series");
            let t4 = thread_cpu();
            let mut appender = db.appender();
            for s in &batch {
                appender
                    .append(&s.labels, s.timestamp_ms, &s.profile)
                    .expect("append");
            }
            let tables = std::sync::Arc::clone(&batch[0].profile.tables);
            drop(batch);
            if !fresh_tables {
                kept = Some(tables);
            }
            let t45 = thread_cpu();
            appender.commit().expect("commit");
            let t5 = thread_cpu();
            drop((raw, pprof));
            let t6 = thread_cpu();
            for (slot, (a, b)) in t.iter_mut().zip([
                (t0, t1),
                (t1, t2),
                (t2, t3),
                (t3, t4),
                (t4, t45),
                (t45, t5),
                (t5, t6),
                (t0, t6),
            ]) {
                *slot += (b - a) * 1e6 / pushes as f64;
            }
        }
        t[8] = (cpu_seconds() - cpu0) * 1e6 / pushes as f64;
        rounds.push(t);
    }
    for (i, stage) in stages.iter().enumerate() {
        let mut v: Vec<f64> = rounds.iter().map(|r| r[i]).collect();
        v.sort_by(f64::total_cmp);
        println!(
            "{stage:<16} {:>8.1} µs  (median {:.1})",
            v[0],
            v[v.len() / 2]
        );
    }
}

/// CPU seconds this thread has used: the stages' figures leave out time the machine gave to
/// other work (the development machine is shared), and the wait for the disk.
fn thread_cpu() -> f64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid timespec for the call to fill.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    assert_eq!(rc, 0, "clock_gettime");
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}

/// CPU seconds (user + system) this process has used so far, from `/proc/self/stat`.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("read /proc/self/stat");
    let rest = &stat[stat.rfind(')').expect("comm") + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 =
        fields[11].parse::<f64>().expect("utime") + fields[12].parse::<f64>().expect("stime");
    ticks / 100.0
}
