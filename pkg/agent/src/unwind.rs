//! The unwind tables the BPF program walks user stacks with: each object's CFI (`.eh_frame`,
//! `.debug_frame`) compiled once ([`compact::compile`]) into rows loaded into the program's
//! `unwind_rows` map, shared by every process that maps the object ([`ObjectKey`]: build id),
//! and each process's executable mappings told to the program with their tables and load biases.
//!
//! Memory is bounded by construction: the tables take at most the budget given at start
//! (`--unwind-tables-max-bytes`, in chunks of [`ROWS_PER_CHUNK`] rows); a table takes a run of
//! chunks, and when no free run holds it, the run whose tables were least recently used is
//! emptied for it (a mapping naming an evicted table finds no rows, and the sample says so, so
//! its process is told again and the table reloaded).
//! At most [`MAX_PROCESSES`] processes are held (the least recently sampled go first), and an
//! object whose CFI is larger than [`compact::Limits`] allow is refused and counted.
//!
//! Samples of processes the program was not told yet (their first milliseconds) are walked by frame
//! pointers in the kernel (`bpf_get_stackid`); [`Unwinder::check_kernel_walk`] cuts those walks
//! where they cannot be trusted, with the objects' lazily read CFI.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parca_symbolize::ObjectKey;
use parca_symbolize::unwind::compact::{self, CompactTable, CompileError, Limits};
use parca_symbolize::unwind::{
    FramePointerCensus, StackEnd, UnwindTable, check_frame_pointer_walk,
};
use rustc_hash::{FxHashMap, FxHashSet};

use crate::Error;
use crate::bpf::{
    MAP_FP, MAX_MAPPINGS, MAX_OBJECTS, MAX_PROCESSES, MappingEntry, PageIndex, ROWS_PER_CHUNK,
    Sampler, UnwindRow,
};
use crate::process::{MappedObject, ProcessInfo};

/// Compiled tables freed (after loading) before the heap is trimmed: smaller ones' memory is
/// reused by the next compile.
const TRIM_AFTER_BYTES: usize = 1 << 20;

/// Deepest user stack of a frame-pointer walk in the kernel (its stack map's limit).
pub const MAX_KERNEL_WALK_FRAMES: usize = 127;

/// The default budget for unwind tables, in bytes of kernel memory (`--unwind-tables-max-bytes`).
pub const DEFAULT_TABLE_BYTES: u64 = 64 << 20;

/// Lazily read CFI indexes (for checking the kernel's frame-pointer walks) held at most.
const MAX_LAZY_TABLES: usize = 64;

/// How long an object that could not be read goes without a table before it is tried again: a
/// read can fail for a while (a file being replaced, an I/O error) and a process that maps the
/// object must not go without its table for the agent's whole life.
const RETRY_UNREADABLE_AFTER: Duration = Duration::from_secs(60);

/// Objects whose table failed remembered at most (they are not compiled again meanwhile).
const MAX_FAILED: usize = 4096;

/// Bytes of one chunk of rows in the program's map.
const CHUNK_BYTES: u64 = (ROWS_PER_CHUNK * std::mem::size_of::<UnwindRow>()) as u64;

/// Counters of the unwind tables, for metrics.
#[derive(Debug, Clone, Default)]
pub struct UnwindStats {
    /// Stacks kept, by how their walk ended (in [`StackEnd::ALL`]'s order).
    pub ends: [u64; 5],
    /// Tables compiled and loaded (once per object while held).
    pub tables_loaded: u64,
    /// Objects whose table could not be compiled (unreadable, or malformed headers).
    pub table_errors: u64,
    /// Objects refused for their size (a CFI section or a table past the limits, or a table
    /// larger than the whole budget).
    pub tables_too_large: u64,
    /// Tables evicted to make room for others.
    pub tables_evicted: u64,
    /// Tables held now.
    pub tables_cached: u64,
    /// Kernel memory the held tables take, in bytes.
    pub table_bytes: u64,
    /// The budget for it.
    pub table_budget_bytes: u64,
    /// Rows the held tables have.
    pub table_rows: u64,
    /// Time spent compiling tables.
    pub table_build_ns: u64,
    /// CFI entries refused as malformed in the objects compiled (their code has no rows, and
    /// frames in it end `[truncated: bad unwind info]` or go by frame pointers).
    pub malformed_cfi: u64,
    /// Processes whose mappings the program holds.
    pub processes: u64,
    /// Of which map code that keeps frame pointers (walked by them past the leaf).
    pub fp_processes: u64,
}

/// An object's table in the program's map.
struct Loaded {
    id: u32,
    first_chunk: u32,
    n_chunks: u32,
    n_rows: u32,
    census: FramePointerCensus,
    segments: Vec<(u64, u64, u64)>,
    last_used: u64,
}

