//! Processes: their executable mappings (with the object files open and their build ids), name,
//! executable and cgroup labels, read from `/proc/PID`; and the table of processes seen.
//!
//! A process is read when the BPF program announces its first sample, while it still runs, so
//! one that exits before the window ends keeps its labels and mappings; the object files stay
//! open (through `/proc/PID/root`, so containers' files are found) until no process maps them,
//! so they can be symbolized after the process is gone.

use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parca_symbolize::{
    BuildId, DebugFileQuery, InterpreterRuntime, JvmRuntime, ObjectKey, PythonRuntime, V8Runtime,
    find_debug_file, read_debug_needs,
};
use rustc_hash::FxHashMap;

/// What is known of a process.
#[derive(Debug, Default)]
pub struct ProcessInfo {
    /// The process id (thread group id).
    pub pid: u32,
    /// Its name (`/proc/PID/comm`, else the sampled thread's name from BPF).
    pub comm: String,
    /// The path of its executable as the process sees it (`/proc/PID/exe`).
    pub executable: Option<String>,
    /// Its cgroup (v2 path, else the systemd hierarchy's).
    pub cgroup: Option<String>,
    /// The systemd unit its cgroup names (`nginx.service`, `session-3.scope`).
    pub systemd_unit: Option<String>,
    /// The container id its cgroup names (64 hex digits of Docker, containerd, CRI-O, podman).
    pub container_id: Option<String>,
    /// Its executable file mappings, sorted by start address.
    pub mappings: Vec<Mapping>,
    /// When it started, in clock ticks since boot (`/proc/PID/stat` field 22); with the pid,
    /// it names the process for its whole life (pids are reused).
    pub start_time_ticks: u64,
    /// Whether `/proc/PID` could be read (`false`: it was gone; only `comm` is known).
    pub readable: bool,
    /// Which read of `/proc` this is (counting up per table): tells a reread apart.
    pub read_no: u64,
}

impl ProcessInfo {
    /// The language runtime it runs and its version (`("python", "3.11.2")`, `("php",
    /// "8.2.36")`), when one of its objects is an interpreter the agent recognizes.
    pub fn runtime(&self) -> Option<(&'static str, &str)> {
        self.python()
            .map(|(_, python)| ("python", python.version.as_str()))
            .or_else(|| self.php().map(|(_, php)| ("php", php.version.as_str())))
            .or_else(|| self.ruby().map(|(_, ruby)| ("ruby", ruby.version.as_str())))
            .or_else(|| self.v8().map(|(_, v8)| ("node", v8.version.as_str())))
            .or_else(|| self.jvm().map(|(_, jvm)| ("java", jvm.version.as_str())))
    }

    /// The HotSpot JVM it runs, and the mapping of its library.
    pub fn jvm(&self) -> Option<(&Mapping, &JvmRuntime)> {
        self.mappings
            .iter()
            .find_map(|m| Some((m, m.object.as_ref()?.jvm.as_ref()?)))
    }

    /// The V8 (Node.js) it runs, and the mapping of its executable.
    pub fn v8(&self) -> Option<(&Mapping, &V8Runtime)> {
        self.mappings
            .iter()
            .find_map(|m| Some((m, m.object.as_ref()?.v8.as_ref()?)))
    }

    /// The Ruby interpreter it runs, and the mapping of its code (`libruby`'s, or the
    /// executable's).
    pub fn ruby(&self) -> Option<(&Mapping, &InterpreterRuntime)> {
        self.mappings
            .iter()
            .find_map(|m| Some((m, m.object.as_ref()?.ruby.as_ref()?)))
    }

    /// The PHP interpreter it runs, and the mapping of its code (the executable's, or
    /// `libphp`'s).
    pub fn php(&self) -> Option<(&Mapping, &InterpreterRuntime)> {
        self.mappings
            .iter()
            .find_map(|m| Some((m, m.object.as_ref()?.php.as_ref()?)))
    }

    /// The CPython interpreter it runs, and the mapping of its code (the executable's, or
    /// libpython's when the program loads the library).
    pub fn python(&self) -> Option<(&Mapping, &PythonRuntime)> {
        self.mappings
            .iter()
            .find_map(|m| Some((m, m.object.as_ref()?.python.as_ref()?)))
    }

