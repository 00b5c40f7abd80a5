//! [`Symbolizer`]: objects parsed once per build id, results memoized per address.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;

use crate::{BuildId, DEFAULT_MAX_DWARF_BYTES, ElfObject, Error, Frame, Kallsyms};

/// What identifies an object file across processes: its build id, or without one the file
/// itself (device and inode as `stat` gives them, which are unique on the node).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ObjectKey {
    /// The object's GNU build id.
    BuildId(BuildId),
    /// An object without a build id.
    File {
        /// `st_dev`.
        dev: u64,
        /// `st_ino`.
        inode: u64,
    },
}

/// Limits and paths of a [`Symbolizer`].
#[derive(Debug, Clone)]
pub struct Options {
    /// At most this many objects are kept parsed; the least recently used go first.
    pub max_objects: usize,
    /// At most this many addresses are memoized per object (the memo is cleared past it).
    pub max_addresses_per_object: usize,
    /// DWARF of one object is loaded only up to this size (decompressed).
    pub max_dwarf_bytes_per_object: u64,
    /// DWARF held for all objects together: past it, the least recently used objects are
    /// dropped (and parsed again when needed).
    pub max_dwarf_bytes: u64,
    /// The kernel's symbol list, normally `/proc/kallsyms`.
    pub kallsyms_path: PathBuf,
    /// A kernel address not found is retried after reloading kallsyms (modules come and go),
    /// at most this often.
    pub kallsyms_reload_interval: Duration,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            max_objects: 512,
            max_addresses_per_object: 1 << 16,
            max_dwarf_bytes_per_object: DEFAULT_MAX_DWARF_BYTES,
            max_dwarf_bytes: 32 << 20,
            kallsyms_path: PathBuf::from("/proc/kallsyms"),
            kallsyms_reload_interval: Duration::from_secs(300),
        }
    }
}

/// Counters of a [`Symbolizer`], for metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Lookups answered from the memo.
    pub hits: u64,
    /// Lookups that had to search an object or kallsyms.
    pub misses: u64,
    /// Objects parsed (each build id once while it stays cached).
    pub objects_loaded: u64,
    /// Objects that could not be opened or parsed.
    pub object_errors: u64,
    /// Objects dropped to stay within [`Options::max_objects`] or [`Options::max_dwarf_bytes`].
    pub objects_evicted: u64,
    /// Objects held parsed now.
    pub objects_cached: u64,
    /// Addresses memoized now.
    pub addresses_cached: u64,
    /// Bytes of DWARF and symbol tables held in memory now (roughly).
    pub bytes_cached: u64,
    /// Bytes of DWARF mapped from the DWARF cache now ([`ElfObject::read_cached`]).
    pub dwarf_mapped_bytes: u64,
}

enum Loaded {
    Ok(Box<ElfObject>),
    Failed,
    /// Parsed once, dropped to stay within the DWARF budget; its memo is kept, and it is parsed
    /// again only for an address not memoized.
    Unloaded,
}

struct Slot {
    object: Loaded,
    memo: FxHashMap<u64, Arc<[Frame]>>,
    last_used: u64,
}

/// Symbolizes user addresses (per object file) and kernel addresses, caching parsed objects
/// per [`ObjectKey`] and results per address.
///
/// Unknown addresses give an empty frame list: callers keep the address and its mapping.
pub struct Symbolizer {
    options: Options,
    objects: FxHashMap<ObjectKey, Slot>,
    kernel: Option<Kallsyms>,
    kernel_memo: FxHashMap<u64, Arc<[Frame]>>,
    kernel_error: Option<String>,
    kernel_loaded_at: Option<Instant>,
    last_object_error: Option<String>,
    empty: Arc<[Frame]>,
    tick: u64,
    stats: Stats,
}

impl std::fmt::Debug for Symbolizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Symbolizer")
            .field("options", &self.options)
            .field("stats", &self.stats)
            .finish()
    }
}

impl Symbolizer {
    /// An empty symbolizer.
    pub fn new(options: Options) -> Symbolizer {
        Symbolizer {
            options,
            objects: FxHashMap::default(),
            kernel: None,
            kernel_memo: FxHashMap::default(),
            kernel_error: None,
            kernel_loaded_at: None,
            last_object_error: None,
            empty: Arc::from(Vec::new()),
            tick: 0,
            stats: Stats::default(),
        }
    }

