#!/usr/bin/env bash
# What one run of the agent's BPF sampling program costs on each runtime of #28's busy node:
# pkg/agent/benches/bpf_cost.sh [SECONDS] (default 30).
#
# For each load (LOADS="c rustc python node java php" by default), starts one busy copy per
# CPU, runs the release agent at 99 Hz, lets it warm up (WARMUP seconds, default 40: rustc's
# and the JVM's unwind tables compile first), then prints the program's average time per run
# over SECONDS (`kernel.bpf_stats_enabled`: run_time_ns / run_cnt of `profile_cpu`), so which
# walk costs what can be compared build to build. Every CPU is busy with the load, so nearly
# every run is a sample of it (the idle task's runs, which return at once, are few).
# AGENT_BIN runs that agent binary instead of building this tree's. Needs root, gcc, bpftool,
# and rustc, python3, node, java and php for their loads (a load whose program is missing is
# skipped).
set -euo pipefail
cd "$(dirname "$0")/../../.."
seconds=${1:-30}
warmup=${WARMUP:-40}
ncpu=$(nproc)
tmp=$(mktemp -d)
pids=()
stop_load() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  pkill -f -- "--out-dir $tmp" 2>/dev/null || true
  pids=()
}
trap 'stop_load; rm -rf "$tmp"' EXIT

if [ -n "${AGENT_BIN:-}" ]; then
  agent=$AGENT_BIN
else
  cargo build --release --quiet -p parca-agent
  agent=target/release/parca-agent
fi
gcc -O2 -fomit-frame-pointer -g -o "$tmp/hot" tests/targets/agent/hot.c
# rustc's load: a crate of 200 generic functions, compiled again and again.
python3 -c '
import sys
for i in range(200):
    print(f"pub fn f{i}<T: Clone + std::fmt::Debug>(v: &[T]) -> String {{ format!(\"{{:?}}\", v.iter().rev().cloned().collect::<Vec<T>>()) }}")
' >"$tmp/busy.rs"

start_one() { # one busy copy of load $1
  case "$1" in
    c) "$tmp/hot" 100000 & ;;
    rustc) (while :; do rustc --edition 2021 --crate-type lib --out-dir "$tmp" "$tmp/busy.rs" 2>/dev/null || sleep 1; done) & ;;
    python) python3 tests/targets/python-frames/chain.py 100000 >/dev/null & ;;
    node) node -e 'let x = 0; for (;;) { for (let i = 0; i < 1e6; i++) x = (x * 31 + i) % 1000003; }' & ;;
    java) java tests/targets/agent/Hot.java 100000 >/dev/null & ;;
    php) php tests/targets/php/chain.php 100000 >/dev/null & ;;
  esac
  pids+=($!)
}
needs() {
  case "$1" in c) echo gcc ;; python) echo python3 ;; *) echo "$1" ;; esac
}
bpf_stats() { # "run_time_ns run_cnt" of the sampling program
  bpftool prog show --json | python3 -c 'import json,sys
ps=[p for p in json.load(sys.stdin) if p.get("name")=="profile_cpu"]
print(sum(p.get("run_time_ns",0) for p in ps), sum(p.get("run_cnt",0) for p in ps))'
}
sysctl -q kernel.bpf_stats_enabled=1
printf '%-8s %12s %10s\n' load "ns per run" runs
for load in ${LOADS:-c rustc python node java php}; do
  if ! command -v "$(needs "$load")" >/dev/null; then
    printf '%-8s %12s\n' "$load" "(skipped)"
    continue
  fi
  for _ in $(seq "$ncpu"); do start_one "$load"; done
  "$agent" --http-address 127.0.0.1:17999 --profiling-cpu-sampling-frequency 99 --log-level warn & apid=$!
  sleep "$warmup"
  read -r ns0 n0 < <(bpf_stats)
  sleep "$seconds"
  read -r ns1 n1 < <(bpf_stats)
  kill -TERM "$apid"; wait "$apid" || true
  stop_load
  printf '%-8s %12d %10d\n' "$load" $(((ns1 - ns0) / (n1 - n0 > 0 ? n1 - n0 : 1))) $((n1 - n0))
done
sysctl -q kernel.bpf_stats_enabled=0
