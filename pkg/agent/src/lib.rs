//! The eBPF agent's runtime: whole-node CPU sampling with a BPF program, symbolized and served
//! as pprof.
//!
//! [`run`] checks privileges and BTF, loads `ebpf/profiler.bpf.o` with aya and attaches it to a
//! `cpu-clock` perf event on every online CPU ([`Config::frequency_hz`]), then:
//!
//! - a sampling thread (`collector.rs`) switches the BPF program between two sets of maps and
//!   drains the idle set at every window's end ([`Config::profiling_duration`]) and whenever a
//!   profile request starts or ends, so no sample is lost while it reads;
//! - new processes announced by the program (a ring buffer) are read from `/proc/PID` at once
//!   (`process.rs`: mappings with build ids, `comm`, executable, cgroup → `systemd_unit` or
//!   container id), so short-lived ones keep their labels and symbols;
//! - the HTTP server (`http.rs`) serves `GET /debug/pprof/profile?seconds=N[&pid=|&comm=]`
//!   Go-style (gzipped pprof, built by `profile.rs` and symbolized by `parca_symbolize`), with
//!   [`Config::off_cpu_threshold`] above 0 also `GET /debug/pprof/off_cpu?seconds=N` (time off
//!   CPU, `off_cpu`/`nanoseconds`, per stack and `off_cpu_reason`), `/`, `/metrics` and
//!   `/healthy`;
//! - with [`Config::remote_store_address`] every window is pushed to a server's
//!   `POST /api/v1/write` (`push.rs`).
//!
//! The profile type is `parca_agent:samples:count:cpu:nanoseconds:delta`: sample type
//! samples/count, period type cpu/nanoseconds with period 1e9/frequency, one sample per
//! (process, stack) with string labels `pid`, `comm`, `executable`, `systemd_unit`,
//! `container_id` and `node` where known.
//!
//! # Design constraints
//!
//! - Only `bpf.rs` sees aya; `unsafe` is limited to aya's `Pod` marker there, to polling
//!   aya's ring buffer with tokio (`AsyncFd::register_with_interest` in [`run`]) and to
//!   glibc's allocator knobs (`malloc_trim`, `mallopt`).
//! - Nothing is pinned: the programs and links live as file descriptors of this process, so they
//!   are gone when it exits, however it exits.
//! - The BPF side does no symbolization and no string work; userspace drains maps at most once
//!   per window plus once per request boundary, and symbolizes only when a profile is built,
//!   with results cached per build id and address.
//! - A frame that cannot be symbolized keeps its mapping and address.
//!
//! # Example
//!
//! ```no_run
//! # async fn example() -> Result<(), parca_agent_runtime::Error> {
//! let config = parca_agent_runtime::Config::default();
//! // Samples for a minute; needs root (or CAP_BPF and CAP_PERFMON) and a kernel with BTF.
//! parca_agent_runtime::run(config, tokio::time::sleep(std::time::Duration::from_secs(60))).await?;
//! # Ok(())
//! # }
//! ```

mod bpf;
mod collector;
mod debuginfod;
mod error;
mod hotspot;
mod http;
mod interp;
mod metrics;
mod perfmap;
mod php;
mod privileges;
mod process;
mod profile;
mod push;
mod python;
mod ruby;
mod runtimes;
mod unwind;
mod v8;

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use parca_symbolize::{Options, Symbolizer};
use tokio::io::unix::AsyncFd;
use tokio::net::TcpListener;

pub use bpf::BpfStats;
pub use debuginfod::{Debuginfod, DebuginfodConfig};
pub use error::Error;
pub use privileges::{check_btf, check_capabilities, effective_capabilities, limitations};
pub use process::{MappedObject, Mapping, ProcessFilter, ProcessInfo, ProcessTable};
pub use profile::{Filter, OFF_CPU_PROFILE_NAME, PROFILE_NAME};
pub use push::RemoteStore;

