//! Backfill end to end: the published profiles from 2022 (and google/pprof's older test files)
//! imported into a store that has cut a block of this year's profiles, which the head refused
//! them for (issue #15), then queried through the engine: each file's numbers are
//! google/pprof's, a folder imported twice counts once, and compaction of the overlapping
//! blocks changes no number.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use parca_ingest::{Durability, ImportOptions, Sink as _};
use parca_tsdb::{Db, Labels, Options};

use crate::pprof_oracle::{oracle_merge, oracle_top, our_rows};
use crate::support::{corpus_dir, pprof_oracle, read};

/// 2022-06-01T00:00:00Z: the time given to files that carry none.
const UNDATED_MS: i64 = 1_654_041_600_000;

const HOUR_MS: i64 = 3_600_000;

/// The files imported one by one: every published google/pprof file (legacy formats included)
/// and parca's 2022 profiles.
fn files() -> Vec<PathBuf> {
    let dir = corpus_dir().join("published");
    let mut out: Vec<PathBuf> = Vec::new();
    for sub in ["google-pprof", "google-pprof/legacy"] {
        let mut found: Vec<PathBuf> = std::fs::read_dir(dir.join(sub))
            .expect("corpus")
            .map(|e| e.expect("entry").path())
            .filter(|p| p.is_file())
            .collect();
        found.sort();
        out.extend(found);
    }
    out.extend(
        [
            "parca/alloc_space_delta.pb.gz",
            "parca/fgprof.pb.gz",
            "parca/stripped-cpu.stripped.pprof",
        ]
        .map(|f| dir.join(f)),
    );
    out
}

fn options() -> Options {
    Options {
        retention_ms: 0,
        ..Options::default()
    }
}

fn label_of(path: &Path) -> String {
    path.file_name()
        .expect("a file")
        .to_string_lossy()
        .replace(['.', '-'], "_")
}

fn import(paths: &[PathBuf], file_label: &str, default_time_ms: i64, store: &Path) {
    let options = ImportOptions {
        name: "backfill".into(),
        labels: Labels::new([("job", "backfill"), ("file", file_label)]).expect("labels"),
        default_time_ms: Some(default_time_ms),
        skip_bad: false,
        store: options(),
        decode: Default::default(),
    };
    let report = parca_ingest::import(paths, store, &options)
        .unwrap_or_else(|e| panic!("{file_label}: {e}"));
    assert!(
        report.n_profiles > 0 || report.n_duplicates > 0,
        "{file_label}: {report:?}"
    );
}

