//! Recognizing interpreters by their objects: a CPython interpreter (the `python3.X`
//! executable, or `libpython3.X.so` loaded by another program) exports `_PyRuntime` and, from
//! 3.11, its exact version as `Py_Version`; its evaluation loop is `_PyEval_EvalFrameDefault`.

use std::fs::File;
use std::ops::Range;
use std::path::Path;

use object::read::ReadCache;
use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol, ObjectSymbolTable};

use crate::Error;
use crate::elf::elf_error;

/// What a profiler needs of a CPython interpreter's object (the `python3.X` executable or
/// `libpython3.X.so`) to read its threads' Python frames: its version, where its runtime state
/// is, and which code is the bytecode evaluation loop. Addresses are the object's virtual
/// addresses; [`PythonRuntime::vaddr_of_file_offset`] relates them to a process's mappings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PythonRuntime {
    /// The version: `3.11.2`, `3.13.0rc1`; `3.10` where only the file name says it.
    pub version: String,
    /// Major and minor version (`(3, 11)`); `None` when neither `Py_Version` nor the file name
    /// tells.
    pub major_minor: Option<(u8, u8)>,
    /// `_PyRuntime`: the interpreter's global state, where its interpreters and threads hang.
    pub runtime: u64,
    /// `_PyEval_EvalFrameDefault`, and its compiler-split `.cold` part where the object's own
    /// symbol table names it: a native frame here is running Python frames.
    pub eval_loop: Vec<Range<u64>>,
    /// The object's loadable segments: (file offset, virtual address, size in the file).
    segments: Vec<(u64, u64, u64)>,
}

impl PythonRuntime {
    /// The virtual address of file offset `offset`, when a loadable segment holds it.
    pub fn vaddr_of_file_offset(&self, offset: u64) -> Option<u64> {
        self.segments
            .iter()
            .find(|&&(start, _, size)| offset >= start && offset - start < size)
            .map(|&(start, vaddr, _)| vaddr + (offset - start))
    }

    /// Whether virtual address `vaddr` is in the evaluation loop.
    pub fn in_eval_loop(&self, vaddr: u64) -> bool {
        self.eval_loop.iter().any(|r| r.contains(&vaddr))
    }
}

/// The CPython interpreter an object holds, or `None` when it holds none (no `_PyRuntime`
/// symbol). Reads the dynamic symbol table (where CPython exports its C API, even from
/// Debian's stripped executable), eight bytes for `Py_Version`, and the symbol table when the
/// object has one (for the evaluation loop's `.cold` part).
pub fn read_python_runtime(file: &File, path: &Path) -> Result<Option<PythonRuntime>, Error> {
    let cache = ReadCache::new(file);
    let obj = object::File::parse(&cache).map_err(|source| elf_error(path, source))?;
    let mut runtime = None;
    let mut version_at = None;
    let mut eval_loop = Vec::new();
    let symbols = obj.dynamic_symbols().chain(
        obj.symbol_table()
            .into_iter()
            .flat_map(|table| table.symbols()),
    );
    // Only symbols defined here: a program linked against libpython (pyenv's `--enable-shared`
    // builds) imports `_PyRuntime` undefined, at address 0; the interpreter is the library.
    for symbol in symbols.filter(|s| !s.is_undefined() && s.address() != 0) {
        let name = symbol.name().unwrap_or("");
        let range = symbol.address()..symbol.address() + symbol.size().max(1);
        match name {
            "_PyRuntime" => runtime = Some(symbol.address()),
            "Py_Version" => version_at = Some(symbol.address()),
            // The `.cold` parts are what GCC splits off a function (`.cold`, `.cold.12`).
            _ if (name == "_PyEval_EvalFrameDefault"
                || name.starts_with("_PyEval_EvalFrameDefault.cold"))
                && !eval_loop.contains(&range) =>
            {
                eval_loop.push(range);
            }
            _ => {}
        }
    }
    let Some(runtime) = runtime else {
        return Ok(None);
    };
    let hex = version_at.and_then(|address| {
        let section = obj
            .sections()
            .find(|s| address >= s.address() && address + 4 <= s.address() + s.size())?;
        let (offset, _) = section.file_range()?;
        let at = offset + (address - section.address());
        let mut bytes = [0u8; 4];
        use std::os::unix::fs::FileExt;
        file.read_exact_at(&mut bytes, at).ok()?;
        Some(if obj.is_little_endian() {
            u32::from_le_bytes(bytes)
        } else {
            u32::from_be_bytes(bytes)
        })
    });
    let (version, major_minor) = match hex {
        Some(hex) => (
            version_of_hex(hex),
            Some(((hex >> 24) as u8, (hex >> 16) as u8)),
        ),
        None => {
            let version = version_of_name(path);
            let major_minor = version
                .split_once('.')
                .and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?)));
            (version, major_minor)
        }
    };
    let segments = obj
        .segments()
        .map(|s| {
            let (offset, size) = s.file_range();
            (offset, s.address(), size)
        })
        .collect();
    Ok(Some(PythonRuntime {
        version,
        major_minor,
        runtime,
        eval_loop,
        segments,
    }))
}

