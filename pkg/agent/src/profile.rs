//! Samples over a window ([`RawProfile`]: addresses, not yet symbolized) and their pprof.

use std::sync::Arc;
use std::time::SystemTime;

use parca_pprof::{ProfileBuilder, proto};
use parca_symbolize::unwind::StackEnd;
use parca_symbolize::{ElfObject, Frame, Symbolizer};
use rustc_hash::FxHashMap;

use crate::bpf::{DrainedStack, OffCpuReason};
use crate::process::ProcessInfo;

/// The profile name the server files the agent's profiles under: with the sample and period
/// types below and a window (`duration > 0`) the series is
/// `parca_agent:samples:count:cpu:nanoseconds:delta`.
pub const PROFILE_NAME: &str = "parca_agent";

/// The name of the off-CPU profile, pushed and scraped (`parca.yaml`'s `parca_agent_off_cpu`
/// entry): `parca_agent_off_cpu:off_cpu:nanoseconds:off_cpu:nanoseconds:delta`.
pub const OFF_CPU_PROFILE_NAME: &str = "parca_agent_off_cpu";

/// Name of the kernel's pseudo-mapping, as perf and pprof spell it.
const KERNEL_MAPPING: &str = "[kernel.kallsyms]";

/// The function name of the synthetic outermost frame of a stack that did not reach its start.
/// `[truncated: depth limit]` marks a stack cut at [`crate::bpf::MAX_USER_FRAMES`]: its
/// innermost frames are kept.
pub fn truncation_frame_name(end: StackEnd) -> &'static str {
    match end {
        StackEnd::Complete => "",
        StackEnd::NoUnwindInfo => "[truncated: no unwind info]",
        StackEnd::Unreadable => "[truncated: unreadable stack]",
        StackEnd::DepthLimit => "[truncated: depth limit]",
        StackEnd::BadUnwindInfo => "[truncated: bad unwind info]",
    }
}

/// A process and its stacks (leaf first).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct RawKey {
    pub pid: u32,
    pub user: Arc<[u64]>,
    pub kernel: Arc<[u64]>,
    /// How the user stack's walk ended (`None`: a frame-pointer walk, end unknown).
    pub end: Option<StackEnd>,
    /// `None`: CPU samples; else off-CPU nanoseconds, and why the thread was off.
    pub off_cpu: Option<OffCpuReason>,
}

/// Which of a window's profiles to build.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ProfileKind {
    /// CPU samples: `samples`/`count`, period `cpu`/`nanoseconds`.
    Cpu,
    /// Time off CPU: `off_cpu`/`nanoseconds`, with the `off_cpu_reason` label.
    OffCpu,
}

impl ProfileKind {
    /// The name the server files it under.
    pub fn name(self) -> &'static str {
        match self {
            ProfileKind::Cpu => PROFILE_NAME,
            ProfileKind::OffCpu => OFF_CPU_PROFILE_NAME,
        }
    }

    fn keeps(self, key: &RawKey) -> bool {
        match self {
            ProfileKind::Cpu => key.off_cpu.is_none(),
            ProfileKind::OffCpu => key.off_cpu.is_some(),
        }
    }
}

/// Samples accumulated over a window: counts per (process, stacks) for CPU samples, nanoseconds
/// per (process, stacks, reason) for off-CPU time, and the processes as they were read while
/// they ran.
#[derive(Debug, Clone)]
pub(crate) struct RawProfile {
    pub start: SystemTime,
    pub end: SystemTime,
    pub samples: FxHashMap<RawKey, u64>,
    pub processes: FxHashMap<u32, Arc<ProcessInfo>>,
}

impl RawProfile {
    pub fn new(start: SystemTime) -> RawProfile {
        RawProfile {
            start,
            end: start,
            samples: FxHashMap::default(),
            processes: FxHashMap::default(),
        }
    }