    /// Whether `addr` is in an interpreter's evaluation loop (CPython's
    /// `_PyEval_EvalFrameDefault`, PHP's `execute_ex`): a native frame there runs interpreted
    /// frames.
    pub fn in_eval_loop(&self, addr: u64) -> bool {
        let Some((_, mapping)) = self.mapping_of(addr) else {
            return false;
        };
        let Some(object) = mapping.object.as_ref() else {
            return false;
        };
        let offset = addr - mapping.start + mapping.offset;
        if let Some(python) = &object.python {
            return python
                .vaddr_of_file_offset(offset)
                .is_some_and(|vaddr| python.in_eval_loop(vaddr));
        }
        [&object.php, &object.ruby].into_iter().flatten().any(|vm| {
            vm.vaddr_of_file_offset(offset)
                .is_some_and(|vaddr| vm.in_eval_loop(vaddr))
        })
    }
}

/// `/proc/PID/stat`'s start time: the 22nd field, counted after the parenthesized name (which
/// may itself hold spaces and parentheses).
fn start_time(stat: &str) -> Option<u64> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    // Fields from the 3rd (state) on; the start time is the 22nd.
    after_name.split_whitespace().nth(22 - 3)?.parse().ok()
}

/// Which processes are profiled: those of some systemd units (`--systemd-units`), and a
/// stable share of processes (`--sampling-ratio`). Samples of others are counted and dropped
/// before they are unwound.
#[derive(Debug, Clone)]
pub struct ProcessFilter {
    /// Units such as `nginx.service`; empty: every process.
    pub systemd_units: Vec<String>,
    /// From 0 to 1: the share of processes profiled, chosen by a hash of pid and start time,
    /// so that a process is in or out for its whole life and restarts are chosen afresh.
    pub sampling_ratio: f64,
}

impl Default for ProcessFilter {
    fn default() -> Self {
        ProcessFilter {
            systemd_units: Vec::new(),
            sampling_ratio: 1.0,
        }
    }
}

impl ProcessFilter {
    /// Whether everything is profiled.
    pub fn admits_all(&self) -> bool {
        self.systemd_units.is_empty() && self.sampling_ratio >= 1.0
    }

    /// Whether the process is profiled.
    pub fn admits(&self, info: &ProcessInfo) -> bool {
        if !self.systemd_units.is_empty()
            && !info
                .systemd_unit
                .as_ref()
                .is_some_and(|unit| self.systemd_units.contains(unit))
        {
            return false;
        }
        self.sampling_ratio >= 1.0 || share(info.pid, info.start_time_ticks) < self.sampling_ratio
    }
}

/// A number in [0, 1) that depends only on the process's identity (splitmix64's finalizer:
/// neighbouring pids land far apart).
fn share(pid: u32, start_time_ticks: u64) -> f64 {
    let mut x = (u64::from(pid) << 32) ^ start_time_ticks.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^= x >> 31;
    // The top 53 bits as a fraction.
    (x >> 11) as f64 / (1u64 << 53) as f64
}

impl ProcessInfo {
    /// The mapping holding `addr`.
    pub fn mapping_of(&self, addr: u64) -> Option<(usize, &Mapping)> {
        let i = self
            .mappings
            .partition_point(|m| m.start <= addr)
            .checked_sub(1)?;
        let m = &self.mappings[i];
        (addr < m.end).then_some((i, m))
    }
}

/// One executable mapping of `/proc/PID/maps`.
#[derive(Debug, Clone)]
pub struct Mapping {
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// File offset of `start`.
    pub offset: u64,
    /// The path as the process sees it (`[vdso]` and the like for special mappings, empty for
    /// anonymous code such as JIT output).
    pub path: String,
    /// The object file, open, when it could be opened.
    pub object: Option<Arc<MappedObject>>,
}

