//! Frames of interpreted code (Python's, PHP's): what the runtimes' modules share, below them.
//! The BPF program reads an interpreter's frame chain at sample time (each runtime's module says
//! where); the module names each (code, instruction) from the process's [`Memory`] into the
//! shared [`FrameTable`], and [`place_calls`] puts the named frames where the native evaluation
//! loop that runs them was. `runtimes.rs` sits above the runtimes' modules and gives each
//! process to the one that recognizes it.
//!
//! An interpreted frame travels in a user stack as an address no code can have
//! ([`frame_address`]): the index of its name in the [`FrameTable`], which the profile builder
//! reads.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use parca_symbolize::Frame;
use rustc_hash::FxHashMap;

use crate::bpf::{PyConfig, PyFrameSample};
use crate::process::ProcessInfo;

/// Distinct interpreted frames (function, file, line) held; past it, new ones are named
/// [`TABLE_FULL`]. A frame costs about 100 bytes.
const MAX_FRAMES: usize = 200_000;
const TABLE_FULL: &str = "[interpreter: frame table full]";

/// An interpreted frame in a user stack: an address with the top bit set (no user or kernel
/// code has one), whose low 32 bits index the [`FrameTable`].
const FRAME_TAG: u64 = 1 << 63;

/// The address standing for interpreted frame `id` in a user stack.
pub(crate) fn frame_address(id: u32) -> u64 {
    FRAME_TAG | u64::from(id)
}

/// The interpreted frame a user stack's address stands for, if it stands for one.
pub(crate) fn frame_id(addr: u64) -> Option<u32> {
    (addr & !0xffff_ffff == FRAME_TAG).then_some(addr as u32)
}

/// Every interpreted frame named so far, shared by the sampling thread (which names them) and
/// the profile builder (which writes them into pprof).
#[derive(Debug, Default)]
pub(crate) struct FrameTable {
    ids: FxHashMap<(String, String, u32), u32>,
    frames: Vec<Frame>,
}

impl FrameTable {
    /// The frame of id `id`.
    pub fn get(&self, id: u32) -> Option<&Frame> {
        self.frames.get(id as usize)
    }

    /// Number of frames held.
    pub fn len(&self) -> usize {
        self.frames.len()
    }

    /// The id of frame (`function`, `file`, `line`); an empty `file` is none.
    pub fn intern(&mut self, function: &str, file: &str, line: u32) -> u32 {
        if let Some(&id) = self.ids.get(&(function.to_owned(), file.to_owned(), line)) {
            return id;
        }
        if self.frames.len() >= MAX_FRAMES && function != TABLE_FULL {
            return self.intern(TABLE_FULL, "", 0);
        }
        let id = self.frames.len() as u32;
        self.frames.push(Frame {
            function: function.to_owned(),
            system_name: function.to_owned(),
            file: (!file.is_empty()).then(|| file.to_owned()),
            line,
        });
        self.ids
            .insert((function.to_owned(), file.to_owned(), line), id);
        id
    }
}

/// The frames a JIT runtime's sampled frames were named as, per process, by what identifies a
/// sampled frame (`K`): a hot frame is sampled at one place again and again, and naming it
/// reads the process's code and tables. Bounded (emptied once it holds `max`), and emptied every
/// `rename_every` where the runtime frees code and reuses its memory for other functions.
#[derive(Debug)]
pub(crate) struct NamedFrames<K> {
    named: FxHashMap<K, Arc<[u64]>>,
    max: usize,
    rename_every: Option<Duration>,
    since: Instant,
    /// How many times it was emptied: what a runtime keeps beside it (what its frames were
    /// read from) is as good as the table's names, and emptied with them.
    generation: u64,
}

