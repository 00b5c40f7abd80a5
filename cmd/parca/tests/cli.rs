//! The `parca profile` and `parca import` commands, run as a user runs them: real binary, real
//! files, exit codes.
//! (These tests sit beside the binary because only here Cargo builds it for them.)

use std::path::PathBuf;
use std::process::{Command, Output};

fn corpus(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/testdata/pprof")
        .join(rel)
}

fn parca(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_parca"))
        .args(args)
        .output()
        .expect("run parca")
}

fn stdout(output: &Output) -> String {
    assert!(
        output.status.success(),
        "parca failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone()).expect("utf-8")
}

#[test]
fn top_lists_the_hottest_function_first() {
    let cpu = corpus("go/go-cpu.pb.gz");
    let out = stdout(&parca(&["profile", cpu.to_str().unwrap()]));
    let first_row = out.lines().nth(3).expect("a row");
    assert!(first_row.ends_with("main.(*counter).inc"), "{out}");
    assert!(out.contains("Total: 5.31s"), "{out}");
}

/// Regression: `parca profile -f top` printed `240290000000` where google/pprof prints
/// `240.29s`. Values are in human units as pprof scales them, raw with `--raw`.
#[test]
fn top_prints_human_units_as_pprof_does_and_raw_on_request() {
    let cpu = corpus("go/go-cpu.pb.gz");
    let out = stdout(&parca(&["profile", cpu.to_str().unwrap()]));
    // pprof -top: `1.32s 24.86% 24.86% 1.42s 26.74% main.(*counter).inc`, `940ms …`.
    let row = |name: &str| {
        out.lines()
            .find(|l| l.ends_with(name))
            .unwrap_or_else(|| panic!("no row {name}: {out}"))
            .split_whitespace()
            .collect::<Vec<_>>()
    };
    assert_eq!(
        row("main.(*counter).inc")[..4],
        ["1.32s", "24.86%", "1.42s", "26.74%"]
    );
    assert_eq!(row("crypto/sha256.block")[0], "940ms");
    let heap = corpus("go/go-heap.pb.gz");
    let out = stdout(&parca(&["profile", heap.to_str().unwrap()]));
    // Bytes in powers of 1024, as pprof: `41.63MB`, `512.20kB`.
    assert!(out.contains("Total: 42.63MB"), "{out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("  512.20kB") && l.ends_with("runtime.malg")),
        "{out}"
    );
    let raw = stdout(&parca(&["profile", "--raw", cpu.to_str().unwrap()]));
    assert!(raw.contains("Total: 5310000000"), "{raw}");
    assert!(
        raw.lines().nth(3).expect("a row").contains("1320000000"),
        "{raw}"
    );
}

#[test]
fn several_files_are_merged() {
    let (a, b) = (corpus("go/go-cpu.pb.gz"), corpus("go/go-cpu-b.pb.gz"));
    let out = stdout(&parca(&[
        "profile",
        "--format",
        "top-json",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
    ]));
    let json: serde_json::Value = serde_json::from_str(&out).expect("json");
    let one = |f: &PathBuf| {
        let out = stdout(&parca(&[
            "profile",
            "--format",
            "top-json",
            f.to_str().unwrap(),
        ]));
        serde_json::from_str::<serde_json::Value>(&out).expect("json")["total"]
            .as_i64()
            .expect("total")
    };
    assert_eq!(json["total"].as_i64(), Some(one(&a) + one(&b)));
}

#[test]
fn diff_keeps_both_sides_in_folded_output() {
    let (a, b) = (corpus("go/go-cpu.pb.gz"), corpus("go/go-cpu-b.pb.gz"));
    let out = stdout(&parca(&[
        "profile",
        "-f",
        "folded",
        a.to_str().unwrap(),
        "--diff",
        b.to_str().unwrap(),
    ]));
    for line in out.lines() {
        let fields: Vec<&str> = line.rsplitn(3, ' ').collect();
        assert_eq!(fields.len(), 3, "`stack base comparison`: {line}");
        assert!(
            fields[0].parse::<i64>().is_ok() && fields[1].parse::<i64>().is_ok(),
            "{line}"
        );
    }
}

#[test]
fn json_is_the_flame_graph_tree() {
    let heap = corpus("go/go-heap.pb.gz");
    let out = stdout(&parca(&[
        "profile",
        "-f",
        "json",
        "--sample-type",
        "inuse_space",
        heap.to_str().unwrap(),
    ]));
    let json: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(json["sample_type"], "inuse_space");
    assert_eq!(json["unit"], "bytes");
    assert_eq!(json["root"]["value"], json["total"]);
}

#[test]
fn pprof_output_decodes_to_the_same_numbers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let exported = dir.path().join("out.pb.gz");
    let cpu = corpus("prometheus/prometheus-cpu.pb.gz");
    stdout(&parca(&[
        "profile",
        "-f",
        "pprof",
        "-o",
        exported.to_str().unwrap(),
        cpu.to_str().unwrap(),
    ]));
    let top = |f: &PathBuf| stdout(&parca(&["profile", f.to_str().unwrap()]));
    assert_eq!(top(&exported), top(&cpu));
}