/// An object file mapped by some process, kept open so it can be read after the process exits.
#[derive(Debug)]
pub struct MappedObject {
    /// Its cache key: build id, else device and inode.
    pub key: ObjectKey,
    /// Its GNU build id.
    pub build_id: Option<BuildId>,
    /// The open file.
    pub file: File,
    /// The path it was opened by (`/proc/PID/root/…`), for messages.
    pub opened_as: PathBuf,
    /// Its separate debug file, open, when it lacks `.symtab` or DWARF and one was found
    /// (build id under the debug directories, or `.gnu_debuglink`).
    pub debug_file: Option<(File, PathBuf)>,
    /// Whether it lacks `.symtab` or DWARF (so a debug file, perhaps from debuginfod, helps).
    pub wants_debug_file: bool,
    /// What it holds of a CPython interpreter, when it is one (`python3.X` or `libpython3.X`).
    pub python: Option<PythonRuntime>,
    /// What it holds of a PHP interpreter, when it is one (`php8.X`, `php-fpm8.X`, `libphp`).
    pub php: Option<InterpreterRuntime>,
    /// What it holds of a Ruby interpreter, when it is one (`libruby-3.X.so`, a static `ruby`).
    pub ruby: Option<InterpreterRuntime>,
    /// What it holds of V8, when it is Node.js (`node`, `nodejs`).
    pub v8: Option<V8Runtime>,
    /// What it holds of HotSpot, when it is the JVM's library (`libjvm.so`).
    pub jvm: Option<JvmRuntime>,
}

/// Processes seen, by pid.
#[derive(Debug)]
pub struct ProcessTable {
    proc_root: PathBuf,
    entries: FxHashMap<u32, Entry>,
    /// Objects by the (device, inode) of `/proc/PID/maps`, shared while any process maps them.
    objects: FxHashMap<(String, u64), Weak<MappedObject>>,
    /// Number of `/proc/PID` reads, for metrics.
    reads: u64,
    /// Where separate debug files are looked for (`/usr/lib/debug`).
    debug_dirs: Vec<PathBuf>,
}

#[derive(Debug)]
struct Entry {
    info: Arc<ProcessInfo>,
    last_sampled_window: u64,
    read_at: Instant,
    /// Read when the process had just started (an `exec` announces it before the dynamic
    /// loader has mapped its libraries): read once more on a later sample.
    young: bool,
}

/// A process younger than this when read is read once more ([`Entry::young`]).
const YOUNG: Duration = Duration::from_secs(1);

/// How long after the first read of a young process the second one comes at the earliest.
const SETTLE_AFTER: Duration = Duration::from_millis(200);

impl ProcessTable {
    /// An empty table reading processes under `proc_root` (normally `/proc`).
    pub fn new(proc_root: impl Into<PathBuf>) -> ProcessTable {
        ProcessTable {
            proc_root: proc_root.into(),
            entries: FxHashMap::default(),
            objects: FxHashMap::default(),
            reads: 0,
            debug_dirs: vec![PathBuf::from("/usr/lib/debug")],
        }
    }

    /// Looks for separate debug files under `dirs` (default `/usr/lib/debug`), after the
    /// same directories inside a containerized process's root.
    pub fn with_debug_dirs(mut self, dirs: Vec<PathBuf>) -> ProcessTable {
        self.debug_dirs = dirs;
        self
    }

    /// A process was announced (first sample, or first since exec): reads it now.
    pub fn announce(&mut self, pid: u32, comm: &str, window: u64) {
        let info = Arc::new(self.read(pid, comm));
        // A process is announced again when a thread is sampled after its leader exited (the
        // program forgets it then): what was read of it while it lived stays.
        if let Some(entry) = self.entries.get_mut(&pid)
            && !replaces(&info, &entry.info)
        {
            entry.last_sampled_window = window;
            return;
        }
        self.insert(pid, info, window);
    }

    fn insert(&mut self, pid: u32, info: Arc<ProcessInfo>, window: u64) {
        let young = info.readable && self.is_young(info.start_time_ticks);
        self.entries.insert(
            pid,
            Entry {
                info,
                last_sampled_window: window,
                read_at: Instant::now(),
                young,
            },
        );
    }

    /// Whether a process started `start_time_ticks` after boot is younger than [`YOUNG`].
    fn is_young(&self, start_time_ticks: u64) -> bool {
        // SAFETY: sysconf has no preconditions.
        let ticks_per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        let uptime = std::fs::read_to_string(self.proc_root.join("uptime"))
            .ok()
            .and_then(|t| t.split_whitespace().next()?.parse::<f64>().ok());
        match (uptime, u64::try_from(ticks_per_second)) {
            (Some(uptime), Ok(hz)) if hz > 0 => {
                uptime - (start_time_ticks as f64 / hz as f64) < YOUNG.as_secs_f64()
            }
            _ => false,
        }
    }

