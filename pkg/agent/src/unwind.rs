//! User stacks from the BPF program's stack copies: each copy is unwound with the unwind table
//! (`.eh_frame`, `.debug_frame`) of the object holding each frame's address, tables built once
//! per object ([`ObjectKey`]: build id) and shared by every process that maps it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parca_symbolize::ObjectKey;
use parca_symbolize::unwind::{Registers, StackCopy, StackEnd, UnwindTable, unwind};
use rustc_hash::FxHashMap;

use crate::bpf::CopiedSample;
use crate::process::ProcessInfo;

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
}

struct Cached {
    table: Option<Arc<UnwindTable>>,
    last_used: u64,
}

/// The unwinder: unwind tables per object, and the counters.
#[derive(Default)]
pub(crate) struct Unwinder {
    tables: FxHashMap<ObjectKey, Cached>,
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
}

impl Unwinder {
    /// Unwinds `sample` of `process`.
    pub fn unwind(&mut self, sample: &CopiedSample<'_>, process: &ProcessInfo) -> Unwound {
        let started = Instant::now();
        self.tick += 1;
        let tick = self.tick;
        let regs = Registers {
            ip: sample.ip,
            sp: sample.sp,
            bp: sample.bp,
        };
        let stack = StackCopy {
            sp: sample.sp,
            bytes: sample.stack,
        };
        let mut frames = Vec::with_capacity(32);
        let mut unknown_address = false;
        let mut first = true;
        let tables = &mut self.tables;
        let stats = &mut self.stats;
        let end = unwind(regs, &stack, MAX_USER_FRAMES, &mut frames, |addr| {
            let leaf = std::mem::replace(&mut first, false);
            let Some((_, mapping)) = process.mapping_of(addr) else {
                // Only the sampled address says the mappings changed: a return address in no
                // mapping may be garbage from a frame-pointer step.
                unknown_address |= leaf;
                return None;
            };
            let object = mapping.object.as_ref()?;
            let cached = tables.entry(object.key.clone()).or_insert_with(|| {
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
            let table = cached.table.clone()?;
            let vaddr = table.vaddr_of_file_offset(addr - mapping.start + mapping.offset)?;
            Some((table, vaddr))
        });
        self.stats.unwind_ns += started.elapsed().as_nanos() as u64;
        Unwound {
            frames,
            end,
            unknown_address,
        }
    }

    /// Counts how a stack that is kept ended.
    pub fn count(&mut self, end: StackEnd) {
        if let Some(i) = StackEnd::ALL.iter().position(|&e| e == end) {
            self.stats.ends[i] += 1;
        }
    }

    /// Drops the least recently used tables beyond the bounds. Call once per window.
    pub fn trim(&mut self) {
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
