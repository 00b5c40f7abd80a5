//! The agent on PHP programs (Debian's `php`, 8.2): PHP frames (`Class::method`, file, line) read
//! at sample time and placed among the native frames, for a long-running script, one that
//! starts and exits inside the window, and PHP code called back from a built-in function; and
//! the runtime labels. The programs are in `tests/targets/php/`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use parca_pprof::proto;

use crate::agent::{Agent, can_run, label, metric_value, say};
use crate::agent_python::{SampleFrame, samples_of, window_with_a_short_process};
use crate::server_harness::{Process, http_get, poll};

/// Debian's PHP CLI: stripped, no frame pointers.
const PHP: &str = "/usr/bin/php";

fn program(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("targets/php")
        .join(name)
}

/// Starts `php program seconds`.
fn start(name: &str, seconds: f64, dir: &Path) -> Process {
    let mut command = Command::new(PHP);
    command.arg(program(name)).arg(seconds.to_string());
    Process::start(
        &format!("php {name}"),
        command,
        &dir.join(format!("{name}.log")),
    )
}

/// Whether `test` can run here: BPF and Debian's PHP (`apt-get install php-cli`).
fn php_present(test: &str) -> bool {
    if !can_run(test) {
        return false;
    }
    if !Path::new(PHP).exists() {
        crate::server_harness::skip(test, "no /usr/bin/php (apt-get install php-cli)");
        return false;
    }
    true
}

/// A PHP frame: no mapping (it is no machine code), a script's file or none (a built-in).
fn is_php(f: &SampleFrame) -> bool {
    f.mapping.is_empty() && (f.file.ends_with(".php") || f.file.is_empty())
}

/// A sample's frames, short, for failure messages.
fn show(frames: &[SampleFrame]) -> String {
    frames
        .iter()
        .map(|f| match f.file.rsplit('/').next() {
            Some(file) if is_php(f) && !file.is_empty() => {
                format!("{}@{file}:{}", f.function, f.line)
            }
            _ => f.function.clone(),
        })
        .collect::<Vec<_>>()
        .join(" ← ")
}

/// The line number of the first line of `program` that contains `text`.
fn line_of(program_name: &str, text: &str) -> i64 {
    crate::agent_python::line_in(&program(program_name), text)
}

/// The share of `pid`'s samples for which `ok` holds, at least `at_least` of them and at
/// least 15 samples; `Err` says what fell short, with some samples that do not hold.
pub(crate) fn share_holds(
    p: &proto::Profile,
    what: &str,
    pid: u32,
    at_least: f64,
    ok: impl Fn(&[SampleFrame]) -> bool,
) -> Result<(), String> {
    let samples = samples_of(p, pid);
    let total: i64 = samples.iter().map(|(_, n)| n).sum();
    let hit: i64 = samples
        .iter()
        .filter(|(frames, _)| ok(frames))
        .map(|(_, n)| n)
        .sum();
    say(&format!(
        "{what} (pid {pid}): {hit} of {total} samples ({:.1}%) hold",
        100.0 * hit as f64 / total.max(1) as f64
    ));
    if total < 15 {
        return Err(format!("{what}: only {total} samples"));
    }
    if (hit as f64) < at_least * total as f64 {
        let shown: String = samples
            .iter()
            .filter(|(frames, _)| !ok(frames))
            .take(6)
            .map(|(frames, n)| format!("\n  {n}× {}", show(frames)))
            .collect();
        return Err(format!(
            "{what}: {hit} of {total} samples hold; some that do not:{shown}"
        ));
    }
    Ok(())
}

/// Whether a sample of `chain.php` shows inner_hot ← Worker::middle_step ← outer_loop ←
/// {main} of chain.php with the lines of the calls, placed among native frames: the engine's
/// own frames below {main}, and no `execute_ex` frame left where PHP frames should be.
fn chain_shown(frames: &[SampleFrame]) -> bool {
    let php: Vec<&SampleFrame> = frames.iter().filter(|f| is_php(f)).collect();
    let names: Vec<&str> = php.iter().map(|f| f.function.as_str()).collect();
    let inner = line_of("chain.php", "function inner_hot")..=line_of("chain.php", "return $total");
    let main = frames.iter().position(|f| f.function == "{main}");
    names == ["inner_hot", "Worker::middle_step", "outer_loop", "{main}"]
        && php.iter().all(|f| f.file.ends_with("/chain.php"))
        && inner.contains(&php[0].line)
        && php[1].line == line_of("chain.php", "return inner_hot($n)")
        && php[2].line == line_of("chain.php", "$worker->middle_step(20000)")
        && php[3].line == line_of("chain.php", "outer_loop((float)")
        && main.is_some_and(|m| frames[m + 1..].iter().any(|f| !f.mapping.is_empty()))
        && !frames.iter().any(|f| f.function == "execute_ex")
}