    /// Reads the process `pid` again if it was last read at least `min_age` ago (its mappings
    /// changed: a `dlopen`); `None` when it was read more recently or is not held.
    pub fn reread(&mut self, pid: u32, window: u64, min_age: Duration) -> Option<Arc<ProcessInfo>> {
        let entry = self.entries.get(&pid)?;
        if entry.read_at.elapsed() < min_age || !entry.info.readable {
            return None;
        }
        let comm = entry.info.comm.clone();
        let info = Arc::new(self.read(pid, &comm));
        if !replaces(&info, &self.entries[&pid].info) {
            // Gone: keep what was known.
            return None;
        }
        self.insert(pid, Arc::clone(&info), window);
        Some(info)
    }

    /// The process `pid`, read now if it was not announced.
    pub fn get(&mut self, pid: u32, window: u64) -> Arc<ProcessInfo> {
        if let Some(entry) = self.entries.get_mut(&pid) {
            entry.last_sampled_window = window;
            if !entry.young || entry.read_at.elapsed() < SETTLE_AFTER {
                return entry.info.clone();
            }
            // Read just after it started: its libraries may have been mapped since. A return
            // address in them would not prompt a reread (only the sampled address does).
            entry.young = false;
            let comm = entry.info.comm.clone();
            let info = Arc::new(self.read(pid, &comm));
            if !replaces(&info, &self.entries[&pid].info) {
                return self.entries[&pid].info.clone();
            }
            self.insert(pid, Arc::clone(&info), window);
            if let Some(entry) = self.entries.get_mut(&pid) {
                entry.young = false;
            }
            return info;
        }
        let info = Arc::new(self.read(pid, ""));
        self.insert(pid, Arc::clone(&info), window);
        info
    }

    /// Forgets processes not sampled since `window - keep_windows`, and objects no process
    /// maps any more.
    pub fn expire(&mut self, window: u64, keep_windows: u64) {
        self.entries
            .retain(|_, e| e.last_sampled_window + keep_windows >= window);
        self.objects.retain(|_, o| o.strong_count() > 0);
    }

    /// Whether process `pid` is held.
    pub fn contains(&self, pid: u32) -> bool {
        self.entries.contains_key(&pid)
    }

    /// Number of processes held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no process is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Number of object files held open.
    pub fn n_objects(&self) -> usize {
        self.objects
            .values()
            .filter(|o| o.strong_count() > 0)
            .count()
    }

    /// Number of `/proc/PID` reads so far.
    pub fn reads(&self) -> u64 {
        self.reads
    }

    fn read(&mut self, pid: u32, comm_hint: &str) -> ProcessInfo {
        self.reads += 1;
        let dir = self.proc_root.join(pid.to_string());
        let comm = std::fs::read_to_string(dir.join("comm"))
            .map(|s| s.trim_end_matches('\n').to_owned())
            .ok();
        let readable = comm.is_some();
        let comm = comm.unwrap_or_else(|| comm_hint.to_owned());
        let executable = std::fs::read_link(dir.join("exe")).ok().map(|p| {
            let p = p.to_string_lossy();
            p.strip_suffix(" (deleted)").unwrap_or(&p).to_owned()
        });
        let cgroup = std::fs::read_to_string(dir.join("cgroup"))
            .ok()
            .and_then(|text| cgroup_path(&text));
        let (systemd_unit, container_id) = match &cgroup {
            Some(path) => (systemd_unit(path), container_id(path)),
            None => (None, None),
        };
        let start_time_ticks = std::fs::read_to_string(dir.join("stat"))
            .ok()
            .and_then(|stat| start_time(&stat))
            .unwrap_or(0);
        let mappings = std::fs::read_to_string(dir.join("maps"))
            .map(|text| self.mappings(&dir, &text))
            .unwrap_or_default();
        ProcessInfo {
            pid,
            comm,
            executable,
            cgroup,
            systemd_unit,
            container_id,
            mappings,
            start_time_ticks,
            readable,
            read_no: self.reads,
        }
    }