/// A process told to the program.
struct Told {
    /// What was told of it, to tell again once tables it waits for are compiled.
    info: Arc<ProcessInfo>,
    /// Objects it maps whose tables were being compiled when it was told.
    waiting: Vec<ObjectKey>,
    /// The read of it ([`ProcessInfo::read_no`]) that was told.
    read_no: u64,
    /// The objects it maps that have tables.
    objects: Vec<ObjectKey>,
    /// Whether some of its code keeps frame pointers.
    fp: bool,
    last_sampled: u64,
}

struct Lazy {
    table: Option<Arc<UnwindTable>>,
    last_used: u64,
}

/// The table manager: which objects' tables are loaded where, which processes are told.
pub(crate) struct Unwinder {
    budget_chunks: u32,
    /// Objects to compile, to the compiling threads (small objects, and those over
    /// [`LARGE_CFI_BYTES`]); and what they compiled, back.
    jobs: [std::sync::mpsc::Sender<Arc<MappedObject>>; 2],
    compiled: std::sync::mpsc::Receiver<Compiled>,
    /// Objects sent to be compiled and not back yet.
    compiling: FxHashSet<ObjectKey>,
    objects: FxHashMap<ObjectKey, Loaded>,
    /// Objects that got no table, and whether they are too large (never tried again while
    /// remembered) or could not be read then (tried again after [`RETRY_UNREADABLE_AFTER`]).
    failed: FxHashMap<ObjectKey, (Instant, bool)>,
    /// What the compilers accept (an object past them is refused before it is queued).
    limits: Limits,
    /// Free runs of chunks: (first, count), sorted by first, neighbours merged.
    free: Vec<(u32, u32)>,
    next_id: u32,
    processes: FxHashMap<u32, Told>,
    lazy: FxHashMap<ObjectKey, Lazy>,
    tick: u64,
    /// Bytes of compiled tables freed since the heap was last trimmed.
    untrimmed_bytes: usize,
    stats: UnwindStats,
}

impl Unwinder {
    /// A manager of `budget_chunks` chunks of the program's rows (`Sampler::table_chunks`).
    ///
    /// Tables are compiled on threads of their own, so that a large object (a 150 MB
    /// `librustc_driver`, seconds to compile) never holds up the sampling thread: one for
    /// objects with up to [`LARGE_CFI_BYTES`] of CFI (`unwind-tables`), one for larger ones
    /// (`unwind-tables-large`, at nice 10: its seconds of CPU come mostly from idle time, not
    /// from the programs profiled), so that a small object never waits behind a large one.
    /// The threads end when the manager is dropped. Each table done calls `compiled`, which
    /// should wake the caller to load it ([`Unwinder::load_compiled`]): a process waits for its
    /// tables, its stacks cut at its first frame, until they are loaded.
    pub fn new(budget_chunks: u32, compiled: impl Fn() + Send + Sync + 'static) -> Unwinder {
        let budget_rows = budget_chunks as usize * ROWS_PER_CHUNK;
        let limits = Limits {
            max_rows: budget_rows.min(Limits::default().max_rows),
            ..Limits::default()
        };
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let wake: Arc<dyn Fn() + Send + Sync> = Arc::new(compiled);
        let jobs = [
            spawn_compiler("unwind-tables", 0, limits, done_tx.clone(), wake.clone()),
            spawn_compiler("unwind-tables-large", 10, limits, done_tx, wake),
        ];
        Unwinder {
            limits,
            budget_chunks,
            jobs,
            compiled: done_rx,
            compiling: FxHashSet::default(),
            objects: FxHashMap::default(),
            failed: FxHashMap::default(),
            free: vec![(0, budget_chunks)],
            next_id: 1,
            processes: FxHashMap::default(),
            lazy: FxHashMap::default(),
            tick: 0,
            untrimmed_bytes: 0,
            stats: UnwindStats {
                table_budget_bytes: u64::from(budget_chunks) * CHUNK_BYTES,
                ..UnwindStats::default()
            },
        }
    }

    /// Whether the program must be told `process` (never told, or told an older read).
    pub fn needs_telling(&self, process: &ProcessInfo) -> bool {
        self.processes
            .get(&process.pid)
            .is_none_or(|t| t.read_no != process.read_no)
    }

    /// Notes a sample of `pid`: its objects' tables are in use. Only the process's recency is
    /// set here (a JVM maps fifty objects); its tables are marked from it before one is evicted
    /// and once per window ([`Unwinder::note_recent_use`]).
    pub fn sampled(&mut self, pid: u32) {
        self.tick += 1;
        let tick = self.tick;
        if let Some(told) = self.processes.get_mut(&pid) {
            told.last_sampled = tick;
        }
    }

    /// Marks each loaded table used as recently as the last sample of a process that maps it.
    fn note_recent_use(&mut self) {
        for told in self.processes.values() {
            for key in &told.objects {
                if let Some(loaded) = self.objects.get_mut(key) {
                    loaded.last_used = loaded.last_used.max(told.last_sampled);
                }
            }
        }
    }

