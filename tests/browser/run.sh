#!/usr/bin/env bash
# Browser tests of the web UI: headless Debian Chromium driven by playwright-core against the
# real server (release build) holding real profiles. Installs what is missing (Chromium with
# apt when root, playwright-core with `npm ci`), builds the server unless PARCA_BIN is set,
# runs the tests (screenshots in tests/browser/out/), then the render benchmark unless
# PARCA_BROWSER_BENCH=0. Exits non-zero when a test fails.
set -euo pipefail
cd "$(dirname "$0")"
repo=$(cd ../.. && pwd)

if [ -z "${CHROMIUM:-}" ] && ! command -v chromium >/dev/null; then
  if [ "$(id -u)" = 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null
    apt-get install -y -q --no-install-recommends chromium >/dev/null
  else
    echo "tests/browser/run.sh: Chromium is missing: apt-get install chromium (as root), or set CHROMIUM" >&2
    exit 1
  fi
fi
command -v node >/dev/null || { echo "tests/browser/run.sh: Node.js (20 or newer) is missing" >&2; exit 1; }
if [ ! -f node_modules/playwright-core/package.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  npm ci --no-audit --no-fund --loglevel=error
fi
if [ -z "${PARCA_BIN:-}" ]; then
  (cd "$repo" && cargo build --release -p parca)
  export PARCA_BIN="$repo/target/release/parca"
fi

node --test --test-concurrency=1 tests/
if [ "${PARCA_BROWSER_BENCH:-1}" != 0 ]; then
  echo "render benchmark (icicle graph, synthetic profiles):"
  node bench.mjs
fi
