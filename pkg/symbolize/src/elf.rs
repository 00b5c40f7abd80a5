//! One ELF object: its build id, load segments, symbol table and DWARF.
//!
//! Objects are read through [`object::ReadCache`] over an open file: only the headers, the
//! symbol tables and the DWARF sections are read, never the whole file, so a large binary costs
//! what its symbols and debug info cost, not its size.

use std::borrow::Cow;
use std::fmt;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use object::read::ReadCache;
use object::{Object, ObjectSection, ObjectSegment, SegmentFlags};

use crate::{Error, Frame, demangle};

/// DWARF sections are copied out of the file into shared buffers that gimli reads.
type Reader = gimli::EndianArcSlice<gimli::RunTimeEndian>;

/// An object's GNU build id (the bytes of its `NT_GNU_BUILD_ID` note; Go's own `.note.go.buildid`
/// is not used). Shown as lower-case hex, as pprof and debuginfod spell it.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BuildId(Box<[u8]>);

impl BuildId {
    /// A build id from its bytes.
    pub fn new(bytes: &[u8]) -> BuildId {
        BuildId(bytes.into())
    }

    /// The raw bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Display for BuildId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0.iter() {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for BuildId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BuildId({self})")
    }
}

/// Reads only the build id of the ELF object open as `file` (`path` is for messages).
/// `Ok(None)` when it has none.
pub fn read_build_id(file: &File, path: &Path) -> Result<Option<BuildId>, Error> {
    use object::read::elf::{FileHeader, ProgramHeader};
    // Only the ELF header and the PT_NOTE segments are read: parsing the whole object would
    // read its symbol tables too, which for large binaries costs megabytes per new process.
    let cache = ReadCache::new(file);
    let header = object::elf::FileHeader64::<object::Endianness>::parse(&cache)
        .map_err(|source| elf_error(path, source))?;
    let endian = header.endian().map_err(|source| elf_error(path, source))?;
    let program_headers = header
        .program_headers(endian, &cache)
        .map_err(|source| elf_error(path, source))?;
    for segment in program_headers {
        let Ok(Some(mut notes)) = segment.notes(endian, &cache) else {
            continue;
        };
        while let Ok(Some(note)) = notes.next() {
            if note.name() == b"GNU"
                && note.n_type(endian) == object::elf::NT_GNU_BUILD_ID
                && !note.desc().is_empty()
            {
                return Ok(Some(BuildId::new(note.desc())));
            }
        }
    }
    Ok(None)
}

fn elf_error(path: &Path, source: object::Error) -> Error {
    Error::Elf {
        path: path.to_owned(),
        source,
    }
}

/// A `PT_LOAD` segment: where file bytes land in the object's virtual addresses.
#[derive(Debug, Clone, Copy)]
struct Segment {
    file_offset: u64,
    file_size: u64,
    vaddr: u64,
    mem_size: u64,
    executable: bool,
}

/// A function symbol. Its name stays in the file (large C++ and Rust libraries have tens of
/// megabytes of names) and is read when an address in it is first symbolized.
#[derive(Debug, Clone, Copy)]
struct Symbol {
    address: u64,
    /// 0 when the table gives none: the symbol then runs to the next one.
    size: u32,
    /// Offset of the name in the string table.
    name: u32,
}

/// Where a symbol table's names are in the file.
#[derive(Debug, Clone, Copy, Default)]
struct Names {
    file_offset: u64,
    size: u64,
}

/// A parsed ELF object, ready to symbolize its addresses.
pub struct ElfObject {
    path: PathBuf,
    build_id: Option<BuildId>,
    segments: Vec<Segment>,
    /// Sorted by address.
    symbols: Vec<Symbol>,
    names: Names,
    /// The open file, to read symbol names from.
    file: File,
    dwarf: Option<addr2line::Context<Reader>>,
    /// Bytes of DWARF held (decompressed).
    dwarf_bytes: u64,
    dwarf_error: Option<Error>,
    is_go: bool,
}

/// DWARF larger than this (decompressed, all sections) is not loaded by [`ElfObject::open`]:
/// the symbol table is used alone. DWARF is copied into memory to be read, so this bounds what
/// one object costs.
pub const DEFAULT_MAX_DWARF_BYTES: u64 = 24 << 20;