    /// Tells the program `process`'s executable mappings, with the tables of its objects that
    /// have one loaded; the others are sent to be compiled, and the process is told again when
    /// they are loaded ([`Unwinder::load_compiled`]).
    #[expect(
        clippy::too_many_lines,
        reason = "tells the BPF program one process's mappings and tables in the order the program reads them"
    )]
    pub fn tell(&mut self, sampler: &mut Sampler, process: &Arc<ProcessInfo>) -> Result<(), Error> {
        self.tick += 1;
        if !self.processes.contains_key(&process.pid) && self.processes.len() >= MAX_PROCESSES {
            let oldest = self
                .processes
                .iter()
                .min_by_key(|(_, t)| t.last_sampled)
                .map(|(&pid, _)| pid);
            if let Some(pid) = oldest {
                self.forget(sampler, pid);
            }
        }
        let mut entries: Vec<MappingEntry> = Vec::with_capacity(process.mappings.len());
        let mut objects = Vec::new();
        let mut waiting = Vec::new();
        let mut fp = false;
        for mapping in process.mappings.iter().take(MAX_MAPPINGS) {
            let mut entry = MappingEntry {
                start: mapping.start,
                end: mapping.end,
                bias: 0,
                object: 0,
                flags: 0,
            };
            if let Some(object) = &mapping.object
                && !self.objects.contains_key(&object.key)
                && !self.gave_up_on(&object.key)
                && !self.compiling.contains(&object.key)
            {
                let sizes = compact::cfi_sizes(&object.file);
                if sizes.is_some_and(|s| s.past(&self.limits)) {
                    // Refused from its headers, without a read: a hostile or huge object.
                    tracing::info!(
                        object = %object.opened_as.display(),
                        sizes = ?sizes,
                        "unwind table refused: a CFI section past the limit"
                    );
                    self.refuse(&object.key, true);
                }
            }
            if let Some(object) = &mapping.object
                && !self.objects.contains_key(&object.key)
                && !self.gave_up_on(&object.key)
            {
                let large =
                    compact::cfi_sizes(&object.file).is_none_or(|s| s.total() > LARGE_CFI_BYTES);
                if self.compiling.insert(object.key.clone())
                    && self.jobs[usize::from(large)].send(object.clone()).is_err()
                {
                    self.compiling.remove(&object.key);
                }
                if self.compiling.contains(&object.key) {
                    waiting.push(object.key.clone());
                }
            }
            if let Some(object) = &mapping.object
                && let Some(loaded) = self.loaded(&object.key)
                && let Some(vaddr) = compact::mapping_vaddr(&loaded.segments, mapping.offset)
            {
                entry.bias = mapping.start.wrapping_sub(vaddr);
                entry.object = loaded.id;
                // The kernel's pages hold leaves, never callers.
                let special = mapping.path == "[vdso]" || mapping.path == "[vsyscall]";
                if !special && keeps_frame_pointers_everywhere(&loaded.census) {
                    entry.flags |= MAP_FP;
                    fp = true;
                }
                objects.push(object.key.clone());
            }
            entries.push(entry);
        }
        sampler.set_process(process.pid, Some(&entries))?;
        let last_sampled = self.tick;
        self.processes.insert(
            process.pid,
            Told {
                info: process.clone(),
                waiting,
                read_no: process.read_no,
                objects,
                fp,
                last_sampled,
            },
        );
        Ok(())
    }

    /// The loaded table of `key`, marked used.
    fn loaded(&mut self, key: &ObjectKey) -> Option<&Loaded> {
        let tick = self.tick;
        let loaded = self.objects.get_mut(key)?;
        loaded.last_used = tick;
        Some(loaded)
    }

    /// Loads the tables the compiling thread finished into the program, and tells again the
    /// processes that waited for them.
    pub fn load_compiled(&mut self, sampler: &mut Sampler) {
        let mut done = Vec::new();
        while let Ok(compiled) = self.compiled.try_recv() {
            self.compiling.remove(&compiled.object.key);
            self.stats.table_build_ns += compiled.took.as_nanos() as u64;
            let key = compiled.object.key.clone();
            self.untrimmed_bytes += compiled
                .table
                .as_ref()
                .map_or(0, |t| t.len() * size_of::<compact::CompactRow>());
            self.load(sampler, compiled);
            done.push(key);
        }
        if done.is_empty() {
            return;
        }
        // A table's rows were built on a compiling thread (in its malloc arena) and freed
        // here: give that memory back to the system, or the agent's RSS keeps every table's
        // peak. Not for every small table: a trim walks the whole heap, and tables come one
        // by one (a JVM's fifty objects as it starts), each loaded as soon as it is done.
        if self.untrimmed_bytes >= TRIM_AFTER_BYTES {
            self.untrimmed_bytes = 0;
            // SAFETY: malloc_trim only returns free heap memory to the system; it takes no
            // pointer.
            unsafe {
                libc::malloc_trim(0);
            }
        }
        let waited: Vec<Arc<ProcessInfo>> = self
            .processes
            .values()
            .filter(|t| t.waiting.iter().any(|k| done.contains(k)))
            .map(|t| t.info.clone())
            .collect();
        for info in waited {
            if let Err(e) = self.tell(sampler, &info) {
                tracing::debug!(pid = info.pid, error = %e, "cannot tell the program a process");
            }
        }
    }

    /// Whether `key`'s object is not to be compiled (again) now: it was refused for its size,
    /// or could not be read a short while ago.
    fn gave_up_on(&self, key: &ObjectKey) -> bool {
        self.failed
            .get(key)
            .is_some_and(|&(at, too_large)| too_large || at.elapsed() < RETRY_UNREADABLE_AFTER)
    }

    /// Notes that `key`'s object gets no table (`too_large`: refused for its size, and not tried
    /// again while remembered; else it could not be read, and is tried again a while later).
    fn refuse(&mut self, key: &ObjectKey, too_large: bool) {
        if too_large {
            self.stats.tables_too_large += 1;
        } else {
            self.stats.table_errors += 1;
        }
        if self.failed.len() >= MAX_FAILED {
            self.failed.clear();
        }
        self.failed.insert(key.clone(), (Instant::now(), too_large));
    }

    /// Loads a compiled table into the program (evicting the least recently used tables when
    /// the budget is full), or notes why it cannot have one.
    fn load(&mut self, sampler: &mut Sampler, compiled: Compiled) {
        let object = &compiled.object;
        let fail = |this: &mut Unwinder, too_large: bool| this.refuse(&object.key, too_large);
        let table = match compiled.table {
            Ok(table) => table,
            Err(CompileError::Object(e)) => {
                tracing::debug!(object = %object.opened_as.display(), error = %e, "no unwind table");
                fail(self, false);
                return;
            }
            Err(e) => {
                tracing::info!(object = %object.opened_as.display(), error = %e, "unwind table refused");
                fail(self, true);
                return;
            }
        };
        self.stats.malformed_cfi += table.bad_fdes;
        let index = PageIndex::new(|| table.rows().map(|r| r.pc), table.len());
        let n_chunks = (table.len() + index.rows_taken())
            .div_ceil(ROWS_PER_CHUNK)
            .max(1) as u32;
        if n_chunks > self.budget_chunks {
            fail(self, true);
            return;
        }
        // Tables of processes waiting for this one stay.
        let keep: FxHashSet<ObjectKey> = self
            .processes
            .values()
            .filter(|t| t.waiting.contains(&object.key))
            .flat_map(|t| t.objects.iter().cloned())
            .collect();
        let Some(first_chunk) = self.allocate(sampler, n_chunks, &keep) else {
            fail(self, true);
            return;
        };
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1).max(1);
        if let Err(e) = sampler.load_table(id, first_chunk, table.rows(), &index) {
            tracing::debug!(object = %object.opened_as.display(), error = %e, "cannot load an unwind table");
            self.release(first_chunk, n_chunks);
            fail(self, false);
            return;
        }
        tracing::debug!(object = %object.opened_as.display(), rows = table.len(), "unwind table loaded");
        self.stats.tables_loaded += 1;
        self.tick += 1;
        self.objects.insert(
            object.key.clone(),
            Loaded {
                id,
                first_chunk,
                n_chunks,
                n_rows: table.len() as u32,
                census: table.census,
                segments: table.segments,
                last_used: self.tick,
            },
        );
    }

    /// `n` free chunks in a row: the smallest free run that holds them, or else the run of `n`
    /// chunks [`Unwinder::cheapest_run`] picks, its tables evicted. Never fails for `n` within
    /// the budget: a table must not be refused because the others left the space fragmented.
    fn allocate(
        &mut self,
        sampler: &mut Sampler,
        n: u32,
        keep: &FxHashSet<ObjectKey>,
    ) -> Option<u32> {
        if n > self.budget_chunks {
            return None;
        }
        let fits = self.free.iter().any(|&(_, len)| len >= n);
        if !fits || self.objects.len() >= MAX_OBJECTS {
            self.note_recent_use();
        }
        while self.objects.len() >= MAX_OBJECTS {
            let victim = self
                .objects
                .iter()
                .min_by_key(|(k, l)| (keep.contains(*k), l.last_used))
                .map(|(k, _)| k.clone())?;
            self.evict(sampler, &victim);
        }
        let best_fit = self
            .free
            .iter()
            .filter(|&&(_, len)| len >= n)
            .min_by_key(|&&(_, len)| len)
            .map(|&(first, _)| first);
        let first = match best_fit {
            Some(first) => first,
            None => {
                let first = self.cheapest_run(n, keep);
                let victims: Vec<ObjectKey> = self
                    .objects
                    .iter()
                    .filter(|(_, l)| {
                        l.first_chunk < first + n && l.first_chunk + l.n_chunks > first
                    })
                    .map(|(k, _)| k.clone())
                    .collect();
                for victim in victims {
                    self.evict(sampler, &victim);
                }
                first
            }
        };
        self.take(first, n);
        Some(first)
    }

    /// Where a table of `n` chunks goes when no free run holds it: the start of the run of `n`
    /// chunks whose tables cost least to evict. Cost is, in order: how many tables of `keep`
    /// (those of the processes waiting for the new one) it holds, how recently the most
    /// recently used table in it was used, and how many chunks of tables it holds. Evicting
    /// whole least-recently-used tables until a run happened to be free could empty the
    /// budget for one large table, or find no run at all when a kept table sat in the middle.
    fn cheapest_run(&self, n: u32, keep: &FxHashSet<ObjectKey>) -> u32 {
        // (first chunk, end, last used, kept), in the order of the chunks.
        let mut tables: Vec<(u32, u32, u64, bool)> = self
            .objects
            .iter()
            .map(|(k, l)| {
                (
                    l.first_chunk,
                    l.first_chunk + l.n_chunks,
                    l.last_used,
                    keep.contains(k),
                )
            })
            .collect();
        tables.sort_unstable_by_key(|t| t.0);
        let mut kept_before = Vec::with_capacity(tables.len() + 1);
        let mut chunks_before = Vec::with_capacity(tables.len() + 1);
        let (mut kept, mut chunks) = (0u32, 0u32);
        for t in &tables {
            kept_before.push(kept);
            chunks_before.push(chunks);
            kept += u32::from(t.3);
            chunks += t.1 - t.0;
        }
        kept_before.push(kept);
        chunks_before.push(chunks);
        // A cheapest run can be moved down until it starts at 0 or where a table ends without
        // holding more tables: those are the only starts tried. The tables a run holds are
        // tables[i..j]; `recent` keeps the indexes in it whose last use no later one beats,
        // so its front is the run's most recent use.
        let starts = std::iter::once(0)
            .chain(tables.iter().map(|t| t.1))
            .filter(|&s| s + n <= self.budget_chunks);
        let mut recent: std::collections::VecDeque<usize> = Default::default();
        let (mut i, mut j) = (0, 0);
        let mut best: Option<((u32, u64, u32), u32)> = None;
        for s in starts {
            while j < tables.len() && tables[j].0 < s + n {
                while recent.back().is_some_and(|&k| tables[k].2 <= tables[j].2) {
                    recent.pop_back();
                }
                recent.push_back(j);
                j += 1;
            }
            while i < j && tables[i].1 <= s {
                if recent.front() == Some(&i) {
                    recent.pop_front();
                }
                i += 1;
            }
            let cost = (
                kept_before[j] - kept_before[i],
                recent.front().map_or(0, |&k| tables[k].2),
                chunks_before[j] - chunks_before[i],
            );
            if best.is_none_or(|(c, _)| cost < c) {
                best = Some((cost, s));
            }
        }
        best.map_or(0, |(_, s)| s)
    }

    /// Takes chunks `first..first + n`, which lie in one free run, out of the free runs.
    fn take(&mut self, first: u32, n: u32) {
        let Some(i) = self
            .free
            .iter()
            .position(|&(f, len)| f <= first && first + n <= f + len)
        else {
            debug_assert!(false, "chunks {first}+{n} are not free");
            return;
        };
        let (f, len) = self.free[i];
        let after = (first + n, f + len - first - n);
        match (first > f, after.1 > 0) {
            (true, true) => {
                self.free[i] = (f, first - f);
                self.free.insert(i + 1, after);
            }
            (true, false) => self.free[i] = (f, first - f),
            (false, true) => self.free[i] = after,
            (false, false) => {
                self.free.remove(i);
            }
        }
    }

    /// Drops `key`'s table from the program and gives its chunks back.
    fn evict(&mut self, sampler: &mut Sampler, key: &ObjectKey) {
        if let Some(loaded) = self.objects.remove(key) {
            sampler.drop_table(loaded.id);
            self.release(loaded.first_chunk, loaded.n_chunks);
            self.stats.tables_evicted += 1;
        }
    }

    /// Returns chunks to the free runs.
    fn release(&mut self, first: u32, n: u32) {
        let i = self.free.partition_point(|&(f, _)| f < first);
        self.free.insert(i, (first, n));
        // Merge with the next run, then with the previous.
        if i + 1 < self.free.len() && self.free[i].0 + self.free[i].1 == self.free[i + 1].0 {
            self.free[i].1 += self.free[i + 1].1;
            self.free.remove(i + 1);
        }
        if i > 0 && self.free[i - 1].0 + self.free[i - 1].1 == self.free[i].0 {
            self.free[i - 1].1 += self.free[i].1;
            self.free.remove(i);
        }
    }

    /// Forgets process `pid` (in the program too).
    fn forget(&mut self, sampler: &mut Sampler, pid: u32) {
        self.processes.remove(&pid);
        if let Err(e) = sampler.set_process(pid, None) {
            tracing::debug!(pid, error = %e, "cannot forget a process");
        }
    }

    /// A user stack the kernel walked by frame pointers (`bpf_get_stackid`, for a sample of a
    /// process the program was not told yet): how many of its frames to keep, and how it ends.
    /// Nothing checked its leaf, so it ends [`StackEnd::Unreadable`] unless cut at the depth
    /// limit; its frames are cut after the first whose function keeps no frame pointer (the
    /// kernel's walk went on from garbage).
    pub fn check_kernel_walk(&mut self, user: &[u64], process: &ProcessInfo) -> (usize, StackEnd) {
        self.tick += 1;
        let first_wrong = check_frame_pointer_walk(user.get(1..).unwrap_or_default(), |addr| {
            let (_, mapping) = process.mapping_of(addr)?;
            let table = self.lazy_table(mapping.object.as_ref()?)?;
            let vaddr = table.vaddr_of_file_offset(addr - mapping.start + mapping.offset)?;
            Some((table, vaddr))
        });
        match first_wrong {
            Some(i) => (i + 2, StackEnd::Unreadable),
            None if user.len() >= MAX_KERNEL_WALK_FRAMES => (user.len(), StackEnd::DepthLimit),
            None => (user.len(), StackEnd::Unreadable),
        }
    }

    /// The lazily read CFI index of `object`, read on first use.
    fn lazy_table(&mut self, object: &MappedObject) -> Option<Arc<UnwindTable>> {
        let tick = self.tick;
        let stats = &mut self.stats;
        let lazy = self.lazy.entry(object.key.clone()).or_insert_with(|| {
            let started = Instant::now();
            let table = UnwindTable::read(&object.file, &object.opened_as)
                .ok()
                .map(Arc::new);
            stats.table_build_ns += started.elapsed().as_nanos() as u64;
            Lazy {
                table,
                last_used: tick,
            }
        });
        lazy.last_used = tick;
        lazy.table.clone()
    }

    /// Counts how a stack that is kept ended.
    pub fn count(&mut self, end: StackEnd) {
        if let Some(i) = StackEnd::ALL.iter().position(|&e| e == end) {
            self.stats.ends[i] += 1;
        }
    }

    /// Forgets processes gone (`alive` says which are kept) and drops the least recently used
    /// lazy CFI indexes beyond their bound. Call once per window.
    pub fn trim(&mut self, sampler: &mut Sampler, alive: impl Fn(u32) -> bool) {
        // Before the processes gone take their last samples' recency with them.
        self.note_recent_use();
        let gone: Vec<u32> = self
            .processes
            .keys()
            .copied()
            .filter(|&pid| !alive(pid))
            .collect();
        for pid in gone {
            self.forget(sampler, pid);
        }
        self.retry_unreadable(sampler);
        if self.lazy.len() > MAX_LAZY_TABLES {
            let mut by_age: Vec<(u64, ObjectKey)> = self
                .lazy
                .iter()
                .map(|(k, l)| (l.last_used, k.clone()))
                .collect();
            by_age.sort_by_key(|e| e.0);
            for (_, key) in by_age.into_iter().take(self.lazy.len() - MAX_LAZY_TABLES) {
                self.lazy.remove(&key);
            }
        }
    }

    /// Objects that could not be read [`RETRY_UNREADABLE_AFTER`] ago are compiled again: the
    /// processes that map them are told again (which sends them to be compiled).
    fn retry_unreadable(&mut self, sampler: &mut Sampler) {
        let due: FxHashSet<ObjectKey> = self
            .failed
            .iter()
            .filter(|&(_, &(at, too_large))| !too_large && at.elapsed() >= RETRY_UNREADABLE_AFTER)
            .map(|(k, _)| k.clone())
            .collect();
        if due.is_empty() {
            return;
        }
        self.failed.retain(|k, _| !due.contains(k));
        let again: Vec<Arc<ProcessInfo>> = self
            .processes
            .values()
            .filter(|t| {
                t.info
                    .mappings
                    .iter()
                    .any(|m| m.object.as_ref().is_some_and(|o| due.contains(&o.key)))
            })
            .map(|t| t.info.clone())
            .collect();
        for info in again {
            if let Err(e) = self.tell(sampler, &info) {
                tracing::debug!(pid = info.pid, error = %e, "cannot tell the program a process");
            }
        }
    }

    /// The counters, with the tables' and processes' current numbers.
    pub fn stats(&self) -> UnwindStats {
        let mut s = self.stats.clone();
        s.tables_cached = self.objects.len() as u64;
        s.table_bytes = self
            .objects
            .values()
            .map(|l| u64::from(l.n_chunks) * CHUNK_BYTES)
            .sum();
        s.table_rows = self.objects.values().map(|l| u64::from(l.n_rows)).sum();
        s.processes = self.processes.len() as u64;
        s.fp_processes = self.processes.values().filter(|t| t.fp).count() as u64;
        s
    }
}

