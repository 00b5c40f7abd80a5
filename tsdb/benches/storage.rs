//! The store's storage figures: bytes on disk per (stack, value) pair against gzipped pprof,
//! postings intersection in the head and in a block, and select + merge of one day of
//! 10-second CPU profiles (from compacted blocks) for 1 and 100 series.
//!
//! `cargo bench -p parca-tsdb --bench storage` (building the 100-series day takes a minute or
//! two; `PARCA_BENCH_SERIES=10` makes it smaller). The size figures are printed before the
//! timings.
//!
//! The day's profiles are drawn from the corpus' `large.cpu` (20,430 distinct stacks): each
//! 10-second profile keeps a random 2.5% of its samples (about 500) with values multiplied by
//! 1–3. That repeats stacks less than a real process does, so the sizes are conservative.

#![allow(clippy::print_stdout)] // a bench reports its figures on stdout

use std::path::Path;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use parca_profile::Profile;
use parca_tsdb::{Db, Labels, MatchOp, Matcher, MemPostings, Options};

const DAY_MS: i64 = 24 * 3_600_000;
const STEP_MS: i64 = 10_000;

struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

fn corpus_cpu() -> Profile {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/testdata/pprof/published/google-pprof/large.cpu");
    let profiles =
        parca_profile::decode(&std::fs::read(&path).expect("corpus"), &Default::default())
            .expect("decodes");
    parca_profile::select_sample_type(profiles, Some("cpu"), None).expect("cpu")
}

/// One 10-second profile drawn from `base`.
fn ten_seconds(base: &Profile, rng: &mut Lcg) -> Profile {
    let mut p = base.retain_samples(|_| rng.below(1000) < 25);
    for v in &mut p.samples.values {
        *v *= 1 + rng.below(3) as i64;
    }
    p.meta.duration_nanos = STEP_MS * 1_000_000;
    p
}

/// Size of `p` as gzipped pprof holding only the symbols its samples use (as a scraped
/// profile would; `p` itself shares the whole corpus profile's tables).
fn gzipped_pprof_bytes(p: &Profile) -> u64 {
    let mut tables = parca_profile::Tables::new();
    let samples = parca_profile::Extractor::new(&p.tables).samples(&mut tables, &p.samples);
    let own = Profile {
        tables: std::sync::Arc::new(tables),
        meta: p.meta.clone(),
        samples,
    };
    parca_pprof::encode(&parca_profile::to_pprof(&own), true).len() as u64
}

fn labels(i: usize) -> Labels {
    Labels::new([
        (
            "__name__",
            "process_cpu:cpu:nanoseconds:cpu:nanoseconds:delta".to_owned(),
        ),
        ("job", "api".to_owned()),
        ("instance", format!("host-{i:03}:8080")),
    ])
    .expect("labels")
}

fn options() -> Options {
    Options {
        retention_ms: 0,
        ..Options::default()
    }
}

/// A store holding one day of 10-second profiles for `n_series` series, compacted.
/// Returns it with its number of (stack, value) pairs and the gzipped pprof bytes of the
/// first series' profiles.
fn build_day(dir: &Path, n_series: usize, base: &Profile) -> (Db, u64, u64) {
    let db = Db::open(dir, options()).expect("open");
    let mut rng = Lcg(42);
    let (mut pairs, mut gzipped) = (0u64, 0u64);
    let series: Vec<Labels> = (0..n_series).map(labels).collect();
    let mut t = 0;
    while t < DAY_MS {
        let mut app = db.appender();
        for (i, l) in series.iter().enumerate() {
            let p = ten_seconds(base, &mut rng);
            pairs += p.samples.len() as u64;
            if i == 0 {
                gzipped += gzipped_pprof_bytes(&p);
            }
            app.append(l, t, &p).expect("append");
        }
        app.commit().expect("commit");
        t += STEP_MS;
    }
    db.compact().expect("compact");
    (db, pairs, gzipped)
}

fn report_size(what: &str, db: &Db, pairs: u64, gzipped_per_pair: f64) {
    let s = db.stats();
    let per_pair = s.block_bytes as f64 / (s.n_samples - s.n_head_samples).max(1) as f64;
    let all_per_pair = (s.block_bytes + s.wal_bytes) as f64 / pairs as f64;
    println!(
        "{what}: {pairs} pairs; blocks {} bytes in {} blocks = {per_pair:.3} bytes/pair \
         (with WAL of the head: {all_per_pair:.3}); gzipped pprof {gzipped_per_pair:.3} bytes/pair \
         = {:.1}x larger; head {} bytes for {} samples = {:.2} bytes/sample",
        s.block_bytes,
        s.n_blocks,
        gzipped_per_pair / per_pair,
        s.head_sample_bytes,
        s.n_head_samples,
        s.head_sample_bytes as f64 / s.n_head_samples.max(1) as f64,
    );
}

/// Nanoseconds this thread has run on a CPU (Linux' schedstat): a per-core figure that other
/// processes competing for the cores do not inflate, unlike wall time.
/// The CPU time of the whole process, in nanoseconds: a merge's helper threads count too.
fn process_cpu_ns() -> Option<u64> {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid, writable timespec for the call's duration.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut t) };
    (rc == 0).then(|| t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64)
}

