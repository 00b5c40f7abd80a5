//! A fleet: 20,000 and 100,000 pods, each its own series holding three 10 s CPU profiles of 50
//! samples (a minute of a small service), all in the head. Measured: the merge of every pod's
//! profiles through the evaluator (`merge(type[1m])`, the fleet's main question), and the
//! metrics graph the explorer asks for (`query_range` over the minute at 10 s steps, then the
//! 20 largest series kept and the rest summed, `top_series`). Throughput of the merge is in
//! (stack, value) pairs, of the graph in series.
//!
//! `cargo bench -p parca-query --bench fleet`

// A bench binary's output is its product.
#![allow(clippy::print_stdout)]

use std::sync::Arc;
use std::time::Instant;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use parca_query::{Engine, InstantQuery, Limits, RangeQuery, top_series};
use parca_tsdb::{Db, Labels};

mod support;

const TYPE: &str = "process_cpu:cpu:nanoseconds:cpu:nanoseconds:delta";
const T0: i64 = 1_700_000_000_000;
const N_PROFILES: i64 = 3;
const N_SAMPLES: usize = 50;

/// A store of `n_pods` series, and the pairs it holds.
fn store(n_pods: usize) -> (tempfile::TempDir, Arc<Db>, usize) {
    let profile = support::corpus_cpu_profile().retain_samples(|i| i < N_SAMPLES);
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(dir.path(), parca_tsdb::Options::default()).expect("open");
    let started = Instant::now();
    for i in 0..N_PROFILES {
        for chunk in (0..n_pods).collect::<Vec<_>>().chunks(5_000) {
            let mut appender = db.appender();
            for &pod in chunk {
                let labels = Labels::new([
                    ("__name__", TYPE.to_owned()),
                    ("job", "shop".to_owned()),
                    ("pod", format!("shop-{pod:06}")),
                ])
                .expect("labels");
                appender
                    .append(&labels, T0 + i * 10_000, &profile)
                    .expect("append");
            }
            appender.commit().expect("commit");
        }
    }
    let pairs = profile.samples.len() * n_pods * N_PROFILES as usize;
    println!(
        "{n_pods} pods: {pairs} pairs stored in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    (dir, Arc::new(db), pairs)
}

fn bench(c: &mut Criterion) {
    for n_pods in [20_000, 100_000] {
        let (_dir, db, pairs) = store(n_pods);
        let engine = Engine::new(Arc::clone(&db), Limits::default());
        let end = T0 + N_PROFILES * 10_000;
        let mut group = c.benchmark_group(format!("fleet_{n_pods}_pods"));
        group.sample_size(10);
        group.throughput(Throughput::Elements(pairs as u64));
        let merge =
            parca_querylang::parse(&format!("merge({TYPE}{{job=\"shop\"}}[1m])")).expect("valid");
        group.bench_function("merge_every_pod", |b| {
            b.iter(|| {
                engine
                    .instant(&merge, &InstantQuery::at(end))
                    .expect("evaluates")
            })
        });
        let selector = parca_querylang::parse(&format!("{TYPE}{{job=\"shop\"}}")).expect("valid");
        let range = RangeQuery {
            start_ms: T0,
            end_ms: end,
            step_ms: 10_000,
        };
        group.throughput(Throughput::Elements(n_pods as u64));
        group.bench_function("graph_top_20_of_every_pod", |b| {
            b.iter(|| {
                let series = engine.range(&selector, &range).expect("evaluates");
                top_series(series, 20)
            })
        });
        group.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
