//! The agent beside hostile objects, with real BPF as root: a program whose `.debug_frame` is
//! 100 MB of noise, and one whose `.eh_frame` is noise. Neither may crash the agent or cost it
//! more than its limits; the first is refused as too large, the second's entries are counted as
//! malformed, both in metrics, and both programs are still sampled.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::agent::{Agent, can_run, label, metric_value, run, say};
use crate::server_harness::{Process, http_get, poll};

/// Deterministic noise (xorshift).
fn noise(len: usize, mut x: u32) -> Vec<u8> {
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

/// The peak RSS (`VmHWM`) of process `pid`, in kB.
fn peak_rss_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// `tests/targets/agent/hot.c` built without frame pointers into `dir/name`, with `build_id`
/// (hex): objects are known by their build id, so each forged one needs its own.
fn hot(dir: &Path, name: &str, build_id: &str) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("targets/agent/hot.c");
    let bin = dir.join(name);
    run(Command::new("gcc")
        .args(["-O2", "-fomit-frame-pointer", "-g0"])
        .arg(format!("-Wl,--build-id=0x{build_id}"))
        .arg("-o")
        .arg(&bin)
        .arg(&src))
    .expect("gcc builds hot.c (apt-get install gcc)");
    bin
}

/// The hot program with 100 MB of noise added as `.debug_frame` (not loaded: only the agent reads
/// it).
fn with_huge_debug_frame(dir: &Path) -> PathBuf {
    let plain = hot(
        dir,
        "hostile-plain",
        "0b5e55ed0000000000000000000000000000001",
    );
    let blob = dir.join("noise.bin");
    std::fs::write(&blob, noise(100 << 20, 0x1234_5678)).unwrap();
    let bin = dir.join("hostile-huge");
    run(Command::new("objcopy")
        .arg(format!("--add-section=.debug_frame={}", blob.display()))
        .arg(&plain)
        .arg(&bin))
    .expect("objcopy adds a section (apt-get install binutils)");
    bin
}

/// The hot program with its `.eh_frame` overwritten by noise, in place (same size).
fn with_noise_eh_frame(dir: &Path) -> PathBuf {
    use object::{Object, ObjectSection};
    let bin = hot(
        dir,
        "hostile-noise",
        "0b5e55ed0000000000000000000000000000002",
    );
    let mut bytes = std::fs::read(&bin).unwrap();
    let (offset, size) = object::File::parse(&*bytes)
        .unwrap()
        .section_by_name(".eh_frame")
        .and_then(|s| s.file_range())
        .expect("an .eh_frame");
    let garbage = noise(size as usize, 0x9E37_79B9);
    bytes[offset as usize..(offset + size) as usize].copy_from_slice(&garbage);
    std::fs::write(&bin, &bytes).unwrap();
    bin
}

