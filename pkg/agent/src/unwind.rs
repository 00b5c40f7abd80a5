//! User stacks from the BPF program's samples: each stack copy is unwound with the unwind table
//! (`.eh_frame`, `.debug_frame`) of the object holding each frame's address, tables built once
//! per object ([`ObjectKey`]: build id) and shared by every process that maps it. A stack the
//! program walked by frame pointers (the fast path, for processes whose code keeps them: see
//! [`Unwinder::fp_code`]) has its leaf and its frames checked against the same tables; a walk
//! found wrong is cut there, and its objects and process go back to stack copies.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parca_symbolize::ObjectKey;
use parca_symbolize::unwind::{
    LeafFrame, Registers, StackCopy, StackEnd, UnwindTable, check_frame_pointer_walk,
    frame_pointer_leaf, unwind,
};
use rustc_hash::{FxHashMap, FxHashSet};

use crate::bpf::{CopiedSample, MAX_FP_RANGES, Walked};
use crate::process::{Mapping, ProcessInfo};

/// Deepest user stack kept, in frames (the kernel's own limit for stack maps): a deeper one
/// keeps its innermost frames and ends [`StackEnd::DepthLimit`].
pub const MAX_USER_FRAMES: usize = 127;

/// Unwind tables held, at most, and the bytes they may hold together (their `.eh_frame` and
/// `.debug_frame` are copied into memory); past either, the least recently used go first.
const MAX_TABLES: usize = 256;
const MAX_TABLE_BYTES: u64 = 256 << 20;

/// Counters of the unwinder, for metrics.
#[derive(Debug, Clone, Default)]
pub struct UnwindStats {
    /// Stacks unwound, by how they ended (in [`StackEnd::ALL`]'s order).
    pub ends: [u64; 5],
    /// Unwind tables built (once per object while cached).
    pub tables_loaded: u64,
    /// Objects whose unwind table could not be read.
    pub table_errors: u64,
    /// Tables held now and their bytes.
    pub tables_cached: u64,
    /// Bytes the cached tables hold.
    pub table_bytes: u64,
    /// Time spent unwinding, table builds included.
    pub unwind_ns: u64,
    /// Of which building unwind tables.
    pub table_build_ns: u64,
    /// Stacks walked by frame pointers in the BPF program, then checked here.
    pub fp_walks: u64,
    /// Of which were found to skip a caller's frame and cut there (their objects then go
    /// back to stack copies).
    pub fp_walks_wrong: u64,
    /// Processes whose code keeps frame pointers (walked by them in the BPF program) now.
    pub fp_processes: u64,
}

struct Cached {
    table: Option<Arc<UnwindTable>>,
    last_used: u64,
}

/// The unwinder: unwind tables per object, and the counters.
#[derive(Default)]
pub(crate) struct Unwinder {
    tables: FxHashMap<ObjectKey, Cached>,
    /// Objects whose frame-pointer walks were found wrong: never walked by frame pointers again.
    no_fp: FxHashSet<ObjectKey>,
    /// Processes told to the BPF program, by the read of them they were judged on
    /// ([`ProcessInfo::read_no`]), and whether their code keeps frame pointers.
    fp_judged: FxHashMap<u32, (u64, bool)>,
    tick: u64,
    stats: UnwindStats,
}

/// A stack copy unwound.
#[derive(Debug)]
pub(crate) struct Unwound {
    /// Frames, leaf first: the sampled address, then return addresses.
    pub frames: Vec<u64>,
    pub end: StackEnd,
    /// Some frame's address is in no mapping the process had when it was read: its mappings
    /// may have changed (a `dlopen`) and are worth reading again.
    pub unknown_address: bool,
    /// A frame-pointer walk was found wrong: the process must go back to stack copies.
    pub fp_wrong: bool,
}

