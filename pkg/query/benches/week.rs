//! A week of a fleet, read whole: 1,000 series (10 services of 100 instances), a CPU profile
//! every 10 s for 7 days (60 million profiles, about 30 stacks each drawn from the service's
//! 2,000 stacks of the corpus' `large.cpu`, hot ones more often), written straight into blocks
//! of 18 hours (the longest blocks compaction writes under the default 15-day retention), so
//! with their summaries. Measured on the warm store:
//!
//! - the merge of all of it (`merge(type)` over the 7 days, aligned to the hour) and over the
//!   7 days up to an unaligned time (the last week from "now": stored profiles at the edges);
//! - the metrics graph of every series at 1-hour steps over the 7 days (`query_range`), and the
//!   same at steps that do not fall on the hour (every profile's total from the index);
//! - once, for comparison, the merge of one day without summaries.
//!
//! Run:
//!
//!     cargo bench -p parca-query --bench week
//!     SERIES=100 DAYS=2 cargo bench -p parca-query --bench week   # smaller
//!     STORE_DIR=/tmp/week cargo bench …   # where the store is kept between runs
//!
//! Writing the store takes several minutes; it is kept (by default in the system's temporary
//! directory) and reused while its profiles are within the retention time.

// A bench binary's output is its product.
#![allow(clippy::print_stdout)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use criterion::Criterion;
use parca_profile::tables::{LabelSetId, StackId};
use parca_profile::{Profile, Samples};
use parca_query::{Engine, InstantQuery, Limits, RangeQuery};
use parca_tsdb::{Backfill, Db, Labels, Options};

const TYPE: &str = "process_cpu:cpu:nanoseconds:cpu:nanoseconds:delta";
const HOUR_MS: i64 = 3_600_000;
const DAY_MS: i64 = 24 * HOUR_MS;
const STEP_MS: i64 = 10_000;
/// Blocks of 18 hours: three block durations of 2 hours, times three.
const BLOCK_MS: i64 = 18 * HOUR_MS;
const SERVICES: usize = 10;
const STACKS_PER_SERVICE: usize = 2_000;
const STACKS_PER_PROFILE: usize = 30;

struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n.max(1)
    }
}

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn corpus_cpu() -> Profile {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/testdata/pprof/published/google-pprof/large.cpu"
    );
    let profiles =
        parca_profile::decode(&std::fs::read(path).expect("corpus"), &Default::default())
            .expect("decodes");
    parca_profile::select_sample_type(profiles, Some("cpu"), None).expect("cpu")
}

fn labels(series: usize) -> Labels {
    Labels::new([
        ("__name__", TYPE.to_owned()),
        ("service", format!("svc-{}", series % SERVICES)),
        (
            "instance",
            format!("10.0.{}.{}:8080", series / 250, series % 250),
        ),
    ])
    .expect("labels")
}

/// One 10-second profile of a service whose stacks are `pool`: about 30 of them, the first
/// (hottest) most often, each 1 to 20 periods.
fn ten_seconds(base: &Profile, pool: &[StackId], rng: &mut Lcg) -> Profile {
    let mut stacks: Vec<StackId> = (0..STACKS_PER_PROFILE)
        .map(|_| {
            let a = rng.below(pool.len() as u64) + 1;
            let b = rng.below(a) + 1;
            pool[rng.below(b) as usize]
        })
        .collect();
    stacks.sort_unstable();
    stacks.dedup();
    let period = base.meta.period.max(1);
    let values = stacks
        .iter()
        .map(|_| period * (1 + rng.below(20) as i64))
        .collect();
    let mut meta = base.meta.clone();
    meta.duration_nanos = STEP_MS * 1_000_000;
    Profile {
        tables: Arc::clone(&base.tables),
        meta,
        samples: Samples {
            labels: vec![LabelSetId::EMPTY; stacks.len()],
            stacks,
            values,
            diff_base: None,
            spans: None,
        },
    }
}

/// Writes the store: one backfill per block, every series' profiles of its 18 hours.
fn build(dir: &Path, start_ms: i64, n_series: usize, days: i64) -> u64 {
    let base = corpus_cpu();
    let mut rng = Lcg(42);
    let pools: Vec<Vec<StackId>> = (0..SERVICES)
        .map(|_| {
            (0..STACKS_PER_SERVICE)
                .map(|_| base.samples.stacks[rng.below(base.samples.len() as u64) as usize])
                .collect()
        })
        .collect();
    let series: Vec<Labels> = (0..n_series).map(labels).collect();
    let options = Options {
        block_duration_ms: BLOCK_MS,
        ..Options::default()
    };
    let end_ms = start_ms + days * DAY_MS;
    let started = Instant::now();
    let mut pairs = 0u64;
    let mut block_start = start_ms;
    while block_start < end_ms {
        let block_end = (block_start + BLOCK_MS).min(end_ms);
        let mut backfill = Backfill::new(dir, &options).with_max_buffered_bytes(usize::MAX);
        let mut t = block_start;
        while t < block_end {
            for (i, l) in series.iter().enumerate() {
                let p = ten_seconds(&base, &pools[i % SERVICES], &mut rng);
                pairs += p.samples.len() as u64;
                // Scrapes spread over the 10 seconds.
                backfill
                    .add(l, t + (i as i64 * 7) % STEP_MS, &p)
                    .expect("add");
            }
            t += STEP_MS;
        }
        backfill.write().expect("write blocks");
        println!(
            "  wrote up to {:.1} days: {pairs} pairs, {:.0} s",
            (block_end - start_ms) as f64 / DAY_MS as f64,
            started.elapsed().as_secs_f64()
        );
        block_start = block_end;
    }
    pairs
}

