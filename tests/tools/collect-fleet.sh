#!/usr/bin/env bash
# Collects the store bench's data set: every profile kind of three real programs, scraped every
# 5 s for a while, as served (gzipped pprof), into OUT/<target>/<kind>/<unix-ms>.pb.gz.
#
#   PEERS=../shared/tools/peers tests/tools/collect-fleet.sh OUT [SECONDS]   # default 300
#
# The targets (started by the team's peer scripts, on their default ports, if not already up):
#   go          Go's net/http/pprof (go1.19):          cpu heap allocs goroutine mutex block
#   prometheus  Debian's prometheus 2.42 (go1.19):      cpu heap allocs goroutine
#   node        Node 20 with @datadog/pprof 5.20:       cpu (cpu+wall) heap
# `cargo bench -p parca-tsdb --bench bytes_per_sample` replays what is committed under
# tests/testdata/fleet/ (see its README).
set -euo pipefail
out=${1:?usage: collect-fleet.sh OUT [SECONDS]}
seconds=${2:-300}
peers=${PEERS:-$(dirname "$0")/../../../shared/tools/peers}
step=5

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

start() { # name readiness-url script args...
  local name=$1 ready=$2; shift 2
  if ! curl -fs -o /dev/null "$ready"; then
    "$@" >"$out/$name.log" 2>&1 &
    pids+=($!)
    for _ in $(seq 600); do curl -fs -o /dev/null "$ready" && break; sleep 0.5; done
  fi
  curl -fs -o /dev/null "$ready" || { echo "$name did not start: see $out/$name.log" >&2; exit 1; }
}

mkdir -p "$out"
start go http://127.0.0.1:6060/healthz "$peers/go-target.sh" 6060 -duty 0.08
start prometheus http://127.0.0.1:19090/-/ready "$peers/prometheus-target.sh" 19090
start node http://127.0.0.1:18082/healthz "$peers/node-target.sh" 18082 --duty 0.2

fetch() { # target kind url
  local dir=$out/$1/$2 ms
  mkdir -p "$dir"
  ms=$(date +%s%3N)
  curl -fsS --max-time 30 -o "$dir/$ms.pb.gz.part" "$3" && mv "$dir/$ms.pb.gz.part" "$dir/$ms.pb.gz" ||
    { rm -f "$dir/$ms.pb.gz.part"; echo "failed: $3" >&2; }
}

end=$(($(date +%s) + seconds))
while [ "$(date +%s)" -lt "$end" ]; do
  tick=$(date +%s)
  go=http://127.0.0.1:6060/debug/pprof
  pr=http://127.0.0.1:19090/debug/pprof
  no=http://127.0.0.1:18082/debug/pprof
  # CPU profiles take the step's 5 s; the others are instant: all of one tick run together.
  cpu=()
  fetch go cpu "$go/profile?seconds=$step" & cpu+=($!)
  fetch prometheus cpu "$pr/profile?seconds=$step" & cpu+=($!)
  fetch node cpu "$no/profile?seconds=$step" & cpu+=($!)
  for k in heap allocs goroutine mutex block; do fetch go "$k" "$go/$k"; done
  for k in heap allocs goroutine; do fetch prometheus "$k" "$pr/$k"; done
  fetch node heap "$no/heap"
  wait "${cpu[@]}" # not the targets this script started
  sleep $((step - ($(date +%s) - tick) > 0 ? step - ($(date +%s) - tick) : 0))
done
find "$out" -name '*.pb.gz' | wc -l