    /// Adds drained stacks; `processes` gives each pid's process.
    pub fn add(&mut self, drained: &[DrainedStack], processes: &FxHashMap<u32, Arc<ProcessInfo>>) {
        for d in drained {
            let key = RawKey {
                pid: d.pid,
                user: d.user.clone(),
                kernel: d.kernel.clone(),
                end: d.end,
                off_cpu: d.off_cpu,
            };
            *self.samples.entry(key).or_default() += d.count;
            if let Some(p) = processes.get(&d.pid) {
                self.processes.insert(d.pid, p.clone());
            }
        }
    }

    /// CPU samples per process, most first.
    pub fn per_process(&self) -> Vec<(Arc<ProcessInfo>, u64)> {
        let mut totals: FxHashMap<u32, u64> = FxHashMap::default();
        for (key, count) in self.samples.iter().filter(|(k, _)| k.off_cpu.is_none()) {
            *totals.entry(key.pid).or_default() += count;
        }
        let mut out: Vec<(Arc<ProcessInfo>, u64)> = totals
            .into_iter()
            .map(|(pid, n)| {
                let info = self.processes.get(&pid).cloned().unwrap_or_else(|| {
                    Arc::new(ProcessInfo {
                        pid,
                        ..ProcessInfo::default()
                    })
                });
                (info, n)
            })
            .collect();
        out.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.pid.cmp(&b.0.pid)));
        out
    }

    /// Total CPU samples.
    pub fn total(&self) -> u64 {
        self.samples
            .iter()
            .filter(|(k, _)| k.off_cpu.is_none())
            .map(|(_, n)| n)
            .sum()
    }

    /// Whether the window holds off-CPU time.
    pub fn has_off_cpu(&self) -> bool {
        self.samples.keys().any(|k| k.off_cpu.is_some())
    }
}

/// Which processes a profile keeps.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    /// Only this process.
    pub pid: Option<u32>,
    /// Only processes of this name.
    pub comm: Option<String>,
}

impl Filter {
    fn keeps(&self, pid: u32, info: Option<&ProcessInfo>) -> bool {
        self.pid.is_none_or(|p| p == pid)
            && self
                .comm
                .as_deref()
                .is_none_or(|c| info.is_some_and(|i| i.comm == c))
    }
}

/// What goes into every profile besides the samples.
#[derive(Debug, Clone)]
pub(crate) struct BuildOptions {
    pub period_ns: i64,
    pub node: String,
    /// Added to every sample (`--metadata-external-labels`).
    pub external_labels: Vec<(String, String)>,
    /// Asked for the debug files of stripped objects that have none on the node.
    pub debuginfod: Option<Arc<crate::Debuginfod>>,
    /// Where objects' DWARF is mapped from (written there decompressed on first sight).
    pub dwarf_cache: Option<Arc<parca_symbolize::DwarfCache>>,
    /// Names of JIT code from the processes' perf maps.
    pub perf_maps: Arc<std::sync::Mutex<crate::perfmap::PerfMaps>>,
    /// The interpreted (Python, PHP) frames that user stacks hold by id.
    pub interpreted_frames: Arc<std::sync::Mutex<crate::interp::FrameTable>>,
}