/// The store for `n_series` over `days`, reused from `STORE_DIR` (or the temporary directory)
/// while its profiles are within the default retention time.
fn store(n_series: usize, days: i64) -> (Arc<Db>, i64, u64) {
    let dir: PathBuf = std::env::var_os("STORE_DIR").map_or_else(
        || std::env::temp_dir().join(format!("parca-bench-week-{n_series}-{days}")),
        PathBuf::from,
    );
    let marker = dir.join("bench-week.txt");
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64;
    let kept = std::fs::read_to_string(&marker).ok().and_then(|s| {
        let mut it = s.split_whitespace().map(|v| v.parse::<i64>().ok());
        Some((it.next()??, it.next()??))
    });
    let (start_ms, pairs) = match kept {
        // Retention (15 days) counts back from now: the week must stay inside it.
        Some((start_ms, pairs)) if start_ms > now_ms - 14 * DAY_MS => {
            println!("reusing the store in {}", dir.display());
            (start_ms, pairs as u64)
        }
        _ => {
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).expect("store directory");
            // The week ends a day ago; blocks start on multiples of 18 hours.
            let start_ms = (now_ms - (days + 1) * DAY_MS).div_euclid(BLOCK_MS) * BLOCK_MS;
            println!(
                "writing {n_series} series × {days} days to {} …",
                dir.display()
            );
            let pairs = build(&dir, start_ms, n_series, days);
            std::fs::write(&marker, format!("{start_ms} {pairs}\n")).expect("marker");
            (start_ms, pairs)
        }
    };
    let db = Db::open(&dir, Options::default()).expect("open");
    db.compact().expect("compact");
    let s = db.stats();
    let summary_bytes: u64 = db.blocks().iter().map(|b| b.summary_bytes).sum();
    println!(
        "store: {n_series} series, {} profiles, {pairs} pairs in {} blocks of {} bytes = \
         {:.3} bytes/pair, of which summaries' profiles {summary_bytes} bytes = {:.3} bytes/pair",
        s.n_profiles,
        s.n_blocks,
        s.block_bytes,
        s.block_bytes as f64 / pairs.max(1) as f64,
        summary_bytes as f64 / pairs.max(1) as f64
    );
    (Arc::new(db), start_ms, pairs)
}

fn main() {
    let n_series = env("SERIES", 1_000);
    let days = env("DAYS", 7) as i64;
    let (db, start_ms, _) = store(n_series, days);
    let end_ms = start_ms + days * DAY_MS;
    let limits = Limits {
        max_samples: usize::MAX,
        ..Limits::default()
    };
    let engine = Engine::new(Arc::clone(&db), limits);
    let merge = parca_querylang::parse(&format!("merge({TYPE})")).expect("valid");
    let selector = parca_querylang::parse(TYPE).expect("valid");
    // The last week from a "now" that is not on the hour.
    let unaligned = (start_ms + 17 * 60_000 + 3_000, end_ms - 42 * 60_000 - 1_000);

    // Once, without summaries: one day's merge reads every profile (`PRELUDE=0` skips this).
    if std::env::var("PRELUDE").as_deref() != Ok("0") {
        prelude(&db, start_ms, end_ms, unaligned);
    }

    let mut c = Criterion::default().configure_from_args().sample_size(10);
    let mut group = c.benchmark_group(format!("week_{n_series}_series_{days}_days"));
    group.bench_function("merge_all", |b| {
        b.iter(|| {
            engine
                .instant(&merge, &InstantQuery::over(start_ms + 1, end_ms))
                .expect("evaluates")
        })
    });
    group.bench_function("merge_all_unaligned", |b| {
        b.iter(|| {
            engine
                .instant(&merge, &InstantQuery::over(unaligned.0, unaligned.1))
                .expect("evaluates")
        })
    });
    let hourly = RangeQuery {
        start_ms: start_ms + HOUR_MS,
        end_ms,
        step_ms: HOUR_MS,
    };
    group.bench_function("range_1h_steps", |b| {
        b.iter(|| engine.range(&selector, &hourly).expect("evaluates"))
    });
    let off_the_hour = RangeQuery {
        start_ms: hourly.start_ms + 17_000,
        ..hourly
    };
    group.bench_function("range_1h_steps_unaligned", |b| {
        b.iter(|| engine.range(&selector, &off_the_hour).expect("evaluates"))
    });
    group.finish();
    c.final_summary();
}

/// What the timed reads are weighed against: one day's merge without summaries (timed once),
/// and the pairs each merge of the week reads.
fn prelude(db: &Db, start_ms: i64, end_ms: i64, unaligned: (i64, i64)) {
    let started = Instant::now();
    let day = db
        .querier(start_ms + 1, start_ms + DAY_MS)
        .merge(&[])
        .expect("merge");
    println!(
        "merge of one day without summaries: {:.2} s ({} stacks)",
        started.elapsed().as_secs_f64(),
        day.map_or(0, |p| p.samples.len())
    );
    let n_read = |min: i64, max: i64| {
        db.querier(min, max)
            .with_summaries(i64::MAX)
            .n_samples(&[])
            .expect("n_samples")
    };
    println!(
        "pairs read by the merge of the week: {} aligned, {} unaligned",
        n_read(start_ms + 1, end_ms),
        n_read(unaligned.0, unaligned.1)
    );
}
