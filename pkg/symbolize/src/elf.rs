//! One ELF object: its build id, load segments, symbol table and DWARF.
//!
//! Objects are read through [`object::ReadCache`] over an open file, by positional reads
//! (`crate::read_at`, so that threads reading one file do not move each other's offset): only
//! the headers, the symbol tables and the DWARF sections are read, never the whole file, so a
//! large binary costs what its symbols and debug info cost, not its size.

use std::borrow::Cow;
use std::fmt;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::read_at::read_cache;
use object::{Object, ObjectSection, ObjectSegment, SegmentFlags};

use crate::demangle::NameMemo;
use crate::dwarf_cache::{CachedDwarf, DwarfCache};
use crate::{Error, Frame};

/// DWARF sections are copied out of the file into shared buffers that gimli reads.
type Reader = gimli::EndianReader<gimli::RunTimeEndian, SectionBytes>;

/// The bytes of one DWARF section: copied into memory, or mapped from the file
/// ([`ElfObject::open_mapped`]). Cheap to clone: gimli's readers share them.
#[derive(Clone, Debug)]
enum SectionBytes {
    Owned(Arc<[u8]>),
    /// Inflated from a compressed section: kept in the buffer inflating made (an `Arc<[u8]>`
    /// would copy it, holding the section twice at once).
    Inflated(Arc<Vec<u8>>),
    Mapped(Arc<memmap2::Mmap>, std::ops::Range<usize>),
}

impl std::ops::Deref for SectionBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            SectionBytes::Owned(bytes) => bytes,
            SectionBytes::Inflated(bytes) => bytes,
            SectionBytes::Mapped(map, range) => &map[range.clone()],
        }
    }
}

// SAFETY: every variant derefs to bytes owned by an `Arc` (a buffer, or a mapping that is not
// unmapped while any clone lives), so the slice stays put when the value moves or is cloned.
unsafe impl gimli::StableDeref for SectionBytes {}
// SAFETY: as above; a clone shares the same `Arc` and so derefs to the same bytes.
unsafe impl gimli::CloneStableDeref for SectionBytes {}

/// How an object's DWARF is brought in to be read.
#[derive(Debug, Clone, Copy)]
enum DwarfLoad<'c> {
    /// Copied into memory, if the object has at most this many bytes of it.
    Copy { max_bytes: u64 },
    /// Mapped from the file, whatever its size: pages are read as lookups touch them and are
    /// the kernel's to reclaim, and the mapping ends with the object.
    Map,
    /// Mapped from the cache of decompressed DWARF (written there the first time); copied as
    /// by `Copy` when it cannot be cached (no build id, too large, a failed write).
    Cached {
        cache: &'c DwarfCache,
        max_copy_bytes: u64,
    },
}

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
    let cache = read_cache(file);
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

pub(crate) fn elf_error(path: &Path, source: object::Error) -> Error {
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

/// A function symbol, in 16 bytes (large C++ and Rust libraries have hundreds of thousands).
/// Its name stays in the file (they also have tens of megabytes of names) and is read when an
/// address in it is first symbolized.
#[derive(Debug, Clone, Copy)]
struct Symbol {
    address: u64,
    /// Bytes of code it covers. A symbol the table gives no size (`_init`, hand-written
    /// assembly) covers up to the next symbol or the end of its section, whichever comes first;
    /// an address past the end is named by no symbol.
    size: u32,
    /// The offset of the name in its string table (the low 31 bits), and which of the
    /// object's string tables that is ([`ElfObject::names`], at most two: the top bit).
    name: u32,
}

/// The bit of [`Symbol::name`] that says which string table the name is in.
const SECOND_TABLE: u32 = 1 << 31;

impl Symbol {
    /// The index of its string table in [`ElfObject::names`].
    fn table(&self) -> usize {
        usize::from(self.name & SECOND_TABLE != 0)
    }

    /// The offset of its name in its string table.
    fn name_offset(&self) -> u32 {
        self.name & !SECOND_TABLE
    }
}

/// Where a symbol table's names are: in a file, or in memory (the symbol table of
/// `.gnu_debugdata`, decompressed).
enum NameTable {
    File { file: File, offset: u64, size: u64 },
    Memory(Box<[u8]>),
}

/// A symbol table read from an ELF image: function symbols and where its names are.
struct SymbolTable {
    symbols: Vec<Symbol>,
    strtab_offset: u64,
    strtab_size: u64,
}

/// The `.gnu_debuglink` of a stripped object: the debug file's name and the CRC32 of its
/// bytes (gdb's convention).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DebugLink {
    /// The debug file's name, without directory (`gzip.debug`).
    pub name: String,
    /// CRC32 (IEEE) of the whole debug file.
    pub crc: u32,
}

/// What an object lacks for symbolization and where its debug file may be: read from its
/// section headers only ([`read_debug_needs`]).
#[derive(Debug, Clone, Default)]
pub struct DebugNeeds {
    /// Its GNU build id.
    pub build_id: Option<BuildId>,
    /// Whether it has a `.symtab`.
    pub has_symtab: bool,
    /// Whether it has DWARF (`.debug_info`).
    pub has_dwarf: bool,
    /// Its `.gnu_debuglink`, if any.
    pub debug_link: Option<DebugLink>,
}

impl DebugNeeds {
    /// Whether a separate debug file would add anything (the object lacks `.symtab` or DWARF).
    pub fn wants_debug_file(&self) -> bool {
        !self.has_symtab || !self.has_dwarf
    }
}