impl<K: std::hash::Hash + Eq> NamedFrames<K> {
    /// Empty, holding at most `max` sampled frames' names, each trusted for `rename_every`
    /// (`None`: until the process exits or the table fills).
    pub fn new(max: usize, rename_every: Option<Duration>) -> Self {
        NamedFrames {
            named: FxHashMap::default(),
            max,
            rename_every,
            since: Instant::now(),
            generation: 0,
        }
    }

    /// How many times the table was emptied so far.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    fn clear(&mut self) {
        self.named.clear();
        self.generation += 1;
    }

    /// The frames named for `key` so far, if any (counted as named frames): a caller whose key
    /// is cheaper to read than to check looks first, and checks only what it names.
    pub fn known(&mut self, key: &K, stats: &mut InterpreterStats) -> Option<Arc<[u64]>> {
        if self
            .rename_every
            .is_some_and(|every| self.since.elapsed() >= every)
        {
            self.clear();
            self.since = Instant::now();
        }
        let frames = self.named.get(key)?;
        stats.frames += frames.len() as u64;
        Some(frames.clone())
    }

    /// The frames named for `key` in the table `table` finds in `owner`, named by `name` the
    /// first time, which reads the rest of the owner (a process's memory and layout). What
    /// could not be read (`name` counted unreadable frames) is not kept: it is read (and
    /// counted) again next time.
    pub fn in_owner<P>(
        owner: &mut P,
        table: impl Fn(&mut P) -> &mut Self,
        key: K,
        stats: &mut InterpreterStats,
        name: impl FnOnce(&mut P, &mut InterpreterStats) -> Vec<u64>,
    ) -> Arc<[u64]> {
        if let Some(frames) = table(owner).known(&key, stats) {
            return frames;
        }
        let unreadable = stats.unreadable_frames;
        let frames: Arc<[u64]> = Arc::from(name(owner, stats));
        if stats.unreadable_frames == unreadable {
            let named = table(owner);
            if named.named.len() >= named.max {
                named.clear();
            }
            named.named.insert(key, frames.clone());
        }
        frames
    }
}

/// Counters of one runtime's frames, for metrics.
#[derive(Debug, Clone, Copy, Default)]
pub struct InterpreterStats {
    /// Processes whose frames are read (the BPF program was told how).
    pub processes: u64,
    /// Samples that carried frames of the runtime.
    pub stacks: u64,
    /// Frames named.
    pub frames: u64,
    /// Of which had code that could not be read.
    pub unreadable_frames: u64,
    /// Frames that no native evaluation frame was found for (placed below the last one that
    /// was).
    pub unplaced_frames: u64,
    /// Distinct frames held in the frame table (all runtimes').
    pub frames_held: u64,
}

/// One interpreter's way of reading its processes' frames (`python::CPython`, `php::Php`,
/// `ruby::Ruby`); [`Stacks`] does the rest the same way for each.
pub(crate) trait Runtime {
    /// What it keeps per process whose frames are read (its memory, what it has named).
    type Process: std::fmt::Debug;

    /// Whether `info` runs this interpreter, in a version it reads: its state, and what the
    /// BPF program is told.
    fn prepare(proc_root: &Path, info: &ProcessInfo) -> Option<(Self::Process, PyConfig)>;

    /// Whether a process `prepare` did not recognize is worth preparing again later (while a
    /// runtime sets up what its frames are read by), rather than only at its next read.
    fn retry(_info: &ProcessInfo) -> bool {
        false
    }

    /// The sampled frames (innermost first), named into `frames`, as the frames of each native
    /// call of the evaluation loop, innermost call first (frames of no code left out).
    fn calls(
        process: &mut Self::Process,
        frames: &mut FrameTable,
        sampled: &[PyFrameSample],
        stats: &mut InterpreterStats,
    ) -> Vec<Vec<u64>>;

