//! The sampling thread: owns the [`Sampler`], drains it at each window's end and whenever a
//! profile request starts or ends, and hands the samples to the window and to every request
//! in progress.
//!
//! A request for `seconds=N` subscribes (which drains first, so that earlier samples are not
//! its own), waits N seconds, and finishes (which drains again): it gets exactly the samples
//! taken in between, whatever the window length.

use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use rustc_hash::FxHashMap;
use tokio::sync::oneshot;

use crate::Error;
use crate::bpf::{DrainedStack, ProcEvents, PyConfig, Sampler};
use crate::metrics::Metrics;
use crate::process::{ProcessInfo, ProcessTable};
use crate::profile::RawProfile;
use crate::python::{FrameTable, PythonStacks};
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
    /// The Python frames named so far (user stacks hold their ids: `python::frame_address`).
    pub python_frames: Arc<Mutex<FrameTable>>,
    /// Processes announced (and read) since the sampling thread last looked: it tells the BPF
    /// program their mappings.
    pub announced: Mutex<Vec<u32>>,
}

/// How often the ring buffer of walked samples is emptied (it is sized for four times what
/// arrives meanwhile: `bpf::stack_samples_bytes`), and new processes told to the program.
pub(crate) const SAMPLE_POLL_INTERVAL: Duration = Duration::from_millis(100);

/// Runs until every command sender is gone. Finished windows go to `windows` (dropped when
/// the receiver lags: the next one has the news).
pub(crate) fn run(
    mut sampler: Sampler,
    commands: Receiver<Command>,
    shared: Arc<Shared>,
    window_length: Duration,
    windows: tokio::sync::mpsc::Sender<RawProfile>,
) -> Result<(), Error> {
    use std::sync::atomic::Ordering::Relaxed;

    let mut window = RawProfile::new(SystemTime::now());
    let mut deadline = Instant::now() + window_length;
    let mut requests: FxHashMap<u64, RawProfile> = FxHashMap::default();
    let mut next_id = 0u64;
    let mut unwinder = Unwinder::new(sampler.table_chunks());
    let mut python = PythonStacks::new("/proc", shared.python_frames.clone());
    // Stacks unwound since the last drain.
    let mut pending: Vec<DrainedStack> = Vec::new();

    // Empties the ring buffer of walked samples into `pending`, and tells the program the
    // mappings (and loads the unwind tables) of processes new or changed.
    let read_samples = |sampler: &mut Sampler,
                        unwinder: &mut Unwinder,
                        python: &mut PythonStacks,
                        pending: &mut Vec<DrainedStack>| {
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
        let announced = std::mem::take(&mut *shared.announced.lock().expect("announced lock"));
        for pid in announced.into_iter().chain(events.iter().map(|e| e.pid)) {
            let info = table.get(pid, window_no);
            if info.readable && shared.filter.admits(&info) && unwinder.needs_telling(&info) {
                to_tell.insert(pid, info);
            }
        }
        // Where CPython processes keep their frames, once the ring buffer (which borrows the
        // sampler) is read.
        let mut py_configs: Vec<(u32, Option<PyConfig>)> = Vec::new();
        sampler.read_samples(|sample| {
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
            unwinder.count(sample.end);
            if let Some(config) = python.config_update(&info) {
                py_configs.push((sample.pid, config));
            }
            let frames = if sample.python.is_empty() {
                sample.user
            } else {
                python.interleave(&info, sample.user, &sample.python)
            };
            pending.push(DrainedStack {
                pid: sample.pid,
                user: Arc::from(frames),
                kernel: Arc::from(sample.kernel),
                count: 1,
                end: Some(sample.end),
            });
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
            .record_unwind(unwinder.stats(), python.stats());
    };

    let drain = |sampler: &mut Sampler,
                 unwinder: &mut Unwinder,
                 python: &mut PythonStacks,
                 pending: &mut Vec<DrainedStack>,
                 window: &mut RawProfile,
                 requests: &mut FxHashMap<u64, RawProfile>|
     -> Result<(), Error> {
        let started = Instant::now();
        let mut drained = sampler.drain()?;
        // After the switch: every sample taken before it is in the ring buffer by now.
        read_samples(sampler, unwinder, python, pending);
        drained.append(pending);
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
            let (keep, end) = unwinder.check_kernel_walk(&d.user, &processes[&d.pid]);
            if keep < d.user.len() {
                d.user = Arc::from(&d.user[..keep]);
            }
            d.end = Some(end);
            unwinder.count(end);
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
        window.add(&drained, &processes);
        for request in requests.values_mut() {
            request.add(&drained, &processes);
        }
        shared.metrics.record_drain(
            started.elapsed(),
            drained.len(),
            sampler.stats().unwrap_or_default(),
        );
        Ok(())
    };

    loop {
        let now = Instant::now();
        let timeout = deadline
            .saturating_duration_since(now)
            .min(SAMPLE_POLL_INTERVAL);
        match commands.recv_timeout(timeout) {
            Ok(Command::Subscribe(reply)) => {
                drain(
                    &mut sampler,
                    &mut unwinder,
                    &mut python,
                    &mut pending,
                    &mut window,
                    &mut requests,
                )?;
                next_id += 1;
                requests.insert(next_id, RawProfile::new(SystemTime::now()));
                // A client gone before it got its id can never finish or cancel: drop it now.
                if reply.send(next_id).is_err() {
                    requests.remove(&next_id);
                }
            }
            Ok(Command::Finish(id, reply)) => {
                drain(
                    &mut sampler,
                    &mut unwinder,
                    &mut python,
                    &mut pending,
                    &mut window,
                    &mut requests,
                )?;
                if let Some(mut raw) = requests.remove(&id) {
                    raw.end = SystemTime::now();
                    reply.send(raw).ok();
                }
            }
            Ok(Command::Cancel(id)) => {
                requests.remove(&id);
            }
            Err(RecvTimeoutError::Timeout) if Instant::now() < deadline => {
                read_samples(&mut sampler, &mut unwinder, &mut python, &mut pending);
            }
            Err(RecvTimeoutError::Timeout) => {
                drain(
                    &mut sampler,
                    &mut unwinder,
                    &mut python,
                    &mut pending,
                    &mut window,
                    &mut requests,
                )?;
                let now = SystemTime::now();
                let mut done = std::mem::replace(&mut window, RawProfile::new(now));
                done.end = now;
                let window_no = shared.window.fetch_add(1, Relaxed) + 1;
                shared
                    .processes
                    .lock()
                    .expect("process table lock")
                    .expire(window_no, KEEP_PROCESS_WINDOWS);
                {
                    let table = shared.processes.lock().expect("process table lock");
                    unwinder.trim(&mut sampler, |pid| table.contains(pid));
                    python.trim(|pid| table.contains(pid));
                }
                shared.metrics.record_window(&done);
                windows.try_send(done).ok();
                deadline += window_length;
                if deadline < Instant::now() {
                    deadline = Instant::now() + window_length;
                }
            }
            Ok(Command::Stop) | Err(RecvTimeoutError::Disconnected) => return Ok(()),
        }
    }
}
