//! [`DwarfCache`]: objects' DWARF sections written out once, decompressed, one file per build
//! id, and mapped from there.
//!
//! Debian's debug files and Go binaries compress their DWARF; a symbolizer that holds it in
//! memory pays the inflated size in RSS, and one that lets it go (to stay within a memory
//! budget) inflates it again at the next miss: on a node running two large interpreters that
//! was half of the agent's CPU. Written once to a directory that only the agent writes, the
//! sections are mapped instead: no copy in the heap, pages read as lookups touch them and the
//! kernel's to reclaim, nothing inflated twice, across restarts too. (Other programs' files are
//! never mapped: one truncated under the mapping would fault the agent.)
//!
//! Each file is written to a temporary name, synced and renamed, so a file under its final name
//! is whole; its header is checked before use. The directory is kept under a byte bound, the
//! least recently used files deleted first.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use crate::Error;

/// The first bytes of a cache file (and its format version).
const MAGIC: &[u8; 8] = b"PARCADW1";
/// Bytes of a section name in the header, zero-padded.
const NAME_BYTES: usize = 24;
/// Bytes of one header entry: name, offset, length.
const ENTRY_BYTES: usize = NAME_BYTES + 16;
/// More sections than DWARF has: a header claiming more is damaged.
const MAX_SECTIONS: usize = 32;

/// A directory of decompressed DWARF, by build id. See the module documentation.
#[derive(Debug)]
pub struct DwarfCache {
    dir: PathBuf,
    max_bytes: u64,
    /// Counts temporary files, so that two writers in one process never share one.
    writes: AtomicU64,
    /// Keys whose write failed (a full disk, a read-only directory), with why: not tried again
    /// while the process runs, so that each reload does not pay for inflating in vain.
    refused: Mutex<HashMap<String, String>>,
}

/// The DWARF sections of one object, mapped from its cache file.
#[derive(Debug, Clone)]
pub(crate) struct CachedDwarf {
    pub(crate) map: Arc<memmap2::Mmap>,
    sections: Vec<(String, Range<usize>)>,
}

impl CachedDwarf {
    /// The byte range of section `name` (`.debug_info`, …) in [`CachedDwarf::map`].
    pub(crate) fn section(&self, name: &str) -> Option<Range<usize>> {
        self.sections
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, r)| r.clone())
    }

    /// Bytes mapped.
    pub(crate) fn len(&self) -> u64 {
        self.map.len() as u64
    }
}

