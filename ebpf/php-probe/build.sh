#!/usr/bin/env bash
# Prints the offsets the agent reads of PHP's structures, built against the installed headers
# (Debian: apt-get install php-dev): ebpf/php-probe/build.sh
set -euo pipefail
inc=$(php-config --include-dir)
out=$(mktemp)
trap 'rm -f "$out"' EXIT
gcc -D_GNU_SOURCE -I"$inc" -I"$inc/main" -I"$inc/Zend" -I"$inc/TSRM" -I"$inc/include" \
  "$(dirname "$0")/layout.c" -o "$out"
"$out"
