//! Finding the separate debug file of a stripped object, as gdb and perf do: by build id under
//! a debug directory (`/usr/lib/debug/.build-id/ab/cdef….debug`), then by `.gnu_debuglink`
//! next to the object, in its `.debug/` subdirectory and under the debug directory
//! (`/usr/lib/debug/usr/bin/gzip.debug`).
//!
//! A candidate is accepted only if it is the right file: same build id when the object has
//! one, else the CRC32 that `.gnu_debuglink` records.

use std::fs::File;
use std::path::{Path, PathBuf};

use crate::{BuildId, DebugNeeds, read_build_id};

/// Where to look for one object's debug file.
#[derive(Debug, Clone)]
pub struct DebugFileQuery<'a> {
    /// What the object has (build id, `.gnu_debuglink`): [`crate::read_debug_needs`].
    pub needs: &'a DebugNeeds,
    /// The object itself as opened (never accepted as its own debug file).
    pub object_path: &'a Path,
    /// The object's directory as it can be opened (for a process in a container,
    /// `/proc/PID/root/usr/bin`).
    pub object_dir: Option<&'a Path>,
    /// The object's directory as its process names it (`/usr/bin`), joined under each debug
    /// directory for `.gnu_debuglink`.
    pub object_dir_in_process: Option<&'a Path>,
    /// Debug directories, searched in order (`/usr/lib/debug`).
    pub debug_dirs: &'a [PathBuf],
}

/// The path under a debug directory that gdb's build-id lookup uses:
/// `.build-id/<first byte>/<rest>.debug`; `None` for a build id under two bytes.
pub fn build_id_path(build_id: &BuildId) -> Option<PathBuf> {
    let hex = build_id.to_string();
    (hex.len() > 2).then(|| PathBuf::from(format!(".build-id/{}/{}.debug", &hex[..2], &hex[2..])))
}

/// The object's debug file, open, with its path; `None` when no candidate exists or matches.
pub fn find_debug_file(query: &DebugFileQuery<'_>) -> Option<(File, PathBuf)> {
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(rel) = query.needs.build_id.as_ref().and_then(build_id_path) {
        candidates.extend(query.debug_dirs.iter().map(|d| d.join(&rel)));
    }
    if let Some(link) = &query.needs.debug_link {
        if let Some(dir) = query.object_dir {
            candidates.push(dir.join(&link.name));
            candidates.push(dir.join(".debug").join(&link.name));
        }
        if let Some(dir) = query.object_dir_in_process {
            let rel = dir.strip_prefix("/").unwrap_or(dir);
            candidates.extend(
                query
                    .debug_dirs
                    .iter()
                    .map(|d| d.join(rel).join(&link.name)),
            );
        }
    }
    let own = std::fs::canonicalize(query.object_path).ok();
    candidates.into_iter().find_map(|path| {
        if own.is_some() && std::fs::canonicalize(&path).ok() == own {
            return None;
        }
        let file = File::open(&path).ok()?;
        matches(query.needs, &file, &path).then_some((file, path))
    })
}

/// Whether `file` is the debug file of an object with `needs`.
fn matches(needs: &DebugNeeds, file: &File, path: &Path) -> bool {
    if let Some(id) = &needs.build_id {
        return read_build_id(file, path).ok().flatten().as_ref() == Some(id);
    }
    let Some(link) = &needs.debug_link else {
        return false;
    };
    crc32_of(file).is_some_and(|crc| crc == link.crc)
}

