//! The sampling thread: owns the [`Sampler`], drains it at each window's end and whenever a
//! profile request starts or ends, and hands the samples to the window and to every request
//! in progress.
//!
//! A request for `seconds=N` subscribes (which drains first, so that earlier samples are not
//! its own), waits N seconds, and finishes (which drains again): it gets exactly the samples
//! taken in between, whatever the window length.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use rustc_hash::FxHashMap;
use tokio::sync::oneshot;

use crate::Error;
use crate::bpf::{DrainedStack, ProcEvents, PyConfig, RingRecord, Sampler, sample_poll_interval};
use crate::interp::FrameTable;
use crate::metrics::Metrics;
use crate::process::{ProcessInfo, ProcessTable};
use crate::profile::RawProfile;
use crate::runtimes::Interpreters;
use crate::unwind::{REREAD_MAPS_AFTER, Unwinder};

/// How many windows a process is kept after its last sample.
const KEEP_PROCESS_WINDOWS: u64 = 3;

/// What the HTTP side asks of the sampling thread.
pub(crate) enum Command {
    /// Start collecting for a request; replies with its id.
    Subscribe(oneshot::Sender<u64>),
    /// End a request and take its samples.
    Finish(u64, oneshot::Sender<RawProfile>),
    /// Drop a request (its client went away).
    Cancel(u64),
    /// New processes were announced and read (`Shared::announced`): tell the program now,
    /// rather than at the next poll.
    Announced,
    /// Unwind tables were compiled: load them now, rather than at the next poll, so that the
    /// processes waiting for them are walked whole again at once.
    TablesCompiled,
    /// Stop sampling: the thread returns, dropping (so detaching) the BPF programs.
    Stop,
}

/// State shared by the sampling thread and the async side.
pub(crate) struct Shared {
    pub processes: Mutex<ProcessTable>,
    pub events: Arc<tokio::io::unix::AsyncFd<ProcEvents>>,
    pub metrics: Metrics,
    /// The window counter, which `ProcessTable` uses to expire processes.
    pub window: std::sync::atomic::AtomicU64,
    /// Which processes are profiled.
    pub filter: crate::ProcessFilter,
    /// The interpreted (Python, PHP) frames named so far (user stacks hold their ids:
    /// `interp::frame_address`).
    pub interpreted_frames: Arc<Mutex<FrameTable>>,
    /// Processes announced (and read) since the sampling thread last looked: it tells the BPF
    /// program their mappings.
    pub announced: Mutex<Vec<u32>>,
    /// The probability that a switch-out is recorded (`--off-cpu-threshold`; 0: off). Off-CPU
    /// time is divided by it, so that totals estimate all of the time off CPU.
    pub off_cpu_threshold: f64,
}

/// What the ring buffer gave since the last drain.
#[derive(Default)]
struct Pending {
    /// Stacks unwound, to be counted at the next drain.
    stacks: Vec<DrainedStack>,
    /// Off-CPU intervals started and not ended yet, by thread.
    open_off_cpu: OpenOffCpu,
}

/// Most off-CPU intervals held open at once (the BPF side's `MAX_OFF_CPU_THREADS`): a thread
/// that never runs again (its end evicted from the BPF map) must not hold memory for ever.
const MAX_OPEN_OFF_CPU: usize = 65536;

/// Off-CPU intervals whose start (with the stack) has arrived and whose end has not.
#[derive(Default)]
struct OpenOffCpu {
    by_thread: FxHashMap<u32, (u64, DrainedStack)>,
    /// Starts so far: orders the entries, oldest first, for eviction.
    started: u64,
}

impl OpenOffCpu {
    /// Thread `tid` left the CPU with `stack`; a start not ended before is dropped (its end was
    /// lost).
    fn start(&mut self, tid: u32, stack: DrainedStack) {
        if self.by_thread.len() >= MAX_OPEN_OFF_CPU {
            // The older half goes: they are the likeliest to have lost their end.
            let mut ages: Vec<u64> = self.by_thread.values().map(|(at, _)| *at).collect();
            let median = *ages.select_nth_unstable(MAX_OPEN_OFF_CPU / 2).1;
            self.by_thread.retain(|_, (at, _)| *at >= median);
        }
        self.started += 1;
        self.by_thread.insert(tid, (self.started, stack));
    }