    /// The user stack of a sample of `info` (`native` frames, leaf first) with its sampled
    /// frames in place of the native frames that run them, and how many found no place. By
    /// default each of [`Runtime::calls`] takes the place of the next native frame in the
    /// evaluation loop.
    fn place(
        process: &mut Self::Process,
        frames: &mut FrameTable,
        info: &ProcessInfo,
        native: Vec<u64>,
        sampled: &[PyFrameSample],
        stats: &mut InterpreterStats,
    ) -> (Vec<u64>, usize) {
        let calls = Self::calls(process, frames, sampled, stats);
        place_calls(native, calls, |i, addr| {
            // A return address is one past its call instruction.
            let pc = if i == 0 { addr } else { addr.wrapping_sub(1) };
            info.in_eval_loop(pc)
        })
    }
}

/// One runtime's side of the sampling thread: per process, what the BPF program was told and
/// what the runtime read of it.
#[derive(Debug)]
pub(crate) struct Stacks<R: Runtime> {
    proc_root: PathBuf,
    frames: Arc<Mutex<FrameTable>>,
    processes: Told<R::Process>,
    stats: InterpreterStats,
}

impl<R: Runtime> Stacks<R> {
    /// Reads processes under `proc_root` (normally `/proc`) and names frames into `frames`.
    pub fn new(proc_root: impl Into<PathBuf>, frames: Arc<Mutex<FrameTable>>) -> Stacks<R> {
        Stacks {
            proc_root: proc_root.into(),
            frames,
            processes: Told::default(),
            stats: InterpreterStats::default(),
        }
    }

    /// What the BPF program must be told of `info`'s frames, when that changed since it was
    /// last told (a new read of the process): `Some(Some(config))` to read them, `Some(None)`
    /// to stop; `None` when nothing changed.
    pub fn config_update(&mut self, info: &ProcessInfo) -> Option<Option<PyConfig>> {
        let proc_root = &self.proc_root;
        self.processes
            .update(info, R::retry, |info| R::prepare(proc_root, info))
    }

    /// Whether it reads `pid`'s frames.
    pub fn reads(&self, pid: u32) -> bool {
        self.processes.reads(pid)
    }

    /// The user stack of a sample of `info` (native frames, leaf first) with its interpreted
    /// frames (`sampled`, innermost first) in the place of the native evaluation frames that
    /// run them. Frames left over (the native walk ended early, or missed an evaluation frame)
    /// go below the last evaluation frame found, or at the bottom.
    pub fn interleave(
        &mut self,
        info: &ProcessInfo,
        native: Vec<u64>,
        sampled: &[PyFrameSample],
    ) -> Vec<u64> {
        let Some(process) = self.processes.get_mut(info.pid) else {
            return native;
        };
        self.stats.stacks += 1;
        let mut frames = self.frames.lock().expect("frame table lock");
        let (out, unplaced) =
            R::place(process, &mut frames, info, native, sampled, &mut self.stats);
        self.stats.frames_held = frames.len() as u64;
        drop(frames);
        self.stats.unplaced_frames += unplaced as u64;
        out
    }

    /// Forgets processes `alive` says are gone.
    pub fn trim(&mut self, alive: impl Fn(u32) -> bool) {
        self.processes.trim(alive);
    }

    /// The counters so far.
    pub fn stats(&self) -> InterpreterStats {
        InterpreterStats {
            processes: self.processes.len() as u64,
            ..self.stats
        }
    }
}

/// For a runtime's `prepare`: where the interpreter's global `state` (a virtual address of its
/// object, whose file offset `mapping_offset` sits at `vaddr` and is mapped at `mapping_start`
/// in `info`) is in the process, and the process's memory. `None` when the object's segments do
/// not place the mapping, or the memory cannot be opened (logged, naming `runtime`).
pub(crate) fn locate_state(
    proc_root: &Path,
    info: &ProcessInfo,
    mapping_start: u64,
    vaddr: Option<u64>,
    state: u64,
    runtime: &str,
) -> Option<(u64, Memory)> {
    let state = state.checked_add(mapping_start.checked_sub(vaddr?)?)?;
    match Memory::open(proc_root, info.pid) {
        Ok(memory) => Some((state, memory)),
        Err(e) => {
            tracing::debug!(pid = info.pid, runtime, error = %e, "no interpreted frames: cannot read the process's memory");
            None
        }
    }
}

