//! Golden tests of query evaluation: each `golden/NAME.query` is evaluated over a fixture store
//! of real corpus profiles and must print `golden/NAME.result` (refresh with
//! `UPDATE_GOLDEN=1`). The merged numbers are also checked against google/pprof.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use parca_profile::{Profile, TopTable};
use parca_query::{Engine, InstantQuery, Limits, RangeQuery};
use parca_tsdb::{Db, Labels};

use crate::pprof_oracle::{oracle_merge, oracle_top, our_rows};
use crate::support::{corpus_dir, pprof_oracle, read};

/// The fixture's first timestamp: 2023-11-14T22:13:20Z.
const T0: i64 = 1_700_000_000_000;

/// (profile name, job, instance, corpus file, number of profiles 10 s apart from T0).
const FIXTURE: &[(&str, &str, &str, &str, i64)] = &[
    ("process_cpu", "go", "a:6060", "go/go-cpu.pb.gz", 6),
    ("process_cpu", "go", "b:6060", "go/go-cpu-b.pb.gz", 6),
    (
        "process_cpu",
        "prometheus",
        "p:9090",
        "prometheus/prometheus-cpu.pb.gz",
        3,
    ),
    (
        "process_cpu",
        "python",
        "py:8081",
        "python/python-cpu.pb.gz",
        3,
    ),
    ("memory", "go", "a:6060", "go/go-heap.pb.gz", 2),
    (
        "memory",
        "prometheus",
        "p:9090",
        "prometheus/prometheus-heap.pb.gz",
        2,
    ),
];