    fn mappings(&mut self, dir: &Path, maps: &str) -> Vec<Mapping> {
        let mut out = Vec::new();
        for line in parse_maps(maps) {
            let object = if line.path.starts_with('/') && line.inode != 0 {
                self.object(dir, &line)
            } else if line.path == "[vdso]" {
                vdso_object()
            } else {
                None
            };
            out.push(Mapping {
                start: line.start,
                end: line.end,
                offset: line.offset,
                path: line.path.to_owned(),
                object,
            });
        }
        out.sort_by_key(|m| m.start);
        out
    }

    /// The object of a file mapping, opened once per (device, inode) while mapped anywhere.
    #[expect(
        clippy::too_many_lines,
        reason = "reads one mapped object's identity (build id, debug link, runtimes) once, sharing the open file"
    )]
    fn object(&mut self, dir: &Path, line: &MapsLine<'_>) -> Option<Arc<MappedObject>> {
        let id = (line.dev.to_owned(), line.inode);
        if let Some(object) = self.objects.get(&id).and_then(Weak::upgrade) {
            return Some(object);
        }
        let path = line.path.strip_suffix(" (deleted)").unwrap_or(line.path);
        // Through the process's root, so a container's files are found; a deleted file only
        // through map_files.
        let candidates = [
            dir.join("root").join(path.trim_start_matches('/')),
            dir.join("map_files")
                .join(format!("{:x}-{:x}", line.start, line.end)),
        ];
        let (file, opened_as) = candidates
            .into_iter()
            .find_map(|p| File::open(&p).ok().map(|f| (f, p)))?;
        let meta = file.metadata().ok()?;
        let needs = read_debug_needs(&file, &opened_as).unwrap_or_default();
        let build_id = needs.build_id.clone();
        let debug_file = if needs.wants_debug_file() {
            // The process's own debug directories first (a container's), then the node's.
            let root = dir.join("root");
            let in_container = std::fs::read_link(&root).is_ok_and(|r| r != Path::new("/"));
            let mut dirs = Vec::new();
            if in_container {
                dirs.extend(
                    self.debug_dirs
                        .iter()
                        .map(|d| root.join(d.strip_prefix("/").unwrap_or(d))),
                );
            }
            dirs.extend(self.debug_dirs.iter().cloned());
            let in_process = Path::new(path).parent();
            find_debug_file(&DebugFileQuery {
                needs: &needs,
                object_path: &opened_as,
                object_dir: opened_as.parent(),
                object_dir_in_process: in_process,
                debug_dirs: &dirs,
            })
        } else {
            None
        };
        let key = match &build_id {
            Some(id) => ObjectKey::BuildId(id.clone()),
            None => ObjectKey::File {
                dev: meta.dev(),
                inode: meta.ino(),
            },
        };
        // Only objects named like an interpreter are looked into (their dynamic symbols).
        let python = Path::new(path)
            .file_name()
            .is_some_and(|n| n.to_string_lossy().contains("python"))
            .then(|| {
                parca_symbolize::read_python_runtime(&file, &opened_as)
                    .ok()
                    .flatten()
            })
            .flatten()
            .map(|mut python| {
                // A debug file's symbol table also names the loop's `.cold` part, which the
                // stripped object does not (Debian's python3.11 with python3.11-dbg).
                if let Some((debug, debug_path)) = &debug_file
                    && let Ok(Some(from_debug)) =
                        parca_symbolize::read_python_runtime(debug, debug_path)
                {
                    for range in from_debug.eval_loop {
                        if !python.eval_loop.contains(&range) {
                            python.eval_loop.push(range);
                        }
                    }
                }
                python
            });
        let php = runtime_in(
            path,
            |n| n.contains("php"),
            || parca_symbolize::read_php_runtime(&file, &opened_as),
        );
        let ruby = runtime_in(
            path,
            |n| n.contains("ruby"),
            || parca_symbolize::read_ruby_runtime(&file, &opened_as),
        );
        let v8 = runtime_in(
            path,
            |n| n.starts_with("node"),
            || parca_symbolize::read_v8_runtime(&file, &opened_as),
        );
        let jvm = runtime_in(
            path,
            |n| n.starts_with("libjvm"),
            || parca_symbolize::read_jvm_runtime(&file, &opened_as),
        );
        let object = Arc::new(MappedObject {
            key,
            build_id,
            file,
            opened_as,
            debug_file,
            wants_debug_file: needs.wants_debug_file(),
            python,
            php,
            ruby,
            v8,
            jvm,
        });
        self.objects.insert(id, Arc::downgrade(&object));
        Some(object)
    }
}