/// Objects with more call frame information than this are compiled on a thread of their own
/// (Rust 1.95's `librustc_driver` has 6.2 MB of `.eh_frame`, Debian's libc 0.3 MB, python3.11d 0.5 MB).
const LARGE_CFI_BYTES: u64 = 4 << 20;

/// Starts a thread that compiles the objects sent to it, smallest first, at nice value `nice`,
/// sends the tables to `done` and calls `wake` after each; returns where to send objects.
fn spawn_compiler(
    name: &str,
    nice: i32,
    limits: Limits,
    done: std::sync::mpsc::Sender<Compiled>,
    wake: Arc<dyn Fn() + Send + Sync>,
) -> std::sync::mpsc::Sender<Arc<MappedObject>> {
    let (jobs, job_rx) = std::sync::mpsc::channel::<Arc<MappedObject>>();
    let spawned = std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            if nice != 0 {
                // SAFETY: setpriority with PRIO_PROCESS and 0 changes this thread's nice value
                // (Linux applies it per thread); it reads and writes no memory of ours.
                unsafe {
                    libc::setpriority(libc::PRIO_PROCESS, 0, nice);
                }
            }
            // Smallest first: a process waiting for small objects' tables is not held up
            // behind a larger one.
            let mut queue: std::collections::BinaryHeap<Job> = Default::default();
            loop {
                if queue.is_empty() {
                    match job_rx.recv() {
                        Ok(object) => queue.push(Job::new(object)),
                        Err(_) => return,
                    }
                }
                while let Ok(object) = job_rx.try_recv() {
                    queue.push(Job::new(object));
                }
                let Some(Job { object, .. }) = queue.pop() else {
                    continue;
                };
                let started = Instant::now();
                let table = compact::compile(&object.file, &object.opened_as, &limits);
                let compiled = Compiled {
                    object,
                    table,
                    took: started.elapsed(),
                };
                if done.send(compiled).is_err() {
                    return;
                }
                wake();
            }
        });
    if let Err(e) = spawned {
        // Without it its objects are not compiled: their frames are walked by frame pointers.
        tracing::error!(thread = name, error = %e, "cannot start an unwind tables' thread");
    }
    jobs
}

