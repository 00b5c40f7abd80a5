//! Embeds every file under `static/`: writes `$OUT_DIR/assets.rs`, a sorted table of
//! (URL path, `include_bytes!` of the file, content type, ETag). Needs only std, so a fresh
//! machine with the Rust toolchain builds the UI; there is no Node step.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::{env, fs};

fn main() {
    // Read at run time, not with `env!`: a build script binary can be reused for another
    // checkout of the same package (a shared target directory), and must embed that one's files.
    // The table names files relative to `CARGO_MANIFEST_DIR` for the same reason.
    let manifest_dir = env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let root = Path::new(&manifest_dir).join("static");
    // A directory here makes Cargo rerun the script when any file below it changes.
    println!("cargo:rerun-if-changed=static");
    let mut files = Vec::new();
    walk(&root, &mut files);
    let mut entries: Vec<(String, PathBuf)> = files
        .into_iter()
        .map(|path| {
            let rel = path.strip_prefix(&root).expect("walked below root");
            let url: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            (format!("/{}", url.join("/")), path)
        })
        .collect();
    entries.sort();
    let mut out = String::from("/// Every embedded file, sorted by URL path.\n");
    out.push_str("pub(crate) static ASSETS: &[Entry] = &[\n");
    for (url, path) in &entries {
        let bytes = fs::read(path).expect("read a static file");
        writeln!(
            out,
            "    Entry {{ path: {url:?}, bytes: include_bytes!(concat!(env!(\"CARGO_MANIFEST_DIR\"), {rel:?})), content_type: {ct:?}, etag: \"\\\"{hash:016x}\\\"\" }},",
            rel = format!("/static{url}"),
            ct = content_type(path),
            hash = fnv1a(&bytes),
        )
        .expect("write to a String");
    }
    out.push_str("];\n");
    let dest = Path::new(&env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("assets.rs");
    fs::write(dest, out).expect("write assets.rs");
}

/// Files below `dir`, skipping dotfiles (editor swap files and the like).
fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = fs::read_dir(dir)
        .expect("read static/")
        .map(|e| e.expect("read a directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        let hidden = path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with('.'));
        if hidden {
            continue;
        }
        if path.is_dir() {
            walk(&path, out);
        } else {
            out.push(path);
        }
    }
}

fn content_type(path: &Path) -> &'static str {
    match path.extension().and_then(|e| e.to_str()).unwrap_or("") {
        "html" => "text/html; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "ico" => "image/x-icon",
        "json" => "application/json",
        "txt" | "md" => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}

/// FNV-1a, 64 bits: enough to tell versions of one file apart for an ETag.
fn fnv1a(bytes: &[u8]) -> u64 {
    // The FNV-1a offset basis and prime for 64 bits.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}
