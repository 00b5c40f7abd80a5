//! Push latency while queries run: how long an append and its fsynced commit (a push) take
//! alone, and while two threads merge every profile of a head of 4,800 series over and over.
//! A query reads the head one series at a time, so pushes get in between; before that, a query
//! held the head's lock for its whole run and pushes waited for it.
//!
//! `cargo bench -p parca-tsdb --bench append_under_query` prints the figures (no timed
//! assertions anywhere: the numbers depend on the machine).

#![allow(clippy::print_stdout)] // a bench reports its figures on stdout

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parca_tsdb::{Db, Labels, Options};

const SERIES: usize = 4_800;
const PUSHES: usize = 400;

#[path = "support/corpus.rs"]
mod corpus;
use corpus::profile;

fn labels(job: &str, i: usize) -> Labels {
    Labels::new([
        (
            "__name__",
            "process_cpu:cpu:nanoseconds:cpu:nanoseconds:delta".to_owned(),
        ),
        ("job", job.to_owned()),
        ("instance", format!("host-{i:05}")),
    ])
    .expect("labels")
}

/// Milliseconds at the given quantile of `sorted`.
fn quantile(sorted: &[Duration], q: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[i].as_secs_f64() * 1e3
}

/// Pushes `PUSHES` profiles one by one (append + fsynced commit) and returns their latencies.
fn pushes(db: &Db, p: &parca_profile::Profile, first: usize) -> Vec<Duration> {
    let mut out = Vec::with_capacity(PUSHES);
    for i in 0..PUSHES {
        let started = Instant::now();
        let mut app = db.appender();
        app.append(&labels("push", first + i), 1_000, p)
            .expect("append");
        app.commit().expect("commit");
        out.push(started.elapsed());
        std::thread::sleep(Duration::from_millis(2));
    }
    out.sort();
    out
}

fn main() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(dir.path(), Options::default()).expect("open");
    let cpu = profile("go/go-cpu.pb.gz", "cpu");
    let small = profile("go/go-goroutine.pb.gz", "goroutine");
    {
        let mut app = db.appender();
        for i in 0..SERIES {
            app.append(&labels("api", i), 1_000, &cpu).expect("append");
        }
        app.commit().expect("commit");
    }
    let all = parca_tsdb::Matcher::new(parca_tsdb::MatchOp::Equal, "job", "api").expect("valid");
    let started = Instant::now();
    let merged = db
        .querier(0, 10_000)
        .merge(std::slice::from_ref(&all))
        .expect("merge")
        .expect("profiles");
    let merge_ms = started.elapsed().as_secs_f64() * 1e3;
    println!(
        "merge of {SERIES} series ({} samples): {merge_ms:.1} ms",
        merged.samples.len()
    );

    let idle = pushes(&db, &small, 0);
    let stop = AtomicBool::new(false);
    let n_queries = AtomicUsize::new(0);
    let busy = std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    db.querier(0, 10_000)
                        .merge(std::slice::from_ref(&all))
                        .expect("merge");
                    n_queries.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        std::thread::sleep(Duration::from_millis(100));
        let busy = pushes(&db, &small, PUSHES);
        stop.store(true, Ordering::Relaxed);
        busy
    });
    for (what, latencies) in [
        ("push latency, no query", &idle),
        ("push latency, two merges running", &busy),
    ] {
        println!(
            "{what}: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms ({PUSHES} pushes)",
            quantile(latencies, 0.5),
            quantile(latencies, 0.99),
            quantile(latencies, 1.0),
        );
    }
    println!(
        "merges completed meanwhile: {}",
        n_queries.load(Ordering::Relaxed)
    );
}
