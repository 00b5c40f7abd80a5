//! The CPU sampler: `setitimer(ITIMER_PROF)` sends `SIGPROF` to the thread running when each
//! period of process CPU time ends; the handler records that thread's stack in a slot of a
//! fixed ring, which the profiling thread drains into counts per stack.
//!
//! The handler allocates nothing and takes no lock: it claims a slot with a compare-and-swap
//! (a sample finding its slot still full is counted as lost, never waited for), walks the
//! stack with the unwinder (`_Unwind_Backtrace`, which glibc's `_dl_find_object` makes safe in
//! a signal handler), and marks the slot full. The walk starts at the interrupted instruction
//! (read from the signal's context), so the handler's own frames and the kernel's signal
//! trampoline never appear.

use std::cell::UnsafeCell;
use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};

use parca_pprof::{ProfileBuilder, proto};

use crate::{Error, symbols};

/// Samples per second of CPU time; a prime, so that sampling does not beat with periodic work.
pub const FREQUENCY_HZ: u32 = 97;

/// Slots in the ring: at 97 Hz on a few busy CPUs and a drain every [`DRAIN_EVERY`], a handful
/// are full at a time.
const SLOTS: usize = 256;

/// Frames kept per sample, leaf first; deeper stacks lose their outermost frames.
const MAX_DEPTH: usize = 128;

/// How often the profiling thread empties the ring.
const DRAIN_EVERY: Duration = Duration::from_millis(50);

const EMPTY: u8 = 0;
const WRITING: u8 = 1;
const FULL: u8 = 2;

/// One sample in flight from the handler to the profiling thread.
struct Slot {
    /// [`EMPTY`], [`WRITING`] (a handler owns it) or [`FULL`] (the drain owns it).
    state: AtomicU8,
    tid: AtomicU32,
    depth: AtomicUsize,
    /// Instruction addresses: the interrupted one, then return addresses.
    frames: UnsafeCell<[usize; MAX_DEPTH]>,
}

// SAFETY: `frames` is written only by the handler that moved `state` from EMPTY to WRITING and
// read only by the drain after it saw FULL (Acquire), which the writer set (Release) when done.
unsafe impl Sync for Slot {}

impl Slot {
    const fn new() -> Slot {
        Slot {
            state: AtomicU8::new(EMPTY),
            tid: AtomicU32::new(0),
            depth: AtomicUsize::new(0),
            frames: UnsafeCell::new([0; MAX_DEPTH]),
        }
    }
}

static RING: [Slot; SLOTS] = [const { Slot::new() }; SLOTS];
/// The slot the next sample tries (modulo [`SLOTS`]).
static NEXT: AtomicUsize = AtomicUsize::new(0);
/// Samples lost because their slot was still full.
static LOST: AtomicU64 = AtomicU64::new(0);
/// Whether the handler records; the handler stays installed between profiles, so that a
/// `SIGPROF` arriving after the timer stops is ignored rather than fatal.
static RECORDING: AtomicBool = AtomicBool::new(false);
/// Held while a profile is taken.
static PROFILING: Mutex<()> = Mutex::new(());

/// Samples this process's CPU for `window` and returns the profile (symbolized; sample types
/// `samples/count` and `cpu/nanoseconds`, a `thread` label with each thread's name). One
/// profile at a time: [`Error::Busy`] otherwise.
pub fn cpu_profile(window: Duration) -> Result<proto::Profile, Error> {
    let _profiling = match PROFILING.try_lock() {
        Ok(guard) => guard,
        Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
        Err(std::sync::TryLockError::WouldBlock) => return Err(Error::Busy),
    };
    install_handler()?;
    let mut counts = Counts::default();
    // Whatever a handler left behind after the last profile stopped is not this profile's.
    drain(&mut Counts::default());
    let lost_before = LOST.load(Ordering::Relaxed);
    let start = SystemTime::now();
    RECORDING.store(true, Ordering::Release);
    if let Err(e) = set_timer(Duration::from_secs(1) / FREQUENCY_HZ) {
        RECORDING.store(false, Ordering::Release);
        return Err(e);
    }
    let deadline = Instant::now() + window;
    loop {
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        std::thread::sleep(DRAIN_EVERY.min(deadline - now));
        drain(&mut counts);
    }
    let stopped = set_timer(Duration::ZERO);
    RECORDING.store(false, Ordering::Release);
    drain(&mut counts);
    stopped?;
    let lost = LOST.load(Ordering::Relaxed) - lost_before;
    if lost > 0 {
        tracing::debug!(lost, "CPU self-profile: samples lost to a full ring");
    }
    Ok(to_pprof(&counts, start, window))
}

