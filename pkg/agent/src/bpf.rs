//! The BPF side: loads `ebpf/profiler.bpf.o` with aya, attaches it, drains its maps.
//!
//! This is the only module that sees aya. The ABI it mirrors is in `ebpf/profiler.bpf.c`:
//! [`CountKey`], the [`Stat`] indices, the process event and sample layouts, and the unwind
//! tables' rows and mappings must match it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use aya::maps::{Array, HashMap, MapData, PerCpuArray, RingBuf, StackTraceMap};
use aya::programs::perf_event::{PerfEventConfig, PerfEventScope, SamplePolicy, SoftwareEvent};
use aya::programs::{PerfEvent, RawTracePoint};
use aya::{Ebpf, EbpfLoader};
use parca_symbolize::unwind::StackEnd;
use parca_symbolize::unwind::compact::CompactRow;
use rustc_hash::FxHashMap;

use crate::Error;

/// The compiled BPF object, committed beside its source (`ebpf/build.sh` rebuilds it).
static OBJECT: &[u8] = aya::include_bytes_aligned!("../../../ebpf/profiler.bpf.o");

/// How long after switching halves the old one is read: programs that read `half` before the
/// switch may still be writing to it. A run takes about 20 µs at most (ebpf-notes.md), and BPF
/// programs are not preempted, so this is ample.
const SWITCH_GRACE: Duration = Duration::from_millis(5);

/// Key of the `counts0`/`counts1` maps: `struct count_key`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct CountKey {
    pid: u32,
    user_stack: i32,
    kernel_stack: i32,
}

// SAFETY: `CountKey` is `repr(C)` with three 4-byte integers: no padding, and every bit pattern
// is a valid value, which is what aya needs to copy it to and from map memory.
unsafe impl aya::Pod for CountKey {}

/// Indices of the `stats` per-CPU array (`enum stat` in the C source).
#[derive(Debug, Clone, Copy)]
#[repr(u32)]
enum Stat {
    Samples = 0,
    Idle = 1,
    StackCollision = 2,
    StackError = 3,
    UserUnreadable = 4,
    CountsFull = 5,
    EventsLost = 6,
    SamplesLost = 7,
    Walked = 8,
    FpWalked = 9,
    FpFallback = 10,
    PyWalked = 11,
    PyCut = 12,
    NoProcess = 13,
    OffCpu = 14,
    OffCpuLost = 15,
    PhpWalked = 16,
    PhpCut = 17,
    RubyWalked = 18,
    RubyCut = 19,
    V8Walked = 20,
    V8Cut = 21,
    JvmWalked = 22,
    JvmCut = 23,
    JvmSteps = 24,
    JvmLost = 25,
    Counted = 26,
    KernelWalked = 27,
}

/// `STAT_LEN`: the counters in the `stats` map's one value.
const STAT_LEN: usize = 28;

/// The `stats` map's value (`struct stat_counters`), one per CPU.
type StatCounters = [u64; STAT_LEN];

/// Counters kept by the BPF program since it was loaded, summed over CPUs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BpfStats {
    /// Samples of processes (idle excluded).
    pub samples: u64,
    /// Samples of the idle task, not recorded.
    pub idle: u64,
    /// Stacks not recorded because another stack held their hash bucket.
    pub stack_collisions: u64,
    /// Stacks not recorded for another reason (map full, no memory).
    pub stack_errors: u64,
    /// User-mode samples whose user stack could not be read.
    pub user_stack_unreadable: u64,
    /// Samples lost because the counts map was full.
    pub counts_full: u64,
    /// New processes not announced because the ring buffer was full.
    pub events_lost: u64,
    /// Samples sent with their user stack walked in the kernel with the unwind tables.
    pub stacks_walked: u64,
    /// Walked samples that did not fit in the ring buffer: sent (or counted) walked by frame
    /// pointers instead.
    pub samples_lost: u64,
    /// Of the walked samples, those with frames left by their frame pointers (the fast path).
    pub fp_walked: u64,
    /// Frame-pointer steps that led outside every mapping, redone with the unwind row.
    pub fp_fallbacks: u64,
    /// Samples of processes whose mappings the program was not told yet: sent with the
    /// kernel's frame-pointer walk.
    pub no_process: u64,
    /// Samples of Python threads sent with their Python frames.
    pub python_walks: u64,
    /// Of which the Python frame chain was cut (too deep, or a frame unreadable).
    pub python_walks_cut: u64,
    /// Samples of PHP threads sent with their PHP frames.
    pub php_walks: u64,
    /// Of which the PHP frame chain was cut (too deep, or a frame unreadable).
    pub php_walks_cut: u64,
    /// Samples of Ruby threads sent with their Ruby frames.
    pub ruby_walks: u64,
    /// Of which the Ruby frame chain was cut (too deep, or a frame unreadable).
    pub ruby_walks_cut: u64,
    /// Samples of V8 (Node.js) processes sent with their JavaScript frames.
    pub v8_walks: u64,
    /// Of which some JavaScript frames were left out (more than the program keeps).
    pub v8_walks_cut: u64,
    /// Samples of JVM processes sent with interpreted Java frames.
    pub jvm_walks: u64,
    /// Of which some interpreted frames were left out (more than the program keeps).
    pub jvm_walks_cut: u64,
    /// Frames of the JVM's compiled code (or its stubs) left by their code blob's frame size.
    pub jvm_compiled_steps: u64,
    /// Walks that ended at an address of the JVM's code cache that no code blob covers.
    pub jvm_lost: u64,
    /// Off-CPU intervals sent with their stack.
    pub off_cpu_samples: u64,
    /// Off-CPU intervals lost: their process was not told to the program yet, it had no user
    /// context, or the ring buffer was full.
    pub off_cpu_lost: u64,
    /// Samples recorded in the counts maps because the ring buffer was full.
    pub counted: u64,
    /// Samples sent with the user stack the kernel walked by frame pointers (their process not
    /// told yet, a kernel thread).
    pub kernel_walked: u64,
}

/// `struct stack_sample`'s header: pid, tid, kernel_len, user_len, walk_end, py_len, py_end,
/// flags (u32 each), value (u64), kind and a pad (u32 each); the user frames, the Python
/// frames and the kernel frames follow.
const SAMPLE_DATA_AT: usize = 48;
/// Most kernel frames in a sample (`MAX_STACK_DEPTH`).
const MAX_KERNEL_FRAMES: usize = 127;

/// Deepest user stack the program walks, in frames (`MAX_USER_FRAMES`).
pub const MAX_USER_FRAMES: usize = 1024;
/// Rows per chunk of `unwind_rows` (`ROWS_PER_CHUNK`).
pub(crate) const ROWS_PER_CHUNK: usize = 512;
/// Executable mappings per process the program takes (`MAX_MAPPINGS`).
pub(crate) const MAX_MAPPINGS: usize = 256;
/// Processes whose mappings the program holds at once (`MAX_PROCESSES`).
pub(crate) const MAX_PROCESSES: usize = 8192;
/// Objects' tables the program holds at once (`MAX_OBJECTS`).
pub(crate) const MAX_OBJECTS: usize = 16384;