impl fmt::Debug for ElfObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ElfObject")
            .field("path", &self.path)
            .field("build_id", &self.build_id)
            .field("n_symbols", &self.symbols.len())
            .field("has_dwarf", &self.dwarf.is_some())
            .field("is_go", &self.is_go)
            .finish()
    }
}

impl ElfObject {
    /// Opens and reads the object at `path`, its DWARF up to [`DEFAULT_MAX_DWARF_BYTES`].
    pub fn open(path: &Path) -> Result<ElfObject, Error> {
        let file = File::open(path).map_err(|source| Error::Io {
            path: path.to_owned(),
            source,
        })?;
        ElfObject::read(&file, path, DEFAULT_MAX_DWARF_BYTES)
    }

    /// Reads the object open as `file` (`path` names it in messages), loading its DWARF only
    /// if it has at most `max_dwarf_bytes` of it. A DWARF that does not parse or is too large
    /// is not an error: the symbol table is still used, and [`ElfObject::dwarf_error`] says why.
    pub fn read(file: &File, path: &Path, max_dwarf_bytes: u64) -> Result<ElfObject, Error> {
        let cache = ReadCache::new(file);
        let obj = object::File::parse(&cache).map_err(|source| elf_error(path, source))?;
        let build_id = obj
            .build_id()
            .ok()
            .flatten()
            .filter(|b| !b.is_empty())
            .map(BuildId::new);
        let segments = obj
            .segments()
            .map(|s| {
                let (file_offset, file_size) = s.file_range();
                Segment {
                    file_offset,
                    file_size,
                    vaddr: s.address(),
                    mem_size: s.size(),
                    // PF_X: the segment holds code.
                    executable: matches!(s.flags(), SegmentFlags::Elf { p_flags } if p_flags & 1 != 0),
                }
            })
            .collect();
        let is_go = obj.section_by_name(".gopclntab").is_some()
            || obj.section_by_name(".note.go.buildid").is_some();
        let (mut symbols, mut names) = read_symbols(&cache);
        if symbols.is_empty()
            && is_go
            && let Some((go_symbols, go_names)) = read_gopclntab(&obj)
        {
            // A stripped Go binary (`-ldflags=-s -w`): Go's own function table still names
            // every function.
            symbols = go_symbols;
            names = go_names;
        }
        let dwarf_bytes = dwarf_size(&obj);
        let (dwarf, dwarf_error) = if dwarf_bytes > max_dwarf_bytes {
            let error = Error::DwarfTooLarge {
                path: path.to_owned(),
                size_bytes: dwarf_bytes,
                max_bytes: max_dwarf_bytes,
            };
            (None, Some(error))
        } else {
            match read_dwarf(&obj, file) {
                Ok(dwarf) => (dwarf, None),
                Err(source) => (
                    None,
                    Some(Error::Dwarf {
                        path: path.to_owned(),
                        source,
                    }),
                ),
            }
        };
        let dwarf_bytes = if dwarf.is_some() { dwarf_bytes } else { 0 };
        Ok(ElfObject {
            path: path.to_owned(),
            build_id,
            segments,
            symbols,
            names,
            file: file.try_clone().map_err(|source| Error::Io {
                path: path.to_owned(),
                source,
            })?,
            dwarf,
            dwarf_bytes,
            dwarf_error,
            is_go,
        })
    }

    /// The path it was read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Its build id, if it has one.
    pub fn build_id(&self) -> Option<&BuildId> {
        self.build_id.as_ref()
    }

    /// Number of function symbols (`.symtab`, or `.dynsym` when there is no `.symtab`).
    pub fn n_symbols(&self) -> usize {
        self.symbols.len()
    }

    /// Whether it has DWARF that parsed.
    pub fn has_dwarf(&self) -> bool {
        self.dwarf.is_some()
    }

    /// Bytes of DWARF held in memory (0 without DWARF).
    pub fn dwarf_bytes(&self) -> u64 {
        self.dwarf_bytes
    }

    /// Bytes its symbol table holds in memory, roughly.
    pub fn symbol_bytes(&self) -> u64 {
        (self.symbols.len() * std::mem::size_of::<Symbol>()) as u64
    }

