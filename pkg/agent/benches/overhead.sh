#!/usr/bin/env bash
# The agent's overhead while both CPUs are busy: pkg/agent/benches/overhead.sh [SECONDS] (default 60).
#
# Starts one busy C program per CPU (tests/targets/agent/hot.c built -O2 -fomit-frame-pointer:
# every sample is walked in the BPF program with the unwind tables compiled from .eh_frame), then for 19 Hz and 99 Hz runs
# the release agent, lets it warm up (one 10 s profile, which parses every object once), and
# for SECONDS fetches /debug/pprof/profile?seconds=10 back to back, as a server scraping every
# 10 s would; it reports the agent's CPU seconds per wall second (draining, /proc reads,
# symbolization and pprof encoding: utime + stime in ticks, and the same to the nanosecond from
# a cgroup of the agent's own, the figure to quote), the same per profiled CPU, its peak RSS
# (VmHWM), and the BPF program's own time (kernel.bpf_stats_enabled; charged to the
# interrupted tasks, not to the agent). Then the same load under `perf record -F 19 -a -g` and
# `perf record -F 19 -a --call-graph dwarf` (which copies 8 KiB of stack per sample into its
# file; `perf report` unwinds them afterwards, reported as its own line).
# WARMUP=150 lengthens the warm-up profile (seconds; under LOAD=mix the agent compiles ~100
# unwind tables on a loaded machine for up to two minutes, which the default 10 s leaves in the
# measurement).
# PROFILE_AGENT=FILE records the agent itself during the measured seconds (perf at 4,999 Hz with
# DWARF call graphs, into FILE.HZ) to see where its time goes; perf's own cost is not the agent's.
# METRICS=FILE saves the agent's /metrics at the start and the end of the measured seconds
# (FILE.HZ.start, FILE.HZ): its symbolizer's hits and misses, samples read, processes told,
# tables compiled, to explain a figure (the difference is what the measured seconds did).
# Commands run by hand on the machine during a run are new processes and binaries to the agent
# (tables to compile, symbols to read): keep it alone while it measures.
# AGENT_HZ="19" limits the frequencies tried. AGENT_BIN runs that agent binary instead of
# building this tree's (to compare builds), with AGENT_ARGS added to its flags; PERF=0 skips perf.
# LOAD=go runs the Go program tests/targets/agent/hot.go instead (it keeps frame pointers: its stacks take the fast path,
# every frame past the leaf left by its frame pointer in the BPF program), when Go is installed. LOAD=python runs Debian's
# /usr/bin/python3.11 on tests/targets/python-frames/chain.py (every sample also reads the
# Python frame chain in the BPF program and names its frames). LOAD=mix is #28's busy node:
# rustc compiling a generated 600-function crate in a loop (new processes all the time, a 150 MB
# librustc_driver), OpenJDK running tests/targets/agent/Hot.java, Node.js spinning, and the
# python3 on PATH (pyenv's) and Debian's python3.11 on chain.py, and Debian's php on chain.php
# when it is installed. Needs root, gcc, curl, bpftool
# and perf (Debian: linux-perf), golang-go for LOAD=go, python3.11 for LOAD=python, and java,
# node and rustc for LOAD=mix.
set -euo pipefail
cd "$(dirname "$0")/../../.."
seconds=${1:-60}
tick=$(getconf CLK_TCK)
ncpu=$(nproc)
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  # The rustc loop's current compile (LOAD=mix) outlives its loop's shell.
  pkill -f -- "--out-dir $tmp" 2>/dev/null || true
  rm -rf "$tmp"
}
trap 'cleanup; cg_remove' EXIT

if [ -n "${AGENT_BIN:-}" ]; then
  agent=$AGENT_BIN
else
  cargo build --release --quiet -p parca-agent
  agent=target/release/parca-agent