/// `struct unwind_row`: one row of an object's unwind table
/// ([`CompactRow`], field for field).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct UnwindRow {
    pub pc: u32,
    pub kind: u8,
    pub rbp_rule: u8,
    pub rbp_offset: i16,
    pub cfa_offset: i32,
}

impl From<&CompactRow> for UnwindRow {
    fn from(r: &CompactRow) -> UnwindRow {
        UnwindRow {
            pc: r.pc,
            kind: r.kind as u8,
            rbp_rule: r.rbp as u8,
            rbp_offset: r.rbp_offset,
            cfa_offset: r.cfa_offset,
        }
    }
}

/// `struct row_chunk`.
#[repr(C)]
#[derive(Clone, Copy)]
struct RowChunk {
    rows: [UnwindRow; ROWS_PER_CHUNK],
}

/// `struct object_table`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct ObjectTable {
    first_row: u32,
    n_rows: u32,
    /// Where the table's [`PageIndex`] starts (a global row index), packed three to a row.
    index_row: u32,
    /// Pages the index covers (0: no index, the whole table is searched).
    n_pages: u32,
    /// The first page's address (the object's virtual address, as the rows' pcs).
    base_pc: u32,
    /// log2 of the page size.
    page_shift: u32,
}

/// Tables with fewer rows than this get no [`PageIndex`]: their whole search is as short as a
/// page's.
const MIN_INDEXED_ROWS: usize = 64;

/// A table's page index (`index_row` of `struct object_table`): for each page of the object's
/// code (`1 << shift` bytes from `base`, 4 KiB or more), how many rows start at or before the
/// page's first byte. The program's binary search for an address then runs over the rows of its
/// page only: a few steps in a few adjacent cache lines instead of ~20 spread over the table,
/// each a cache and TLB miss at 19 Hz (~1.8 µs a search on #28's busy node). The page grows
/// until the index takes at most a quarter as many entries as there are rows (≤ 1/12 of the
/// table's bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PageIndex {
    base: u32,
    shift: u32,
    /// `pages + 1` entries; empty when the table gets no index.
    entries: Vec<u32>,
}

impl PageIndex {
    /// The index of a table whose rows start at the addresses `pcs` yields (sorted, `n_rows`
    /// of them; called twice).
    pub fn new<I: Iterator<Item = u32>>(pcs: impl Fn() -> I, n_rows: usize) -> PageIndex {
        let none = PageIndex {
            base: 0,
            shift: 0,
            entries: Vec::new(),
        };
        if n_rows < MIN_INDEXED_ROWS {
            return none;
        }
        let mut ends = pcs();
        let Some(first) = ends.next() else {
            return none;
        };
        let last = ends.last().unwrap_or(first);
        let mut shift = 12;
        let pages =
            |shift: u32| (((last - (first & !((1u32 << shift) - 1))) >> shift) + 1) as usize;
        while shift < 31 && pages(shift) + 1 > n_rows / 4 {
            shift += 1;
        }
        let base = first & !((1u32 << shift) - 1);
        let n_pages = pages(shift);
        let mut entries = Vec::with_capacity(n_pages + 1);
        let mut pcs = pcs().peekable();
        let mut at_or_before = 0u32;
        for page in 0..=n_pages as u64 {
            let start = u64::from(base) + (page << shift);
            while pcs.next_if(|&pc| u64::from(pc) <= start).is_some() {
                at_or_before += 1;
            }
            entries.push(at_or_before);
        }
        PageIndex {
            base,
            shift,
            entries,
        }
    }

    /// Pages covered (0: none).
    fn pages(&self) -> u32 {
        self.entries.len().saturating_sub(1) as u32
    }

    /// Rows of `unwind_rows` the index takes after the table's own.
    pub fn rows_taken(&self) -> usize {
        self.entries.len().div_ceil(3)
    }

    /// The index packed three entries to an [`UnwindRow`], as the program reads it.
    fn packed_rows(&self) -> impl Iterator<Item = UnwindRow> + '_ {
        self.entries.chunks(3).map(|e| {
            let word = |i: usize| e.get(i).copied().unwrap_or(0);
            UnwindRow {
                pc: word(0),
                kind: word(1) as u8,
                rbp_rule: (word(1) >> 8) as u8,
                rbp_offset: (word(1) >> 16) as u16 as i16,
                cfa_offset: word(2) as i32,
            }
        })
    }

    /// The rows `[lo, hi)` the program searches for `pc`, as it computes them (for tests).
    #[cfg(test)]
    fn range(&self, pc: u32, n_rows: u32) -> (u32, u32) {
        if self.pages() == 0 || pc < self.base {
            return (0, n_rows);
        }
        let page = ((pc - self.base) >> self.shift) as usize;
        if page >= self.pages() as usize {
            return (0, n_rows);
        }
        (self.entries[page], self.entries[page + 1])
    }
}

/// `mapping.flags`: the object keeps frame pointers (`MAP_FP`).
pub(crate) const MAP_FP: u32 = 1;

/// `struct mapping`: one executable mapping of a process, its object's table id (0: none) and
/// load bias (address − bias = the object's virtual address).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct MappingEntry {
    pub start: u64,
    pub end: u64,
    pub bias: u64,
    pub object: u32,
    pub flags: u32,
}

/// `struct proc_maps`.
#[repr(C)]
#[derive(Clone, Copy)]
struct ProcMaps {
    n: u32,
    pad: u32,
    m: [MappingEntry; MAX_MAPPINGS],
}

// SAFETY: `UnwindRow`, `RowChunk`, `ObjectTable`, `MappingEntry` and `ProcMaps` are `repr(C)`
// with fields laid out without padding (u32, u8, u8, i16, i32: 12 bytes; arrays of it; six u32;
// three u64 and two u32: 32 bytes; two u32 then an array of those), and every bit pattern is a
// valid value.
unsafe impl aya::Pod for UnwindRow {}
unsafe impl aya::Pod for RowChunk {}
unsafe impl aya::Pod for ObjectTable {}
unsafe impl aya::Pod for MappingEntry {}
unsafe impl aya::Pod for ProcMaps {}

/// `PY_WINDOW_BYTES`: most bytes of a Python frame the program reads
/// ([`PyConfig::window_len`]); an offset of it stands for "no such field".
pub(crate) const PY_WINDOW_BYTES: u32 = 128;
/// `PY_NO_CFRAME`: [`PyConfig::cframe_frame`] of versions whose thread state points at the
/// frame itself.
pub(crate) const PY_NO_CFRAME: u32 = u32::MAX;