    /// Thread `tid` runs again: its interval's stack.
    fn end(&mut self, tid: u32) -> Option<DrainedStack> {
        self.by_thread.remove(&tid).map(|(_, stack)| stack)
    }
}

/// The off-CPU time a recorded interval of `nanos` stands for when each is recorded with
/// probability `threshold`: `nanos / threshold`, an unbiased estimate of the total.
fn off_cpu_estimate(nanos: u64, threshold: f64) -> u64 {
    if threshold >= 1.0 || threshold <= 0.0 {
        nanos
    } else {
        (nanos as f64 / threshold).round() as u64
    }
}

/// Runs until [`Command::Stop`] (or every command sender is gone). Finished windows go to
/// `windows` (dropped when the receiver lags: the next one has the news). `wake` sends to
/// `commands` (the unwind tables' threads say when a table is done).
pub(crate) fn run(
    sampler: Sampler,
    commands: Receiver<Command>,
    wake: Sender<Command>,
    shared: Arc<Shared>,
    window_length: Duration,
    windows: tokio::sync::mpsc::Sender<RawProfile>,
) -> Result<(), Error> {
    let poll_interval = sample_poll_interval(shared.off_cpu_threshold > 0.0);
    let mut collector = Collector {
        window: RawProfile::new(SystemTime::now()),
        deadline: Instant::now() + window_length,
        requests: FxHashMap::default(),
        next_id: 0,
        unwinder: Unwinder::new(sampler.table_chunks(), move || {
            wake.send(Command::TablesCompiled).ok();
        }),
        interpreters: Interpreters::new("/proc", shared.interpreted_frames.clone()),
        pending: Pending::default(),
        sampler,
        shared,
        window_length,
        windows,
    };
    loop {
        // The window ends first, however busy the channel is.
        if Instant::now() >= collector.deadline {
            collector.end_window()?;
        }
        let timeout = collector
            .deadline
            .saturating_duration_since(Instant::now())
            .min(poll_interval);
        match commands.recv_timeout(timeout) {
            Ok(Command::Subscribe(reply)) => collector.subscribe(reply)?,
            Ok(Command::Finish(id, reply)) => collector.finish(id, reply)?,
            Ok(Command::Cancel(id)) => {
                collector.requests.remove(&id);
                collector.count_requests();
            }
            Ok(Command::Announced) => collector.read_samples(),
            Ok(Command::TablesCompiled) => {
                let Collector {
                    unwinder, sampler, ..
                } = &mut collector;
                unwinder.load_compiled(sampler);
            }
            // At the deadline the window's end, above, reads them.
            Err(RecvTimeoutError::Timeout) => {
                if Instant::now() < collector.deadline {
                    collector.read_samples();
                }
            }
            Ok(Command::Stop) | Err(RecvTimeoutError::Disconnected) => return Ok(()),
        }
    }
}

/// The sampling thread's state: the sampler and what it has gathered for the window and for
/// each request in progress.
struct Collector {
    sampler: Sampler,
    shared: Arc<Shared>,
    unwinder: Unwinder,
    interpreters: Interpreters,
    /// What the ring buffer gave since the last drain.
    pending: Pending,
    /// The window being gathered, and when it ends.
    window: RawProfile,
    deadline: Instant,
    window_length: Duration,
    /// Where finished windows go.
    windows: tokio::sync::mpsc::Sender<RawProfile>,
    /// Requests in progress, by id.
    requests: FxHashMap<u64, RawProfile>,
    next_id: u64,
}