fi
case "${LOAD:-c}" in
  c) gcc -O2 -fomit-frame-pointer -g -o "$tmp/hot" tests/targets/agent/hot.c ;;
  go) (cd tests/targets/agent && GO111MODULE=off GOFLAGS= GOCACHE="$tmp/gocache" go build -o "$tmp/hot" hot.go) ;;
  python) printf '#!/bin/sh\nexec /usr/bin/python3.11 %s "$@"\n' \
    "$PWD/tests/targets/python-frames/chain.py" >"$tmp/hot" && chmod +x "$tmp/hot" ;;
  mix) ;;
  *) echo "overhead.sh: LOAD is c, go, python or mix" >&2; exit 2 ;;
esac
if [ "${LOAD:-c}" = mix ]; then
  echo "load: mix (rustc in a loop, a JVM, Node.js, two CPythons, PHP)"
  python3 - "$tmp/busy.rs" <<'PY'
import sys
out = ["pub trait Shape { fn area(&self) -> f64; fn name(&self) -> String; }"]
for i in range(600):
    nxt = f" + f{i-1}(&v[1..])" if i else ""
    out.append(f"pub struct S{i} {{ pub a: f64, pub b: Vec<u64> }}\n"
               f"impl Shape for S{i} {{ fn area(&self) -> f64 {{ self.a * {i}.0 + self.b.iter().map(|x| *x as f64).sum::<f64>() }}"
               f" fn name(&self) -> String {{ format!(\"s{i}-{{}}\", self.b.len()) }} }}\n"
               f"pub fn f{i}(v: &[u64]) -> u64 {{ let s = S{i} {{ a: v.len() as f64, b: v.iter().filter(|x| *x % {i+2} == 0).cloned().collect() }};"
               f" (s.area() as u64).wrapping_add(s.name().len() as u64){nxt} }}")
open(sys.argv[1], "w").write("\n".join(out))
PY
  (while :; do rustc --edition 2021 --crate-type lib --out-dir "$tmp" "$tmp/busy.rs" 2>/dev/null || sleep 1; done) & pids+=($!)
  java tests/targets/agent/Hot.java 100000 >/dev/null & pids+=($!)
  node -e 'let x = 0; for (;;) { for (let i = 0; i < 1e6; i++) x = (x * 31 + i) % 1000003; }' & pids+=($!)
  python3 tests/targets/python-frames/chain.py 100000 & pids+=($!)
  /usr/bin/python3.11 tests/targets/python-frames/chain.py 100000 & pids+=($!)
  if command -v php >/dev/null; then php tests/targets/php/chain.php 100000 & pids+=($!); fi
else
  echo "load: ${LOAD:-c}, one busy program per CPU ($ncpu)"
  for _ in $(seq "$ncpu"); do "$tmp/hot" 100000 & pids+=($!); done
fi

hwm_kb() { awk '/^VmHWM/{print $2}' "/proc/$1/status"; }