/// `enum vm_kind`: [`PyConfig::kind`] of a CPython process (frames found per thread).
pub(crate) const VM_CPYTHON: u32 = 0;
/// `enum vm_kind`: [`PyConfig::kind`] of a PHP process (the main thread's frames, from a global).
pub(crate) const VM_PHP: u32 = 1;
/// `enum vm_kind`: [`PyConfig::kind`] of a Ruby process (each thread's execution context, in
/// static TLS; its frames an array).
pub(crate) const VM_RUBY: u32 = 2;
/// `enum vm_kind`: [`PyConfig::kind`] of a V8 process (Node.js): its JavaScript frames are
/// native frames with frame pointers, read as the native walk passes them.
pub(crate) const VM_V8: u32 = 3;
/// `enum vm_kind`: [`PyConfig::kind`] of a HotSpot JVM: its compiled frames are left by their
/// code blob's size, its interpreted frames read below their frame pointers.
pub(crate) const VM_HOTSPOT: u32 = 4;
/// `HOTSPOT_HEAPS`: code heaps of a JVM's code cache the program is told.
pub(crate) const HOTSPOT_HEAPS: usize = 3;
/// `BLOB_CODE_OFFSET`: [`PyConfig::blob_code`] is an int offset from the blob (JDK 23+), not a
/// pointer.
pub(crate) const BLOB_CODE_OFFSET: u32 = 1;
/// `BLOB_COMPLETE_SHORT`: [`PyConfig::blob_frame_complete`] is a 16-bit field (JDK 23+).
pub(crate) const BLOB_COMPLETE_SHORT: u32 = 2;
/// `enum instr_mode`: the frame holds the instruction's index.
pub(crate) const INSTR_INDEX: u32 = 0;
/// `enum instr_mode`: the frame points into its code object's bytecode.
pub(crate) const INSTR_IN_CODE: u32 = 1;
/// `enum instr_mode`: the frame points into an array whose address its code object holds.
pub(crate) const INSTR_IN_ARRAY: u32 = 2;
/// `enum instr_mode`: the frame points into an array whose address its code's body holds.
pub(crate) const INSTR_IN_BODY: u32 = 3;

/// Value of the `py_configs` map (`struct py_config`): where the program finds an interpreter
/// process's frames (CPython's or PHP's). Built by `python::bpf_config` and `php::bpf_config`,
/// which say what each field is.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct PyConfig {
    pub tss: u64,
    pub tsd_offset: u32,
    pub tstate_frame: u32,
    pub cframe_frame: u32,
    pub frame_window: u32,
    pub window_len: u32,
    pub window_code: u32,
    pub window_previous: u32,
    pub window_instr: u32,
    pub window_marker: u32,
    pub instr_mode: u32,
    pub instr_shift: u32,
    pub code_bytecode: u32,
    pub code_argcount: u32,
    pub code_firstlineno: u32,
    pub kind: u32,
    pub frame_stride: u32,
    pub code_body: u32,
    pub ec_stack: u32,
    pub ec_stack_size: u32,
    pub marker_indirect: u32,
    pub code_end: u64,
    pub code2_start: u64,
    pub code2_end: u64,
    pub slot_mask: u32,
    pub slot_tag: u32,
    pub anon_frames: u32,
    pub function_aux: u32,
    pub heap_low: [u64; HOTSPOT_HEAPS],
    pub heap_high: [u64; HOTSPOT_HEAPS],
    pub heap_segmap: [u64; HOTSPOT_HEAPS],
    pub segment_shift: u32,
    pub blob_header: u32,
    pub blob_frame_size: u32,
    pub blob_frame_complete: u32,
    pub blob_code: u32,
    pub blob_flags: u32,
}

// SAFETY: `PyConfig` is `repr(C)`: a u64, twenty u32, three u64, four u32, nine u64 and six u32
// (224 bytes, no padding), and every bit pattern is a valid value.
unsafe impl aya::Pod for PyConfig {}

/// One Python frame as the program read it (`struct py_frame`), innermost first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PyFrameSample {
    /// The code object's address.
    pub code: u64,
    /// Of the code object's fields (`python::code::fingerprint`).
    pub fingerprint: u64,
    /// The instruction, in code units from the start of the bytecode.
    pub index: i32,
    /// The frame's entry marker byte (`is_entry` in 3.11, `owner` in 3.12+).
    pub marker: u32,
    /// V8: the word at `PyConfig::function_aux` from the function (its `SharedFunctionInfo`),
    /// read in the program; Ruby (`PyConfig::marker_indirect`): the frame's `ep[-2]`, its method
    /// entry or a cref; 0 when not read or unreadable.
    pub aux: u64,
}

/// `sizeof(struct py_frame)`.
const PY_FRAME_BYTES: usize = 32;

/// `stack_sample.flags`: the sampled address is in no mapping the program was told.
const SAMPLE_UNKNOWN_ADDRESS: u32 = 1;
/// `stack_sample.flags`: a mapping's object had no table loaded.
const SAMPLE_TABLE_MISSING: u32 = 2;
/// `stack_sample.flags`: the user frames are the kernel's frame-pointer walk.
const SAMPLE_KERNEL_FP: u32 = 8;

/// Why a thread was off CPU (`enum sample_kind`'s off-CPU kinds): the `off_cpu_reason` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum OffCpuReason {
    /// It went to wait: a sleep, a lock, I/O (it was not runnable).
    Wait,
    /// It was preempted (or yielded) while runnable: it waited for a CPU.
    Preempted,
}

impl OffCpuReason {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            OffCpuReason::Wait => "wait",
            OffCpuReason::Preempted => "preempted",
        }
    }
}

/// What the `stack_samples` ring buffer carries.
#[derive(Debug)]
pub(crate) enum RingRecord {
    /// A sample with its stacks: a CPU sample, or the start of an off-CPU interval.
    Sample(WalkedSample),
    /// The end of thread `tid`'s off-CPU interval (`struct off_cpu_end`), `nanos` after its
    /// start.
    OffCpuEnd { tid: u32, nanos: u64 },
}

/// One sample whose user stack the program walked (`struct stack_sample`).
#[derive(Debug)]
pub(crate) struct WalkedSample {
    pub pid: u32,
    /// The thread.
    pub tid: u32,
    /// `None` for a CPU sample; for the start of an off-CPU interval, why the thread left.
    pub off_cpu: Option<OffCpuReason>,
    /// 1 for a CPU sample; 0 for an off-CPU start (its end carries the time).
    pub value: u64,
    /// Kernel frames, leaf first.
    pub kernel: Vec<u64>,
    /// User frames, leaf first: the sampled address, then return addresses (an address
    /// interrupted by a signal as it is).
    pub user: Vec<u64>,
    /// How the walk ended.
    pub end: StackEnd,
    /// The sampled address is in no mapping the program was told: the process's mappings
    /// may have changed (a `dlopen`) and are worth reading again.
    pub unknown_address: bool,
    /// Some mapping's object had no table loaded (evicted): worth loading again.
    pub table_missing: bool,
    /// The user frames are the kernel's frame-pointer walk (the program was not told the
    /// process yet): `end` says nothing, the collector judges where the walk can be trusted.
    pub kernel_walked: bool,
    /// The thread's Python frames, innermost first (none unless it runs CPython).
    pub python: Vec<PyFrameSample>,
}