/// An object waiting to be compiled, ordered smallest CFI first.
struct Job {
    size: u64,
    object: Arc<MappedObject>,
}

impl Job {
    fn new(object: Arc<MappedObject>) -> Job {
        let size = compact::cfi_sizes(&object.file).map_or(u64::MAX, |s| s.total());
        Job { size, object }
    }
}

impl PartialEq for Job {
    fn eq(&self, other: &Job) -> bool {
        self.size == other.size
    }
}

impl Eq for Job {}

impl PartialOrd for Job {
    fn partial_cmp(&self, other: &Job) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Job {
    /// Reversed: the heap pops the smallest.
    fn cmp(&self, other: &Job) -> std::cmp::Ordering {
        other.size.cmp(&self.size)
    }
}

/// A table the compiling thread finished.
struct Compiled {
    object: Arc<MappedObject>,
    table: Result<CompactTable, CompileError>,
    took: Duration,
}

/// Whether every frame but the leaf of an object's code can be left by its frame pointer: a Go
/// binary (Go keeps them in every function with a frame), or code whose every sampled function
/// frames itself by rbp. Stricter than [`FramePointerCensus::keeps_frame_pointers`]: the
/// program does not check a frame-pointer step against the CFI, and a frameless function
/// that calls would make the step skip its caller.
fn keeps_frame_pointers_everywhere(census: &FramePointerCensus) -> bool {
    census.go || (census.sampled >= 8 && census.framed == census.sampled)
}

/// How long after reading a process its mappings may be read again because the sampled address
/// fell outside them (a `dlopen`ed library, or maps read just before an `exec`): bounds the cost
/// of a process whose samples keep landing outside every mapping.
pub const REREAD_MAPS_AFTER: Duration = Duration::from_millis(200);

#[cfg(test)]
mod tests {
    use super::*;
    use parca_symbolize::unwind::compact::RowKind;

