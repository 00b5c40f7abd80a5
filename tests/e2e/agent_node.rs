//! The agent on Node.js (the image's Node 20, from NodeSource) with no flag: JavaScript frames
//! (function, script, line) read from V8's own frames and objects, the functions TurboFan
//! inlined expanded, and placed among the native frames; for a long-running program, one that
//! starts and exits inside the window, and one run by the interpreter alone. The program is
//! `tests/targets/node/chain.js`.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::agent::{Agent, can_run, label, which};
use crate::agent_php::share_holds;
use crate::agent_python::{SampleFrame, window_with_a_short_process};
use crate::server_harness::Process;

fn program(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("targets/node")
        .join(name)
}

/// The line number of the first line of `program` that contains `text`.
fn line_of(program_name: &str, text: &str) -> i64 {
    crate::agent_python::line_in(&program(program_name), text)
}

/// Node, when `test` can run here (BPF, and `node` on the path).
fn node_present(test: &str) -> Option<PathBuf> {
    if !can_run(test) {
        return None;
    }
    match which("node") {
        Ok(node) => Some(node),
        Err(e) => {
            crate::server_harness::skip(test, &e);
            None
        }
    }
}

/// Starts `node FLAGS chain.js seconds`.
fn start(node: &Path, flags: &[&str], seconds: f64, dir: &Path) -> Process {
    let mut command = Command::new(node);
    command
        .args(flags)
        .arg(program("chain.js"))
        .arg(seconds.to_string());
    Process::start("node chain.js", command, &dir.join("node.log"))
}

/// A frame of chain.js: no mapping (it is no machine code of a file), the script's file.
fn is_chain(f: &SampleFrame) -> bool {
    f.mapping.is_empty() && f.file.ends_with("chain.js")
}

/// Whether a sample shows inner_hot ← middle_step ← outer_loop ← tick of chain.js (each
/// caller at the line of its call when `lines`), above Node's own JavaScript that called tick
/// (`processImmediate`, from `node:internal/timers`) and the native event loop below it.
fn chain_shown(frames: &[SampleFrame], lines: bool) -> bool {
    let js: Vec<&SampleFrame> = frames.iter().filter(|f| is_chain(f)).collect();
    let names: Vec<&str> = js.iter().map(|f| f.function.as_str()).collect();
    if names != ["inner_hot", "middle_step", "outer_loop", "tick"] {
        return false;
    }
    let tick = frames.iter().position(|f| f.function == "tick");
    let below_tick = tick.map_or(&[][..], |t| &frames[t + 1..]);
    let placed = below_tick
        .iter()
        .any(|f| f.function == "processImmediate" && f.file == "node:internal/timers")
        && below_tick.iter().any(|f| f.function == "uv_run");
    if !placed {
        return false;
    }
    if !lines {
        return true;
    }
    let inner = line_of("chain.js", "function inner_hot")..=line_of("chain.js", "return total");
    inner.contains(&js[0].line)
        && js[1].line == line_of("chain.js", "return inner_hot(n)")
        && js[2].line == line_of("chain.js", "sink += worker.middle_step")
        && js[3].line == line_of("chain.js", "sink += outer_loop(worker)")
}

/// JavaScript frames in place of V8's compiled code and interpreter frames, with scripts and
/// lines, on Node without flags (at least 80% of samples show the whole chain right, with
/// what TurboFan inlined into `tick` expanded), also for a process that starts and exits
/// inside the window (names only: its first samples run in V8's baseline code, whose frames
/// carry the function's first line); each sample labelled with the runtime and its version.
#[test]
fn agent_shows_javascript_frames_of_node_without_flags() {
    let _exclusive = crate::support::exclusive();
    let test = "agent_shows_javascript_frames_of_node_without_flags";
    let Some(node) = node_present(test) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let long = start(&node, &[], 240.0, dir.path());
    let agent = Agent::start(dir.path(), &[]);
    let version = Command::new(&node)
        .arg("--version")
        .output()
        .expect("node --version");
    let version = String::from_utf8_lossy(&version.stdout)
        .trim()
        .trim_start_matches('v')
        .to_owned();
    window_with_a_short_process(
        &agent,
        "a window in which both Node.js processes show the chain",
        || {
            let mut short = Command::new(&node);
            short.arg(program("chain.js")).arg("3");
            short
        },
        |p, short_pid| {
            share_holds(p, "node chain.js", long.pid(), 0.8, |f| {
                chain_shown(f, true)
            })?;
            let pid = long.pid().to_string();
            for s in p
                .sample
                .iter()
                .filter(|s| label(p, s, "pid") == Some(pid.as_str()))
            {
                assert_eq!(label(p, s, "runtime"), Some("node"));
                assert_eq!(label(p, s, "runtime_version"), Some(version.as_str()));
            }
            // Its first samples come before the agent has read the process.
            share_holds(p, "node exited within the window", short_pid, 0.6, |f| {
                chain_shown(f, false)
            })
        },
    );
}

/// The interpreter's frames (`--no-opt --no-sparkplug`: every function run as bytecode, one
/// native frame each): named, with the line of each frame's current bytecode.
#[test]
fn agent_shows_nodes_interpreted_frames_with_lines() {
    let _exclusive = crate::support::exclusive();
    let test = "agent_shows_nodes_interpreted_frames_with_lines";
    let Some(node) = node_present(test) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let target = start(&node, &["--no-opt", "--no-sparkplug"], 120.0, dir.path());
    let agent = Agent::start(dir.path(), &[]);
    crate::server_harness::poll(
        "the interpreted chain in most samples",
        std::time::Duration::from_secs(120),
        std::time::Duration::ZERO,
        || {
            let p = agent.profile(&format!("seconds=5&pid={}", target.pid()));
            share_holds(&p, "node --no-opt chain.js", target.pid(), 0.8, |f| {
                chain_shown(f, true)
            })
        },
    );
}