impl DwarfCache {
    /// A cache in `dir` holding at most `max_bytes`. A new directory is created for its owner
    /// only (mode 0700); an existing one must be a directory that no one else may write (its
    /// files are mapped: another user who could replace or truncate them could fault the reader
    /// or feed it lies), else the error says so. Temporary files a killed writer left behind
    /// are removed.
    pub fn new(dir: &Path, max_bytes: u64) -> Result<DwarfCache, Error> {
        use std::os::unix::fs::{DirBuilderExt, MetadataExt};
        let io = |e: std::io::Error| Error::DwarfCacheDir {
            path: dir.to_owned(),
            why: e.to_string(),
        };
        if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(io)?;
        }
        match std::fs::DirBuilder::new().mode(0o700).create(dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io(e)),
        }
        let meta = std::fs::symlink_metadata(dir).map_err(io)?;
        // SAFETY: geteuid only reads the process's effective user id.
        let me = unsafe { libc::geteuid() };
        let why = if !meta.is_dir() {
            Some("is not a directory")
        } else if meta.uid() != me {
            Some("belongs to another user")
        } else if meta.mode() & 0o022 != 0 {
            Some(
                "may be written by other users (use a directory of its own, e.g. /var/cache/parca-agent/dwarf)",
            )
        } else {
            None
        };
        if let Some(why) = why {
            return Err(Error::DwarfCacheDir {
                path: dir.to_owned(),
                why: format!("it {why}"),
            });
        }
        for entry in std::fs::read_dir(dir).map_err(io)?.flatten() {
            if entry.file_name().to_string_lossy().starts_with(".tmp-") {
                let _ = std::fs::remove_file(entry.path());
            }
        }
        Ok(DwarfCache {
            dir: dir.to_owned(),
            max_bytes,
            writes: AtomicU64::new(0),
            refused: Mutex::new(HashMap::new()),
        })
    }

    /// The most bytes the directory holds.
    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    fn path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.dwarf"))
    }

    /// The sections cached under `key` (a build id, in hex), if a whole file is there (its
    /// use time is renewed, for the least-recently-used bound).
    pub(crate) fn open(&self, key: &str) -> Option<CachedDwarf> {
        let path = self.path(key);
        let file = File::options().read(true).write(true).open(&path).ok()?;
        // SAFETY: only this cache writes the directory's files, never in place (a new file is
        // renamed over an old one), so the mapping does not change under its readers.
        let map = unsafe { memmap2::Mmap::map(&file) }.ok()?;
        match parse_header(&map) {
            Some(sections) => {
                // Lookups touch scattered pages: no read-ahead around them.
                let _ = map.advise(memmap2::Advice::Random);
                let _ = file.set_modified(SystemTime::now());
                Some(CachedDwarf {
                    map: Arc::new(map),
                    sections,
                })
            }
            None => {
                // Damaged (written by a build of another format, or cut short by a full disk
                // outside this process's view): written again at the next store.
                let _ = std::fs::remove_file(&path);
                None
            }
        }
    }

    /// Writes the sections `names` under `key`, each one's bytes streamed by `section` into the
    /// writer it is given (false: the object has no such section), then maps the file. `total`, their summed size,
    /// is known in advance: more than half the cache is not written (it would push out
    /// everything else).
    pub(crate) fn store(
        &self,
        key: &str,
        names: &[&str],
        total: u64,
        mut section: impl FnMut(&str, &mut dyn Write) -> std::io::Result<bool>,
    ) -> Result<CachedDwarf, Error> {
        let path = self.path(key);
        if total > self.max_bytes / 2 {
            return Err(Error::DwarfTooLarge {
                path,
                size_bytes: total,
                max_bytes: self.max_bytes / 2,
            });
        }
        let refused = |why: &str| Error::DwarfCacheWrite {
            path: path.clone(),
            why: why.to_owned(),
        };
        if let Some(why) = self.refused.lock().expect("dwarf cache lock").get(key) {
            return Err(refused(why));
        }
        let names: Vec<&str> = names
            .iter()
            .copied()
            .filter(|n| n.len() <= NAME_BYTES)
            .take(MAX_SECTIONS)
            .collect();
        let n = self.writes.fetch_add(1, Ordering::Relaxed);
        let tmp = self
            .dir
            .join(format!(".tmp-{}-{n}-{key}", std::process::id()));
        let written =
            write_file(&tmp, &names, &mut section).and_then(|()| std::fs::rename(&tmp, &path));
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            let why = e.to_string();
            self.refused
                .lock()
                .expect("dwarf cache lock")
                .insert(key.to_owned(), why.clone());
            return Err(refused(&why));
        }
        self.trim(&path);
        self.open(key)
            .ok_or_else(|| refused("the file just written does not read back"))
    }

    /// Deletes the least recently used files (never `keep`) until the directory fits.
    fn trim(&self, keep: &Path) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let mut files: Vec<(SystemTime, u64, PathBuf)> = entries
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".dwarf"))
            .filter_map(|e| {
                let meta = e.metadata().ok()?;
                Some((meta.modified().ok()?, meta.len(), e.path()))
            })
            .collect();
        let mut total: u64 = files.iter().map(|f| f.1).sum();
        files.sort();
        for (_, len, path) in files {
            if total <= self.max_bytes {
                break;
            }
            if path != keep && std::fs::remove_file(&path).is_ok() {
                total -= len;
            }
        }
    }
}