impl Unwinder {
    /// The unwind table of the object mapped at `addr` in `process`, and `addr`'s virtual
    /// address in it; built on first use.
    fn table_at<'p>(
        &mut self,
        process: &'p ProcessInfo,
        addr: u64,
    ) -> Option<(Arc<UnwindTable>, u64, &'p Mapping)> {
        let (_, mapping) = process.mapping_of(addr)?;
        let table = self.table_of(mapping)?;
        let vaddr = table.vaddr_of_file_offset(addr - mapping.start + mapping.offset)?;
        Some((table, vaddr, mapping))
    }

    /// The unwind table of `mapping`'s object, built on first use.
    fn table_of(&mut self, mapping: &Mapping) -> Option<Arc<UnwindTable>> {
        let object = mapping.object.as_ref()?;
        let tick = self.tick;
        let stats = &mut self.stats;
        let cached = self.tables.entry(object.key.clone()).or_insert_with(|| {
            let started = Instant::now();
            let table = match UnwindTable::read(&object.file, &object.opened_as) {
                Ok(t) => {
                    stats.tables_loaded += 1;
                    Some(Arc::new(t))
                }
                Err(_) => {
                    stats.table_errors += 1;
                    None
                }
            };
            stats.table_build_ns += started.elapsed().as_nanos() as u64;
            Cached {
                table,
                last_used: tick,
            }
        });
        cached.last_used = tick;
        cached.table.clone()
    }

    /// Unwinds `sample` of `process`: walks its stack copy, or checks and completes the
    /// frame-pointer walk the BPF program made.
    pub fn unwind(&mut self, sample: &CopiedSample<'_>, process: &ProcessInfo) -> Unwound {
        let started = Instant::now();
        self.tick += 1;
        let regs = Registers {
            ip: sample.ip,
            sp: sample.sp,
            bp: sample.bp,
        };
        let stack = StackCopy {
            sp: sample.sp,
            bytes: sample.stack,
        };
        let unwound = match &sample.walked {
            Some(walked) => self.check_walk(regs, &stack, walked, process),
            None => self.unwind_copy(regs, &stack, process),
        };
        self.stats.unwind_ns += started.elapsed().as_nanos() as u64;
        unwound
    }

    fn unwind_copy(
        &mut self,
        regs: Registers,
        stack: &StackCopy<'_>,
        process: &ProcessInfo,
    ) -> Unwound {
        let mut frames = Vec::with_capacity(32);
        let mut unknown_address = false;
        let mut first = true;
        let end = unwind(regs, stack, MAX_USER_FRAMES, &mut frames, |addr| {
            let leaf = std::mem::replace(&mut first, false);
            if process.mapping_of(addr).is_none() {
                // Only the sampled address says the mappings changed: a return address in no
                // mapping may be garbage from a frame-pointer step.
                unknown_address |= leaf;
                return None;
            }
            let (table, vaddr, _) = self.table_at(process, addr)?;
            Some((table, vaddr))
        });
        Unwound {
            frames,
            end,
            unknown_address,
            fp_wrong: false,
        }
    }

    /// A stack walked by frame pointers: the leaf checked with its CFI (a sample in a prologue,
    /// an epilogue or a frameless leaf finds its caller's frame pointer in rbp, and the walk
    /// skipped the caller), then each frame's function checked to keep rbp where it called.
    fn check_walk(
        &mut self,
        regs: Registers,
        stack: &StackCopy<'_>,
        walked: &Walked,
        process: &ProcessInfo,
    ) -> Unwound {
        self.stats.fp_walks += 1;
        let mut frames = Vec::with_capacity(walked.return_addresses.len() + 2);
        frames.push(regs.ip);
        let unknown_address = process.mapping_of(regs.ip).is_none();
        let leaf = frame_pointer_leaf(regs, stack, |addr| {
            let (table, vaddr, _) = self.table_at(process, addr)?;
            Some((table, vaddr))
        });
        let mut end = walked.end;
        match leaf {
            Ok(LeafFrame::Framed) => {}
            Ok(LeafFrame::Frameless { caller }) => frames.push(caller),
            Ok(LeafFrame::Outermost) => {
                return Unwound {
                    frames,
                    end: StackEnd::Complete,
                    unknown_address,
                    fp_wrong: false,
                };
            }
            Err(e) => {
                // The leaf's return address lies past the top of the stack that was sent, or
                // the leaf keeps no frame pointer where the walk looked for its caller's.
                let fp_wrong = e == StackEnd::BadUnwindInfo;
                if fp_wrong {
                    self.stats.fp_walks_wrong += 1;
                }
                return Unwound {
                    frames,
                    end: e,
                    unknown_address,
                    fp_wrong,
                };
            }
        }
        frames.extend_from_slice(&walked.return_addresses);
        let mut wrong_object = None;
        // Every frame but the leaf (checked above), the caller found for it included: the walk
        // went on from each by its rbp.
        let first_wrong = check_frame_pointer_walk(&frames[1..], |addr| {
            let (table, vaddr, mapping) = self.table_at(process, addr)?;
            wrong_object = mapping.object.as_ref().map(|o| o.key.clone());
            Some((table, vaddr))
        });
        let fp_wrong = first_wrong.is_some();
        if let Some(i) = first_wrong {
            // The frame `frames[1 + i]` is right (its callee's frame pointer led to it); the
            // walk from it on is not.
            frames.truncate(i + 2);
            end = StackEnd::BadUnwindInfo;
            self.stats.fp_walks_wrong += 1;
            if let Some(key) = wrong_object {
                self.no_fp.insert(key);
            }
        }
        if frames.len() > MAX_USER_FRAMES {
            frames.truncate(MAX_USER_FRAMES);
            end = StackEnd::DepthLimit;
        }
        Unwound {
            frames,
            end,
            unknown_address,
            fp_wrong,
        }
    }

    /// A user stack the kernel walked by frame pointers (`bpf_get_stackid`, for a sample whose
    /// copy did not fit in the ring buffer): how many of its frames to keep, and how it ends.
    /// Nothing checked its leaf, so it ends [`StackEnd::Unreadable`] (`[truncated: stack not
    /// copied]`) unless cut at the depth limit; its frames are cut after the first whose
    /// function keeps no frame pointer (the kernel's walk went on from garbage).
    pub fn check_kernel_walk(&mut self, user: &[u64], process: &ProcessInfo) -> (usize, StackEnd) {
        let first_wrong = check_frame_pointer_walk(user.get(1..).unwrap_or_default(), |addr| {
            let (table, vaddr, _) = self.table_at(process, addr)?;
            Some((table, vaddr))
        });
        match first_wrong {
            Some(i) => (i + 2, StackEnd::Unreadable),
            None if user.len() >= MAX_USER_FRAMES => (user.len(), StackEnd::DepthLimit),
            None => (user.len(), StackEnd::Unreadable),
        }
    }

    /// Whether the BPF program should walk `process`'s stacks by frame pointers, and where its
    /// code is: `Some(ranges)` when every other executable mapping holds an object whose
    /// code keeps frame pointers ([`UnwindTable::keeps_frame_pointers`]), at most
    /// [`MAX_FP_RANGES`] ranges once adjacent ones are joined. The vDSO and vsyscall pages are
    /// left out of the ranges: their functions are leaves, never callers, and a sample in one is
    /// copied. `None`
    /// when the answer has not changed since the process's last judgment (same read of it).
    pub fn fp_code(&mut self, process: &Arc<ProcessInfo>) -> Option<Option<Vec<(u64, u64)>>> {
        let read = process.read_no;
        if self
            .fp_judged
            .get(&process.pid)
            .is_some_and(|j| j.0 == read)
        {
            return None;
        }
        let ranges = self.judge_fp(process);
        self.fp_judged.insert(process.pid, (read, ranges.is_some()));
        Some(ranges)
    }

    /// Takes back the frame-pointer walks of `pid` (one was found wrong).
    pub fn fp_revoked(&mut self, pid: u32) {
        if let Some(judged) = self.fp_judged.get_mut(&pid) {
            judged.1 = false;
        }
    }

    fn judge_fp(&mut self, process: &ProcessInfo) -> Option<Vec<(u64, u64)>> {
        let mut ranges: Vec<(u64, u64)> = Vec::new();
        for mapping in &process.mappings {
            // The kernel's pages: their functions are leaves, never callers.
            if mapping.path == "[vdso]" || mapping.path == "[vsyscall]" {
                continue;
            }
            let object = mapping.object.as_ref()?;
            if self.no_fp.contains(&object.key) || !self.table_of(mapping)?.keeps_frame_pointers() {
                return None;
            }
            match ranges.last_mut() {
                Some(last) if last.1 == mapping.start => last.1 = mapping.end,
                _ => ranges.push((mapping.start, mapping.end)),
            }
        }
        (!ranges.is_empty() && ranges.len() <= MAX_FP_RANGES).then_some(ranges)
    }

    /// Counts how a stack that is kept ended.
    pub fn count(&mut self, end: StackEnd) {
        if let Some(i) = StackEnd::ALL.iter().position(|&e| e == end) {
            self.stats.ends[i] += 1;
        }
    }

    /// Drops the least recently used tables beyond the bounds, and the judgments of processes
    /// gone (`alive` says which are kept). Call once per window.
    pub fn trim(&mut self, alive: impl Fn(u32) -> bool) {
        self.fp_judged.retain(|&pid, _| alive(pid));
        let bytes = |c: &Cached| c.table.as_ref().map_or(0, |t| t.size_bytes());
        let mut total: u64 = self.tables.values().map(bytes).sum();
        let mut by_age: Vec<(u64, ObjectKey, u64)> = self
            .tables
            .iter()
            .map(|(k, c)| (c.last_used, k.clone(), bytes(c)))
            .collect();
        by_age.sort_by_key(|e| e.0);
        let mut n = self.tables.len();
        for (_, key, size) in by_age {
            if n <= MAX_TABLES && total <= MAX_TABLE_BYTES {
                break;
            }
            self.tables.remove(&key);
            n -= 1;
            total -= size;
        }
    }

    /// The counters, with the cache's current size.
    pub fn stats(&self) -> UnwindStats {
        let mut s = self.stats.clone();
        s.tables_cached = self.tables.values().filter(|c| c.table.is_some()).count() as u64;
        s.fp_processes = self.fp_judged.values().filter(|j| j.1).count() as u64;
        s.table_bytes = self
            .tables
            .values()
            .filter_map(|c| c.table.as_ref())
            .map(|t| t.size_bytes())
            .sum();
        s
    }
}

/// How long after reading a process its mappings may be read again because the sampled address
/// fell outside them (a `dlopen`ed library, or maps read just before an `exec`): bounds the cost
/// of a process whose samples keep landing outside every mapping.
pub const REREAD_MAPS_AFTER: Duration = Duration::from_millis(200);