# Reading the figures starts no program: a program that starts is new to the agent
# (its unwind tables compiled, its symbols read, when a sample first lands in it), and the
# measuring tools' own objects, compiled inside the measured seconds or not by the luck of
# the first sample, moved the agent's figure by a quarter from run to run (perf stat and its
# thirty libraries: 28 to 46 tables compiled in the measured seconds). So the agent's CPU
# time comes from a cgroup of its own (to the nanosecond, exited threads included; ticks are
# 10 ms, and a process running in bursts is charged by the luck of the tick), and the BPF
# program's from the run time in the agent's program descriptors' fdinfo, read with the
# shell's builtins.
cg=
cg_make() { # puts process $1 in a cgroup of its own that counts CPU time; sets cg
  local base
  # cgroup v1's cpuacct, or v2 (alone, or beside v1 as `unified`), whose cpu.stat counts
  # usage without the cpu controller.
  for base in /sys/fs/cgroup/cpuacct /sys/fs/cgroup/cpu,cpuacct /sys/fs/cgroup/unified /sys/fs/cgroup; do
    if { [ -f "$base/cpuacct.usage" ] || [ -f "$base/cgroup.controllers" ]; } &&
      mkdir "$base/parca-agent-overhead.$$" 2>/dev/null; then
      cg="$base/parca-agent-overhead.$$"
      echo "$1" >"$cg/cgroup.procs" && return 0
      rmdir "$cg"; cg=
    fi
  done
  return 1
}
cg_ns() { # sets $1 to the CPU nanoseconds of the cgroup's processes so far
  local key value
  if [ -f "$cg/cpuacct.usage" ]; then
    read -r value <"$cg/cpuacct.usage"; printf -v "$1" '%s' "$value"
  else
    while read -r key value; do
      if [ "$key" = usage_usec ]; then printf -v "$1" '%s' "$((value * 1000))"; fi
    done <"$cg/cpu.stat"
  fi
}
cg_remove() {
  if [ -n "$cg" ]; then
    local parent task
    parent=$(dirname "$cg")
    while read -r task; do echo "$task" >"$parent/cgroup.procs" 2>/dev/null || true; done <"$cg/cgroup.procs"
    rmdir "$cg" 2>/dev/null || true
    cg=
  fi
}
prog_ids= # the ids of the agent's profile_cpu program, found before the measured seconds
prog_ns() { # sets $2 to the run time of those programs of process $1 so far, from its descriptors
  local fd key value id ns total=0 seen=" "
  for fd in "/proc/$1/fdinfo/"*; do
    id=; ns=
    while read -r key value; do
      case "$key" in prog_id:) id=$value ;; run_time_ns:) ns=$value ;; esac
    done <"$fd" 2>/dev/null || continue
    if [ -n "$id" ] && [ -n "$ns" ] && [[ " $prog_ids " == *" $id "* ]] && [[ "$seen" != *" $id "* ]]; then
      total=$((total + ns)); seen="$seen$id "
    fi
  done
  printf -v "$2" '%s' "$total"
}
ticks_of() { # sets $2 to process $1's CPU ticks (utime + stime)
  local f
  read -ra f <"/proc/$1/stat"
  printf -v "$2" '%s' "$((f[13] + f[14]))"
}
sysctl -q kernel.bpf_stats_enabled=1

printf '%-28s %12s %16s %10s %14s\n' "what" "CPU s/s" "% of one CPU/CPU" "peak RSS" "BPF CPU s/s"
for hz in ${AGENT_HZ:-19 99}; do
  port=$((17900 + hz))
  # shellcheck disable=SC2086 # AGENT_ARGS is several flags
  "$agent" --http-address "127.0.0.1:$port" --profiling-cpu-sampling-frequency "$hz" \
    --log-level warn ${AGENT_ARGS:-} & apid=$!; pids+=($apid)
  for _ in $(seq 100); do curl -sf "127.0.0.1:$port/healthy" >/dev/null && break; sleep 0.1; done
  cg_make "$apid" || { echo "overhead.sh: no cgroup to count the agent's CPU time in" >&2; exit 1; }
  prog_ids=$(bpftool prog show --json | python3 -c 'import json,sys; print(" ".join(str(p["id"]) for p in json.load(sys.stdin) if p.get("name")=="profile_cpu"))')
  # curl, which fetches the profiles, and its thirty libraries are compiled when a sample
  # first lands in a curl: make that happen now, with two seconds of reading /dev/zero,
  # rather than in the measured seconds by the luck of a 10 s fetch's few milliseconds.
  timeout 2 curl -s -o /dev/null file:///dev/zero || true
  curl -sf -o /dev/null "127.0.0.1:$port/debug/pprof/profile?seconds=${WARMUP:-10}"   # warm-up
  if [ -n "${METRICS:-}" ]; then curl -sf -o "$METRICS.$hz.start" "127.0.0.1:$port/metrics" || true; fi
  # Nothing from here to the end of the measured seconds starts a program but curl (a
  # server's scrape, every 10 s) and perf (PROFILE_AGENT).
  ticks_of "$apid" t0; cg_ns c0; prog_ns "$apid" b0; w0=$EPOCHREALTIME
  end=$((EPOCHSECONDS + seconds))
  if [ -n "${PROFILE_AGENT:-}" ]; then
    perf record -F 4999 --call-graph dwarf,16384 -q -o "$PROFILE_AGENT.$hz" -p "$apid" -- sleep "$seconds" 2>/dev/null &
    pids+=($!)
  fi
  while [ "$EPOCHSECONDS" -lt "$end" ]; do
    curl -sf -o "$tmp/profile.pb.gz" "127.0.0.1:$port/debug/pprof/profile?seconds=10"
  done
  w1=$EPOCHREALTIME; prog_ns "$apid" b1; cg_ns c1; ticks_of "$apid" t1
  hwm=$(hwm_kb "$apid")
  if [ -n "${METRICS:-}" ]; then curl -sf -o "$METRICS.$hz" "127.0.0.1:$port/metrics" || true; fi
  kill -TERM "$apid"; wait "$apid" || true
  cg_remove
  python3 - "$hz" "$t0" "$t1" "$w0" "$w1" "$hwm" "$b0" "$b1" "$tick" "$ncpu" "$c0" "$c1" <<'PY'
