//! Backfill from files: saved pprof profiles (and folders of them) named as a push names them
//! and written as complete blocks into a store's directory (`parca import`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use parca_pprof::DecodeOptions;
use parca_tsdb::{Backfill, Labels, RetentionHorizon, WrittenBlock};

use crate::{Error, to_series};

/// What an import takes besides its files.
#[derive(Debug, Clone)]
pub struct ImportOptions {
    /// The profile name, the first part of every series' `__name__` (`process_cpu`,
    /// `memory`), as `/api/v1/write?__name__=` takes it.
    pub name: String,
    /// Labels of every series, as a push's query parameters give them.
    pub labels: Labels,
    /// The time (ms since the epoch) of profiles whose file carries none (`time_nanos` 0, as
    /// in google/pprof's legacy formats); without it such a file is bad.
    pub default_time_ms: Option<i64>,
    /// Whether a file that cannot be imported is reported and skipped (`true`) or stops the
    /// import before anything is written (`false`).
    pub skip_bad: bool,
    /// The store's block duration (how profiles are grouped into blocks), stack limit and
    /// retention time: a file with a profile older than the store keeps
    /// ([`parca_tsdb::RetentionHorizon::of_store_dir`]) is bad, since the server would delete
    /// it at once (a `retention_ms` of 0 imports any age).
    pub store: parca_tsdb::Options,
    /// Limits of decoding, as for pushes.
    pub decode: DecodeOptions,
}

/// A file that could not be imported, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadFile {
    /// The file.
    pub path: PathBuf,
    /// What is wrong with it.
    pub fault: String,
}

/// What an import did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImportReport {
    /// Files imported (bad ones not counted).
    pub n_files: usize,
    /// Profiles written, one per series and time.
    pub n_profiles: usize,
    /// Distinct series written.
    pub n_series: usize,
    /// Profiles left out because an earlier one had the same series and time (the same
    /// profile as the store counts them: a file given twice, or files with one time).
    pub n_duplicates: usize,
    /// The oldest and newest profile time written, ms.
    pub time_range_ms: Option<(i64, i64)>,
    /// The blocks written, oldest first.
    pub blocks: Vec<WrittenBlock>,
    /// Files skipped (with [`ImportOptions::skip_bad`]).
    pub bad_files: Vec<BadFile>,
}

/// Every file under `paths` (directories walked recursively, each sorted by name), in order.
pub fn list_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>, Error> {
    let mut out = Vec::new();
    for path in paths {
        let meta = std::fs::metadata(path).map_err(|e| Error::ImportFile {
            path: path.clone(),
            fault: format!("cannot read: {e}"),
        })?;
        if !meta.is_dir() {
            out.push(path.clone());
            continue;
        }
        let mut dirs = vec![path.clone()];
        let mut found = Vec::new();
        while let Some(dir) = dirs.pop() {
            let entries = std::fs::read_dir(&dir).map_err(|e| Error::ImportFile {
                path: dir.clone(),
                fault: format!("cannot list directory: {e}"),
            })?;
            for entry in entries {
                let entry = entry.map_err(|e| Error::ImportFile {
                    path: dir.clone(),
                    fault: format!("cannot list directory: {e}"),
                })?;
                let p = entry.path();
                if p.is_dir() {
                    dirs.push(p);
                } else {
                    found.push(p);
                }
            }
        }
        found.sort();
        out.extend(found);
    }
    Ok(out)
}

