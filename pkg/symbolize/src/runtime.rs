//! Recognizing interpreters by their objects: a CPython interpreter (the `python3.X`
//! executable, or `libpython3.X.so` loaded by another program) exports `_PyRuntime` and, from
//! 3.11, its exact version as `Py_Version`; its evaluation loop is `_PyEval_EvalFrameDefault`.
//! A PHP interpreter built without thread safety (the `php` CLI, `php-fpm`, Apache's
//! `libphp.so`) exports `executor_globals` and its evaluation loop `execute_ex`, and says its
//! version in its `X-Powered-By: PHP/8.2.x` header text. A Ruby interpreter (`libruby-3.X.so`,
//! or a `ruby` built statically) exports `ruby_current_vm_ptr`, the thread-local
//! `ruby_current_ec`, its evaluation entry `rb_vm_exec` and its version as `ruby_version`.

use std::fs::File;
use std::ops::Range;
use std::path::Path;

use crate::read_at::read_cache;
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
    segments: Segments,
}

impl PythonRuntime {
    /// The virtual address of file offset `offset`, when a loadable segment holds it.
    pub fn vaddr_of_file_offset(&self, offset: u64) -> Option<u64> {
        self.segments.vaddr_of_file_offset(offset)
    }

    /// Whether virtual address `vaddr` is in the evaluation loop.
    pub fn in_eval_loop(&self, vaddr: u64) -> bool {
        self.eval_loop.iter().any(|r| r.contains(&vaddr))
    }
}

/// What a profiler needs of a PHP or Ruby interpreter's object (`php8.2`, `php-fpm8.2`,
/// `libphp8.2.so`; `libruby-3.1.so`) to read its frames: its version, where its global state
/// is, and which code runs the interpreted frames. Addresses are the object's virtual
/// addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterpreterRuntime {
    /// The version: `8.2.36`, `3.1.2`.
    pub version: String,
    /// Major and minor version (`(8, 2)`).
    pub major_minor: (u8, u8),
    /// The global state the frames hang from: PHP's `executor_globals` (whose
    /// `current_execute_data` is the innermost PHP frame), Ruby's `ruby_current_vm_ptr`.
    pub state: u64,
    /// PHP's `execute_ex`, Ruby's `rb_vm_exec`: a native frame here is running interpreted
    /// frames.
    pub eval_loop: Vec<Range<u64>>,
    /// Ruby's `rb_cObject`, where the VM keeps class `Object`: the one class whose name and
    /// singleton are known, from which a reader learns how classes keep theirs.
    pub root_class: Option<u64>,
    /// The object's `.data` section (initialized writable data): Ruby keeps its table of
    /// symbol names there (`ruby_global_symbols`, not exported).
    pub data_section: Option<Range<u64>>,
    segments: Segments,
}

impl InterpreterRuntime {
    /// The virtual address of file offset `offset`, when a loadable segment holds it.
    pub fn vaddr_of_file_offset(&self, offset: u64) -> Option<u64> {
        self.segments.vaddr_of_file_offset(offset)
    }

    /// Whether virtual address `vaddr` is in the evaluation loop.
    pub fn in_eval_loop(&self, vaddr: u64) -> bool {
        self.eval_loop.iter().any(|r| r.contains(&vaddr))
    }
}

/// An object's loadable segments: (file offset, virtual address, size in the file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Segments(Vec<(u64, u64, u64)>);

impl Segments {
    pub(crate) fn of<'data>(obj: &impl Object<'data>) -> Segments {
        Segments(
            obj.segments()
                .map(|s| {
                    let (offset, size) = s.file_range();
                    (offset, s.address(), size)
                })
                .collect(),
        )
    }

    pub(crate) fn vaddr_of_file_offset(&self, offset: u64) -> Option<u64> {
        self.0
            .iter()
            .find(|&&(start, _, size)| offset >= start && offset - start < size)
            .map(|&(start, vaddr, _)| vaddr + (offset - start))
    }
}

/// The CPython interpreter an object holds, or `None` when it holds none (no `_PyRuntime`
/// symbol). Reads the dynamic symbol table (where CPython exports its C API, even from
/// Debian's stripped executable), eight bytes for `Py_Version`, and the symbol table when the
/// object has one (for the evaluation loop's `.cold` part).
pub fn read_python_runtime(file: &File, path: &Path) -> Result<Option<PythonRuntime>, Error> {
    let cache = read_cache(file);
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
    Ok(Some(PythonRuntime {
        version,
        major_minor,
        runtime,
        eval_loop,
        segments: Segments::of(&obj),
    }))
}

/// What precedes a PHP interpreter's version in its read-only data (the header it sends).
const PHP_VERSION_MARK: &[u8] = b"X-Powered-By: PHP/";

/// The PHP interpreter an object holds, or `None` when it holds none (no `executor_globals`
/// symbol: not PHP, or a thread-safe build, whose executor state is per thread) or its version
/// cannot be read. Reads the dynamic symbol table (where PHP exports its engine's API for
/// extensions, even from Debian's stripped executable) and the read-only data section for the
/// version.
pub fn read_php_runtime(file: &File, path: &Path) -> Result<Option<InterpreterRuntime>, Error> {
    let cache = read_cache(file);
    let obj = object::File::parse(&cache).map_err(|source| elf_error(path, source))?;
    let mut executor_globals = None;
    let mut eval_loop = Vec::new();
    for symbol in obj
        .dynamic_symbols()
        .filter(|s| !s.is_undefined() && s.address() != 0)
    {
        match symbol.name().unwrap_or("") {
            "executor_globals" => executor_globals = Some(symbol.address()),
            "execute_ex" => {
                eval_loop.push(symbol.address()..symbol.address() + symbol.size().max(1));
            }
            _ => {}
        }
    }
    let Some(executor_globals) = executor_globals else {
        return Ok(None);
    };
    let Some(version) = obj
        .section_by_name(".rodata")
        .and_then(|section| section.data().ok())
        .and_then(php_version_in)
    else {
        return Ok(None);
    };
    let Some(major_minor) = major_minor_of(&version) else {
        return Ok(None);
    };
    Ok(Some(InterpreterRuntime {
        version,
        major_minor,
        state: executor_globals,
        eval_loop,
        root_class: None,
        data_section: None,
        segments: Segments::of(&obj),
    }))
}