/// Counts per (thread id, stack).
type Counts = HashMap<(u32, Box<[usize]>), u64>;

/// Moves every full slot's sample into `counts` and frees the slot.
fn drain(counts: &mut Counts) {
    for slot in &RING {
        if slot.state.load(Ordering::Acquire) != FULL {
            continue;
        }
        let depth = slot.depth.load(Ordering::Relaxed).min(MAX_DEPTH);
        // SAFETY: FULL: no handler writes this slot until it is EMPTY again (see `Slot`).
        let stack: Box<[usize]> = unsafe { (&(*slot.frames.get()))[..depth].into() };
        let tid = slot.tid.load(Ordering::Relaxed);
        slot.state.store(EMPTY, Ordering::Release);
        if !stack.is_empty() {
            *counts.entry((tid, stack)).or_default() += 1;
        }
    }
}

/// The pprof of `counts`: addresses in mappings read from `/proc/self/maps`, named by
/// [`symbols::symbolize`]. Callers' addresses are return addresses less one, so that each
/// names its call instruction, as pprof readers expect.
fn to_pprof(counts: &Counts, start: SystemTime, window: Duration) -> proto::Profile {
    let period_ns = 1_000_000_000 / i64::from(FREQUENCY_HZ);
    let mut maps = symbols::Mappings::of_this_process();
    let mut b = ProfileBuilder::new();
    let samples = b.value_type("samples", "count");
    let cpu = b.value_type("cpu", "nanoseconds");
    let thread_key = b.string("thread");
    let mut mapping_ids: HashMap<usize, u64> = HashMap::new();
    let mut thread_names: HashMap<u32, i64> = HashMap::new();
    for ((tid, stack), &count) in counts {
        let location_id = stack
            .iter()
            .enumerate()
            .map(|(depth, &ip)| {
                let address = if depth == 0 { ip } else { ip.saturating_sub(1) } as u64;
                let mapping_id = match maps.find(address) {
                    Some(i) => match mapping_ids.get(&i) {
                        Some(&id) => id,
                        None => {
                            let mapping = maps.pprof_mapping(i, &mut b);
                            let id = b.add_mapping(mapping);
                            mapping_ids.insert(i, id);
                            id
                        }
                    },
                    None => 0,
                };
                b.location(mapping_id, address, &[])
            })
            .collect();
        let name = *thread_names.entry(*tid).or_insert_with(|| {
            let name = thread_name(*tid);
            b.string(&name)
        });
        let count = count as i64;
        b.sample(
            location_id,
            vec![count, count * period_ns],
            vec![proto::Label {
                key: thread_key,
                str: name,
                ..Default::default()
            }],
        );
    }
    let profile = proto::Profile {
        sample_type: vec![samples, cpu],
        time_nanos: start
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as i64),
        duration_nanos: window.as_nanos() as i64,
        period_type: Some(cpu),
        period: period_ns,
        ..b.finish()
    };
    symbols::symbolize(profile)
}

/// The name of thread `tid` of this process, or its id when it has ended.
fn thread_name(tid: u32) -> String {
    std::fs::read_to_string(format!("/proc/self/task/{tid}/comm"))
        .map(|name| name.trim_end().to_owned())
        .unwrap_or_else(|_| format!("thread {tid}"))
}