/// Imports the pprof files under `paths` into the store in `dir`: each file is decoded as a
/// push's body is (anything [`parca_pprof::decode`] reads), split into series as
/// `/api/v1/write` splits it ([`to_series`]), stamped with its own time (or
/// [`ImportOptions::default_time_ms`]), and the lot is written as complete blocks, one per
/// block-duration window ([`Backfill`]): nothing is in place before every file was read, and
/// then each block appears whole. The store may be in use by a running server, which picks the
/// blocks up at its next scan of the directory (within seconds).
///
/// A bad file is an [`Error::ImportFile`] naming it and its fault, and nothing is written,
/// unless [`ImportOptions::skip_bad`] reports it in [`ImportReport::bad_files`] instead.
pub fn import(
    paths: &[PathBuf],
    dir: &Path,
    options: &ImportOptions,
) -> Result<ImportReport, Error> {
    // A bad name is no fault of any one file.
    to_series(&options.name, &options.labels, Vec::new(), 0)?;
    let files = list_files(paths)?;
    let mut backfill = Backfill::new(dir, &options.store);
    let mut report = ImportReport::default();
    let mut series = BTreeSet::new();
    let horizon = RetentionHorizon::of_store_dir(dir, options.store.retention_ms);
    for path in &files {
        let file = FileImport {
            options,
            horizon: horizon.as_ref(),
        };
        match file.import(path, &mut backfill, &mut series, &mut report) {
            Ok(()) => report.n_files += 1,
            Err(fault) if options.skip_bad => report.bad_files.push(BadFile {
                path: path.clone(),
                fault,
            }),
            Err(fault) => {
                return Err(Error::ImportFile {
                    path: path.clone(),
                    fault,
                });
            }
        }
    }
    report.n_series = series.len();
    report.blocks = backfill.write().map_err(Error::Store)?;
    Ok(report)
}

/// What each file is imported with.
struct FileImport<'a> {
    options: &'a ImportOptions,
    /// The oldest time the store keeps, when retention by time is on.
    horizon: Option<&'a RetentionHorizon>,
}