    /// Whether the object `key` is parsed and cached (successfully or not).
    pub fn contains(&self, key: &ObjectKey) -> bool {
        self.objects
            .get(key)
            .is_some_and(|s| !matches!(s.object, Loaded::Unloaded))
    }

    /// Parses the object `key` with `open` unless it is cached already. `open` is given the
    /// most DWARF it may load (pass it to [`ElfObject::read`]).
    pub fn prepare(&mut self, key: &ObjectKey, open: impl FnOnce(u64) -> Result<ElfObject, Error>) {
        self.tick += 1;
        let tick = self.tick;
        if let Some(slot) = self.objects.get_mut(key) {
            slot.last_used = tick;
            if !matches!(slot.object, Loaded::Unloaded) {
                return;
            }
        }
        let limit = self
            .options
            .max_dwarf_bytes_per_object
            .min(self.options.max_dwarf_bytes);
        let object = match open(limit) {
            Ok(object) => {
                self.stats.objects_loaded += 1;
                self.make_room_for_dwarf(object.dwarf_bytes());
                Loaded::Ok(Box::new(object))
            }
            Err(e) => {
                self.stats.object_errors += 1;
                self.last_object_error = Some(format!("{e}"));
                Loaded::Failed
            }
        };
        let slot = self.objects.entry(key.clone()).or_insert_with(|| Slot {
            object: Loaded::Unloaded,
            memo: FxHashMap::default(),
            last_used: tick,
        });
        slot.object = object;
    }

    /// Drops the least recently used objects holding DWARF until `incoming` more fits within
    /// [`Options::max_dwarf_bytes`].
    fn make_room_for_dwarf(&mut self, incoming: u64) {
        let dwarf = |slot: &Slot| match &slot.object {
            Loaded::Ok(o) => o.dwarf_bytes(),
            Loaded::Failed | Loaded::Unloaded => 0,
        };
        let mut held: u64 = self.objects.values().map(dwarf).sum();
        while held + incoming > self.options.max_dwarf_bytes {
            let Some((key, bytes)) = self
                .objects
                .iter()
                .filter(|(_, s)| dwarf(s) > 0)
                .min_by_key(|(_, s)| s.last_used)
                .map(|(k, s)| (k.clone(), dwarf(s)))
            else {
                break;
            };
            if let Some(slot) = self.objects.get_mut(&key) {
                slot.object = Loaded::Unloaded;
            }
            self.stats.objects_evicted += 1;
            held -= bytes;
        }
    }

    /// The frames at `file_offset` of object `key`, innermost first; `open` parses the object
    /// the first time (see [`Symbolizer::prepare`]). Pass the offset of a return address minus
    /// one. Empty when unknown (the object could not be read, or has no symbol there).
    pub fn symbolize(
        &mut self,
        key: &ObjectKey,
        open: impl FnOnce(u64) -> Result<ElfObject, Error>,
        file_offset: u64,
    ) -> Arc<[Frame]> {
        if let Some(slot) = self.objects.get_mut(key) {
            self.tick += 1;
            slot.last_used = self.tick;
            if let Some(frames) = slot.memo.get(&file_offset) {
                self.stats.hits += 1;
                return frames.clone();
            }
        }
        self.stats.misses += 1;
        self.prepare(key, open);
        let max = self.options.max_addresses_per_object;
        let slot = self.objects.get_mut(key).expect("prepare inserted it");
        let frames: Arc<[Frame]> = match &slot.object {
            Loaded::Ok(object) => object
                .vaddr_of_file_offset(file_offset)
                .and_then(|vaddr| object.symbolize_shared(vaddr))
                .unwrap_or_else(|| self.empty.clone()),
            Loaded::Failed | Loaded::Unloaded => self.empty.clone(),
        };
        if slot.memo.len() >= max {
            slot.memo.clear();
        }
        slot.memo.insert(file_offset, frames.clone());
        frames
    }

