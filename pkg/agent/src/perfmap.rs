//! Names of JIT-compiled code from perf maps: `/tmp/perf-PID.map`, one `START SIZE name` line
//! (hexadecimal start and size) per compiled function, as Node.js (`--perf-basic-prof`),
//! Python 3.12+ (`-X perf`), JVMs with a perf-map agent and .NET (`DOTNET_PerfMapEnabled=1`)
//! write them. The file is read through `/proc/PID/root`, so a containerized process's own
//! `/tmp` is used, under the pid the process knows itself by. It only grows: each lookup reads
//! what was appended since the last one.

use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;

/// Entries kept per process; a runtime that keeps compiling past this keeps the first ones.
const MAX_ENTRIES_PER_PROCESS: usize = 1 << 20;
/// Processes whose maps are held; beyond it the least recently used is forgotten.
const MAX_PROCESSES: usize = 256;
/// A process that writes no perf map is looked at again after this (it may start one).
const LOOK_AGAIN_AFTER: Duration = Duration::from_secs(10);
/// An address not found reads what the process appended, at most this often.
const REREAD_AFTER: Duration = Duration::from_millis(100);
/// What the process appended is read at least this often (code recompiled at an address
/// already named).
const REFRESH_AFTER: Duration = Duration::from_secs(1);

/// The perf maps of the processes seen, read as they grow.
#[derive(Debug, Default)]
pub(crate) struct PerfMaps {
    maps: FxHashMap<u32, PerfMap>,
    /// Lookups so far, to tell which map was used least recently.
    clock: u64,
}

#[derive(Debug)]
struct PerfMap {
    /// None while the process writes no perf map.
    path: Option<PathBuf>,
    /// Bytes of the file already read (whole lines only).
    read_len: u64,
    /// The file's inode: another file at the path (the pid reused) starts over.
    inode: u64,
    /// (start, end, name), sorted by start once `sorted`.
    entries: Vec<(u64, u64, String)>,
    sorted: bool,
    last_used: u64,
    /// When the file was last read (or, without one, looked for).
    checked: Option<Instant>,
}

impl PerfMaps {
    /// The JIT function holding `addr` in process `pid`, if the process writes a perf map that
    /// names it.
    ///
    /// A profile looks up every JIT address of a window: the file is read again only when an
    /// address is not found in what was read (at most every [`REREAD_AFTER`], and at least
    /// every [`REFRESH_AFTER`] for code recompiled in place), and a process that writes no map
    /// is looked at again only after [`LOOK_AGAIN_AFTER`].
    pub(crate) fn lookup(&mut self, pid: u32, addr: u64) -> Option<&str> {
        self.clock += 1;
        let clock = self.clock;
        if !self.maps.contains_key(&pid) {
            if self.maps.len() >= MAX_PROCESSES
                && let Some(oldest) = self
                    .maps
                    .iter()
                    .min_by_key(|(_, m)| m.last_used)
                    .map(|(p, _)| *p)
            {
                self.maps.remove(&oldest);
            }
            self.maps.insert(
                pid,
                PerfMap {
                    path: None,
                    read_len: 0,
                    inode: 0,
                    entries: Vec::new(),
                    sorted: true,
                    last_used: clock,
                    checked: None,
                },
            );
        }
        let map = self.maps.get_mut(&pid)?;
        map.last_used = clock;
        if map.path.is_none() {
            if map
                .checked
                .is_some_and(|at| at.elapsed() < LOOK_AGAIN_AFTER)
            {
                return None;
            }
            map.path = map_path(pid);
            if map.path.is_none() {
                map.checked = Some(Instant::now());
                return None;
            }
            map.checked = None;
        }
        let stale =
            |map: &PerfMap, after: Duration| map.checked.is_none_or(|at| at.elapsed() >= after);
        if stale(map, REFRESH_AFTER) || (map.find(addr).is_none() && stale(map, REREAD_AFTER)) {
            map.read_new_lines();
        }
        map.find(addr)
    }
}

/// `/proc/PID/root/tmp/perf-NSPID.map`, where NSPID is the pid in the process's own namespace
/// (the last of `NSpid:` in its status), when the file exists.
fn map_path(pid: u32) -> Option<PathBuf> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let ns_pid = status
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))
        .and_then(|rest| rest.split_whitespace().last())
        .and_then(|p| p.parse::<u32>().ok())
        .unwrap_or(pid);
    let path = PathBuf::from(format!("/proc/{pid}/root/tmp/perf-{ns_pid}.map"));
    path.exists().then_some(path)
}

