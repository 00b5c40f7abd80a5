//! The agent on CPython programs: Python frames (function, file, line) read at sample time and
//! placed among the native frames, on Debian's own interpreters (the stripped `python3.11`
//! and the debug build `python3.11d` of python3.11-dbg) and pyenv's shared builds of 3.10 to
//! 3.13, with C extension code, threads and a process that exits inside the window; and the
//! runtime labels. The programs are in
//! `tests/targets/python-frames/`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use parca_pprof::proto;

use crate::agent::{Agent, can_run, label, say, string};
use crate::server_harness::Process;

/// Debian's interpreter: stripped, no frame pointers, libpython linked in.
const PYTHON: &str = "/usr/bin/python3.11";
/// Debian's debug build of the same version (package python3.11-dbg).
const PYTHON_DEBUG: &str = "/usr/bin/python3.11d";

fn program(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("targets/python-frames")
        .join(name)
}

/// Starts `python program seconds`.
fn start(python: &str, name: &str, seconds: f64, dir: &Path) -> Process {
    let mut command = Command::new(python);
    command.arg(program(name)).arg(seconds.to_string());
    let label = format!(
        "{} {name}",
        Path::new(python).file_name().unwrap().to_string_lossy()
    );
    Process::start(&label, command, &dir.join(format!("{label}.log")))
}

/// One frame of a sample, leaf first (inlined frames expanded).
#[derive(Debug)]
pub(crate) struct SampleFrame {
    pub(crate) function: String,
    pub(crate) file: String,
    pub(crate) line: i64,
    /// The mapping's file name; empty for frames without one (Python's, PHP's).
    pub(crate) mapping: String,
}

impl SampleFrame {
    fn is_python(&self) -> bool {
        self.mapping.is_empty() && self.file.ends_with(".py")
    }
}

/// Each sample of `pid`: its frames leaf first, and its value.
pub(crate) fn samples_of(p: &proto::Profile, pid: u32) -> Vec<(Vec<SampleFrame>, i64)> {
    let pid = pid.to_string();
    p.sample
        .iter()
        .filter(|s| label(p, s, "pid") == Some(pid.as_str()))
        .map(|s| {
            let mut frames = Vec::new();
            for &id in &s.location_id {
                let loc = &p.location[id as usize - 1];
                let mapping = if loc.mapping_id == 0 {
                    String::new()
                } else {
                    string(p, p.mapping[loc.mapping_id as usize - 1].filename).to_owned()
                };
                if loc.line.is_empty() {
                    frames.push(SampleFrame {
                        function: format!("{:#x}", loc.address),
                        file: String::new(),
                        line: 0,
                        mapping: mapping.clone(),
                    });
                }
                for line in &loc.line {
                    let f = &p.function[line.function_id as usize - 1];
                    frames.push(SampleFrame {
                        function: string(p, f.name).to_owned(),
                        file: string(p, f.filename).to_owned(),
                        line: line.line,
                        mapping: mapping.clone(),
                    });
                }
            }
            (frames, s.value[0])
        })
        .collect()
}

/// The Python frames' names, leaf first.
fn python_names(frames: &[SampleFrame]) -> Vec<&str> {
    frames
        .iter()
        .filter(|f| f.is_python())
        .map(|f| f.function.as_str())
        .collect()
}