/// The CRC-32 of the whole of `file`, read by position (whatever its offset, which other
/// readers may share).
fn crc32_of(file: &File) -> Option<u32> {
    use std::os::unix::fs::FileExt;
    let mut hasher = crc32fast::Hasher::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut at = 0u64;
    loop {
        match file.read_at(&mut buf, at) {
            Ok(0) => return Some(hasher.finalize()),
            Ok(n) => {
                hasher.update(&buf[..n]);
                at += n as u64;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    use super::*;
    use crate::{ElfObject, SymbolSource, read_debug_needs};

    /// A small C program: `exported` is in `.dynsym` (`-rdynamic`), `hidden` (static, right
    /// after it in `.text`) only in `.symtab`.
    const SOURCE: &str = r#"
        volatile int sink;
        __attribute__((noinline)) int exported(int x) { sink = x; return x * 3; }
        __attribute__((noinline)) static int hidden(int x) {
            for (int i = 0; i < x; i++) sink += i * x;
            return sink;
        }
        int main(int argc, char **argv) { (void)argv; return exported(argc) + hidden(argc); }
    "#;

    fn run(cmd: &mut Command) -> bool {
        cmd.output().is_ok_and(|o| o.status.success())
    }

    /// Builds `SOURCE` into `dir/name` with `extra` gcc flags; `None` (said on stderr) without
    /// gcc or binutils.
    fn build(dir: &Path, name: &str, extra: &[&str]) -> Option<PathBuf> {
        let src = dir.join("prog.c");
        std::fs::write(&src, SOURCE).ok()?;
        let bin = dir.join(name);
        let ok = run(Command::new("gcc")
            .args(["-O1", "-g", "-rdynamic", "-fno-inline"])
            .args(extra)
            .arg("-o")
            .arg(&bin)
            .arg(&src));
        if !ok {
            #[allow(clippy::print_stderr)]
            {
                eprintln!("SKIP: gcc or binutils missing (apt-get install gcc binutils)");
            }
            return None;
        }
        Some(bin)
    }

    /// Address of symbol `name` in `bin` (from `nm`).
    fn address_of(bin: &Path, name: &str) -> u64 {
        let out = Command::new("nm").arg(bin).output().unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .find_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.len() == 3 && f[2] == name).then(|| u64::from_str_radix(f[0], 16).unwrap())
            })
            .unwrap_or_else(|| panic!("{name} not in {}", bin.display()))
    }

    fn names(obj: &ElfObject, vaddr: u64) -> Vec<String> {
        obj.symbolize(vaddr)
            .into_iter()
            .map(|f| f.function)
            .collect()
    }

    #[test]
    fn an_address_past_its_symbols_end_is_unknown_not_a_wrong_name() {
        let dir = tempfile::tempdir().unwrap();
        let Some(bin) = build(dir.path(), "prog", &[]) else {
            return;
        };
        let hidden = address_of(&bin, "hidden") + 4;
        let exported = address_of(&bin, "exported");
        assert!(run(Command::new("strip").arg("--strip-all").arg(&bin)));
        let obj = ElfObject::open(&bin).unwrap();
        assert_eq!(obj.symbol_source(), SymbolSource::Dynsym);
        assert_eq!(names(&obj, exported + 1), ["exported"]);
        // `hidden` is gone with `.symtab`: no `.dynsym` entry may claim its address, neither
        // `exported` (sized, ends before it) nor `_init` (unsized, in another section).
        assert_eq!(names(&obj, hidden), Vec::<String>::new());
    }

    #[test]
    fn debug_file_by_build_id() {
        let dir = tempfile::tempdir().unwrap();
        let Some(bin) = build(dir.path(), "prog", &["-Wl,--build-id"]) else {
            return;
        };
        let hidden = address_of(&bin, "hidden") + 4;
        let needs_before = read_debug_needs(&File::open(&bin).unwrap(), &bin).unwrap();
        assert!(!needs_before.wants_debug_file());
        let id = needs_before.build_id.clone().unwrap();
        let root = dir.path().join("debug");
        let debug = root.join(build_id_path(&id).unwrap());
        std::fs::create_dir_all(debug.parent().unwrap()).unwrap();
        assert!(run(Command::new("objcopy")
            .arg("--only-keep-debug")
            .arg(&bin)
            .arg(&debug)));
        assert!(run(Command::new("strip").arg("--strip-all").arg(&bin)));

        let file = File::open(&bin).unwrap();
        let needs = read_debug_needs(&file, &bin).unwrap();
        assert!(needs.wants_debug_file() && needs.debug_link.is_none());
        let dirs = [root.clone()];
        let query = DebugFileQuery {
            needs: &needs,
            object_path: &bin,
            object_dir: bin.parent(),
            object_dir_in_process: bin.parent(),
            debug_dirs: &dirs,
        };
        let (dfile, dpath) = find_debug_file(&query).expect("found by build id");
        assert_eq!(dpath, debug);
        let obj = ElfObject::read_with_debug_file(
            &file,
            &bin,
            Some((&dfile, &dpath)),
            crate::DEFAULT_MAX_DWARF_BYTES,
        )
        .unwrap();
        assert_eq!(obj.symbol_source(), SymbolSource::DebugFile);
        assert!(obj.has_dwarf());
        let frames = obj.symbolize(hidden);
        assert_eq!(frames.last().unwrap().function, "hidden", "{frames:?}");
        assert!(frames[0].file.as_deref().unwrap().ends_with("prog.c"));

        // A debug file of another build is refused.
        let other = build(dir.path(), "other", &["-Wl,--build-id", "-DOTHER=1", "-O2"]).unwrap();
        std::fs::copy(&other, &debug).unwrap();
        assert!(find_debug_file(&query).is_none());
    }

    #[test]
    fn debug_file_by_gnu_debuglink() {
        let dir = tempfile::tempdir().unwrap();
        // No build id: only the CRC says it is the right file.
        let Some(bin) = build(dir.path(), "prog", &["-Wl,--build-id=none"]) else {
            return;
        };
        let hidden = address_of(&bin, "hidden") + 4;
        let dot_debug = dir.path().join(".debug");
        std::fs::create_dir_all(&dot_debug).unwrap();
        let debug = dot_debug.join("prog.debug");
        assert!(run(Command::new("objcopy")
            .arg("--only-keep-debug")
            .arg(&bin)
            .arg(&debug)));
        assert!(run(Command::new("strip").arg("--strip-all").arg(&bin)));
        // objcopy records the CRC of the file it is given, found by name beside the binary.
        assert!(run(Command::new("objcopy")
            .arg(format!("--add-gnu-debuglink={}", debug.display()))
            .arg(&bin)));
        let file = File::open(&bin).unwrap();
        let needs = read_debug_needs(&file, &bin).unwrap();
        assert_eq!(needs.build_id, None);
        assert_eq!(needs.debug_link.as_ref().unwrap().name, "prog.debug");
        let query = DebugFileQuery {
            needs: &needs,
            object_path: &bin,
            object_dir: bin.parent(),
            object_dir_in_process: None,
            debug_dirs: &[],
        };
        let (dfile, dpath) = find_debug_file(&query).expect("found in .debug/");
        assert_eq!(dpath, debug);
        let obj =
            ElfObject::read_with_debug_file(&file, &bin, Some((&dfile, &dpath)), 1 << 24).unwrap();
        assert_eq!(names(&obj, hidden).last().unwrap(), "hidden");
        assert_eq!(obj.debug_path(), Some(debug.as_path()));

        // Under a debug directory, by the binary's directory as its process names it.
        let root = dir.path().join("root");
        let in_process = Path::new("/opt/app/bin");
        let under = root.join("opt/app/bin");
        std::fs::create_dir_all(&under).unwrap();
        std::fs::rename(&debug, under.join("prog.debug")).unwrap();
        let dirs = [root];
        let query = DebugFileQuery {
            object_dir_in_process: Some(in_process),
            debug_dirs: &dirs,
            ..query
        };
        assert_eq!(find_debug_file(&query).unwrap().1, under.join("prog.debug"));

        // A changed debug file no longer matches the CRC.
        std::fs::write(under.join("prog.debug"), b"not it").unwrap();
        assert!(find_debug_file(&query).is_none());
    }

    #[test]
    fn symbols_from_gnu_debugdata() {
        let dir = tempfile::tempdir().unwrap();
        let Some(bin) = build(dir.path(), "prog", &[]) else {
            return;
        };
        let hidden = address_of(&bin, "hidden") + 4;
        // As Fedora makes MiniDebugInfo: the functions `.dynsym` lacks, in a symbol table of
        // their own, xz-compressed into `.gnu_debugdata`.
        let d = dir.path();
        let keep = d.join("keep");
        std::fs::write(&keep, "hidden\n").unwrap();
        let mini = d.join("mini");
        if !run(Command::new("xz").arg("--version")) {
            #[allow(clippy::print_stderr)]
            {
                eprintln!(
                    "SKIP: symbols_from_gnu_debugdata: xz missing (apt-get install xz-utils)"
                );
            }
            return;
        }
        assert!(run(Command::new("objcopy")
            .arg("--only-keep-debug")
            .arg(&bin)
            .arg(d.join("full.debug"))));
        assert!(run(Command::new("objcopy")
            .arg("-S")
            .arg(format!("--keep-symbols={}", keep.display()))
            .arg(d.join("full.debug"))
            .arg(&mini)));
        assert!(run(Command::new("xz").arg("-f").arg(&mini)));
        assert!(run(Command::new("strip").arg("--strip-all").arg(&bin)));
        assert!(run(Command::new("objcopy")
            .arg(format!(
                "--add-section=.gnu_debugdata={}",
                d.join("mini.xz").display()
            ))
            .arg(&bin)));
        let obj = ElfObject::open(&bin).unwrap();
        assert_eq!(obj.symbol_source(), SymbolSource::GnuDebugdata);
        assert_eq!(names(&obj, hidden), ["hidden"]);
        // `.dynsym`'s functions are still named.
        assert_eq!(
            names(&obj, address_of_dynamic(&bin, "exported") + 1),
            ["exported"]
        );
    }

    fn address_of_dynamic(bin: &Path, name: &str) -> u64 {
        let out = Command::new("nm").arg("-D").arg(bin).output().unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .find_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.len() == 3 && f[2] == name).then(|| u64::from_str_radix(f[0], 16).unwrap())
            })
            .unwrap()
    }
}
