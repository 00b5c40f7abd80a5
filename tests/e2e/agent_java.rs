//! The agent on the JVM (Debian's OpenJDK 17, and any other JDK under `/usr/lib/jvm`, such as
//! the image's Temurin 25) with no agent and no flag: Java frames (`package.Class.method`,
//! source file and line) read from HotSpot's own structures, compiled frames unwound by their
//! code blobs' frame sizes, what C2 and C1 inlined expanded, placed among the JVM's native
//! frames; for a long-running program, one that starts and exits inside the window, the
//! interpreter alone (`-Xint`), C1 alone, and two JDKs side by side. The program is
//! `tests/targets/java/chain/Chain.java`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::agent::{Agent, can_run, label, run, say, which};
use crate::agent_php::share_holds;
use crate::agent_python::{SampleFrame, window_with_a_short_process};
use crate::server_harness::{Process, http_get, poll};

fn source() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("targets/java/chain/Chain.java")
}

/// The line number of the first line of Chain.java that contains `text`.
fn line_of(text: &str) -> i64 {
    crate::agent_python::line_in(&source(), text)
}

/// Debian's `java` and `javac`, when `test` can run here (BPF, and a JDK on the path).
fn jdk_present(test: &str) -> Option<(PathBuf, PathBuf)> {
    if !can_run(test) {
        return None;
    }
    match which("java").and_then(|java| Ok((java, which("javac")?))) {
        Ok(jdk) => Some(jdk),
        Err(e) => {
            crate::server_harness::skip(
                test,
                &format!("{e} (apt-get install openjdk-17-jdk-headless)"),
            );
            None
        }
    }
}

/// Chain.java compiled into `dir/classes`.
fn compile(javac: &Path, dir: &Path) -> PathBuf {
    let classes = dir.join("classes");
    run(Command::new(javac).arg("-d").arg(&classes).arg(source()))
        .expect("javac compiles Chain.java");
    classes
}

/// Starts `java FLAGS -cp CLASSES chain.Chain SECONDS`.
fn start(java: &Path, flags: &[&str], classes: &Path, seconds: f64, log: &Path) -> Process {
    Process::start(
        "java chain.Chain",
        chain_command(java, flags, classes, seconds),
        log,
    )
}

fn chain_command(java: &Path, flags: &[&str], classes: &Path, seconds: f64) -> Command {
    let mut command = Command::new(java);
    command
        .args(flags)
        .arg("-cp")
        .arg(classes)
        .arg("chain.Chain")
        .arg(seconds.to_string());
    command
}

/// The JDK's `JAVA_VERSION` (its `release` file, two folders above `bin/java`).
fn java_version(java: &Path) -> String {
    let java = std::fs::canonicalize(java).expect("java resolves");
    let release = java.ancestors().nth(2).expect("a JDK home").join("release");
    std::fs::read_to_string(&release)
        .expect("the JDK's release file")
        .lines()
        .find_map(|l| {
            Some(
                l.strip_prefix("JAVA_VERSION=")?
                    .trim_matches('"')
                    .to_owned(),
            )
        })
        .expect("JAVA_VERSION")
}

/// A frame of Chain.java: no mapping (no machine code of a file), the class's source file.
fn is_chain(f: &SampleFrame) -> bool {
    f.mapping.is_empty() && f.file == "chain/Chain.java"
}

/// Whether a sample shows Chain$Worker.innerHot ← Chain$Worker.middleStep ← Chain.outerLoop
/// ← Chain.main, each caller at the line of its call, above the VM's call stub and the
/// launcher's native frames (`JavaMain`).
fn chain_shown(frames: &[SampleFrame]) -> bool {
    let java: Vec<&SampleFrame> = frames.iter().filter(|f| is_chain(f)).collect();
    let names: Vec<&str> = java.iter().map(|f| f.function.as_str()).collect();
    if names
        != [
            "chain.Chain$Worker.innerHot",
            "chain.Chain$Worker.middleStep",
            "chain.Chain.outerLoop",
            "chain.Chain.main",
        ]
    {
        return false;
    }
    let main = frames.iter().position(|f| f.function == "chain.Chain.main");
    let below_main = main.map_or(&[][..], |m| &frames[m + 1..]);
    if !below_main.iter().any(|f| f.function == "JavaMain") {
        return false;
    }
    let inner = line_of("long innerHot")..=line_of("return x;");
    inner.contains(&java[0].line)
        && java[1].line == line_of("return innerHot(x)")
        && java[2].line == line_of("x = worker.middleStep(x)")
        && java[3].line == line_of("System.out.println(outerLoop")
}