/// Builds the `kind` pprof of `raw`: one sample per (process, stack), kernel frames above user
/// ones, symbolized where possible; a frame that is not keeps its mapping and address. Off-CPU
/// samples also carry `off_cpu_reason` (`wait` or `preempted`).
///
/// Location addresses are the frames' addresses, less one for return addresses (every frame
/// but the first of each stack), so that they point into the call instruction and a later
/// symbolizer finds the caller's line, as this one did.
#[expect(
    clippy::too_many_lines,
    reason = "builds one pprof from a window: locations, functions and samples share the builder and the symbolizer's caches"
)]
pub(crate) fn build(
    raw: &RawProfile,
    kind: ProfileKind,
    filter: &Filter,
    symbolizer: &mut Symbolizer,
    options: &BuildOptions,
) -> proto::Profile {
    let mut b = Builder::default();
    let (sample_type, period_type, period) = match kind {
        ProfileKind::Cpu => (
            b.pprof.value_type("samples", "count"),
            b.pprof.value_type("cpu", "nanoseconds"),
            options.period_ns,
        ),
        // Each sample is its nanoseconds: the period is one of them.
        ProfileKind::OffCpu => (
            b.pprof.value_type("off_cpu", "nanoseconds"),
            b.pprof.value_type("off_cpu", "nanoseconds"),
            1,
        ),
    };
    let node = (!options.node.is_empty()).then(|| options.node.clone());

    let mut samples: FxHashMap<(Vec<u64>, u32), i64> = FxHashMap::default();
    let mut label_sets: Vec<Vec<proto::Label>> = Vec::new();
    let mut label_set_of: FxHashMap<(u32, Option<OffCpuReason>), u32> = FxHashMap::default();
    let mut keys: Vec<(&RawKey, &u64)> =
        raw.samples.iter().filter(|(k, _)| kind.keeps(k)).collect();
    // A stable order makes ids, and so the output, deterministic.
    keys.sort_by(|a, b| {
        (
            a.0.pid,
            &a.0.kernel[..],
            &a.0.user[..],
            a.0.end,
            a.0.off_cpu,
        )
            .cmp(&(
                b.0.pid,
                &b.0.kernel[..],
                &b.0.user[..],
                b.0.end,
                b.0.off_cpu,
            ))
    });
    for (key, &count) in keys {
        let info = raw.processes.get(&key.pid).map(Arc::as_ref);
        if !filter.keeps(key.pid, info) {
            continue;
        }
        let mut locations = Vec::with_capacity(key.kernel.len() + key.user.len());
        let kernel = without_tracing_frames(&key.kernel, symbolizer);
        for (i, &addr) in kernel.iter().enumerate() {
            let addr = if i == 0 { addr } else { addr.wrapping_sub(1) };
            locations.push(b.kernel_location(addr, symbolizer));
        }
        for (i, &addr) in key.user.iter().enumerate() {
            if let Some(id) = crate::interp::frame_id(addr) {
                locations.push(b.interpreted_location(id, options));
                continue;
            }
            let addr = if i == 0 { addr } else { addr.wrapping_sub(1) };
            locations.push(b.user_location(key.pid, info, addr, symbolizer, options));
        }
        // A stack that did not reach its start says why, as its outermost frame.
        if let Some(end) = key.end
            && end != StackEnd::Complete
        {
            locations.push(b.truncation_location(end));
        }
        let set = *label_set_of
            .entry((key.pid, key.off_cpu))
            .or_insert_with(|| {
                let mut labels = Vec::new();
                let mut add = |b: &mut Builder, k: &str, v: &str| {
                    if !v.is_empty() {
                        let key = b.pprof.string(k);
                        let str = b.pprof.string(v);
                        labels.push(proto::Label {
                            key,
                            str,
                            ..Default::default()
                        });
                    }
                };
                add(&mut b, "pid", &key.pid.to_string());
                if let Some(info) = info {
                    add(&mut b, "comm", &info.comm);
                    add(
                        &mut b,
                        "executable",
                        info.executable.as_deref().unwrap_or(""),
                    );
                    add(
                        &mut b,
                        "systemd_unit",
                        info.systemd_unit.as_deref().unwrap_or(""),
                    );
                    add(
                        &mut b,
                        "container_id",
                        info.container_id.as_deref().unwrap_or(""),
                    );
                    if let Some((runtime, version)) = info.runtime() {
                        add(&mut b, "runtime", runtime);
                        add(&mut b, "runtime_version", version);
                    }
                }
                if let Some(node) = &node {
                    add(&mut b, "node", node);
                }
                for (name, value) in &options.external_labels {
                    add(&mut b, name, value);
                }
                if let Some(reason) = key.off_cpu {
                    add(&mut b, "off_cpu_reason", reason.as_str());
                }
                label_sets.push(labels);
                (label_sets.len() - 1) as u32
            });
        *samples.entry((locations, set)).or_default() += count as i64;
    }
    let mut samples: Vec<proto::Sample> = samples
        .into_iter()
        .map(|((location_id, set), value)| proto::Sample {
            location_id,
            value: vec![value],
            label: label_sets[set as usize].clone(),
        })
        .collect();
    samples.sort_by(|a, b| {
        (a.label.first().map(|l| l.str), &a.location_id)
            .cmp(&(b.label.first().map(|l| l.str), &b.location_id))
    });

    let time_nanos = nanos_since_epoch(raw.start);
    let duration_nanos = (nanos_since_epoch(raw.end) - time_nanos).max(1);
    proto::Profile {
        sample_type: vec![sample_type],
        sample: samples,
        time_nanos,
        duration_nanos,
        period_type: Some(period_type),
        period,
        ..b.pprof.finish()
    }
}