import sys
hz, t0, t1, w0, w1, hwm, b0, b1, tick, ncpu, c0, c1 = sys.argv[1:]
wall = float(w1) - float(w0)
cpu = (int(t1) - int(t0)) / int(tick) / wall
bpf = (int(b1) - int(b0)) / 1e9 / wall
print(f"{'parca-agent at ' + hz + ' Hz':<28} {cpu:12.5f} {100 * cpu / int(ncpu):15.3f}% {int(hwm) / 1024:8.1f}MB {bpf:14.5f}")
cg = (int(c1) - int(c0)) / 1e9 / wall
print(f"{'  same, by its cgroup':<28} {cg:12.5f} {100 * cg / int(ncpu):15.3f}%   agent + BPF: {100 * (cg + bpf) / int(ncpu):.3f}%")
PY
done

[ "${PERF:-1}" = 0 ] && { sysctl -q kernel.bpf_stats_enabled=0; exit 0; }
for mode in "-g" "--call-graph dwarf"; do
  # shellcheck disable=SC2086 # $mode is two words for dwarf
  perf record -F 19 -a $mode -q -o "$tmp/perf.data" -- sleep "$seconds" 2>/dev/null & ppid=$!; pids+=($ppid)
  sleep 1; ticks_of "$ppid" t0; w0=$(date +%s.%N)
  sleep $((seconds - 2))
  ticks_of "$ppid" t1; w1=$(date +%s.%N); hwm=$(hwm_kb "$ppid")
  wait "$ppid" || true
  python3 - "$t0" "$t1" "$w0" "$w1" "$hwm" "$tick" "$ncpu" "perf record -F 19 -a $mode" <<'PY'
import sys
t0, t1, w0, w1, hwm, tick, ncpu, what = sys.argv[1:]
wall = float(w1) - float(w0)
cpu = (int(t1) - int(t0)) / int(tick) / wall
print(f"{what:<28} {cpu:12.5f} {100 * cpu / int(ncpu):15.3f}% {int(hwm) / 1024:8.1f}MB {'(in kernel)':>14}")
PY
  if [ "$mode" != "-g" ]; then
    # perf unwinds the copies when it reports: that CPU time per second of recording.
    s0=$(date +%s.%N)
    perf report -i "$tmp/perf.data" --stdio -q >/dev/null 2>&1 || true
    s1=$(date +%s.%N)
    python3 -c "import sys; r=(float(sys.argv[2])-float(sys.argv[1]))/float(sys.argv[3]); print(f\"{'perf report (dwarf unwind)':<28} {r:12.5f} {100*r/int(sys.argv[4]):15.3f}%\")" "$s0" "$s1" "$seconds" "$ncpu"
  fi
done
sysctl -q kernel.bpf_stats_enabled=0