    /// Why its DWARF could not be used, if it has DWARF that did not parse.
    pub fn dwarf_error(&self) -> Option<&Error> {
        self.dwarf_error.as_ref()
    }

    /// Whether it was built by Go.
    pub fn is_go(&self) -> bool {
        self.is_go
    }

    /// The virtual address (as in the symbol table) of the byte at `file_offset`, through the
    /// `PT_LOAD` segment holding it. A process's address `a` in a mapping that starts at `start`
    /// with file offset `off` is at file offset `a - start + off`.
    pub fn vaddr_of_file_offset(&self, file_offset: u64) -> Option<u64> {
        self.segments
            .iter()
            .find(|s| {
                file_offset >= s.file_offset && file_offset - s.file_offset < s.file_size.max(1)
            })
            .map(|s| file_offset - s.file_offset + s.vaddr)
    }

    /// The frames at virtual address `vaddr`, innermost first: inlined functions from DWARF
    /// (with files and lines) then the function they were inlined into; from the symbol table
    /// alone when DWARF has nothing there. Empty when nothing is known. Pass a return address
    /// minus one.
    pub fn symbolize(&self, vaddr: u64) -> Vec<Frame> {
        // Outside code there is nothing to find; and DWARF places functions that the linker
        // dropped at address 0, which must not match low addresses.
        let in_code = self
            .segments
            .iter()
            .any(|s| s.executable && vaddr >= s.vaddr && vaddr - s.vaddr < s.mem_size);
        if !in_code {
            return Vec::new();
        }
        let mut frames = self.dwarf_frames(vaddr);
        let symbol = self.symbol_at(vaddr).and_then(|s| self.name_of(s));
        match (frames.last_mut(), symbol) {
            // The outermost frame is the function the symbol names. DWARF may name it without
            // its path (Rust generics have no linkage name: `write` for `core::fmt::write`):
            // the symbol's name is then the better one.
            (Some(outer), Some(sym)) => {
                let demangled = demangle(&sym);
                if outer.system_name.is_empty() || demangled.ends_with(outer.function.as_str()) {
                    outer.function = demangled.into_owned();
                    outer.system_name = sym;
                }
            }
            (None, Some(sym)) => frames.push(Frame {
                function: demangle(&sym).into_owned(),
                system_name: sym,
                file: None,
                line: 0,
            }),
            _ => {}
        }
        // DWARF can know lines but not names (no DW_AT_name): drop what names nothing.
        frames.retain(|f| !f.function.is_empty());
        frames
    }

    fn dwarf_frames(&self, vaddr: u64) -> Vec<Frame> {
        let mut out = Vec::new();
        let Some(ctx) = &self.dwarf else {
            return out;
        };
        let Ok(mut iter) = ctx.find_frames(vaddr).skip_all_loads() else {
            return out;
        };
        while let Ok(Some(frame)) = iter.next() {
            let system_name = frame
                .function
                .as_ref()
                .and_then(|f| f.raw_name().ok())
                .map(Cow::into_owned)
                .unwrap_or_default();
            let (file, line) = frame
                .location
                .map(|l| (l.file.map(str::to_owned), l.line.unwrap_or(0)))
                .unwrap_or((None, 0));
            out.push(Frame {
                function: demangle(&system_name).into_owned(),
                system_name,
                file,
                line,
            });
        }
        out
    }

    fn symbol_at(&self, vaddr: u64) -> Option<&Symbol> {
        let i = self
            .symbols
            .partition_point(|s| s.address <= vaddr)
            .checked_sub(1)?;
        let sym = &self.symbols[i];
        (sym.size == 0 || vaddr - sym.address < u64::from(sym.size)).then_some(sym)
    }