/// Prints the pairs merged per second of CPU time over a few warm merges.
fn report_merge_cpu(what: &str, db: &Db, matcher: &Matcher) {
    let q = || {
        db.querier(0, DAY_MS)
            .merge(std::slice::from_ref(matcher))
            .expect("merge")
            .expect("profiles")
    };
    q(); // warm: symbols decoded, pages cached
    let n_pairs = db
        .querier(0, DAY_MS)
        .n_samples(std::slice::from_ref(matcher))
        .expect("query");
    let (Some(start), wall) = (process_cpu_ns(), std::time::Instant::now()) else {
        return;
    };
    let rounds = 3;
    for _ in 0..rounds {
        std::hint::black_box(q());
    }
    let cpu_s = (process_cpu_ns().unwrap_or(start) - start) as f64 / 1e9;
    println!(
        "{what}: merge of {n_pairs} pairs: {:.1} M pairs per CPU-second ({:.1} M per wall second)",
        rounds as f64 * n_pairs as f64 / cpu_s / 1e6,
        rounds as f64 * n_pairs as f64 / wall.elapsed().as_secs_f64() / 1e6,
    );
}

fn storage(c: &mut Criterion) {
    let base = corpus_cpu();
    let n_many: usize = std::env::var("PARCA_BENCH_SERIES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);

    let one_dir = tempfile::tempdir().expect("tempdir");
    let (one, one_pairs, gzipped) = build_day(one_dir.path(), 1, &base);
    let gzipped_per_pair = gzipped as f64 / one_pairs as f64;
    report_size("1 series, 1 day", &one, one_pairs, gzipped_per_pair);
    let many_dir = tempfile::tempdir().expect("tempdir");
    let (many, many_pairs, _) = build_day(many_dir.path(), n_many, &base);
    report_size(
        &format!("{n_many} series, 1 day"),
        &many,
        many_pairs,
        gzipped_per_pair,
    );

    let all = Matcher::new(MatchOp::Equal, "job", "api").expect("matcher");
    report_merge_cpu("1 series, 1 day", &one, &all);
    report_merge_cpu(&format!("{n_many} series, 1 day"), &many, &all);
    let mut group = c.benchmark_group("day_of_10s_cpu_profiles");
    group.sample_size(10);
    let mut stores = vec![(1, &one)];
    if n_many != 1 {
        stores.push((n_many, &many));
    }
    for (n, db) in stores {
        let n_pairs = db
            .querier(0, DAY_MS)
            .n_samples(std::slice::from_ref(&all))
            .expect("query");
        group.throughput(Throughput::Elements(n_pairs as u64));
        group.bench_function(BenchmarkId::new("merge", format!("{n} series")), |b| {
            b.iter(|| {
                db.querier(0, DAY_MS)
                    .merge(std::slice::from_ref(&all))
                    .expect("merge")
                    .expect("profiles")
            })
        });
        if n == 1 {
            group.bench_function(
                BenchmarkId::new("select then parca_profile::merge", format!("{n} series")),
                |b| {
                    b.iter(|| {
                        let series = db
                            .querier(0, DAY_MS)
                            .select(std::slice::from_ref(&all))
                            .expect("query");
                        parca_profile::merge(
                            series
                                .iter()
                                .flat_map(|s| s.profiles.iter().map(|(_, p)| p)),
                        )
                        .expect("merge")
                    })
                },
            );
        }
        group.bench_function(BenchmarkId::new("totals", format!("{n} series")), |b| {
            b.iter(|| {
                db.querier(0, DAY_MS)
                    .totals(std::slice::from_ref(&all))
                    .expect("query")
            })
        });
    }
    group.finish();
    drop((one, many));
}

/// Postings of 100,000 series: 10 jobs × 10,000 instances, 20 zones.
fn postings(c: &mut Criterion) {
    let series: Vec<Labels> = (0..100_000)
        .map(|i| {
            Labels::new([
                ("__name__", "cpu".to_owned()),
                ("job", format!("job-{}", i % 10)),
                ("instance", format!("host-{i}")),
                ("zone", format!("zone-{}", i % 20)),
            ])
            .expect("labels")
        })
        .collect();
    let mut mem = MemPostings::new();
    for (i, l) in series.iter().enumerate() {
        mem.add(i as u32, l);
    }
    let matchers = [
        Matcher::new(MatchOp::Equal, "job", "job-3").expect("matcher"),
        Matcher::new(MatchOp::Equal, "zone", "zone-13").expect("matcher"),
        Matcher::new(MatchOp::NotEqual, "__name__", "heap").expect("matcher"),
    ];
    let mut group = c.benchmark_group("postings_intersection");
    group.throughput(Throughput::Elements(series.len() as u64));
    group.bench_function("head, 100k series, job ∧ zone ∧ name≠", |b| {
        b.iter(|| mem.select(&matchers))
    });

    // The same series in a block, one profile each, read through the mmapped index.
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(dir.path(), options()).expect("open");
    let mut rng = Lcg(1);
    let base = corpus_cpu();
    let tiny = base.retain_samples(|_| rng.below(10_000) < 2);
    let mut app = db.appender();
    for l in &series {
        app.append(l, 0, &tiny).expect("append");
    }
    app.commit().expect("commit");
    let mut app = db.appender();
    app.append(&series[0], 4 * 3_600_000, &tiny)
        .expect("append");
    app.commit().expect("commit");
    db.compact().expect("compact");
    assert!(db.stats().n_blocks > 0);
    group.bench_function(
        "block, 100k series, job ∧ zone ∧ name≠ (series labels)",
        |b| b.iter(|| db.querier(0, 3_600_000).series(&matchers).expect("query")),
    );
    group.finish();
}

criterion_group!(benches, postings, storage);
criterion_main!(benches);