/// Prefixes of the kernel functions that run a BPF program from a tracepoint: the innermost
/// frames of a stack taken in one (an off-CPU start, at `sched_switch`), which are the agent's
/// own and not the thread's.
const TRACING_FRAMES: &[&str] = &["bpf_prog_", "bpf_trace_run", "__bpf_trace_", "__traceiter_"];

/// `kernel` (leaf first) without its innermost frames of the BPF tracing machinery.
fn without_tracing_frames<'a>(kernel: &'a [u64], symbolizer: &mut Symbolizer) -> &'a [u64] {
    let skip = kernel
        .iter()
        .take_while(|&&addr| {
            symbolizer.symbolize_kernel(addr).is_some_and(|frames| {
                frames.iter().any(|f| {
                    TRACING_FRAMES
                        .iter()
                        .any(|prefix| f.function.starts_with(prefix))
                })
            })
        })
        .count();
    &kernel[skip..]
}

fn nanos_since_epoch(t: SystemTime) -> i64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

/// A location's lines: (function id, line), innermost first.
type Lines = Arc<[(u64, i64)]>;

/// The agent's pprof: the shared builder, plus its own keys for mappings (per process) and
/// locations (per mapping and address; per process for addresses in no mapping).
struct Builder {
    pprof: ProfileBuilder,
    /// (pid, mapping index in the process) → mapping id.
    mapping_ids: FxHashMap<(u32, usize), u64>,
    kernel_mapping: Option<u64>,
    /// Per mapping: whether a location of it was seen yet.
    mapping_seen: Vec<bool>,
    /// (mapping id or 0, address, pid when there is no mapping) → location id.
    location_ids: FxHashMap<(u64, u64, u32), u64>,
    /// The synthetic frames of truncated stacks, by how they ended.
    truncation_ids: FxHashMap<StackEnd, u64>,
    /// Interpreted frames (`interp::FrameTable` ids) → location id.
    interpreted_ids: FxHashMap<u32, u64>,
    /// The lines (function id, line) of frames the symbolizer gave, by the address of its
    /// answer (held here, so the address is not reused): an object's address sampled in
    /// several processes is named once (each name costs three string lookups).
    lines_of: FxHashMap<usize, (Arc<[Frame]>, Lines)>,
}

impl Default for Builder {
    fn default() -> Builder {
        Builder {
            pprof: ProfileBuilder::new(),
            mapping_ids: FxHashMap::default(),
            kernel_mapping: None,
            mapping_seen: Vec::new(),
            location_ids: FxHashMap::default(),
            truncation_ids: FxHashMap::default(),
            interpreted_ids: FxHashMap::default(),
            lines_of: FxHashMap::default(),
        }
    }
}

impl Builder {
    fn function(&mut self, frame: &Frame) -> u64 {
        self.pprof.function(
            &frame.function,
            &frame.system_name,
            frame.file.as_deref().unwrap_or(""),
            0,
        )
    }

    fn lines(&mut self, frames: &[Frame]) -> Vec<(u64, i64)> {
        frames
            .iter()
            .map(|f| (self.function(f), i64::from(f.line)))
            .collect()
    }

    fn location(&mut self, mapping_id: u64, addr: u64, pid: u32, frames: &[Frame]) -> u64 {
        let key = (mapping_id, addr, if mapping_id == 0 { pid } else { 0 });
        if let Some(&id) = self.location_ids.get(&key) {
            return id;
        }
        let lines = self.lines(frames);
        self.add_location(key, frames, &lines)
    }