    /// Reads a symbol's name from the string table (NUL-terminated); `None` when the file
    /// cannot be read there or the name is empty.
    fn name_of(&self, sym: &Symbol) -> Option<String> {
        use std::os::unix::fs::FileExt;
        let start = u64::from(sym.name);
        let end = self.names.size;
        let mut buf = Vec::new();
        let mut want = 256u64;
        loop {
            let len = want.min(end.checked_sub(start)?);
            buf.resize(len as usize, 0);
            self.file
                .read_exact_at(&mut buf, self.names.file_offset + start)
                .ok()?;
            if let Some(nul) = buf.iter().position(|&b| b == 0) {
                buf.truncate(nul);
                break;
            }
            // No NUL within 64 KiB, or before the table ends: not a name.
            if len < want || want >= 64 << 10 {
                return None;
            }
            want *= 4;
        }
        (!buf.is_empty()).then(|| String::from_utf8_lossy(&buf).into_owned())
    }
}

/// The function symbols of `.symtab`, or of `.dynsym` when there is no `.symtab`, with where
/// their names are. Only 64-bit ELF (the agent runs on x86-64); others have none.
fn read_symbols(cache: &ReadCache<&File>) -> (Vec<Symbol>, Names) {
    use object::elf::{SHN_UNDEF, STT_FUNC, STT_GNU_IFUNC};
    use object::read::elf::{ElfFile64, SectionHeader, Sym};

    let Ok(elf) = ElfFile64::<object::Endianness, _>::parse(cache) else {
        return (Vec::new(), Names::default());
    };
    let endian = elf.endian();
    for table in [elf.elf_symbol_table(), elf.elf_dynamic_symbol_table()] {
        let mut symbols: Vec<Symbol> = table
            .iter()
            .filter(|s| {
                matches!(s.st_type(), STT_FUNC | STT_GNU_IFUNC)
                    && s.st_shndx(endian) != SHN_UNDEF
                    && s.st_value(endian) != 0
                    && s.st_name(endian) != 0
            })
            .map(|s| Symbol {
                address: s.st_value(endian),
                size: u32::try_from(s.st_size(endian)).unwrap_or(u32::MAX),
                name: s.st_name(endian),
            })
            .collect();
        if symbols.is_empty() {
            continue;
        }
        let Ok(strtab) = elf.elf_section_table().section(table.string_section()) else {
            continue;
        };
        let names = Names {
            file_offset: strtab.sh_offset(endian),
            size: strtab.sh_size(endian),
        };
        // Aliases share an address: keep one, preferring a sized one.
        symbols.sort_by(|a, b| a.address.cmp(&b.address).then(b.size.cmp(&a.size)));
        symbols.dedup_by_key(|s| s.address);
        symbols.shrink_to_fit();
        return (symbols, names);
    }
    (Vec::new(), Names::default())
}

/// Function entries and names from Go's `.gopclntab` (the table the Go runtime itself uses for
/// tracebacks), which stripping leaves in place. Go 1.18 and later, 64-bit; `None` otherwise.
///
/// Layout (`runtime/symtab.go`, `debug/gosym`): a header of magic (`0xfffffff0` for 1.18–1.19,
/// `0xfffffff1` since 1.20), two pad bytes, the instruction size quantum, the pointer size, then
/// pointer-sized fields: nfunc, nfiles, textStart, funcnameOffset, cuOffset, filetabOffset,
/// pctabOffset, pclnOffset. At pclnOffset, `nfunc * 2 + 1` u32: for each function its entry
/// (relative to the start of `.text`) and the offset of its `_func`, then the end of the last
/// one. A `_func` starts with its entry (u32) and its name's offset in funcnametab (i32).
fn read_gopclntab<'data, O: Object<'data>>(obj: &O) -> Option<(Vec<Symbol>, Names)> {
    let section = obj.section_by_name(".gopclntab")?;
    let (section_offset, _) = section.file_range()?;
    let data = section.data().ok()?;
    let u32_at = |at: usize| -> Option<u32> {
        Some(u32::from_le_bytes(
            data.get(at..at.checked_add(4)?)?.try_into().ok()?,
        ))
    };
    let field = |k: usize| -> Option<usize> {
        let at = 8 + 8 * k;
        let bytes = data.get(at..at + 8)?;
        usize::try_from(u64::from_le_bytes(bytes.try_into().ok()?)).ok()
    };
    let magic = u32_at(0)?;
    if !matches!(magic, 0xffff_fff0 | 0xffff_fff1) || data.get(7) != Some(&8) {
        return None;
    }
    let nfunc = field(0)?;
    let funcname_offset = field(3)?;
    let pcln_offset = field(7)?;
    // debug/gosym uses the start of .text rather than the header's textStart, which may be
    // unrelocated.
    let text_start = obj.section_by_name(".text")?.address();
    let mut symbols = Vec::with_capacity(nfunc.min(1 << 22));
    for i in 0..nfunc {
        let at = pcln_offset.checked_add(i.checked_mul(8)?)?;
        let entry = u32_at(at)?;
        let func_offset = u32_at(at + 4)? as usize;
        let end = u32_at(at + 8)?;
        let name = u32_at(pcln_offset.checked_add(func_offset)?.checked_add(4)?)?;
        symbols.push(Symbol {
            address: text_start + u64::from(entry),
            size: end.saturating_sub(entry),
            name,
        });
    }
    symbols.sort_by_key(|s| s.address);
    symbols.dedup_by_key(|s| s.address);
    let names = Names {
        file_offset: section_offset + funcname_offset as u64,
        size: (data.len().checked_sub(funcname_offset)?) as u64,
    };
    Some((symbols, names))
}

