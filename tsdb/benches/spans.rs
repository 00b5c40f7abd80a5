//! What span ids cost: bytes per sample on disk (compacted blocks) and in the head and WAL, for
//! profiles whose every sample belongs to a span, against the same samples without spans; and a
//! span selection's merge speed against a merge without one.
//!
//! `cargo bench -p parca-tsdb --bench spans`. One series, one hour of 10-second CPU profiles
//! drawn from the corpus' `large.cpu`: per profile, `spans` spans (5 or 100 a second) of
//! `per_span` samples each (20: 200 ms of CPU at 100 Hz, as the requests; 5: 50 ms),
//! each sample a stack drawn at random, its span id random (8 bytes, as OpenTelemetry's) and
//! its trace id random (16 bytes: one trace per root span). "Without spans" stores the same
//! profiles with the span column left out, so its rows are the (stack, value) pairs that the
//! spans' samples merge into.

#![allow(clippy::print_stdout)] // a bench reports its figures on stdout

use std::path::Path;

use parca_profile::{Profile, Samples, SpansBuilder};
use parca_tsdb::{Db, Labels, MatchOp, Matcher, Options};

#[path = "support/corpus.rs"]
mod corpus;

const HOUR_MS: i64 = 3_600_000;
const STEP_MS: i64 = 10_000;

struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        (self.next() >> 33) % n
    }
}

/// One 10-second profile of `spans` spans of `per_span` samples each, stacks from `base`.
fn spans_profile(base: &Profile, spans: usize, per_span: usize, rng: &mut Lcg) -> Profile {
    let n_stacks = base.samples.len() as u64;
    let period = base.meta.period.max(1);
    let mut builder = SpansBuilder::new(vec!["span_id".into(), "trace_id".into()]);
    let mut samples = Samples::default();
    for _ in 0..spans {
        let ids = [
            format!("{:016x}", rng.next()),
            format!("{:016x}{:016x}", rng.next(), rng.next()),
        ];
        let mut stacks: Vec<_> = (0..per_span)
            .map(|_| base.samples.stacks[rng.below(n_stacks) as usize])
            .collect();
        stacks.sort_unstable();
        stacks.dedup();
        for s in stacks {
            samples.stacks.push(s);
            samples
                .labels
                .push(parca_profile::tables::LabelSetId::EMPTY);
            samples.values.push(period * (1 + rng.below(2) as i64));
            builder.push(&ids);
        }
    }
    samples.spans = builder.finish();
    let mut meta = base.meta.clone();
    meta.duration_nanos = STEP_MS * 1_000_000;
    Profile {
        tables: base.tables.clone(),
        meta,
        samples,
    }
}

struct Figures {
    samples: u64,
    block_bytes: u64,
    head_bytes: u64,
    wal_bytes: u64,
}

/// Stores an hour of profiles (with their span column, or without) and returns its sizes:
/// the WAL's and head's before compaction, the blocks' after.
fn store(dir: &Path, profiles: &[Profile], with_spans: bool) -> (Db, Figures) {
    let options = Options {
        retention_ms: 0,
        block_duration_ms: HOUR_MS / 3,
        ..Options::default()
    };
    let db = Db::open(dir, options).expect("open");
    let labels = Labels::new([
        (
            "__name__",
            "process_cpu:cpu:nanoseconds:cpu:nanoseconds:delta",
        ),
        ("job", "api"),
    ])
    .expect("labels");
    let mut samples = 0u64;
    for (i, p) in profiles.iter().enumerate() {
        let stored = if with_spans {
            p.clone()
        } else {
            // The same samples merged without their spans, as a profile without span labels.
            parca_profile::merge([&Profile {
                samples: Samples {
                    spans: None,
                    ..p.samples.clone()
                },
                ..p.clone()
            }])
            .expect("merge")
        };
        samples += p.samples.len() as u64;
        let mut app = db.appender();
        app.append(&labels, i as i64 * STEP_MS, &stored)
            .expect("append");
        app.commit().expect("commit");
    }
    let before = db.stats();
    // A profile of another series two hours on, so that the whole hour is cut into blocks.
    let later = Labels::new([("__name__", "later"), ("job", "later")]).expect("labels");
    let mut app = db.appender();
    app.append(&later, 3 * HOUR_MS, &profiles[0])
        .expect("append");
    app.commit().expect("commit");
    db.compact().expect("compact");
    let after = db.stats();
    assert_eq!(after.n_head_profiles, 1, "the hour is in blocks");
    (
        db,
        Figures {
            samples,
            block_bytes: after.block_bytes,
            head_bytes: before.head_sample_bytes,
            wal_bytes: before.wal_bytes,
        },
    )
}

/// Thread CPU nanoseconds (Linux' schedstat).
fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn merge_cpu_ms(db: &Db, spans: Vec<Matcher>) -> f64 {
    let job = Matcher::new(MatchOp::Equal, "job", "api").expect("matcher");
    let q = || {
        db.querier(0, HOUR_MS)
            .with_span_matchers(spans.clone())
            .merge(std::slice::from_ref(&job))
            .expect("merge")
    };
    q();
    let start = thread_cpu_ns();
    let rounds = 5;
    for _ in 0..rounds {
        std::hint::black_box(q());
    }
    (thread_cpu_ns() - start) as f64 / 1e6 / rounds as f64
}

fn main() {
    let base = corpus::profile("published/google-pprof/large.cpu", "cpu");
    for (per_second, per_span) in [(5, 20), (100, 20), (100, 5)] {
        let spans = per_second * (STEP_MS as usize / 1000);
        let mut rng = Lcg(7);
        let profiles: Vec<Profile> = (0..HOUR_MS / STEP_MS)
            .map(|_| spans_profile(&base, spans, per_span, &mut rng))
            .collect();
        let with_dir = tempfile::tempdir().expect("tempdir");
        let without_dir = tempfile::tempdir().expect("tempdir");
        let (with_db, with) = store(with_dir.path(), &profiles, true);
        let (without_db, without) = store(without_dir.path(), &profiles, false);
        let per = |bytes: u64| bytes as f64 / with.samples as f64;
        println!(
            "{per_second} spans/s of {per_span} samples ({} samples): blocks {:.3} vs {:.3} bytes/sample \
             (+{:.3}); head {:.3} vs {:.3} (+{:.3}); WAL {:.3} vs {:.3} (+{:.3})",
            with.samples,
            per(with.block_bytes),
            per(without.block_bytes),
            per(with.block_bytes) - per(without.block_bytes),
            per(with.head_bytes),
            per(without.head_bytes),
            per(with.head_bytes) - per(without.head_bytes),
            per(with.wal_bytes),
            per(without.wal_bytes),
            per(with.wal_bytes) - per(without.wal_bytes),
        );
        let span = profiles[100].samples.spans.as_ref().expect("spans").spans[3][0].clone();
        let one = vec![Matcher::new(MatchOp::Equal, "span_id", span).expect("matcher")];
        println!(
            "  merge of the hour: {:.1} ms CPU with spans stored, {:.1} ms without; one span \
             selected: {:.1} ms",
            merge_cpu_ms(&with_db, Vec::new()),
            merge_cpu_ms(&without_db, Vec::new()),
            merge_cpu_ms(&with_db, one),
        );
    }
}
