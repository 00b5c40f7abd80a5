//! The one place with `unsafe`: read-only memory maps of block files (memmap2).
//!
//! Block files are immutable once renamed into place: nothing in this process writes them, and
//! they are deleted (unlinked) only after every reader has let go of the block set that holds
//! them. Unlinking a mapped file on Linux keeps the mapping valid.

use std::fs::File;
use std::ops::Deref;
use std::path::Path;

/// A whole file mapped read-only.
#[derive(Debug)]
pub(crate) struct MappedFile {
    map: memmap2::Mmap,
}

impl MappedFile {
    /// Maps the file at `path`.
    pub fn open(path: &Path) -> std::io::Result<MappedFile> {
        let file = File::open(path)?;
        // SAFETY: memmap2 requires that the file is not modified or truncated while mapped,
        // or reads through the map see changed bytes (or SIGBUS on truncation). Block files are
        // written once under a temporary directory name and never opened for writing after the
        // rename that publishes them; the store only ever deletes whole block directories, which
        // leaves existing mappings intact. Another process truncating the file is outside what
        // any mmap-based reader (Prometheus, tantivy, ripgrep) can defend against; every byte
        // read is still bounds-checked, so changed bytes give errors, not undefined reads.
        let map = unsafe { memmap2::Mmap::map(&file)? };
        Ok(MappedFile { map })
    }
}

impl Deref for MappedFile {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.map
    }
}
