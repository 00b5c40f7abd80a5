//! The agent on Ruby programs (Debian's `ruby`, 3.1): Ruby frames (the iseq's label as Ruby's
//! backtraces name it, file, line) read at sample time from each thread's execution context and
//! placed among the native frames, for a long-running script and one that starts and exits
//! inside the window; and the runtime labels. The programs are in `tests/targets/ruby/`.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::agent::{Agent, can_run, label};
use crate::agent_php::share_holds;
use crate::agent_python::{SampleFrame, window_with_a_short_process};
use crate::server_harness::Process;

/// Debian's Ruby (the `ruby3.1` executable beside `libruby-3.1.so`).
const RUBY: &str = "/usr/bin/ruby";

fn program(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("targets/ruby")
        .join(name)
}

/// The line number of the first line of `program` that contains `text`.
fn line_of(program_name: &str, text: &str) -> i64 {
    crate::agent_python::line_in(&program(program_name), text)
}

/// Whether `test` can run here: BPF and Debian's Ruby (`apt-get install ruby`).
fn ruby_present(test: &str) -> bool {
    if !can_run(test) {
        return false;
    }
    if !Path::new(RUBY).exists() {
        crate::server_harness::skip(test, "no /usr/bin/ruby (apt-get install ruby)");
        return false;
    }
    true
}

/// Starts `ruby program seconds`.
fn start(name: &str, seconds: f64, dir: &Path) -> Process {
    let mut command = Command::new(RUBY);
    command.arg(program(name)).arg(seconds.to_string());
    Process::start(
        &format!("ruby {name}"),
        command,
        &dir.join(format!("{name}.log")),
    )
}

/// A Ruby frame: no mapping (it is no machine code), a script's file.
fn is_ruby(f: &SampleFrame) -> bool {
    f.mapping.is_empty() && f.file.ends_with(".rb")
}

/// Whether a sample of `chain.rb` shows Jobs::Hot.inner_hot ← Worker#middle_step ←
/// Object#outer_loop ← <main> of chain.rb (methods named with their classes, as Ruby 3.4's
/// backtraces name them) with the lines of the calls, placed among native frames: the VM's own
/// frames below <main>, and no `rb_vm_exec` frame left where Ruby frames should be.
fn chain_shown(frames: &[SampleFrame]) -> bool {
    let ruby: Vec<&SampleFrame> = frames.iter().filter(|f| is_ruby(f)).collect();
    let names: Vec<&str> = ruby.iter().map(|f| f.function.as_str()).collect();
    let inner = line_of("chain.rb", "def self.inner_hot")..=line_of("chain.rb", "i += 1") + 2;
    let main = frames.iter().position(|f| f.function == "<main>");
    names
        == [
            "Jobs::Hot.inner_hot",
            "Worker#middle_step",
            "Object#outer_loop",
            "<main>",
        ]
        && inner.contains(&ruby[0].line)
        && ruby[1].line == line_of("chain.rb", "Jobs::Hot.inner_hot(n)")
        && ruby[2].line == line_of("chain.rb", "worker.middle_step(20000)")
        && ruby[3].line == line_of("chain.rb", "outer_loop(ARGV")
        && main.is_some_and(|m| frames[m + 1..].iter().any(|f| !f.mapping.is_empty()))
        && !frames.iter().any(|f| f.function == "rb_vm_exec")
}

/// Ruby frames in place of the VM's `rb_vm_exec`, with files and lines, on Debian's Ruby (at
/// least 80% of samples show the whole chain right), also for a process that starts and exits
/// inside the window; each sample labelled with the runtime and its version.
#[test]
fn agent_shows_ruby_frames_with_files_and_lines() {
    let _exclusive = crate::support::exclusive();
    let test = "agent_shows_ruby_frames_with_files_and_lines";
    if !ruby_present(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let long = start("chain.rb", 240.0, dir.path());
    let agent = Agent::start(dir.path(), &[]);
    let version = Command::new(RUBY)
        .args(["-e", "print RUBY_VERSION"])
        .output()
        .expect("ruby version");
    let version = String::from_utf8_lossy(&version.stdout).trim().to_owned();
    window_with_a_short_process(
        &agent,
        "a window in which both Ruby processes show the chain",
        || {
            let mut short = Command::new(RUBY);
            short.arg(program("chain.rb")).arg("3");
            short
        },
        |p, short_pid| {
            share_holds(p, "ruby chain.rb", long.pid(), 0.8, chain_shown)?;
            let pid = long.pid().to_string();
            for s in p
                .sample
                .iter()
                .filter(|s| label(p, s, "pid") == Some(pid.as_str()))
            {
                assert_eq!(label(p, s, "runtime"), Some("ruby"));
                assert_eq!(label(p, s, "runtime_version"), Some(version.as_str()));
            }
            // Its first samples come before the agent has read the process (no Ruby frames
            // yet).
            share_holds(
                p,
                "ruby exited within the window",
                short_pid,
                0.6,
                chain_shown,
            )
        },
    );
}

/// Ruby code called back from a C method: the block's frames sit above the native frames that
/// called it (`rb_yield`, `rb_ary_each`), which sit above the C method's own frame (`Array#each`)
/// and the Ruby method that called it; a block is named after its method's class, as the
/// method is (`block in Object#via_each`).
#[test]
fn agent_places_ruby_blocks_above_the_c_methods_that_call_them() {
    let _exclusive = crate::support::exclusive();
    let test = "agent_places_ruby_blocks_above_the_c_methods_that_call_them";
    if !ruby_present(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let target = start("blocks.rb", 120.0, dir.path());
    let agent = Agent::start(dir.path(), &[]);
    let placed = |frames: &[SampleFrame]| {
        let ruby: Vec<&str> = frames
            .iter()
            .filter(|f| is_ruby(f))
            .map(|f| f.function.as_str())
            .collect();
        let outer = [
            "Object#hash_leaf",
            "block in Object#via_each",
            "Object#via_each",
            "Object#run",
            "<main>",
        ];
        let at = |name: &str| frames.iter().position(|f| f.function == name);
        ruby.ends_with(&outer)
            && ruby.len() <= outer.len() + 1
            && at("block in Object#via_each")
                .zip(at("Array#each"))
                .zip(at("Object#via_each"))
                .is_some_and(|((block, each), caller)| {
                    block < each
                        && each + 1 == caller
                        && frames[block + 1..each]
                            .iter()
                            .any(|f| !f.mapping.is_empty())
                })
            && !frames.iter().any(|f| f.function == "rb_vm_exec")
    };
    crate::server_harness::poll(
        "a window in which the blocks are placed",
        std::time::Duration::from_secs(120),
        std::time::Duration::ZERO,
        || {
            let p = agent.profile("seconds=5");
            share_holds(&p, "ruby blocks.rb", target.pid(), 0.8, placed)
        },
    );
}