/// A parsed ELF object, ready to symbolize its addresses.
pub struct ElfObject {
    path: PathBuf,
    build_id: Option<BuildId>,
    segments: Vec<Segment>,
    /// Sorted by address.
    symbols: Vec<Symbol>,
    /// The string tables the symbols' names are in.
    names: Vec<NameTable>,
    /// The debug file its symbols or DWARF came from, if any.
    debug_path: Option<PathBuf>,
    /// Where its symbols came from, for messages and tests.
    symbol_source: SymbolSource,
    dwarf: Option<addr2line::Context<Reader>>,
    /// Bytes of DWARF held in memory (decompressed).
    dwarf_bytes: u64,
    /// Bytes of DWARF mapped from the DWARF cache.
    dwarf_mapped_bytes: u64,
    /// The DWARF cache's mapping, for [`ElfObject::release_mapped_dwarf`].
    dwarf_map: Option<Arc<memmap2::Mmap>>,
    dwarf_error: Option<Error>,
    dwarf_cache_error: Option<Error>,
    is_go: bool,
    /// Symbols' names and demangled names already looked up.
    name_memo: NameMemo,
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
            .field("symbol_source", &self.symbol_source)
            .field("debug_path", &self.debug_path)
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
        ElfObject::read_with_debug_file(file, path, None, max_dwarf_bytes)
    }

    /// Like [`ElfObject::read`], with the symbols and DWARF of a separate debug file (found by
    /// build id, `.gnu_debuglink` or debuginfod: [`find_debug_file`]) where the object itself
    /// has none. Segments and build id are always the object's own. Symbols come from the
    /// first of: the debug file's `.symtab`, the object's `.symtab`, the object's
    /// `.gnu_debugdata` (MiniDebugInfo) merged with its `.dynsym`, its `.dynsym`, Go's
    /// `.gopclntab`. A debug file that does not parse is ignored.
    pub fn read_with_debug_file(
        file: &File,
        path: &Path,
        debug: Option<(&File, &Path)>,
        max_dwarf_bytes: u64,
    ) -> Result<ElfObject, Error> {
        let load = DwarfLoad::Copy {
            max_bytes: max_dwarf_bytes,
        };
        ElfObject::read_object(file, path, debug, load)
    }

    /// Like [`ElfObject::read_with_debug_file`], its DWARF mapped from `cache` (written there,
    /// decompressed, on first sight of its build id) rather than held in memory, so that it
    /// costs no heap and is never inflated twice. Without a build id, larger than half the
    /// cache, or when the cache cannot be written ([`ElfObject::dwarf_cache_error`] says why),
    /// the DWARF is copied into memory up to `max_dwarf_bytes` as there.
    pub fn read_cached(
        file: &File,
        path: &Path,
        debug: Option<(&File, &Path)>,
        max_dwarf_bytes: u64,
        cache: &DwarfCache,
    ) -> Result<ElfObject, Error> {
        let load = DwarfLoad::Cached {
            cache,
            max_copy_bytes: max_dwarf_bytes,
        };
        ElfObject::read_object(file, path, debug, load)
    }

    /// Opens the object at `path` with its DWARF mapped from the file instead of copied, and
    /// so without a size bound: for a process symbolizing its own executable and libraries,
    /// whose DWARF can be hundreds of megabytes of which a lookup reads a few pages, and which
    /// then costs nothing once the object is dropped. Only for files that are not truncated
    /// while in use (a truncated mapping faults its reader): other processes' objects go
    /// through [`ElfObject::open`].
    pub fn open_mapped(path: &Path) -> Result<ElfObject, Error> {
        let file = File::open(path).map_err(|source| Error::Io {
            path: path.to_owned(),
            source,
        })?;
        ElfObject::read_object(&file, path, None, DwarfLoad::Map)
    }

    #[expect(
        clippy::too_many_lines,
        reason = "the steps of opening one object (sections, symbols, debug link, build id, bounds) share the reader and the limits checked at each"
    )]
    fn read_object(
        file: &File,
        path: &Path,
        debug: Option<(&File, &Path)>,
        load: DwarfLoad,
    ) -> Result<ElfObject, Error> {
        let cache = read_cache(file);
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

        let debug_cache = debug.map(|(f, _)| read_cache(f));
        let debug_obj = debug_cache
            .as_ref()
            .and_then(|c| object::File::parse(c).ok());
        let debug_file = debug.filter(|_| debug_obj.is_some());

        let mut names = Vec::new();
        let mut symbols = Vec::new();
        let mut symbol_source = SymbolSource::None;
        let push_table = |names: &mut Vec<NameTable>,
                          symbols: &mut Vec<Symbol>,
                          table: SymbolTable,
                          source: NameSource<'_>| {
            // At most two tables (MiniDebugInfo's and `.dynsym`): the second one's symbols
            // say so in their top name bit.
            let second = match names.len() {
                0 => false,
                1 => true,
                _ => return,
            };
            names.push(match source {
                NameSource::File(f) => match f.try_clone() {
                    Ok(file) => NameTable::File {
                        file,
                        offset: table.strtab_offset,
                        size: table.strtab_size,
                    },
                    Err(_) => return,
                },
                NameSource::Memory(bytes) => {
                    // Keep only the string table of the decompressed image.
                    let start = usize::try_from(table.strtab_offset).unwrap_or(usize::MAX);
                    let len = usize::try_from(table.strtab_size).unwrap_or(usize::MAX);
                    match bytes.get(start..start.saturating_add(len)) {
                        Some(strtab) => NameTable::Memory(strtab.into()),
                        None => return,
                    }
                }
            });
            if !second {
                // The first table's vector becomes the object's: no copy.
                *symbols = table.symbols;
            } else {
                symbols.extend(table.symbols.into_iter().map(|s| Symbol {
                    name: s.name | SECOND_TABLE,
                    ..s
                }));
            }
        };
        if let (Some(c), Some((f, _))) = (&debug_cache, debug_file)
            && let Some(t) = function_symbols(c, false)
        {
            push_table(&mut names, &mut symbols, t, NameSource::File(f));
            symbol_source = SymbolSource::DebugFile;
        } else if let Some(t) = function_symbols(&cache, false) {
            push_table(&mut names, &mut symbols, t, NameSource::File(file));
            symbol_source = SymbolSource::Symtab;
        } else {
            if let Some(mini) = read_gnu_debugdata(&obj)
                && let Some(t) = function_symbols(&mini[..], false)
            {
                push_table(&mut names, &mut symbols, t, NameSource::Memory(mini));
                symbol_source = SymbolSource::GnuDebugdata;
            }
            if let Some(t) = function_symbols(&cache, true) {
                push_table(&mut names, &mut symbols, t, NameSource::File(file));
                if symbol_source == SymbolSource::None {
                    symbol_source = SymbolSource::Dynsym;
                }
            }
        }
        if symbols.is_empty()
            && is_go
            && let Some((go_symbols, go_names)) = read_gopclntab(&obj)
        {
            // A stripped Go binary (`-ldflags=-s -w`): Go's own function table still names
            // every function.
            names.clear();
            symbols = go_symbols;
            if let Ok(file) = file.try_clone() {
                names.push(NameTable::File {
                    file,
                    offset: go_names.0,
                    size: go_names.1,
                });
                symbol_source = SymbolSource::Gopclntab;
            }
        }
        sort_symbols(&mut symbols);
        symbols.shrink_to_fit();

        // DWARF from the debug file when it has some, else the object's own.
        let (dwarf_obj, dwarf_file, dwarf_path, from_debug) = match (&debug_obj, debug_file) {
            (Some(d), Some((f, p))) if d.section_by_name(".debug_info").is_some() => {
                (d, f, p, true)
            }
            _ => (&obj, file, path, false),
        };
        let dwarf_bytes = dwarf_size(dwarf_obj);
        let mut dwarf_cache_error = None;
        let cached = match (load, &build_id) {
            // Mapped DWARF costs no copy, but reading it still builds addr2line's tables of
            // the units looked up: the same bound per object as a copy keeps that in check.
            (
                DwarfLoad::Cached {
                    cache,
                    max_copy_bytes,
                },
                Some(id),
            ) if dwarf_obj.section_by_name(".debug_info").is_some()
                && dwarf_bytes <= max_copy_bytes =>
            {
                // The object's own DWARF and its debug file's are cached apart: a debug file
                // found later (debuginfod) is not hidden by the object's thinner DWARF.
                let key = if from_debug {
                    format!("{id}-debug")
                } else {
                    id.to_string()
                };
                cached_dwarf(cache, &key, dwarf_obj, dwarf_file, dwarf_bytes)
                    .map_err(|e| dwarf_cache_error = Some(e))
                    .ok()
            }
            _ => None,
        };
        let load = match load {
            DwarfLoad::Cached { max_copy_bytes, .. } => DwarfLoad::Copy {
                max_bytes: max_copy_bytes,
            },
            other => other,
        };
        let parsed = |read: Result<_, gimli::Error>| match read {
            Ok(dwarf) => (dwarf, None),
            Err(source) => (
                None,
                Some(Error::Dwarf {
                    path: dwarf_path.to_owned(),
                    source,
                }),
            ),
        };
        let (dwarf, dwarf_error) = match (load, &cached) {
            (_, Some(cached)) => parsed(read_cached_dwarf(dwarf_obj, cached)),
            (DwarfLoad::Copy { max_bytes }, None) if dwarf_bytes > max_bytes => {
                let error = Error::DwarfTooLarge {
                    path: dwarf_path.to_owned(),
                    size_bytes: dwarf_bytes,
                    max_bytes,
                };
                (None, Some(error))
            }
            (load, None) => parsed(read_dwarf(dwarf_obj, dwarf_file, load)),
        };
        // Mapped DWARF is not held in memory: the kernel pages it in and out.
        let (dwarf_bytes, dwarf_mapped_bytes) = match (&dwarf, &cached) {
            (None, _) => (0, 0),
            (Some(_), Some(cached)) => (0, cached.len()),
            (Some(_), None) => (dwarf_bytes, 0),
        };
        let used_debug = symbol_source == SymbolSource::DebugFile
            || (dwarf.is_some() && debug_file.is_some_and(|(_, p)| p == dwarf_path));
        Ok(ElfObject {
            path: path.to_owned(),
            build_id,
            segments,
            symbols,
            names,
            debug_path: debug_file.filter(|_| used_debug).map(|(_, p)| p.to_owned()),
            symbol_source,
            dwarf,
            dwarf_bytes,
            dwarf_mapped_bytes,
            dwarf_map: cached.map(|c| c.map).filter(|_| dwarf_mapped_bytes > 0),
            dwarf_error,
            dwarf_cache_error,
            is_go,
            name_memo: NameMemo::default(),
        })
    }

    /// The debug file its symbols or DWARF were read from, if any.
    pub fn debug_path(&self) -> Option<&Path> {
        self.debug_path.as_deref()
    }

    /// Where its function symbols came from.
    pub fn symbol_source(&self) -> SymbolSource {
        self.symbol_source
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

    /// Bytes of DWARF mapped from the DWARF cache ([`ElfObject::read_cached`]).
    pub fn dwarf_mapped_bytes(&self) -> u64 {
        self.dwarf_mapped_bytes
    }

    /// Lets go of the pages of mapped DWARF that lookups touched: they stay in the page cache
    /// (a later lookup maps them again at the cost of a minor fault) but no longer count in
    /// this process's resident memory. For a caller that symbolizes in bursts, after each.
    pub fn release_mapped_dwarf(&self) {
        if let Some(map) = &self.dwarf_map {
            release_pages(map);
        }
    }

    /// Why its DWARF was not written to or read from the DWARF cache, when it was to be.
    pub fn dwarf_cache_error(&self) -> Option<&Error> {
        self.dwarf_cache_error.as_ref()
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
        if !self.in_code(vaddr) {
            return Vec::new();
        }
        self.with_symbol(self.dwarf_frames(vaddr), vaddr)
    }

    /// [`ElfObject::symbolize`], shared; `None` when nothing is known. Where DWARF has nothing
    /// at `vaddr` (a stripped object, code DWARF does not cover), every address of one symbol
    /// gets the same frames, built once: what a caller keeps per frames (a profile's function
    /// lines) is then done once a function, not once an address (the Rust compiler's samples
    /// reach new addresses of `librustc_driver` all the time, mostly in functions named before).
    pub fn symbolize_shared(&self, vaddr: u64) -> Option<Arc<[Frame]>> {
        if !self.in_code(vaddr) {
            return None;
        }
        let frames = self.dwarf_frames(vaddr);
        if frames.is_empty() {
            let sym = self.symbol_at(vaddr)?;
            return self.name_memo.symbol_frames(sym.address, || {
                let frames = self.with_symbol(Vec::new(), vaddr);
                (!frames.is_empty()).then(|| Arc::from(frames))
            });
        }
        let frames = self.with_symbol(frames, vaddr);
        (!frames.is_empty()).then(|| Arc::from(frames))
    }

    /// Whether `vaddr` is in an executable segment. Outside code there is nothing to find; and
    /// DWARF places functions that the linker dropped at address 0, which must not match low
    /// addresses.
    fn in_code(&self, vaddr: u64) -> bool {
        self.segments
            .iter()
            .any(|s| s.executable && vaddr >= s.vaddr && vaddr - s.vaddr < s.mem_size)
    }

    /// `frames` (DWARF's at `vaddr`) with the symbol covering `vaddr` as the outermost
    /// function's name, or as the only frame when DWARF had none.
    fn with_symbol(&self, mut frames: Vec<Frame>, vaddr: u64) -> Vec<Frame> {
        let symbol = self
            .symbol_at(vaddr)
            .and_then(|s| self.name_memo.symbol(s.address, || self.name_of(s)));
        match (frames.last_mut(), symbol) {
            // The outermost frame is the function the symbol names. DWARF may name it without
            // its path (Rust generics have no linkage name: `write` for `core::fmt::write`):
            // the symbol's name is then the better one.
            (Some(outer), Some(sym)) => {
                let demangled = self.name_memo.demangle(&sym);
                if outer.system_name.is_empty() || demangled.ends_with(outer.function.as_str()) {
                    outer.function = demangled.to_string();
                    outer.system_name = sym.to_string();
                }
            }
            (None, Some(sym)) => frames.push(Frame {
                function: self.name_memo.demangle(&sym).to_string(),
                system_name: sym.to_string(),
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
                function: self.name_memo.demangle(&system_name).to_string(),
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
        (vaddr - sym.address < u64::from(sym.size)).then_some(sym)
    }

    /// Reads a symbol's name from its string table (NUL-terminated); `None` when the file
    /// cannot be read there or the name is empty.
    fn name_of(&self, sym: &Symbol) -> Option<String> {
        use std::os::unix::fs::FileExt;
        let start = u64::from(sym.name_offset());
        let (file, offset, end) = match self.names.get(sym.table())? {
            NameTable::Memory(bytes) => {
                let rest = bytes.get(start as usize..)?;
                let len = rest.iter().position(|&b| b == 0)?;
                return (len > 0).then(|| String::from_utf8_lossy(&rest[..len]).into_owned());
            }
            NameTable::File { file, offset, size } => (file, *offset, *size),
        };
        let mut buf = Vec::new();
        let mut want = 256u64;
        loop {
            let len = want.min(end.checked_sub(start)?);
            buf.resize(len as usize, 0);
            file.read_exact_at(&mut buf, offset + start).ok()?;
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

/// Where an [`ElfObject`]'s function symbols came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SymbolSource {
    /// No symbols at all.
    None,
    /// The object's own `.symtab`.
    Symtab,
    /// A separate debug file's `.symtab`.
    DebugFile,
    /// `.gnu_debugdata` (MiniDebugInfo: an xz-compressed ELF holding a `.symtab` of the
    /// functions `.dynsym` lacks), merged with `.dynsym`.
    GnuDebugdata,
    /// `.dynsym` alone (exported functions only).
    Dynsym,
    /// Go's `.gopclntab`.
    Gopclntab,
}

enum NameSource<'a> {
    File(&'a File),
    Memory(Box<[u8]>),
}

/// The function symbols of `.symtab` (or `.dynsym` when `dynamic`) of a 64-bit ELF image,
/// sorted by address, sizes of unsized ones bounded by the next symbol and their section's end;
/// `None` when it has no such table or no function in it.
fn function_symbols<'data, R: object::ReadRef<'data>>(
    data: R,
    dynamic: bool,
) -> Option<SymbolTable> {
    use object::elf::{SHN_UNDEF, STT_FUNC, STT_GNU_IFUNC};
    use object::read::elf::{ElfFile64, SectionHeader, Sym};

    let elf = ElfFile64::<object::Endianness, R>::parse(data).ok()?;
    let endian = elf.endian();
    let sections = elf.elf_section_table();
    let table = if dynamic {
        elf.elf_dynamic_symbol_table()
    } else {
        elf.elf_symbol_table()
    };
    let is_function = |s: &&object::elf::Sym64<object::Endianness>| {
        matches!(s.st_type(), STT_FUNC | STT_GNU_IFUNC)
            && s.st_shndx(endian) != SHN_UNDEF
            && s.st_value(endian) != 0
            && s.st_name(endian) != 0
            && s.st_name(endian) & SECOND_TABLE == 0
    };
    // Sized once: a vector grown by doubling would hold up to twice the table at its peak.
    let mut symbols = Vec::with_capacity(table.iter().filter(is_function).count());
    // (address, end of its section) of the symbols without a size.
    let mut unsized_ends = Vec::new();
    for s in table.iter().filter(is_function) {
        let address = s.st_value(endian);
        let size = u32::try_from(s.st_size(endian)).unwrap_or(u32::MAX);
        if size == 0 {
            let section_end = sections
                .section(object::SectionIndex(usize::from(s.st_shndx(endian))))
                .ok()
                .map(|h| h.sh_addr(endian).saturating_add(h.sh_size(endian)))
                .unwrap_or(u64::MAX);
            unsized_ends.push((address, section_end));
        }
        symbols.push(Symbol {
            address,
            size,
            name: s.st_name(endian),
        });
    }
    if symbols.is_empty() {
        return None;
    }
    let strtab = sections.section(table.string_section()).ok()?;
    sort_symbols(&mut symbols);
    unsized_ends.sort_unstable();
    // A symbol without a size (`_init`, assembly without `.size`) covers up to the next symbol
    // and never past its section: `_init` must not name the whole of `.text` after it.
    for i in 0..symbols.len() {
        if symbols[i].size == 0 {
            let start = symbols[i].address;
            let next = symbols.get(i + 1).map_or(u64::MAX, |s| s.address);
            let section_end = unsized_ends
                .binary_search_by_key(&start, |e| e.0)
                .map_or(u64::MAX, |j| unsized_ends[j].1);
            let end = next.min(section_end);
            symbols[i].size = u32::try_from(end.saturating_sub(start)).unwrap_or(u32::MAX);
        }
    }
    symbols.shrink_to_fit();
    Some(SymbolTable {
        symbols,
        strtab_offset: strtab.sh_offset(endian),
        strtab_size: strtab.sh_size(endian),
    })
}

/// Sorts symbols by address, keeping one of those that share an address (aliases): a sized
/// one, and of those the first table's, the one whose name comes first. In place: a stable
/// sort would take as much memory again.
fn sort_symbols(symbols: &mut Vec<Symbol>) {
    if symbols.is_sorted_by(|a, b| a.address < b.address) {
        return;
    }
    symbols.sort_unstable_by(|a, b| {
        (a.address.cmp(&b.address))
            .then(b.size.cmp(&a.size))
            .then(a.name.cmp(&b.name))
    });
    symbols.dedup_by_key(|s| s.address);
}

/// Bytes of MiniDebugInfo (`.gnu_debugdata`) decompressed beyond which it is ignored.
const MAX_GNU_DEBUGDATA_BYTES: u64 = 64 << 20;

/// The ELF image in `.gnu_debugdata` (xz-compressed, as Fedora and others ship MiniDebugInfo),
/// decompressed; `None` when there is none or it does not decompress.
fn read_gnu_debugdata<'data, O: Object<'data>>(obj: &O) -> Option<Box<[u8]>> {
    let section = obj.section_by_name(".gnu_debugdata")?;
    let data = section.data().ok()?;
    let mut out = Bounded(Vec::new());
    let mut input = std::io::BufReader::new(data);
    lzma_rs::xz_decompress(&mut input, &mut out).ok()?;
    Some(out.0.into_boxed_slice())
}

/// A `Vec` writer that refuses to grow past [`MAX_GNU_DEBUGDATA_BYTES`] (a hostile
/// `.gnu_debugdata` must not cost unbounded memory).
struct Bounded(Vec<u8>);

impl std::io::Write for Bounded {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if (self.0.len() + buf.len()) as u64 > MAX_GNU_DEBUGDATA_BYTES {
            return Err(std::io::Error::other("MiniDebugInfo too large"));
        }
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// What `file` lacks for symbolization and its `.gnu_debuglink`, from its section headers
/// (the rest of the file is not read).
pub fn read_debug_needs(file: &File, path: &Path) -> Result<DebugNeeds, Error> {
    use object::read::elf::{FileHeader, SectionHeader};
    let cache = read_cache(file);
    let header = object::elf::FileHeader64::<object::Endianness>::parse(&cache)
        .map_err(|source| elf_error(path, source))?;
    let endian = header.endian().map_err(|source| elf_error(path, source))?;
    let sections = header
        .sections(endian, &cache)
        .map_err(|source| elf_error(path, source))?;
    let has = |name: &[u8]| {
        sections
            .section_by_name(endian, name)
            .is_some_and(|(_, s)| s.sh_type(endian) != object::elf::SHT_NOBITS)
    };
    let debug_link = sections
        .section_by_name(endian, b".gnu_debuglink")
        .and_then(|(_, s)| s.data(endian, &cache).ok())
        .and_then(|data| parse_debuglink(data, object::Endian::is_little_endian(endian)));
    Ok(DebugNeeds {
        build_id: read_build_id(file, path).ok().flatten(),
        has_symtab: has(b".symtab"),
        has_dwarf: has(b".debug_info") || has(b".zdebug_info"),
        debug_link,
    })
}

/// `.gnu_debuglink`: the file name (NUL-terminated, padded to 4 bytes), then its CRC32.
fn parse_debuglink(data: &[u8], little_endian: bool) -> Option<DebugLink> {
    let nul = data.iter().position(|&b| b == 0)?;
    let name = std::str::from_utf8(&data[..nul]).ok()?;
    // The name must be a plain file name: it is joined to directories.
    if name.is_empty() || name.contains('/') || name == ".." {
        return None;
    }
    let at = (nul + 1).next_multiple_of(4);
    let bytes: [u8; 4] = data.get(at..at + 4)?.try_into().ok()?;
    let crc = if little_endian {
        u32::from_le_bytes(bytes)
    } else {
        u32::from_be_bytes(bytes)
    };
    Some(DebugLink {
        name: name.to_owned(),
        crc,
    })
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
fn read_gopclntab<'data, O: Object<'data>>(obj: &O) -> Option<(Vec<Symbol>, (u64, u64))> {
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
        if name & SECOND_TABLE != 0 {
            continue;
        }
        symbols.push(Symbol {
            address: text_start + u64::from(entry),
            size: end.saturating_sub(entry),
            name,
        });
    }
    sort_symbols(&mut symbols);
    let names = (
        section_offset + funcname_offset as u64,
        (data.len().checked_sub(funcname_offset)?) as u64,
    );
    Some((symbols, names))
}

/// Decompressed size of the DWARF sections.
/// DWARF sections that name no code location: variables' locations, macros, the name
/// indexes. Symbolizing never reads them, so they are neither loaded nor counted (location
/// lists alone are a quarter of an optimized binary's DWARF: 5.5 of 22 MB for Debian's
/// python3.11).
const UNUSED_DWARF: &[&str] = &[
    "loc",
    "loclists",
    "macinfo",
    "macro",
    "pubnames",
    "pubtypes",
    "gnu_pubnames",
    "gnu_pubtypes",
];

/// Whether the DWARF section `name` (`.debug_info`, `.zdebug_loc`) is one symbolizing reads.
fn symbolizing_reads(name: &str) -> bool {
    let Some(kind) = name
        .strip_prefix(".debug_")
        .or_else(|| name.strip_prefix(".zdebug_"))
    else {
        return false;
    };
    !UNUSED_DWARF.contains(&kind)
}

fn dwarf_size<'data, O: Object<'data>>(obj: &O) -> u64 {
    obj.sections()
        .filter(|s| s.name().is_ok_and(symbolizing_reads))
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
    how: DwarfLoad,
) -> Result<Option<addr2line::Context<Reader>>, gimli::Error> {
    if obj.section_by_name(".debug_info").is_none() {
        return Ok(None);
    }
    let endian = if obj.is_little_endian() {
        gimli::RunTimeEndian::Little
    } else {
        gimli::RunTimeEndian::Big
    };
    // SAFETY: `DwarfLoad::Map` is for files not truncated while in use
    // (`ElfObject::open_mapped`); the bytes are only read.
    let map = match how {
        DwarfLoad::Map => unsafe { memmap2::Mmap::map(file) }.ok().map(Arc::new),
        DwarfLoad::Copy { .. } | DwarfLoad::Cached { .. } => None,
    };
    let load = |id: gimli::SectionId| -> Result<Reader, gimli::Error> {
        // `section_by_name` also finds GNU `.zdebug_*` sections; `uncompressed_data` inflates
        // those and SHF_COMPRESSED ones (Go compresses its DWARF).
        // An uncompressed section is read from the file straight into its buffer: through
        // the read cache it would be held twice while copied, which doubled the agent's peak
        // memory on large objects.
        let empty = || SectionBytes::Owned(Arc::from(&[][..]));
        if !symbolizing_reads(id.name()) {
            return Ok(Reader::new(empty(), endian));
        }
        let data = match obj.section_by_name(id.name()) {
            Some(section) => match section.compressed_file_range() {
                Ok(range) if range.format == object::CompressionFormat::None => {
                    match (&map, mapped_range(range.offset, range.uncompressed_size)) {
                        (Some(map), Some(r)) if r.end <= map.len() => {
                            SectionBytes::Mapped(Arc::clone(map), r)
                        }
                        _ => SectionBytes::Owned(read_at(
                            file,
                            range.offset,
                            range.uncompressed_size,
                        )),
                    }
                }
                _ => match section.uncompressed_data() {
                    Ok(std::borrow::Cow::Owned(data)) => SectionBytes::Inflated(Arc::new(data)),
                    Ok(std::borrow::Cow::Borrowed(data)) => SectionBytes::Owned(Arc::from(data)),
                    Err(_) => empty(),
                },
            },
            None => empty(),
        };
        Ok(Reader::new(data, endian))
    };
    let dwarf = gimli::Dwarf::load(load)?;
    addr2line::Context::from_dwarf(dwarf).map(Some)
}

/// The names of the DWARF sections the symbolizer reads, as gimli asks for them.
fn symbolizing_section_names() -> &'static [&'static str] {
    static NAMES: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
    NAMES.get_or_init(|| {
        let mut names = Vec::new();
        let _ = gimli::Dwarf::load(|id| -> Result<_, ()> {
            if symbolizing_reads(id.name()) {
                names.push(id.name());
            }
            Ok(gimli::EndianSlice::new(&[][..], gimli::LittleEndian))
        });
        names
    })
}

/// The DWARF of `obj` (open as `file`) from `cache` under `key`, written there first if it is
/// not: each section decompressed (or read) and written in turn.
fn cached_dwarf<'data, O: Object<'data>>(
    cache: &DwarfCache,
    key: &str,
    obj: &O,
    file: &File,
    total: u64,
) -> Result<CachedDwarf, Error> {
    if let Some(cached) = cache.open(key) {
        return Ok(cached);
    }
    // Streamed, never whole in memory: a hostile object's section that claims (or inflates to)
    // a gigabyte costs disk within the cache's bound, not memory.
    cache.store(key, symbolizing_section_names(), total, |name, out| {
        let Some(section) = obj.section_by_name(name) else {
            return Ok(false);
        };
        let bad = |what: String| std::io::Error::new(std::io::ErrorKind::InvalidData, what);
        let compressed = section
            .compressed_data()
            .map_err(|e| bad(format!("{name}: {e}")))?;
        let len = compressed.uncompressed_size;
        let copied = match compressed.format {
            object::CompressionFormat::None => {
                let range = section
                    .compressed_file_range()
                    .map_err(|e| bad(format!("{name}: {e}")))?;
                std::io::copy(&mut FileRange::new(file, range.offset, len), out)?
            }
            object::CompressionFormat::Zlib => {
                let inflate = flate2::read::ZlibDecoder::new(compressed.data);
                std::io::copy(&mut std::io::Read::take(inflate, len), out)?
            }
            object::CompressionFormat::Zstandard => {
                let inflate = zstd::stream::read::Decoder::with_buffer(compressed.data)?;
                std::io::copy(&mut std::io::Read::take(inflate, len), out)?
            }
            other => return Err(bad(format!("{name}: compressed as {other:?}"))),
        };
        if copied != len {
            return Err(bad(format!(
                "{name}: {copied} bytes, not the {len} its header says"
            )));
        }
        Ok(true)
    })
}

/// `len` bytes of a file from `offset`, read in order (by position: the file's own offset is
/// left alone).
struct FileRange<'f> {
    file: &'f File,
    at: u64,
    end: u64,
}

impl<'f> FileRange<'f> {
    fn new(file: &'f File, offset: u64, len: u64) -> FileRange<'f> {
        FileRange {
            file,
            at: offset,
            end: offset.saturating_add(len),
        }
    }
}

impl std::io::Read for FileRange<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        use std::os::unix::fs::FileExt;
        let want = usize::try_from(self.end - self.at)
            .unwrap_or(usize::MAX)
            .min(buf.len());
        let n = self.file.read_at(&mut buf[..want], self.at)?;
        self.at += n as u64;
        Ok(n)
    }
}

/// A DWARF context over the sections of `cached` (`obj` gives only the byte order).
fn read_cached_dwarf<'data, O: Object<'data>>(
    obj: &O,
    cached: &CachedDwarf,
) -> Result<Option<addr2line::Context<Reader>>, gimli::Error> {
    let endian = if obj.is_little_endian() {
        gimli::RunTimeEndian::Little
    } else {
        gimli::RunTimeEndian::Big
    };
    let load = |id: gimli::SectionId| -> Result<Reader, gimli::Error> {
        let bytes = match cached.section(id.name()) {
            Some(range) if symbolizing_reads(id.name()) => {
                SectionBytes::Mapped(Arc::clone(&cached.map), range)
            }
            _ => SectionBytes::Owned(Arc::from(&[][..])),
        };
        Ok(Reader::new(bytes, endian))
    };
    let dwarf = gimli::Dwarf::load(load)?;
    let context = addr2line::Context::from_dwarf(dwarf);
    // Indexing read every unit's header, abbreviations and line program header: most of the
    // mapping, of which lookups need little again. Given back now, objects loaded one after
    // the other do not add up in the agent's resident memory.
    release_pages(&cached.map);
    context.map(Some)
}

/// Gives back the resident pages of a mapping of the DWARF cache (they stay in the page cache
/// and fault back in when read).
fn release_pages(map: &memmap2::Mmap) {
    // SAFETY: the cache file under the mapping is never written in place (`DwarfCache`), so
    // pages dropped here read back the same bytes.
    let _ = unsafe { map.unchecked_advise(memmap2::UncheckedAdvice::DontNeed) };
}

/// The byte range of a section in a mapping of its file, if it fits in memory.
fn mapped_range(offset: u64, len: u64) -> Option<std::ops::Range<usize>> {
    let start = usize::try_from(offset).ok()?;
    Some(start..start.checked_add(usize::try_from(len).ok()?)?)
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

    #[test]
    fn location_lists_and_name_indexes_are_not_loaded() {
        for read in [
            ".debug_info",
            ".debug_line",
            ".zdebug_str",
            ".debug_rnglists",
        ] {
            assert!(symbolizing_reads(read), "{read}");
        }
        for skipped in [".debug_loclists", ".zdebug_loc", ".debug_macro", ".text"] {
            assert!(!symbolizing_reads(skipped), "{skipped}");
        }
    }

    /// A function of this test binary, kept out of line so it has its own symbol.
    #[inline(never)]
    fn outer_for_test(x: u64) -> u64 {
        inlined_for_test(x) + 1
    }

    /// Inlined even in debug builds, so DWARF has an inlined-subroutine entry for it; a loop,
    /// so that at opt-level 2 (the dev profile builds this crate so) it keeps instructions of
    /// its own rather than folding into its caller's.
    #[inline(always)]
    fn inlined_for_test(x: u64) -> u64 {
        let mut sum = 0u64;
        for i in 0..std::hint::black_box(x) {
            sum = sum.wrapping_add(std::hint::black_box(i).wrapping_mul(3));
        }
        sum
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
        assert_eq!(outer_for_test(3), 10);
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        // This test binary's DWARF is near the default budget (24 MiB): read it whole.
        let obj = ElfObject::read(&File::open(&exe).unwrap(), &exe, u64::MAX).unwrap();
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
    fn dwarf_through_the_cache_reads_as_the_copy_compressed_or_not() {
        assert_eq!(outer_for_test(3), 10);
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let copied = ElfObject::read(&File::open(&exe).unwrap(), &exe, u64::MAX).unwrap();
        let addr = outer_for_test as *const () as u64;
        let (start, _, offset) = self_mapping(addr);
        let vaddr = copied.vaddr_of_file_offset(addr - start + offset).unwrap();
        let tmp = tempfile::tempdir().unwrap();
        // The same code with its DWARF as Debian's debug files (zlib) and newer toolchains
        // (zstd) compress it.
        let mut binaries = vec![("plain", exe.clone())];
        for how in ["zlib", "zstd"] {
            let out = tmp.path().join(how);
            let status = std::process::Command::new("objcopy")
                .arg(format!("--compress-debug-sections={how}"))
                .args([&exe, &out])
                .status()
                .expect("objcopy (binutils) runs");
            assert!(status.success(), "objcopy --compress-debug-sections={how}");
            binaries.push((how, out));
        }
        for (how, path) in binaries {
            let cache = DwarfCache::new(&tmp.path().join(format!("cache-{how}")), 4 << 30).unwrap();
            for round in ["written", "read back"] {
                let file = File::open(&path).unwrap();
                let obj = ElfObject::read_cached(&file, &path, None, u64::MAX, &cache).unwrap();
                assert!(
                    obj.dwarf_cache_error().is_none(),
                    "{how}: {:?}",
                    obj.dwarf_cache_error()
                );
                assert!(obj.has_dwarf(), "{how}, {round}: {:?}", obj.dwarf_error());
                assert_eq!(obj.dwarf_bytes(), 0, "{how}: nothing held in memory");
                assert!(obj.dwarf_mapped_bytes() > 0);
                for d in 0..64 {
                    assert_eq!(
                        obj.symbolize(vaddr + d),
                        copied.symbolize(vaddr + d),
                        "{how}, {round}, +{d}"
                    );
                }
            }
            let files = std::fs::read_dir(tmp.path().join(format!("cache-{how}")))
                .unwrap()
                .count();
            assert_eq!(files, 1, "{how}: one file, written once");
        }
    }

    #[test]
    fn a_cache_too_small_leaves_the_dwarf_in_memory_within_its_bound() {
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let cache = DwarfCache::new(tmp.path(), 1 << 20).unwrap();
        let file = File::open(&exe).unwrap();
        let obj = ElfObject::read_cached(&file, &exe, None, u64::MAX, &cache).unwrap();
        let why = obj.dwarf_cache_error().unwrap().to_string();
        assert!(why.contains("limit"), "{why}");
        assert!(obj.has_dwarf() && obj.dwarf_bytes() > 0 && obj.dwarf_mapped_bytes() == 0);
        let small = ElfObject::read_cached(&file, &exe, None, 1, &cache).unwrap();
        assert!(!small.has_dwarf() && small.dwarf_bytes() == 0);
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
    fn addresses_of_one_function_without_dwarf_share_their_frames() {
        assert_eq!(outer_for_test(3), 10);
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let file = File::open(&exe).unwrap();
        let addr = outer_for_test as *const () as u64;
        let (start, _, offset) = self_mapping(addr);
        // Without DWARF (over the budget): the symbol's frames, one allocation for all.
        let stripped = ElfObject::read(&file, &exe, 1).unwrap();
        let vaddr = stripped
            .vaddr_of_file_offset(addr - start + offset)
            .unwrap();
        let first = stripped.symbolize_shared(vaddr).unwrap();
        let second = stripped.symbolize_shared(vaddr + 1).unwrap();
        assert!(Arc::ptr_eq(&first, &second));
        assert_eq!(*first, *stripped.symbolize(vaddr + 1));
        assert!(stripped.symbolize_shared(1).is_none());
        // With DWARF, each address keeps its own lines.
        let full = ElfObject::read(&file, &exe, u64::MAX).unwrap();
        for d in 0..16 {
            assert_eq!(
                *full.symbolize_shared(vaddr + d).unwrap(),
                *full.symbolize(vaddr + d)
            );
        }
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
