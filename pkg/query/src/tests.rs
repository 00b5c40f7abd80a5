//! Evaluation over a real store filled with corpus profiles.

use std::sync::Arc;

use parca_tsdb::{Db, Labels};

use crate::{Engine, InstantQuery, Limits, RangeQuery};

const CPU: &str = "process_cpu:cpu:nanoseconds:cpu:nanoseconds:delta";

fn corpus(name: &str) -> Vec<parca_profile::Profile> {
    let path = format!(
        "{}/../../tests/testdata/pprof/go/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    parca_profile::decode(&std::fs::read(path).expect("corpus"), &Default::default())
        .expect("valid")
}

/// Two instances of a job, each with three CPU profiles 10 s apart (with labels dropped, so one
/// series per sample type), and one heap snapshot.
fn store() -> (tempfile::TempDir, Engine) {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(dir.path(), Default::default()).expect("open");
    let mut appender = db.appender();
    for (instance, file) in [("a:1", "go-cpu.pb.gz"), ("b:1", "go-cpu-b.pb.gz")] {
        for i in 0..3 {
            for mut profile in corpus(file) {
                let name = crate::select::ProfileType::parse(&format!(
                    "process_cpu:{}:{}:{}:{}:delta",
                    profile.meta.sample_type.kind,
                    profile.meta.sample_type.unit,
                    profile.meta.period_type.kind,
                    profile.meta.period_type.unit
                ))
                .expect("type");
                profile
                    .samples
                    .labels
                    .fill(parca_profile::tables::LabelSetId::EMPTY);
                let full = format!(
                    "{}:{}:{}:{}:{}:delta",
                    name.name,
                    name.sample_type,
                    name.sample_unit,
                    name.period_type,
                    name.period_unit
                );
                let labels = Labels::new([
                    ("__name__", full.as_str()),
                    ("job", "go"),
                    ("instance", instance),
                ])
                .expect("labels");
                appender
                    .append(&labels, 1_000_000 + i * 10_000, &dedup(profile))
                    .expect("append");
            }
        }
    }
    for profile in corpus("go-heap.pb.gz") {
        let full = format!(
            "memory:{}:{}:{}:{}",
            profile.meta.sample_type.kind,
            profile.meta.sample_type.unit,
            profile.meta.period_type.kind,
            profile.meta.period_type.unit
        );
        let labels = Labels::new([
            ("__name__", full.as_str()),
            ("job", "go"),
            ("instance", "a:1"),
        ])
        .expect("labels");
        appender
            .append(&labels, 1_000_000, &profile)
            .expect("append");
    }
    appender.commit().expect("commit");
    (dir, Engine::new(Arc::new(db), Limits::default()))
}

/// The profile with rows that now share stack and (empty) labels summed.
fn dedup(profile: parca_profile::Profile) -> parca_profile::Profile {
    parca_profile::merge([&profile]).expect("merge one")
}

fn instant(engine: &Engine, query: &str) -> Vec<crate::ProfileGroup> {
    let expr = parca_querylang::parse(query).expect("valid query");
    engine
        .instant(&expr, &InstantQuery::at(1_030_000))
        .expect("evaluates")
}

fn one_total(file: &str) -> i64 {
    corpus(file)
        .into_iter()
        .find(|p| p.meta.sample_type.kind == "cpu")
        .expect("cpu")
        .total()
}

#[test]
fn merge_sums_every_profile_in_the_range() {
    let (_dir, engine) = store();
    let groups = instant(&engine, &format!("merge({CPU}{{job=\"go\"}}[1m])"));
    assert_eq!(groups.len(), 1);
    let expected = 3 * (one_total("go-cpu.pb.gz") + one_total("go-cpu-b.pb.gz"));
    assert_eq!(groups[0].profile.total(), expected);
    assert_eq!(groups[0].n_profiles, 6);
}

#[test]
fn merge_by_groups_and_offset_shifts() {
    let (_dir, engine) = store();
    let groups = instant(&engine, &format!("merge by (instance) ({CPU}[1m])"));
    let totals: Vec<_> = groups
        .iter()
        .map(|g| (g.labels.to_string(), g.profile.total()))
        .collect();
    assert_eq!(
        totals,
        [
            (
                r#"{instance="a:1"}"#.to_owned(),
                3 * one_total("go-cpu.pb.gz")
            ),
            (
                r#"{instance="b:1"}"#.to_owned(),
                3 * one_total("go-cpu-b.pb.gz")
            ),
        ]
    );
    // 15 s back, the window (−45 s, 15 s] holds the first two profiles of each.
    let shifted = instant(
        &engine,
        &format!("merge({CPU}{{instance=\"a:1\"}}[1m] offset 15s)"),
    );
    assert_eq!(shifted[0].profile.total(), 2 * one_total("go-cpu.pb.gz"));
}

#[test]
fn a_selector_without_range_takes_the_latest_profile() {
    let (_dir, engine) = store();
    let groups = instant(&engine, &format!("{CPU}{{instance=\"a:1\"}}"));
    assert_eq!(groups[0].profile.total(), one_total("go-cpu.pb.gz"));
}

#[test]
fn diff_keeps_both_sides_and_filters_apply() {
    let (_dir, engine) = store();
    let groups = instant(
        &engine,
        &format!(
            "diff(merge({CPU}{{instance=\"a:1\"}}[1m]), merge({CPU}{{instance=\"b:1\"}}[1m]))"
        ),
    );
    let p = &groups[0].profile;
    assert_eq!(p.base_total(), Some(3 * one_total("go-cpu.pb.gz")));
    assert_eq!(p.total(), 3 * one_total("go-cpu-b.pb.gz"));
    let filtered = instant(&engine, &format!("merge({CPU}[1m] |= \"sha256\")"));
    let all = instant(&engine, &format!("merge({CPU}[1m])"));
    assert!(filtered[0].profile.total() > 0);
    assert!(filtered[0].profile.total() < all[0].profile.total());
}

#[test]
fn errors_say_how_to_fix_the_query() {
    let (_dir, engine) = store();
    let err = |q: &str| {
        let expr = parca_querylang::parse(q).expect("valid query");
        engine
            .instant(&expr, &InstantQuery::at(1_030_000))
            .unwrap_err()
            .to_string()
    };
    assert_eq!(
        err("merge(process_cpu:cpu:nanoseconds:cpu:nanosecond:delta)"),
        "unknown profile type `process_cpu:cpu:nanoseconds:cpu:nanosecond:delta`; did you mean `process_cpu:cpu:nanoseconds:cpu:nanoseconds:delta` or `process_cpu:samples:count:cpu:nanoseconds:delta`?"
    );
    assert!(err(&format!("sum({CPU})")).contains("ask /api/v1/query_range"));
    assert!(
        err("merge({__name__=~\"memory:.*\"})").contains("profiles of different types"),
        "{}",
        err("merge({__name__=~\"memory:.*\"})")
    );
    let tight = Engine::new(
        Arc::clone(engine.db()),
        Limits {
            max_series: 1,
            ..Limits::default()
        },
    );
    let expr = parca_querylang::parse(&format!("merge({CPU}[1m])")).expect("valid");
    assert_eq!(
        tight
            .instant(&expr, &InstantQuery::at(1_030_000))
            .unwrap_err()
            .to_string(),
        "the query selects 2 series, more than the limit of 1: narrow the selector with more matchers, such as job=\"…\" or instance=\"…\""
    );
}

#[test]
fn range_sums_windows_per_step_and_aggregates() {
    let (_dir, engine) = store();
    let range = |q: &str| {
        let expr = parca_querylang::parse(q).expect("valid query");
        engine
            .range(
                &expr,
                &RangeQuery {
                    start_ms: 1_000_000,
                    end_ms: 1_020_000,
                    step_ms: 10_000,
                },
            )
            .expect("evaluates")
    };
    let per_series = range(CPU);
    assert_eq!(per_series.len(), 2);
    assert_eq!(per_series[0].points.len(), 3);
    assert_eq!(
        per_series[0].points[0].value,
        one_total("go-cpu.pb.gz") as f64
    );
    assert_eq!(per_series[0].unit, "nanoseconds");

    let sum = range(&format!("sum({CPU})"));
    assert_eq!(sum.len(), 1);
    assert_eq!(
        sum[0].points[1].value,
        (one_total("go-cpu.pb.gz") + one_total("go-cpu-b.pb.gz")) as f64
    );
    let count = range(&format!("count by (job) ({CPU})"));
    assert_eq!(count[0].labels.to_string(), r#"{job="go"}"#);
    assert_eq!(count[0].points[0].value, 2.0);
    let top = range(&format!("topk(1, {CPU})"));
    assert_eq!(top.len(), 1);

    // Sample counts of CPU profiles also come in CPU nanoseconds.
    let samples = range("process_cpu:samples:count:cpu:nanoseconds:delta{instance=\"a:1\"}");
    let p = samples[0].points[0];
    assert_eq!(samples[0].period_unit.as_deref(), Some("nanoseconds"));
    assert_eq!(p.period_value, Some(p.value * 10_000_000.0));

    // A snapshot type takes the latest value within the lookback.
    let heap = range("memory:inuse_space:bytes:space:bytes");
    assert_eq!(heap[0].points.len(), 3);
    assert_eq!(heap[0].points[0].value, heap[0].points[2].value);
}

/// Shards that cannot be read.
struct DownShards;

impl parca_tsdb::Peers for DownShards {
    fn stores(&self) -> Vec<Result<parca_tsdb::PeerStore, String>> {
        vec![Err("shard x cannot be read".into())]
    }

    fn read(
        &self,
        asks: &[(usize, parca_tsdb::PeerRequest)],
    ) -> Vec<Result<parca_tsdb::PeerAnswer, String>> {
        asks.iter()
            .map(|_| Err("shard x did not answer".into()))
            .collect()
    }
}

#[test]
fn an_answer_without_a_shard_says_so_even_when_it_is_an_error() {
    let (_dir, engine) = store();
    engine.db().set_peers(Arc::new(DownShards));
    let engine =
        engine.with_deadline(std::time::Instant::now() + std::time::Duration::from_secs(60));
    let expr = parca_querylang::parse("merge(nope:cpu:nanoseconds:cpu:nanoseconds:delta)").unwrap();
    assert!(
        engine
            .instant(&expr, &InstantQuery::over(0, i64::MAX))
            .is_err()
    );
    assert_eq!(engine.warnings(), vec!["shard x cannot be read".to_owned()]);
    let expr =
        parca_querylang::parse("merge(process_cpu:cpu:nanoseconds:cpu:nanoseconds:delta)").unwrap();
    let engine =
        engine.with_deadline(std::time::Instant::now() + std::time::Duration::from_secs(60));
    assert!(
        engine
            .instant(&expr, &InstantQuery::over(0, i64::MAX))
            .is_ok()
    );
    assert_eq!(engine.warnings(), vec!["shard x cannot be read".to_owned()]);
}

/// The issue's query: a function's share of each instance's CPU, inclusive (any frame) and
/// self (`leaf`), equal to pprof's cum and flat over the total.
#[test]
fn a_functions_share_of_cpu_inclusive_and_self() {
    let (_dir, engine) = store();
    let profile = corpus("go-cpu.pb.gz")
        .into_iter()
        .find(|p| p.meta.sample_type.kind == "cpu")
        .expect("cpu");
    let top = parca_profile::TopTable::build(&profile);
    // The function with the most self time whose name is in no other function's name, so that
    // a substring selects it alone.
    let row = top
        .rows
        .iter()
        .filter(|r| r.flat > 0)
        .filter(|r| {
            !top.rows
                .iter()
                .any(|o| o.name != r.name && o.name.contains(&r.name))
        })
        .max_by_key(|r| r.flat)
        .expect("a function with self time");
    assert!(row.flat < row.cum, "{} calls nothing", row.name);
    let at = |q: &str| -> f64 {
        let expr = parca_querylang::parse(q).unwrap_or_else(|e| panic!("{}", e.render(q)));
        let series = engine
            .range(
                &expr,
                &RangeQuery {
                    start_ms: 1_000_000,
                    end_ms: 1_000_000,
                    step_ms: 10_000,
                },
            )
            .expect("evaluates");
        let a = series
            .iter()
            .find(|s| s.labels.get("instance") == Some("a:1"))
            .unwrap_or_else(|| panic!("{q}: no series of a:1 in {series:?}"));
        assert!(
            a.labels.get("__name__").is_none(),
            "arithmetic drops the name"
        );
        a.points[0].value
    };
    let name = &row.name;
    let total = top.total as f64;
    assert_eq!(
        at(&format!(
            r#"sum by (instance) ({CPU} |= "{name}") / sum by (instance) ({CPU})"#
        )),
        row.cum as f64 / total
    );
    assert_eq!(
        at(&format!(
            r#"sum by (instance) ({CPU} |= leaf "{name}") / sum by (instance) ({CPU})"#
        )),
        row.flat as f64 / total
    );
    // Per series, matched on all labels but the name; a comparison keeps the left value.
    assert_eq!(
        at(&format!(r#"{CPU} |= leaf "{name}" / {CPU} * 100"#)),
        row.flat as f64 / total * 100.0
    );
    assert_eq!(
        at(&format!(r#"{CPU} - {CPU} != leaf "{name}" > 0"#)),
        row.flat as f64
    );
}

/// One series of CPU profiles whose samples lie in four spans of two traces: row `i` in span
/// `i % 4`, trace `i % 2`.
fn span_store() -> (tempfile::TempDir, Engine, parca_profile::Profile) {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(dir.path(), Default::default()).expect("open");
    let mut profile = corpus("go-cpu.pb.gz")
        .into_iter()
        .find(|p| p.meta.sample_type.kind == "cpu")
        .expect("cpu");
    profile
        .samples
        .labels
        .fill(parca_profile::tables::LabelSetId::EMPTY);
    let mut profile = dedup(profile);
    let mut spans = parca_profile::SpansBuilder::new(vec!["span_id".into(), "trace_id".into()]);
    for i in 0..profile.samples.len() {
        spans.push(&[format!("{:016x}", i % 4), format!("{:032x}", i % 2)]);
    }
    profile.samples.spans = spans.finish();
    let labels = Labels::new([("__name__", CPU), ("job", "go")]).expect("labels");
    let mut appender = db.appender();
    appender
        .append(&labels, 1_020_000, &profile)
        .expect("append");
    appender.commit().expect("commit");
    (dir, Engine::new(Arc::new(db), Limits::default()), profile)
}

#[test]
fn span_and_trace_matchers_select_their_samples() {
    let (_dir, engine, profile) = span_store();
    let of = |keep: &dyn Fn(usize) -> bool| -> i64 {
        (0..profile.samples.len())
            .filter(|&i| keep(i))
            .map(|i| profile.samples.values[i])
            .sum()
    };
    let total = |q: &str| -> i64 { instant(&engine, q).iter().map(|g| g.profile.total()).sum() };
    assert_eq!(total(&format!("merge({CPU}[1m])")), profile.total());
    assert_eq!(
        total(&format!("merge({CPU}{{span_id=\"{:016x}\"}}[1m])", 1)),
        of(&|i| i % 4 == 1)
    );
    assert_eq!(
        total(&format!(
            "{CPU}{{job=\"go\", span_id=~\"{:016x}|{:016x}\"}}",
            1, 2
        )),
        of(&|i| i % 4 == 1 || i % 4 == 2),
        "a selector without range, and a list"
    );
    assert_eq!(
        total(&format!("merge({CPU}{{trace_id=\"{:032x}\"}}[1m])", 1)),
        of(&|i| i % 2 == 1)
    );
    assert_eq!(
        total(&format!("merge({CPU}{{span_id!=\"{:016x}\"}}[1m])", 0)),
        of(&|i| i % 4 != 0)
    );
    assert_eq!(total(&format!("merge({CPU}{{span_id=\"nope\"}}[1m])")), 0);
    // A diff of two spans: both sides selected by their own matchers.
    let diff = instant(
        &engine,
        &format!(
            "diff({CPU}{{span_id=\"{:016x}\"}}[1m], {CPU}{{span_id=\"{:016x}\"}}[1m])",
            0, 3
        ),
    );
    assert_eq!(diff[0].profile.total(), of(&|i| i % 4 == 3));
    assert_eq!(diff[0].profile.base_total(), Some(of(&|i| i % 4 == 0)));
    // Series are not split by span.
    let series = engine.querier(0, i64::MAX).series(&[]).expect("series");
    assert_eq!(series.len(), 1);
    assert_eq!(series[0].get("span_id"), None);
}

#[test]
fn exemplars_are_the_largest_spans_of_each_series() {
    let (_dir, engine, profile) = span_store();
    let per_span = |k: usize| -> i64 {
        (0..profile.samples.len())
            .filter(|&i| i % 4 == k)
            .map(|i| profile.samples.values[i])
            .sum()
    };
    let mut want: Vec<i64> = (0..4).map(per_span).collect();
    want.sort();
    // The selector inside an aggregation and a binary expression.
    let expr = parca_querylang::parse(&format!("sum({CPU}) / 2")).expect("valid");
    let got = engine.exemplars(&expr, 0, 2_000_000, 2).expect("exemplars");
    assert_eq!(got.len(), 1);
    let mut values: Vec<i64> = got[0].exemplars.iter().map(|e| e.value).collect();
    values.sort();
    assert_eq!(values, want[2..]);
    assert!(got[0].exemplars.iter().all(|e| e.timestamp_ms == 1_020_000));
    let span = &got[0].exemplars[0].attributes;
    assert_eq!(span[0].0, "span_id");
    assert_eq!(span[1].0, "trace_id");
    // A trace matcher keeps its spans; a selector matching nothing gives none.
    let expr = parca_querylang::parse(&format!("{CPU}{{trace_id=\"{:032x}\"}}", 1)).expect("valid");
    let got = engine
        .exemplars(&expr, 0, 2_000_000, 10)
        .expect("exemplars");
    assert_eq!(got[0].exemplars.len(), 2);
    let expr = parca_querylang::parse(&format!("{CPU}{{job=\"none\"}}")).expect("valid");
    assert!(
        engine
            .exemplars(&expr, 0, 2_000_000, 10)
            .expect("exemplars")
            .is_empty()
    );
}

#[test]
fn a_range_query_with_a_span_matcher_counts_that_span_only() {
    let (_dir, engine, profile) = span_store();
    let span_total: i64 = (0..profile.samples.len())
        .filter(|&i| i % 4 == 2)
        .map(|i| profile.samples.values[i])
        .sum();
    let range = |q: &str| {
        let expr = parca_querylang::parse(q).expect("valid query");
        let query = RangeQuery {
            start_ms: 1_020_000,
            end_ms: 1_020_000,
            step_ms: 10_000,
        };
        let series = engine.range(&expr, &query).expect("evaluates");
        series[0].points[0].value
    };
    assert_eq!(
        range(&format!("{CPU}{{span_id=\"{:016x}\"}}", 2)),
        span_total as f64
    );
    assert_eq!(range(CPU), profile.total() as f64);
}

#[test]
fn queries_sharing_reads_answer_as_alone_and_read_each_selector_once() {
    let (_dir, engine) = store();
    let shared = engine.clone().sharing_reads();
    let at = RangeQuery {
        start_ms: 1_030_000,
        end_ms: 1_030_000,
        step_ms: 30_000,
    };
    let queries = [
        format!(r#"sum by (instance) ({CPU} |= "runtime.") / sum by (instance) ({CPU})"#),
        format!(r#"sum by (instance) ({CPU} |= leaf "runtime.mallocgc")"#),
        format!(r#"sum by (instance) ({CPU} != "runtime.")"#),
        format!(r#"sum by (job) ({CPU}{{instance="a:1"}} |~ "main.*")"#),
        format!("sum by (job) ({CPU})"),
    ];
    let range = |e: &Engine, q: &str| {
        e.range(&parca_querylang::parse(q).expect("parses"), &at)
            .expect("evaluates")
    };
    for q in &queries {
        let alone = range(&engine, q);
        assert!(!alone.is_empty(), "{q}");
        assert_eq!(range(&shared, q), alone, "{q}");
    }
    // A profile stored now is seen by a query alone, not by one sharing the reads made
    // before it: those selectors were read once.
    store_one_more_cpu_profile(&engine);
    for q in &queries[..3] {
        let alone = range(&engine, q);
        assert_eq!(alone.len(), 3, "{q}");
        assert_eq!(range(&shared, q).len(), 2, "{q}");
    }
}

/// A Go CPU profile of a third instance (`c:1`) at 1,025 s, stored after the reads being tested.
fn store_one_more_cpu_profile(engine: &Engine) {
    let profile = corpus("go-cpu.pb.gz")
        .into_iter()
        .find(|p| p.meta.sample_type.kind == "cpu")
        .expect("cpu");
    let mut profile = dedup(profile);
    profile
        .samples
        .labels
        .fill(parca_profile::tables::LabelSetId::EMPTY);
    let labels = Labels::new([("__name__", CPU), ("job", "go"), ("instance", "c:1")]).unwrap();
    let mut appender = engine.db().appender();
    appender.append(&labels, 1_025_000, &profile).unwrap();
    appender.commit().unwrap();
}

#[test]
fn shared_reads_keep_no_more_than_one_querys_samples() {
    let (_dir, engine) = store();
    let at = RangeQuery {
        start_ms: 1_030_000,
        end_ms: 1_030_000,
        step_ms: 30_000,
    };
    let one = format!(r#"sum by (instance) ({CPU}{{instance="a:1"}} |= "runtime.")"#);
    let every = format!(r#"sum by (instance) ({CPU} |= "runtime.")"#);
    // The samples each reads, as the limit counts them.
    let counting = Engine::new(
        Arc::clone(engine.db()),
        Limits {
            max_samples: 0,
            ..Limits::default()
        },
    );
    let count = |q: &str| match counting.range(&parca_querylang::parse(q).unwrap(), &at) {
        Err(crate::Error::TooManySamples { n_samples, .. }) => n_samples,
        other => panic!("{other:?}"),
    };
    let (n_one, n_every) = (count(&one), count(&every));
    // Room for `every` (and for it with one more profile), not for `one` and `every` together.
    let limits = Limits {
        max_samples: n_every + n_one / 2,
        ..Limits::default()
    };
    let shared = Engine::new(Arc::clone(engine.db()), limits).sharing_reads();
    let range = |q: &str| {
        shared
            .range(&parca_querylang::parse(q).expect("parses"), &at)
            .expect("evaluates")
    };
    // One instance's profiles are kept; then all of them would pass the budget: not kept.
    assert_eq!(range(&one).len(), 1);
    assert_eq!(range(&every).len(), 2);
    store_one_more_cpu_profile(&engine);
    assert_eq!(range(&every).len(), 3, "read again, not kept");
}