/// How the agent runs (the binary's flags).
#[derive(Debug, Clone)]
pub struct Config {
    /// Samples per second per CPU (`--profiling-cpu-sampling-frequency`, default 19).
    pub frequency_hz: u64,
    /// Length of a window (`--profiling-duration`, default 10 s): how often the maps are
    /// drained when nobody asks, and what is pushed each time.
    pub profiling_duration: Duration,
    /// Where the HTTP server listens (`--http-address`, default `:7071`).
    pub http_address: SocketAddr,
    /// A server to push every window to, and how (`--remote-store-*`).
    pub remote_store: Option<RemoteStore>,
    /// The `node` label (`--node`, default the host name).
    pub node: String,
    /// Labels added to every sample (`--metadata-external-labels`), e.g. `region`, `cluster`.
    pub external_labels: Vec<(String, String)>,
    /// Which processes are profiled (`--systemd-units`, `--sampling-ratio`).
    pub process_filter: ProcessFilter,
    /// TLS and credentials of the agent's own HTTP port (`--web-config-file`).
    pub security: Arc<parca_webconfig::Security>,
    /// Where the kernel's BTF is (`/sys/kernel/btf/vmlinux`).
    pub btf_path: PathBuf,
    /// Directories searched for separate debug files (`/usr/lib/debug`): by build id
    /// (`.build-id/ab/cdef….debug`) and by `.gnu_debuglink`.
    pub debug_dirs: Vec<PathBuf>,
    /// debuginfod servers asked for the debug files of stripped objects not found locally
    /// (`--debuginfod-urls`, else `DEBUGINFOD_URLS`); empty: none.
    pub debuginfod_urls: Vec<String>,
    /// Where fetched debug files are kept, by build id.
    pub debuginfod_cache_dir: PathBuf,
    /// Bytes the debuginfod cache may hold.
    pub debuginfod_cache_max_bytes: u64,
    /// Where objects' DWARF is kept decompressed, by build id, to be mapped rather than held
    /// in memory (`--dwarf-cache-dir`).
    pub dwarf_cache_dir: PathBuf,
    /// Bytes the DWARF cache may hold (`--dwarf-cache-max-bytes`); 0: no cache, DWARF is
    /// copied into memory within the symbolizer's budget.
    pub dwarf_cache_max_bytes: u64,
    /// Kernel memory the unwind tables may take (`--unwind-tables-max-bytes`, default 64 MiB):
    /// past it, the least recently used objects' tables are evicted.
    pub unwind_tables_max_bytes: u64,
    /// The probability (0 to 1) that a thread's switch-out is recorded as off-CPU time
    /// (`--off-cpu-threshold`, as Parca Agent names it); 0, the default, turns off-CPU
    /// profiling off and attaches nothing to the scheduler.
    pub off_cpu_threshold: f64,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            frequency_hz: 19,
            profiling_duration: Duration::from_secs(10),
            http_address: SocketAddr::from(([0, 0, 0, 0], 7071)),
            remote_store: None,
            node: hostname(),
            external_labels: Vec::new(),
            process_filter: ProcessFilter::default(),
            security: Arc::new(parca_webconfig::Security::open()),
            btf_path: PathBuf::from("/sys/kernel/btf/vmlinux"),
            debug_dirs: vec![PathBuf::from("/usr/lib/debug")],
            debuginfod_urls: DebuginfodConfig::urls_from_env(),
            debuginfod_cache_dir: PathBuf::from("/var/cache/parca-agent/debuginfod"),
            debuginfod_cache_max_bytes: 2 << 30,
            dwarf_cache_dir: PathBuf::from("/var/cache/parca-agent/dwarf"),
            dwarf_cache_max_bytes: 2 << 30,
            unwind_tables_max_bytes: unwind::DEFAULT_TABLE_BYTES,
            off_cpu_threshold: 0.0,
        }
    }
}

/// The smallest budget for unwind tables: a C library's table takes about 0.5 MiB.
const MIN_TABLE_BYTES: u64 = 1 << 20;

/// Labels every sample may carry already; external labels may not take these names.
const RESERVED_LABELS: &[&str] = &[
    "pid",
    "comm",
    "executable",
    "systemd_unit",
    "container_id",
    "node",
    "__name__",
];

/// This machine's host name (`/proc/sys/kernel/hostname`), empty when unreadable.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

