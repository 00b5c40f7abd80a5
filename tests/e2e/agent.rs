//! The eBPF agent end to end, for real: a `parca-agent` process samples real C, Rust and Go
//! programs (`tests/targets/agent/`) and a syscall-heavy one; its profiles must attribute at least
//! 90% of each program's samples to its hot call chain with demangled names, show kernel frames,
//! keep processes that exit inside the window, and reach a real `parca` server both by scraping
//! and by push. It must refuse clearly without privileges or BTF and leave nothing attached.
//!
//! These tests need root (or CAP_BPF and CAP_PERFMON) and a kernel with BTF; without them they
//! say why on stderr and pass, except under `PARCA_REQUIRE_BPF=1` (CI, which runs as root),
//! where that is a failure. One agent runs at a time (`support::exclusive`): they all sample the
//! whole machine.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use parca_pprof::proto;

use crate::server_harness::{Process, Server, encode, free_port, http_get, parca_binary, poll};

/// Sampling rate of the tests: high enough for a few hundred samples per target in 5 s.
const HZ: u64 = 99;

fn bpf_required() -> bool {
    std::env::var_os("PARCA_REQUIRE_BPF").is_some_and(|v| !v.is_empty() && v != "0")
}

/// Why BPF cannot be used here, if it cannot.
fn bpf_unavailable() -> Option<String> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let caps = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0);
    let has = |bit: u32| caps & (1 << bit) != 0;
    // CAP_SYS_ADMIN = 21, CAP_PERFMON = 38, CAP_BPF = 39.
    if !(has(21) || (has(38) && has(39))) {
        return Some(
            "not root: loading BPF and sampling every CPU needs CAP_BPF and CAP_PERFMON (run the \
             tests as root)"
                .into(),
        );
    }
    if !Path::new("/sys/kernel/btf/vmlinux").exists() {
        return Some("the kernel has no BTF (/sys/kernel/btf/vmlinux is missing)".into());
    }
    None
}

/// Says why `test` is skipped (or fails under `PARCA_REQUIRE_BPF=1`); `true` when it can run.
pub(crate) fn can_run(test: &str) -> bool {
    let Some(why) = bpf_unavailable() else {
        return true;
    };
    assert!(
        !bpf_required(),
        "PARCA_REQUIRE_BPF is set but {test} cannot run: {why}"
    );
    say(&format!("SKIP: {test}: {why}"));
    false
}

pub(crate) fn say(line: &str) {
    #[allow(clippy::print_stderr)]
    {
        eprintln!("{line}");
    }
}

/// The `parca-agent` binary: `$PARCA_AGENT_BIN`, else built now (dev profile).
pub(crate) fn agent_binary() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(path) = std::env::var_os("PARCA_AGENT_BIN") {
            return PathBuf::from(path);
        }
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let output = Command::new(cargo)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .args([
                "build",
                "--quiet",
                "-p",
                "parca-agent",
                "--bin",
                "parca-agent",
            ])
            .arg("--message-format=json-render-diagnostics")
            .stderr(Stdio::inherit())
            .output()
            .expect("run cargo build -p parca-agent");
        assert!(output.status.success(), "cargo build -p parca-agent failed");
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
            .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == "parca-agent")
            .find_map(|m| m["executable"].as_str().map(PathBuf::from))
            .expect("cargo build reported the parca-agent executable")
    })
    .clone()
}

/// The target programs, built once per test run into Cargo's temporary directory.
struct Targets {
    c_hot: PathBuf,
    c_syscall: PathBuf,
    rust_hot: PathBuf,
    /// `None` when Go is not installed (said on stderr; a failure under `PARCA_REQUIRE_BPF`).
    go_hot: Option<PathBuf>,
    /// The same, stripped (`-ldflags=-s -w`: no symbol table, no DWARF; `.gopclntab` remains).
    go_stripped: Option<PathBuf>,
    /// frameless.go: its hot leaf has no frame of its own.
    go_frameless: Option<PathBuf>,
}

/// A target, its name in profiles (`comm`) and the call chain its time goes to, leaf first.
const C_CHAIN: [&str; 3] = ["hot_leaf", "work", "main"];
const RUST_CHAIN: [&str; 3] = [
    "agent_rust_hot::hot_leaf",
    "agent_rust_hot::work",
    "agent_rust_hot::main",
];
const GO_CHAIN: [&str; 3] = ["main.hotLeaf", "main.work", "main.main"];

pub(crate) fn run(command: &mut Command) -> Result<(), String> {
    let output = command
        .output()
        .map_err(|e| format!("cannot run {command:?}: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{command:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}

/// The target programs, and the agent binary built before them: a target runs for a bounded
/// time from its start, which must not be spent waiting for cargo to build the agent.
fn targets() -> &'static Targets {
    static TARGETS: OnceLock<Targets> = OnceLock::new();
    TARGETS.get_or_init(|| {
        agent_binary();
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("targets/agent");
        let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("agent-targets");
        std::fs::create_dir_all(&out).expect("create the targets' directory");
        let cc = |source: &str, name: &str| -> PathBuf {
            let bin = out.join(name);
            // -O0: gcc gives every function a frame, so frame-pointer walks miss no caller.
            run(Command::new("gcc")
                .args(["-O0", "-fno-omit-frame-pointer", "-g", "-o"])
                .arg(&bin)
                .arg(src.join(source)))
            .expect("gcc builds the C targets (apt-get install gcc)");
            bin
        };
        let c_hot = cc("hot.c", "agent-c-hot");
        let c_syscall = cc("syscall.c", "agent-c-syscall");
        let rust_hot = out.join("agent-rust-hot");
        run(Command::new("rustc")
            .args(["--edition", "2021", "--crate-name", "agent_rust_hot"])
            .args([
                "-C",
                "opt-level=1",
                "-C",
                "force-frame-pointers=yes",
                "-g",
                "-o",
            ])
            .arg(&rust_hot)
            .arg(src.join("hot.rs")))
        .expect("rustc builds the Rust target");
        let go = |name: &str, flags: &[&str], source: &str| -> Result<PathBuf, String> {
            let bin = out.join(name);
            run(Command::new("go")
                .current_dir(&src)
                .env("GO111MODULE", "off")
                .env("GOFLAGS", "")
                .env("GOCACHE", out.join("gocache"))
                .env("GOPATH", out.join("gopath"))
                .arg("build")
                .args(flags)
                .arg("-o")
                .arg(&bin)
                .arg(source))
            .map(|()| bin)
        };
        let (go_hot, go_stripped, go_frameless) = match (
            go("agent-go-hot", &[], "hot.go"),
            go("agent-go-strip", &["-ldflags=-s -w"], "hot.go"),
            go("agent-go-frameless", &[], "frameless.go"),
        ) {
            (Ok(hot), Ok(stripped), Ok(frameless)) => (Some(hot), Some(stripped), Some(frameless)),
            (Err(why), _, _) | (_, Err(why), _) | (_, _, Err(why)) => {
                assert!(
                    !bpf_required(),
                    "PARCA_REQUIRE_BPF is set but the Go targets cannot be built: {why}"
                );
                say(&format!(
                    "SKIP: the Go targets: {why} (apt-get install golang-go)"
                ));
                (None, None, None)
            }
        };
        Targets {
            c_hot,
            c_syscall,
            rust_hot,
            go_hot,
            go_stripped,
            go_frameless,
        }
    })
}

/// Starts a target for at most `seconds` (killed on drop anyway).
fn start_target(bin: &Path, seconds: f64, dir: &Path) -> Process {
    let name = bin.file_name().unwrap().to_string_lossy().into_owned();
    let mut command = Command::new(bin);
    command.arg(seconds.to_string());
    Process::start(&name, command, &dir.join(format!("{name}.log")))
}

/// A running agent.
pub(crate) struct Agent {
    pub(crate) process: Process,
    pub(crate) addr: SocketAddr,
}

impl Agent {
    pub(crate) fn start(dir: &Path, extra: &[&str]) -> Agent {
        Agent::start_at(free_port(), dir, extra)
    }

    /// [`Agent::start`] on a port chosen beforehand (for a server that scrapes it).
    pub(crate) fn start_at(port: u16, dir: &Path, extra: &[&str]) -> Agent {
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let mut command = Command::new(agent_binary());
        command
            .arg(format!("--http-address={addr}"))
            .arg(format!("--profiling-cpu-sampling-frequency={HZ}"))
            .arg("--profiling-duration=2s")
            .args(extra);
        let process = Process::start("parca-agent", command, &dir.join("agent.log"));
        let mut agent = Agent { process, addr };
        poll(
            "the agent to be healthy",
            Duration::from_secs(30),
            Duration::from_millis(50),
            || {
                agent.process.assert_running();
                match http_get(agent.addr, "/healthy", Duration::from_secs(5)) {
                    Ok(r) if r.status == 200 => Ok(()),
                    Ok(r) => Err(format!("HTTP {}", r.status)),
                    Err(e) => Err(e),
                }
            },
        );
        agent
    }

    /// `GET /debug/pprof/profile?{query}`, decoded.
    pub(crate) fn profile(&self, query: &str) -> proto::Profile {
        self.get_profile("/debug/pprof/profile", query)
    }

    /// `GET {path}?{query}`, decoded.
    pub(crate) fn get_profile(&self, path: &str, query: &str) -> proto::Profile {
        let r = http_get(
            self.addr,
            &format!("{path}?{query}"),
            Duration::from_secs(120),
        )
        .unwrap_or_else(|e| panic!("profile request failed: {e}\n{}", self.process.log_tail()));
        assert_eq!(r.status, 200, "{}", r.text());
        parca_pprof::decode(&r.body, &parca_pprof::DecodeOptions::default())
            .expect("the agent's profile decodes")
            .to_proto()
    }

    /// The agent's unwind-table and stack-end metrics, for a failure message: whether tables
    /// were missing, evicted or refused when stacks were cut.
    pub(crate) fn unwind_metrics(&self) -> String {
        match http_get(self.addr, "/metrics", Duration::from_secs(5)) {
            Ok(r) => r
                .text()
                .lines()
                .filter(|l| {
                    l.starts_with("parca_agent_unwind")
                        || l.starts_with("parca_agent_samples_before_tables")
                })
                .collect::<Vec<_>>()
                .join("\n"),
            Err(e) => format!("(no metrics: {e})"),
        }
    }

    /// A profile of a `seconds` window in which each of `pids` has at least `min` samples:
    /// windows are taken again (within a minute) until one has them. Busy targets share two
    /// CPUs with whatever else the machine runs, so a window of fixed length may fall short;
    /// the test waits for the samples, not for a longer sleep.
    pub(crate) fn profile_with_samples(
        &self,
        seconds: u32,
        pids: &[u32],
        min: i64,
    ) -> proto::Profile {
        poll(
            &format!("{min} samples of each of {pids:?} in one {seconds} s window"),
            Duration::from_secs(60),
            Duration::ZERO,
            || {
                let p = self.profile(&format!("seconds={seconds}"));
                let counts: Vec<i64> = pids
                    .iter()
                    .map(|&pid| share_with(&p, pid, |_| true).1)
                    .collect();
                if counts.iter().all(|&n| n >= min) {
                    Ok(p)
                } else {
                    Err(format!("samples per process: {counts:?}"))
                }
            },
        )
    }
}

pub(crate) fn string(p: &proto::Profile, i: i64) -> &str {
    &p.string_table[i as usize]
}

pub(crate) fn label<'a>(p: &'a proto::Profile, s: &proto::Sample, key: &str) -> Option<&'a str> {
    s.label
        .iter()
        .find(|l| string(p, l.key) == key)
        .map(|l| string(p, l.str))
}

