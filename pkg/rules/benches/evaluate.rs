//! The cost of rule evaluation at the scale: one group of 100 rules over 1,000 CPU
//! series (10 jobs × 100 instances, three 10 s profiles each in the lookback), half plain
//! aggregations (`sum by (job)`, `sum by (instance)`), half a function's share of each job's
//! CPU (`sum by (job) (X |= "f") / sum by (job) (X)`). One iteration is one evaluation of the
//! group, as the server does it every `interval`; the figure to read is its time over the
//! interval (15 s) as a share of one core, printed after the run.
//!
//! `cargo bench -p parca-rules --bench evaluate`

// A bench binary's output is its product.
#![allow(clippy::print_stdout)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use parca_query::{Engine, Limits};
use parca_rules::{Environment, Group};
use parca_tsdb::{Db, Labels};

const TYPE: &str = "process_cpu:cpu:nanoseconds:cpu:nanoseconds:delta";
const T0: i64 = 1_700_000_000_000;
const N_JOBS: usize = 10;
const N_INSTANCES: usize = 100;
const N_PROFILES: i64 = 3;
const N_RULES: usize = 100;
const INTERVAL: Duration = Duration::from_secs(15);

/// The corpus CPU profile, its labels dropped so that each stored copy is one series.
fn cpu_profile() -> parca_profile::Profile {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/testdata/pprof/go/go-cpu.pb.gz"
    );
    let mut profile =
        parca_profile::decode(&std::fs::read(path).expect("corpus"), &Default::default())
            .expect("valid")
            .into_iter()
            .find(|p| p.meta.sample_type.kind == "cpu")
            .expect("cpu");
    profile
        .samples
        .labels
        .fill(parca_profile::tables::LabelSetId::EMPTY);
    parca_profile::merge([&profile]).expect("merge")
}

fn store() -> (tempfile::TempDir, Arc<Db>) {
    let profile = cpu_profile();
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(dir.path(), Default::default()).expect("open");
    for i in 0..N_PROFILES {
        let mut appender = db.appender();
        for job in 0..N_JOBS {
            for instance in 0..N_INSTANCES {
                let labels = Labels::new([
                    ("__name__", TYPE.to_owned()),
                    ("job", format!("job-{job}")),
                    ("instance", format!("i-{instance}")),
                ])
                .expect("labels");
                appender
                    .append(&labels, T0 + i * 10_000, &profile)
                    .expect("append");
            }
        }
        appender.commit().expect("commit");
    }
    (dir, Arc::new(db))
}

/// The group of [`N_RULES`] rules.
fn group() -> Group {
    let mut yaml = String::from("groups:\n  - name: bench\n    rules:\n");
    for i in 0..N_RULES {
        let expr = match i % 4 {
            0 => format!("sum by (job) ({TYPE})"),
            1 => format!("sum by (instance) ({TYPE}{{job=\"job-{}\"}})", i % N_JOBS),
            2 => format!("sum by (job) ({TYPE} |= \"runtime.mallocgc\") / sum by (job) ({TYPE})"),
            _ => {
                format!("sum by (job) ({TYPE} |= leaf \"runtime.memmove\") / sum by (job) ({TYPE})")
            }
        };
        yaml.push_str(&format!(
            "      - record: bench:rule_{i}\n        expr: '{expr}'\n"
        ));
    }
    let mut file = parca_config::parse_rules(&yaml, "bench.yml").expect("rules");
    Group::new("bench.yml".into(), file.groups.remove(0), INTERVAL).expect("group")
}

fn bench(c: &mut Criterion) {
    let (_dir, db) = store();
    let engine = Engine::new(db, Limits::default());
    let group = group();
    let env = Environment::default();
    let at = T0 + N_PROFILES * 10_000;
    group.evaluate(&engine, at, env.env());
    let state = group.state();
    assert!(
        state
            .rules
            .iter()
            .all(|r| r.health == parca_rules::Health::Ok),
        "every rule evaluates: {:?}",
        state.rules.iter().find_map(|r| r.last_error.as_deref())
    );
    let n_samples: usize = state.rules.iter().map(|r| r.samples.len()).sum();
    let mut g = c.benchmark_group("rules");
    g.sample_size(10);
    g.bench_function("100 rules over 1000 series", |b| {
        b.iter(|| group.evaluate(&engine, at, env.env()))
    });
    g.finish();
    let runs = 5;
    let started = Instant::now();
    for _ in 0..runs {
        group.evaluate(&engine, at, env.env());
    }
    let per_evaluation = started.elapsed() / runs;
    println!(
        "one evaluation: {per_evaluation:?} for {N_RULES} rules over {} series ({n_samples} samples recorded); every {INTERVAL:?}: {:.2}% of a core",
        N_JOBS * N_INSTANCES,
        per_evaluation.as_secs_f64() / INTERVAL.as_secs_f64() * 100.0
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