impl Config {
    fn validate(&self) -> Result<(), Error> {
        // perf_event_max_sample_rate caps frequencies (100 kHz by default, lowered under load).
        if self.unwind_tables_max_bytes < MIN_TABLE_BYTES {
            return Err(Error::Config(format!(
                "--unwind-tables-max-bytes must be at least {MIN_TABLE_BYTES} (1 MiB), got {}",
                self.unwind_tables_max_bytes
            )));
        }
        if !(1..=10_000).contains(&self.frequency_hz) {
            return Err(Error::Config(format!(
                "--profiling-cpu-sampling-frequency must be from 1 to 10000 Hz, got {}",
                self.frequency_hz
            )));
        }
        if !(self.process_filter.sampling_ratio > 0.0 && self.process_filter.sampling_ratio <= 1.0)
        {
            return Err(Error::Config(format!(
                "--sampling-ratio must be more than 0 and at most 1, got {}",
                self.process_filter.sampling_ratio
            )));
        }
        for (name, _) in &self.external_labels {
            if RESERVED_LABELS.contains(&name.as_str()) {
                return Err(Error::Config(format!(
                    "--metadata-external-labels: `{name}` is a label the agent sets itself \
                     ({}); pick another name",
                    RESERVED_LABELS.join(", ")
                )));
            }
        }
        if !(0.0..=1.0).contains(&self.off_cpu_threshold) {
            return Err(Error::Config(format!(
                "--off-cpu-threshold is the probability that a switch-out is recorded, from 0 \
                 (off) to 1 (every one), got {}",
                self.off_cpu_threshold
            )));
        }
        if self.profiling_duration < Duration::from_secs(1) {
            return Err(Error::Config(format!(
                "--profiling-duration must be at least 1s, got {:?}",
                self.profiling_duration
            )));
        }
        Ok(())
    }
}

/// Holds glibc's allocator to two arenas. By default each thread that allocates may get an arena
/// of its own (up to eight per CPU), and memory freed in one is not reused by the others: the
/// agent's threads (sampling, table compiles, symbolization, HTTP) allocate in bursts, and
/// arenas kept their peaks, adding tens of MB to its RSS (`documentation/agent.md`, Cost).
fn limit_malloc_arenas() {
    // SAFETY: mallopt sets an allocator parameter; it takes no pointer and is thread-safe.
    let ok = unsafe { libc::mallopt(libc::M_ARENA_MAX, 2) };
    if ok != 1 {
        tracing::debug!("mallopt(M_ARENA_MAX) refused; the allocator keeps its default");
    }
}