/// `enum sample_kind`: the end of an off-CPU interval.
const KIND_OFF_CPU_END: u32 = 3;

/// Decodes one record of the ring buffer; `None` when it is truncated or malformed.
pub(crate) fn parse_record(bytes: &[u8]) -> Option<RingRecord> {
    let u32_at = |at: usize| -> Option<u32> {
        Some(u32::from_ne_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
    };
    if u32_at(40)? == KIND_OFF_CPU_END {
        return Some(RingRecord::OffCpuEnd {
            tid: u32_at(4)?,
            nanos: u64::from_ne_bytes(bytes.get(32..40)?.try_into().ok()?),
        });
    }
    parse_sample(bytes).map(RingRecord::Sample)
}

/// Decodes one `struct stack_sample`; `None` when it is truncated or malformed.
fn parse_sample(bytes: &[u8]) -> Option<WalkedSample> {
    let u32_at = |at: usize| -> Option<u32> {
        Some(u32::from_ne_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
    };
    let u64s = |b: &[u8]| -> Vec<u64> {
        b.chunks_exact(8)
            .map(|c| u64::from_ne_bytes(c.try_into().expect("8 bytes")))
            .collect()
    };
    let kernel_len = (u32_at(8)? as usize).min(MAX_KERNEL_FRAMES * 8);
    let user_len = (u32_at(12)? as usize).min(MAX_USER_FRAMES * 8);
    let py_len = u32_at(20)? as usize;
    let flags = u32_at(28)?;
    let value = u64::from_ne_bytes(bytes.get(32..40)?.try_into().ok()?);
    // `enum sample_kind`.
    let off_cpu = match u32_at(40)? {
        0 => None,
        1 => Some(OffCpuReason::Wait),
        2 => Some(OffCpuReason::Preempted),
        _ => return None,
    };
    let user = u64s(bytes.get(SAMPLE_DATA_AT..SAMPLE_DATA_AT + user_len)?);
    // `enum walk_end`.
    let end = match u32_at(16)? {
        1 => StackEnd::Complete,
        2 => StackEnd::NoUnwindInfo,
        3 => StackEnd::Unreadable,
        4 => StackEnd::DepthLimit,
        5 => StackEnd::BadUnwindInfo,
        _ => return None,
    };
    let at = SAMPLE_DATA_AT + user_len;
    let python = bytes
        .get(at..at.checked_add(py_len)?)?
        .chunks_exact(PY_FRAME_BYTES)
        .map(|f| PyFrameSample {
            code: u64::from_ne_bytes(f[0..8].try_into().expect("8 bytes")),
            fingerprint: u64::from_ne_bytes(f[8..16].try_into().expect("8 bytes")),
            index: i32::from_ne_bytes(f[16..20].try_into().expect("4 bytes")),
            marker: u32::from_ne_bytes(f[20..24].try_into().expect("4 bytes")),
            aux: u64::from_ne_bytes(f[24..32].try_into().expect("8 bytes")),
        })
        .collect();
    // The kernel frames follow the user and Python ones.
    let kernel_at = at + py_len;
    let kernel = u64s(bytes.get(kernel_at..kernel_at.checked_add(kernel_len)?)?);
    Some(WalkedSample {
        pid: u32_at(0)?,
        tid: u32_at(4)?,
        off_cpu,
        value,
        kernel,
        user,
        end,
        unknown_address: flags & SAMPLE_UNKNOWN_ADDRESS != 0,
        table_missing: flags & SAMPLE_TABLE_MISSING != 0,
        kernel_walked: flags & SAMPLE_KERNEL_FP != 0,
        python,
    })
}

/// One drained entry: a process, its stacks (leaf first; empty when there was none) and how
/// many samples had them.
#[derive(Debug, Clone)]
pub(crate) struct DrainedStack {
    pub pid: u32,
    pub user: Arc<[u64]>,
    pub kernel: Arc<[u64]>,
    pub count: u64,
    /// `None` for CPU samples (`count` samples); for off-CPU time (`count` nanoseconds), why
    /// the thread was off.
    pub off_cpu: Option<OffCpuReason>,
    /// How the user stack's walk ended; `None` for a frame-pointer walk in the kernel
    /// (`bpf_get_stackid` does not say) until the collector has checked it.
    pub end: Option<StackEnd>,
}

/// A process the BPF program announced (its first sample, or first since exec).
#[derive(Debug, Clone)]
pub(crate) struct ProcEvent {
    pub pid: u32,
    pub comm: String,
}

/// The loaded and attached sampler. Dropping it detaches and unloads everything: the links are
/// file descriptors owned here, nothing is pinned, so even a killed agent leaves nothing
/// attached.
pub(crate) struct Sampler {
    half: Array<MapData, u32>,
    counts: [HashMap<MapData, CountKey, u64>; 2],
    stacks: [StackTraceMap<MapData>; 2],
    stats: PerCpuArray<MapData, StatCounters>,
    /// `Stat::Counted` at the last drain: the counts maps are read only when it moved.
    counted_at_drain: u64,
    samples: RingBuf<MapData>,
    unwind_rows: Array<MapData, RowChunk>,
    unwind_objects: HashMap<MapData, u32, ObjectTable>,
    proc_maps: HashMap<MapData, u32, ProcMaps>,
    table_chunks: u32,
    py_configs: HashMap<MapData, u32, PyConfig>,
    current: u32,
    n_cpus: usize,
    /// Owns the programs and their links: keep it last so maps are dropped first.
    _ebpf: Ebpf,
}

impl std::fmt::Debug for Sampler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sampler")
            .field("current", &self.current)
            .field("n_cpus", &self.n_cpus)
            .finish()
    }
}

fn map_error(name: &'static str) -> impl FnOnce(aya::maps::MapError) -> Error {
    move |source| Error::Map {
        name,
        source: Box::new(source),
    }
}

fn take_map(ebpf: &mut Ebpf, name: &'static str) -> Result<aya::maps::Map, Error> {
    ebpf.take_map(name).ok_or(Error::MissingInObject { name })
}