/// Writes header and sections to `path`, synced. Sections start at multiples of 8.
fn write_file(
    path: &Path,
    names: &[&str],
    section: &mut impl FnMut(&str, &mut dyn Write) -> std::io::Result<bool>,
) -> std::io::Result<()> {
    let file = File::create(path)?;
    let mut out = Counting {
        inner: BufWriter::with_capacity(1 << 20, &file),
        written: 0,
    };
    let header_len = 16 + names.len() * ENTRY_BYTES;
    // The header is written last, once the sections' places are known.
    out.write_all(&vec![0; header_len])?;
    let mut entries = Vec::with_capacity(names.len());
    for name in names {
        let pad = out.written.next_multiple_of(8) - out.written;
        out.write_all(&[0; 8][..pad as usize])?;
        let start = out.written;
        if section(name, &mut out)? {
            entries.push((*name, start, out.written - start));
        }
    }
    let mut header = Vec::with_capacity(header_len);
    header.extend_from_slice(MAGIC);
    header.extend_from_slice(&(entries.len() as u32).to_le_bytes());
    header.extend_from_slice(&[0; 4]);
    for (name, offset, len) in &entries {
        let mut padded = [0u8; NAME_BYTES];
        padded[..name.len()].copy_from_slice(name.as_bytes());
        header.extend_from_slice(&padded);
        header.extend_from_slice(&offset.to_le_bytes());
        header.extend_from_slice(&len.to_le_bytes());
    }
    header.resize(header_len, 0);
    let file = out
        .inner
        .into_inner()
        .map_err(std::io::IntoInnerError::into_error)?;
    use std::os::unix::fs::FileExt;
    file.write_all_at(&header, 0)?;
    file.sync_all()
}

/// A writer that counts what goes through it.
struct Counting<W> {
    inner: W,
    written: u64,
}

