//! Helpers for the store's unit tests: corpus profiles, deterministic variations of them, and a
//! canonical form of query answers that does not depend on ids or row order.

use std::path::Path;

use parca_profile::Profile;

use parca_profile::tables::LabelValue;

use crate::{Db, Labels, MatchOp, Matcher, NAME_LABEL, Options};

/// A store's options for tests: blocks of `block_duration_ms`, nothing deleted by retention.
pub(crate) fn store_options(block_duration_ms: i64) -> Options {
    Options {
        block_duration_ms,
        retention_ms: 0,
        ..Options::default()
    }
}

/// The profile of `sample_type` in corpus file `rel`.
pub(crate) fn corpus(rel: &str, sample_type: &str) -> Profile {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/testdata/pprof")
        .join(rel);
    let bytes = std::fs::read(&path).expect("corpus file");
    let profiles = parca_profile::decode(&bytes, &Default::default()).expect("decodes");
    parca_profile::select_sample_type(profiles, Some(sample_type), None).expect("sample type")
}

/// A small deterministic generator.
pub(crate) struct Lcg(pub u64);

impl Lcg {
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n.max(1)
    }
}

/// A variation of `p`: a random subset of its samples, so profiles differ from one another.
pub(crate) fn vary(p: &Profile, rng: &mut Lcg) -> Profile {
    let keep = 1 + rng.below(4);
    p.retain_samples(|_| rng.below(5) < keep)
}

pub(crate) fn series_labels(name: &str, job: &str, instance: &str) -> Labels {
    Labels::new([(NAME_LABEL, name), ("job", job), ("instance", instance)]).expect("valid")
}

/// A profile as sorted (frames, sample labels, value) rows, frames by name: equal for equal
/// profiles whatever their tables and row order.
pub(crate) fn canonical(p: &Profile) -> Vec<(Vec<String>, String, i64)> {
    let t = &p.tables;
    let mut rows: Vec<(Vec<String>, String, i64)> = (0..p.samples.len())
        .map(|i| {
            let frames = t
                .stack(p.samples.stacks[i])
                .iter()
                .map(|&loc| {
                    let lines = t.lines(loc);
                    if lines.is_empty() {
                        t.location_display_name(loc)
                    } else {
                        lines
                            .iter()
                            .map(|l| {
                                format!("{}:{}", t.string(t.function(l.function).name), l.line)
                            })
                            .collect::<Vec<_>>()
                            .join(";")
                    }
                })
                .collect();
            let labels = t
                .label_set(p.samples.labels[i])
                .iter()
                .map(|l| match l.value {
                    LabelValue::Str(s) => format!("{}={}", t.string(l.key), t.string(s)),
                    LabelValue::Num { value, unit } => {
                        format!("{}={}{}", t.string(l.key), value, t.string(unit))
                    }
                })
                .collect::<Vec<_>>()
                .join(",");
            (frames, labels, p.samples.values[i])
        })
        .collect();
    rows.sort();
    rows
}

/// Everything a set of queries answers, in canonical form, for comparing a store with itself
/// before and after a cut, a compaction or a reopen.
pub(crate) fn answers(db: &Db, ranges: &[(i64, i64)]) -> Vec<String> {
    let matcher_sets: Vec<Vec<Matcher>> = vec![
        vec![],
        vec![Matcher::new(MatchOp::Equal, "job", "api").expect("valid")],
        vec![Matcher::new(MatchOp::Re, "instance", "a|c").expect("valid")],
        vec![
            Matcher::new(MatchOp::NotEqual, "job", "api").expect("valid"),
            Matcher::new(MatchOp::Equal, NAME_LABEL, "cpu").expect("valid"),
        ],
        vec![Matcher::new(MatchOp::Equal, "nope", "").expect("valid")],
    ];
    let mut out = Vec::new();
    for &(min, max) in ranges {
        let q = db.querier(min, max);
        for ms in &matcher_sets {
            out.push(format!("range {min}..={max} matchers {ms:?}"));
            for s in q.select(ms).expect("query") {
                out.push(format!("series {}", s.labels));
                for (t, p) in &s.profiles {
                    out.push(format!(
                        "  {t} {:?} {:?} {:?} {} {} {:?}",
                        p.meta.sample_type,
                        p.meta.period_type,
                        p.meta.comments,
                        p.meta.period,
                        p.meta.duration_nanos,
                        canonical(p)
                    ));
                }
            }
            out.push(format!("series() {:?}", q.series(ms).expect("query")));
            out.push(format!("n_samples {}", q.n_samples(ms).expect("query")));
            for t in q.totals(ms).expect("query") {
                out.push(format!("totals {} {:?} {:?}", t.labels, t.meta, t.points));
            }
            out.push(format!("names {:?}", q.label_names(ms).expect("query")));
            out.push(format!(
                "instances {:?}",
                q.label_values("instance", ms).expect("query")
            ));
            if ms.len() == 1 {
                out.push(format!(
                    "merge {:?}",
                    q.merge(ms).map(|p| p.map(|p| (
                        p.meta.time_nanos,
                        p.meta.duration_nanos,
                        p.meta.period,
                        canonical(&p)
                    )))
                ));
            }
        }
    }
    out
}

/// Appends a profile every 100 ms in `[from_ms, to_ms)` to four series of two types.
pub(crate) fn fill(db: &Db, seed: u64, from_ms: i64, to_ms: i64) {
    let cpu = corpus("go/go-cpu.pb.gz", "cpu");
    let cpu2 = corpus("prometheus/prometheus-cpu.pb.gz", "cpu");
    let heap = corpus("go/go-heap.pb.gz", "alloc_space");
    let mut rng = Lcg(seed);
    let mut t = from_ms;
    while t < to_ms {
        let mut app = db.appender();
        app.append(&series_labels("cpu", "api", "a"), t, &vary(&cpu, &mut rng))
            .expect("append");
        app.append(&series_labels("cpu", "api", "b"), t, &vary(&cpu2, &mut rng))
            .expect("append");
        app.append(
            &series_labels("cpu", "db", "c"),
            t + 7,
            &vary(&cpu, &mut rng),
        )
        .expect("append");
        app.append(
            &series_labels("heap", "api", "a"),
            t,
            &vary(&heap, &mut rng),
        )
        .expect("append");
        app.commit().expect("commit");
        t += 100;
    }
}

/// A block's `profiles` held in memory, read by ranges, counting the bytes read.
#[derive(Debug)]
pub(crate) struct MemRanges {
    pub bytes: Vec<u8>,
    pub read: std::sync::atomic::AtomicU64,
}

impl crate::RangeRead for MemRanges {
    fn len(&self) -> u64 {
        self.bytes.len() as u64
    }
    fn read(&self, offset: u64, len: u64) -> std::io::Result<Vec<u8>> {
        let (a, b) = (offset as usize, (offset + len) as usize);
        self.read
            .fetch_add(len, std::sync::atomic::Ordering::Relaxed);
        self.bytes
            .get(a..b)
            .map(<[u8]>::to_vec)
            .ok_or_else(|| std::io::Error::other("past the end"))
    }
    fn describe(&self) -> String {
        "memory".into()
    }
}