/// A runtime's processes: per process, the read of it ([`ProcessInfo::read_no`]) the BPF
/// program was told about, and the runtime's own state `P` of those whose frames are read.
#[derive(Debug)]
struct Told<P> {
    told: FxHashMap<u32, u64>,
    processes: FxHashMap<u32, P>,
    /// When processes to be prepared again were last tried, and how many times.
    tried: FxHashMap<u32, (Instant, u32)>,
}

impl<P> Default for Told<P> {
    fn default() -> Self {
        Told {
            told: FxHashMap::default(),
            processes: FxHashMap::default(),
            tried: FxHashMap::default(),
        }
    }
}

/// How long a process to be prepared again ([`Runtime::retry`]) waits before its second try;
/// each try after it waits twice as long as the one before, up to [`RETRY_INTERVAL_MAX`] (a
/// runtime that never becomes readable costs a read every few minutes, not every 2 seconds).
const RETRY_INTERVAL: Duration = Duration::from_secs(2);
const RETRY_INTERVAL_MAX: Duration = Duration::from_secs(300);

/// How long to wait after the `tries`th try.
fn retry_after(tries: u32) -> Duration {
    RETRY_INTERVAL
        .saturating_mul(1 << tries.saturating_sub(1).min(16))
        .min(RETRY_INTERVAL_MAX)
}

impl<P> Told<P> {
    /// What the BPF program must be told of `info`'s frames, when that changed since it was
    /// last told (a new read of the process): `Some(Some(config))` to read them (`prepare`
    /// recognized the process), `Some(None)` to stop; `None` when nothing changed.
    /// When `retry` says so of it, a process not recognized is tried again, less and less
    /// often ([`retry_after`]). Called for every sample: `retry` (which may look through the
    /// process's mappings) is asked only when a read of the process is not recognized.
    pub fn update(
        &mut self,
        info: &ProcessInfo,
        retry: impl FnOnce(&ProcessInfo) -> bool,
        prepare: impl FnOnce(&ProcessInfo) -> Option<(P, PyConfig)>,
    ) -> Option<Option<PyConfig>> {
        if self.told.get(&info.pid) == Some(&info.read_no) {
            // Only a process `retry` was true of (for this read) is in `tried`.
            let due = !self.processes.contains_key(&info.pid)
                && self
                    .tried
                    .get(&info.pid)
                    .is_some_and(|&(at, tries)| at.elapsed() >= retry_after(tries));
            if !due {
                return None;
            }
        }
        self.told.insert(info.pid, info.read_no);
        let had = self.processes.remove(&info.pid).is_some();
        match prepare(info) {
            Some((process, config)) => {
                self.tried.remove(&info.pid);
                self.processes.insert(info.pid, process);
                Some(Some(config))
            }
            None => {
                if retry(info) {
                    let tries = self.tried.get(&info.pid).map_or(0, |&(_, n)| n);
                    self.tried.insert(info.pid, (Instant::now(), tries + 1));
                } else {
                    self.tried.remove(&info.pid);
                }
                had.then_some(None)
            }
        }
    }

    /// The state of process `pid`, when its frames are read.
    pub fn get_mut(&mut self, pid: u32) -> Option<&mut P> {
        self.processes.get_mut(&pid)
    }

    /// Whether `pid`'s frames are read.
    pub fn reads(&self, pid: u32) -> bool {
        self.processes.contains_key(&pid)
    }

    /// Processes whose frames are read.
    pub fn len(&self) -> usize {
        self.processes.len()
    }

    /// Forgets processes `alive` says are gone.
    pub fn trim(&mut self, alive: impl Fn(u32) -> bool) {
        self.told.retain(|&pid, _| alive(pid));
        self.processes.retain(|&pid, _| alive(pid));
        self.tried.retain(|&pid, _| alive(pid));
    }
}

