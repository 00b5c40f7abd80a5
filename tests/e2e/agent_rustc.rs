//! The agent on the Rust compiler, with real BPF as root: rustc compiling a 600-function crate
//! in a loop recurses deeply through its query system and spends its time in a ~150 MB
//! `librustc_driver` and LLVM, built without frame pointers. At least 95% of its stacks must be
//! whole (reach their start, no `[truncated: …]` frame).

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::agent::{Agent, can_run, say, stacks_of};
use crate::server_harness::poll;

/// A crate that keeps rustc busy for a few seconds at `-C opt-level=0`: 600 types with trait
/// impls, closures and formatting, each function calling the previous one.
fn busy_crate() -> String {
    let mut out =
        String::from("pub trait Shape { fn area(&self) -> f64; fn name(&self) -> String; }\n");
    for i in 0..600 {
        let next = if i == 0 {
            String::new()
        } else {
            format!(" + f{}(&v[1..])", i - 1)
        };
        out.push_str(&format!(
            "pub struct S{i} {{ pub a: f64, pub b: Vec<u64> }}\n\
             impl Shape for S{i} {{\n\
             fn area(&self) -> f64 {{ self.a * {i}.0 + self.b.iter().map(|x| *x as f64).sum::<f64>() }}\n\
             fn name(&self) -> String {{ format!(\"s{i}-{{}}\", self.b.len()) }}\n\
             }}\n\
             pub fn f{i}(v: &[u64]) -> u64 {{\n\
             let s = S{i} {{ a: v.len() as f64, b: v.iter().filter(|x| *x % {m} == 0).cloned().collect() }};\n\
             (s.area() as u64).wrapping_add(s.name().len() as u64){next}\n\
             }}\n",
            m = i + 2
        ));
    }
    out
}

/// Runs rustc on `source` again and again until dropped.
struct CompileLoop {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl CompileLoop {
    fn start(source: &Path, out_dir: &Path) -> CompileLoop {
        let stop = Arc::new(AtomicBool::new(false));
        let (source, out_dir, flag) = (source.to_owned(), out_dir.to_owned(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                let child: std::io::Result<Child> = Command::new("rustc")
                    .args(["--edition", "2021", "--crate-type", "lib", "--out-dir"])
                    .arg(&out_dir)
                    .arg(&source)
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn();
                let Ok(mut child) = child else {
                    return;
                };
                // Checked often, so that a drop does not wait for a whole compile.
                while child.try_wait().ok().flatten().is_none() {
                    if flag.load(Ordering::Relaxed) {
                        child.kill().ok();
                        child.wait().ok();
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        });
        CompileLoop {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for CompileLoop {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            thread.join().ok();
        }
    }
}

#[test]
fn agent_unwinds_the_rust_compiler_whole() {
    let _exclusive = crate::support::exclusive();
    let test = "agent_unwinds_the_rust_compiler_whole";
    if !can_run(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("busy.rs");
    std::fs::write(&source, busy_crate()).unwrap();
    let agent = Agent::start(dir.path(), &[]);
    let _compiling = CompileLoop::start(&source, dir.path());

    // The driver's unwind table (tens of MB of CFI) is compiled once, on its own thread: until
    // it is loaded, frames in it are walked by frame pointers. Windows are taken until one has
    // enough of rustc's samples with the table in place.
    let (whole, total, cut) = poll(
        "a 10 s window with 300 of rustc's samples, 95% of them whole",
        Duration::from_secs(180),
        Duration::ZERO,
        || {
            let p = agent.profile("seconds=10&comm=rustc");
            let pids: std::collections::BTreeSet<u32> = p
                .sample
                .iter()
                .filter_map(|s| crate::agent::label(&p, s, "pid")?.parse().ok())
                .collect();
            let mut whole = 0i64;
            let mut total = 0i64;
            let mut cut: std::collections::BTreeMap<String, i64> = Default::default();
            // Where stacks were cut (the frame below the cut, in which process), for a failure.
            let mut cut_where: std::collections::BTreeMap<String, i64> = Default::default();
            for pid in pids {
                for (frames, n) in stacks_of(&p, pid) {
                    total += n;
                    match frames
                        .iter()
                        .position(|(name, _)| name.starts_with("[truncated"))
                    {
                        None => whole += n,
                        Some(i) => {
                            *cut.entry(frames[i].0.clone()).or_default() += n;
                            let below = i.checked_sub(1).map_or("", |b| frames[b].0.as_str());
                            *cut_where
                                .entry(format!("pid {pid}: {} after {below}", frames[i].0))
                                .or_default() += n;
                        }
                    }
                }
            }
            if total >= 300 && whole * 100 >= total * 95 {
                Ok((whole, total, cut))
            } else {
                let mut cut_where: Vec<(String, i64)> = cut_where.into_iter().collect();
                cut_where.sort_by_key(|(_, n)| -n);
                cut_where.truncate(12);
                Err(format!(
                    "{whole} of {total} whole; cut: {cut:?}\nwhere: {cut_where:#?}\n{}",
                    agent.unwind_metrics()
                ))
            }
        },
    );
    say(&format!(
        "rustc compiling in a loop: {whole} of {total} stacks whole ({:.1}%); cut: {cut:?}",
        100.0 * whole as f64 / total as f64
    ));
}