/// The kernel's vDSO as an object file, for unwinding (its `.eh_frame`) and symbolizing the
/// frames of every 64-bit process in it: the image is the same in all of them, so the agent's
/// own copy is read once (`/proc/self/mem`) into an unnamed temporary file. `None` when that
/// fails.
pub(crate) fn vdso_object() -> Option<Arc<MappedObject>> {
    static VDSO: std::sync::OnceLock<Option<Arc<MappedObject>>> = std::sync::OnceLock::new();
    VDSO.get_or_init(|| {
        use std::io::Write;
        use std::os::unix::fs::{FileExt, OpenOptionsExt};
        let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
        let line = parse_maps(&maps).find(|l| l.path == "[vdso]")?;
        let len = usize::try_from(line.end.checked_sub(line.start)?).ok()?;
        if len > 1 << 20 {
            return None;
        }
        let mut image = vec![0u8; len];
        std::fs::File::open("/proc/self/mem")
            .ok()?
            .read_exact_at(&mut image, line.start)
            .ok()?;
        // O_TMPFILE: a file with no name, gone with its last descriptor.
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_TMPFILE)
            .open(std::env::temp_dir())
            .ok()?;
        file.write_all(&image).ok()?;
        let opened_as = PathBuf::from("[vdso]");
        let build_id = parca_symbolize::read_build_id(&file, &opened_as).ok()??;
        Some(Arc::new(MappedObject {
            key: ObjectKey::BuildId(build_id.clone()),
            build_id: Some(build_id),
            file,
            opened_as,
            debug_file: None,
            wants_debug_file: false,
            python: None,
            php: None,
            ruby: None,
            v8: None,
            jvm: None,
        }))
    })
    .clone()
}

/// What `read` finds of a runtime in the object at `path`, when its file name passes `named`
/// (only such objects are read for it); `None` when it holds none or cannot be read.
fn runtime_in<T, E>(
    path: &str,
    named: impl Fn(&str) -> bool,
    read: impl FnOnce() -> Result<Option<T>, E>,
) -> Option<T> {
    let name = Path::new(path).file_name()?.to_string_lossy();
    if !named(&name) {
        return None;
    }
    read().ok().flatten()
}

/// Whether a new read of a process replaces the one held: not when the process is gone, nor
/// when it is exiting (its leader a zombie: `/proc/PID` readable, its memory map empty).
fn replaces(new: &ProcessInfo, held: &ProcessInfo) -> bool {
    new.readable && (held.mappings.is_empty() || !new.mappings.is_empty())
}

/// One executable line of `/proc/PID/maps`.
#[derive(Debug, PartialEq, Eq)]
struct MapsLine<'a> {
    start: u64,
    end: u64,
    offset: u64,
    dev: &'a str,
    inode: u64,
    path: &'a str,
}

/// The executable mappings of `/proc/PID/maps` text; malformed lines are skipped.
fn parse_maps(text: &str) -> impl Iterator<Item = MapsLine<'_>> {
    text.lines().filter_map(|line| {
        // start-end perms offset dev inode [path, which may hold spaces]
        let mut rest = line;
        let mut field = || {
            let rest_trim = rest.trim_start();
            let end = rest_trim.find(' ').unwrap_or(rest_trim.len());
            let (f, r) = rest_trim.split_at(end);
            rest = r;
            f
        };
        let range = field();
        let perms = field();
        let offset = field();
        let dev = field();
        let inode = field();
        let path = rest.trim();
        if !perms.contains('x') {
            return None;
        }
        let (start, end) = range.split_once('-')?;
        Some(MapsLine {
            start: u64::from_str_radix(start, 16).ok()?,
            end: u64::from_str_radix(end, 16).ok()?,
            offset: u64::from_str_radix(offset, 16).ok()?,
            dev,
            inode: inode.parse().ok()?,
            path,
        })
    })
}

