//! Parse throughput on a realistic mix of queries: mostly selectors as the UI sends them, some
//! merge, diff and aggregations. The target is a million typical selectors a second on one core.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use std::hint::black_box;

/// Typical selectors, as a profile view or a metrics graph asks for them.
const SELECTORS: &[&str] = &[
    r#"process_cpu:samples:count:cpu:nanoseconds:delta{job="api", instance=~"10\\.0\\..*"}[1h]"#,
    r#"process_cpu:samples:count:cpu:nanoseconds:delta{job="api"}"#,
    r#"memory:inuse_space:bytes:space:bytes{job="api", instance="10.0.0.7:7070"}[30m]"#,
    r#"memory:alloc_objects:count:space:bytes{namespace="prod", pod=~"checkout-.*"}[5m]"#,
    r#"process_cpu:samples:count:cpu:nanoseconds:delta{service!="batch", region=~"eu-.*|us-.*"}[15m]"#,
    r#"goroutine:goroutine:count:goroutine:count{job="api"}"#,
    r#"{__name__=~"memory:.*", instance="localhost:7070"}"#,
    r#"process_cpu:samples:count:cpu:nanoseconds:delta{job="api", container="app"}[1h] |= "runtime.mallocgc""#,
];

/// The rest of the mix: the functions.
const FUNCTIONS: &[&str] = &[
    r#"merge(memory:inuse_space:bytes:space:bytes{job="api"}[30m])"#,
    r#"merge by (instance) (process_cpu:samples:count:cpu:nanoseconds:delta{job="api"}[5m])"#,
    r#"diff(merge(process_cpu:samples:count:cpu:nanoseconds:delta{job="api"}[1h] offset 1d),
     merge(process_cpu:samples:count:cpu:nanoseconds:delta{job="api"}[1h]))"#,
    r#"sum by (job) (process_cpu:samples:count:cpu:nanoseconds:delta)"#,
    r#"topk(5, sum by (instance) (memory:inuse_space:bytes:space:bytes))"#,
];

/// A function's self time as a share of each job's CPU: binary operators go through the grammar.
const SHARE: &str = r#"sum by (job) (process_cpu:cpu:nanoseconds:cpu:nanoseconds:delta{job="api"} |= leaf "encoding/json.Marshal") / sum by (job) (process_cpu:cpu:nanoseconds:cpu:nanoseconds:delta{job="api"})"#;

fn bench(c: &mut Criterion) {
    for q in SELECTORS.iter().chain(FUNCTIONS).chain([&SHARE]) {
        parca_querylang::parse(q).expect("benchmark queries parse");
    }
    let mut group = c.benchmark_group("parse");

    group.throughput(Throughput::Elements(1));
    group.bench_function("typical_selector", |b| {
        b.iter(|| parca_querylang::parse(black_box(SELECTORS[0])))
    });

    group.bench_function("share_of_cpu", |b| {
        b.iter(|| parca_querylang::parse(black_box(SHARE)))
    });

    group.throughput(Throughput::Elements(SELECTORS.len() as u64));
    group.bench_function("selectors", |b| {
        b.iter(|| {
            for q in SELECTORS {
                black_box(parca_querylang::parse(black_box(q)).is_ok());
            }
        })
    });

    // Four selectors to each function, as the UI's traffic roughly is.
    let mix: Vec<&str> = SELECTORS
        .iter()
        .chain(SELECTORS)
        .chain(SELECTORS)
        .chain(SELECTORS)
        .chain(FUNCTIONS)
        .copied()
        .collect();
    group.throughput(Throughput::Elements(mix.len() as u64));
    group.bench_function("mix", |b| {
        b.iter(|| {
            for q in &mix {
                black_box(parca_querylang::parse(black_box(q)).is_ok());
            }
        })
    });

    group.throughput(Throughput::Elements(1));
    group.bench_function("syntax_error", |b| {
        b.iter(|| {
            parca_querylang::parse(black_box(
                r#"sum by (job) (memory:inuse_space:bytes:space:bytes{job="api" instance="x"})"#,
            ))
        })
    });
    group.bench_function("lenient_half_typed", |b| {
        b.iter(|| parca_querylang::parse_lenient(black_box(r#"sum by (job) (memory:inuse_space:bytes:space:bytes{job="api", instance=~"10\\.0"#)))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