    #[test]
    fn rows_keep_their_rules_in_the_programs_layout() {
        let row = compact::CompactRow {
            pc: 0x1004,
            kind: RowKind::Bp,
            cfa_offset: 16,
            rbp: compact::RbpRule::At,
            rbp_offset: -16,
        };
        assert_eq!(
            UnwindRow::from(&row),
            UnwindRow {
                pc: 0x1004,
                kind: 2,
                rbp_rule: 1,
                rbp_offset: -16,
                cfa_offset: 16
            }
        );
        assert_eq!(
            std::mem::size_of::<compact::CompactRow>(),
            std::mem::size_of::<UnwindRow>()
        );
    }

    #[test]
    fn a_compiled_table_wakes_whoever_loads_it_once_it_can_be_taken() {
        let object = crate::process::vdso_object().expect("the vDSO as an object");
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let (woken_tx, woken_rx) = std::sync::mpsc::channel();
        let jobs = spawn_compiler(
            "test-compiler",
            0,
            Limits::default(),
            done_tx,
            Arc::new(move || {
                woken_tx.send(()).ok();
            }),
        );
        jobs.send(object).unwrap();
        woken_rx
            .recv_timeout(Duration::from_secs(60))
            .expect("woken when the table is done");
        let compiled = done_rx.try_recv().expect("the table, there when woken");
        assert!(compiled.table.is_ok_and(|t| !t.is_empty()));
    }