impl Sampler {
    /// Loads the program, attaches it to a `cpu-clock` event at `frequency_hz` on every online
    /// CPU and to the exec and exit raw tracepoints (which, unlike tracepoints, need no tracefs), and returns it with the ring buffer of
    /// process announcements.
    ///
    /// `table_bytes` is the kernel memory given to unwind tables (`unwind_rows`, in chunks of
    /// [`ROWS_PER_CHUNK`] rows).
    ///
    /// With `off_cpu_threshold` above 0 (the probability, at most 1, that a switch-out is
    /// recorded) it also attaches to the `sched_switch` raw tracepoint: off-CPU intervals then
    /// arrive as walked samples (their start) and [`RingRecord::OffCpuEnd`]s. At 0 that program
    /// is not loaded at all.
    #[expect(
        clippy::too_many_lines,
        reason = "loads and attaches the BPF programs and maps in the order the verifier needs them"
    )]
    pub fn start(
        frequency_hz: u64,
        table_bytes: u64,
        off_cpu_threshold: f64,
    ) -> Result<(Sampler, ProcEvents), Error> {
        // `scratch` holds one sample per possible CPU (indexed by CPU number).
        let n_possible = aya::util::nr_cpus().map_err(|(path, source)| Error::OnlineCpus {
            path: path.into(),
            source,
        })?;
        let off_cpu = off_cpu_threshold > 0.0;
        let threshold = off_cpu_scaled(off_cpu_threshold);
        let agent_tgid = std::process::id();
        let mut ring_bytes = stack_samples_bytes(n_possible, frequency_hz);
        if off_cpu {
            // Off-CPU samples come at the rate of context switches (thousands a second per
            // CPU, each about 1.5 KiB): room for them beside.
            ring_bytes = (ring_bytes * 2).clamp(16 << 20, 64 << 20);
        }
        let mut ebpf = EbpfLoader::new()
            .map_max_entries("scratch", n_possible as u32)
            .map_max_entries("stack_samples", ring_bytes)
            .override_global("off_cpu_threshold", &threshold, true)
            .override_global("agent_tgid", &agent_tgid, true)
            .map_max_entries("unwind_rows", table_chunks(table_bytes))
            .load(OBJECT)
            .map_err(|source| Error::Load {
                source: Box::new(source),
            })?;

        let cpus = aya::util::online_cpus().map_err(|(path, source)| Error::OnlineCpus {
            path: path.into(),
            source,
        })?;
        let program: &mut PerfEvent = ebpf
            .program_mut("profile_cpu")
            .ok_or(Error::MissingInObject {
                name: "profile_cpu",
            })?
            .try_into()
            .map_err(|source| attach_error("profile_cpu", source))?;
        program
            .load()
            .map_err(|source| attach_error("profile_cpu", source))?;
        for &cpu in &cpus {
            program
                .attach(
                    PerfEventConfig::Software(SoftwareEvent::CpuClock),
                    PerfEventScope::AllProcessesOneCpu { cpu },
                    SamplePolicy::Frequency(frequency_hz),
                    false,
                )
                .map_err(|source| attach_error("profile_cpu", source))?;
        }
        attach_raw_tracepoint(&mut ebpf, "on_exec", "sched_process_exec")?;
        attach_raw_tracepoint(&mut ebpf, "on_exit", "sched_process_exit")?;
        if off_cpu {
            attach_raw_tracepoint(&mut ebpf, "on_switch", "sched_switch")?;
        }

        let half = Array::try_from(take_map(&mut ebpf, "half")?).map_err(map_error("half"))?;
        let counts = [
            HashMap::try_from(take_map(&mut ebpf, "counts0")?).map_err(map_error("counts0"))?,
            HashMap::try_from(take_map(&mut ebpf, "counts1")?).map_err(map_error("counts1"))?,
        ];
        let stacks = [
            StackTraceMap::try_from(take_map(&mut ebpf, "stacks0")?)
                .map_err(map_error("stacks0"))?,
            StackTraceMap::try_from(take_map(&mut ebpf, "stacks1")?)
                .map_err(map_error("stacks1"))?,
        ];
        let stats =
            PerCpuArray::try_from(take_map(&mut ebpf, "stats")?).map_err(map_error("stats"))?;
        let events = RingBuf::try_from(take_map(&mut ebpf, "proc_events")?)
            .map_err(map_error("proc_events"))?;
        let samples = RingBuf::try_from(take_map(&mut ebpf, "stack_samples")?)
            .map_err(map_error("stack_samples"))?;
        let unwind_rows = Array::try_from(take_map(&mut ebpf, "unwind_rows")?)
            .map_err(map_error("unwind_rows"))?;
        let unwind_objects = HashMap::try_from(take_map(&mut ebpf, "unwind_objects")?)
            .map_err(map_error("unwind_objects"))?;
        let proc_maps =
            HashMap::try_from(take_map(&mut ebpf, "proc_maps")?).map_err(map_error("proc_maps"))?;
        let py_configs = HashMap::try_from(take_map(&mut ebpf, "py_configs")?)
            .map_err(map_error("py_configs"))?;
        Ok((
            Sampler {
                half,
                counts,
                stacks,
                stats,
                samples,
                unwind_rows,
                unwind_objects,
                proc_maps,
                table_chunks: table_chunks(table_bytes),
                py_configs,
                current: 0,
                counted_at_drain: 0,
                n_cpus: cpus.len(),
                _ebpf: ebpf,
            },
            ProcEvents::new(events),
        ))
    }

    /// Number of CPUs sampled.
    pub fn n_cpus(&self) -> usize {
        self.n_cpus
    }

    /// Switches the program to the other half of the maps, then reads and clears the half it
    /// was writing. Samples taken meanwhile go to the new half: none is lost. The maps hold
    /// only samples the ring buffer had no room for: when the program counted none since the
    /// last drain, nothing is switched or read (one system call). A sample counted while this
    /// reads is drained the next time.
    pub fn drain(&mut self) -> Result<Vec<DrainedStack>, Error> {
        let counted = self.stats()?.counted;
        if counted == self.counted_at_drain {
            return Ok(Vec::new());
        }
        self.counted_at_drain = counted;
        let old = self.current as usize;
        self.current ^= 1;
        self.half
            .set(0, self.current, 0)
            .map_err(map_error("half"))?;
        let switched = Instant::now();
        if let Some(rest) = SWITCH_GRACE.checked_sub(switched.elapsed()) {
            std::thread::sleep(rest);
        }

        let counts = &mut self.counts[old];
        let stacks = &mut self.stacks[old];
        let entries: Vec<(CountKey, u64)> = counts.iter().filter_map(Result::ok).collect();
        let mut frames: FxHashMap<i32, Arc<[u64]>> = FxHashMap::default();
        let empty: Arc<[u64]> = Arc::from(Vec::new());
        let mut resolve = |id: i32| -> Arc<[u64]> {
            if id < 0 {
                return empty.clone();
            }
            frames
                .entry(id)
                .or_insert_with(|| match stacks.get(&(id as u32), 0) {
                    Ok(trace) => trace.frames().iter().map(|f| f.ip).collect(),
                    // Gone (cannot happen while this half is idle): an empty stack.
                    Err(_) => empty.clone(),
                })
                .clone()
        };
        let mut out = Vec::with_capacity(entries.len());
        for (key, count) in &entries {
            out.push(DrainedStack {
                pid: key.pid,
                user: resolve(key.user_stack),
                kernel: resolve(key.kernel_stack),
                count: *count,
                off_cpu: None,
                // Judged by the collector (`Unwinder::check_kernel_walk`).
                end: None,
            });
        }
        for (key, _) in &entries {
            // A key that vanished is harmless; anything else would repeat its samples.
            counts.remove(key).ok();
        }
        let ids: Vec<u32> = stacks.stack_ids().filter_map(Result::ok).collect();
        for id in ids {
            stacks.remove(&id).ok();
        }
        Ok(out)
    }

    /// Hands every record waiting in the ring buffer to `f`, in the order they were sent;
    /// returns how many there were.
    pub fn read_samples(&mut self, mut f: impl FnMut(RingRecord)) -> usize {
        let mut n = 0;
        while let Some(item) = self.samples.next() {
            if let Some(sample) = parse_record(&item) {
                f(sample);
                n += 1;
            }
        }
        n
    }

    /// Chunks of [`ROWS_PER_CHUNK`] rows the unwind tables may take.
    pub fn table_chunks(&self) -> u32 {
        self.table_chunks
    }

    /// Loads the table `id` (never reused) into chunks from `first_chunk` on: `rows`, sorted,
    /// then their `index` (`PageIndex::new` of the same rows).
    pub fn load_table(
        &mut self,
        id: u32,
        first_chunk: u32,
        rows: impl ExactSizeIterator<Item = CompactRow>,
        index: &PageIndex,
    ) -> Result<(), Error> {
        let n_rows = rows.len() as u32;
        let mut chunk = RowChunk {
            rows: [UnwindRow::default(); ROWS_PER_CHUNK],
        };
        let total = n_rows as usize + index.rows_taken();
        // Encoded a chunk at a time: no second copy of a table of millions of rows.
        let mut rows = rows.map(|r| UnwindRow::from(&r)).chain(index.packed_rows());
        for i in 0..total.div_ceil(ROWS_PER_CHUNK) {
            for to in &mut chunk.rows {
                *to = rows.next().unwrap_or_default();
            }
            self.unwind_rows
                .set(first_chunk + i as u32, chunk, 0)
                .map_err(map_error("unwind_rows"))?;
        }
        let first_row = first_chunk * ROWS_PER_CHUNK as u32;
        let table = ObjectTable {
            first_row,
            n_rows,
            index_row: first_row + n_rows,
            n_pages: index.pages(),
            base_pc: index.base,
            page_shift: index.shift,
        };
        self.unwind_objects
            .insert(id, table, 0)
            .map_err(map_error("unwind_objects"))
    }

    /// Forgets table `id`: mappings naming it find no rows until it is loaded again.
    pub fn drop_table(&mut self, id: u32) {
        // Absent already is fine.
        self.unwind_objects.remove(&id).ok();
    }

    /// Tells the program process `pid`'s executable mappings (sorted, at most
    /// [`MAX_MAPPINGS`]); `None` forgets the process.
    pub fn set_process(
        &mut self,
        pid: u32,
        mappings: Option<&[MappingEntry]>,
    ) -> Result<(), Error> {
        let Some(mappings) = mappings else {
            self.proc_maps.remove(&pid).ok();
            return Ok(());
        };
        let mut maps = ProcMaps {
            n: mappings.len().min(MAX_MAPPINGS) as u32,
            pad: 0,
            m: [MappingEntry::default(); MAX_MAPPINGS],
        };
        for (to, from) in maps.m.iter_mut().zip(mappings) {
            *to = *from;
        }
        self.proc_maps
            .insert(pid, maps, 0)
            .map_err(map_error("proc_maps"))
    }

    /// Tells the program where process `pid`'s Python frames are (`None`: it reads none).
    pub fn set_python(&mut self, pid: u32, config: Option<&PyConfig>) -> Result<(), Error> {
        match config {
            Some(config) => self
                .py_configs
                .insert(pid, *config, 0)
                .map_err(map_error("py_configs")),
            None => {
                // Absent already is fine.
                self.py_configs.remove(&pid).ok();
                Ok(())
            }
        }
    }

    /// The program's counters so far.
    pub fn stats(&self) -> Result<BpfStats, Error> {
        let per_cpu = self.stats.get(&0, 0).map_err(map_error("stats"))?;
        let read =
            |stat: Stat| -> u64 { per_cpu.iter().map(|counters| counters[stat as usize]).sum() };
        Ok(BpfStats {
            samples: read(Stat::Samples),
            idle: read(Stat::Idle),
            stack_collisions: read(Stat::StackCollision),
            stack_errors: read(Stat::StackError),
            user_stack_unreadable: read(Stat::UserUnreadable),
            counts_full: read(Stat::CountsFull),
            events_lost: read(Stat::EventsLost),
            stacks_walked: read(Stat::Walked),
            samples_lost: read(Stat::SamplesLost),
            fp_walked: read(Stat::FpWalked),
            fp_fallbacks: read(Stat::FpFallback),
            no_process: read(Stat::NoProcess),
            python_walks: read(Stat::PyWalked),
            python_walks_cut: read(Stat::PyCut),
            php_walks: read(Stat::PhpWalked),
            php_walks_cut: read(Stat::PhpCut),
            ruby_walks: read(Stat::RubyWalked),
            ruby_walks_cut: read(Stat::RubyCut),
            v8_walks: read(Stat::V8Walked),
            v8_walks_cut: read(Stat::V8Cut),
            jvm_walks: read(Stat::JvmWalked),
            jvm_walks_cut: read(Stat::JvmCut),
            jvm_compiled_steps: read(Stat::JvmSteps),
            jvm_lost: read(Stat::JvmLost),
            off_cpu_samples: read(Stat::OffCpu),
            off_cpu_lost: read(Stat::OffCpuLost),
            counted: read(Stat::Counted),
            kernel_walked: read(Stat::KernelWalked),
        })
    }
}