/// Runs the agent until `shutdown` completes or sampling fails. Refuses at once, saying why,
/// without the capabilities or without kernel BTF. Everything attached is detached before it
/// returns (and by the kernel if the process dies).
#[expect(
    clippy::too_many_lines,
    reason = "the agent's life in order: start, serve, wait, then stop everything in reverse"
)]
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> Result<(), Error> {
    check_host(&config)?;
    let pusher = config
        .remote_store
        .as_ref()
        .map(push::Pusher::new)
        .transpose()?;
    if let Some(pusher) = &pusher {
        tracing::info!(url = pusher.url(), "pushing every window");
    }
    let listener = TcpListener::bind(config.http_address)
        .await
        .map_err(|source| Error::Listen {
            address: config.http_address,
            source,
        })?;
    let local = listener.local_addr().unwrap_or(config.http_address);

    let Sampling {
        shared,
        commands,
        window_rx,
        done_rx,
        thread: sampler_thread,
        n_cpus,
    } = start_sampling(&config, local)?;
    let window_length = config.profiling_duration;
    let events = tokio::spawn(watch_new_processes(shared.clone(), commands.clone()));

    let build_options = build_options(&config, &shared)?;
    let state = Arc::new(http::HttpState {
        shared: shared.clone(),
        commands: Mutex::new(commands.clone()),
        symbolizer: kernel_symbolizer(),
        symbolizer_stats: Mutex::default(),
        build: build_options.clone(),
        last_window: Mutex::new(None),
        n_cpus,
        frequency_hz: config.frequency_hz,
        window_length,
        requests: Default::default(),
    });

    // Finished windows: shown at `/`, pushed when asked (through a queue that outlasts the
    // server's outages: `push.rs`).
    let (push_tx, push_rx) = tokio::sync::mpsc::unbounded_channel::<push::Push>();
    let push_task = pusher.map(|pusher| {
        let shared = shared.clone();
        tokio::spawn(async move { pusher.run(push_rx, &shared.metrics).await })
    });
    let push_tx = push_task.is_some().then_some(push_tx);
    let windows = tokio::spawn(take_windows(
        window_rx,
        state.clone(),
        build_options,
        push_tx,
    ));

    let (stop_http, http_stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(http::serve(
        listener,
        state,
        config.security.clone(),
        async {
            http_stopped.await.ok();
        },
    ));

    let result = tokio::select! {
        () = shutdown => Ok(()),
        result = done_rx => match result {
            Ok(Ok(())) => Ok(()),
            Ok(Err(error)) => Err(error),
            Err(_) => Err(Error::Stopped("the sampling thread panicked".into())),
        },
    };
    stop_http.send(()).ok();
    server.await.ok();
    events.abort();
    commands.send(collector::Command::Stop).ok();
    // Joining detaches everything: the thread owns the sampler, and drops it on return.
    tokio::task::spawn_blocking(move || sampler_thread.join().ok())
        .await
        .ok();
    windows.abort();
    if let Some(task) = push_task {
        task.abort();
    }
    tracing::info!("stopped; BPF programs detached");
    result
}

/// The sampling side, started: the BPF programs attached and the sampling thread running.
struct Sampling {
    shared: Arc<collector::Shared>,
    /// Commands to the sampling thread.
    commands: std::sync::mpsc::Sender<collector::Command>,
    /// Its finished windows.
    window_rx: tokio::sync::mpsc::Receiver<profile::RawProfile>,
    /// Its result, when it stops.
    done_rx: tokio::sync::oneshot::Receiver<Result<(), Error>>,
    thread: std::thread::JoinHandle<()>,
    n_cpus: usize,
}

/// Attaches the BPF programs and starts the sampling thread (`collector::run`), which owns
/// them from then on.
fn start_sampling(config: &Config, local: std::net::SocketAddr) -> Result<Sampling, Error> {
    let (sampler, events) = bpf::Sampler::start(
        config.frequency_hz,
        config.unwind_tables_max_bytes,
        config.off_cpu_threshold,
    )?;
    // SAFETY: `ProcEvents` returns the descriptor of the ring buffer it owns (aya's `MapData`
    // holds it as an `OwnedFd`), which stays open and the same for as long as the `AsyncFd`
    // owns the `ProcEvents`; aya's docs poll ring buffers exactly this way.
    let events = unsafe { AsyncFd::register_with_interest(events, tokio::io::Interest::READABLE) }
        .map_err(|e| Error::Stopped(format!("cannot poll the process ring buffer: {e}")))?;
    let n_cpus = sampler.n_cpus();
    tracing::info!(
        cpus = n_cpus,
        frequency_hz = config.frequency_hz,
        window = ?config.profiling_duration,
        address = %local,
        "sampling"
    );
    let shared = Arc::new(collector::Shared {
        processes: Mutex::new(
            ProcessTable::new("/proc").with_debug_dirs(config.debug_dirs.clone()),
        ),
        events: Arc::new(events),
        metrics: metrics::Metrics::default(),
        window: Default::default(),
        filter: config.process_filter.clone(),
        interpreted_frames: Default::default(),
        announced: Default::default(),
        off_cpu_threshold: config.off_cpu_threshold,
    });
    let (commands, command_rx) = std::sync::mpsc::channel();
    let (window_tx, window_rx) = tokio::sync::mpsc::channel::<profile::RawProfile>(2);
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    let thread_shared = shared.clone();
    let wake = commands.clone();
    let window_length = config.profiling_duration;
    let thread = std::thread::Builder::new()
        .name("sampler".into())
        .spawn(move || {
            let result = collector::run(
                sampler,
                command_rx,
                wake,
                thread_shared,
                window_length,
                window_tx,
            );
            done_tx.send(result).ok();
        })
        .map_err(|e| Error::Stopped(format!("cannot start the sampling thread: {e}")))?;
    Ok(Sampling {
        shared,
        commands,
        window_rx,
        done_rx,
        thread,
        n_cpus,
    })
}

/// The checks before anything is attached: the configuration, the capabilities and kernel
/// BTF (refused at once, saying why); what the host's limits leave out is logged.
fn check_host(config: &Config) -> Result<(), Error> {
    config.validate()?;
    let caps = effective_capabilities();
    check_capabilities(caps)?;
    check_btf(&config.btf_path)?;
    for limitation in limitations(caps) {
        tracing::warn!("{limitation}");
    }
    limit_malloc_arenas();
    Ok(())
}

/// The symbolizer, with the kernel's symbols read (without them kernel frames stay
/// addresses).
fn kernel_symbolizer() -> Arc<Mutex<Symbolizer>> {
    let mut symbolizer = Symbolizer::new(Options::default());
    match symbolizer.load_kallsyms() {
        Ok(n) => tracing::debug!(symbols = n, "read kallsyms"),
        Err(error) => tracing::warn!(%error, "kernel frames will stay unsymbolized"),
    }
    Arc::new(Mutex::new(symbolizer))
}

/// New processes: read them while they run (off the async workers), then wake the sampling
/// thread to tell the program. Runs until the ring buffer cannot be polled.
async fn watch_new_processes(
    shared: Arc<collector::Shared>,
    wake: std::sync::mpsc::Sender<collector::Command>,
) {
    loop {
        let Ok(mut guard) = shared.events.readable().await else {
            return;
        };
        guard.clear_ready();
        let shared = shared.clone();
        let wake = wake.clone();
        tokio::task::spawn_blocking(move || {
            let batch = shared.events.get_ref().read();
            if batch.is_empty() {
                return;
            }
            shared
                .metrics
                .process_events
                .fetch_add(batch.len() as u64, Relaxed);
            let window = shared.window.load(Relaxed);
            let mut table = shared.processes.lock().expect("process table lock");
            let mut announced = shared.announced.lock().expect("announced lock");
            for event in batch {
                table.announce(event.pid, &event.comm, window);
                announced.push(event.pid);
            }
            wake.send(collector::Command::Announced).ok();
        })
        .await
        .ok();
    }
}

/// How profiles are built from windows: the period, the labels, and where symbols come from
/// beside the objects themselves (debuginfod, the DWARF cache, perf maps, interpreters).
fn build_options(
    config: &Config,
    shared: &collector::Shared,
) -> Result<profile::BuildOptions, Error> {
    let debuginfod = if config.debuginfod_urls.is_empty() {
        None
    } else {
        tracing::info!(urls = ?config.debuginfod_urls, "debuginfod");
        Some(Arc::new(Debuginfod::new(DebuginfodConfig {
            urls: config.debuginfod_urls.clone(),
            cache_dir: config.debuginfod_cache_dir.clone(),
            max_cache_bytes: config.debuginfod_cache_max_bytes,
            timeout: Duration::from_secs(30),
        })?))
    };
    let dwarf_cache = if config.dwarf_cache_max_bytes == 0 {
        None
    } else {
        match parca_symbolize::DwarfCache::new(
            &config.dwarf_cache_dir,
            config.dwarf_cache_max_bytes,
        ) {
            Ok(cache) => Some(Arc::new(cache)),
            // Symbolizing goes on, with DWARF copied into memory.
            Err(error) => {
                tracing::warn!(%error, "no DWARF cache: DWARF is held in memory, within its budget");
                None
            }
        }
    };
    Ok(profile::BuildOptions {
        period_ns: 1_000_000_000 / config.frequency_hz as i64,
        node: config.node.clone(),
        external_labels: config.external_labels.clone(),
        debuginfod,
        dwarf_cache,
        perf_maps: Default::default(),
        interpreted_frames: shared.interpreted_frames.clone(),
    })
}

/// Takes each finished window: kept as the last (shown at `/`) and, when pushing (`push`),
/// built into its profiles and queued for the pusher. The symbolizer's caches are trimmed
/// after each.
async fn take_windows(
    mut windows: tokio::sync::mpsc::Receiver<profile::RawProfile>,
    state: Arc<http::HttpState>,
    options: profile::BuildOptions,
    push: Option<tokio::sync::mpsc::UnboundedSender<push::Push>>,
) {
    while let Some(window) = windows.recv().await {
        let window = Arc::new(window);
        *state.last_window.lock().expect("last window lock") = Some(window.clone());
        let symbolizer = state.symbolizer.clone();
        let Some(push) = &push else {
            tokio::task::spawn_blocking(move || {
                symbolizer.lock().expect("symbolizer lock").trim();
            })
            .await
            .ok();
            continue;
        };
        let options = options.clone();
        let bodies =
            tokio::task::spawn_blocking(move || window_pushes(&window, &symbolizer, &options))
                .await;
        for body in bodies.into_iter().flatten() {
            push.send(body).ok();
        }
    }
}

/// A window's pushes: the CPU profile, and beside it the off-CPU one when there is off-CPU
/// time.
fn window_pushes(
    window: &profile::RawProfile,
    symbolizer: &Mutex<Symbolizer>,
    options: &profile::BuildOptions,
) -> Vec<push::Push> {
    let mut symbolizer = symbolizer.lock().expect("symbolizer lock");
    let mut kinds = vec![profile::ProfileKind::Cpu];
    if window.has_off_cpu() {
        kinds.push(profile::ProfileKind::OffCpu);
    }
    let bodies = kinds
        .into_iter()
        .map(|kind| {
            let p = profile::build(window, kind, &Filter::default(), &mut symbolizer, options);
            push::Push {
                name: kind.name(),
                body: parca_pprof::encode(&p, true),
            }
        })
        .collect();
    symbolizer.trim();
    bodies
}
