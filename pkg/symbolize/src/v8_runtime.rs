//! Recognizing V8 (Node.js) by its executable: V8 exports its object layouts for debuggers as
//! `v8dbg_*` data symbols (`v8dbg_class_JSFunction__shared__SharedFunctionInfo` = 24: the
//! offset of a field; `v8dbg_type_…`: an instance type; `v8dbg_off_fp_…`: a frame slot), which
//! Node's builds keep in the dynamic symbol table. Its interpreter runs in its embedded
//! builtins (`v8_Default_embedded_blob_code_`, named in the symbol table); the Node.js version
//! is in the inspector's `node.js/vX.Y.Z` text.

use std::collections::BTreeMap;
use std::fs::File;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::Path;

use object::{Object, ObjectSection, ObjectSymbol, ObjectSymbolTable, SectionKind};

use crate::Error;
use crate::elf::elf_error;
use crate::read_at::read_cache;
use crate::runtime::Segments;

/// What precedes Node's version in its read-only data (the inspector's user agent); else the
/// release's download address.
const NODE_VERSION_MARKS: [&[u8]; 2] = [b"node.js/v", b"/download/release/v"];
/// Bytes of read-only data read at a time while looking for the version.
const SCAN_CHUNK: u64 = 1 << 20;

/// What a profiler needs of a V8 executable (`node`) to name its JavaScript frames: V8's
/// constants by name (without the `v8dbg_` prefix), where its embedded builtins' code is, and
/// the Node.js version. Addresses are the object's virtual addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct V8Runtime {
    /// Node's version (`20.20.2`); empty when it was not found.
    pub version: String,
    /// Every `v8dbg_NAME` constant, by `NAME`.
    pub constants: BTreeMap<String, i64>,
    /// V8's own version (`(11, 3, 244)`), from its `Version::major_` and friends; `None` when
    /// they are not exported.
    pub v8_version: Option<V8Version>,
    /// The embedded builtins' code (the interpreter's bytecode handlers and V8's built-in
    /// functions), when the symbol table names it.
    pub builtins: Option<Range<u64>>,
    /// Where the builtins' code starts in the file (V8 maps a second copy of it from there,
    /// beside its compiled code).
    pub builtins_file_offset: Option<u64>,
    segments: Segments,
}

impl V8Runtime {
    /// The virtual address of file offset `offset`, when a loadable segment holds it.
    pub fn vaddr_of_file_offset(&self, offset: u64) -> Option<u64> {
        self.segments.vaddr_of_file_offset(offset)
    }

    /// Constant `v8dbg_NAME`, when V8 exports it.
    pub fn constant(&self, name: &str) -> Option<i64> {
        self.constants.get(name).copied()
    }
}

/// The V8 an object holds, or `None` when it exports no `v8dbg_` constants (not V8, or a build
/// without postmortem support).
pub fn read_v8_runtime(file: &File, path: &Path) -> Result<Option<V8Runtime>, Error> {
    let cache = read_cache(file);
    let obj = object::File::parse(&cache).map_err(|source| elf_error(path, source))?;
    let ints = Ints::of(file, &obj);
    let (constants, v8_version) = exported_constants(&obj, &ints);
    if constants.is_empty() {
        return Ok(None);
    }
    let builtins = embedded_builtins(&obj, &ints);
    let builtins_file_offset = builtins.as_ref().and_then(|b| {
        obj.sections()
            .find(|s| s.address() <= b.start && b.start < s.address() + s.size())
            .and_then(|s| Some(s.file_range()?.0 + (b.start - s.address())))
    });
    let version = obj
        .section_by_name(".rodata")
        .and_then(|s| s.file_range())
        .and_then(|(offset, size)| node_version_in(file, offset, size))
        .unwrap_or_default();
    Ok(Some(V8Runtime {
        version,
        v8_version,
        constants,
        builtins,
        builtins_file_offset,
        segments: Segments::of(&obj),
    }))
}

/// V8's major, minor and build number.
type V8Version = (u32, u32, u32);

/// The ints an object's data holds at its virtual addresses.
struct Ints<'a> {
    file: &'a File,
    /// Each section's addresses and file offset (`None`: no bytes in the file, as `.bss`).
    sections: Vec<(Range<u64>, Option<u64>)>,
}

impl<'a> Ints<'a> {
    fn of<'data>(file: &'a File, obj: &impl Object<'data>) -> Ints<'a> {
        let sections = obj
            .sections()
            .filter(|s| s.address() != 0)
            .map(|s| {
                let offset = (s.kind() != SectionKind::UninitializedData)
                    .then(|| s.file_range().map(|(offset, _)| offset))
                    .flatten();
                (s.address()..s.address() + s.size(), offset)
            })
            .collect();
        Ints { file, sections }
    }

    /// The little-endian i32 at `address` (0 in a section without file bytes).
    fn i32_at(&self, address: u64) -> Option<i64> {
        let (range, offset) = self
            .sections
            .iter()
            .find(|(range, _)| range.contains(&address) && address + 4 <= range.end)?;
        let Some(offset) = offset else {
            return Some(0);
        };
        let mut bytes = [0u8; 4];
        self.file
            .read_exact_at(&mut bytes, offset + (address - range.start))
            .ok()?;
        Some(i64::from(i32::from_le_bytes(bytes)))
    }
}