/// Decompressed size of the DWARF sections.
fn dwarf_size<'data, O: Object<'data>>(obj: &O) -> u64 {
    obj.sections()
        .filter(|s| {
            s.name()
                .is_ok_and(|n| n.starts_with(".debug_") || n.starts_with(".zdebug_"))
        })
        .map(|s| {
            s.compressed_file_range()
                .map(|r| r.uncompressed_size)
                .unwrap_or_else(|_| s.size())
        })
        .sum()
}

fn read_dwarf<'data, O: Object<'data>>(
    obj: &O,
    file: &File,
) -> Result<Option<addr2line::Context<Reader>>, gimli::Error> {
    if obj.section_by_name(".debug_info").is_none() {
        return Ok(None);
    }
    let endian = if obj.is_little_endian() {
        gimli::RunTimeEndian::Little
    } else {
        gimli::RunTimeEndian::Big
    };
    let load = |id: gimli::SectionId| -> Result<Reader, gimli::Error> {
        // `section_by_name` also finds GNU `.zdebug_*` sections; `uncompressed_data` inflates
        // those and SHF_COMPRESSED ones (Go compresses its DWARF).
        // An uncompressed section is read from the file straight into its buffer: through
        // the read cache it would be held twice while copied, which doubled the agent's peak
        // memory on large objects.
        let data: Arc<[u8]> = match obj.section_by_name(id.name()) {
            Some(section) => match section.compressed_file_range() {
                Ok(range) if range.format == object::CompressionFormat::None => {
                    read_at(file, range.offset, range.uncompressed_size)
                }
                _ => match section.uncompressed_data() {
                    Ok(data) => Arc::from(&*data),
                    Err(_) => Arc::from(&[][..]),
                },
            },
            None => Arc::from(&[][..]),
        };
        Ok(Reader::new(data, endian))
    };
    let dwarf = gimli::Dwarf::load(load)?;
    addr2line::Context::from_dwarf(dwarf).map(Some)
}

