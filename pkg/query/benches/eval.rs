//! Evaluation over a store holding an hour of 10 s CPU profiles from 10 instances: the merge
//! of one job's hour, the same merge done directly on the store (what the evaluator may not
//! lose more than 20% against), and a range query `sum by (instance)`.
//!
//! `cargo bench -p parca-query --bench eval`

use std::sync::Arc;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use parca_query::{Engine, InstantQuery, Limits, RangeQuery};
use parca_tsdb::{Db, Labels, MatchOp, Matcher};

const TYPE: &str = "process_cpu:cpu:nanoseconds:cpu:nanoseconds:delta";
const T0: i64 = 1_700_000_000_000;
const N_INSTANCES: usize = 10;
const N_PROFILES: i64 = 360;

fn store() -> (tempfile::TempDir, Arc<Db>, usize) {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/testdata/pprof/go/go-cpu.pb.gz"
    );
    let profile = parca_profile::decode(&std::fs::read(path).expect("corpus"), &Default::default())
        .expect("valid")
        .into_iter()
        .find(|p| p.meta.sample_type.kind == "cpu")
        .expect("cpu");
    // One series per instance: drop the pprof.Do labels and sum what they split.
    let mut profile = profile;
    profile
        .samples
        .labels
        .fill(parca_profile::tables::LabelSetId::EMPTY);
    let profile = parca_profile::merge([&profile]).expect("merge");
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(dir.path(), Default::default()).expect("open");
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
    let pairs = profile.samples.len() * N_INSTANCES * N_PROFILES as usize;
    (dir, Arc::new(db), pairs)
}

fn bench(c: &mut Criterion) {
    let (_dir, db, pairs) = store();
    let engine = Engine::new(Arc::clone(&db), Limits::default());
    let end = T0 + N_PROFILES * 10_000;
    let mut group = c.benchmark_group("eval");
    group.sample_size(20);
    group.throughput(Throughput::Elements(pairs as u64));

    let merge = parca_querylang::parse(&format!("merge({TYPE}{{job=\"x\"}}[1h])")).expect("valid");
    group.bench_function("merge_1h_10_series", |b| {
        b.iter(|| {
            engine
                .instant(&merge, &InstantQuery::at(end))
                .expect("evaluates")
        })
    });
    group.bench_function("store_select_merge_1h_10_series", |b| {
        let matchers = [
            Matcher::new(MatchOp::Equal, "__name__", TYPE).expect("matcher"),
            Matcher::new(MatchOp::Equal, "job", "x").expect("matcher"),
        ];
        b.iter(|| {
            let series = db.querier(end - 3_600_000 + 1, end).select(&matchers);
            parca_profile::merge(
                series
                    .iter()
                    .flat_map(|s| s.profiles.iter().map(|(_, p)| p)),
            )
            .expect("merge")
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

criterion_group!(benches, bench);
criterion_main!(benches);