/// Each sample of process `pid`: its frames leaf first (inlined functions expanded, innermost
/// first), whether the frame is the kernel's, and the sample's value.
/// The first few stacks of `pid`, for a failing assertion's message.
fn some_stacks(p: &proto::Profile, pid: u32) -> Vec<(Vec<(String, bool)>, i64)> {
    let mut stacks = stacks_of(p, pid);
    stacks.truncate(5);
    stacks
}

pub(crate) fn stacks_of(p: &proto::Profile, pid: u32) -> Vec<(Vec<(String, bool)>, i64)> {
    let pid = pid.to_string();
    p.sample
        .iter()
        .filter(|s| label(p, s, "pid") == Some(pid.as_str()))
        .map(|s| {
            let mut frames = Vec::new();
            for &id in &s.location_id {
                let loc = &p.location[id as usize - 1];
                let kernel = loc.mapping_id != 0
                    && string(p, p.mapping[loc.mapping_id as usize - 1].filename)
                        == "[kernel.kallsyms]";
                if loc.line.is_empty() {
                    frames.push((format!("{:#x}", loc.address), kernel));
                }
                for line in &loc.line {
                    let f = &p.function[line.function_id as usize - 1];
                    frames.push((string(p, f.name).to_owned(), kernel));
                }
            }
            (frames, s.value[0])
        })
        .collect()
}

/// (samples whose stack has `chain` as consecutive frames, all samples) of process `pid`.
fn attribution(p: &proto::Profile, pid: u32, chain: &[&str]) -> (i64, i64) {
    let mut hit = 0;
    let mut total = 0;
    for (frames, n) in stacks_of(p, pid) {
        total += n;
        let names: Vec<&str> = frames.iter().map(|(f, _)| f.as_str()).collect();
        if names.windows(chain.len()).any(|w| w == chain) {
            hit += n;
        }
    }
    (hit, total)
}

fn assert_attributed(p: &proto::Profile, what: &str, pid: u32, chain: &[&str]) {
    let (hit, total) = attribution(p, pid, chain);
    say(&format!(
        "{what} (pid {pid}): {hit} of {total} samples ({:.1}%) in {}",
        100.0 * hit as f64 / total.max(1) as f64,
        chain.join(" ← ")
    ));
    assert!(total >= 20, "{what}: only {total} samples");
    assert!(
        hit * 10 >= total * 9,
        "{what}: {hit} of {total} samples have {chain:?}; some stacks: {:?}",
        some_stacks(p, pid)
    );
}