    /// The kernel function at `addr` (pass a return address minus one), from kallsyms (read on
    /// first use, reread when an address is not found and the last read is old enough).
    /// `None` when kallsyms cannot be read or has no symbol there.
    pub fn symbolize_kernel(&mut self, addr: u64) -> Option<Arc<[Frame]>> {
        if let Some(frames) = self.kernel_memo.get(&addr) {
            self.stats.hits += 1;
            return (!frames.is_empty()).then(|| frames.clone());
        }
        self.stats.misses += 1;
        let stale = self
            .kernel_loaded_at
            .is_none_or(|t| t.elapsed() >= self.options.kallsyms_reload_interval);
        let mut frame = self.kernel.as_ref().and_then(|k| k.frame(addr));
        if frame.is_none() && stale {
            self.reload_kallsyms();
            frame = self.kernel.as_ref().and_then(|k| k.frame(addr));
        }
        let frames: Arc<[Frame]> = frame.map_or_else(|| self.empty.clone(), |f| Arc::from([f]));
        if self.kernel_memo.len() >= self.options.max_addresses_per_object {
            self.kernel_memo.clear();
        }
        self.kernel_memo.insert(addr, frames.clone());
        (!frames.is_empty()).then_some(frames)
    }

    fn reload_kallsyms(&mut self) {
        // Why it failed is kept for `kernel_error`; the first load returns it too.
        let _ = self.try_reload_kallsyms();
    }

    fn try_reload_kallsyms(&mut self) -> Result<usize, Error> {
        self.kernel_loaded_at = Some(Instant::now());
        self.kernel_memo.clear();
        match Kallsyms::load(&self.options.kallsyms_path) {
            Ok(k) => {
                let n = k.len();
                self.kernel = Some(k);
                self.kernel_error = None;
                Ok(n)
            }
            Err(e) => {
                self.kernel_error = Some(format!("{e}"));
                Err(e)
            }
        }
    }

    /// Loads kallsyms now (the number of symbols); the error says why kernel frames will stay
    /// unsymbolized.
    pub fn load_kallsyms(&mut self) -> Result<usize, Error> {
        self.try_reload_kallsyms()
    }

    /// Why kernel frames are not symbolized, if they are not.
    pub fn kernel_error(&self) -> Option<&str> {
        self.kernel_error.as_deref()
    }

    /// The last object that could not be read, and why.
    pub fn last_object_error(&self) -> Option<&str> {
        self.last_object_error.as_deref()
    }

    /// Drops the least recently used objects beyond [`Options::max_objects`], and the pages
    /// of mapped DWARF the window's lookups touched ([`ElfObject::release_mapped_dwarf`]).
    /// Call once per profiling window.
    pub fn trim(&mut self) {
        for slot in self.objects.values() {
            if let Loaded::Ok(object) = &slot.object {
                object.release_mapped_dwarf();
            }
        }
        let excess = self.objects.len().saturating_sub(self.options.max_objects);
        if excess > 0 {
            let mut ticks: Vec<u64> = self.objects.values().map(|s| s.last_used).collect();
            ticks.sort_unstable();
            let cutoff = ticks[excess - 1];
            let before = self.objects.len();
            self.objects.retain(|_, s| s.last_used > cutoff);
            self.stats.objects_evicted += (before - self.objects.len()) as u64;
        }
    }

    /// The counters, with the current cache sizes.
    pub fn stats(&self) -> Stats {
        let mut stats = self.stats.clone();
        stats.objects_cached = self
            .objects
            .values()
            .filter(|s| matches!(s.object, Loaded::Ok(_)))
            .count() as u64;
        stats.addresses_cached = self
            .objects
            .values()
            .map(|s| s.memo.len() as u64)
            .sum::<u64>()
            + self.kernel_memo.len() as u64;
        stats.bytes_cached = self
            .objects
            .values()
            .map(|s| match &s.object {
                Loaded::Ok(o) => o.dwarf_bytes() + o.symbol_bytes(),
                Loaded::Failed | Loaded::Unloaded => 0,
            })
            .sum();
        stats.dwarf_mapped_bytes = self
            .objects
            .values()
            .map(|s| match &s.object {
                Loaded::Ok(o) => o.dwarf_mapped_bytes(),
                Loaded::Failed | Loaded::Unloaded => 0,
            })
            .sum();
        stats
    }