/// How often the collector empties the ring buffer of walked samples, loads compiled tables
/// and tells again the processes whose samples say so (new processes are told as soon as they
/// are announced): once a second, or four times with off-CPU profiling on (its samples come at
/// the rate of context switches). Each wakeup costs the agent tens of microseconds of
/// scheduling on a busy node, whatever there is to do: at 100 ms that was half of its CPU, at
/// 250 ms a tenth. The ring buffer holds a second of the deepest stacks
/// ([`stack_samples_bytes`]).
pub(crate) fn sample_poll_interval(off_cpu: bool) -> std::time::Duration {
    std::time::Duration::from_millis(if off_cpu { 250 } else { 1000 })
}

/// Size of the ring buffer of walked samples: what `n_cpus` at `frequency_hz` send in a
/// second (at least one [`sample_poll_interval`]) when every stack is 1,024 frames deep
/// (about 9 KiB a sample; real stacks are a tenth of that), as a power of two from 2 to 64 MiB
/// (2 MiB holds five seconds of such samples from two CPUs at 19 Hz). Mapped into the agent,
/// it counts in its RSS twice (the kernel maps the data pages twice), so it is not made larger
/// than needed. A sample that does not fit is counted with frame-pointer stacks instead
/// (`parca_agent_samples_lost_total`).
fn stack_samples_bytes(n_cpus: usize, frequency_hz: u64) -> u32 {
    let per_second = n_cpus as u64
        * frequency_hz
        * (SAMPLE_DATA_AT + MAX_USER_FRAMES * 8 + MAX_KERNEL_FRAMES * 8) as u64;
    per_second.clamp(2 << 20, 64 << 20).next_power_of_two() as u32
}

