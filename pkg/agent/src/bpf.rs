//! The BPF side: loads `ebpf/profiler.bpf.o` with aya, attaches it, drains its maps.
//!
//! This is the only module that sees aya. The ABI it mirrors is in `ebpf/profiler.bpf.c`:
//! [`CountKey`], the [`Stat`] indices and the process event layout must match it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use aya::maps::{Array, HashMap, MapData, PerCpuArray, RingBuf, StackTraceMap};
use aya::programs::perf_event::{PerfEventConfig, PerfEventScope, SamplePolicy, SoftwareEvent};
use aya::programs::{PerfEvent, RawTracePoint};
use aya::{Ebpf, EbpfLoader};
use parca_symbolize::unwind::StackEnd;
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
    CopyLost = 7,
    Copied = 8,
    FpWalked = 9,
    FpFallback = 10,
    PyWalked = 11,
    PyCut = 12,
}

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
    /// Samples sent with a copy of their user stack (unwound in userspace).
    pub stacks_copied: u64,
    /// Samples whose stack copy did not fit in the ring buffer: counted with frame pointers.
    pub copies_lost: u64,
    /// Samples sent with their user stack walked by frame pointers (the fast path).
    pub fp_walked: u64,
    /// Frame-pointer walks that left the process's frame-pointer code: sent as copies.
    pub fp_fallbacks: u64,
    /// Samples of Python threads sent with their Python frames.
    pub python_walks: u64,
    /// Of which the Python frame chain was cut (too deep, or a frame unreadable).
    pub python_walks_cut: u64,
}

/// `struct stack_sample`'s header: pid, tid, kernel_len, stack_len, user_len, walk_end,
/// py_len, py_end (u32 each), then ip, sp, bp (u64 each), then 127 kernel frames; the user
/// stack follows.
const SAMPLE_KERNEL_AT: usize = 56;
const SAMPLE_STACK_AT: usize = SAMPLE_KERNEL_AT + 127 * 8;

/// Most frame-pointer code ranges of one process the BPF program takes (`MAX_FP_RANGES`).
pub(crate) const MAX_FP_RANGES: usize = 16;

/// Value of the `fp_code` map: `struct fp_code`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct FpCode {
    n: u32,
    pad: u32,
    start: [u64; MAX_FP_RANGES],
    end: [u64; MAX_FP_RANGES],
}

// SAFETY: `FpCode` is `repr(C)`: two u32 then two arrays of u64, no padding (8 + 2 × 128
// bytes), and every bit pattern is a valid value.
unsafe impl aya::Pod for FpCode {}

/// `PY_WINDOW_BYTES`: most bytes of a Python frame the program reads
/// ([`PyConfig::window_len`]); an offset of it stands for "no such field".
pub(crate) const PY_WINDOW_BYTES: u32 = 128;
/// `PY_NO_CFRAME`: [`PyConfig::cframe_frame`] of versions whose thread state points at the
/// frame itself.
pub(crate) const PY_NO_CFRAME: u32 = u32::MAX;

/// Value of the `py_configs` map (`struct py_config`): where the program finds a CPython
/// process's frames. Built by `python::bpf_config`, which says what each field is.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
    pub instr_is_pointer: u32,
    pub code_bytecode: u32,
    pub code_argcount: u32,
    pub code_firstlineno: u32,
    pub pad: u32,
}

// SAFETY: `PyConfig` is `repr(C)`: a u64 then fourteen u32 (64 bytes, no padding), and every
// bit pattern is a valid value.
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
}

/// `sizeof(struct py_frame)`.
const PY_FRAME_BYTES: usize = 24;

/// A user stack the BPF program walked by frame pointers.
#[derive(Debug)]
pub(crate) struct Walked {
    /// Return addresses, innermost first (the sampled `ip` is not among them).
    pub return_addresses: Vec<u64>,
    /// How the walk ended: [`StackEnd::Complete`] or [`StackEnd::DepthLimit`].
    pub end: StackEnd,
}