fn decode(path: &Path) -> Vec<Profile> {
    parca_profile::decode(&read(path), &Default::default())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A store holding the fixture, through the same path as scraped profiles (split by sample
/// labels, named by type).
fn fixture() -> (tempfile::TempDir, Engine) {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(dir.path(), Default::default()).expect("open store");
    let mut appender = db.appender();
    for &(name, job, instance, file, n) in FIXTURE {
        let target = Labels::new([("job", job), ("instance", instance)]).expect("labels");
        for i in 0..n {
            let mut profiles = decode(&corpus_dir().join(file));
            for p in &mut profiles {
                p.meta.time_nanos = 0;
            }
            let timestamp = T0 + i * 10_000;
            for series in
                parca_ingest::to_series(name, &target, profiles, timestamp).expect("series")
            {
                appender
                    .append(&series.labels, series.timestamp_ms, &series.profile)
                    .expect("append");
            }
        }
    }
    appender.commit().expect("commit");
    (dir, Engine::new(Arc::new(db), Limits::default()))
}

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("e2e/golden")
}

/// `50s` after T0 → milliseconds.
fn offset_ms(text: &str) -> i64 {
    T0 + text
        .strip_suffix('s')
        .and_then(|s| s.parse::<i64>().ok())
        .unwrap_or_else(|| panic!("offset `{text}`: write seconds such as 50s"))
        * 1000
}

fn render_profile(out: &mut String, profile: &Profile) {
    let table = TopTable::build(profile);
    out.push_str(&format!(
        "type {} unit {} total {}",
        table.sample_type, table.unit, table.total
    ));
    if let Some(base) = table.base_total {
        out.push_str(&format!(" base_total {base}"));
    }
    out.push('\n');
    for row in table.rows.iter().take(8) {
        out.push_str(&format!("  flat {:>12} cum {:>12}", row.flat, row.cum));
        if let (Some(bf), Some(bc)) = (row.base_flat, row.base_cum) {
            out.push_str(&format!(" base_flat {bf:>12} base_cum {bc:>12}"));
        }
        out.push_str(&format!("  {}\n", row.name));
    }
}

/// Evaluates one golden query file and prints its result.
fn evaluate(engine: &Engine, text: &str) -> String {
    let mut lines = text.lines();
    let header = lines.next().expect("a header line");
    let query: String = lines.collect::<Vec<_>>().join("\n");
    let expr = match parca_querylang::parse(&query) {
        Ok(expr) => expr,
        Err(e) => return format!("parse error: {}\n", e.render(&query)),
    };
    let words: Vec<&str> = header.trim_start_matches('#').split_whitespace().collect();
    let mut out = String::new();
    match words.as_slice() {
        ["time:", at] => match engine.instant(&expr, &InstantQuery::at(offset_ms(at))) {
            Err(e) => out.push_str(&format!("error: {e}\n")),
            Ok(groups) => {
                for g in groups {
                    out.push_str(&format!("group {} profiles {}\n", g.labels, g.n_profiles));
                    render_profile(&mut out, &g.profile);
                }
            }
        },
        ["range:", start, end, step] => {
            let query = RangeQuery {
                start_ms: offset_ms(start),
                end_ms: offset_ms(end),
                step_ms: offset_ms(step) - T0,
            };
            match engine.range(&expr, &query) {
                Err(e) => out.push_str(&format!("error: {e}\n")),
                Ok(series) => {
                    for s in series {
                        out.push_str(&format!("series {} unit {}", s.labels, s.unit));
                        if let Some(u) = &s.period_unit {
                            out.push_str(&format!(" period_unit {u}"));
                        }
                        out.push('\n');
                        for p in s.points {
                            out.push_str(&format!(
                                "  +{}s {}",
                                (p.timestamp_ms - T0) / 1000,
                                p.value
                            ));
                            if let Some(v) = p.period_value {
                                out.push_str(&format!(" ({v})"));
                            }
                            out.push('\n');
                        }
                    }
                }
            }
        }
        _ => panic!("header `{header}`: write `# time: 50s` or `# range: 0s 50s 10s`"),
    }
    out
}

#[test]
fn golden_queries() {
    let (_dir, engine) = fixture();
    let update = std::env::var_os("UPDATE_GOLDEN").is_some();
    let mut files: Vec<PathBuf> = std::fs::read_dir(golden_dir())
        .expect("golden dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "query"))
        .collect();
    files.sort();
    assert!(files.len() >= 10, "only {} golden queries", files.len());
    let mut failures = Vec::new();
    for path in files {
        let text = std::fs::read_to_string(&path).expect("query file");
        let got = evaluate(&engine, &text);
        let result_path = path.with_extension("result");
        if update {
            std::fs::write(&result_path, &got).expect("write result");
            continue;
        }
        let want = std::fs::read_to_string(&result_path).unwrap_or_default();
        if got != want {
            failures.push(format!(
                "{}:\n--- want\n{want}--- got\n{got}",
                path.display()
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "golden results differ (UPDATE_GOLDEN=1 refreshes):\n{}",
        failures.join("\n")
    );
}

/// The evaluator's merge of the fixture equals google/pprof's merge of the same files.
#[test]
fn evaluated_merge_agrees_with_pprof() {
    let Some(pprof) = pprof_oracle() else { return };
    let (_dir, engine) = fixture();
    let tmp = tempfile::tempdir().expect("tempdir");
    for (query, files) in [
        (
            r#"merge(process_cpu:cpu:nanoseconds:cpu:nanoseconds:delta{job="go"}[1m])"#,
            vec![("go/go-cpu.pb.gz", 6), ("go/go-cpu-b.pb.gz", 6)],
        ),
        (
            r#"merge(memory:inuse_space:bytes:space:bytes{job=~"go|prometheus"}[1m])"#,
            vec![
                ("go/go-heap.pb.gz", 2),
                ("prometheus/prometheus-heap.pb.gz", 2),
            ],
        ),
    ] {
        let expr = parca_querylang::parse(query).expect("valid");
        let groups = engine
            .instant(&expr, &InstantQuery::at(T0 + 55_000))
            .expect("evaluates");
        let ours = &groups[0].profile;
        let paths: Vec<PathBuf> = files
            .iter()
            .flat_map(|&(f, n)| std::iter::repeat_n(corpus_dir().join(f), n))
            .collect();
        let merged = tmp.path().join("merged.pb.gz");
        oracle_merge(&pprof, &paths, &merged);
        let index = decode(&merged)
            .iter()
            .position(|p| p.meta.sample_type == ours.meta.sample_type)
            .expect("same sample type in pprof's merge");
        let theirs = oracle_top(&pprof, &merged, index, &ours.meta.sample_type.unit);
        assert_eq!(our_rows(ours), theirs, "{query}");
    }
}
