//! Agreement with google/pprof, the reference tool: the top table, merge, and the pprof we export.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use parca_pprof::DecodeOptions;
use parca_profile::{Profile, TopTable};

use crate::support::{corpus_dir, corpus_files, pprof_oracle, read};

/// Per function: (flat, cum).
pub(crate) type Rows = BTreeMap<String, (i64, i64)>;

/// The `-unit` that makes pprof print exact integers in the profile's own unit.
fn unit_flag(unit: &str) -> Option<&'static str> {
    match unit {
        "nanoseconds" => Some("ns"),
        "microseconds" => Some("us"),
        "bytes" => Some("B"),
        _ => None,
    }
}

/// google/pprof's merge of `paths` (`pprof -proto`), written to `out`.
pub(crate) fn oracle_merge(pprof: &Path, paths: &[std::path::PathBuf], out: &Path) {
    let tmp = out.parent().expect("a file in a directory");
    let output = Command::new(pprof)
        .arg("-proto")
        .arg("-symbolize=none")
        .args(paths)
        .env("PPROF_TMPDIR", tmp)
        .output()
        .expect("run pprof");
    assert!(
        output.status.success(),
        "pprof -proto: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    std::fs::write(out, &output.stdout).expect("write pprof's merge");
}

/// Runs google/pprof on sample type `sample_index` of `file` with `args` and every node kept
/// (`-nodecount=1000000 -nodefraction=0 -edgefraction=0`), values printed as exact integers in
/// `unit` where pprof has a flag for it; returns what it printed.
pub(crate) fn run_pprof(
    pprof: &Path,
    file: &Path,
    sample_index: usize,
    unit: &str,
    args: &[&str],
) -> String {
    let mut cmd = Command::new(pprof);
    cmd.args(args)
        .args(["-nodecount=1000000", "-nodefraction=0", "-edgefraction=0"])
        .arg(format!("-sample_index={sample_index}"))
        .env("PPROF_TMPDIR", std::env::temp_dir())
        // No symbolization from local binaries or servers: compare what the file says.
        .env("PPROF_BINARY_PATH", "/nonexistent");
    if let Some(u) = unit_flag(unit) {
        cmd.arg(format!("-unit={u}"));
    }
    let output = cmd
        .arg("-symbolize=none")
        .arg(file)
        .output()
        .expect("run pprof");
    assert!(
        output.status.success(),
        "pprof {args:?} failed on {}: {}",
        file.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A value as [`run_pprof`] prints it in `unit` (`1230000ns`, `42`).
pub(crate) fn pprof_value(token: &str, unit: &str) -> i64 {
    let number = unit_flag(unit)
        .and_then(|s| token.strip_suffix(s))
        .unwrap_or(token);
    number
        .parse::<f64>()
        .unwrap_or_else(|_| panic!("pprof printed {token:?}")) as i64
}

/// Runs `pprof -top` over every node and parses its rows.
pub(crate) fn oracle_top(pprof: &Path, file: &Path, sample_index: usize, unit: &str) -> Rows {
    oracle_top_with(pprof, file, sample_index, unit, &[])
}

/// [`oracle_top`] with more flags, such as `-lines`.
pub(crate) fn oracle_top_with(
    pprof: &Path,
    file: &Path,
    sample_index: usize,
    unit: &str,
    flags: &[&str],
) -> Rows {
    let mut args = vec!["-top"];
    args.extend_from_slice(flags);
    let stdout = run_pprof(pprof, file, sample_index, unit, &args);
    let mut rows = Rows::new();
    let mut in_table = false;
    for line in stdout.lines() {
        if line.trim_start().starts_with("flat  flat%") {
            in_table = true;
            continue;
        }
        if !in_table {
            continue;
        }
        let mut rest = line.trim_start();
        let mut tokens = Vec::new();
        for _ in 0..5 {
            let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
            tokens.push(&rest[..end]);
            rest = rest[end..].trim_start();
        }
        // pprof prints whether a node was inlined after its name; it is not part of the name.
        let name = rest
            .trim_end_matches(" (inline)")
            .trim_end_matches(" (partial-inline)");
        let entry = rows.entry(name.to_owned()).or_default();
        entry.0 += pprof_value(tokens[0], unit);
        entry.1 += pprof_value(tokens[3], unit);
    }
    rows
}

pub(crate) fn our_rows(profile: &Profile) -> Rows {
    TopTable::build(profile)
        .rows
        .into_iter()
        .filter(|r| r.flat != 0 || r.cum != 0)
        .map(|r| (r.name, (r.flat, r.cum)))
        .collect()
}

fn framed_total(profile: &Profile) -> i64 {
    let s = &profile.samples;
    (0..s.len())
        .filter(|&i| s.stacks[i] != parca_profile::tables::StackId::EMPTY)
        .map(|i| s.values[i])
        .sum()
}

fn decode(path: &Path) -> Vec<Profile> {
    parca_profile::decode(&read(path), &DecodeOptions::default())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn top_table_equals_pprof_top_for_every_corpus_file() {
    let Some(pprof) = pprof_oracle() else { return };
    let mut compared = 0;
    for (name, path) in corpus_files() {
        for (i, profile) in decode(&path).iter().enumerate() {
            let theirs = oracle_top(&pprof, &path, i, &profile.meta.sample_type.unit);
            assert_eq!(
                our_rows(profile),
                theirs,
                "{name}, sample type {}",
                profile.meta.sample_type
            );
            compared += 1;
        }
    }
    assert!(compared >= 100, "only {compared} sample types compared");
}

#[test]
fn merge_equals_pprof_proto_merge() {
    let Some(pprof) = pprof_oracle() else { return };
    let dir = corpus_dir();
    let groups: [&[&str]; 3] = [
        &[
            "go/go-cpu.pb.gz",
            "go/go-cpu-b.pb.gz",
            "prometheus/prometheus-cpu.pb.gz",
            "published/google-pprof/sample.cpu",
            "published/parca/labels.pb.gz",
        ],
        &[
            "go/go-heap.pb.gz",
            "go/go-allocs.pb.gz",
            "prometheus/prometheus-heap.pb.gz",
        ],
        &[
            "published/parca/many/1644509272337470000.pb.gz",
            "published/parca/many/1644509275338070000.pb.gz",
            "published/parca/many/1644509278338696000.pb.gz",
            "published/parca/many/1644509281339135000.pb.gz",
            "published/parca/many/1644509284338649000.pb.gz",
            "published/parca/many/1644509287338709000.pb.gz",
            "published/parca/many/1644509290338056000.pb.gz",
            "published/parca/many/1644509293338714000.pb.gz",
            "published/parca/many/1644509296350592000.pb.gz",
            "published/parca/many/1644509299337903000.pb.gz",
        ],
    ];
    let tmp = tempfile::tempdir().expect("tempdir");
    for (g, group) in groups.iter().enumerate() {
        let paths: Vec<_> = group.iter().map(|f| dir.join(f)).collect();
        let merged_path = tmp.path().join(format!("merged-{g}.pb.gz"));
        oracle_merge(&pprof, &paths, &merged_path);
        let theirs = decode(&merged_path);
        let decoded: Vec<Vec<Profile>> = paths.iter().map(|p| decode(p)).collect();
        // The same files normalized into one set of tables, as `parca profile` reads them.
        let mut tables = parca_profile::Tables::new();
        let normalized: Vec<_> = paths
            .iter()
            .map(|p| {
                let pprof = parca_pprof::decode(&read(p), &DecodeOptions::default())
                    .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
                parca_profile::normalize_into(&pprof, &mut tables)
                    .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
            })
            .collect();
        let tables = std::sync::Arc::new(tables);
        for (i, their) in theirs.iter().enumerate() {
            let ours = parca_profile::merge(decoded.iter().map(|ps| &ps[i])).expect("compatible");
            let shared: Vec<Profile> = normalized
                .iter()
                .map(|parts| Profile {
                    tables: std::sync::Arc::clone(&tables),
                    meta: parts[i].0.clone(),
                    samples: parts[i].1.clone(),
                })
                .collect();
            let ours_shared = parca_profile::merge(&shared).expect("compatible");
            assert_eq!(
                our_rows(&ours_shared),
                our_rows(&ours),
                "group {g}, sample type {}: one set of tables",
                their.meta.sample_type
            );
            // google/pprof's merge drops samples that have no frame at all (prometheus-cpu has one);
            // we keep them, as its `-top` does in its total: compare the totals of framed samples.
            assert_eq!(
                framed_total(&ours),
                framed_total(their),
                "group {g}, sample type {}",
                their.meta.sample_type
            );
            assert_eq!(
                our_rows(&ours),
                our_rows(their),
                "group {g}, sample type {}",
                their.meta.sample_type
            );
            // And pprof's own reading of its merge agrees with our numbers.
            let oracle = oracle_top(&pprof, &merged_path, i, &their.meta.sample_type.unit);
            assert_eq!(
                our_rows(&ours),
                oracle,
                "group {g}, sample type {}",
                their.meta.sample_type
            );
        }
    }
}

#[test]
fn exported_pprof_opens_in_pprof_with_the_same_numbers() {
    let Some(pprof) = pprof_oracle() else { return };
    let tmp = tempfile::tempdir().expect("tempdir");
    for (name, path) in corpus_files() {
        for (i, profile) in decode(&path).iter().enumerate() {
            let exported = tmp
                .path()
                .join(format!("{}-{i}.pb.gz", name.replace('/', "_")));
            std::fs::write(
                &exported,
                parca_pprof::encode(&parca_profile::to_pprof(profile), true),
            )
            .expect("write");
            let theirs = oracle_top(&pprof, &exported, 0, &profile.meta.sample_type.unit);
            assert_eq!(
                our_rows(profile),
                theirs,
                "{name}, sample type {}",
                profile.meta.sample_type
            );
        }
    }
}

/// A capture split into series by its sample labels counts its duration once in a merge, as in
/// google/pprof's merge of the original files (regression: go-cpu.pb.gz, split into one series
/// per label set, counted its 10 s once per series).
#[test]
fn merged_duration_of_split_captures_equals_pprofs() {
    use parca_ingest::{Durability, Sink as _};
    let Some(pprof) = pprof_oracle() else { return };
    let file = corpus_dir().join("go/go-cpu.pb.gz");
    let tmp = tempfile::tempdir().expect("tempdir");
    let merged_path = tmp.path().join("merged.pb.gz");
    oracle_merge(&pprof, &vec![file.clone(); 4], &merged_path);
    let theirs = decode(&merged_path)[0].meta.duration_nanos;

    let db = std::sync::Arc::new(
        parca_tsdb::Db::open(&tmp.path().join("store"), Default::default()).expect("open"),
    );
    let bytes = read(&file);
    let mut time_ms = 0;
    let mut n_series = 0;
    for instance in ["a", "b", "c", "d"] {
        let profiles = parca_profile::decode(&bytes, &DecodeOptions::default()).expect("decodes");
        time_ms = profiles[0].meta.time_nanos / 1_000_000;
        let target = parca_tsdb::Labels::new([("instance", instance)]).expect("labels");
        let batch = parca_ingest::to_series("process_cpu", &target, profiles, 0).expect("series");
        n_series = batch.len();
        db.write(&batch, Durability::Synced).expect("stored");
    }
    assert!(n_series > 2, "the file splits into series: {n_series}");
    let engine = parca_query::Engine::new(db, Default::default());
    let expr =
        parca_querylang::parse("merge(process_cpu:cpu:nanoseconds:cpu:nanoseconds:delta[1h])")
            .expect("parses");
    let groups = engine
        .instant(&expr, &parca_query::InstantQuery::at(time_ms + 1000))
        .expect("merges");
    assert_eq!(groups[0].profile.meta.duration_nanos, theirs);
}