/// One sample sent with its user stack (`struct stack_sample`), borrowed from the ring buffer:
/// walked by frame pointers in the BPF program, or copied for userspace to unwind.
#[derive(Debug)]
pub(crate) struct CopiedSample<'a> {
    pub pid: u32,
    pub ip: u64,
    pub sp: u64,
    pub bp: u64,
    /// Kernel frames, leaf first.
    pub kernel: Vec<u64>,
    /// The frame-pointer walk, when the stack was walked rather than copied.
    pub walked: Option<Walked>,
    /// The thread's Python frames, innermost first (none unless it runs CPython).
    pub python: Vec<PyFrameSample>,
    /// The stack from `sp` up: all that was copied, or for a walked stack its top (enough to
    /// check the leaf's frame).
    pub stack: &'a [u8],
}

/// Decodes one `struct stack_sample`; `None` when it is truncated or malformed.
pub(crate) fn parse_sample(bytes: &[u8]) -> Option<CopiedSample<'_>> {
    let u32_at = |at: usize| -> Option<u32> {
        Some(u32::from_ne_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
    };
    let u64_at = |at: usize| -> Option<u64> {
        Some(u64::from_ne_bytes(bytes.get(at..at + 8)?.try_into().ok()?))
    };
    let kernel_len = (u32_at(8)? as usize).min(127 * 8);
    let stack_len = u32_at(12)? as usize;
    let user_len = u32_at(16)? as usize;
    let py_len = u32_at(24)? as usize;
    let kernel = (0..kernel_len / 8)
        .map(|i| u64_at(SAMPLE_KERNEL_AT + 8 * i))
        .collect::<Option<Vec<u64>>>()?;
    let sent = bytes.get(SAMPLE_STACK_AT..SAMPLE_STACK_AT.checked_add(stack_len)?)?;
    // `enum walk_end`: 0 not walked, 1 complete, 2 cut at the depth limit.
    let walked = match u32_at(20)? {
        0 => None,
        end @ (1 | 2) => Some(Walked {
            return_addresses: sent
                .get(..user_len)?
                .chunks_exact(8)
                .map(|c| u64::from_ne_bytes(c.try_into().expect("8 bytes")))
                .collect(),
            end: if end == 1 {
                StackEnd::Complete
            } else {
                StackEnd::DepthLimit
            },
        }),
        _ => return None,
    };
    let return_addresses = if walked.is_some() { user_len } else { 0 };
    let python = sent
        .get(return_addresses..return_addresses.checked_add(py_len)?)?
        .chunks_exact(PY_FRAME_BYTES)
        .map(|f| PyFrameSample {
            code: u64::from_ne_bytes(f[0..8].try_into().expect("8 bytes")),
            fingerprint: u64::from_ne_bytes(f[8..16].try_into().expect("8 bytes")),
            index: i32::from_ne_bytes(f[16..20].try_into().expect("4 bytes")),
            marker: u32::from_ne_bytes(f[20..24].try_into().expect("4 bytes")),
        })
        .collect();
    let stack = sent.get(return_addresses + py_len..)?;
    Some(CopiedSample {
        pid: u32_at(0)?,
        ip: u64_at(32)?,
        sp: u64_at(40)?,
        bp: u64_at(48)?,
        kernel,
        walked,
        python,
        stack,
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
    stats: PerCpuArray<MapData, u64>,
    samples: RingBuf<MapData>,
    fp_code: HashMap<MapData, u32, FpCode>,
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
    pub fn start(frequency_hz: u64) -> Result<(Sampler, ProcEvents), Error> {
        // `scratch` holds one stack copy per possible CPU (indexed by CPU number).
        let n_possible = aya::util::nr_cpus().map_err(|(path, source)| Error::OnlineCpus {
            path: path.into(),
            source,
        })?;
        let mut ebpf = EbpfLoader::new()
            .map_max_entries("scratch", n_possible as u32)
            .map_max_entries(
                "stack_samples",
                stack_samples_bytes(n_possible, frequency_hz),
            )
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
        for (name, event) in [
            ("on_exec", "sched_process_exec"),
            ("on_exit", "sched_process_exit"),
        ] {
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
        let fp_code =
            HashMap::try_from(take_map(&mut ebpf, "fp_code")?).map_err(map_error("fp_code"))?;
        let py_configs = HashMap::try_from(take_map(&mut ebpf, "py_configs")?)
            .map_err(map_error("py_configs"))?;
        Ok((
            Sampler {
                half,
                counts,
                stacks,
                stats,
                samples,
                fp_code,
                py_configs,
                current: 0,
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
    /// was writing. Samples taken meanwhile go to the new half: none is lost.
    pub fn drain(&mut self) -> Result<Vec<DrainedStack>, Error> {
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

    /// Hands every stack copy waiting in the ring buffer to `f`, in the order they were taken;
    /// returns how many there were.
    pub fn read_copies(&mut self, mut f: impl FnMut(CopiedSample<'_>)) -> usize {
        let mut n = 0;
        while let Some(item) = self.samples.next() {
            if let Some(sample) = parse_sample(&item) {
                f(sample);
                n += 1;
            }
        }
        n
    }

    /// Tells the program that all executable code of process `pid` keeps frame pointers, in
    /// `ranges` (at most [`MAX_FP_RANGES`]): its stacks are then walked by them in the
    /// program. `None` takes that back (the process's code changed, or a walk was found wrong).
    pub fn set_fp_code(&mut self, pid: u32, ranges: Option<&[(u64, u64)]>) -> Result<(), Error> {
        let Some(ranges) = ranges.filter(|r| !r.is_empty() && r.len() <= MAX_FP_RANGES) else {
            // Absent already is fine.
            self.fp_code.remove(&pid).ok();
            return Ok(());
        };
        let mut code = FpCode {
            n: ranges.len() as u32,
            pad: 0,
            start: [0; MAX_FP_RANGES],
            end: [0; MAX_FP_RANGES],
        };
        for (i, &(start, end)) in ranges.iter().enumerate() {
            code.start[i] = start;
            code.end[i] = end;
        }
        self.fp_code
            .insert(pid, code, 0)
            .map_err(map_error("fp_code"))
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
        let read = |stat: Stat| -> Result<u64, Error> {
            let values = self
                .stats
                .get(&(stat as u32), 0)
                .map_err(map_error("stats"))?;
            Ok(values.iter().sum())
        };
        Ok(BpfStats {
            samples: read(Stat::Samples)?,
            idle: read(Stat::Idle)?,
            stack_collisions: read(Stat::StackCollision)?,
            stack_errors: read(Stat::StackError)?,
            user_stack_unreadable: read(Stat::UserUnreadable)?,
            counts_full: read(Stat::CountsFull)?,
            events_lost: read(Stat::EventsLost)?,
            stacks_copied: read(Stat::Copied)?,
            copies_lost: read(Stat::CopyLost)?,
            fp_walked: read(Stat::FpWalked)?,
            fp_fallbacks: read(Stat::FpFallback)?,
            python_walks: read(Stat::PyWalked)?,
            python_walks_cut: read(Stat::PyCut)?,
        })
    }
}

/// Size of the ring buffer of stack copies: four times what `n_cpus` at `frequency_hz` send
/// between two reads of it (`collector::COPY_POLL_INTERVAL`, 100 ms) when every copy is full
/// (about 33 KiB), as a power of two from 8 to 64 MiB: the sampling thread competes for the CPUs
/// it samples, and on busy ones copies were lost from 2 and 4 MiB buffers.
/// Mapped into the agent, it counts in its RSS twice (the kernel maps the data pages twice), so
/// it is not made larger than needed. A copy that does not fit is counted with frame-pointer
/// stacks instead (`parca_agent_stack_copies_lost_total`).
fn stack_samples_bytes(n_cpus: usize, frequency_hz: u64) -> u32 {
    let per_poll = n_cpus as u64 * frequency_hz * (SAMPLE_STACK_AT as u64 + 32 * 1024) / 10;
    (4 * per_poll).clamp(8 << 20, 64 << 20).next_power_of_two() as u32
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

    #[test]
    fn sample_layout_matches_the_c_struct() {
        let mut bytes = vec![0u8; SAMPLE_STACK_AT + 24];
        bytes[0..4].copy_from_slice(&7u32.to_ne_bytes());
        bytes[8..12].copy_from_slice(&16u32.to_ne_bytes());
        bytes[12..16].copy_from_slice(&24u32.to_ne_bytes());
        bytes[32..40].copy_from_slice(&0x401000u64.to_ne_bytes());
        bytes[40..48].copy_from_slice(&0x7ff0u64.to_ne_bytes());
        bytes[48..56].copy_from_slice(&0x7ff8u64.to_ne_bytes());
        bytes[56..64].copy_from_slice(&0xffff_ffff_8100_0000u64.to_ne_bytes());
        let s = parse_sample(&bytes).unwrap();
        assert_eq!((s.pid, s.ip, s.sp, s.bp), (7, 0x401000, 0x7ff0, 0x7ff8));
        assert_eq!(s.kernel.len(), 2);
        assert_eq!(s.kernel[0], 0xffff_ffff_8100_0000);
        assert_eq!(s.stack.len(), 24);
        assert!(s.walked.is_none());
        assert!(parse_sample(&bytes[..SAMPLE_STACK_AT + 8]).is_none());
        // Walked: two return addresses, then 8 bytes of the stack's top; cut at the limit.
        bytes[16..20].copy_from_slice(&16u32.to_ne_bytes());
        bytes[20..24].copy_from_slice(&2u32.to_ne_bytes());
        bytes[SAMPLE_STACK_AT..SAMPLE_STACK_AT + 8].copy_from_slice(&0x401234u64.to_ne_bytes());
        let s = parse_sample(&bytes).unwrap();
        let walked = s.walked.unwrap();
        assert_eq!(walked.return_addresses[0], 0x401234);
        assert_eq!(walked.return_addresses.len(), 2);
        assert_eq!(walked.end, StackEnd::DepthLimit);
        assert_eq!(s.stack.len(), 8);
        // An unknown walk end is refused.
        bytes[20..24].copy_from_slice(&9u32.to_ne_bytes());
        assert!(parse_sample(&bytes).is_none());
    }

    #[test]
    fn python_frames_sit_between_the_return_addresses_and_the_stack() {
        // Walked (one return address), one Python frame, 8 bytes of stack.
        let mut bytes = vec![0u8; SAMPLE_STACK_AT + 8 + PY_FRAME_BYTES + 8];
        bytes[12..16].copy_from_slice(&((8 + PY_FRAME_BYTES + 8) as u32).to_ne_bytes());
        bytes[16..20].copy_from_slice(&8u32.to_ne_bytes());
        bytes[20..24].copy_from_slice(&1u32.to_ne_bytes());
        bytes[24..28].copy_from_slice(&(PY_FRAME_BYTES as u32).to_ne_bytes());
        let at = SAMPLE_STACK_AT + 8;
        bytes[at..at + 8].copy_from_slice(&0x7f00_1000u64.to_ne_bytes());
        bytes[at + 8..at + 16].copy_from_slice(&0xfeedu64.to_ne_bytes());
        bytes[at + 16..at + 20].copy_from_slice(&(-1i32).to_ne_bytes());
        bytes[at + 20..at + 24].copy_from_slice(&3u32.to_ne_bytes());
        bytes[at + 24..at + 32].copy_from_slice(&0x5555u64.to_ne_bytes());
        let s = parse_sample(&bytes).unwrap();
        assert_eq!(
            s.python,
            [PyFrameSample {
                code: 0x7f00_1000,
                fingerprint: 0xfeed,
                index: -1,
                marker: 3
            }]
        );
        assert_eq!(s.walked.unwrap().return_addresses.len(), 1);
        assert_eq!(s.stack, 0x5555u64.to_ne_bytes());
    }

    #[test]
    fn py_config_matches_the_c_struct() {
        assert_eq!(std::mem::size_of::<PyConfig>(), 64);
    }

    #[test]
    fn the_ring_buffer_grows_with_cpus_and_frequency() {
        assert_eq!(stack_samples_bytes(2, 19), 8 << 20);
        assert_eq!(stack_samples_bytes(2, 99), 8 << 20);
        assert_eq!(stack_samples_bytes(64, 19), 16 << 20);
        assert_eq!(stack_samples_bytes(1024, 10_000), 64 << 20);
    }

    #[test]
    fn count_key_is_twelve_bytes() {
        assert_eq!(std::mem::size_of::<CountKey>(), 12);
    }

    #[test]
    fn fp_code_matches_the_c_struct() {
        assert_eq!(std::mem::size_of::<FpCode>(), 8 + 2 * 8 * MAX_FP_RANGES);
    }
}
