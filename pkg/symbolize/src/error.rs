//! The crate's one error type.

use std::path::PathBuf;

/// What can go wrong while reading an object file or the kernel's symbols.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file could not be opened or read.
    #[error("cannot read `{path}`")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The DWARF cache's directory cannot be used.
    #[error("cannot use `{path}` as the DWARF cache: {why}")]
    DwarfCacheDir {
        /// The directory.
        path: PathBuf,
        /// Why, and what to do.
        why: String,
    },
    /// An object's DWARF could not be written to the DWARF cache (it is held in memory instead).
    #[error("cannot write `{path}` to the DWARF cache: {why}")]
    DwarfCacheWrite {
        /// The cache file.
        path: PathBuf,
        /// Why (a full disk, a read-only directory).
        why: String,
    },
    /// The file is not an ELF object we can parse (or its headers are corrupt).
    #[error("`{path}` is not a readable ELF object")]
    Elf {
        /// The file.
        path: PathBuf,
        /// What the parser found.
        #[source]
        source: object::Error,
    },
    /// The file's DWARF is malformed; its symbol table can still be used.
    #[error("`{path}` has malformed DWARF")]
    Dwarf {
        /// The file.
        path: PathBuf,
        /// What gimli found.
        #[source]
        source: gimli::Error,
    },
    /// The file's DWARF is larger than allowed; its symbol table is used alone.
    #[error(
        "`{path}` has {size_bytes} bytes of DWARF, over the limit of {max_bytes}: symbolized from \
         its symbol table only (no lines, no inlined frames)"
    )]
    DwarfTooLarge {
        /// The file.
        path: PathBuf,
        /// Its DWARF, decompressed.
        size_bytes: u64,
        /// The limit.
        max_bytes: u64,
    },
    /// `/proc/kallsyms` lists every address as zero: the reader lacks the right to see them.
    #[error(
        "kernel symbol addresses in `{path}` are hidden (all zero): reading them needs root or \
         CAP_SYSLOG, and `kernel.kptr_restrict` below 2"
    )]
    KallsymsHidden {
        /// The file read.
        path: PathBuf,
    },
}
