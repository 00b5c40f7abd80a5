#!/usr/bin/env bash
# Prints the offsets the agent reads of Ruby 3.1's structures, built against its source with
# Debian's config.h: ebpf/ruby-probe/build.sh SOURCE_DIR
# (SOURCE_DIR: the unpacked ruby3.1 source, e.g. from `apt-get source ruby3.1` with a deb-src
# line; apt-get install ruby-dev gcc for the config).
set -euo pipefail
src=${1:?usage: build.sh RUBY_SOURCE_DIR}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
arch=/usr/include/$(uname -m)-linux-gnu/ruby-3.1.0
gcc -I/usr/include/ruby-3.1.0 -I"$arch" -I"$src" -I"$src/include" \
  "$(dirname "$0")/layout.c" -o "$out"
"$out"