/// `len` bytes of `file` at `offset` in one shared buffer (empty if they cannot be read).
fn read_at(file: &File, offset: u64, len: u64) -> Arc<[u8]> {
    use std::os::unix::fs::FileExt;
    let Ok(len) = usize::try_from(len) else {
        return Arc::from(&[][..]);
    };
    // Collecting a `repeat_n` allocates the `Arc` once, at its final size.
    let mut buf: Arc<[u8]> = std::iter::repeat_n(0u8, len).collect();
    let Some(bytes) = Arc::get_mut(&mut buf) else {
        return Arc::from(&[][..]);
    };
    if file.read_exact_at(bytes, offset).is_err() {
        return Arc::from(&[][..]);
    }
    buf
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A function of this test binary, kept out of line so it has its own symbol.
    #[inline(never)]
    fn outer_for_test(x: u64) -> u64 {
        inlined_for_test(x) + 1
    }

    /// Inlined even in debug builds, so DWARF has an inlined-subroutine entry for it.
    #[inline(always)]
    fn inlined_for_test(x: u64) -> u64 {
        std::hint::black_box(x).wrapping_mul(3)
    }

    /// This test binary as a mapping: (start, end, file offset) of the mapping of
    /// `/proc/self/exe` that holds `addr`.
    fn self_mapping(addr: u64) -> (u64, u64, u64) {
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        for line in maps.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 6 || Path::new(f[5]) != exe {
                continue;
            }
            let (s, e) = f[0].split_once('-').unwrap();
            let (s, e) = (
                u64::from_str_radix(s, 16).unwrap(),
                u64::from_str_radix(e, 16).unwrap(),
            );
            if (s..e).contains(&addr) {
                return (s, e, u64::from_str_radix(f[2], 16).unwrap());
            }
        }
        panic!("no mapping of {} holds {addr:#x}", exe.display());
    }

    #[test]
    fn symbolizes_this_test_binary_with_inlined_frames() {
        assert_eq!(outer_for_test(2), 7);
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let obj = ElfObject::open(&exe).unwrap();
        assert!(obj.build_id().is_some(), "rustc emits a build id on Linux");
        assert!(obj.has_dwarf(), "test builds carry DWARF");

        let addr = outer_for_test as *const () as u64;
        let (start, _, offset) = self_mapping(addr);
        let vaddr = obj.vaddr_of_file_offset(addr - start + offset).unwrap();
        let frames = obj.symbolize(vaddr);
        let outer = frames.last().unwrap();
        assert!(
            outer.function.ends_with("elf::tests::outer_for_test"),
            "{frames:?}"
        );
        assert!(outer.file.as_deref().unwrap().ends_with("elf.rs"));

        // Somewhere inside outer_for_test the inlined call has its own frame, innermost first.
        let found = (0..256).any(|d| {
            let f = obj.symbolize(vaddr + d);
            f.len() >= 2
                && f[0].function.ends_with("inlined_for_test")
                && f[1].function.ends_with("outer_for_test")
        });
        assert!(found, "no inlined frame for inlined_for_test");
    }

    #[test]
    fn build_id_alone_matches_the_full_read() {
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let file = File::open(&exe).unwrap();
        let id = read_build_id(&file, &exe).unwrap().unwrap();
        let full = ElfObject::read(&file, &exe, DEFAULT_MAX_DWARF_BYTES).unwrap();
        assert_eq!(Some(&id), full.build_id());
        assert_eq!(id.to_string().len(), id.as_bytes().len() * 2);
    }

    #[test]
    fn too_much_dwarf_falls_back_to_symbols() {
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let file = File::open(&exe).unwrap();
        let obj = ElfObject::read(&file, &exe, 1).unwrap();
        assert!(!obj.has_dwarf());
        assert_eq!(obj.dwarf_bytes(), 0);
        let err = obj.dwarf_error().unwrap().to_string();
        assert!(err.contains("DWARF") && err.contains("limit"), "{err}");
        let addr = outer_for_test as *const () as u64;
        let (start, _, offset) = self_mapping(addr);
        let vaddr = obj.vaddr_of_file_offset(addr - start + offset).unwrap();
        let frames = obj.symbolize(vaddr);
        assert_eq!(frames.len(), 1);
        assert!(frames[0].function.ends_with("outer_for_test") && frames[0].file.is_none());
    }

    #[test]
    fn unknown_addresses_give_no_frames() {
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let obj = ElfObject::open(&exe).unwrap();
        assert!(obj.symbolize(1).is_empty());
        assert_eq!(obj.vaddr_of_file_offset(u64::MAX), None);
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        for (i, bytes) in [
            &b""[..],
            b"\x7fELF",
            b"\x7fELF\x02\x01\x01\0\0\0\0\0\0\0\0\0\x03\0>\0",
            b"#!/bin/sh\n",
        ]
        .iter()
        .enumerate()
        {
            let path = dir.path().join(format!("f{i}"));
            std::fs::write(&path, bytes).unwrap();
            let err = ElfObject::open(&path).unwrap_err();
            assert!(err.to_string().contains("ELF"), "{err}");
        }
        let missing = dir.path().join("missing");
        assert!(
            ElfObject::open(&missing)
                .unwrap_err()
                .to_string()
                .contains("cannot read")
        );
    }
}