impl<W: Write> Write for Counting<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// The sections a cache file's header lists, each within the file; `None` if it is damaged.
fn parse_header(bytes: &[u8]) -> Option<Vec<(String, Range<usize>)>> {
    if bytes.get(..8)? != MAGIC {
        return None;
    }
    let count = u32::from_le_bytes(bytes.get(8..12)?.try_into().ok()?) as usize;
    if count > MAX_SECTIONS {
        return None;
    }
    let mut sections = Vec::with_capacity(count);
    for i in 0..count {
        let entry = bytes.get(16 + i * ENTRY_BYTES..16 + (i + 1) * ENTRY_BYTES)?;
        let name = &entry[..NAME_BYTES];
        let name = std::str::from_utf8(&name[..name.iter().position(|&b| b == 0)?]).ok()?;
        let offset = usize::try_from(u64::from_le_bytes(
            entry[NAME_BYTES..NAME_BYTES + 8].try_into().ok()?,
        ))
        .ok()?;
        let len =
            usize::try_from(u64::from_le_bytes(entry[NAME_BYTES + 8..].try_into().ok()?)).ok()?;
        let end = offset.checked_add(len).filter(|&e| e <= bytes.len())?;
        sections.push((name.to_owned(), offset..end));
    }
    Some(sections)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn store(
        cache: &DwarfCache,
        key: &str,
        sections: &[(&str, Vec<u8>)],
    ) -> Result<CachedDwarf, Error> {
        let names: Vec<&str> = sections.iter().map(|s| s.0).collect();
        let total = sections.iter().map(|s| s.1.len() as u64).sum();
        cache.store(key, &names, total, |name, out| {
            match sections.iter().find(|s| s.0 == name) {
                Some(s) => out.write_all(&s.1).map(|()| true),
                None => Ok(false),
            }
        })
    }

    #[test]
    fn sections_are_read_back_from_the_file_and_from_a_new_cache() {
        let dir = tempfile::tempdir().unwrap();
        let cache = DwarfCache::new(dir.path(), 1 << 20).unwrap();
        let id = "abcd";
        assert!(cache.open(id).is_none());
        let info: Vec<u8> = (0..1000u32).map(|i| i as u8).collect();
        let cached = store(
            &cache,
            id,
            &[
                (".debug_info", info.clone()),
                (".debug_line", vec![7; 13]),
                (".debug_str", Vec::new()),
            ],
        )
        .unwrap();
        let r = cached.section(".debug_info").unwrap();
        assert_eq!(r.start % 8, 0);
        assert_eq!(&cached.map[r], &info[..]);
        assert_eq!(
            &cached.map[cached.section(".debug_line").unwrap()],
            &[7; 13]
        );
        assert_eq!(cached.section(".debug_str").unwrap().len(), 0);
        assert!(cached.section(".debug_ranges").is_none());
        // Another agent process (a restart) finds it.
        let again = DwarfCache::new(dir.path(), 1 << 20)
            .unwrap()
            .open(id)
            .unwrap();
        assert_eq!(&again.map[again.section(".debug_info").unwrap()], &info[..]);
        assert!(dir.path().join("abcd.dwarf").exists());
    }

    #[test]
    fn a_directory_others_may_write_is_refused_and_left_as_it_is() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let shared = dir.path().join("shared");
        std::fs::create_dir(&shared).unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let err = DwarfCache::new(&shared, 1 << 20).unwrap_err().to_string();
        assert!(err.contains("may be written by other users"), "{err}");
        let mode = std::fs::metadata(&shared).unwrap().permissions().mode();
        assert_eq!(mode & 0o7777, 0o1777, "not changed");
        // A new one is made for its owner only.
        let new = dir.path().join("a/b/dwarf");
        DwarfCache::new(&new, 1 << 20).unwrap();
        let mode = std::fs::metadata(&new).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        let file = dir.path().join("file");
        std::fs::write(&file, b"").unwrap();
        let err = DwarfCache::new(&file, 1 << 20).unwrap_err().to_string();
        assert!(err.contains("not a directory"), "{err}");
    }

    #[test]
    fn damaged_files_are_dropped_and_leftovers_cleaned() {
        let dir = tempfile::tempdir().unwrap();
        let id = "0102";
        std::fs::write(dir.path().join(".tmp-1-0-0102"), b"half").unwrap();
        let cache = DwarfCache::new(dir.path(), 1 << 20).unwrap();
        assert!(!dir.path().join(".tmp-1-0-0102").exists());
        let cached = store(&cache, id, &[(".debug_info", vec![1; 64])]).unwrap();
        let len = cached.len() as usize;
        drop(cached);
        // Cut short: the header's section runs past the end.
        let path = dir.path().join("0102.dwarf");
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..len - 1]).unwrap();
        assert!(cache.open(id).is_none());
        assert!(!path.exists(), "a damaged file is removed");
        std::fs::write(&path, b"PARCADW0").unwrap();
        assert!(cache.open(id).is_none());
        assert!(parse_header(&[]).is_none());
    }

    #[test]
    fn the_least_recently_used_files_go_first_and_too_large_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let cache = DwarfCache::new(dir.path(), 2500).unwrap();
        let ids = ["01", "02", "03"];
        for (i, id) in ids[..2].iter().enumerate() {
            store(&cache, id, &[(".debug_info", vec![0; 1000])]).unwrap();
            let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1000 + i as u64);
            File::options()
                .write(true)
                .open(cache.path(id))
                .unwrap()
                .set_modified(t)
                .unwrap();
        }
        // The older one is used again: the other goes when a third comes.
        assert!(cache.open(ids[0]).is_some());
        store(&cache, ids[2], &[(".debug_info", vec![0; 1000])]).unwrap();
        assert!(cache.path(ids[0]).exists());
        assert!(!cache.path(ids[1]).exists());
        assert!(cache.path(ids[2]).exists());
        // More than half the cache would push out everything else.
        let err = store(&cache, "09", &[(".debug_info", vec![0; 1300])]).unwrap_err();
        assert!(matches!(err, Error::DwarfTooLarge { .. }), "{err}");
    }
}