impl FileImport<'_> {
    /// Adds one file's profiles to `backfill`, all of them or none; the error is the file's fault.
    fn import(
        &self,
        path: &Path,
        backfill: &mut Backfill,
        series: &mut BTreeSet<Labels>,
        report: &mut ImportReport,
    ) -> Result<(), String> {
        let options = self.options;
        let bytes = std::fs::read(path).map_err(|e| format!("cannot read: {e}"))?;
        let profiles = parca_profile::decode(&bytes, &options.decode)
            .map_err(|e| format!("is not a usable pprof profile: {e}"))?;
        if options.default_time_ms.is_none() && profiles.iter().any(|p| p.meta.time_nanos <= 0) {
            return Err(
            "carries no time (`time_nanos` is 0, as in pprof's legacy formats): give one with --time"
                .into(),
        );
        }
        let batch = to_series(
            &options.name,
            &options.labels,
            profiles,
            options.default_time_ms.unwrap_or(0),
        )
        .map_err(|e| e.to_string())?;
        // Checked before anything is added, so that a file goes in whole or not at all.
        if let Some(horizon) = self.horizon
            && let Some(refusal) = batch
                .iter()
                .find_map(|s| horizon.check(&s.labels, s.timestamp_ms).err())
        {
            return Err(format!(
                "{refusal} (to import it anyway, for a server with a longer retention, pass \
             --allow-past-retention)"
            ));
        }
        let limit = options.store.max_stacks_per_profile;
        if let Some(s) = batch.iter().find(|s| s.profile.samples.len() > limit) {
            return Err(format!(
                "series {}: profile has {} stacks, more than the limit of {limit}",
                s.labels,
                s.profile.samples.len()
            ));
        }
        for s in &batch {
            let added = backfill
                .add(&s.labels, s.timestamp_ms, &s.profile)
                .map_err(|e| e.to_string())?;
            if !added {
                report.n_duplicates += 1;
                continue;
            }
            report.n_profiles += 1;
            report.time_range_ms = Some(match report.time_range_ms {
                None => (s.timestamp_ms, s.timestamp_ms),
                Some((min, max)) => (min.min(s.timestamp_ms), max.max(s.timestamp_ms)),
            });
            if !series.contains(&s.labels) {
                series.insert(s.labels.clone());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn corpus(rel: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/testdata/pprof")
            .join(rel)
    }

    fn options(name: &str) -> ImportOptions {
        ImportOptions {
            name: name.into(),
            labels: Labels::new([("job", "incident")]).expect("valid"),
            default_time_ms: None,
            skip_bad: false,
            store: parca_tsdb::Options {
                retention_ms: 0,
                ..Default::default()
            },
            decode: DecodeOptions::default(),
        }
    }

    #[test]
    fn a_folder_is_imported_as_pushes_name_it_with_each_files_time() {
        let dir = tempfile::tempdir().expect("tempdir");
        let many = corpus("published/parca/many");
        let report =
            import(std::slice::from_ref(&many), dir.path(), &options("memory")).expect("imported");
        let files = list_files(&[many]).expect("listed");
        assert_eq!(report.n_files, files.len());
        assert!(report.bad_files.is_empty());
        assert_eq!(report.blocks.len(), 1, "{:?}", report.blocks);
        // The series are the ones a push of each file makes.
        let mut pushed = BTreeSet::new();
        let mut n_profiles = 0;
        for f in &files {
            let profiles =
                parca_profile::decode(&std::fs::read(f).expect("read"), &Default::default())
                    .expect("decodes");
            for s in to_series("memory", &options("memory").labels, profiles, 0).expect("series") {
                n_profiles += 1;
                pushed.insert(s.labels);
            }
        }
        assert_eq!(report.n_series, pushed.len());
        assert_eq!(report.n_profiles, n_profiles);
        let (min, max) = report.time_range_ms.expect("some");
        // Their own times: February 2022.
        assert!(
            min >= 1_644_509_272_337 && max <= 1_644_509_300_000,
            "{min} {max}"
        );
        let db = parca_tsdb::Db::open(dir.path(), options("memory").store).expect("open");
        let stored = db.querier(i64::MIN, i64::MAX).series(&[]).expect("query");
        assert_eq!(stored, pushed.into_iter().collect::<Vec<_>>());
    }

    #[test]
    fn a_bad_file_stops_the_import_before_anything_is_written_or_is_skipped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let bad = dir.path().join("notes.txt");
        std::fs::write(&bad, "not a profile").expect("write");
        let store = dir.path().join("data");
        let paths = [
            corpus("go/go-cpu.pb.gz"),
            bad.clone(),
            corpus("go/go-heap.pb.gz"),
        ];
        let err = import(&paths, &store, &options("process_cpu")).expect_err("bad file");
        let text = err.to_string();
        assert!(
            text.contains("notes.txt") && text.contains("is not a usable pprof profile"),
            "{text}"
        );
        assert!(
            !store.exists() || std::fs::read_dir(&store).expect("list").count() == 0,
            "nothing written"
        );
        let skipping = ImportOptions {
            skip_bad: true,
            ..options("process_cpu")
        };
        let report = import(&paths, &store, &skipping).expect("skips");
        assert_eq!(report.n_files, 2);
        assert_eq!(report.bad_files.len(), 1);
        assert_eq!(report.bad_files[0].path, bad);
        assert_eq!(report.blocks.len(), 1);
    }

    #[test]
    fn a_file_without_time_needs_one_given() {
        let dir = tempfile::tempdir().expect("tempdir");
        let legacy = corpus("published/google-pprof/legacy/cppbench.heap");
        let err = import(
            std::slice::from_ref(&legacy),
            dir.path(),
            &options("memory"),
        )
        .expect_err("no time");
        assert!(err.to_string().contains("--time"), "{err}");
        let timed = ImportOptions {
            default_time_ms: Some(1_600_000_000_000),
            ..options("memory")
        };
        // Imported twice: the same profiles, kept once.
        let report = import(&[legacy.clone(), legacy], dir.path(), &timed).expect("imported");
        assert_eq!(
            report.time_range_ms,
            Some((1_600_000_000_000, 1_600_000_000_000))
        );
        assert_eq!(report.n_duplicates, report.n_profiles);
    }

    #[test]
    fn a_bad_name_is_refused_before_any_file_is_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let err = import(
            &[corpus("go/go-cpu.pb.gz")],
            dir.path(),
            &options("not-a-name"),
        )
        .expect_err("bad name");
        assert!(matches!(err, Error::InvalidName { .. }), "{err}");
    }
}