/// PHP frames in place of the engine's `execute_ex`, with classes, files and lines, on Debian's
/// stripped `php` (at least 80% of samples show the whole chain right), also for a process that
/// starts and exits inside the window; each sample labelled with the runtime and its version.
#[test]
fn agent_shows_php_frames_with_classes_files_and_lines() {
    let _exclusive = crate::support::exclusive();
    let test = "agent_shows_php_frames_with_classes_files_and_lines";
    if !php_present(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let long = start("chain.php", 240.0, dir.path());
    let agent = Agent::start(dir.path(), &[]);
    let addr = agent.addr;
    let version = Command::new(PHP)
        .args(["-r", "echo PHP_VERSION;"])
        .output()
        .expect("php version");
    let version = String::from_utf8_lossy(&version.stdout).trim().to_owned();
    window_with_a_short_process(
        &agent,
        "a window in which both PHP processes show the chain",
        || {
            let mut short = Command::new(PHP);
            short.arg(program("chain.php")).arg("3");
            short
        },
        |p, short_pid| {
            share_holds(p, "php chain.php", long.pid(), 0.8, chain_shown)?;
            let pid = long.pid().to_string();
            for s in p
                .sample
                .iter()
                .filter(|s| label(p, s, "pid") == Some(pid.as_str()))
            {
                assert_eq!(label(p, s, "runtime"), Some("php"));
                assert_eq!(label(p, s, "runtime_version"), Some(version.as_str()));
            }
            // Its first samples come before the agent has read the process (no PHP frames
            // yet).
            share_holds(
                p,
                "php exited within the window",
                short_pid,
                0.6,
                chain_shown,
            )
        },
    );
    let metrics = http_get(addr, "/metrics", Duration::from_secs(10))
        .unwrap()
        .text();
    assert!(metric_value(&metrics, "parca_agent_php_processes") >= 1.0);
    assert!(metric_value(&metrics, "parca_agent_php_frames_total{function=\"named\"}") > 0.0);
}

/// PHP code called back from a built-in function: the callback's frames sit above the native
/// frames that called it (`zend_call_function`, `zif_array_map`), which sit above the
/// built-in's PHP frame `array_map` and its PHP callers.
#[test]
fn agent_places_php_callbacks_above_the_built_ins_that_call_them() {
    let _exclusive = crate::support::exclusive();
    let test = "agent_places_php_callbacks_above_the_built_ins_that_call_them";
    if !php_present(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let target = start("callbacks.php", 120.0, dir.path());
    let agent = Agent::start(dir.path(), &[]);
    let placed = |frames: &[SampleFrame]| {
        let php: Vec<&str> = frames
            .iter()
            .filter(|f| is_php(f))
            .map(|f| f.function.as_str())
            .collect();
        let outer = ["hash_leaf", "array_map", "via_callback", "run", "{main}"];
        let at = |name: &str| frames.iter().position(|f| f.function == name);
        php.ends_with(&outer)
            && php.len() <= outer.len() + 1
            && php.first().is_some_and(|&leaf| leaf == "hash_leaf" || leaf == "md5")
            // Native frames between the callback and the built-in that called it.
            && at("hash_leaf")
                .zip(at("array_map"))
                .is_some_and(|(leaf, caller)| {
                    frames[leaf + 1..caller].iter().any(|f| !f.mapping.is_empty())
                })
            && !frames.iter().any(|f| f.function == "execute_ex")
    };
    poll(
        "a window in which the callbacks are placed",
        Duration::from_secs(120),
        Duration::ZERO,
        || {
            let p = agent.profile("seconds=5");
            share_holds(&p, "php callbacks.php", target.pid(), 0.8, placed)
        },
    );
}