fn install_handler() -> Result<(), Error> {
    static INSTALLED: std::sync::OnceLock<Result<(), std::io::ErrorKind>> =
        std::sync::OnceLock::new();
    let installed = INSTALLED.get_or_init(|| {
        // SAFETY: a zeroed sigaction is valid; the handler is async-signal-safe (see the
        // module's docs) and stays installed for the life of the process.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_sigprof as *const () as usize;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            if libc::sigaction(libc::SIGPROF, &action, std::ptr::null_mut()) != 0 {
                return Err(std::io::Error::last_os_error().kind());
            }
        }
        Ok(())
    });
    installed.map_err(|kind| Error::Timer(kind.into()))
}

/// Arms the process CPU-time timer with `period` (zero: disarms it).
fn set_timer(period: Duration) -> Result<(), Error> {
    let interval = libc::timeval {
        tv_sec: period.as_secs() as libc::time_t,
        tv_usec: period.subsec_micros() as libc::suseconds_t,
    };
    let timer = libc::itimerval {
        it_interval: interval,
        it_value: interval,
    };
    // SAFETY: `timer` is a valid itimerval; the old value is not asked for.
    if unsafe { libc::setitimer(libc::ITIMER_PROF, &timer, std::ptr::null_mut()) } != 0 {
        return Err(Error::Timer(std::io::Error::last_os_error()));
    }
    Ok(())
}