/// A sample's frames, short, for failure messages.
fn show(frames: &[SampleFrame]) -> String {
    frames
        .iter()
        .map(|f| {
            if f.is_python() {
                format!(
                    "{}@{}:{}",
                    f.function,
                    f.file.rsplit('/').next().unwrap_or(""),
                    f.line
                )
            } else {
                f.function.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(" ← ")
}

fn some_samples(samples: &[(Vec<SampleFrame>, i64)]) -> String {
    samples
        .iter()
        .take(6)
        .map(|(frames, n)| format!("\n  {n}× {}", show(frames)))
        .collect()
}

/// The line number of the first line of the file `path` that contains `text`.
pub(crate) fn line_in(path: &Path, text: &str) -> i64 {
    let source = std::fs::read_to_string(path).unwrap();
    source
        .lines()
        .position(|l| l.contains(text))
        .unwrap_or_else(|| panic!("no {text:?} in {}", path.display())) as i64
        + 1
}

/// The line number of the first line of `program` that contains `text`.
fn line_of(program_name: &str, text: &str) -> i64 {
    line_in(&program(program_name), text)
}

/// Checks the samples of a process running `chain.py`: the share whose Python frames are
/// inner_hot ← middle_step ← outer_loop ← <module> of chain.py with the lines of the calls,
/// placed among native frames (interpreter frames below `<module>`, no evaluation loop frame
/// left in their place): at least `at_least` of them, and at least 15 samples.
fn check_chain(p: &proto::Profile, what: &str, pid: u32, at_least: f64) {
    if let Err(why) = chain_holds(p, what, pid, at_least) {
        panic!("{why}");
    }
}

/// [`check_chain`]'s verdict, as a value: `Err` says what fell short.
fn chain_holds(p: &proto::Profile, what: &str, pid: u32, at_least: f64) -> Result<(), String> {
    let samples = samples_of(p, pid);
    let total: i64 = samples.iter().map(|(_, n)| n).sum();
    let call_middle = line_of("chain.py", "return inner_hot(n)");
    let call_step = line_of("chain.py", "middle_step(20000)");
    let inner = line_of("chain.py", "def inner_hot")..=line_of("chain.py", "return total");
    let mut hit = 0;
    let mut misses = Vec::new();
    for (frames, n) in &samples {
        let python: Vec<&SampleFrame> = frames.iter().filter(|f| f.is_python()).collect();
        let names: Vec<&str> = python.iter().map(|f| f.function.as_str()).collect();
        let module = frames
            .iter()
            .position(|f| f.function == "<module>" && f.is_python());
        let ok = names == ["inner_hot", "middle_step", "outer_loop", "<module>"]
            && python.iter().all(|f| f.file.ends_with("/chain.py"))
            && inner.contains(&python[0].line)
            && python[1].line == call_middle
            && python[2].line == call_step
            // The interpreter's own frames are below the module, and no evaluation loop
            // frame stands where Python frames should.
            && module.is_some_and(|m| frames[m + 1..].iter().any(|f| !f.mapping.is_empty()))
            && !frames
                .iter()
                .any(|f| f.function.starts_with("_PyEval_EvalFrameDefault"));
        if ok {
            hit += n;
        } else {
            misses.push((frames, *n));
        }
    }
    say(&format!(
        "{what} (pid {pid}): {hit} of {total} samples ({:.1}%) show inner_hot ← middle_step ← \
         outer_loop ← <module> with their lines",
        100.0 * hit as f64 / total.max(1) as f64
    ));
    if total < 15 {
        return Err(format!("{what}: only {total} samples"));
    }
    if (hit as f64) < at_least * total as f64 {
        let shown: String = misses
            .iter()
            .take(6)
            .map(|(frames, n)| format!("\n  {n}× {}", show(frames)))
            .collect();
        return Err(format!(
            "{what}: {hit} of {total} samples show the chain; some that do not:{shown}"
        ));
    }
    Ok(())
}

/// Takes 8 s windows of `agent` (within three minutes) until `check` passes on one: during each,
/// `short` is run from the window's second second until it exits (a process that starts after
/// the window does and is gone before it ends); `check` gets the profile and its pid. A short
/// process gets the CPUs it can beside the others: on a busy machine a window may hold too few
/// of its samples, so windows are taken again rather than made longer.
pub(crate) fn window_with_a_short_process(
    agent: &Agent,
    what: &str,
    mut short: impl FnMut() -> Command,
    check: impl Fn(&proto::Profile, u32) -> Result<(), String>,
) {
    let addr = agent.addr;
    crate::server_harness::poll(what, Duration::from_secs(180), Duration::ZERO, || {
        let request = std::thread::spawn(move || {
            crate::server_harness::http_get(
                addr,
                "/debug/pprof/profile?seconds=8",
                Duration::from_secs(60),
            )
        });
        std::thread::sleep(Duration::from_secs(1));
        let mut process = short().spawn().unwrap();
        let short_pid = process.id();
        assert!(process.wait().unwrap().success());
        let r = request.join().unwrap()?;
        assert_eq!(r.status, 200, "{}", r.text());
        let p = parca_pprof::decode(&r.body, &Default::default())
            .unwrap()
            .to_proto();
        check(&p, short_pid)
    });
}

/// Python frames in place of the interpreter's evaluation loop, with their files and lines, on
/// Debian's stripped `python3.11` (at least 80% of samples show the whole chain right) and on
/// its debug build `python3.11d`; and for a process that starts and exits inside the window.
#[test]
fn agent_shows_python_frames_of_debians_stripped_and_debug_interpreters() {
    let _exclusive = crate::support::exclusive();
    let test = "agent_shows_python_frames_of_debians_stripped_and_debug_interpreters";
    if !can_run(test) {
        return;
    }
    for python in [PYTHON, PYTHON_DEBUG] {
        if !Path::new(python).exists() {
            return crate::server_harness::skip(
                test,
                &format!("no {python} (apt-get install python3.11 python3.11-dbg)"),
            );
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let stripped = start(PYTHON, "chain.py", 240.0, dir.path());
    let debug = start(PYTHON_DEBUG, "chain.py", 240.0, dir.path());
    let agent = Agent::start(dir.path(), &[]);
    // Let the interpreters start (imports are no part of the chain).
    std::thread::sleep(Duration::from_secs(1));
    window_with_a_short_process(
        &agent,
        "a window in which every interpreter shows the chain",
        || {
            let mut short = Command::new(PYTHON);
            short.arg(program("chain.py")).arg("3");
            short
        },
        |p, short_pid| {
            chain_holds(p, "python3.11 (stripped)", stripped.pid(), 0.8)?;
            chain_holds(p, "python3.11d (debug build)", debug.pid(), 0.8)?;
            // Its first samples come before the agent has read the process (no Python frames
            // yet), and code objects first seen in its last 100 ms are read after it is gone.
            chain_holds(p, "python3.11 exited within the window", short_pid, 0.6)
        },
    );
}

/// A C extension's native frames under the Python function that called it (zlib's `deflate`
/// under `compress_loop`), and each thread of a threaded program with its own Python stack.
#[test]
fn agent_places_c_extension_frames_under_python_callers_and_reads_each_thread() {
    let _exclusive = crate::support::exclusive();
    let test = "agent_places_c_extension_frames_under_python_callers_and_reads_each_thread";
    if !can_run(test) {
        return;
    }
    if !Path::new(PYTHON).exists() {
        return crate::server_harness::skip(test, "no /usr/bin/python3.11");
    }
    let dir = tempfile::tempdir().unwrap();
    let mut compress = start(PYTHON, "compress.py", 60.0, dir.path());
    let mut threads = start(PYTHON, "threads.py", 60.0, dir.path());
    let agent = Agent::start(dir.path(), &[]);
    compress.wait_for_output("ready");
    threads.wait_for_output("ready");
    // A window with the 15 samples of each program checked below, taken again if the machine
    // was too busy for them.
    let p = agent.profile_with_samples(6, &[compress.pid(), threads.pid()], 15);

    // zlib: native frames of libz, then compress_loop as the innermost Python frame.
    let samples = samples_of(&p, compress.pid());
    let total: i64 = samples.iter().map(|(_, n)| n).sum();
    let under_caller: i64 = samples
        .iter()
        .filter(|(frames, _)| {
            let Some(first_python) = frames.iter().position(SampleFrame::is_python) else {
                return false;
            };
            frames[..first_python]
                .iter()
                .any(|f| f.mapping.contains("libz.so"))
                && frames[first_python].function == "compress_loop"
                && frames[first_python].file.ends_with("/compress.py")
                && !frames[first_python..]
                    .iter()
                    .any(|f| f.mapping.contains("libz.so"))
        })
        .map(|(_, n)| n)
        .sum();
    say(&format!(
        "compress.py: {under_caller} of {total} samples in libz under compress_loop"
    ));
    assert!(total >= 15, "compress.py: only {total} samples");
    assert!(
        under_caller * 2 >= total,
        "{under_caller} of {total} samples have libz frames under compress_loop:{}",
        some_samples(&samples)
    );

    // Threads: each worker's chain, down to threading's bootstrap.
    let samples = samples_of(&p, threads.pid());
    let total: i64 = samples.iter().map(|(_, n)| n).sum();
    let chain = |spin: &str, worker: &str| -> i64 {
        samples
            .iter()
            .filter(|(frames, _)| {
                python_names(frames)
                    == [
                        spin,
                        worker,
                        "Thread.run",
                        "Thread._bootstrap_inner",
                        "Thread._bootstrap",
                    ]
            })
            .map(|(_, n)| n)
            .sum()
    };
    let (a, b) = (chain("spin_a", "worker_a"), chain("spin_b", "worker_b"));
    say(&format!(
        "threads.py: {a} samples in worker_a's chain, {b} in worker_b's, of {total}"
    ));
    assert!(total >= 15, "threads.py: only {total} samples");
    assert!(
        (a + b) * 10 >= total * 8 && a * 5 >= total && b * 5 >= total,
        "threads: {a} + {b} of {total} samples show a worker's chain:{}",
        some_samples(&samples)
    );
}
/// A CPython process's samples say which runtime and version run it, so a query can select them
/// (`{runtime="python"}`): Debian's stripped `/usr/bin/python3.11`, recognized by its exported
/// `_PyRuntime` and `Py_Version`. Other processes carry no such labels.
#[test]
fn agent_labels_python_processes_with_their_runtime_and_version() {
    let _exclusive = crate::support::exclusive();
    if !can_run("agent_labels_python_processes_with_their_runtime_and_version") {
        return;
    }
    let python = Path::new("/usr/bin/python3.11");
    if !python.exists() {
        return crate::server_harness::skip(
            "agent_labels_python_processes_with_their_runtime_and_version",
            "no /usr/bin/python3.11 (apt-get install python3.11)",
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let mut command = Command::new(python);
    command.args([
        "-c",
        "import time\nend = time.time() + 60\nx = 0\nwhile time.time() < end:\n    x += 1\n",
    ]);
    let py = Process::start("python3.11", command, &dir.path().join("python.log"));
    let agent = Agent::start(dir.path(), &[]);
    let p = agent.profile("seconds=3");
    let pid = py.pid().to_string();
    let ours: Vec<&proto::Sample> = p
        .sample
        .iter()
        .filter(|s| label(&p, s, "pid") == Some(pid.as_str()))
        .collect();
    assert!(!ours.is_empty(), "no samples of the python process");
    let version = std::process::Command::new(python)
        .args(["-c", "import platform; print(platform.python_version())"])
        .output()
        .expect("python version");
    let version = String::from_utf8_lossy(&version.stdout).trim().to_owned();
    for s in &ours {
        assert_eq!(label(&p, s, "runtime"), Some("python"));
        assert_eq!(label(&p, s, "runtime_version"), Some(version.as_str()));
    }
    let agent_pid = agent.process.pid().to_string();
    assert!(
        p.sample
            .iter()
            .filter(|s| label(&p, s, "pid") == Some(agent_pid.as_str()))
            .all(|s| label(&p, s, "runtime").is_none()),
        "the agent itself is no Python process"
    );
}

/// pyenv's CPython builds (`--enable-shared`, as the official `python:3.x` images: a small
/// executable beside an unstripped `libpython3.X.so`), every minor version from 3.10 to 3.13
/// side by side: at least 80% of each one's samples show the chain with files and lines.
#[test]
fn agent_shows_python_frames_of_pyenvs_shared_builds_310_to_313() {
    let _exclusive = crate::support::exclusive();
    let test = "agent_shows_python_frames_of_pyenvs_shared_builds_310_to_313";
    if !can_run(test) {
        return;
    }
    let root = Path::new("/root/.pyenv/versions");
    let builds: Vec<(String, PathBuf)> = ["3.10.13", "3.11.7", "3.12.1", "3.13.0"]
        .iter()
        .filter_map(|version| {
            let minor = version
                .rsplit_once('.')
                .map(|(mm, _)| mm)
                .unwrap_or(version);
            let bin = root.join(version).join(format!("bin/python{minor}"));
            bin.exists().then(|| (version.to_string(), bin))
        })
        .collect();
    if builds.len() < 4 {
        return crate::server_harness::skip(
            test,
            &format!(
                "pyenv's CPython 3.10.13, 3.11.7, 3.12.1 and 3.13.0 are not all under {} \
                 (found {:?})",
                root.display(),
                builds.iter().map(|(v, _)| v).collect::<Vec<_>>()
            ),
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let running: Vec<(String, Process)> = builds
        .iter()
        .map(|(version, bin)| {
            let process = start(&bin.to_string_lossy(), "chain.py", 60.0, dir.path());
            (version.clone(), process)
        })
        .collect();
    let agent = Agent::start(dir.path(), &[]);
    // Let the interpreters start (imports are no part of the chain), and the agent read them.
    let _ = agent.profile("seconds=2");
    let pids: Vec<u32> = running.iter().map(|(_, p)| p.pid()).collect();
    let p = agent.profile_with_samples(8, &pids, 30);
    for (version, process) in &running {
        let pid = process.pid().to_string();
        let labelled = p
            .sample
            .iter()
            .find(|s| label(&p, s, "pid") == Some(pid.as_str()));
        // 3.11 and later export `Py_Version`; before, the version is the library's name's.
        let shown = labelled.and_then(|s| label(&p, s, "runtime_version"));
        let minor = version.rsplit_once('.').map(|(mm, _)| mm);
        assert!(
            shown == Some(version.as_str()) || (version.starts_with("3.10") && shown == minor),
            "the runtime_version label of pyenv's {version}: {shown:?}"
        );
        check_chain(&p, &format!("pyenv's python {version}"), process.pid(), 0.8);
        // No frame is named after a symbol that does not cover it (`_init` before #29).
        let misnamed: Vec<String> = samples_of(&p, process.pid())
            .iter()
            .flat_map(|(frames, _)| frames.iter())
            .filter(|f| f.function == "_init" || f.function == "_fini")
            .map(|f| format!("{} in {}", f.function, f.mapping))
            .collect();
        assert!(misnamed.is_empty(), "pyenv's {version}: {misnamed:?}");
    }
}