    /// [`Builder::location`] of frames the symbolizer gave, their lines named once per window.
    fn symbolized_location(&mut self, mapping_id: u64, addr: u64, frames: Arc<[Frame]>) -> u64 {
        let key = (mapping_id, addr, 0);
        if let Some(&id) = self.location_ids.get(&key) {
            return id;
        }
        let at = Arc::as_ptr(&frames).cast::<Frame>() as usize;
        let lines = match self.lines_of.get(&at) {
            Some((_, lines)) => lines.clone(),
            None => {
                let lines: Lines = Arc::from(self.lines(&frames));
                self.lines_of.insert(at, (frames.clone(), lines.clone()));
                lines
            }
        };
        self.add_location(key, &frames, &lines)
    }

    fn add_location(
        &mut self,
        key: (u64, u64, u32),
        frames: &[Frame],
        lines: &[(u64, i64)],
    ) -> u64 {
        let (mapping_id, addr, _) = key;
        if mapping_id != 0 {
            let first = !self.mapping_seen[mapping_id as usize - 1];
            self.mapping_seen[mapping_id as usize - 1] = true;
            let m = self.pprof.mapping_mut(mapping_id);
            // pprof reads `has_*` as "every location of the mapping has it", so a symbolizer
            // skips such mappings: the flags start true and fall at the first location without.
            let set = |flag: &mut bool, value: bool| *flag = (first || *flag) && value;
            set(&mut m.has_functions, !lines.is_empty());
            set(
                &mut m.has_filenames,
                frames.iter().any(|f| f.file.is_some()),
            );
            set(&mut m.has_line_numbers, frames.iter().any(|f| f.line != 0));
            // Lines come from DWARF, which also gave the inlined frames.
            m.has_inline_frames = m.has_line_numbers;
        }
        let id = self.pprof.add_location(mapping_id, addr, lines);
        self.location_ids.insert(key, id);
        id
    }

    /// The synthetic frame naming why a stack ends early: no mapping, address 0.
    fn truncation_location(&mut self, end: StackEnd) -> u64 {
        if let Some(&id) = self.truncation_ids.get(&end) {
            return id;
        }
        let name = truncation_frame_name(end);
        let frame = Frame {
            function: name.to_owned(),
            system_name: name.to_owned(),
            file: None,
            line: 0,
        };
        let function_id = self.function(&frame);
        let id = self.pprof.add_location(0, 0, &[(function_id, 0)]);
        self.truncation_ids.insert(end, id);
        id
    }

    /// An interpreted (Python, PHP) frame: no mapping or address (it is no machine code), its function, file and
    /// line.
    fn interpreted_location(&mut self, id: u32, options: &BuildOptions) -> u64 {
        if let Some(&location) = self.interpreted_ids.get(&id) {
            return location;
        }
        let frame = options
            .interpreted_frames
            .lock()
            .expect("frame table lock")
            .get(id)
            .cloned();
        let location = match frame {
            Some(frame) => {
                let function = self.function(&frame);
                self.pprof
                    .add_location(0, 0, &[(function, i64::from(frame.line))])
            }
            None => self.pprof.add_location(0, 0, &[]),
        };
        self.interpreted_ids.insert(id, location);
        location
    }

    fn kernel_location(&mut self, addr: u64, symbolizer: &mut Symbolizer) -> u64 {
        let mapping_id = match self.kernel_mapping {
            Some(id) => id,
            None => {
                let filename = self.pprof.string(KERNEL_MAPPING);
                let id = self.pprof.add_mapping(proto::Mapping {
                    // The upper half of the address space: where x86-64 kernels live.
                    memory_start: 0xffff_8000_0000_0000,
                    memory_limit: u64::MAX,
                    filename,
                    ..Default::default()
                });
                self.mapping_seen.push(false);
                self.kernel_mapping = Some(id);
                id
            }
        };
        if let Some(&id) = self.location_ids.get(&(mapping_id, addr, 0)) {
            return id;
        }
        let frames = symbolizer.symbolize_kernel(addr);
        self.location(mapping_id, addr, 0, frames.as_deref().unwrap_or(&[]))
    }

