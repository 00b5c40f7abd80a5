//! Symbolization for the agent (and the server's own profiles): addresses of running processes
//! and of the kernel to function names, files and lines.
//!
//! - [`ElfObject`] reads one ELF object: its GNU build id, `PT_LOAD` segments (to turn a file
//!   offset into a virtual address), function symbols from `.symtab` (or `.dynsym` when
//!   stripped), and DWARF line tables with inlined frames (gimli, addr2line). Go binaries work
//!   through their symbol table and DWARF (compressed DWARF is inflated), stripped ones through
//!   `.gopclntab`.
//! - Stripped objects: [`read_debug_needs`] says what an object lacks and [`find_debug_file`]
//!   finds its separate debug file as gdb does (`<debug dir>/.build-id/ab/cdef….debug`, then
//!   `.gnu_debuglink` beside the object, in its `.debug/` and under the debug directory), checked
//!   by build id or CRC; [`ElfObject::read_with_debug_file`] takes symbols and DWARF from it.
//!   Without one, `.gnu_debugdata` (MiniDebugInfo, xz) adds the functions `.dynsym` lacks. A
//!   symbol names only the addresses within its size (unsized ones end at the next symbol or
//!   their section's end): past it an address is unknown, never wrongly named.
//! - [`unwind`] walks a copy of a user stack with the objects' call frame information
//!   (`.eh_frame`, `.debug_frame`; frame pointers where there is none) and says how the walk
//!   ended ([`unwind::StackEnd`]).
//! - [`Kallsyms`] reads `/proc/kallsyms` for kernel frames.
//! - [`read_python_runtime`], [`read_php_runtime`] and [`read_ruby_runtime`] recognize a
//!   CPython, PHP or Ruby interpreter:
//!   its version, global state and evaluation loop.
//! - [`demangle`] turns Rust (legacy and v0) and C++ names into readable ones.
//! - [`Symbolizer`] caches parsed objects per [`ObjectKey`] (build id, else device and inode)
//!   and results per address, and counts hits and misses for metrics.
//!
//! # Design constraints
//!
//! - Hostile or corrupt object files give an [`Error`] or no frames, never a panic: an address
//!   that cannot be symbolized yields an empty frame list and the caller keeps its mapping and
//!   address.
//! - No I/O beyond reading the files it is asked to read (and, for [`find_debug_file`], the
//!   candidate paths of the debug directories it is given); which file holds a process's code
//!   (through `/proc/PID/root`, for containers) and network fetches (debuginfod) are the
//!   caller's business.
//! - Unwinding keeps only an index of FDEs per object in memory and reads the rest from the
//!   file when a row is first needed; a walk reads only the stack copy it is given.
//! - Objects are read piecewise (headers, symbol tables, DWARF sections), never whole. Other
//!   programs' files are never mapped (one truncated under the mapping would fault the
//!   reader): their DWARF is written once, decompressed, into a [`DwarfCache`] directory that
//!   only the symbolizer writes, and mapped from there ([`ElfObject::read_cached`]); without
//!   one, it is copied into memory, bounded per object ([`DEFAULT_MAX_DWARF_BYTES`]) and in
//!   total ([`Options::max_dwarf_bytes`]); past that, symbol tables are used alone. A process
//!   symbolizing its own code maps its DWARF ([`ElfObject::open_mapped`]).
//! - No writes but the [`DwarfCache`]'s, in the directory it is given.
//! - Only this crate sees gimli, addr2line, object and lzma-rs.
//!
//! # Example
//!
//! ```
//! use parca_symbolize::{ElfObject, demangle};
//!
//! let exe = std::env::current_exe().unwrap();
//! let object = ElfObject::open(&exe).unwrap();
//! assert!(object.n_symbols() > 0);
//! assert_eq!(demangle("_ZN4core3fmt5write17h0123456789abcdefE"), "core::fmt::write");
//! ```

mod debugfile;
mod demangle;
mod dwarf_cache;
mod elf;
mod error;
mod jvm_runtime;
mod kallsyms;
mod read_at;
mod runtime;
mod symbolizer;
pub mod unwind;
mod v8_runtime;

pub use debugfile::{DebugFileQuery, build_id_path, find_debug_file};
pub use demangle::demangle;
pub use dwarf_cache::DwarfCache;
pub use elf::{
    BuildId, DEFAULT_MAX_DWARF_BYTES, DebugLink, DebugNeeds, ElfObject, SymbolSource,
    read_build_id, read_debug_needs,
};
pub use error::Error;
pub use jvm_runtime::{JvmRuntime, read_jvm_runtime};
pub use kallsyms::Kallsyms;
pub use runtime::{
    InterpreterRuntime, PythonRuntime, read_php_runtime, read_python_runtime, read_ruby_runtime,
};
pub use symbolizer::{ObjectKey, Options, Stats, Symbolizer};
pub use v8_runtime::{V8Runtime, read_v8_runtime};

/// One frame of a symbolized address. An address gives several when functions were inlined
/// there: innermost first, the function they were inlined into last.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Frame {
    /// The readable name (demangled).
    pub function: String,
    /// The name as the object spells it (mangled).
    pub system_name: String,
    /// The source file, when DWARF says.
    pub file: Option<String>,
    /// The source line, 0 when unknown.
    pub line: u32,
}