#[test]
fn agent_attributes_real_programs_to_their_call_chains_and_kernel_frames() {
    let _exclusive = crate::support::exclusive();
    if !can_run("agent_attributes_real_programs_to_their_call_chains_and_kernel_frames") {
        return;
    }
    let t = targets();
    let dir = tempfile::tempdir().unwrap();
    let c = start_target(&t.c_hot, 60.0, dir.path());
    let sys = start_target(&t.c_syscall, 60.0, dir.path());
    let rust = start_target(&t.rust_hot, 60.0, dir.path());
    let go = t
        .go_hot
        .as_ref()
        .map(|bin| start_target(bin, 60.0, dir.path()));
    let go_stripped = t
        .go_stripped
        .as_ref()
        .map(|bin| start_target(bin, 60.0, dir.path()));
    let agent = Agent::start(dir.path(), &["--node=e2e-node"]);

    // A 5 s window with the 20 samples of each checked process (on a busy machine one may fall
    // short: the window is taken again).
    let mut checked = vec![c.pid(), rust.pid()];
    checked.extend(go.iter().chain(&go_stripped).map(Process::pid));
    let p = agent.profile_with_samples(5, &checked, 20);
    assert_eq!(string(&p, p.sample_type[0].r#type), "samples");
    assert_eq!(string(&p, p.sample_type[0].unit), "count");
    let period_type = p.period_type.unwrap();
    assert_eq!(
        (string(&p, period_type.r#type), string(&p, period_type.unit)),
        ("cpu", "nanoseconds")
    );
    assert_eq!(p.period, 1_000_000_000 / HZ as i64);
    assert!(
        (4_500_000_000..8_000_000_000).contains(&p.duration_nanos),
        "a 5 s window lasted {} ns",
        p.duration_nanos
    );

    assert_attributed(&p, "C", c.pid(), &C_CHAIN);
    assert_attributed(&p, "Rust", rust.pid(), &RUST_CHAIN);
    if let Some(go) = &go {
        assert_attributed(&p, "Go", go.pid(), &GO_CHAIN);
    }
    if let Some(go) = &go_stripped {
        assert_attributed(&p, "Go, stripped", go.pid(), &GO_CHAIN);
    }

    // Labels of a sample: pid, comm, executable, node.
    let s = p
        .sample
        .iter()
        .find(|s| label(&p, s, "pid") == Some(c.pid().to_string().as_str()))
        .unwrap();
    assert_eq!(label(&p, s, "comm"), Some("agent-c-hot"));
    assert_eq!(label(&p, s, "executable"), t.c_hot.to_str());
    assert_eq!(label(&p, s, "node"), Some("e2e-node"));

    // The syscall-heavy program: most samples in the kernel, under its read(2), on the same
    // stack as its own user frames.
    let stacks = stacks_of(&p, sys.pid());
    let total: i64 = stacks.iter().map(|(_, n)| n).sum();
    let read_path = ["vfs_read", "ksys_read", "read_zero", "__x64_sys_read"];
    let in_kernel: i64 = stacks
        .iter()
        .filter(|(f, _)| {
            f.iter()
                .any(|(name, k)| *k && read_path.contains(&name.as_str()))
        })
        .map(|(_, n)| n)
        .sum();
    let with_user = stacks.iter().any(|(f, _)| {
        f.iter().any(|(name, k)| *k && name == "vfs_read")
            && f.iter().any(|(name, k)| !k && name == "main")
    });
    say(&format!(
        "syscall program (pid {}): {in_kernel} of {total} samples in the kernel's read path",
        sys.pid()
    ));
    assert!(
        total >= 20 && in_kernel * 2 >= total,
        "{:?}",
        &stacks[..3.min(stacks.len())]
    );
    assert!(with_user, "no stack goes from vfs_read down to main");

    // Filters.
    let only_c = agent.profile(&format!("seconds=3&pid={}", c.pid()));
    assert!(!only_c.sample.is_empty());
    let pids: BTreeSet<&str> = only_c
        .sample
        .iter()
        .filter_map(|s| label(&only_c, s, "pid"))
        .collect();
    assert_eq!(pids, BTreeSet::from([c.pid().to_string().as_str()]));
    let only_rust = agent.profile("seconds=3&comm=agent-rust-hot");
    assert!(!only_rust.sample.is_empty());
    assert!(
        only_rust
            .sample
            .iter()
            .all(|s| label(&only_rust, s, "comm") == Some("agent-rust-hot"))
    );

    // The other endpoints. `/` shows the last window: give it one that covers the targets.
    let index = poll(
        "`/` to list the targets",
        Duration::from_secs(10),
        Duration::from_millis(200),
        || {
            let page = http_get(agent.addr, "/", Duration::from_secs(5))?.text();
            let listed = [&c, &rust]
                .iter()
                .all(|t| page.contains(&format!("pid={}\"", t.pid())));
            if listed {
                Ok(page)
            } else {
                Err("targets not listed yet".into())
            }
        },
    );
    assert!(index.contains("agent-c-hot") && index.contains(t.c_hot.to_str().unwrap()));
    let metrics = http_get(agent.addr, "/metrics", Duration::from_secs(5))
        .unwrap()
        .text();
    let value = |name: &str| -> f64 {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in /metrics:\n{metrics}"))
    };
    assert!(value("parca_agent_samples_total") > 0.0);
    assert!(value("parca_agent_symbolize_cache_hits_total") > 0.0);
    assert_eq!(value("parca_agent_window_duration_seconds"), 2.0);
    assert!(value("parca_agent_profiles_served_total") >= 3.0);
    assert_eq!(
        http_get(agent.addr, "/nope", Duration::from_secs(5))
            .unwrap()
            .status,
        404
    );
    assert_eq!(
        http_get(
            agent.addr,
            "/debug/pprof/profile?seconds=0",
            Duration::from_secs(5)
        )
        .unwrap()
        .status,
        400
    );
}

#[test]
fn agent_keeps_processes_that_exit_within_the_window() {
    let _exclusive = crate::support::exclusive();
    if !can_run("agent_keeps_processes_that_exit_within_the_window") {
        return;
    }
    let t = targets();
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(dir.path(), &[]);
    let addr = agent.addr;
    let request = std::thread::spawn(move || {
        http_get(
            addr,
            "/debug/pprof/profile?seconds=6",
            Duration::from_secs(60),
        )
    });
    // Once the request's window has begun, run short programs one after another: each is
    // gone long before the window ends.
    poll(
        "the profile request's window to begin",
        Duration::from_secs(10),
        Duration::from_millis(20),
        || {
            let metrics = http_get(addr, "/metrics", Duration::from_secs(5))?.text();
            match metric_value(&metrics, "parca_agent_profile_requests_open") {
                open if open >= 1.0 => Ok(()),
                open => Err(format!("{open} requests open")),
            }
        },
    );
    let mut pids = Vec::new();
    for _ in 0..5 {
        let mut child = Command::new(&t.c_hot)
            .arg("0.4")
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        pids.push(child.id());
        assert!(child.wait().unwrap().success());
    }
    let r = request.join().unwrap().unwrap();
    assert_eq!(r.status, 200);
    let p = parca_pprof::decode(&r.body, &parca_pprof::DecodeOptions::default())
        .unwrap()
        .to_proto();
    // Each program's start (exec, the dynamic loader) and exit are in its samples too, and take
    // longer on a busy machine (a fifth of the samples on a loaded one): what must be
    // symbolized are the samples of its own code (those under `main`), and unsymbolized stacks
    // would have no `main`, so these must be at least half of them.
    let (mut hit, mut in_main, mut total) = (0, 0, 0);
    let mut missed = Vec::new();
    for &pid in &pids {
        let (h, n) = attribution(&p, pid, &C_CHAIN);
        for (frames, count) in stacks_of(&p, pid) {
            if frames.iter().any(|(f, _)| f == "main") {
                in_main += count;
                if !frames.iter().any(|(f, _)| f == "hot_leaf") {
                    missed.push(frames);
                }
            }
        }
        let s = p
            .sample
            .iter()
            .find(|s| label(&p, s, "pid") == Some(pid.to_string().as_str()))
            .unwrap_or_else(|| panic!("no sample of the exited process {pid}"));
        assert_eq!(label(&p, s, "comm"), Some("agent-c-hot"));
        hit += h;
        total += n;
    }
    say(&format!(
        "{} exited processes: {hit} of {in_main} samples under main ({total} in all) symbolized \
         to {}",
        pids.len(),
        C_CHAIN.join(" ← ")
    ));
    assert!(
        total >= 50 && in_main * 2 >= total,
        "only {in_main} of {total} samples under main"
    );
    assert!(
        hit * 10 >= in_main * 9,
        "{hit} of {in_main}; some others under main: {:?}",
        missed.iter().take(5).collect::<Vec<_>>()
    );
}

#[test]
fn server_scrapes_and_receives_pushes_from_the_agent() {
    let _exclusive = crate::support::exclusive();
    if !can_run("server_scrapes_and_receives_pushes_from_the_agent") {
        return;
    }
    let t = targets();
    let dir = tempfile::tempdir().unwrap();
    let c = start_target(&t.c_hot, 120.0, dir.path());
    let rust = start_target(&t.rust_hot, 120.0, dir.path());
    let go = t
        .go_hot
        .as_ref()
        .map(|bin| start_target(bin, 120.0, dir.path()));

    let agent_port = free_port();
    let server = Server::start(&parca_binary(false), &[], |_| {
        agent_scrape_config(
            agent_port,
            "parca_agent: {path: /debug/pprof/profile, delta: true}",
        )
    });
    let agent_addr = format!("--http-address=127.0.0.1:{agent_port}");
    let remote = format!("--remote-store-address={}", server.addr);
    // Parca Agent's default is TLS; this server speaks plain HTTP.
    let mut command = Command::new(agent_binary());
    command.args([
        agent_addr.as_str(),
        &format!("--profiling-cpu-sampling-frequency={HZ}"),
        "--profiling-duration=2s",
        "--node=e2e-node",
        remote.as_str(),
        "--remote-store-insecure",
    ]);
    let mut agent = Process::start("parca-agent", command, &dir.path().join("agent.log"));

    let mut chains: Vec<(&str, &[&str; 3])> =
        vec![("agent-c-hot", &C_CHAIN), ("agent-rust-hot", &RUST_CHAIN)];
    if go.is_some() {
        chains.push(("agent-go-hot", &GO_CHAIN));
    }
    const TYPE: &str = "parca_agent:samples:count:cpu:nanoseconds:delta";
    // Scraped series carry the job's labels; pushed ones have none (`job=""`).
    for (how, job) in [("scraped", "parca-agent"), ("pushed", "")] {
        for (comm, chain) in &chains {
            let query =
                format!("merge({TYPE}{{job=\"{job}\",comm=\"{comm}\",node=\"e2e-node\"}}[5m])");
            let names = poll(
                &format!("{how} {comm} to show {chain:?}"),
                Duration::from_secs(60),
                Duration::from_millis(500),
                || {
                    agent.assert_running();
                    let data = server.api(&format!(
                        "/api/v1/query?format=top&limit=1000&query={}",
                        encode(&query)
                    ))?;
                    let names: BTreeMap<String, i64> = data["rows"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|r| Some((r["name"].as_str()?.to_owned(), r["cum"].as_i64()?)))
                        .collect();
                    if chain.iter().all(|f| names.contains_key(*f)) {
                        Ok(names)
                    } else {
                        Err(format!(
                            "functions so far: {:?}",
                            names.keys().take(20).collect::<Vec<_>>()
                        ))
                    }
                },
            );
            say(&format!(
                "server, {how} {comm}: {} has {} samples of {}'s {}",
                chain[0], names[chain[0]], chain[2], names[chain[2]]
            ));
        }
    }
    drop((c, rust, go));
}

/// A `parca.yaml` with the agent's scrape job as the root `parca.yaml`'s commented example has
/// it, every 3 s, for the agent on `port`: Go's default endpoints off, `endpoint` (a
/// `pprof_config` entry) on.
pub(crate) fn agent_scrape_config(port: u16, endpoint: &str) -> String {
    format!(
        "scrape_configs:\n  - job_name: parca-agent\n    scrape_interval: 3s\n    \
         static_configs: [{{targets: [\"127.0.0.1:{port}\"]}}]\n    \
         profiling_config:\n      pprof_config:\n        \
         process_cpu: {{enabled: false}}\n        memory: {{enabled: false}}\n        \
         block: {{enabled: false}}\n        mutex: {{enabled: false}}\n        \
         goroutine: {{enabled: false}}\n        {endpoint}\n"
    )
}

/// Lists the BPF programs loaded on the machine with bpftool; `None` when it is missing.
fn bpf_program_names() -> Option<String> {
    let output = Command::new("bpftool")
        .args(["prog", "show"])
        .output()
        .ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).into_owned())
}

fn count_ours(listing: &str) -> usize {
    listing
        .lines()
        .filter(|l| {
            l.contains(" name profile_cpu ")
                || l.contains(" name on_exec ")
                || l.contains(" name on_exit ")
                || l.contains(" name on_switch ")
        })
        .count()
}

fn spawn_agent(dir: &Path) -> (Child, SocketAddr) {
    let addr: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let log = std::fs::File::create(dir.join("agent.log")).unwrap();
    let child = Command::new(agent_binary())
        .arg(format!("--http-address={addr}"))
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    poll(
        "the agent to be healthy",
        Duration::from_secs(30),
        Duration::from_millis(50),
        || http_get(addr, "/healthy", Duration::from_secs(5)).map(|_| ()),
    );
    (child, addr)
}

#[test]
fn agent_leaves_no_program_attached_after_it_stops_or_is_killed() {
    let _exclusive = crate::support::exclusive();
    if !can_run("agent_leaves_no_program_attached_after_it_stops_or_is_killed") {
        return;
    }
    if bpf_program_names().is_none() {
        assert!(
            !bpf_required(),
            "PARCA_REQUIRE_BPF is set but bpftool is missing"
        );
        say("SKIP: agent_leaves_no_program_attached: bpftool not found (apt-get install bpftool)");
        return;
    }
    // An agent that another test stopped a moment ago may still have programs the kernel has
    // not freed yet (it frees them asynchronously): wait for those first.
    poll(
        "the programs of earlier agents to be gone",
        Duration::from_secs(10),
        Duration::from_millis(50),
        || {
            let listing = bpf_program_names().unwrap();
            match count_ours(&listing) {
                0 => Ok(()),
                n => Err(format!("{n} remain:\n{listing}")),
            }
        },
    );
    let dir = tempfile::tempdir().unwrap();
    for signal in ["TERM", "KILL"] {
        let (mut child, _) = spawn_agent(dir.path());
        let running = bpf_program_names().unwrap();
        assert_eq!(count_ours(&running), 3, "while running:\n{running}");
        run(Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(child.id().to_string()))
        .unwrap();
        let status = child.wait().unwrap();
        if signal == "TERM" {
            assert!(status.success(), "SIGTERM must stop it cleanly: {status}");
        }
        // The kernel frees programs once their last descriptor closes (asynchronously).
        poll(
            &format!("the programs to be gone after SIG{signal}"),
            Duration::from_secs(10),
            Duration::from_millis(50),
            || {
                let listing = bpf_program_names().unwrap();
                match count_ours(&listing) {
                    0 => Ok(()),
                    n => Err(format!("{n} remain")),
                }
            },
        );
    }
}

#[test]
fn agent_refuses_without_capabilities_or_btf() {
    let dir = tempfile::tempdir().unwrap();
    // A copy that user `nobody` may run (the build directory may be private).
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = dir.path().join("parca-agent");
    std::fs::copy(agent_binary(), &bin).unwrap();
    let output = |command: &mut Command| {
        let started = Instant::now();
        command
            .arg("--http-address=127.0.0.1:0")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        // The copy was written by this process: a child another test thread forked meanwhile
        // holds the written descriptor until its own exec closes it, and running the copy
        // fails with ETXTBSY for that moment (rust-lang/rust#114554). Tried again, briefly.
        let mut tries = 0;
        let mut child = loop {
            match command.spawn() {
                Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy && tries < 100 => {
                    tries += 1;
                    std::thread::sleep(Duration::from_millis(20));
                }
                spawned => break spawned.unwrap(),
            }
        };
        let mut stderr = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
        let status = child.wait().unwrap();
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "a refusal is immediate"
        );
        (status, stderr)
    };

    let (status, stderr) = output(Command::new(&bin).arg("--profiling-cpu-sampling-frequency=0"));
    assert!(!status.success());
    assert!(stderr.contains("from 1 to 10000"), "{stderr}");

    if bpf_unavailable().is_some() {
        // Not root: the agent must refuse by itself.
        let (status, stderr) = output(&mut Command::new(&bin));
        assert!(!status.success());
        assert!(
            stderr.contains("CAP_BPF") && stderr.contains("root"),
            "{stderr}"
        );
        say("agent_refuses_without_capabilities_or_btf: checked as an unprivileged user only");
        return;
    }
    // As root: user nobody has no capabilities after the switch.
    let (status, stderr) = output(Command::new(&bin).uid(65534).gid(65534));
    assert!(!status.success());
    assert!(
        stderr.contains("missing: CAP_BPF, CAP_PERFMON") && stderr.contains("root"),
        "{stderr}"
    );
    let (status, stderr) = output(Command::new(&bin).arg("--btf-path=/nonexistent/vmlinux"));
    assert!(!status.success());
    assert!(
        stderr.contains("no BTF") && stderr.contains("/nonexistent/vmlinux"),
        "{stderr}"
    );
}

/// The programs of the unwinding tests: built without frame pointers unless said otherwise.
struct UnwindTargets {
    /// hot.c, `-O2 -fomit-frame-pointer`, stripped; its debug file is `c_o2_debug`, to be
    /// installed under `/usr/lib/debug/.build-id/` by the test.
    c_o2: PathBuf,
    c_o2_debug: PathBuf,
    c_o2_build_id: String,
    /// hot.c, `-O2 -fno-omit-frame-pointer`, not stripped.
    c_o2_fp: PathBuf,
    /// hot.rs as a default release build: `-C opt-level=3`, no frame pointers, no debug info,
    /// panic=unwind.
    rust_release: PathBuf,
    /// deep.c: 1,100 nested calls (by default), past the agent's 1,024 frames.
    c_deep: PathBuf,
    /// deep_work.c (`-O2 -fomit-frame-pointer`): work through libc's qsort 400 calls deep.
    c_deep_work: PathBuf,
    /// threads.c: two threads busy.
    c_threads: PathBuf,
    /// dlopen_main.c and the library it loads.
    c_dlopen: PathBuf,
    c_dlopen_lib: PathBuf,
    /// exceptions.cpp (`g++ -O2`).
    cpp_exceptions: PathBuf,
    /// signal.c: the time goes to a signal handler.
    c_signal: PathBuf,
    /// hot.c without a build id, stripped, its debug file in `.debug/` beside it, found by
    /// `.gnu_debuglink` (and checked by its CRC).
    c_debuglink: PathBuf,
    /// hot.c (`-fno-inline`), stripped, with MiniDebugInfo: its functions in an xz-compressed
    /// symbol table in `.gnu_debugdata`, as Fedora ships binaries.
    c_minidebuginfo: PathBuf,
}

fn tool(command: &mut Command, what: &str) {
    run(command).unwrap_or_else(|e| panic!("{what}: {e}"));
}

fn unwind_targets() -> &'static UnwindTargets {
    static TARGETS: OnceLock<UnwindTargets> = OnceLock::new();
    TARGETS.get_or_init(|| {
        agent_binary();
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("targets/agent");
        let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("agent-unwind-targets");
        std::fs::create_dir_all(&out).expect("create the targets' directory");
        let gcc = |flags: &[&str], source: &str, name: &str| -> PathBuf {
            let bin = out.join(name);
            tool(
                Command::new("gcc")
                    .args(flags)
                    .arg("-o")
                    .arg(&bin)
                    .arg(src.join(source)),
                "gcc builds the C targets (apt-get install gcc)",
            );
            bin
        };
        let c_o2 = gcc(
            &["-O2", "-fomit-frame-pointer", "-g", "-Wl,--build-id"],
            "hot.c",
            "agent-c-o2",
        );
        let c_o2_debug = out.join("agent-c-o2.debug");
        tool(
            Command::new("objcopy")
                .arg("--only-keep-debug")
                .arg(&c_o2)
                .arg(&c_o2_debug),
            "objcopy (apt-get install binutils)",
        );
        tool(
            Command::new("strip").arg("--strip-all").arg(&c_o2),
            "strip (apt-get install binutils)",
        );
        let c_o2_build_id = {
            let out = Command::new("readelf")
                .arg("-n")
                .arg(&c_o2)
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .find_map(|l| Some(l.trim().strip_prefix("Build ID: ")?.to_owned()))
                .expect("gcc was asked for a build id")
        };
        let c_o2_fp = gcc(
            &["-O2", "-fno-omit-frame-pointer", "-g"],
            "hot.c",
            "agent-c-o2-fp",
        );
        let rust_release = out.join("agent-rust-release");
        tool(
            Command::new("rustc")
                .args(["--edition", "2021", "--crate-name", "agent_rust_hot"])
                .args(["-C", "opt-level=3", "-o"])
                .arg(&rust_release)
                .arg(src.join("hot.rs")),
            "rustc builds the Rust target",
        );
        let c_deep = gcc(
            &["-O1", "-fomit-frame-pointer", "-g"],
            "deep.c",
            "agent-c-deep",
        );
        let c_deep_work = gcc(
            &["-O2", "-fomit-frame-pointer", "-g"],
            "deep_work.c",
            "agent-c-deep-work",
        );
        let c_threads = gcc(
            &["-O2", "-fomit-frame-pointer", "-g", "-pthread"],
            "threads.c",
            "agent-c-threads",
        );
        let c_dlopen = gcc(
            &["-O2", "-fomit-frame-pointer", "-g"],
            "dlopen_main.c",
            "agent-c-dlopen",
        );
        let c_dlopen_lib = gcc(
            &["-O2", "-fomit-frame-pointer", "-g", "-shared", "-fPIC"],
            "dlopen_lib.c",
            "libagenthot.so",
        );
        let cpp_exceptions = out.join("agent-cpp-exceptions");
        tool(
            Command::new("g++")
                .args(["-O2", "-g", "-o"])
                .arg(&cpp_exceptions)
                .arg(src.join("exceptions.cpp")),
            "g++ builds the C++ target (apt-get install g++)",
        );
        let c_signal = gcc(
            &["-O2", "-fomit-frame-pointer", "-g"],
            "signal.c",
            "agent-c-signal",
        );
        // Found by .gnu_debuglink only: no build id.
        let debuglink_dir = out.join("debuglink");
        std::fs::create_dir_all(debuglink_dir.join(".debug")).unwrap();
        let c_debuglink = debuglink_dir.join("agent-c-debuglink");
        tool(
            Command::new("gcc")
                .args([
                    "-O2",
                    "-fomit-frame-pointer",
                    "-g",
                    "-Wl,--build-id=none",
                    "-o",
                ])
                .arg(&c_debuglink)
                .arg(src.join("hot.c")),
            "gcc",
        );
        let linked = debuglink_dir.join(".debug/agent-c-debuglink.debug");
        tool(
            Command::new("objcopy")
                .arg("--only-keep-debug")
                .arg(&c_debuglink)
                .arg(&linked),
            "objcopy",
        );
        tool(
            Command::new("strip").arg("--strip-all").arg(&c_debuglink),
            "strip",
        );
        tool(
            Command::new("objcopy")
                .arg(format!("--add-gnu-debuglink={}", linked.display()))
                .arg(&c_debuglink),
            "objcopy --add-gnu-debuglink",
        );
        // MiniDebugInfo as Fedora makes it: the functions in a symbol table of their own,
        // xz-compressed into .gnu_debugdata of the stripped binary.
        let c_minidebuginfo = gcc(
            &["-O2", "-fomit-frame-pointer", "-fno-inline"],
            "hot.c",
            "agent-c-minidebuginfo",
        );
        let keep = out.join("minidebuginfo.keep");
        std::fs::write(&keep, "hot_leaf\nwork\nmain\nnow\n").unwrap();
        let mini = out.join("minidebuginfo");
        tool(
            Command::new("objcopy")
                .arg("-S")
                .arg("--remove-section=.comment")
                .arg(format!("--keep-symbols={}", keep.display()))
                .arg(&c_minidebuginfo)
                .arg(&mini),
            "objcopy --keep-symbols",
        );
        tool(
            Command::new("xz").arg("-f").arg(&mini),
            "xz (apt-get install xz-utils)",
        );
        tool(
            Command::new("strip")
                .arg("--strip-all")
                .arg(&c_minidebuginfo),
            "strip",
        );
        tool(
            Command::new("objcopy")
                .arg(format!(
                    "--add-section=.gnu_debugdata={}",
                    out.join("minidebuginfo.xz").display()
                ))
                .arg(&c_minidebuginfo),
            "objcopy --add-section",
        );
        UnwindTargets {
            c_debuglink,
            c_minidebuginfo,
            c_signal,
            c_o2,
            c_o2_debug,
            c_o2_build_id,
            c_o2_fp,
            rust_release,
            c_deep,
            c_deep_work,
            c_threads,
            c_dlopen,
            c_dlopen_lib,
            cpp_exceptions,
        }
    })
}

