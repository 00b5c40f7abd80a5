//! What a user reads: the files they open without looking at the code. Regression: the root
//! `parca.yaml` pointed the reader to "issue #5", which means nothing outside the team.

use std::path::{Path, PathBuf};

/// The files a user reads: the root's configuration and README, the documentation, the UI's
/// static files.
fn user_facing_files() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = vec![root.join("parca.yaml"), root.join("README.md")];
    let mut dirs = vec![root.join("documentation"), root.join("web/static")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("readable directory") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files
}

#[test]
fn no_user_facing_file_refers_to_our_issues() {
    let mut found = Vec::new();
    for path in user_facing_files() {
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue; // not text (an image)
        };
        for (i, line) in text.lines().enumerate() {
            if mentions_an_issue(line) {
                found.push(format!("{}:{}: {line}", path.display(), i + 1));
            }
        }
    }
    assert!(
        found.is_empty(),
        "references to issues:\n{}",
        found.join("\n")
    );
}

/// Whether `line` says "issue #N" (any case), or "#N" right after "issue".
fn mentions_an_issue(line: &str) -> bool {
    let lower = line.to_ascii_lowercase();
    lower.match_indices("issue").any(|(at, _)| {
        let rest = lower[at + 5..].trim_start_matches([' ', 's']);
        rest.starts_with('#') && rest[1..].starts_with(|c: char| c.is_ascii_digit())
    })
}