#[test]
fn agent_refuses_hostile_unwind_info_in_bounded_memory_and_says_so() {
    let _exclusive = crate::support::exclusive();
    let test = "agent_refuses_hostile_unwind_info_in_bounded_memory_and_says_so";
    if !can_run(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let huge = with_huge_debug_frame(dir.path());
    let garbled = with_noise_eh_frame(dir.path());
    let start = |bin: &Path| {
        let mut command = Command::new(bin);
        command.arg("60");
        let name = bin.file_name().unwrap().to_string_lossy().into_owned();
        Process::start(&name, command, &dir.path().join(format!("{name}.log")))
    };
    let huge_process = start(&huge);
    let garbled_process = start(&garbled);
    let mut agent = Agent::start(dir.path(), &[]);
    let pids = [huge_process.pid(), garbled_process.pid()];

    // Both objects go through the compiler: one refused, one with its noise counted.
    let (too_large, malformed) = poll(
        "the agent to refuse the 100 MB .debug_frame and count the noisy .eh_frame",
        Duration::from_secs(60),
        Duration::from_millis(500),
        || {
            agent.process.assert_running();
            let metrics = http_get(agent.addr, "/metrics", Duration::from_secs(10))?.text();
            let too_large = metric_value(
                &metrics,
                "parca_agent_unwind_table_errors_total{reason=\"too_large\"}",
            );
            let malformed = metric_value(&metrics, "parca_agent_unwind_malformed_cfi_total");
            if too_large >= 1.0 && malformed >= 1.0 {
                Ok((too_large, malformed))
            } else {
                Err(format!("too_large {too_large}, malformed {malformed}"))
            }
        },
    );
    // Both programs are still profiled (by frame pointers where they have no rows).
    let p = agent.profile_with_samples(5, &pids, 20);
    for pid in pids {
        let pid = pid.to_string();
        let n: i64 = p
            .sample
            .iter()
            .filter(|s| label(&p, s, "pid") == Some(pid.as_str()))
            .map(|s| s.value[0])
            .sum();
        assert!(n >= 20, "process {pid}: {n} samples");
    }
    agent.process.assert_running();
    let peak_kb = peak_rss_kb(agent.process.pid());
    say(&format!(
        "hostile objects: too_large {too_large}, malformed CFI entries {malformed}; the agent's \
         peak RSS {} MB",
        peak_kb / 1024
    ));
    // The 100 MB section was never read into memory (the limit is 64 MiB per section): read
    // whole, it put this debug build of the agent at 176 MB; without it, 60-110 MB here.
    assert!(peak_kb < 150 * 1024, "peak RSS {peak_kb} kB");
}

/// `tests/targets/python-hostile/forged.c` built into `dir`: an executable that CPython's
/// detection takes for a 3.11 (its name, `_PyRuntime`, `Py_Version`), whose thread states lead
/// to forged frame chains (a cycle, unmapped code and callers, a chain of 10,000 frames of
/// random words).
fn forged_python(dir: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("targets/python-hostile/forged.c");
    let bin = dir.join("python3.11-forged");
    run(Command::new("gcc")
        .args(["-O2", "-g0", "-rdynamic", "-pthread", "-o"])
        .arg(&bin)
        .arg(&src))
    .expect("gcc builds forged.c (apt-get install gcc)");
    bin
}

#[test]
fn agent_reads_forged_interpreter_memory_in_bounded_time_and_memory_and_says_so() {
    let _exclusive = crate::support::exclusive();
    let test = "agent_reads_forged_interpreter_memory_in_bounded_time_and_memory_and_says_so";
    if !can_run(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = forged_python(dir.path());
    let mut command = Command::new(&bin);
    command.arg("120");
    let forged = Process::start("python3.11-forged", command, &dir.path().join("forged.log"));
    let mut agent = Agent::start(dir.path(), &[]);
    let pid = forged.pid();

    // The program reads the forged chains (cut: the cycle and the long chain never end) and the
    // agent counts the code objects it cannot name.
    let (cut, unreadable) = poll(
        "the agent to read the forged Python frames, cut their chains and count what it cannot name",
        Duration::from_secs(60),
        Duration::from_millis(500),
        || {
            agent.process.assert_running();
            let metrics = http_get(agent.addr, "/metrics", Duration::from_secs(10))?.text();
            let cut = metric_value(&metrics, "parca_agent_python_stacks_total{chain=\"cut\"}");
            let unreadable = metric_value(
                &metrics,
                "parca_agent_python_frames_total{code=\"unreadable\"}",
            );
            if cut >= 10.0 && unreadable >= 10.0 {
                Ok((cut, unreadable))
            } else {
                Err(format!(
                    "cut chains {cut}, unreadable code objects {unreadable}"
                ))
            }
        },
    );
    // Its samples keep coming, each stack bounded: the native frames (a few) and at most the
    // 96 Python frames a walk reads.
    let p = agent.profile_with_samples(5, &[pid], 20);
    let stacks = crate::agent::stacks_of(&p, pid);
    let deepest = stacks
        .iter()
        .map(|(frames, _)| frames.len())
        .max()
        .unwrap_or(0);
    assert!(
        (1..=96 + 32).contains(&deepest),
        "deepest stack {deepest} frames: {:?}",
        stacks.first()
    );
    // The forged samples still show where the native code runs.
    assert!(
        stacks.iter().any(|(frames, _)| frames
            .iter()
            .any(|(f, _)| f == "_PyEval_EvalFrameDefault")
            || frames.iter().any(|(f, _)| f.starts_with("[python"))),
        "no sample shows the evaluation loop or a Python frame: {:?}",
        stacks.first()
    );
    agent.process.assert_running();
    let peak_kb = peak_rss_kb(agent.process.pid());
    say(&format!(
        "forged interpreter memory: {cut} chains cut, {unreadable} code objects unreadable, \
         deepest stack {deepest} frames; the agent's peak RSS {} MB",
        peak_kb / 1024
    ));
    assert!(peak_kb < 150 * 1024, "peak RSS {peak_kb} kB");
}
