//! Paths to the corpus and to outside tools.

use std::path::{Path, PathBuf};

/// `tests/testdata/pprof`.
pub fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/pprof")
}

/// Every profile file of the corpus (relative path, absolute path), sorted.
pub fn corpus_files() -> Vec<(String, PathBuf)> {
    let root = corpus_dir();
    let mut out = Vec::new();
    let mut dirs = vec![root.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("corpus dir is readable") {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                if path.file_name().is_some_and(|n| n != "ingest") {
                    dirs.push(path);
                }
            } else if !matches!(
                path.extension().and_then(|e| e.to_str()),
                Some("jsonl" | "md")
            ) {
                let rel = path
                    .strip_prefix(&root)
                    .expect("under root")
                    .to_string_lossy()
                    .into_owned();
                out.push((rel, path));
            }
        }
    }
    out.sort();
    out
}

/// Reads a file of the corpus.
pub fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// The google/pprof binary: `$PARCA_PPROF_ORACLE`, else what `tests/tools/pprof-oracle.sh`
/// builds, else `pprof` on the PATH. `None` (with a message saying why) when there is none.
pub fn pprof_oracle() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("PARCA_PPROF_ORACLE") {
        let path = PathBuf::from(path);
        assert!(
            path.exists(),
            "PARCA_PPROF_ORACLE={} does not exist",
            path.display()
        );
        return Some(path);
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_default();
    let built = home.join(".cache/parca-tests/pprof/pprof");
    if built.exists() {
        return Some(built);
    }
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|dir| dir.join("pprof"))
        .find(|p| p.exists());
    if on_path.is_none() {
        assert!(
            std::env::var_os("PARCA_REQUIRE_ORACLE").is_none(),
            "PARCA_REQUIRE_ORACLE is set but google/pprof was not found: run tests/tools/pprof-oracle.sh"
        );
        // A skip must be visible; CI sets PARCA_REQUIRE_ORACLE so it never skips there.
        #[allow(clippy::print_stderr)]
        {
            eprintln!(
                "SKIP: google/pprof not found; run tests/tools/pprof-oracle.sh or set PARCA_PPROF_ORACLE"
            );
        }
    }
    on_path
}

/// Taken by the tests that run real programs and depend on timing (the server's scrape schedule,
/// the agent's sampling), so that on a two-core machine they do not run at the same time and
/// starve each other.
pub fn exclusive() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    // A failed test poisons the lock; the others still run.
    LOCK.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