/// A process's memory, read where the agent needs it.
#[derive(Debug)]
pub(crate) struct Memory {
    file: File,
}

impl Memory {
    /// Opens `/proc/PID/mem` (under `proc_root`).
    pub fn open(proc_root: &Path, pid: u32) -> std::io::Result<Memory> {
        Ok(Memory {
            file: File::open(proc_root.join(pid.to_string()).join("mem"))?,
        })
    }

    /// `len` bytes at `addr`.
    pub fn bytes(&self, addr: u64, len: usize) -> Option<Vec<u8>> {
        let mut buf = vec![0u8; len];
        self.file.read_exact_at(&mut buf, addr).ok()?;
        Some(buf)
    }

    /// Fills `buf` from `addr`.
    pub fn read_into(&self, addr: u64, buf: &mut [u8]) -> Option<()> {
        self.file.read_exact_at(buf, addr).ok()
    }

    /// The `N` bytes at `addr`, read without allocating (the per-sample reads are small).
    pub fn array<const N: usize>(&self, addr: u64) -> Option<[u8; N]> {
        let mut buf = [0u8; N];
        self.read_into(addr, &mut buf)?;
        Some(buf)
    }

    pub fn u64(&self, addr: u64) -> Option<u64> {
        self.array(addr).map(u64::from_ne_bytes)
    }

    pub fn u32(&self, addr: u64) -> Option<u32> {
        self.array(addr).map(u32::from_ne_bytes)
    }

    pub fn u16(&self, addr: u64) -> Option<u16> {
        self.array(addr).map(u16::from_ne_bytes)
    }
}