/// Every `v8dbg_NAME` constant of the dynamic symbols, by `NAME`, and V8's version from its
/// `Version::major_`, `minor_` and `build_`.
fn exported_constants<'data>(
    obj: &impl Object<'data>,
    ints: &Ints,
) -> (BTreeMap<String, i64>, Option<V8Version>) {
    let mut constants = BTreeMap::new();
    let mut version = [None; 3];
    for symbol in obj
        .dynamic_symbols()
        .filter(|s| !s.is_undefined() && s.address() != 0)
    {
        let name = symbol.name().unwrap_or("");
        if let Some(name) = name.strip_prefix("v8dbg_")
            && let Some(value) = ints.i32_at(symbol.address())
        {
            constants.insert(name.to_owned(), value);
        }
        let part = match name {
            "_ZN2v88internal7Version6major_E" => 0,
            "_ZN2v88internal7Version6minor_E" => 1,
            "_ZN2v88internal7Version6build_E" => 2,
            _ => continue,
        };
        version[part] = ints
            .i32_at(symbol.address())
            .and_then(|v| u32::try_from(v).ok());
    }
    let v8_version = match version {
        [Some(major), Some(minor), Some(build)] => Some((major, minor, build)),
        _ => None,
    };
    (constants, v8_version)
}

/// The embedded builtins' code, as the symbol table names it.
fn embedded_builtins<'data>(obj: &impl Object<'data>, ints: &Ints) -> Option<Range<u64>> {
    let (mut code, mut code_size_at) = (None, None);
    for symbol in obj
        .symbol_table()
        .into_iter()
        .flat_map(|table| table.symbols())
    {
        match symbol.name().unwrap_or("") {
            "v8_Default_embedded_blob_code_" => code = Some(symbol.address()),
            "v8_Default_embedded_blob_code_size_" => code_size_at = Some(symbol.address()),
            _ => {}
        }
    }
    let (start, size) = code.zip(code_size_at.and_then(|at| ints.i32_at(at)))?;
    let size = u64::try_from(size).ok().filter(|&s| s > 0)?;
    Some(start..start + size)
}

/// The version after one of [`NODE_VERSION_MARKS`] in the file's bytes `offset..offset + size`,
/// read a chunk at a time (Node's read-only data is tens of megabytes).
fn node_version_in(file: &File, offset: u64, size: u64) -> Option<String> {
    let overlap = 64u64;
    let mut buf = vec![0u8; (SCAN_CHUNK + overlap) as usize];
    for mark in NODE_VERSION_MARKS {
        let mut at = 0u64;
        while at < size {
            let len = (SCAN_CHUNK + overlap).min(size - at) as usize;
            file.read_exact_at(&mut buf[..len], offset + at).ok()?;
            if let Some(version) = version_after(&buf[..len], mark) {
                return Some(version);
            }
            at += SCAN_CHUNK;
        }
    }
    None
}

/// The `X.Y.Z` after `mark` in `data`, when one follows it.
fn version_after(data: &[u8], mark: &[u8]) -> Option<String> {
    data.windows(mark.len())
        .enumerate()
        .filter(|(_, w)| *w == mark)
        .find_map(|(i, _)| {
            let rest = &data[i + mark.len()..];
            let version: String = rest
                .iter()
                .take(24)
                .take_while(|b| b.is_ascii_digit() || **b == b'.')
                .map(|&b| char::from(b))
                .collect();
            (version.split('.').filter(|p| !p.is_empty()).count() == 3).then_some(version)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_follows_its_mark() {
        let data = b"xx\0node.js/v20.20.2\0(delegate_)";
        assert_eq!(
            version_after(data, NODE_VERSION_MARKS[0]).as_deref(),
            Some("20.20.2")
        );
        assert_eq!(version_after(b"node.js/vX", NODE_VERSION_MARKS[0]), None);
        let data = b"https://nodejs.org/download/release/v18.19.0/node-v18.19.0.tar.gz";
        assert_eq!(
            version_after(data, NODE_VERSION_MARKS[1]).as_deref(),
            Some("18.19.0")
        );
    }

    #[test]
    fn nodes_constants_builtins_and_version_are_read_and_other_programs_are_not() {
        let node = Path::new("/usr/bin/node");
        if let Ok(file) = File::open(node) {
            let v8 = read_v8_runtime(&file, node).unwrap().unwrap();
            assert!(v8.version.split('.').count() == 3, "{:?}", v8.version);
            assert_eq!(v8.constant("off_fp_function"), Some(-16));
            assert_eq!(v8.constant("HeapObjectTag"), Some(1));
            assert!(v8.constant("type_JSFunction__JS_FUNCTION_TYPE").is_some());
            assert!(
                v8.builtins
                    .as_ref()
                    .is_some_and(|b| b.end - b.start > 1 << 20)
            );
            assert!(v8.builtins_file_offset.is_some());
            assert!(v8.v8_version.is_some_and(|(major, _, _)| major >= 8));
        }
        let sh = Path::new("/bin/sh");
        let file = File::open(sh).unwrap();
        assert_eq!(read_v8_runtime(&file, sh).unwrap(), None);
    }
}