    #[test]
    fn freed_chunks_merge_with_their_neighbours() {
        let mut u = Unwinder::new(100, || {});
        assert_eq!(u.free, [(0, 100)]);
        assert_eq!(u.stats().table_budget_bytes, 100 * CHUNK_BYTES);
        // Three tables' worth taken by hand, then given back out of order.
        u.free = vec![(90, 10)];
        u.release(30, 60);
        assert_eq!(u.free, [(30, 70)]);
        u.release(0, 10);
        assert_eq!(u.free, [(0, 10), (30, 70)]);
        u.release(10, 20);
        assert_eq!(u.free, [(0, 100)]);
    }

    /// A manager of `budget` chunks holding tables at `(first chunk, chunks, last used)`, keyed
    /// by inode 0, 1, …
    fn holding(budget: u32, tables: &[(u32, u32, u64)]) -> Unwinder {
        let mut u = Unwinder::new(budget, || {});
        u.free = vec![(0, budget)];
        for (inode, &(first, n, last_used)) in tables.iter().enumerate() {
            u.take(first, n);
            u.objects.insert(
                key(inode),
                Loaded {
                    id: inode as u32 + 1,
                    first_chunk: first,
                    n_chunks: n,
                    n_rows: n * ROWS_PER_CHUNK as u32,
                    census: FramePointerCensus::default(),
                    segments: Vec::new(),
                    last_used,
                },
            );
        }
        u
    }