/// Checks that the samples of `pid` in `p` carry `runtime="java"` and `version`.
fn labelled(p: &parca_pprof::proto::Profile, pid: u32, version: &str) {
    let pid = pid.to_string();
    for s in p
        .sample
        .iter()
        .filter(|s| label(p, s, "pid") == Some(pid.as_str()))
    {
        assert_eq!(label(p, s, "runtime"), Some("java"));
        assert_eq!(label(p, s, "runtime_version"), Some(version));
    }
}

/// Java frames in place of HotSpot's compiled code and interpreter frames, with source files
/// and lines, on Debian's OpenJDK 17 without flags (at least 80% of samples show the whole
/// chain right, with what C2 inlined expanded), also for a JVM that starts and exits inside the
/// window; each sample labelled with the runtime and its version.
#[test]
fn agent_shows_java_frames_without_flags() {
    let _exclusive = crate::support::exclusive();
    let test = "agent_shows_java_frames_without_flags";
    let Some((java, javac)) = jdk_present(test) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let classes = compile(&javac, dir.path());
    let long = start(&java, &[], &classes, 240.0, &dir.path().join("java.log"));
    let agent = Agent::start(dir.path(), &[]);
    let version = java_version(&java);
    window_with_a_short_process(
        &agent,
        "a window in which both JVMs show the chain",
        || chain_command(&java, &[], &classes, 3.0),
        |p, short_pid| {
            share_holds(p, "java chain.Chain", long.pid(), 0.8, chain_shown)?;
            labelled(p, long.pid(), &version);
            // Its first moments run the VM's start and the compilers' threads.
            share_holds(
                p,
                "a JVM exited within the window",
                short_pid,
                0.6,
                chain_shown,
            )
            .inspect_err(|e| say(e))
        },
    );
}

/// Other JDKs on this machine (`/usr/lib/jvm/*/bin/java` of another Java version than `java`
/// on the path).
fn other_jdks(java: &Path) -> Vec<PathBuf> {
    let version = java_version(java);
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/jvm")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin/java"))
        .filter(|j| j.exists() && !j.is_symlink())
        .filter(|j| std::panic::catch_unwind(|| java_version(j)).is_ok_and(|v| v != version))
        .collect();
    found.sort();
    found.dedup_by_key(|j| java_version(j));
    found
}

/// The interpreter alone (`-Xint`: every frame an interpreted one, its line from the bytecode
/// pointer the frame keeps), C1 alone (`-XX:TieredStopAtLevel=1`: its frames, and what it
/// inlined), and another JDK beside them (the image's Temurin 25: other structure layouts, code
/// blobs that keep offsets, nmethods whose debug information lives apart), at once.
#[test]
fn agent_shows_java_frames_of_the_interpreter_c1_and_two_jdks_side_by_side() {
    let _exclusive = crate::support::exclusive();
    let test = "agent_shows_java_frames_of_the_interpreter_c1_and_two_jdks_side_by_side";
    let Some((java, javac)) = jdk_present(test) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let classes = compile(&javac, dir.path());
    let mut targets = vec![
        ("java -Xint".to_owned(), java.clone(), vec!["-Xint"]),
        (
            "java -XX:TieredStopAtLevel=1".to_owned(),
            java.clone(),
            vec!["-XX:TieredStopAtLevel=1"],
        ),
    ];
    let others = other_jdks(&java);
    if others.is_empty() {
        say("no other JDK under /usr/lib/jvm: two versions side by side not tried");
    }
    for other in others {
        targets.push((format!("{} chain.Chain", other.display()), other, vec![]));
    }
    let running: Vec<(&str, Process, String)> = targets
        .iter()
        .enumerate()
        .map(|(i, (name, java, flags))| {
            let log = dir.path().join(format!("java{i}.log"));
            (
                name.as_str(),
                start(java, flags, &classes, 240.0, &log),
                java_version(java),
            )
        })
        .collect();
    let agent = Agent::start(dir.path(), &[]);
    poll(
        "the chain in most samples of every JVM",
        Duration::from_secs(150),
        Duration::ZERO,
        || {
            let r = http_get(
                agent.addr,
                "/debug/pprof/profile?seconds=8",
                Duration::from_secs(60),
            )?;
            assert_eq!(r.status, 200, "{}", r.text());
            let p = parca_pprof::decode(&r.body, &Default::default())
                .unwrap()
                .to_proto();
            for (name, process, version) in &running {
                share_holds(&p, name, process.pid(), 0.8, chain_shown)?;
                labelled(&p, process.pid(), version);
            }
            Ok(())
        },
    );
}