/// The native stack (leaf first) with each evaluation frame (`is_eval(position, address)`)
/// replaced by the next call's interpreted frames; calls left over go below the last
/// evaluation frame replaced (or at the bottom). Returns the stack and how many frames were
/// left over.
pub(crate) fn place_calls(
    native: Vec<u64>,
    calls: Vec<Vec<u64>>,
    is_eval: impl Fn(usize, u64) -> bool,
) -> (Vec<u64>, usize) {
    let mut out = Vec::with_capacity(native.len() + calls.iter().map(Vec::len).sum::<usize>());
    let mut calls = calls.into_iter();
    let mut below_last_call = None;
    for (i, &addr) in native.iter().enumerate() {
        if is_eval(i, addr)
            && let Some(call) = calls.next()
        {
            out.extend(call);
            below_last_call = Some(out.len());
        } else {
            out.push(addr);
        }
    }
    let rest: Vec<u64> = calls.flatten().collect();
    let unplaced = rest.len();
    let at = below_last_call.unwrap_or(out.len());
    out.splice(at..at, rest);
    (out, unplaced)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_wait_longer_each_time_up_to_a_bound() {
        assert_eq!(retry_after(1), Duration::from_secs(2));
        assert_eq!(retry_after(2), Duration::from_secs(4));
        assert_eq!(retry_after(5), Duration::from_secs(32));
        assert_eq!(retry_after(9), RETRY_INTERVAL_MAX);
        assert_eq!(retry_after(u32::MAX), RETRY_INTERVAL_MAX);
    }

    /// The table's frames for `key`, the table its own owner.
    fn get(
        named: &mut NamedFrames<u32>,
        key: u32,
        stats: &mut InterpreterStats,
        name: impl FnOnce(&mut InterpreterStats) -> Vec<u64>,
    ) -> Arc<[u64]> {
        NamedFrames::in_owner(named, |table| table, key, stats, |_, stats| name(stats))
    }

    #[test]
    fn named_frames_are_kept_unless_unreadable_bounded_and_renamed() {
        let mut stats = InterpreterStats::default();
        let mut named = NamedFrames::new(2, None);
        let mut reads = 0;
        let name = |frames: Vec<u64>, unreadable: bool| {
            move |stats: &mut InterpreterStats| {
                stats.frames += frames.len() as u64;
                stats.unreadable_frames += u64::from(unreadable);
                frames
            }
        };
        // Named once, then answered from the table (and counted each time).
        assert_eq!(
            &*get(&mut named, 1, &mut stats, name(vec![10, 11], false)),
            [10, 11]
        );
        assert_eq!(
            &*get(&mut named, 1, &mut stats, |_| {
                reads += 1;
                vec![]
            }),
            [10, 11]
        );
        assert_eq!((reads, stats.frames), (0, 4));
        // What could not be read is read again.
        get(&mut named, 2, &mut stats, name(vec![20], true));
        assert_eq!(
            &*get(&mut named, 2, &mut stats, name(vec![21], false)),
            [21]
        );
        // Full at two: the third empties the table first.
        get(&mut named, 3, &mut stats, name(vec![30], false));
        assert_eq!(
            &*get(&mut named, 1, &mut stats, name(vec![12], false)),
            [12]
        );
        // Trusted only as long as asked.
        let mut renamed = NamedFrames::new(8, Some(Duration::ZERO));
        get(&mut renamed, 1, &mut stats, name(vec![10], false));
        assert_eq!(
            &*get(&mut renamed, 1, &mut stats, name(vec![13], false)),
            [13]
        );
    }

    #[test]
    fn frame_addresses_are_no_code_addresses() {
        assert_eq!(frame_id(frame_address(7)), Some(7));
        assert_eq!(frame_id(frame_address(u32::MAX)), Some(u32::MAX));
        assert_eq!(frame_id(0x7fff_1234_5678), None);
        assert_eq!(frame_id(0xffff_ffff_8100_0000), None);
    }

    #[test]
    fn the_frame_table_is_bounded() {
        let mut table = FrameTable::default();
        let a = table.intern("f", "a.py", 3);
        assert_eq!(table.intern("f", "a.py", 3), a);
        assert_ne!(table.intern("f", "a.py", 4), a);
        assert_eq!(table.get(a).unwrap().file.as_deref(), Some("a.py"));
        for i in 0..MAX_FRAMES {
            table.intern("g", "b.py", i as u32);
        }
        let full = table.intern("h", "c.py", 1);
        assert_eq!(table.get(full).unwrap().function, TABLE_FULL);
        assert_eq!(table.len(), MAX_FRAMES + 1);
    }

    #[test]
    fn calls_take_the_place_of_evaluation_frames_and_leftovers_go_below_the_last() {
        const EVAL: u64 = 0xe0;
        let is_eval = |_: usize, addr: u64| addr == EVAL;
        // native: leaf (a C function), eval, a C caller, eval, main.
        let native = vec![0x10, EVAL, 0x20, EVAL, 0x30];
        let (out, unplaced) = place_calls(native.clone(), vec![vec![1, 2], vec![3]], is_eval);
        assert_eq!((out, unplaced), (vec![0x10, 1, 2, 0x20, 3, 0x30], 0));
        // More calls than evaluation frames: the rest below the last one replaced.
        let (out, unplaced) =
            place_calls(native.clone(), vec![vec![1], vec![2], vec![3, 4]], is_eval);
        assert_eq!((out, unplaced), (vec![0x10, 1, 0x20, 2, 3, 4, 0x30], 2));
        // Fewer: the evaluation frame without interpreted frames stays.
        let (out, _) = place_calls(native.clone(), vec![vec![1]], is_eval);
        assert_eq!(out, vec![0x10, 1, 0x20, EVAL, 0x30]);
        // None found (a native walk cut short): the interpreted frames at the bottom.
        let (out, unplaced) = place_calls(vec![0x10, 0x20], vec![vec![1, 2]], is_eval);
        assert_eq!((out, unplaced), (vec![0x10, 0x20, 1, 2], 2));
    }
}