/// Chunks of `unwind_rows` that `table_bytes` hold (at least one).
fn table_chunks(table_bytes: u64) -> u32 {
    let chunk = std::mem::size_of::<RowChunk>() as u64;
    (table_bytes / chunk).clamp(1, u64::from(u32::MAX) / ROWS_PER_CHUNK as u64) as u32
}

/// `--off-cpu-threshold` as the program compares it with `bpf_get_prandom_u32()`: the
/// probability scaled to a u32, `u32::MAX` recording every switch-out.
fn off_cpu_scaled(threshold: f64) -> u32 {
    (threshold.clamp(0.0, 1.0) * f64::from(u32::MAX)).round() as u32
}

/// Loads program `name` and attaches it to the raw tracepoint `event` (raw tracepoints need no
/// tracefs).
fn attach_raw_tracepoint(ebpf: &mut Ebpf, name: &'static str, event: &str) -> Result<(), Error> {
    let program: &mut RawTracePoint = ebpf
        .program_mut(name)
        .ok_or(Error::MissingInObject { name })?
        .try_into()
        .map_err(|source| attach_error(name, source))?;
    program
        .load()
        .map_err(|source| attach_error(name, source))?;
    program
        .attach(event)
        .map_err(|source| attach_error(name, source))?;
    Ok(())
}

fn attach_error(program: &'static str, source: aya::programs::ProgramError) -> Error {
    Error::Attach {
        program,
        source: Box::new(source),
    }
}

/// Decodes one `struct proc_event` (u32 pid, u32 kind, char comm[16]).
pub(crate) fn parse_event(bytes: &[u8]) -> Option<ProcEvent> {
    let pid = u32::from_ne_bytes(bytes.get(0..4)?.try_into().ok()?);
    let comm = bytes.get(8..24)?;
    let len = comm.iter().position(|&b| b == 0).unwrap_or(comm.len());
    Some(ProcEvent {
        pid,
        comm: String::from_utf8_lossy(&comm[..len]).into_owned(),
    })
}

/// The ring buffer of process announcements, shared by the sampling thread (which reads it
/// before each drain, so that every drained process has been announced) and the async task
/// that reads it as soon as it has data. The descriptor is kept beside it so it can be polled
/// without the lock.
pub(crate) struct ProcEvents {
    ring: std::sync::Mutex<RingBuf<MapData>>,
    fd: std::os::fd::RawFd,
}

impl ProcEvents {
    fn new(ring: RingBuf<MapData>) -> ProcEvents {
        use std::os::fd::AsRawFd;
        let fd = ring.as_raw_fd();
        ProcEvents {
            ring: std::sync::Mutex::new(ring),
            fd,
        }
    }

    /// Every pending announcement.
    pub fn read(&self) -> Vec<ProcEvent> {
        let mut out = Vec::new();
        let mut ring = self.ring.lock().expect("ring buffer lock");
        while let Some(item) = ring.next() {
            if let Some(event) = parse_event(&item) {
                out.push(event);
            }
        }
        out
    }
}

impl std::os::fd::AsRawFd for ProcEvents {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.fd
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first row whose pc is above `pc`, searched over `[lo, hi)` as the program does.
    fn upper_bound(pcs: &[u32], pc: u32, lo: u32, hi: u32) -> u32 {
        lo + pcs[lo as usize..hi as usize].partition_point(|&p| p <= pc) as u32
    }

    #[test]
    fn a_page_index_narrows_the_search_to_rows_that_hold_the_answer() {
        // Rows every ~40 bytes from 0x1000 (dense code), then a gap, then sparse rows, as a
        // real object's text and its hand-written stubs.
        let mut pcs: Vec<u32> = (0..20_000u32).map(|i| 0x1000 + i * 40 + (i % 7)).collect();
        pcs.extend((0..50u32).map(|i| 0x40_0000 + i * 0x3000));
        let index = PageIndex::new(|| pcs.iter().copied(), pcs.len());
        assert!(index.pages() > 0 && index.shift >= 12);
        assert!(
            index.entries.len() <= pcs.len() / 4,
            "{} entries",
            index.entries.len()
        );
        let n = pcs.len() as u32;
        let mut widest = 0;
        for pc in (0..0x50_0000u32)
            .step_by(13)
            .chain(pcs.iter().flat_map(|&p| [p - 1, p, p + 1]))
        {
            let (lo, hi) = index.range(pc, n);
            assert_eq!(
                upper_bound(&pcs, pc, lo, hi),
                upper_bound(&pcs, pc, 0, n),
                "pc {pc:#x}"
            );
            if pc >= pcs[0] && pc <= *pcs.last().unwrap() {
                widest = widest.max(hi - lo);
            }
        }
        // A page's rows, not the table's.
        assert!(widest < 1_000, "{widest} rows searched");
    }

    #[test]
    fn a_page_index_is_packed_three_entries_to_a_row() {
        let pcs: Vec<u32> = (0..1_000u32).map(|i| 0x2000 + i * 16).collect();
        let index = PageIndex::new(|| pcs.iter().copied(), pcs.len());
        let rows: Vec<UnwindRow> = index.packed_rows().collect();
        assert_eq!(rows.len(), index.rows_taken());
        // Read back as the program does: the row's 12 bytes as three u32.
        let bytes: Vec<u8> = rows
            .iter()
            .flat_map(|r| {
                let mut b = Vec::with_capacity(12);
                b.extend_from_slice(&r.pc.to_ne_bytes());
                b.push(r.kind);
                b.push(r.rbp_rule);
                b.extend_from_slice(&r.rbp_offset.to_ne_bytes());
                b.extend_from_slice(&r.cfa_offset.to_ne_bytes());
                b
            })
            .collect();
        let words: Vec<u32> = bytes
            .chunks(4)
            .map(|w| u32::from_ne_bytes(w.try_into().unwrap()))
            .collect();
        assert_eq!(&words[..index.entries.len()], &index.entries[..]);
        // Small tables get none.
        let small = PageIndex::new(|| pcs[..10].iter().copied(), 10);
        assert_eq!((small.pages(), small.rows_taken()), (0, 0));
    }

    #[test]
    fn event_layout_matches_the_c_struct() {
        let mut bytes = vec![0u8; 24];
        bytes[0..4].copy_from_slice(&4242u32.to_ne_bytes());
        bytes[8..13].copy_from_slice(b"hello");
        let e = parse_event(&bytes).unwrap();
        assert_eq!((e.pid, e.comm.as_str()), (4242, "hello"));
        assert!(parse_event(&bytes[..10]).is_none());
        // A full 16-byte name has no NUL.
        bytes[8..24].copy_from_slice(b"abcdefghijklmnop");
        assert_eq!(parse_event(&bytes).unwrap().comm, "abcdefghijklmnop");
    }

