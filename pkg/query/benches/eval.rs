//! Evaluation over a store holding an hour of 10 s CPU profiles from 10 instances, once in the
//! head and once compacted into warm blocks: the merge of one job's hour through the evaluator,
//! the same merge done directly on the store with `Querier::merge` (the tsdb's merge figure,
//! which the evaluator may not lose more than 20% against), and a range query
//! `sum by (instance)`. Throughput is in (stack, value) pairs merged.
//!
//! `cargo bench -p parca-query --bench eval`

// A bench binary's output is its product.
#![allow(clippy::print_stdout)]

use std::sync::Arc;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use parca_query::{Engine, InstantQuery, Limits, RangeQuery};
use parca_tsdb::{Db, Labels, MatchOp, Matcher};

mod support;

const TYPE: &str = "process_cpu:cpu:nanoseconds:cpu:nanoseconds:delta";
const T0: i64 = 1_700_000_000_000;
const N_INSTANCES: usize = 10;
const N_PROFILES: i64 = 360;

/// The store, with everything in the head, or (`compacted`) cut into 20-minute blocks.
fn store(compacted: bool) -> (tempfile::TempDir, Arc<Db>, usize) {
    let profile = support::corpus_cpu_profile();
    let dir = tempfile::tempdir().expect("tempdir");
    let options = if compacted {
        parca_tsdb::Options {
            block_duration_ms: 20 * 60_000,
            retention_ms: 0,
            ..Default::default()
        }
    } else {
        parca_tsdb::Options::default()
    };
    let db = Db::open(dir.path(), options).expect("open");
    for i in 0..N_PROFILES {
        let mut appender = db.appender();
        for instance in 0..N_INSTANCES {
            let labels = Labels::new([
                ("__name__", TYPE.to_owned()),
                ("job", "x".to_owned()),
                ("instance", format!("host-{instance}:6060")),
            ])
            .expect("labels");
            appender
                .append(&labels, T0 + i * 10_000, &profile)
                .expect("append");
        }
        appender.commit().expect("commit");
    }
    if compacted {
        db.compact().expect("compact");
    }
    let pairs = profile.samples.len() * N_INSTANCES * N_PROFILES as usize;
    (dir, Arc::new(db), pairs)
}

fn bench(c: &mut Criterion) {
    for (place, compacted) in [("head", false), ("blocks", true)] {
        let (_dir, db, pairs) = store(compacted);
        let stats = db.stats();
        println!(
            "{place}: {} blocks, {} of {} samples in the head, {pairs} pairs in the hour",
            stats.n_blocks, stats.n_head_samples, stats.n_samples
        );
        let engine = Engine::new(Arc::clone(&db), Limits::default());
        let end = T0 + N_PROFILES * 10_000;
        let mut group = c.benchmark_group(format!("eval_{place}"));
        group.sample_size(20);
        group.throughput(Throughput::Elements(pairs as u64));

        let merge =
            parca_querylang::parse(&format!("merge({TYPE}{{job=\"x\"}}[1h])")).expect("valid");
        group.bench_function("merge_1h_10_series", |b| {
            b.iter(|| {
                engine
                    .instant(&merge, &InstantQuery::at(end))
                    .expect("evaluates")
            })
        });
        group.bench_function("store_merge_1h_10_series", |b| {
            let matchers = [
                Matcher::new(MatchOp::Equal, "__name__", TYPE).expect("matcher"),
                Matcher::new(MatchOp::Equal, "job", "x").expect("matcher"),
            ];
            b.iter(|| {
                db.querier(end - 3_600_000 + 1, end)
                    .merge(&matchers)
                    .expect("merge")
                    .expect("profiles")
            })
        });
        let merge_by =
            parca_querylang::parse(&format!("merge by (instance) ({TYPE}{{job=\"x\"}}[1h])"))
                .expect("valid");
        group.bench_function("merge_by_instance_1h_10_series", |b| {
            b.iter(|| {
                engine
                    .instant(&merge_by, &InstantQuery::at(end))
                    .expect("evaluates")
            })
        });

        let sum = parca_querylang::parse(&format!("sum by (instance) ({TYPE})")).expect("valid");
        let range = RangeQuery {
            start_ms: T0,
            end_ms: end,
            step_ms: 60_000,
        };
        group.throughput(Throughput::Elements(
            (N_INSTANCES as i64 * N_PROFILES) as u64,
        ));
        group.bench_function("sum_by_instance_1h_step_1m", |b| {
            b.iter(|| engine.range(&sum, &range).expect("evaluates"))
        });
        group.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