/// A file installed for the length of a test (a debug file under `/usr/lib/debug`), removed
/// on drop; never replaces a file that was there.
struct Installed(PathBuf);

impl Installed {
    fn copy(from: &Path, to: PathBuf) -> Installed {
        assert!(!to.exists(), "{} exists already", to.display());
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(from, &to).unwrap();
        Installed(to)
    }
}

impl Drop for Installed {
    fn drop(&mut self) {
        std::fs::remove_file(&self.0).ok();
    }
}

/// Whether the tools the unwinding tests build with are here (said on stderr when not; a
/// failure under `PARCA_REQUIRE_BPF`).
fn unwind_tools_present(test: &str) -> bool {
    for (tool, package) in [
        ("g++", "g++"),
        ("objcopy", "binutils"),
        ("gzip", "gzip"),
        ("xz", "xz-utils"),
    ] {
        if Command::new(tool).arg("--version").output().is_err() {
            assert!(
                !bpf_required(),
                "PARCA_REQUIRE_BPF is set but {test} needs {tool} (apt-get install {package})"
            );
            say(&format!(
                "SKIP: {test}: {tool} not found (apt-get install {package})"
            ));
            return false;
        }
    }
    true
}

/// (samples of `pid` with any frame for which `pred` holds, all its samples).
fn share_with(p: &proto::Profile, pid: u32, pred: impl Fn(&str) -> bool) -> (i64, i64) {
    let mut hit = 0;
    let mut total = 0;
    for (frames, n) in stacks_of(p, pid) {
        total += n;
        if frames.iter().any(|(f, _)| pred(f)) {
            hit += n;
        }
    }
    (hit, total)
}