/// The engine's merge of a file's profiles of one sample type, over all time.
fn merged(db: &Arc<Db>, file_label: &str, type_name: &str) -> parca_profile::Profile {
    let engine = parca_query::Engine::new(Arc::clone(db), Default::default());
    let text = format!("{{__name__=\"{type_name}\", file=\"{file_label}\"}}");
    let expr = parca_querylang::parse(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
    let mut groups = engine
        .instant(
            &expr,
            &parca_query::InstantQuery::over(0, 2_000_000_000_000),
        )
        .unwrap_or_else(|e| panic!("{text}: {e}"));
    assert_eq!(groups.len(), 1, "{text}");
    groups.remove(0).profile
}

/// Per sample type of a pprof: its index, its series' type name and our own reading of it.
fn sample_types(path: &Path) -> Vec<(usize, String, parca_profile::Profile)> {
    let profiles = parca_profile::decode(&read(path), &Default::default())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    profiles
        .into_iter()
        .enumerate()
        .map(|(i, p)| (i, parca_ingest::profile_type_name("backfill", &p.meta), p))
        .collect()
}

#[test]
fn profiles_from_2022_imported_behind_a_cut_block_have_google_pprofs_numbers() {
    let oracle = pprof_oracle();
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("data");
    // This year's profiles, cut into a block: the head takes nothing before it any more.
    {
        let db = Db::open(&store, options()).expect("open");
        let cpu = read(&corpus_dir().join("go/go-cpu.pb.gz"));
        for shift_ms in [0, 3 * HOUR_MS + 1] {
            let mut profiles = parca_profile::decode(&cpu, &Default::default()).expect("decodes");
            for p in &mut profiles {
                p.meta.time_nanos += shift_ms * 1_000_000;
            }
            let target = Labels::new([("job", "live")]).expect("labels");
            let batch =
                parca_ingest::to_series("process_cpu", &target, profiles, 0).expect("series");
            db.write(&batch, Durability::Synced).expect("stored");
        }
        db.compact().expect("cut");
        assert!(db.stats().n_blocks >= 1, "{:?}", db.stats());
        let labels = Labels::new([
            ("__name__", "backfill:alloc_space:bytes:space:bytes"),
            ("job", "x"),
        ])
        .expect("labels");
        assert!(
            !db.head_takes(&labels, 1_644_509_272_337),
            "issue #15: refused before"
        );
    }

    // Imported into the stopped store: each file on its own, undated ones ten minutes apart;
    // the 2022 folder twice.
    let files = files();
    for (i, path) in files.iter().enumerate() {
        import(
            std::slice::from_ref(path),
            &label_of(path),
            UNDATED_MS + i as i64 * 600_000,
            &store,
        );
    }
    let many = corpus_dir().join("published/parca/many");
    for _ in 0..2 {
        import(std::slice::from_ref(&many), "many", UNDATED_MS, &store);
    }
    let mut many_files: Vec<PathBuf> = std::fs::read_dir(&many)
        .expect("folder")
        .map(|e| e.expect("entry").path())
        .collect();
    many_files.sort();

    let db = Arc::new(Db::open(&store, options()).expect("reopen"));
    // Our reading of each file, through the store; and google/pprof's.
    let check = |db: &Arc<Db>, when: &str| {
        let mut compared = 0;
        for path in &files {
            for (i, type_name, ours) in sample_types(path) {
                let stored = merged(db, &label_of(path), &type_name);
                let what = format!("{when}: {} {type_name}", path.display());
                assert_eq!(stored.total(), ours.total(), "{what}");
                assert_eq!(our_rows(&stored), our_rows(&ours), "{what}");
                if let Some(pprof) = &oracle {
                    let theirs = oracle_top(pprof, path, i, &ours.meta.sample_type.unit);
                    assert_eq!(our_rows(&stored), theirs, "{what}: google/pprof");
                }
                compared += 1;
            }
        }
        // The folder imported twice is the merge of its ten files, each counted once.
        let oracle_merged = oracle.as_ref().map(|pprof| {
            let out = dir.path().join("many-merged.pb.gz");
            oracle_merge(pprof, &many_files, &out);
            out
        });
        for (i, type_name, _) in sample_types(&many_files[0]) {
            let stored = merged(db, "many", &type_name);
            let each: i64 = many_files
                .iter()
                .map(|f| sample_types(f)[i].2.total())
                .sum();
            assert_eq!(
                stored.total(),
                each,
                "{when}: many {type_name}, counted once"
            );
            if let (Some(pprof), Some(out)) = (&oracle, &oracle_merged) {
                let theirs = oracle_top(pprof, out, i, &stored.meta.sample_type.unit);
                assert_eq!(
                    our_rows(&stored),
                    theirs,
                    "{when}: many {type_name}: google/pprof"
                );
            }
            compared += 1;
        }
        assert!(compared >= 30, "only {compared} sample types compared");
    };
    let overlapping = db.stats().n_blocks;
    check(&db, "over overlapping blocks");
    // Compaction merges the overlapping blocks (the folder's two, the undated files' windows).
    db.compact().expect("compact");
    assert!(db.stats().n_blocks < overlapping, "{:?}", db.stats());
    check(&db, "after compaction");
}
