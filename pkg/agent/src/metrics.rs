//! The agent's own figures, served at `/metrics` in OpenMetrics text through prometheus-client,
//! as the server's: each read from its owner when `/metrics` is served (a collector), not kept twice.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

use crate::bpf::BpfStats;
use crate::profile::RawProfile;
use crate::runtimes::RuntimeStats;
use crate::unwind::UnwindStats;

/// One sample of a family: at most one label, and the value.
type Sample = (Option<(&'static str, &'static str)>, f64);

/// One metric: name (a counter's with its `_total`), help and samples.
#[derive(Debug)]
struct Family {
    name: &'static str,
    counter: bool,
    help: &'static str,
    samples: Vec<Sample>,
}

/// A count of things (`all`) split in two by a label (`label`): those that were whole, named or
/// read (`yes`) and the `some` that were not (`no`), as every runtime's stacks and frames are.
fn split(
    label: &'static str,
    (yes, no): (&'static str, &'static str),
    all: u64,
    some: u64,
) -> [Sample; 2] {
    [
        (Some((label, yes)), all.saturating_sub(some) as f64),
        (Some((label, no)), some as f64),
    ]
}

/// The figures of one scrape of `/metrics`, encoded by prometheus-client.
#[derive(Debug)]
struct Exposition(Vec<Family>);