impl Collector {
    /// Empties the ring buffer of walked samples into `pending`, and tells the program the
    /// mappings (and loads the unwind tables) of processes new or changed.
    #[expect(
        clippy::too_many_lines,
        reason = "one pass over the ring buffer, telling the program new processes before their next samples"
    )]
    fn read_samples(&mut self) {
        let Collector {
            sampler,
            shared,
            unwinder,
            interpreters,
            pending,
            ..
        } = self;
        let window_no = shared.window.load(Relaxed);
        // Announcements first: a new process is read, and told, before its next samples.
        let events = shared.events.get_ref().read();
        let mut table = shared.processes.lock().expect("process table lock");
        shared
            .metrics
            .process_events
            .fetch_add(events.len() as u64, Relaxed);
        let mut to_tell: FxHashMap<u32, Arc<ProcessInfo>> = FxHashMap::default();
        for event in &events {
            table.announce(event.pid, &event.comm, window_no);
        }
        // Where CPython processes keep their frames, once the ring buffer (which borrows the
        // sampler) is read: new ones from their announcement, before their first sample.
        let mut py_configs: Vec<(u32, Option<PyConfig>)> = Vec::new();
        let announced = std::mem::take(&mut *shared.announced.lock().expect("announced lock"));
        for pid in announced.into_iter().chain(events.iter().map(|e| e.pid)) {
            let info = table.get(pid, window_no);
            if !info.readable || !shared.filter.admits(&info) {
                continue;
            }
            if let Some(config) = interpreters.config_update(&info) {
                py_configs.push((pid, config));
            }
            if unwinder.needs_telling(&info) {
                to_tell.insert(pid, info);
            }
        }
        sampler.read_samples(|record| {
            let sample = match record {
                RingRecord::Sample(sample) => sample,
                RingRecord::OffCpuEnd { tid, nanos, .. } => {
                    if let Some(mut stack) = pending.open_off_cpu.end(tid) {
                        stack.count = off_cpu_estimate(nanos, shared.off_cpu_threshold);
                        pending.stacks.push(stack);
                    }
                    return;
                }
            };
            let mut info = table.get(sample.pid, window_no);
            if !shared.filter.admits(&info) {
                shared.metrics.filtered_samples.fetch_add(1, Relaxed);
                return;
            }
            if sample.unknown_address
                && let Some(reread) = table.reread(sample.pid, window_no, REREAD_MAPS_AFTER)
            {
                shared.metrics.maps_rereads.fetch_add(1, Relaxed);
                info = reread;
            }
            if sample.table_missing || unwinder.needs_telling(&info) {
                to_tell.insert(sample.pid, info.clone());
            }
            unwinder.sampled(sample.pid);
            if sample.kernel_walked {
                // Judged at the drain (`Unwinder::check_kernel_walk`); no interpreter frames.
                pending.stacks.push(DrainedStack {
                    pid: sample.pid,
                    user: Arc::from(sample.user),
                    kernel: Arc::from(sample.kernel),
                    count: sample.value,
                    off_cpu: None,
                    end: None,
                });
                return;
            }
            unwinder.count(sample.end);
            if let Some(config) = interpreters.config_update(&info) {
                py_configs.push((sample.pid, config));
            }
            let frames =
                if sample.python.is_empty() && !interpreters.names_native_frames(sample.pid) {
                    sample.user
                } else {
                    interpreters.interleave(&info, sample.user, &sample.python)
                };
            let stack = DrainedStack {
                pid: sample.pid,
                user: Arc::from(frames),
                kernel: Arc::from(sample.kernel),
                count: sample.value,
                off_cpu: sample.off_cpu,
                end: Some(sample.end),
            };
            match sample.off_cpu {
                None => pending.stacks.push(stack),
                // Counted when it ends, with the time it was off.
                Some(_) => pending.open_off_cpu.start(sample.tid, stack),
            }
        });
        drop(table);
        unwinder.load_compiled(sampler);
        for info in to_tell.values() {
            if let Err(e) = unwinder.tell(sampler, info) {
                // Its samples go on, walked by frame pointers in the kernel.
                tracing::debug!(pid = info.pid, error = %e, "cannot tell the program a process");
            }
        }
        for (pid, config) in py_configs {
            if let Err(e) = sampler.set_python(pid, config.as_ref()) {
                // Its samples go on, without Python frames.
                tracing::debug!(pid, error = %e, "cannot update the Python frames map");
            }
        }
        shared
            .metrics
            .record_unwind(unwinder.stats(), interpreters.stats());
    }

    /// Takes every sample so far (the BPF program's counts and the ring buffer's stacks) into
    /// the window and every request in progress.
    fn drain(&mut self) -> Result<(), Error> {
        let started = Instant::now();
        let mut drained = self.sampler.drain()?;
        // After the switch: every sample taken before it is in the ring buffer by now.
        self.read_samples();
        drained.append(&mut self.pending.stacks);
        let shared = &self.shared;
        let window_no = shared.window.load(Relaxed);
        let mut processes: FxHashMap<u32, Arc<ProcessInfo>> = FxHashMap::default();
        {
            let mut table = shared.processes.lock().expect("process table lock");
            for d in &drained {
                processes
                    .entry(d.pid)
                    .or_insert_with(|| table.get(d.pid, window_no));
            }
        }
        // User stacks the kernel walked by frame pointers (the program was not told their
        // process yet, or the ring buffer was full) say so, cut where the walk cannot be
        // trusted.
        for d in drained
            .iter_mut()
            .filter(|d| d.end.is_none() && !d.user.is_empty())
        {
            let (keep, end) = self.unwinder.check_kernel_walk(&d.user, &processes[&d.pid]);
            if keep < d.user.len() {
                d.user = Arc::from(&d.user[..keep]);
            }
            d.end = Some(end);
            self.unwinder.count(end);
        }
        if !shared.filter.admits_all() {
            let mut left_out = 0;
            drained.retain(|d| {
                let keep = shared.filter.admits(&processes[&d.pid]);
                if !keep {
                    left_out += d.count;
                }
                keep
            });
            shared.metrics.filtered_samples.fetch_add(left_out, Relaxed);
        }
        self.window.add(&drained, &processes);
        for request in self.requests.values_mut() {
            request.add(&drained, &processes);
        }
        shared.metrics.record_drain(
            started.elapsed(),
            drained.len(),
            self.sampler.stats().unwrap_or_default(),
        );
        Ok(())
    }

    /// Ends the window: drains, sends it on, expires the processes gone quiet and the unwind
    /// tables and interpreter state of processes gone, and sets the next deadline.
    fn end_window(&mut self) -> Result<(), Error> {
        self.drain()?;
        let now = SystemTime::now();
        let mut done = std::mem::replace(&mut self.window, RawProfile::new(now));
        done.end = now;
        let shared = &self.shared;
        let window_no = shared.window.fetch_add(1, Relaxed) + 1;
        shared
            .processes
            .lock()
            .expect("process table lock")
            .expire(window_no, KEEP_PROCESS_WINDOWS);
        {
            let table = shared.processes.lock().expect("process table lock");
            self.unwinder
                .trim(&mut self.sampler, |pid| table.contains(pid));
            self.interpreters.trim(|pid| table.contains(pid));
        }
        shared.metrics.record_window(&done);
        self.windows.try_send(done).ok();
        self.deadline += self.window_length;
        if self.deadline < Instant::now() {
            self.deadline = Instant::now() + self.window_length;
        }
        Ok(())
    }

    /// Starts a request (after a drain, so that earlier samples are not its own) and replies
    /// with its id.
    fn subscribe(&mut self, reply: oneshot::Sender<u64>) -> Result<(), Error> {
        self.drain()?;
        self.next_id += 1;
        let id = self.next_id;
        self.requests.insert(id, RawProfile::new(SystemTime::now()));
        // A client gone before it got its id can never finish or cancel: drop it now.
        if reply.send(id).is_err() {
            self.requests.remove(&id);
        }
        self.count_requests();
        Ok(())
    }

    /// Publishes how many requests are open ([`Metrics::profile_requests_open`]).
    fn count_requests(&self) {
        (self.shared.metrics.profile_requests_open).store(self.requests.len() as u64, Relaxed);
    }

    /// Ends request `id` (after a drain) and sends its samples.
    fn finish(&mut self, id: u64, reply: oneshot::Sender<RawProfile>) -> Result<(), Error> {
        self.drain()?;
        if let Some(mut raw) = self.requests.remove(&id) {
            raw.end = SystemTime::now();
            reply.send(raw).ok();
        }
        self.count_requests();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sampled_off_cpu_time_is_scaled_to_an_estimate_of_all_of_it() {
        assert_eq!(off_cpu_estimate(10_000_000, 1.0), 10_000_000);
        assert_eq!(off_cpu_estimate(10_000_000, 0.25), 40_000_000);
        // Off: nothing is recorded, but a value is left as it is.
        assert_eq!(off_cpu_estimate(7, 0.0), 7);
    }
}