/// The cgroup path of `/proc/PID/cgroup`: the v2 one (`0::/…`) unless it is the root, else the
/// systemd hierarchy's (`name=systemd`), else the first non-root one.
fn cgroup_path(text: &str) -> Option<String> {
    let mut v2 = None;
    let mut systemd = None;
    let mut other = None;
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if path.is_empty() || path == "/" {
            continue;
        }
        if controllers.is_empty() {
            v2 = Some(path);
        } else if controllers == "name=systemd" {
            systemd = Some(path);
        } else if other.is_none() {
            other = Some(path);
        }
    }
    v2.or(systemd).or(other).map(str::to_owned)
}

/// The innermost systemd unit a cgroup path names: a `.service`, or a `.scope` that is not a
/// container's.
fn systemd_unit(path: &str) -> Option<String> {
    path.rsplit('/')
        .find(|c| {
            c.ends_with(".service")
                || (c.ends_with(".scope") && container_in_component(c).is_none())
        })
        .map(str::to_owned)
}

/// The container id in a cgroup path: 64 hex digits as a whole component (`/docker/<id>`,
/// `/kubepods/…/<id>`) or inside one (`docker-<id>.scope`, `cri-containerd-<id>.scope`,
/// `crio-<id>.scope`, `libpod-<id>.scope`).
fn container_id(path: &str) -> Option<String> {
    path.rsplit('/')
        .find_map(container_in_component)
        .map(str::to_owned)
}