#[test]
fn filters_keep_and_drop_stacks() {
    let cpu = corpus("go/go-cpu.pb.gz");
    let out = stdout(&parca(&[
        "profile",
        "-f",
        "folded",
        "--contains",
        "sort.",
        "--drop",
        "runtime\\..*",
        cpu.to_str().unwrap(),
    ]));
    assert!(!out.is_empty());
    assert!(
        out.lines()
            .all(|l| l.contains("sort.") && !l.contains("runtime.")),
        "{out}"
    );
}

#[test]
fn a_bad_file_fails_with_a_clear_message() {
    let dir = tempfile::tempdir().expect("tempdir");
    let junk = dir.path().join("junk.pb.gz");
    std::fs::write(&junk, b"<html>not a profile</html>").expect("write");
    let output = parca(&["profile", junk.to_str().unwrap()]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.starts_with("parca: error: "), "{stderr}");
    assert!(
        stderr.contains(
            "junk.pb.gz` is not a usable pprof profile: profile is not protobuf (top level: \
             field `drop_frames` has wire type 4, expected a varint at byte 1), not gzip, and not \
             one of google/pprof's legacy formats"
        ),
        "{stderr}"
    );
}

#[test]
fn an_unknown_sample_type_lists_the_ones_there_are() {
    let cpu = corpus("go/go-cpu.pb.gz");
    let output = parca(&["profile", "--sample-type", "heap", cpu.to_str().unwrap()]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("profile has no sample type `heap`; it has samples, cpu"),
        "{stderr}"
    );
}

#[test]
fn files_of_different_types_are_not_merged() {
    let (cpu, heap) = (corpus("go/go-cpu.pb.gz"), corpus("go/go-heap.pb.gz"));
    let output = parca(&[
        "profile",
        "--sample-type",
        "cpu",
        cpu.to_str().unwrap(),
        heap.to_str().unwrap(),
    ]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("profile has no sample type `cpu`"),
        "{stderr}"
    );
}