    /// Path of the kallsyms file in use.
    pub fn kallsyms_path(&self) -> &Path {
        &self.options.kallsyms_path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_parse_once_and_failures_are_remembered() {
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let mut s = Symbolizer::new(Options::default());
        let key = ObjectKey::File { dev: 1, inode: 2 };
        let mut opens = 0;
        for _ in 0..3 {
            s.symbolize(
                &key,
                |limit| {
                    opens += 1;
                    let file = std::fs::File::open(&exe).unwrap();
                    ElfObject::read(&file, &exe, limit)
                },
                0,
            );
        }
        assert_eq!(opens, 1);
        let stats = s.stats();
        assert_eq!((stats.objects_loaded, stats.hits, stats.misses), (1, 2, 1));

        let bad = ObjectKey::File { dev: 1, inode: 3 };
        let missing = Path::new("/nonexistent/object");
        assert!(
            s.symbolize(&bad, |_| ElfObject::open(missing), 0)
                .is_empty()
        );
        assert!(s.symbolize(&bad, |_| panic!("not reopened"), 8).is_empty());
        assert_eq!(s.stats().object_errors, 1);
        assert!(
            s.last_object_error()
                .unwrap()
                .contains("/nonexistent/object")
        );
    }

    #[test]
    fn dwarf_beyond_the_budget_evicts_the_least_recent() {
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        // Read whole: this test binary's DWARF is near the default budget.
        let file = std::fs::File::open(&exe).unwrap();
        let own = ElfObject::read(&file, &exe, u64::MAX)
            .unwrap()
            .dwarf_bytes();
        assert!(own > 0);
        // Room for one copy of this binary's DWARF, not two.
        let mut s = Symbolizer::new(Options {
            max_dwarf_bytes: own + own / 2,
            max_dwarf_bytes_per_object: own,
            ..Options::default()
        });
        let open = |limit: u64| {
            let file = std::fs::File::open(&exe).unwrap();
            ElfObject::read(&file, &exe, limit)
        };
        s.prepare(&ObjectKey::File { dev: 0, inode: 1 }, open);
        s.prepare(&ObjectKey::File { dev: 0, inode: 2 }, open);
        assert!(!s.contains(&ObjectKey::File { dev: 0, inode: 1 }));
        assert!(s.contains(&ObjectKey::File { dev: 0, inode: 2 }));
        assert_eq!(s.stats().objects_evicted, 1);
        assert!(s.stats().bytes_cached >= own, "{:?} vs {own}", s.stats());

        // An evicted object keeps what it answered: no reparse for a memoized address.
        let third = ObjectKey::File { dev: 0, inode: 3 };
        s.symbolize(&third, open, 0x1000);
        s.symbolize(&ObjectKey::File { dev: 0, inode: 4 }, open, 0x1000);
        assert!(!s.contains(&third));
        s.symbolize(&third, |_| panic!("memoized: not reparsed"), 0x1000);
    }

    #[test]
    fn trim_keeps_the_most_recent() {
        let mut s = Symbolizer::new(Options {
            max_objects: 2,
            ..Options::default()
        });
        for inode in 0..5 {
            let key = ObjectKey::File { dev: 0, inode };
            s.prepare(&key, |_| ElfObject::open(Path::new("/nonexistent")));
        }
        s.trim();
        let held = (0..5)
            .filter(|&inode| s.contains(&ObjectKey::File { dev: 0, inode }))
            .count();
        assert_eq!(held, 2);
        assert_eq!(s.stats().objects_evicted, 3);
        assert!(s.contains(&ObjectKey::File { dev: 0, inode: 4 }));
    }

    #[test]
    fn kernel_without_kallsyms_is_unknown_not_a_crash() {
        let mut s = Symbolizer::new(Options {
            kallsyms_path: PathBuf::from("/nonexistent/kallsyms"),
            ..Options::default()
        });
        assert!(s.symbolize_kernel(0xffffffff81000000).is_none());
        assert!(s.kernel_error().unwrap().contains("/nonexistent/kallsyms"));
    }
}
