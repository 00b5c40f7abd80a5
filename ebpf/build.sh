#!/usr/bin/env bash
# Rebuilds the agent's BPF object: ebpf/build.sh [OUT] (default ebpf/profiler.bpf.o).
# Needs clang and libbpf's headers (Debian: clang libbpf-dev linux-libc-dev; llvm for llvm-strip).
# The output is reproducible: it is compiled from inside ebpf/ with paths mapped to `.`, and its
# DWARF is stripped (the BTF that aya needs stays), so the same clang gives the same bytes;
# .ci/run rebuilds it and fails when the committed object differs.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=$(realpath -m "${1:-$here/profiler.bpf.o}")
for tool in clang llvm-strip; do
  command -v "$tool" >/dev/null || { echo "build.sh: $tool not found (apt-get install clang llvm libbpf-dev linux-libc-dev)" >&2; exit 1; }
done
[ -e /usr/include/bpf/bpf_helpers.h ] || { echo "build.sh: libbpf headers not found (apt-get install libbpf-dev)" >&2; exit 1; }
arch_include=/usr/include/$(uname -m)-linux-gnu
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$here"
# -g: aya needs BTF ("no BTF parsed for object" without it). -I$arch_include: asm/types.h.
clang -O2 -g -target bpf -D__TARGET_ARCH_x86 -I"$arch_include" \
  -Wall -Werror -fdebug-prefix-map="$here"=. -fdebug-compilation-dir=. \
  -c profiler.bpf.c -o "$tmp/profiler.bpf.o"
# Drop DWARF (with its paths and producer string); .BTF and .BTF.ext stay.
llvm-strip -g "$tmp/profiler.bpf.o"
mv "$tmp/profiler.bpf.o" "$out"