pub(crate) fn metric_value(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in /metrics:\n{metrics}"))
}

#[test]
fn agent_unwinds_programs_without_frame_pointers_and_names_stripped_ones() {
    let _exclusive = crate::support::exclusive();
    let test = "agent_unwinds_programs_without_frame_pointers_and_names_stripped_ones";
    if !can_run(test) || !unwind_tools_present(test) {
        return;
    }
    let t = unwind_targets();
    let dir = tempfile::tempdir().unwrap();
    // The stripped program's debug file where gdb and perf look for it.
    let id = &t.c_o2_build_id;
    let _debug = Installed::copy(
        &t.c_o2_debug,
        PathBuf::from(format!(
            "/usr/lib/debug/.build-id/{}/{}.debug",
            &id[..2],
            &id[2..]
        )),
    );
    let c = start_target(&t.c_o2, 60.0, dir.path());
    let c_fp = start_target(&t.c_o2_fp, 60.0, dir.path());
    let rust = start_target(&t.rust_release, 60.0, dir.path());
    // Debian's own gzip and xz (stripped, no frame pointers) compressing a large binary.
    let input = agent_binary();
    let compress = |tool: &str, flags: &str| -> Process {
        let mut command = Command::new("sh");
        command.arg("-c").arg(format!(
            "exec {tool} {flags} -c < '{}' > /dev/null",
            input.display()
        ));
        Process::start(tool, command, &dir.path().join(format!("{tool}.log")))
    };
    let c_debuglink = start_target(&t.c_debuglink, 60.0, dir.path());
    let c_mini = start_target(&t.c_minidebuginfo, 60.0, dir.path());
    let gzip = compress("gzip", "-9");
    let xz = compress("xz", "-9 -T1");
    let agent = Agent::start(dir.path(), &[]);

    let checked = [&c, &c_fp, &rust, &c_debuglink, &c_mini, &gzip, &xz].map(|t| t.pid());
    let p = agent.profile_with_samples(5, &checked, 20);
    // How the tables fared, for a failure's reader: a table evicted or reloaded shows here.
    say(&agent.unwind_metrics());
    assert_attributed(
        &p,
        "C -O2 -fomit-frame-pointer, stripped",
        c.pid(),
        &C_CHAIN,
    );
    assert_attributed(&p, "C -O2 with frame pointers", c_fp.pid(), &C_CHAIN);
    assert_attributed(&p, "Rust release", rust.pid(), &RUST_CHAIN);
    assert_attributed(
        &p,
        "C stripped, debug file by .gnu_debuglink",
        c_debuglink.pid(),
        &C_CHAIN,
    );
    assert_attributed(
        &p,
        "C stripped, symbols from .gnu_debugdata",
        c_mini.pid(),
        &C_CHAIN,
    );
    for (what, process) in [("gzip", &gzip), ("xz", &xz)] {
        let (hit, total) = share_with(&p, process.pid(), |f| {
            f == "main" || f.starts_with("__libc_start_main") || f == "__libc_start_call_main"
        });
        say(&format!(
            "Debian's {what} (pid {}): {hit} of {total} samples ({:.1}%) reach main or \
             __libc_start_main",
            process.pid(),
            100.0 * hit as f64 / total.max(1) as f64
        ));
        assert!(total >= 20, "{what}: only {total} samples");
        assert!(
            hit * 10 >= total * 8,
            "{what}: {hit} of {total}; some stacks: {:?}",
            some_stacks(&p, process.pid())
        );
    }
    let metrics = http_get(agent.addr, "/metrics", Duration::from_secs(5))
        .unwrap()
        .text();
    let complete = metric_value(
        &metrics,
        "parca_agent_unwound_stacks_total{end=\"complete\"}",
    );
    let ratio = metric_value(&metrics, "parca_agent_complete_stacks_ratio");
    say(&format!(
        "unwound stacks: {complete} complete, {:.1}% of all",
        ratio * 100.0
    ));
    assert!(complete > 100.0 && ratio > 0.0 && ratio <= 1.0);
}