impl prometheus_client::collector::Collector for Exposition {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for family in &self.0 {
            // prometheus-client writes a counter's samples with `_total` after its name.
            let (name, kind) = match family.name.strip_suffix("_total") {
                Some(name) if family.counter => (name, MetricType::Counter),
                _ => (family.name, MetricType::Gauge),
            };
            let help = family.help.trim_end_matches('.');
            let counter = family.counter;
            let mut metric = encoder.encode_descriptor(name, help, None, kind)?;
            match family.samples.as_slice() {
                [(None, value)] => encode_value(counter, *value, metric)?,
                samples => {
                    for (label, value) in samples {
                        let labels: Vec<(&str, &str)> = label.iter().copied().collect();
                        encode_value(counter, *value, metric.encode_family(&labels)?)?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// One value, as a counter's or a gauge's.
fn encode_value(counter: bool, value: f64, encoder: MetricEncoder<'_>) -> std::fmt::Result {
    if counter {
        ConstCounter::new(value).encode(encoder)
    } else {
        ConstGauge::new(value).encode(encoder)
    }
}

/// Counters updated by the sampling thread and the HTTP side.
#[derive(Debug, Default)]
pub(crate) struct Metrics {
    drains: AtomicU64,
    drain_ns_total: AtomicU64,
    last_drain_ns: AtomicU64,
    drained_entries: AtomicU64,
    bpf: Mutex<BpfStats>,
    windows: AtomicU64,
    last_window_samples: AtomicU64,
    last_window_ns: AtomicU64,
    pub profiles_served: AtomicU64,
    /// Profile requests whose window is open (sampling for them has begun).
    pub profile_requests_open: AtomicU64,
    pub pushes: AtomicU64,
    pub push_failures: AtomicU64,
    /// Windows given up: refused by the server, or the oldest beyond the pending limit.
    pub push_dropped: AtomicU64,
    /// Windows waiting to be pushed.
    pub push_pending: AtomicU64,
    /// Samples of processes outside `--systemd-units` or `--sampling-ratio`, not unwound.
    pub filtered_samples: AtomicU64,
    pub process_events: AtomicU64,
    /// Reads of a process's mappings again because an address fell outside them.
    pub maps_rereads: AtomicU64,
    unwind: Mutex<UnwindStats>,
    runtimes: Mutex<RuntimeStats>,
}

/// Figures owned elsewhere, read when `/metrics` is served.
#[derive(Debug, Default)]
pub(crate) struct Snapshot {
    pub symbolizer: parca_symbolize::Stats,
    pub processes: usize,
    pub objects_open: usize,
    pub process_reads: u64,
    pub n_cpus: usize,
    pub frequency_hz: u64,
    pub window_length: Duration,
    pub debuginfod: Option<crate::debuginfod::DebuginfodStats>,
}

impl Metrics {
    pub fn record_drain(&self, took: Duration, entries: usize, bpf: BpfStats) {
        let ns = took.as_nanos() as u64;
        self.drains.fetch_add(1, Relaxed);
        self.drain_ns_total.fetch_add(ns, Relaxed);
        self.last_drain_ns.store(ns, Relaxed);
        self.drained_entries.fetch_add(entries as u64, Relaxed);
        *self.bpf.lock().expect("metrics lock") = bpf;
    }

    pub fn record_unwind(&self, stats: UnwindStats, runtimes: RuntimeStats) {
        *self.unwind.lock().expect("metrics lock") = stats;
        *self.runtimes.lock().expect("metrics lock") = runtimes;
    }

    pub fn record_window(&self, window: &RawProfile) {
        self.windows.fetch_add(1, Relaxed);
        self.last_window_samples.store(window.total(), Relaxed);
        let ns = window
            .end
            .duration_since(window.start)
            .unwrap_or_default()
            .as_nanos() as u64;
        self.last_window_ns.store(ns, Relaxed);
    }

    /// The exposition, in OpenMetrics text as the server's (prometheus-client).
    pub fn render(&self, s: &Snapshot) -> String {
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register_collector(Box::new(Exposition(self.families(s))));
        let mut out = String::new();
        // Writing into a String does not fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
        out
    }

    /// Every figure, read now.
    #[expect(
        clippy::too_many_lines,
        reason = "a table of every metric family with its help text: one entry per metric, no logic to split"
    )]
    fn families(&self, s: &Snapshot) -> Vec<Family> {
        let bpf = *self.bpf.lock().expect("metrics lock");
        let mut out = Vec::new();
        let mut metric =
            |name: &'static str, kind: &str, help: &'static str, samples: &[Sample]| {
                out.push(Family {
                    name,
                    counter: kind == "counter",
                    help,
                    samples: samples.to_vec(),
                });
            };
        let secs = |ns: u64| ns as f64 / 1e9;
        metric(
            "parca_agent_samples_total",
            "counter",
            "CPU samples of processes taken by the BPF program (idle excluded).",
            &[(None, bpf.samples as f64)],
        );
        metric(
            "parca_agent_off_cpu_samples_total",
            "counter",
            "Off-CPU intervals recorded with their stack (--off-cpu-threshold).",
            &[(None, bpf.off_cpu_samples as f64)],
        );
        metric(
            "parca_agent_off_cpu_lost_total",
            "counter",
            "Off-CPU intervals recorded at switch-out but not sent: their process was not yet \
             known to the BPF program, they had no user context, or the ring buffer was full.",
            &[(None, bpf.off_cpu_lost as f64)],
        );
        metric(
            "parca_agent_idle_samples_total",
            "counter",
            "CPU samples of idle CPUs, not recorded.",
            &[(None, bpf.idle as f64)],
        );
        metric(
            "parca_agent_bpf_errors_total",
            "counter",
            "What the BPF program could not record, by reason: stack_collision and stack_error \
             lose a stack (the sample is kept without it), user_stack_unreadable a user stack, \
             counts_full the whole sample, process_event_lost an early read of a new process.",
            &[
                (
                    Some(("reason", "stack_collision")),
                    bpf.stack_collisions as f64,
                ),
                (Some(("reason", "stack_error")), bpf.stack_errors as f64),
                (
                    Some(("reason", "user_stack_unreadable")),
                    bpf.user_stack_unreadable as f64,
                ),
                (Some(("reason", "counts_full")), bpf.counts_full as f64),
                (
                    Some(("reason", "process_event_lost")),
                    bpf.events_lost as f64,
                ),
            ],
        );
        metric(
            "parca_agent_lost_samples_total",
            "counter",
            "Samples lost entirely (counts map full).",
            &[(None, bpf.counts_full as f64)],
        );
        metric(
            "parca_agent_samples_counted_in_maps_total",
            "counter",
            "Samples the ring buffer had no room for, counted in the BPF maps with \
             frame-pointer stacks instead.",
            &[(None, bpf.counted as f64)],
        );
        metric(
            "parca_agent_map_drains_total",
            "counter",
            "Times the samples so far were collected (the ring buffer read; the BPF maps \
             switched and read when they hold samples).",
            &[(None, self.drains.load(Relaxed) as f64)],
        );
        metric(
            "parca_agent_map_drain_seconds_total",
            "counter",
            "Time spent draining the BPF maps.",
            &[(None, secs(self.drain_ns_total.load(Relaxed)))],
        );
        metric(
            "parca_agent_map_last_drain_seconds",
            "gauge",
            "Time the last drain took.",
            &[(None, secs(self.last_drain_ns.load(Relaxed)))],
        );
        metric(
            "parca_agent_map_entries_drained_total",
            "counter",
            "(process, stack) entries read from the BPF maps.",
            &[(None, self.drained_entries.load(Relaxed) as f64)],
        );
        metric(
            "parca_agent_windows_total",
            "counter",
            "Profiling windows completed.",
            &[(None, self.windows.load(Relaxed) as f64)],
        );
        metric(
            "parca_agent_window_duration_seconds",
            "gauge",
            "The profiling window (--profiling-duration).",
            &[(None, s.window_length.as_secs_f64())],
        );
        metric(
            "parca_agent_last_window_seconds",
            "gauge",
            "How long the last completed window actually lasted.",
            &[(None, secs(self.last_window_ns.load(Relaxed)))],
        );
        metric(
            "parca_agent_last_window_samples",
            "gauge",
            "Samples in the last completed window.",
            &[(None, self.last_window_samples.load(Relaxed) as f64)],
        );
        metric(
            "parca_agent_sampling_frequency_hertz",
            "gauge",
            "Samples per second per CPU.",
            &[(None, s.frequency_hz as f64)],
        );
        metric(
            "parca_agent_cpus",
            "gauge",
            "CPUs sampled.",
            &[(None, s.n_cpus as f64)],
        );
        metric(
            "parca_agent_processes",
            "gauge",
            "Processes known.",
            &[(None, s.processes as f64)],
        );
        metric(
            "parca_agent_process_reads_total",
            "counter",
            "Reads of /proc/PID.",
            &[(None, s.process_reads as f64)],
        );
        metric(
            "parca_agent_process_events_total",
            "counter",
            "New processes announced by the BPF program.",
            &[(None, self.process_events.load(Relaxed) as f64)],
        );
        metric(
            "parca_agent_objects_open",
            "gauge",
            "Object files held open for symbolization.",
            &[(None, s.objects_open as f64)],
        );
        let unwind = self.unwind.lock().expect("metrics lock").clone();
        let ends: Vec<Sample> = parca_symbolize::unwind::StackEnd::ALL
            .iter()
            .zip(unwind.ends)
            .map(|(e, n)| (Some(("end", e.as_str())), n as f64))
            .collect();
        metric(
            "parca_agent_unwound_stacks_total",
            "counter",
            "User stacks walked with the unwind tables in the BPF program (or by frame pointers \
             in the kernel, for a process not told to it yet), by how the walk ended: complete \
             (reached the start), no_unwind_info, unreadable_memory (a frame's memory could not \
             be read, or a kernel walk nothing checked), depth_limit (cut at 1024 frames; 127 \
             for a kernel walk), bad_unwind_info (CFI the walk cannot apply, or that led \
             nowhere).",
            &ends,
        );
        let total: u64 = unwind.ends.iter().sum();
        metric(
            "parca_agent_complete_stacks_ratio",
            "gauge",
            "Share of the unwound user stacks that reached their start (1 before any).",
            &[(
                None,
                if total == 0 {
                    1.0
                } else {
                    unwind.ends[0] as f64 / total as f64
                },
            )],
        );
        metric(
            "parca_agent_frame_pointer_stacks_total",
            "counter",
            "Samples whose stacks were walked with frame pointers in the kernel instead (no \
             user context, a process not told to the BPF program yet, or the ring buffer was \
             full).",
            &[(
                None,
                bpf.samples
                    .saturating_sub(bpf.stacks_walked + bpf.counts_full) as f64,
            )],
        );
        metric(
            "parca_agent_walked_stacks_total",
            "counter",
            "User stacks walked in the BPF program with the unwind tables.",
            &[(None, bpf.stacks_walked as f64)],
        );
        metric(
            "parca_agent_fp_walked_stacks_total",
            "counter",
            "Of the walked stacks, those with frames left by their frame pointers (the fast \
             path, in code that keeps them everywhere; the leaf always goes by its row).",
            &[(None, bpf.fp_walked as f64)],
        );
        metric(
            "parca_agent_fp_walk_fallbacks_total",
            "counter",
            "Frame-pointer steps that led outside every mapping of the process (a function \
             that keeps no frame pointer, as Go's assembly on the system stack): redone with \
             the unwind row.",
            &[(None, bpf.fp_fallbacks as f64)],
        );
        metric(
            "parca_agent_fp_processes",
            "gauge",
            "Processes told to the BPF program whose code (some of it) keeps frame pointers.",
            &[(None, unwind.fp_processes as f64)],
        );
        metric(
            "parca_agent_unwind_processes",
            "gauge",
            "Processes whose mappings the BPF program holds (at most 8192).",
            &[(None, unwind.processes as f64)],
        );
        metric(
            "parca_agent_samples_before_tables_total",
            "counter",
            "Samples of processes whose mappings the BPF program was not told yet (their first \
             milliseconds): walked with frame pointers in the kernel.",
            &[(None, bpf.no_process as f64)],
        );
        let RuntimeStats {
            python,
            php,
            ruby,
            v8,
            jvm,
        } = *self.runtimes.lock().expect("metrics lock");
        metric(
            "parca_agent_python_processes",
            "gauge",
            "CPython processes whose Python frames the BPF program reads.",
            &[(None, python.processes as f64)],
        );
        metric(
            "parca_agent_python_stacks_total",
            "counter",
            "Samples of Python threads sent with their Python frames, by whether the frame \
             chain was read whole or cut (too deep, or a frame unreadable).",
            &split(
                "chain",
                ("whole", "cut"),
                bpf.python_walks,
                bpf.python_walks_cut,
            ),
        );
        metric(
            "parca_agent_python_frames_total",
            "counter",
            "Python frames in samples, by whether their code object could be read and named.",
            &split(
                "code",
                ("named", "unreadable"),
                python.frames,
                python.unreadable_frames,
            ),
        );
        metric(
            "parca_agent_python_frames_unplaced_total",
            "counter",
            "Python frames for which no native evaluation frame was found in the stack (it \
             was cut, or the frame was in code without a symbol): placed below the last one \
             found.",
            &[(None, python.unplaced_frames as f64)],
        );
        metric(
            "parca_agent_python_frame_names",
            "gauge",
            "Distinct interpreted and JIT frames (function, file, line) held for naming, of \
             every runtime (one table).",
            &[(
                None,
                python
                    .frames_held
                    .max(php.frames_held)
                    .max(ruby.frames_held)
                    .max(v8.frames_held)
                    .max(jvm.frames_held) as f64,
            )],
        );
        metric(
            "parca_agent_php_processes",
            "gauge",
            "PHP processes whose PHP frames the BPF program reads.",
            &[(None, php.processes as f64)],
        );
        metric(
            "parca_agent_php_stacks_total",
            "counter",
            "Samples of PHP processes' main threads sent with their PHP frames, by whether the \
             frame chain was read whole or cut (too deep, or a frame unreadable).",
            &split("chain", ("whole", "cut"), bpf.php_walks, bpf.php_walks_cut),
        );
        metric(
            "parca_agent_php_frames_total",
            "counter",
            "PHP frames in samples, by whether their function could be read and named \
             (unreadable: the process exited, or its memory held no function where a frame \
             pointed).",
            &split(
                "function",
                ("named", "unreadable"),
                php.frames,
                php.unreadable_frames,
            ),
        );
        metric(
            "parca_agent_php_frames_unplaced_total",
            "counter",
            "PHP frames for which no native execute_ex frame was found in the stack: placed \
             below the last one found.",
            &[(None, php.unplaced_frames as f64)],
        );
        metric(
            "parca_agent_ruby_processes",
            "gauge",
            "Ruby processes whose Ruby frames the BPF program reads.",
            &[(None, ruby.processes as f64)],
        );
        metric(
            "parca_agent_ruby_stacks_total",
            "counter",
            "Samples of Ruby threads sent with their Ruby frames, by whether the frame chain \
             was read whole or cut (too deep, or a frame unreadable).",
            &split(
                "chain",
                ("whole", "cut"),
                bpf.ruby_walks,
                bpf.ruby_walks_cut,
            ),
        );
        metric(
            "parca_agent_ruby_frames_total",
            "counter",
            "Ruby frames in samples, by whether their instruction sequence could be read and \
             named.",
            &split(
                "iseq",
                ("named", "unreadable"),
                ruby.frames,
                ruby.unreadable_frames,
            ),
        );
        metric(
            "parca_agent_ruby_frames_unplaced_total",
            "counter",
            "Ruby frames for which no native rb_vm_exec frame was found in the stack: placed \
             below the last one found.",
            &[(None, ruby.unplaced_frames as f64)],
        );
        metric(
            "parca_agent_v8_processes",
            "gauge",
            "Node.js (V8) processes whose JavaScript frames the BPF program reads.",
            &[(None, v8.processes as f64)],
        );
        metric(
            "parca_agent_v8_stacks_total",
            "counter",
            "Samples of Node.js (V8) processes sent with JavaScript frames, by whether all were \
             kept or some left out (more than the program keeps).",
            &split("chain", ("whole", "cut"), bpf.v8_walks, bpf.v8_walks_cut),
        );
        metric(
            "parca_agent_v8_frames_total",
            "counter",
            "JavaScript frames in samples, by whether their function could be read and named.",
            &split(
                "function",
                ("named", "unreadable"),
                v8.frames,
                v8.unreadable_frames,
            ),
        );
        metric(
            "parca_agent_jvm_processes",
            "gauge",
            "JVM (HotSpot) processes whose Java frames the agent reads.",
            &[(None, jvm.processes as f64)],
        );
        metric(
            "parca_agent_jvm_stacks_total",
            "counter",
            "Samples of JVM processes sent with interpreted Java frames, by whether all were \
             kept or some left out (more than the program keeps).",
            &split("chain", ("whole", "cut"), bpf.jvm_walks, bpf.jvm_walks_cut),
        );
        metric(
            "parca_agent_jvm_frames_total",
            "counter",
            "Java frames in samples (interpreted, compiled and inlined), by whether their \
             method could be read and named.",
            &split(
                "method",
                ("named", "unreadable"),
                jvm.frames,
                jvm.unreadable_frames,
            ),
        );
        metric(
            "parca_agent_jvm_compiled_frames_total",
            "counter",
            "Frames of the JVM's compiled code and stubs the BPF program left by their code \
             blob's frame size, and walks that ended at code cache memory no blob covers (a \
             blob freed meanwhile, or a misread).",
            &[
                (Some(("step", "sized")), bpf.jvm_compiled_steps as f64),
                (Some(("step", "lost")), bpf.jvm_lost as f64),
            ],
        );
        metric(
            "parca_agent_samples_lost_total",
            "counter",
            "Walked samples that did not fit in the ring buffer (sent, or counted, with \
             frame-pointer stacks instead).",
            &[(None, bpf.samples_lost as f64)],
        );
        metric(
            "parca_agent_unwind_tables_loaded_total",
            "counter",
            "Unwind tables compiled from objects' .eh_frame/.debug_frame and loaded into the \
             BPF program, once per object while held.",
            &[(None, unwind.tables_loaded as f64)],
        );
        metric(
            "parca_agent_unwind_table_errors_total",
            "counter",
            "Objects whose unwind table could not be compiled, by reason: unreadable (the file \
             or its headers), too_large (a CFI section or table past the limits, or larger \
             than the whole budget: a hostile or huge object).",
            &[
                (Some(("reason", "unreadable")), unwind.table_errors as f64),
                (
                    Some(("reason", "too_large")),
                    unwind.tables_too_large as f64,
                ),
            ],
        );
        metric(
            "parca_agent_unwind_malformed_cfi_total",
            "counter",
            "CFI entries refused as malformed in the objects whose unwind table was compiled: \
             their code has no rows (a hostile or corrupt object).",
            &[(None, unwind.malformed_cfi as f64)],
        );
        metric(
            "parca_agent_unwind_tables_evicted_total",
            "counter",
            "Unwind tables evicted (least recently used) to make room within the budget.",
            &[(None, unwind.tables_evicted as f64)],
        );
        metric(
            "parca_agent_unwind_tables_cached",
            "gauge",
            "Unwind tables held in the BPF program.",
            &[(None, unwind.tables_cached as f64)],
        );
        metric(
            "parca_agent_unwind_table_bytes",
            "gauge",
            "Kernel memory the held unwind tables take, in bytes.",
            &[(None, unwind.table_bytes as f64)],
        );
        metric(
            "parca_agent_unwind_table_budget_bytes",
            "gauge",
            "The budget for unwind tables (--unwind-tables-max-bytes).",
            &[(None, unwind.table_budget_bytes as f64)],
        );
        metric(
            "parca_agent_unwind_table_rows",
            "gauge",
            "Rows of the held unwind tables.",
            &[(None, unwind.table_rows as f64)],
        );
        metric(
            "parca_agent_unwind_table_build_seconds_total",
            "counter",
            "Time spent compiling unwind tables (and reading the CFI that checks kernel walks).",
            &[(None, secs(unwind.table_build_ns))],
        );
        metric(
            "parca_agent_maps_rereads_total",
            "counter",
            "Reads of a process's mappings again because a frame's address was outside them \
             (dlopen).",
            &[(None, self.maps_rereads.load(Relaxed) as f64)],
        );
        if let Some(d) = &s.debuginfod {
            metric(
                "parca_agent_debuginfod_requests_total",
                "counter",
                "Debug files asked of debuginfod, by result: fetched (downloaded), cached (on \
                 disk already), missing (no server had it, or the request failed).",
                &[
                    (Some(("result", "fetched")), d.fetched as f64),
                    (Some(("result", "cached")), d.cache_hits as f64),
                    (Some(("result", "missing")), d.misses as f64),
                ],
            );
        }
        let sy = &s.symbolizer;
        metric(
            "parca_agent_symbolize_cache_hits_total",
            "counter",
            "Addresses symbolized from the cache.",
            &[(None, sy.hits as f64)],
        );
        metric(
            "parca_agent_symbolize_cache_misses_total",
            "counter",
            "Addresses looked up in an object or kallsyms.",
            &[(None, sy.misses as f64)],
        );
        metric(
            "parca_agent_symbolize_objects_loaded_total",
            "counter",
            "Object files parsed (once per build id while cached).",
            &[(None, sy.objects_loaded as f64)],
        );
        metric(
            "parca_agent_symbolize_object_errors_total",
            "counter",
            "Object files that could not be read.",
            &[(None, sy.object_errors as f64)],
        );
        metric(
            "parca_agent_symbolize_objects_cached",
            "gauge",
            "Object files parsed and cached.",
            &[(None, sy.objects_cached as f64)],
        );
        metric(
            "parca_agent_symbolize_bytes_cached",
            "gauge",
            "Bytes of DWARF and symbol tables held in memory (roughly).",
            &[(None, sy.bytes_cached as f64)],
        );
        metric(
            "parca_agent_symbolize_dwarf_mapped_bytes",
            "gauge",
            "Bytes of DWARF mapped from the DWARF cache (--dwarf-cache-dir): paged in as lookups touch it, not held.",
            &[(None, sy.dwarf_mapped_bytes as f64)],
        );
        metric(
            "parca_agent_symbolize_addresses_cached",
            "gauge",
            "Addresses memoized.",
            &[(None, sy.addresses_cached as f64)],
        );
        metric(
            "parca_agent_profiles_served_total",
            "counter",
            "Profiles served at /debug/pprof/profile.",
            &[(None, self.profiles_served.load(Relaxed) as f64)],
        );
        metric(
            "parca_agent_profile_requests_open",
            "gauge",
            "Requests at /debug/pprof/profile and /debug/pprof/off_cpu whose window has begun and not yet ended.",
            &[(None, self.profile_requests_open.load(Relaxed) as f64)],
        );
        metric(
            "parca_agent_pushes_total",
            "counter",
            "Windows pushed to the remote store.",
            &[(None, self.pushes.load(Relaxed) as f64)],
        );
        metric(
            "parca_agent_push_failures_total",
            "counter",
            "Pushes that failed (each retry counts).",
            &[(None, self.push_failures.load(Relaxed) as f64)],
        );
        metric(
            "parca_agent_push_dropped_windows_total",
            "counter",
            "Windows given up: refused by the server, or the oldest while more than --remote-store-max-pending-windows waited.",
            &[(None, self.push_dropped.load(Relaxed) as f64)],
        );
        metric(
            "parca_agent_push_pending_windows",
            "gauge",
            "Windows waiting to be pushed (the server is down or slow).",
            &[(None, self.push_pending.load(Relaxed) as f64)],
        );
        metric(
            "parca_agent_filtered_samples_total",
            "counter",
            "Samples of processes that --systemd-units or --sampling-ratio leave out.",
            &[(None, self.filtered_samples.load(Relaxed) as f64)],
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_every_figure_once_with_help_and_type() {
        let m = Metrics::default();
        m.record_drain(
            Duration::from_millis(3),
            10,
            BpfStats {
                samples: 5,
                ..BpfStats::default()
            },
        );
        let text = m.render(&Snapshot {
            window_length: Duration::from_secs(10),
            ..Snapshot::default()
        });
        assert!(
            text.contains("# TYPE parca_agent_samples counter\n"),
            "{text}"
        );
        assert!(text.contains("parca_agent_samples_total 5.0\n"));
        assert!(text.contains("parca_agent_map_last_drain_seconds 0.003\n"));
        assert!(text.contains("parca_agent_window_duration_seconds 10.0\n"));
        assert!(text.contains("parca_agent_bpf_errors_total{reason=\"counts_full\"} 0.0\n"));
        assert!(text.ends_with("# EOF\n"), "OpenMetrics, as the server's");
        let helps = text.lines().filter(|l| l.starts_with("# HELP")).count();
        let types = text.lines().filter(|l| l.starts_with("# TYPE")).count();
        assert_eq!(helps, types);
    }
}