    fn key(inode: usize) -> ObjectKey {
        ObjectKey::File {
            dev: 0,
            inode: inode as u64,
        }
    }

    #[test]
    fn taken_chunks_leave_the_rest_of_their_run_free() {
        let mut u = Unwinder::new(100, || {});
        u.take(0, 10);
        assert_eq!(u.free, [(10, 90)]);
        u.take(40, 10);
        assert_eq!(u.free, [(10, 30), (50, 50)]);
        u.take(90, 10);
        assert_eq!(u.free, [(10, 30), (50, 40)]);
        u.take(10, 30);
        assert_eq!(u.free, [(50, 40)]);
    }

    #[test]
    fn a_large_table_goes_where_the_least_recently_used_tables_were() {
        // Budget 100: tables at 0..20 (used at 5), 20..30 (used at 9), 40..60 (used at 1),
        // 60..70 (used at 2), 80..90 (used at 8); free 30..40, 70..80, 90..100.
        let u = holding(
            100,
            &[
                (0, 20, 5),
                (20, 10, 9),
                (40, 20, 1),
                (60, 10, 2),
                (80, 10, 8),
            ],
        );
        // 40 chunks: 30..70 holds only the two oldest tables.
        assert_eq!(u.cheapest_run(40, &FxHashSet::default()), 30);
        // 20 chunks: 30..50 holds only the oldest table (60..80 would evict fewer chunks, but
        // of a table used later).
        assert_eq!(u.cheapest_run(20, &FxHashSet::default()), 30);
        // A table a waiting process needs is evicted only when no run avoids it.
        let keep: FxHashSet<ObjectKey> = [key(2)].into_iter().collect();
        assert_eq!(u.cheapest_run(40, &keep), 60);
        let keep: FxHashSet<ObjectKey> = [key(1), key(3)].into_iter().collect();
        assert_eq!(u.cheapest_run(90, &keep), 0);
    }

    #[test]
    fn a_kept_table_in_the_middle_does_not_stop_a_large_one_from_loading() {
        // The only table sits in the middle and is kept: no run of 60 avoids it.
        let u = holding(100, &[(45, 10, 1)]);
        let keep: FxHashSet<ObjectKey> = [key(0)].into_iter().collect();
        let first = u.cheapest_run(60, &keep);
        assert!(first + 60 <= 100 && first <= 45, "{first}");
    }

    #[test]
    fn only_code_framed_everywhere_is_walked_by_frame_pointers() {
        let census = |sampled, framed, go| FramePointerCensus {
            sampled,
            framed,
            go,
        };
        assert!(keeps_frame_pointers_everywhere(&census(0, 0, true)));
        assert!(keeps_frame_pointers_everywhere(&census(64, 64, false)));
        assert!(!keeps_frame_pointers_everywhere(&census(64, 60, false)));
        assert!(!keeps_frame_pointers_everywhere(&census(4, 4, false)));
    }
}