/// `PY_VERSION_HEX` as text: `0x030b02f0` → `3.11.2`, `0x030d00c1` → `3.13.0rc1`.
fn version_of_hex(hex: u32) -> String {
    let (major, minor, micro) = (hex >> 24, (hex >> 16) & 0xff, (hex >> 8) & 0xff);
    let (level, serial) = ((hex >> 4) & 0xf, hex & 0xf);
    let release = match level {
        0xa => format!("a{serial}"),
        0xb => format!("b{serial}"),
        0xc => format!("rc{serial}"),
        _ => String::new(),
    };
    format!("{major}.{minor}.{micro}{release}")
}

/// `3.10` from `python3.10` or `libpython3.10.so.1.0`; empty when the name says nothing.
fn version_of_name(path: &Path) -> String {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let Some(rest) = name.split("python").nth(1) else {
        return String::new();
    };
    let digits: String = rest
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    let parts: Vec<&str> = digits
        .split('.')
        .filter(|p| !p.is_empty())
        .take(2)
        .collect();
    if parts.len() == 2 {
        parts.join(".")
    } else {
        String::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_from_the_hex_and_the_name() {
        assert_eq!(version_of_hex(0x030b02f0), "3.11.2");
        assert_eq!(version_of_hex(0x030d00c1), "3.13.0rc1");
        assert_eq!(
            version_of_name(Path::new("/usr/lib/libpython3.10.so.1.0")),
            "3.10"
        );
        assert_eq!(version_of_name(Path::new("/usr/bin/python3.12")), "3.12");
        assert_eq!(version_of_name(Path::new("/usr/bin/python3")), "");
    }

    #[test]
    fn debians_python_is_recognized_and_other_programs_are_not() {
        let python = Path::new("/usr/bin/python3.11");
        if let Ok(file) = File::open(python) {
            let found = read_python_runtime(&file, python).unwrap().unwrap();
            assert!(found.version.starts_with("3.11."), "{found:?}");
            assert_eq!(found.major_minor, Some((3, 11)));
            assert!(found.runtime != 0);
            // The stripped executable exports the loop (its `.cold` part has no symbol there).
            assert!(!found.eval_loop.is_empty(), "{found:?}");
            let loop_start = found.eval_loop[0].start;
            // Debian's python3.11 is not PIE: its text is at file offset = vaddr − 0x400000.
            assert_eq!(
                found.vaddr_of_file_offset(loop_start - 0x40_0000),
                Some(loop_start)
            );
            assert!(found.in_eval_loop(loop_start + 1));
        }
        let exe = std::env::current_exe().unwrap();
        let file = File::open(&exe).unwrap();
        assert_eq!(read_python_runtime(&file, &exe).unwrap(), None);
    }

    /// python3.11-dbg's debug file for Debian's python3.11 names the loop's `.cold` part.
    #[test]
    fn a_debug_files_symbol_table_names_the_cold_part_of_the_loop() {
        let python = Path::new("/usr/bin/python3.11");
        let Some(build_id) = File::open(python)
            .ok()
            .and_then(|f| crate::read_build_id(&f, python).ok().flatten())
        else {
            return;
        };
        let path = Path::new("/usr/lib/debug").join(crate::build_id_path(&build_id).unwrap());
        let Ok(file) = File::open(&path) else {
            return; // python3.11-dbg is not installed
        };
        let found = read_python_runtime(&file, &path).unwrap().unwrap();
        assert!(found.eval_loop.len() >= 2, "{found:?}");
    }
}