#[test]
fn agent_walks_frame_pointer_code_by_frame_pointers_and_checks_the_leaf() {
    let _exclusive = crate::support::exclusive();
    if !can_run("agent_walks_frame_pointer_code_by_frame_pointers_and_checks_the_leaf") {
        return;
    }
    let t = targets();
    let (Some(go_hot), Some(go_frameless)) = (&t.go_hot, &t.go_frameless) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let hot = start_target(go_hot, 60.0, dir.path());
    let frameless = start_target(go_frameless, 60.0, dir.path());
    // Built without frame pointers and linked to Debian's libc: its stacks are copied.
    let c = start_target(&unwind_targets().c_o2_fp, 60.0, dir.path());
    let agent = Agent::start(dir.path(), &[]);
    let metrics = || {
        http_get(agent.addr, "/metrics", Duration::from_secs(5))
            .unwrap()
            .text()
    };
    // A window for the processes to be judged first: their first samples are copied.
    let _ = agent.profile("seconds=2");
    let walked_before = metric_value(&metrics(), "parca_agent_fp_walked_stacks_total");
    let p = agent.profile("seconds=5");
    let after = metrics();
    let walked = metric_value(&after, "parca_agent_fp_walked_stacks_total") - walked_before;

    // Go keeps frame pointers: both walked in the BPF program, whole.
    assert_attributed(&p, "Go", hot.pid(), &GO_CHAIN);
    // The leaf has no frame: rbp is main.work's, and only the leaf's CFI (Go's compressed
    // .debug_frame) says main.work is there.
    assert_attributed(
        &p,
        "Go, frameless leaf",
        frameless.pid(),
        &["main.frameless", "main.work", "main.main"],
    );
    let go_samples = [hot.pid(), frameless.pid()]
        .iter()
        .map(|&pid| stacks_of(&p, pid).iter().map(|(_, n)| n).sum::<i64>())
        .sum::<i64>();
    say(&format!(
        "frame-pointer walks: {walked} in the window, for {go_samples} Go samples; {} processes walked",
        metric_value(&after, "parca_agent_fp_processes")
    ));
    assert!(
        walked >= 0.8 * go_samples as f64,
        "only {walked} of {go_samples} Go stacks were walked by frame pointers"
    );
    assert!(metric_value(&after, "parca_agent_fp_processes") >= 2.0);
    // A frame-pointer step is checked in the BPF program now: one that leaves the process's
    // mappings (Go's assembly on the system stack keeps no frame pointer) is redone with the
    // unwind row, never cut; the chains above are whole.
    say(&format!(
        "frame-pointer steps redone with the row: {}",
        metric_value(&after, "parca_agent_fp_walk_fallbacks_total")
    ));
    // The C program is copied and unwound as before.
    assert_attributed(
        &p,
        "C with frame pointers, Debian's libc",
        c.pid(),
        &C_CHAIN,
    );
}

#[test]
fn agent_cuts_deep_stacks_at_the_depth_limit_and_says_so() {
    let _exclusive = crate::support::exclusive();
    let test = "agent_cuts_deep_stacks_at_the_depth_limit_and_says_so";
    if !can_run(test) || !unwind_tools_present(test) {
        return;
    }
    let t = unwind_targets();
    let dir = tempfile::tempdir().unwrap();
    // 1,101 frames of rec: past the 1,024 frames the agent keeps.
    let deep = start_target(&t.c_deep, 60.0, dir.path());
    let agent = Agent::start(dir.path(), &[]);
    let p = agent.profile(&format!("seconds=4&pid={}", deep.pid()));
    let stacks = stacks_of(&p, deep.pid());
    let total: i64 = stacks.iter().map(|(_, n)| n).sum();
    // The innermost 1,024 frames: spin (and, in a sample taken in its clock_gettime, the
    // frames above it), then rec up to the cut.
    let cut: i64 = stacks
        .iter()
        .filter(|(f, _)| {
            let Some(at_spin) = f.iter().position(|(name, _)| name == "spin") else {
                return false;
            };
            let below = &f[at_spin + 1..];
            below
                .last()
                .is_some_and(|(name, _)| name == "[truncated: depth limit]")
                && below[..below.len() - 1]
                    .iter()
                    .all(|(name, _)| name == "rec")
                && below.len() > 1020
        })
        .map(|(_, n)| n)
        .sum();
    say(&format!(
        "1,100-deep recursion (pid {}): {cut} of {total} samples keep spin and the rec frames \
         up to the 1,024th frame, marked [truncated: depth limit]",
        deep.pid()
    ));
    assert!(total >= 20, "only {total} samples");
    assert!(
        cut * 10 >= total * 9,
        "{cut} of {total}; a stack's end: {:?}",
        stacks.first().map(|(f, _)| &f[f.len().saturating_sub(5)..])
    );
}

#[test]
fn agent_unwinds_a_400_deep_recursion_without_frame_pointers_whole() {
    let _exclusive = crate::support::exclusive();
    let test = "agent_unwinds_a_400_deep_recursion_without_frame_pointers_whole";
    if !can_run(test) || !unwind_tools_present(test) {
        return;
    }
    let t = unwind_targets();
    let dir = tempfile::tempdir().unwrap();
    let deep = start_target(&t.c_deep_work, 60.0, dir.path());
    let agent = Agent::start(dir.path(), &[]);
    // A window for the process to be told to the BPF program (its first samples are walked
    // by frame pointers in the kernel).
    let _ = agent.profile(&format!("seconds=1&pid={}", deep.pid()));
    let p = agent.profile(&format!("seconds=5&pid={}", deep.pid()));
    let stacks = stacks_of(&p, deep.pid());
    let total: i64 = stacks.iter().map(|(_, n)| n).sum();
    let whole = |f: &[(String, bool)]| {
        let levels = f
            .iter()
            .filter(|(name, _)| name == "down_fixed" || name == "down_vla")
            .count();
        let names: Vec<&str> = f.iter().map(|(name, _)| name.as_str()).collect();
        let at_main = names.iter().position(|&n| n == "main");
        levels == 400
            && names.contains(&"work")
            && at_main.is_some()
            && !names.iter().any(|n| n.starts_with("[truncated"))
    };
    let hit: i64 = stacks
        .iter()
        .filter(|(f, _)| whole(f))
        .map(|(_, n)| n)
        .sum();
    let in_qsort: i64 = stacks
        .iter()
        .filter(|(f, _)| whole(f) && f.iter().any(|(name, _)| name == "compare"))
        .map(|(_, n)| n)
        .sum();
    say(&format!(
        "400-deep recursion without frame pointers (pid {}): {hit} of {total} samples ({:.1}%) \
         hold every frame down to main; {in_qsort} of them through qsort's callback",
        deep.pid(),
        100.0 * hit as f64 / total.max(1) as f64
    ));
    assert!(total >= 20, "only {total} samples");
    assert!(
        hit * 10 >= total * 9,
        "{hit} of {total}; some stacks' ends: {:?}",
        stacks
            .iter()
            .filter(|(f, _)| !whole(f))
            .take(3)
            .map(|(f, n)| (
                n,
                f.iter()
                    .take(6)
                    .chain(f.iter().rev().take(4))
                    .collect::<Vec<_>>()
            ))
            .collect::<Vec<_>>()
    );
    assert!(in_qsort > 0, "no sample in qsort's callback");
}