/// The Ruby interpreter an object holds (3.0 and later: its execution context a thread-local
/// `ruby_current_ec`), or `None` when it holds none or its version cannot be read.
pub fn read_ruby_runtime(file: &File, path: &Path) -> Result<Option<InterpreterRuntime>, Error> {
    let cache = read_cache(file);
    let obj = object::File::parse(&cache).map_err(|source| elf_error(path, source))?;
    let (mut vm, mut version_at, mut tls_ec, mut root_class) = (None, None, false, None);
    let mut eval_loop = Vec::new();
    for symbol in obj.dynamic_symbols().filter(|s| !s.is_undefined()) {
        match symbol.name().unwrap_or("") {
            "ruby_current_vm_ptr" => vm = Some(symbol.address()),
            "rb_cObject" => root_class = Some(symbol.address()),
            "ruby_version" => version_at = Some(symbol.address()),
            "ruby_current_ec" => tls_ec = symbol.kind() == object::SymbolKind::Tls,
            "rb_vm_exec" => {
                eval_loop.push(symbol.address()..symbol.address() + symbol.size().max(1));
            }
            _ => {}
        }
    }
    let (Some(vm), Some(version_at), true) = (vm, version_at, tls_ec) else {
        return Ok(None);
    };
    let version = obj
        .sections()
        .find(|s| version_at >= s.address() && version_at < s.address() + s.size())
        .and_then(|s| s.data().ok().map(|d| (s.address(), d)))
        .and_then(|(start, data)| {
            let text = data.get((version_at - start) as usize..)?;
            let text = &text[..text.iter().position(|&b| b == 0)?.min(16)];
            std::str::from_utf8(text).ok().map(str::to_owned)
        });
    let Some((version, major_minor)) = version.and_then(|v| major_minor_of(&v).map(|mm| (v, mm)))
    else {
        return Ok(None);
    };
    Ok(Some(InterpreterRuntime {
        version,
        major_minor,
        state: vm,
        eval_loop,
        root_class,
        data_section: obj
            .section_by_name(".data")
            .map(|s| s.address()..s.address() + s.size()),
        segments: Segments::of(&obj),
    }))
}

/// The version after [`PHP_VERSION_MARK`] in `data` (`8.2.36`, `8.3.0RC1`).
fn php_version_in(data: &[u8]) -> Option<String> {
    let at = data
        .windows(PHP_VERSION_MARK.len())
        .position(|w| w == PHP_VERSION_MARK)?
        + PHP_VERSION_MARK.len();
    let version: String = data[at..]
        .iter()
        .take(32)
        .take_while(|b| b.is_ascii_alphanumeric() || **b == b'.' || **b == b'-')
        .map(|&b| char::from(b))
        .collect();
    (!version.is_empty()).then_some(version)
}

/// `(8, 2)` of `8.2.36`.
fn major_minor_of(version: &str) -> Option<(u8, u8)> {
    let mut parts = version.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts
        .next()?
        .chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .ok()?;
    Some((major, minor))
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

    #[test]
    fn php_versions_from_the_header_text() {
        let data = b"\0abc\0X-Powered-By: PHP/8.2.36\0more";
        assert_eq!(php_version_in(data).as_deref(), Some("8.2.36"));
        assert_eq!(php_version_in(b"X-Powered-By: PHP/"), None);
        assert_eq!(major_minor_of("8.2.36"), Some((8, 2)));
        assert_eq!(major_minor_of("8.3.0RC1"), Some((8, 3)));
        assert_eq!(major_minor_of("eight"), None);
    }

    #[test]
    fn debians_php_is_recognized_and_other_programs_are_not() {
        let php = Path::new("/usr/bin/php8.2");
        if let Ok(file) = File::open(php) {
            let found = read_php_runtime(&file, php).unwrap().unwrap();
            assert!(found.version.starts_with("8.2."), "{found:?}");
            assert_eq!(found.major_minor, (8, 2));
            assert!(found.state != 0);
            assert_eq!(found.eval_loop.len(), 1, "{found:?}");
            assert!(found.in_eval_loop(found.eval_loop[0].start + 1));
        }
        let exe = std::env::current_exe().unwrap();
        let file = File::open(&exe).unwrap();
        assert_eq!(read_php_runtime(&file, &exe).unwrap(), None);
    }

    #[test]
    fn debians_ruby_is_recognized() {
        let ruby = Path::new("/usr/lib/x86_64-linux-gnu/libruby-3.1.so.3.1");
        if let Ok(file) = File::open(ruby) {
            let found = read_ruby_runtime(&file, ruby).unwrap().unwrap();
            assert!(found.version.starts_with("3.1."), "{found:?}");
            assert_eq!(found.major_minor, (3, 1));
            assert!(found.state != 0 && !found.eval_loop.is_empty(), "{found:?}");
        }
        let exe = std::env::current_exe().unwrap();
        let file = File::open(&exe).unwrap();
        assert_eq!(read_ruby_runtime(&file, &exe).unwrap(), None);
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
