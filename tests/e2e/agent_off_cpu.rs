//! The agent's off-CPU profile (`--off-cpu-threshold`), with real BPF as root: a thread that
//! sleeps 10 ms at a time beside threads that spin (more of them than CPUs, so the machine is
//! loaded) must show its wall time as off-CPU time under the sleeping function, labelled `wait`;
//! the spinners' time off CPU is `preempted`. The profile is served, pushed and scraped.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use parca_pprof::proto;

use crate::agent::{Agent, agent_binary, agent_scrape_config, can_run, label, run, say, stacks_of};
use crate::server_harness::{Process, Server, encode, free_port, parca_binary, poll};

/// The off-CPU profile's series, as the agent pushes it and `parca.yaml`'s scrape entry names it.
const OFF_CPU_TYPE: &str = "parca_agent_off_cpu:off_cpu:nanoseconds:off_cpu:nanoseconds:delta";

/// `tests/targets/agent/off_cpu.c`, built once per run.
fn off_cpu_target() -> &'static PathBuf {
    static TARGET: OnceLock<PathBuf> = OnceLock::new();
    TARGET.get_or_init(|| {
        agent_binary();
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("targets/agent/off_cpu.c");
        let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("agent-targets");
        std::fs::create_dir_all(&out).expect("create the targets' directory");
        let bin = out.join("agent-c-off-cpu");
        run(Command::new("gcc")
            .args(["-O0", "-fno-omit-frame-pointer", "-g", "-pthread", "-o"])
            .arg(&bin)
            .arg(&src))
        .expect("gcc builds the off-CPU target (apt-get install gcc)");
        bin
    })
}

/// Off-CPU nanoseconds of process `pid` per reason, counting only stacks through `function`.
fn off_cpu_under(p: &proto::Profile, pid: u32, function: &str) -> BTreeMap<String, i64> {
    let mut by_reason = BTreeMap::new();
    let stacks = stacks_of(p, pid);
    let pid_label = pid.to_string();
    let samples = p
        .sample
        .iter()
        .filter(|s| label(p, s, "pid") == Some(pid_label.as_str()));
    for ((frames, value), sample) in stacks.iter().zip(samples) {
        if frames.iter().any(|(name, _)| name == function) {
            let reason = label(p, sample, "off_cpu_reason").unwrap_or("").to_owned();
            *by_reason.entry(reason).or_default() += value;
        }
    }
    by_reason
}

#[test]
fn agent_records_off_cpu_time_where_threads_wait_and_pushes_it() {
    let _exclusive = crate::support::exclusive();
    let test = "agent_records_off_cpu_time_where_threads_wait_and_pushes_it";
    if !can_run(test) {
        return;
    }
    let target = off_cpu_target();
    let dir = tempfile::tempdir().unwrap();

    let agent_port = free_port();
    let server = Server::start(&parca_binary(false), &[], |_| {
        agent_scrape_config(
            agent_port,
            "parca_agent_off_cpu: {path: /debug/pprof/off_cpu, delta: true}",
        )
    });
    // Three spinners and the sleeper on this machine's CPUs: the sleeper waits for a CPU after
    // each wake-up, and the spinners are preempted.
    let mut command = Command::new(target);
    command.args(["120", "3"]);
    let work = Process::start(
        "agent-c-off-cpu",
        command,
        &dir.path().join("off-cpu-target.log"),
    );
    let mut agent = Agent::start_at(
        agent_port,
        dir.path(),
        &[
            "--off-cpu-threshold=1",
            "--node=e2e-node",
            &format!("--remote-store-address={}", server.addr),
            "--remote-store-insecure",
        ],
    );
    let pid = work.pid();

    // A first window tells the BPF program the process (before that its intervals are lost).
    let _ = agent.get_profile("/debug/pprof/off_cpu", &format!("seconds=1&pid={pid}"));
    let p = agent.get_profile("/debug/pprof/off_cpu", &format!("seconds=5&pid={pid}"));
    let s = |i: i64| p.string_table[i as usize].as_str();
    assert_eq!(
        (s(p.sample_type[0].r#type), s(p.sample_type[0].unit)),
        ("off_cpu", "nanoseconds")
    );
    let wall = p.duration_nanos;
    let sleeping = off_cpu_under(&p, pid, "sleeping_function");
    let spinning = off_cpu_under(&p, pid, "spin_forever");
    let slept: i64 = sleeping.values().sum();
    say(&format!(
        "off-CPU over a {:.2} s window: under sleeping_function {sleeping:?} ({:.1}% of the \
         wall time), under spin_forever {spinning:?}",
        wall as f64 / 1e9,
        100.0 * slept as f64 / wall as f64
    ));
    assert!(
        slept * 10 >= wall * 8 && slept * 10 <= wall * 12,
        "off-CPU time under sleeping_function is {slept} ns in a {wall} ns window: {sleeping:?}\n\
         the target's stacks: {:?}\n{}",
        stacks_of(&p, pid)
            .iter()
            .map(|(frames, _)| frames
                .iter()
                .map(|(name, _)| name.as_str())
                .collect::<Vec<_>>()
                .join(";"))
            .collect::<std::collections::BTreeSet<_>>(),
        agent.unwind_metrics()
    );
    assert!(
        sleeping.get("wait").copied().unwrap_or(0) * 10 >= slept * 9,
        "the sleeper's time off CPU is mostly `wait`: {sleeping:?}"
    );
    assert!(
        spinning.get("preempted").copied().unwrap_or(0) > 0,
        "the spinners, more than the CPUs, are preempted: {spinning:?}"
    );
    // The kernel frames start at the scheduler, not in the BPF machinery that took them.
    let first_kernel_frames: Vec<String> = stacks_of(&p, pid)
        .iter()
        .filter_map(|(frames, _)| frames.first().map(|(name, _)| name.clone()))
        .collect();
    assert!(
        first_kernel_frames
            .iter()
            .all(|name| !name.starts_with("bpf_prog_") && !name.starts_with("bpf_trace_run")),
        "leaf frames: {first_kernel_frames:?}"
    );

    // Pushed (no job label) and scraped, under the same series name.
    for (how, job) in [("pushed", ""), ("scraped", "parca-agent")] {
        let query = format!(
            "merge({OFF_CPU_TYPE}{{job=\"{job}\",comm=\"agent-c-off-cpu\",node=\"e2e-node\"}}[5m])"
        );
        let cum = poll(
            &format!("{how} off-CPU time under sleeping_function"),
            Duration::from_secs(60),
            Duration::from_millis(500),
            || {
                agent.process.assert_running();
                let data = server.api(&format!(
                    "/api/v1/query?format=top&limit=1000&query={}",
                    encode(&query)
                ))?;
                data["rows"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|r| r["name"] == "sleeping_function")
                    .and_then(|r| r["cum"].as_i64())
                    .filter(|&cum| cum > 0)
                    .ok_or_else(|| format!("no sleeping_function yet in {data}"))
            },
        );
        say(&format!(
            "server, {how}: {:.2} s off CPU under sleeping_function",
            cum as f64 / 1e9
        ));
    }
    drop(work);
}