extern "C" fn on_sigprof(
    _signal: libc::c_int,
    _info: *mut libc::siginfo_t,
    context: *mut libc::c_void,
) {
    if !RECORDING.load(Ordering::Acquire) {
        return;
    }
    // SAFETY: errno is this thread's; the interrupted code must find it as it left it.
    let errno = unsafe { *libc::__errno_location() };
    record(interrupted_pc(context));
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

/// Records the running thread's stack, from `pc` outwards, in a free slot.
fn record(pc: Option<usize>) {
    let slot = &RING[NEXT.fetch_add(1, Ordering::Relaxed) % SLOTS];
    if slot
        .state
        .compare_exchange(EMPTY, WRITING, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        LOST.fetch_add(1, Ordering::Relaxed);
        return;
    }
    // SAFETY: WRITING makes this handler the slot's only user (see `Slot`).
    let frames = unsafe { &mut *slot.frames.get() };
    let mut depth = 0;
    let mut reached = pc.is_none();
    // SAFETY: the unwinder is not re-entered: SIGPROF is blocked while its handler runs.
    unsafe {
        backtrace::trace_unsynchronized(|frame| {
            let ip = frame.ip() as usize;
            // The outermost frame (a thread's start) returns nowhere.
            if ip == 0 {
                return false;
            }
            // Frames before the interrupted one are this handler's and the signal trampoline.
            if !reached {
                reached = Some(ip) == pc;
                if !reached {
                    return true;
                }
            }
            frames[depth] = ip;
            depth += 1;
            depth < MAX_DEPTH
        });
    }
    if !reached && let Some(pc) = pc {
        // The unwinder did not get past the signal frame: the leaf alone is still right.
        frames[0] = pc;
        depth = 1;
    }
    // SAFETY: gettid has no preconditions.
    slot.tid
        .store(unsafe { libc::gettid() } as u32, Ordering::Relaxed);
    slot.depth.store(depth, Ordering::Relaxed);
    slot.state.store(FULL, Ordering::Release);
}

/// The instruction the signal interrupted, from the handler's context argument.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
fn interrupted_pc(context: *mut libc::c_void) -> Option<usize> {
    let context = context.cast::<libc::ucontext_t>();
    // SAFETY: the kernel passes a valid ucontext_t to an SA_SIGINFO handler.
    (!context.is_null())
        .then(|| unsafe { (*context).uc_mcontext.gregs[libc::REG_RIP as usize] } as usize)
}

/// The instruction the signal interrupted, from the handler's context argument.
#[cfg(all(target_os = "linux", target_arch = "aarch64"))]
fn interrupted_pc(context: *mut libc::c_void) -> Option<usize> {
    let context = context.cast::<libc::ucontext_t>();
    // SAFETY: the kernel passes a valid ucontext_t to an SA_SIGINFO handler.
    (!context.is_null()).then(|| unsafe { (*context).uc_mcontext.pc } as usize)
}

/// Elsewhere the whole walk is kept, the handler's frames included.
#[cfg(not(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
)))]
fn interrupted_pc(_context: *mut libc::c_void) -> Option<usize> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Burns CPU in a function of its own, so samples can be checked by name, until `stop`.
    #[inline(never)]
    fn spin_for_selfprof_test(stop: &std::sync::atomic::AtomicBool) -> u64 {
        let mut x = 1u64;
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            for _ in 0..10_000 {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
        }
        x
    }

    #[test]
    fn samples_name_the_busy_function_and_not_the_profiler() {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let spinner_stop = stop.clone();
        let worker = std::thread::Builder::new()
            .name("spinner".into())
            .spawn(move || spin_for_selfprof_test(&spinner_stop))
            .unwrap();
        // The samples of the spinner thread: the process's other threads (the other tests of
        // this binary run beside this one) are sampled too and are not this test's business.
        let spinner_samples = |profile: &proto::Profile| -> i64 {
            profile
                .sample
                .iter()
                .filter(|s| {
                    s.label
                        .first()
                        .is_some_and(|l| profile.string_table[l.str as usize] == "spinner")
                })
                .map(|s| s.value[0])
                .sum()
        };
        // Samples count this process's CPU time: on a busy machine a 2 s window of the spinner
        // may hold fewer, so windows are taken again (at most six) until one has 100.
        let mut windows = 0;
        let profile = loop {
            match cpu_profile(Duration::from_secs(2)) {
                // `one_profile_at_a_time` may hold the profiler for a moment.
                Err(Error::Busy) => std::thread::sleep(Duration::from_millis(10)),
                other => {
                    let profile = other.unwrap();
                    windows += 1;
                    if spinner_samples(&profile) >= 100 || windows == 6 {
                        break profile;
                    }
                }
            }
        };
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        worker.join().unwrap();
        let strings = &profile.string_table;
        let name_of = |function_id: u64| {
            let f = &profile.function[function_id as usize - 1];
            strings[f.name as usize].as_str()
        };
        let total = spinner_samples(&profile);
        assert!(
            total >= 100,
            "{total} samples of the spinner in the last of {windows} 2 s windows of a busy thread"
        );
        let (mut in_spin, mut leaf_is_profiler) = (0, 0);
        for sample in &profile.sample {
            let names: Vec<&str> = sample
                .location_id
                .iter()
                .flat_map(|&id| &profile.location[id as usize - 1].line)
                .map(|l| name_of(l.function_id))
                .collect();
            if names.iter().any(|n| n.ends_with("spin_for_selfprof_test")) {
                in_spin += sample.value[0];
                let thread = &sample.label[0];
                assert_eq!(strings[thread.str as usize], "spinner");
            }
            if names.first().is_some_and(|n| {
                n.contains("on_sigprof")
                    || n.contains("trace_unsynchronized")
                    || n.contains("__restore_rt")
            }) {
                leaf_is_profiler += sample.value[0];
            }
        }
        assert!(
            in_spin * 10 >= total * 8,
            "{in_spin} of the spinner thread's {total} samples in its spinning function"
        );
        assert_eq!(leaf_is_profiler, 0);
        // The full path of the function, with its file and line.
        let spin = profile
            .function
            .iter()
            .find(|f| strings[f.name as usize].ends_with("spin_for_selfprof_test"))
            .unwrap();
        assert_eq!(
            strings[spin.name as usize],
            "parca_selfprof::sampler::tests::spin_for_selfprof_test"
        );
        assert!(strings[spin.filename as usize].ends_with("sampler.rs"));
    }

    #[test]
    fn one_profile_at_a_time() {
        let _held = PROFILING.lock().unwrap();
        assert!(matches!(
            cpu_profile(Duration::from_millis(10)),
            Err(Error::Busy)
        ));
    }
}