#[test]
fn agent_unwinds_threads_dlopened_libraries_signal_handlers_and_cpp_exceptions() {
    let _exclusive = crate::support::exclusive();
    let test = "agent_unwinds_threads_dlopened_libraries_signal_handlers_and_cpp_exceptions";
    if !can_run(test) || !unwind_tools_present(test) {
        return;
    }
    let t = unwind_targets();
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(dir.path(), &[]);
    let threads = start_target(&t.c_threads, 60.0, dir.path());
    let cpp = start_target(&t.cpp_exceptions, 60.0, dir.path());
    let signal = start_target(&t.c_signal, 60.0, dir.path());
    // Loads its library 1.5 s after the agent has seen it.
    let log = dir.path().join("agent-c-dlopen.log");
    let mut command = Command::new(&t.c_dlopen);
    command.arg(&t.c_dlopen_lib).arg("1.5").arg("60");
    let mut dl = Process::start("agent-c-dlopen", command, &log);
    dl.wait_for_output("loaded");
    // Five busy threads share two CPUs with whatever else runs: a window with the 20 samples
    // of each process that the checks below need. The library's mapping is found within a
    // second of its first sample outside the known ones, so a window that began as it was
    // loaded may hold a few unplaced samples of it: windows are taken until one shows the
    // library as the agent knows it then (at most three), rather than after a guessed wait.
    let dl_chain = ["lib_hot_leaf", "lib_work", "main"];
    let pids = [threads.pid(), dl.pid(), signal.pid(), cpp.pid()];
    let mut p = agent.profile_with_samples(8, &pids, 20);
    for _ in 0..2 {
        let (hit, total) = attribution(&p, dl.pid(), &dl_chain);
        if hit * 10 >= total * 9 {
            break;
        }
        say(&format!(
            "dlopen (pid {}): {hit} of {total} samples placed in a window begun as the library \
             was loaded; another window",
            dl.pid()
        ));
        p = agent.profile_with_samples(8, &pids, 20);
    }
    assert_attributed(
        &p,
        "threads",
        threads.pid(),
        &["thread_hot_leaf", "thread_work", "start_thread"],
    );
    assert_attributed(&p, "dlopen", dl.pid(), &dl_chain);
    // Through the kernel's signal frame (glibc's __restore_rt) to the interrupted code.
    let (hit, total) = attribution(&p, signal.pid(), &["sig_hot_leaf", "on_signal"]);
    let (through, _) = share_with(&p, signal.pid(), |f| f == "work");
    say(&format!(
        "signal handler (pid {}): {hit} of {total} samples in sig_hot_leaf ← on_signal, \
         {through} reach work through the signal frame",
        signal.pid()
    ));
    assert!(
        total >= 20 && hit * 10 >= total * 8 && through * 10 >= total * 8,
        "signal: {hit}/{through} of {total}; some stacks: {:?}",
        some_stacks(&p, signal.pid())
    );
    let (in_main, total) = share_with(&p, cpp.pid(), |f| f == "main");
    let mut chain = 0;
    for (frames, n) in stacks_of(&p, cpp.pid()) {
        let names: Vec<&str> = frames.iter().map(|(f, _)| f.as_str()).collect();
        if names
            .windows(3)
            .any(|w| w[0].starts_with("hot_leaf") && w[1].starts_with("work") && w[2] == "main")
        {
            chain += n;
        }
    }
    say(&format!(
        "C++ with exceptions (pid {}): {in_main} of {total} samples reach main, {chain} in \
         hot_leaf ← work ← main",
        cpp.pid()
    ));
    assert!(total >= 20, "C++: only {total} samples");
    assert!(
        in_main * 10 >= total * 9 && chain * 10 >= total * 7,
        "C++: {in_main}/{chain} of {total}; some stacks: {:?}",
        some_stacks(&p, cpp.pid())
    );
    let metrics = http_get(agent.addr, "/metrics", Duration::from_secs(5))
        .unwrap()
        .text();
    assert!(metric_value(&metrics, "parca_agent_maps_rereads_total") >= 1.0);
}

#[test]
fn agent_fetches_debug_files_from_debuginfod() {
    let _exclusive = crate::support::exclusive();
    let test = "agent_fetches_debug_files_from_debuginfod";
    if !can_run(test) || !unwind_tools_present(test) {
        return;
    }
    if Command::new("debuginfod")
        .arg("--version")
        .output()
        .is_err()
    {
        assert!(
            !bpf_required(),
            "PARCA_REQUIRE_BPF is set but {test} needs debuginfod (apt-get install debuginfod)"
        );
        say(&format!(
            "SKIP: {test}: debuginfod not found (apt-get install debuginfod)"
        ));
        return;
    }
    let t = unwind_targets();
    let dir = tempfile::tempdir().unwrap();
    // A real debuginfod serving a folder that holds only the debug file.
    let served = dir.path().join("served");
    std::fs::create_dir_all(&served).unwrap();
    std::fs::copy(&t.c_o2_debug, served.join("agent-c-o2.debug")).unwrap();
    let port = free_port();
    let mut command = Command::new("debuginfod");
    command
        .arg("-F")
        .arg(&served)
        .arg("-p")
        .arg(port.to_string())
        .arg("-d")
        .arg(dir.path().join("debuginfod.sqlite"))
        .args(["-t", "1"]);
    let mut server = Process::start("debuginfod", command, &dir.path().join("debuginfod.log"));
    let id = &t.c_o2_build_id;
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    poll(
        "debuginfod to serve the debug file",
        Duration::from_secs(60),
        Duration::from_millis(200),
        || {
            server.assert_running();
            match http_get(
                addr,
                &format!("/buildid/{id}/debuginfo"),
                Duration::from_secs(5),
            ) {
                Ok(r) if r.status == 200 => Ok(()),
                Ok(r) => Err(format!("HTTP {}", r.status)),
                Err(e) => Err(e),
            }
        },
    );
    let cache = dir.path().join("cache");
    let c = start_target(&t.c_o2, 60.0, dir.path());
    let agent = Agent::start(
        dir.path(),
        &[
            &format!("--debuginfod-urls=http://127.0.0.1:{port}"),
            &format!("--debuginfod-cache-dir={}", cache.display()),
            // Not the node's debug directory: the file must come from the server.
            &format!("--debug-dirs={}", dir.path().join("none").display()),
        ],
    );
    let p = agent.profile(&format!("seconds=4&pid={}", c.pid()));
    assert_attributed(
        &p,
        "stripped C, debug file from debuginfod",
        c.pid(),
        &C_CHAIN,
    );
    assert!(
        cache.join(id).join("debuginfo").exists(),
        "the debug file is cached by build id"
    );
}