impl PerfMap {
    /// Reads the whole lines appended since the last read.
    fn read_new_lines(&mut self) {
        self.checked = Some(Instant::now());
        let Some(path) = &self.path else {
            return;
        };
        let Ok(mut file) = std::fs::File::open(path) else {
            return;
        };
        let Ok(metadata) = file.metadata() else {
            return;
        };
        use std::os::unix::fs::MetadataExt;
        let len = metadata.len();
        if metadata.ino() != self.inode || len < self.read_len {
            self.inode = metadata.ino();
            self.read_len = 0;
            self.entries.clear();
            self.sorted = true;
        }
        if len <= self.read_len || file.seek(SeekFrom::Start(self.read_len)).is_err() {
            return;
        }
        let mut new = Vec::new();
        if file
            .take(len - self.read_len)
            .read_to_end(&mut new)
            .is_err()
        {
            return;
        }
        // Only complete lines: the writer may be in the middle of one.
        let Some(end) = new.iter().rposition(|&b| b == b'\n') else {
            return;
        };
        self.read_len += end as u64 + 1;
        for line in String::from_utf8_lossy(&new[..end]).lines() {
            if self.entries.len() >= MAX_ENTRIES_PER_PROCESS {
                break;
            }
            if let Some(entry) = parse_line(line) {
                if self
                    .entries
                    .last()
                    .is_some_and(|(start, _, _)| *start > entry.0)
                {
                    self.sorted = false;
                }
                self.entries.push(entry);
            }
        }
    }

    fn find(&mut self, addr: u64) -> Option<&str> {
        if !self.sorted {
            // Stable: of two entries for one start (code recompiled in place), the later wins
            // below by being found last.
            self.entries.sort_by_key(|(start, _, _)| *start);
            self.sorted = true;
        }
        let i = self.entries.partition_point(|(start, _, _)| *start <= addr);
        self.entries[..i]
            .iter()
            .rev()
            .take(8)
            .find(|(start, end, _)| *start <= addr && addr < *end)
            .map(|(_, _, name)| name.as_str())
    }
}

/// `7f0c1c000040 2c LazyCompile:*hot /app/x.js:3` → (start, end, name).
fn parse_line(line: &str) -> Option<(u64, u64, String)> {
    let mut parts = line.splitn(3, ' ');
    let start = u64::from_str_radix(parts.next()?.trim_start_matches("0x"), 16).ok()?;
    let size = u64::from_str_radix(parts.next()?.trim_start_matches("0x"), 16).ok()?;
    let name = parts.next()?.trim();
    if name.is_empty() || size == 0 {
        return None;
    }
    Some((start, start.checked_add(size)?, name.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn reads_as_the_file_grows_and_finds_by_address() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("perf-1.map");
        let mut file = std::fs::File::create(&path).unwrap();
        writeln!(file, "1000 100 LazyCompile:*hot /app/x.js:3").unwrap();
        write!(file, "3000 10 half-written").unwrap();
        let mut map = PerfMap {
            path: Some(path.clone()),
            read_len: 0,
            inode: 0,
            entries: Vec::new(),
            sorted: true,
            last_used: 0,
            checked: None,
        };
        map.read_new_lines();
        assert_eq!(map.find(0x1010), Some("LazyCompile:*hot /app/x.js:3"));
        assert_eq!(map.find(0x1100), None);
        assert_eq!(map.find(0x3004), None, "an unfinished line is not read");
        writeln!(file, " line").unwrap();
        writeln!(file, "2000 0x20 Builtin:ArrayPush").unwrap();
        map.read_new_lines();
        assert_eq!(map.find(0x3004), Some("half-written line"));
        assert_eq!(map.find(0x2010), Some("Builtin:ArrayPush"));
        assert_eq!(parse_line("zz 10 x"), None);
        assert_eq!(parse_line("10 0 x"), None);
    }

    #[test]
    fn a_process_map_is_found_and_read_again_for_an_address_it_did_not_name() {
        // This process's own map, where a JIT would write it.
        let pid = std::process::id();
        let path = PathBuf::from(format!("/tmp/perf-{pid}.map"));
        let mut file = std::fs::File::create(&path).unwrap();
        writeln!(file, "1000 100 first").unwrap();
        let mut maps = PerfMaps::default();
        assert_eq!(maps.lookup(pid, 0x1010), Some("first"));
        writeln!(file, "2000 100 compiled later").unwrap();
        // Read again once REREAD_AFTER has passed since the last read.
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut found = None;
        while found.is_none() && Instant::now() < deadline {
            found = maps.lookup(pid, 0x2010).map(str::to_owned);
            std::thread::sleep(Duration::from_millis(10));
        }
        std::fs::remove_file(&path).unwrap();
        assert_eq!(found.as_deref(), Some("compiled later"));
        assert_eq!(
            maps.lookup(pid, 0x1010),
            Some("first"),
            "what was read stays"
        );
    }
}
