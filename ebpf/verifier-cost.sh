#!/usr/bin/env bash
# Prints how many instructions the verifier processes for each of the agent's BPF programs:
# ebpf/verifier-cost.sh [OBJECT] (default ebpf/profiler.bpf.o). As root; needs gcc and libbpf-dev.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
object=$(realpath "${1:-$here/profiler.bpf.o}")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
gcc -O2 -Wall -o "$tmp/verifier-cost" "$here/verifier-cost.c" -lbpf
"$tmp/verifier-cost" "$object" 2>/dev/null