#[test]
fn agent_pushes_over_tls_with_a_token_and_guards_its_own_port() {
    use crate::security::{curl, server_certificate, write};
    let _exclusive = crate::support::exclusive();
    if !can_run("agent_pushes_over_tls_with_a_token_and_guards_its_own_port") {
        return;
    }
    let t = targets();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // Longer than every wait below together: it is killed when the test ends.
    let mut hot = start_target(&t.c_hot, 600.0, d);
    let (_ca, ca_file) = server_certificate(d);
    let web = write(
        d,
        "web.yml",
        "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n",
    );
    let tokens = write(d, "tokens", "push-token\n");
    let web_arg = format!("--web-config-file={}", web.display());
    let mut server = Server::spawn(
        &parca_binary(false),
        None,
        &[
            &web_arg,
            &format!("--web-bearer-token-file={}", tokens.display()),
        ],
        |_| "scrape_configs: []\n".into(),
    );
    let ca_arg = ca_file.to_str().unwrap().to_owned();
    let auth = "Authorization: Bearer push-token";
    let server_url = |path: &str| format!("https://127.0.0.1:{}{path}", server.addr.port());
    let ready = server_url("/-/ready");
    poll(
        "the TLS server",
        Duration::from_secs(30),
        Duration::from_millis(100),
        || {
            server.process.assert_running();
            let got = curl(d, &["--cacert", &ca_arg, "-H", auth, &ready]);
            (got.status == 200).then_some(()).ok_or(format!("{got:?}"))
        },
    );

    // The agent's own port: the same kind of file, with a basic-auth user.
    let agent_port = free_port();
    let hash = bcrypt::hash("agent-pw", 6).unwrap();
    let agent_web = write(
        d,
        "agent-web.yml",
        &format!("basic_auth_users:\n  ops: {hash}\n"),
    );
    let token_file = write(d, "agent-token", "push-token\n");
    let mut command = Command::new(agent_binary());
    command.args([
        format!("--http-address=127.0.0.1:{agent_port}"),
        format!("--profiling-cpu-sampling-frequency={HZ}"),
        "--profiling-duration=2s".into(),
        "--node=tls-node".into(),
        format!("--remote-store-address=127.0.0.1:{}", server.addr.port()),
        format!("--remote-store-ca-file={}", ca_file.display()),
        format!("--remote-store-bearer-token-file={}", token_file.display()),
        "--metadata-external-labels=region=eu-1;cluster=e2e".into(),
        format!("--web-config-file={}", agent_web.display()),
    ]);
    let mut agent = Process::start("parca-agent", command, &d.join("agent.log"));
    let agent_metrics = format!("http://127.0.0.1:{agent_port}/metrics");
    let metrics = poll(
        "the agent's port",
        Duration::from_secs(30),
        Duration::from_millis(100),
        || {
            agent.assert_running();
            let got = curl(d, &["-u", "ops:agent-pw", &agent_metrics]);
            (got.status == 200)
                .then_some(got.body.clone())
                .ok_or(format!("{got:?}"))
        },
    );
    assert!(
        metrics.contains("parca_agent_push_pending_windows"),
        "{metrics}"
    );
    let refused = curl(d, &["-u", "ops:wrong", &agent_metrics]);
    assert_eq!(refused.status, 401, "{refused:?}");
    let anonymous = curl(
        d,
        &[&format!(
            "http://127.0.0.1:{agent_port}/debug/pprof/profile?seconds=1"
        )],
    );
    assert_eq!(anonymous.status, 401, "{anonymous:?}");

    // Its pushes arrive over TLS with the token, with the external labels on every series.
    let query = "merge(parca_agent:samples:count:cpu:nanoseconds:delta{region=\"eu-1\",\
                 cluster=\"e2e\",node=\"tls-node\",comm=\"agent-c-hot\"}[5m])";
    let url = server_url(&format!(
        "/api/v1/query?format=top&limit=50&query={}",
        encode(query)
    ));
    // What the agent says of its pushes, for a failure's message.
    let hot_pid = hot.pid();
    let push_state = || {
        let metrics = curl(d, &["-u", "ops:agent-pw", &agent_metrics]).body;
        let pushes: Vec<&str> = metrics
            .lines()
            .filter(|l| l.starts_with("parca_agent_push"))
            .collect();
        let log = std::fs::read_to_string(d.join("agent.log")).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(20).collect();
        // What the server holds of this node, and what the agent sampled.
        let series = curl(
            d,
            &[
                "--cacert",
                &ca_arg,
                "-H",
                auth,
                &server_url(&format!(
                    "/api/v1/series?match[]={}",
                    encode("{node=\"tls-node\"}")
                )),
            ],
        )
        .body;
        let sampled: Vec<&str> = metrics
            .lines()
            .filter(|l| l.starts_with("parca_agent_samples") || l.starts_with("parca_agent_bpf"))
            .take(20)
            .collect();
        let target = std::fs::read_to_string(format!("/proc/{}/stat", hot_pid)).unwrap_or_default();
        format!(
            "the target's /proc/PID/stat: {target}\n\
             the agent's push metrics: {pushes:#?}\nits sample counters: {sampled:#?}\n\
             the server's series of node tls-node: {series}\n\
             its log's last lines (newest first): {tail:#?}"
        )
    };
    let top = poll(
        "pushed windows over TLS",
        Duration::from_secs(60),
        Duration::from_millis(500),
        || {
            agent.assert_running();
            if let Some(status) = hot.exited() {
                panic!("agent-c-hot exited ({status})\n{}", push_state());
            }
            let got = curl(d, &["--cacert", &ca_arg, "-H", auth, &url]);
            if got.status == 200 && got.body.contains("hot_leaf") {
                Ok(got.body)
            } else {
                Err(format!("{got:?}\n{}", push_state()))
            }
        },
    );
    assert!(top.contains("hot_leaf"), "{top}");
    // The server may show the window before the agent has read its answer and counted it.
    poll(
        "the agent to count its push",
        Duration::from_secs(30),
        Duration::from_millis(200),
        || {
            let metrics = curl(d, &["-u", "ops:agent-pw", &agent_metrics]).body;
            if metric_value(&metrics, "parca_agent_pushes_total") >= 1.0 {
                Ok(())
            } else {
                Err(metrics)
            }
        },
    );
    drop(agent);

    // Without the CA but told not to verify, and with the token inline: pushes arrive too.
    let mut command = Command::new(agent_binary());
    command.args([
        format!("--http-address=127.0.0.1:{}", free_port()),
        format!("--profiling-cpu-sampling-frequency={HZ}"),
        "--profiling-duration=2s".into(),
        "--node=skip-verify-node".into(),
        format!(
            "--remote-store-address=https://127.0.0.1:{}",
            server.addr.port()
        ),
        "--remote-store-insecure-skip-verify".into(),
        "--remote-store-bearer-token=push-token".into(),
    ]);
    let mut agent = Process::start("parca-agent", command, &d.join("agent-skip.log"));
    let query = "count(parca_agent:samples:count:cpu:nanoseconds:delta{node=\"skip-verify-node\"})";
    poll(
        "pushes without verification",
        Duration::from_secs(60),
        Duration::from_millis(500),
        || {
            agent.assert_running();
            let url = server_url(&format!(
                "/api/v1/query?time={}&query={}",
                unix_now_s(),
                encode(query)
            ));
            let got = curl(d, &["--cacert", &ca_arg, "-H", auth, &url]);
            if got.status == 200 && got.body.contains("\"value\"") {
                Ok(())
            } else {
                Err(format!("{got:?}"))
            }
        },
    );
    drop(agent);

    // Only the units asked for: nothing here runs in `no-such.service`.
    let filtered = Agent::start(d, &["--systemd-units=no-such.service"]);
    let p = filtered.profile("seconds=2");
    assert!(
        p.sample.is_empty(),
        "{} samples outside the unit",
        p.sample.len()
    );
    let r = http_get(filtered.addr, "/metrics", Duration::from_secs(5)).unwrap();
    assert!(metric_value(&r.text(), "parca_agent_filtered_samples_total") > 0.0);
    drop(hot);
}

/// Now in Unix seconds, for instant queries.
fn unix_now_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs()
}

/// JIT code named from its perf map: a program of ours that compiles a function into
/// anonymous executable memory and names it in `/tmp/perf-PID.map` (as the JVM's perf-map
/// agent, LuaJIT or Node's `--perf-basic-prof` do) is shown with that name in a `[jit]`
/// mapping, between its native callers. (Node's JavaScript frames are read from V8 itself:
/// `agent_node.rs`.)
#[test]
fn agent_names_jit_frames_from_perf_maps() {
    let _exclusive = crate::support::exclusive();
    let test = "agent_names_jit_frames_from_perf_maps";
    if !can_run(test) || !unwind_tools_present(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let jit = dir.path().join("agent-jit");
    tool(
        Command::new("gcc")
            .args(["-O2", "-fno-omit-frame-pointer", "-o"])
            .arg(&jit)
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("targets/agent/jit.c")),
        "gcc builds the C targets (apt-get install gcc)",
    );
    let mut command = Command::new(&jit);
    command.arg("120");
    let target = Process::start("agent-jit", command, &dir.path().join("jit.log"));
    let agent = Agent::start(dir.path(), &[]);
    // A window for the process to be told to the BPF program.
    let _ = agent.profile(&format!("seconds=1&pid={}", target.pid()));
    let p = agent.profile(&format!("seconds=5&pid={}", target.pid()));
    let stacks = stacks_of(&p, target.pid());
    let total: i64 = stacks.iter().map(|(_, n)| n).sum();
    let named: i64 = stacks
        .iter()
        .filter(|(frames, _)| {
            let names: Vec<&str> = frames.iter().map(|(name, _)| name.as_str()).collect();
            names.starts_with(&["jit_hot_loop", "run", "main"])
        })
        .map(|(_, n)| n)
        .sum();
    say(&format!(
        "agent-jit: {named} of {total} samples name jit_hot_loop ← run ← main"
    ));
    assert!(total > 50, "too few samples of the JIT: {total}");
    assert!(
        named * 10 >= total * 9,
        "{named} of {total} samples name jit_hot_loop ← run ← main; some stacks: {:?}",
        some_stacks(&p, target.pid())
    );
    let jit_mapping = p.mapping.iter().any(|m| string(&p, m.filename) == "[jit]");
    assert!(jit_mapping, "JIT frames sit in the `[jit]` mapping");
}

/// The path of a program on `PATH`.
pub(crate) fn which(program: &str) -> Result<PathBuf, String> {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join(program))
        .find(|p| p.exists())
        .ok_or_else(|| format!("no {program} on PATH"))
}