    fn user_location(
        &mut self,
        pid: u32,
        info: Option<&ProcessInfo>,
        addr: u64,
        symbolizer: &mut Symbolizer,
        options: &BuildOptions,
    ) -> u64 {
        let Some((index, mapping)) = info.and_then(|i| i.mapping_of(addr)) else {
            // Unknown process or address outside every executable mapping: the address alone.
            return self.location(0, addr, pid, &[]);
        };
        // Anonymous executable memory is code made at run time: a JIT's.
        let jit = mapping.path.is_empty();
        let mapping_id = match self.mapping_ids.get(&(pid, index)) {
            Some(&id) => id,
            None => {
                let filename = self.pprof.string(if jit { "[jit]" } else { &mapping.path });
                let build_id = match mapping.object.as_ref().and_then(|o| o.build_id.as_ref()) {
                    Some(id) => self.pprof.string(&id.to_string()),
                    None => 0,
                };
                let id = self.pprof.add_mapping(proto::Mapping {
                    memory_start: mapping.start,
                    memory_limit: mapping.end,
                    file_offset: mapping.offset,
                    filename,
                    build_id,
                    ..Default::default()
                });
                self.mapping_seen.push(false);
                self.mapping_ids.insert((pid, index), id);
                id
            }
        };
        if let Some(&id) = self.location_ids.get(&(mapping_id, addr, 0)) {
            return id;
        }
        if jit {
            // Named by the process's perf map when it writes one, else `[jit]` and the address.
            let name = options
                .perf_maps
                .lock()
                .expect("perf maps lock")
                .lookup(pid, addr)
                .map(str::to_owned);
            let frames: Vec<Frame> = name
                .map(|name| Frame {
                    function: name.clone(),
                    system_name: name,
                    file: None,
                    line: 0,
                })
                .into_iter()
                .collect();
            return self.location(mapping_id, addr, pid, &frames);
        }
        let frames = match &mapping.object {
            Some(object) => symbolizer.symbolize(
                &object.key,
                |max_dwarf_bytes| {
                    // Not on the node: from debuginfod, when the object has a build id.
                    let fetched = match (&object.debug_file, &options.debuginfod, &object.build_id)
                    {
                        (None, Some(d), Some(id)) if object.wants_debug_file => d.fetch(id),
                        _ => None,
                    };
                    let debug = object.debug_file.as_ref().or(fetched.as_ref());
                    let debug = debug.map(|(f, p)| (f, p.as_path()));
                    let (file, path) = (&object.file, object.opened_as.as_path());
                    let read = match &options.dwarf_cache {
                        Some(cache) => {
                            ElfObject::read_cached(file, path, debug, max_dwarf_bytes, cache)
                        }
                        None => ElfObject::read_with_debug_file(file, path, debug, max_dwarf_bytes),
                    };
                    if let Some(error) = read.as_ref().ok().and_then(|o| o.dwarf_cache_error()) {
                        tracing::debug!(%error, "DWARF held in memory, not cached");
                    }
                    read
                },
                addr - mapping.start + mapping.offset,
            ),
            None => Arc::from(Vec::new()),
        };
        self.symbolized_location(mapping_id, addr, frames)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use parca_symbolize::Options;

    use super::*;
    use crate::process::ProcessTable;

    #[inline(never)]
    fn marker_function() -> u64 {
        std::hint::black_box(7)
    }

    fn raw_of_this_process() -> (RawProfile, u64) {
        let mut table = ProcessTable::new("/proc");
        let pid = std::process::id();
        let info = table.get(pid, 1);
        let addr = marker_function as *const () as u64;
        let mut raw = RawProfile::new(SystemTime::UNIX_EPOCH + Duration::from_secs(100));
        raw.end = raw.start + Duration::from_secs(10);
        let processes: FxHashMap<u32, Arc<ProcessInfo>> = [(pid, info)].into_iter().collect();
        let drained = [
            DrainedStack {
                pid,
                // Leaf, then an address outside any mapping.
                user: Arc::from(vec![addr + 1, 0x10]),
                kernel: Arc::from(vec![]),
                count: 3,
                off_cpu: None,
                end: Some(StackEnd::Complete),
            },
            DrainedStack {
                pid: 999_999_999,
                user: Arc::from(vec![0x1234]),
                kernel: Arc::from(vec![]),
                count: 2,
                off_cpu: None,
                end: Some(StackEnd::DepthLimit),
            },
            // 5 ms off CPU in a wait, under the same stack as the first.
            DrainedStack {
                pid,
                user: Arc::from(vec![addr + 1, 0x10]),
                kernel: Arc::from(vec![]),
                count: 5_000_000,
                off_cpu: Some(OffCpuReason::Wait),
                end: Some(StackEnd::Complete),
            },
        ];
        raw.add(&drained, &processes);
        raw.add(&drained[..1], &processes);
        (raw, addr)
    }

    /// Options of a 19 Hz agent without node, labels or debuginfod.
    fn options() -> BuildOptions {
        BuildOptions {
            period_ns: 1_000_000_000 / 19,
            node: String::new(),
            external_labels: Vec::new(),
            debuginfod: None,
            dwarf_cache: None,
            perf_maps: Default::default(),
            interpreted_frames: Default::default(),
        }
    }

    #[test]
    fn off_cpu_time_is_its_own_profile_with_the_reason() {
        let (raw, _) = raw_of_this_process();
        assert!(raw.has_off_cpu());
        let mut symbolizer = Symbolizer::new(Options::default());
        let options = options();
        let p = build(
            &raw,
            ProfileKind::OffCpu,
            &Filter::default(),
            &mut symbolizer,
            &options,
        );
        let s = |i: i64| p.string_table[i as usize].as_str();
        assert_eq!(
            (s(p.sample_type[0].r#type), s(p.sample_type[0].unit)),
            ("off_cpu", "nanoseconds")
        );
        assert_eq!(p.period, 1);
        assert_eq!(p.sample.len(), 1);
        assert_eq!(p.sample[0].value, [5_000_000]);
        let reason = p.sample[0]
            .label
            .iter()
            .find(|l| s(l.key) == "off_cpu_reason")
            .map(|l| s(l.str));
        assert_eq!(reason, Some("wait"));
    }

    #[test]
    fn an_address_of_one_object_in_two_processes_names_the_same_function() {
        // libc's `getpid`, here and in this test's parent, at its own address in each.
        let mut table = ProcessTable::new("/proc");
        let (ours, parent) = (std::process::id(), std::os::unix::process::parent_id());
        let (ours_info, parent_info) = (table.get(ours, 1), table.get(parent, 1));
        let addr = libc::getpid as *const () as u64;
        let (_, m) = ours_info.mapping_of(addr).expect("libc is mapped");
        let offset = addr - m.start + m.offset;
        let Some(theirs) = parent_info.mappings.iter().find(|p| {
            p.path == m.path && p.offset <= offset && offset - p.offset < p.end - p.start
        }) else {
            return; // A parent without this libc (a static runner): nothing to compare.
        };
        let their_addr = theirs.start + (offset - theirs.offset);
        let mut raw = RawProfile::new(SystemTime::UNIX_EPOCH);
        let stack = |pid, at: u64| DrainedStack {
            pid,
            user: Arc::from(vec![at]),
            kernel: Arc::from(vec![]),
            count: 1,
            off_cpu: None,
            end: Some(StackEnd::Complete),
        };
        let processes: FxHashMap<u32, Arc<ProcessInfo>> =
            [(ours, ours_info), (parent, parent_info)]
                .into_iter()
                .collect();
        raw.add(&[stack(ours, addr), stack(parent, their_addr)], &processes);
        let mut symbolizer = Symbolizer::new(Options::default());
        let p = build(
            &raw,
            ProfileKind::Cpu,
            &Filter::default(),
            &mut symbolizer,
            &options(),
        );
        let leaves: Vec<&proto::Location> = p
            .sample
            .iter()
            .map(|x| &p.location[x.location_id[0] as usize - 1])
            .collect();
        assert_eq!(leaves.len(), 2);
        assert_ne!(leaves[0].mapping_id, leaves[1].mapping_id);
        assert!(!leaves[0].line.is_empty());
        assert_eq!(leaves[0].line, leaves[1].line);
        let name =
            &p.string_table[p.function[leaves[0].line[0].function_id as usize - 1].name as usize];
        assert!(name.contains("getpid"), "{name}");
    }

    #[test]
    fn pprof_has_the_agent_profile_type_labels_and_symbols() {
        let (raw, addr) = raw_of_this_process();
        assert_eq!(raw.total(), 8);
        let mut symbolizer = Symbolizer::new(Options::default());
        let options = BuildOptions {
            node: "node-a".into(),
            external_labels: vec![("region".into(), "eu-1".into())],
            ..options()
        };
        let p = build(
            &raw,
            ProfileKind::Cpu,
            &Filter::default(),
            &mut symbolizer,
            &options,
        );
        let s = |i: i64| p.string_table[i as usize].as_str();
        assert_eq!(
            (s(p.sample_type[0].r#type), s(p.sample_type[0].unit)),
            ("samples", "count")
        );
        let pt = p.period_type.unwrap();
        assert_eq!((s(pt.r#type), s(pt.unit)), ("cpu", "nanoseconds"));
        assert_eq!(p.period, 52_631_578);
        assert_eq!(p.duration_nanos, 10_000_000_000);
        assert_eq!(p.sample.len(), 2);

        let ours = p
            .sample
            .iter()
            .find(|x| {
                x.label
                    .iter()
                    .any(|l| s(l.key) == "pid" && s(l.str) == std::process::id().to_string())
            })
            .unwrap();
        assert_eq!(ours.value, vec![6]);
        let names: Vec<&str> = ours.label.iter().map(|l| s(l.key)).collect();
        assert_eq!(names, ["pid", "comm", "executable", "node", "region"]);

        // The leaf is symbolized, demangled, and keeps its mapping and address.
        let leaf = &p.location[ours.location_id[0] as usize - 1];
        assert_eq!(leaf.address, addr + 1);
        let mapping = &p.mapping[leaf.mapping_id as usize - 1];
        assert!(mapping.build_id != 0 && mapping.has_functions);
        let f = &p.function[leaf.line.last().unwrap().function_id as usize - 1];
        assert!(
            s(f.name).ends_with("profile::tests::marker_function"),
            "{}",
            s(f.name)
        );

        // Outside any mapping: kept as a bare address, minus one (a return address).
        let bare = &p.location[ours.location_id[1] as usize - 1];
        assert_eq!(
            (bare.mapping_id, bare.address, bare.line.len()),
            (0, 0xf, 0)
        );

        // An unknown process keeps its pid and its unsymbolized frame.
        let other = p.sample.iter().find(|x| x.value == vec![2]).unwrap();
        assert_eq!(s(other.label[0].str), "999999999");
        assert!(
            p.location[other.location_id[0] as usize - 1]
                .line
                .is_empty()
        );

        // It encodes and decodes as a valid pprof.
        let bytes = parca_pprof::encode(&p, true);
        parca_pprof::decode(&bytes, &parca_pprof::DecodeOptions::default()).unwrap();
    }

    #[test]
    fn filters_by_pid_and_comm() {
        let (raw, _) = raw_of_this_process();
        let mut symbolizer = Symbolizer::new(Options::default());
        let options = BuildOptions {
            period_ns: 1,
            ..options()
        };
        let by_pid = Filter {
            pid: Some(999_999_999),
            comm: None,
        };
        assert_eq!(
            build(&raw, ProfileKind::Cpu, &by_pid, &mut symbolizer, &options)
                .sample
                .len(),
            1
        );
        let comm = raw.processes[&std::process::id()].comm.clone();
        let by_comm = Filter {
            pid: None,
            comm: Some(comm),
        };
        let p = build(&raw, ProfileKind::Cpu, &by_comm, &mut symbolizer, &options);
        assert_eq!(p.sample.len(), 1);
        assert_eq!(p.sample[0].value, vec![6]);
        let none = Filter {
            pid: None,
            comm: Some("no-such-comm".into()),
        };
        assert!(
            build(&raw, ProfileKind::Cpu, &none, &mut symbolizer, &options)
                .sample
                .is_empty()
        );
    }
}