/// `parca import` of a folder of 2022 profiles: one block over their 2 h window, served by a
/// store opened on the directory with the numbers of the files.
#[test]
fn import_writes_a_folder_as_blocks_a_store_serves() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("data");
    let many = corpus("published/parca/many");
    let args = [
        "import",
        "--storage-path",
        store.to_str().unwrap(),
        "--name",
        "memory",
        "--label",
        "job=incident",
        many.to_str().unwrap(),
    ];
    // Profiles from 2022 are past the default retention: refused, naming the flags and the time.
    let refused = parca(&args);
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.starts_with("parca: error: cannot import into ")
            && stderr.contains("profile at 2022-02-10T16:0")
            && stderr.contains("`--storage-retention-time` is 15d")
            && stderr.contains("--allow-past-retention"),
        "{stderr}"
    );
    assert!(!store.exists() || std::fs::read_dir(&store).unwrap().count() == 0);
    let mut allowed = args.to_vec();
    allowed.push("--allow-past-retention");
    let out = stdout(&parca(&allowed));
    assert!(
        out.starts_with("imported 10 files into ")
            && out.contains(
                "40 profiles of 4 series, from 2022-02-10T16:07:52.337Z to 2022-02-10T16:08:19.337Z"
            )
            && out.contains(
                "from 2022-02-10T16:00:00Z to 2022-02-10T18:00:00Z: 4 series, 40 profiles"
            ),
        "{out}"
    );
    let options = parca_tsdb::Options {
        retention_ms: 0,
        ..Default::default()
    };
    let db = parca_tsdb::Db::open(&store, options).expect("open");
    assert_eq!(db.stats().n_blocks, 1);
    let job = parca_tsdb::Matcher::new(parca_tsdb::MatchOp::Equal, "job", "incident").unwrap();
    let space = parca_tsdb::Matcher::new(
        parca_tsdb::MatchOp::Equal,
        "__name__",
        "memory:alloc_space:bytes:space:bytes",
    )
    .unwrap();
    let merged = db
        .querier(i64::MIN, i64::MAX)
        .merge(&[job, space])
        .expect("query")
        .expect("some");
    let want: i64 = std::fs::read_dir(&many)
        .unwrap()
        .map(|e| {
            let bytes = std::fs::read(e.unwrap().path()).unwrap();
            let profiles = parca_profile::decode(&bytes, &Default::default()).unwrap();
            parca_profile::select_sample_type(profiles, Some("alloc_space"), None)
                .unwrap()
                .total()
        })
        .sum();
    assert_eq!(merged.total(), want);
}

#[test]
fn import_stops_at_a_bad_file_naming_it_and_writes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("data");
    let junk = dir.path().join("junk.pb.gz");
    std::fs::write(&junk, b"<html>not a profile</html>").expect("write");
    let cpu = corpus("go/go-cpu.pb.gz");
    let args = [
        "import",
        "--storage-path",
        store.to_str().unwrap(),
        "--name",
        "process_cpu",
        "--allow-past-retention",
        cpu.to_str().unwrap(),
        junk.to_str().unwrap(),
    ];
    let output = parca(&args);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.starts_with("parca: error: cannot import into ")
            && stderr
                .contains("junk.pb.gz` is not a usable pprof profile: profile is not protobuf"),
        "{stderr}"
    );
    assert!(!store.exists() || std::fs::read_dir(&store).unwrap().count() == 0);
    // With --skip-bad the good file goes in and the bad one is reported.
    let mut skipping = args.to_vec();
    skipping.push("--skip-bad");
    let output = parca(&skipping);
    let out = stdout(&output);
    assert!(out.contains("skipped 1 bad file"), "{out}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("parca: skipped `") && stderr.contains("junk.pb.gz"),
        "{stderr}"
    );
    assert_eq!(std::fs::read_dir(&store).unwrap().count(), 1, "one block");
}

#[test]
fn lines_split_functions_and_the_call_graph_prints_as_json_and_dot() {
    let cpu = corpus("go/go-cpu.pb.gz");
    let cpu = cpu.to_str().unwrap();
    let out = stdout(&parca(&["profile", "--granularity", "lines", cpu]));
    let first_row = out.lines().nth(3).expect("a row");
    // As `pprof -top -lines` prints it.
    assert!(
        first_row.ends_with("main.(*counter).inc /work/steering/tools/peers/go-target/main.go:210"),
        "{out}"
    );
    let json = stdout(&parca(&["profile", "-f", "callgraph", cpu]));
    let graph: serde_json::Value = serde_json::from_str(&json).expect("JSON");
    let nodes = graph["nodes"].as_array().expect("nodes");
    assert!(nodes.len() > 50 && graph["edges"].as_array().expect("edges").len() > 50);
    let dot = stdout(&parca(&["profile", "-f", "dot", cpu]));
    assert!(dot.starts_with("digraph"), "{dot}");
    assert_eq!(
        dot.matches(" -> ").count(),
        graph["edges"].as_array().unwrap().len()
    );
    let bad = parca(&["profile", "--granularity", "files", cpu]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("not a granularity"));
}