fn container_in_component(component: &str) -> Option<&str> {
    let c = component.strip_suffix(".scope").unwrap_or(component);
    let id = c.rsplit('-').next()?;
    (id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit())).then_some(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_time_after_a_name_with_spaces_and_parentheses() {
        let stat = "4242 (a (weird) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 1 0 \
                    987654 1000 200 18446744073709551615";
        assert_eq!(start_time(stat), Some(987_654));
        assert_eq!(start_time("garbage"), None);
        let own = std::fs::read_to_string("/proc/self/stat").unwrap();
        assert!(start_time(&own).is_some_and(|t| t > 0));
    }

    #[test]
    fn filter_by_unit_and_a_stable_share() {
        let process = |pid: u32, unit: Option<&str>| ProcessInfo {
            pid,
            systemd_unit: unit.map(str::to_owned),
            start_time_ticks: 1000 + u64::from(pid),
            ..ProcessInfo::default()
        };
        let units = ProcessFilter {
            systemd_units: vec!["nginx.service".into()],
            ..ProcessFilter::default()
        };
        assert!(units.admits(&process(1, Some("nginx.service"))));
        assert!(!units.admits(&process(1, Some("sshd.service"))));
        assert!(!units.admits(&process(1, None)));
        let half = ProcessFilter {
            sampling_ratio: 0.5,
            ..ProcessFilter::default()
        };
        let admitted: Vec<bool> = (1..=10_000)
            .map(|pid| half.admits(&process(pid, None)))
            .collect();
        let n = admitted.iter().filter(|a| **a).count();
        assert!((4_500..=5_500).contains(&n), "{n} of 10000");
        // The same process is chosen the same way every time.
        let again: Vec<bool> = (1..=10_000)
            .map(|pid| half.admits(&process(pid, None)))
            .collect();
        assert_eq!(admitted, again);
        assert!(ProcessFilter::default().admits_all());
    }

    #[test]
    fn maps_lines_keep_executable_ones_with_spaces_in_paths() {
        let text = "\
55d4c8a00000-55d4c8a02000 r--p 00000000 fd:01 131 /usr/bin/cat
55d4c8a02000-55d4c8a07000 r-xp 00002000 fd:01 131 /usr/bin/cat
7f0000000000-7f0000001000 r-xp 00000000 00:00 0 
7ffd1a7f0000-7ffd1a7f2000 r-xp 00000000 00:00 0                          [vdso]
7f1000000000-7f1000010000 r-xp 00001000 08:02 77 /opt/my app/lib.so (deleted)
bogus line
";
        let lines: Vec<_> = parse_maps(text).collect();
        assert_eq!(lines.len(), 4);
        assert_eq!(
            lines[0],
            MapsLine {
                start: 0x55d4c8a02000,
                end: 0x55d4c8a07000,
                offset: 0x2000,
                dev: "fd:01",
                inode: 131,
                path: "/usr/bin/cat"
            }
        );
        assert_eq!(lines[1].path, "");
        // The vDSO is an object of its own, with a build id.
        let vdso = vdso_object().expect("this process has a vDSO");
        assert!(vdso.build_id.is_some());
        assert_eq!(lines[2].path, "[vdso]");
        assert_eq!(lines[3].path, "/opt/my app/lib.so (deleted)");
    }

    #[test]
    fn cgroup_labels() {
        let v2 = "0::/system.slice/nginx.service\n";
        let p = cgroup_path(v2).unwrap();
        assert_eq!(systemd_unit(&p).as_deref(), Some("nginx.service"));
        assert_eq!(container_id(&p), None);

        let hybrid =
            "12:memory:/foo\n1:name=systemd:/user.slice/user-0.slice/session-3.scope\n0::/\n";
        let p = cgroup_path(hybrid).unwrap();
        assert_eq!(p, "/user.slice/user-0.slice/session-3.scope");
        assert_eq!(systemd_unit(&p).as_deref(), Some("session-3.scope"));

        let id = "a".repeat(64);
        let docker = format!("0::/system.slice/docker-{id}.scope\n");
        let p = cgroup_path(&docker).unwrap();
        assert_eq!(container_id(&p).as_deref(), Some(id.as_str()));
        assert_eq!(systemd_unit(&p), None, "a container scope is no unit");

        let k8s = format!("0::/kubepods/burstable/pod1234/{id}\n");
        assert_eq!(
            container_id(&cgroup_path(&k8s).unwrap()).as_deref(),
            Some(id.as_str())
        );
        assert_eq!(cgroup_path("0::/\n"), None);
        assert_eq!(cgroup_path("garbage"), None);
    }

    #[test]
    fn reads_this_process() {
        let mut table = ProcessTable::new("/proc");
        let pid = std::process::id();
        let info = table.get(pid, 1);
        assert!(info.readable);
        assert!(!info.comm.is_empty());
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        assert_eq!(info.executable.as_deref(), exe.to_str());
        // Its own code is mapped, open, and has a build id.
        let here = reads_this_process as *const () as u64;
        let (_, m) = info.mapping_of(here).unwrap();
        let object = m.object.as_ref().unwrap();
        assert!(object.build_id.is_some());
        assert!(matches!(object.key, ObjectKey::BuildId(_)));
        // Objects are shared between reads of processes mapping the same file.
        table.announce(pid, "x", 1);
        let again = table.get(pid, 2);
        let (_, m2) = again.mapping_of(here).unwrap();
        assert!(Arc::ptr_eq(object, m2.object.as_ref().unwrap()));
        table.expire(10, 3);
        assert!(table.is_empty());
    }

    /// A process read right after its `exec` is read again on a later sample: by then the
    /// dynamic loader has mapped its libraries, whose return addresses would otherwise stay
    /// unknown (only a sampled address in no mapping prompts a reread).
    #[test]
    fn a_young_process_is_read_again_once() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .expect("run sleep");
        let pid = child.id();
        let mut table = ProcessTable::new("/proc");
        table.announce(pid, "sleep", 1);
        let first = table.get(pid, 1);
        assert!(table.entries[&pid].young, "just started");
        std::thread::sleep(SETTLE_AFTER);
        let second = table.get(pid, 2);
        assert!(second.read_no > first.read_no, "read again");
        let third = table.get(pid, 3);
        assert_eq!(third.read_no, second.read_no, "only once");
        assert!(!table.is_young(0), "a process started at boot is not young");
        let _ = child.kill();
        let _ = child.wait();
    }

    #[test]
    fn a_process_announced_again_once_gone_keeps_what_was_read() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id();
        let mut table = ProcessTable::new("/proc");
        table.announce(pid, "sleep", 1);
        assert!(table.get(pid, 1).readable);
        let _ = child.kill();
        let _ = child.wait();
        table.announce(pid, "sleep", 2);
        let info = table.get(pid, 2);
        assert!(info.readable, "the reading of the living process stays");
        assert!(!info.mappings.is_empty());
    }

    #[test]
    fn a_gone_process_keeps_the_announced_name() {
        let mut table = ProcessTable::new("/proc");
        // pid_max is at most 2^22: this pid cannot exist.
        table.announce(u32::MAX - 1, "shortlived", 1);
        let info = table.get(u32::MAX - 1, 1);
        assert!(!info.readable);
        assert_eq!(info.comm, "shortlived");
        assert!(info.mappings.is_empty());
    }
}