    /// A `struct stack_sample` as the program sends it.
    fn sample(user: &[u64], end: u32, flags: u32, python: &[[u8; PY_FRAME_BYTES]]) -> Vec<u8> {
        let mut bytes = vec![0u8; SAMPLE_DATA_AT];
        bytes[0..4].copy_from_slice(&7u32.to_ne_bytes());
        bytes[8..12].copy_from_slice(&16u32.to_ne_bytes());
        bytes[12..16].copy_from_slice(&(user.len() as u32 * 8).to_ne_bytes());
        bytes[16..20].copy_from_slice(&end.to_ne_bytes());
        bytes[20..24].copy_from_slice(&((python.len() * PY_FRAME_BYTES) as u32).to_ne_bytes());
        bytes[28..32].copy_from_slice(&flags.to_ne_bytes());
        bytes[32..40].copy_from_slice(&1u64.to_ne_bytes());
        for f in user {
            bytes.extend_from_slice(&f.to_ne_bytes());
        }
        for p in python {
            bytes.extend_from_slice(p);
        }
        bytes.extend_from_slice(&0xffff_ffff_8100_0000u64.to_ne_bytes());
        bytes.extend_from_slice(&0u64.to_ne_bytes());
        bytes
    }

    #[test]
    fn sample_layout_matches_the_c_struct() {
        let bytes = sample(&[0x401000, 0x401234], 1, SAMPLE_UNKNOWN_ADDRESS, &[]);
        let s = parse_sample(&bytes).unwrap();
        assert_eq!(s.pid, 7);
        assert_eq!(s.kernel.len(), 2);
        assert_eq!(s.kernel[0], 0xffff_ffff_8100_0000);
        assert_eq!(s.user, [0x401000, 0x401234]);
        assert_eq!(s.end, StackEnd::Complete);
        assert!(s.unknown_address && !s.table_missing);
        assert_eq!((s.off_cpu, s.value), (None, 1));
        assert!(parse_sample(&bytes[..bytes.len() - 8]).is_none());
        for (code, end) in [
            (2, StackEnd::NoUnwindInfo),
            (3, StackEnd::Unreadable),
            (4, StackEnd::DepthLimit),
            (5, StackEnd::BadUnwindInfo),
        ] {
            let s = parse_sample(&sample(&[1], code, SAMPLE_TABLE_MISSING, &[])).unwrap();
            assert_eq!(s.end, end);
            assert!(s.table_missing);
        }
        // An unknown walk end is refused.
        assert!(parse_sample(&sample(&[1], 9, 0, &[])).is_none());
    }

    #[test]
    fn a_stack_the_kernel_walked_by_frame_pointers_says_so() {
        let s = parse_sample(&sample(&[0x401000, 0x401234], 1, SAMPLE_KERNEL_FP, &[])).unwrap();
        assert!(s.kernel_walked && !s.unknown_address && !s.table_missing);
        assert_eq!(s.user, [0x401000, 0x401234]);
        assert_eq!(s.kernel.len(), 2);
        assert!(
            !parse_sample(&sample(&[1], 1, SAMPLE_TABLE_MISSING, &[]))
                .unwrap()
                .kernel_walked
        );
    }

    #[test]
    fn off_cpu_starts_carry_their_reason_and_ends_their_nanoseconds() {
        let mut bytes = sample(&[0x401000], 1, 0, &[]);
        bytes[4..8].copy_from_slice(&8u32.to_ne_bytes());
        bytes[32..40].copy_from_slice(&0u64.to_ne_bytes());
        for (kind, reason) in [(1u32, OffCpuReason::Wait), (2, OffCpuReason::Preempted)] {
            bytes[40..44].copy_from_slice(&kind.to_ne_bytes());
            let Some(RingRecord::Sample(s)) = parse_record(&bytes) else {
                panic!("a sample");
            };
            assert_eq!((s.tid, s.off_cpu, s.value), (8, Some(reason), 0));
        }
        // An unknown kind is refused.
        bytes[40..44].copy_from_slice(&4u32.to_ne_bytes());
        assert!(parse_record(&bytes).is_none());
        // `struct off_cpu_end`: the header alone.
        let mut end = vec![0u8; 48];
        end[0..4].copy_from_slice(&7u32.to_ne_bytes());
        end[4..8].copy_from_slice(&8u32.to_ne_bytes());
        end[32..40].copy_from_slice(&12_345_678u64.to_ne_bytes());
        end[40..44].copy_from_slice(&KIND_OFF_CPU_END.to_ne_bytes());
        assert!(matches!(
            parse_record(&end),
            Some(RingRecord::OffCpuEnd {
                tid: 8,
                nanos: 12_345_678
            })
        ));
    }

    #[test]
    fn the_off_cpu_threshold_scales_to_the_programs_u32() {
        assert_eq!(off_cpu_scaled(0.0), 0);
        assert_eq!(off_cpu_scaled(1.0), u32::MAX);
        assert_eq!(off_cpu_scaled(0.5), 1 << 31);
    }

    #[test]
    fn python_frames_follow_the_user_frames() {
        let mut frame = [0u8; PY_FRAME_BYTES];
        frame[0..8].copy_from_slice(&0x7f00_1000u64.to_ne_bytes());
        frame[8..16].copy_from_slice(&0xfeedu64.to_ne_bytes());
        frame[16..20].copy_from_slice(&(-1i32).to_ne_bytes());
        frame[20..24].copy_from_slice(&3u32.to_ne_bytes());
        frame[24..32].copy_from_slice(&0x7f00_2001u64.to_ne_bytes());
        let s = parse_sample(&sample(&[0x5555], 1, 0, &[frame])).unwrap();
        assert_eq!(
            s.python,
            [PyFrameSample {
                code: 0x7f00_1000,
                fingerprint: 0xfeed,
                index: -1,
                marker: 3,
                aux: 0x7f00_2001,
            }]
        );
        assert_eq!(s.user, [0x5555]);
    }

    #[test]
    fn py_config_matches_the_c_struct() {
        assert_eq!(std::mem::size_of::<PyConfig>(), 224);
    }

    #[test]
    fn the_ring_buffer_grows_with_cpus_and_frequency() {
        assert_eq!(stack_samples_bytes(2, 19), 2 << 20);
        assert_eq!(stack_samples_bytes(2, 99), 2 << 20);
        assert_eq!(stack_samples_bytes(64, 19), 16 << 20);
        assert_eq!(stack_samples_bytes(256, 99), 64 << 20);
        assert_eq!(stack_samples_bytes(1024, 10_000), 64 << 20);
    }

    #[test]
    fn count_key_is_twelve_bytes() {
        assert_eq!(std::mem::size_of::<CountKey>(), 12);
    }

    #[test]
    fn table_structs_match_the_c_structs() {
        assert_eq!(std::mem::size_of::<UnwindRow>(), 12);
        assert_eq!(std::mem::size_of::<RowChunk>(), 12 * ROWS_PER_CHUNK);
        assert_eq!(std::mem::size_of::<MappingEntry>(), 32);
        assert_eq!(std::mem::size_of::<ProcMaps>(), 8 + 32 * MAX_MAPPINGS);
        assert_eq!(
            table_chunks(64 << 20),
            (64 << 20) / (12 * ROWS_PER_CHUNK as u32)
        );
        assert_eq!(table_chunks(0), 1);
    }
}
