#!/usr/bin/env bash
# Builds google/pprof, the reference our numbers are checked against, from Debian's packages
# (golang-go and golang-github-google-pprof-dev, whose source lands in /usr/share/gocode),
# into ~/.cache/parca-tests/pprof/pprof, where the tests look for it, and prints its path.
# Installs the packages when run as root.
set -euo pipefail
out=${PARCA_TESTS_CACHE:-$HOME/.cache/parca-tests}/pprof
bin=$out/pprof
src=/usr/share/gocode/src/github.com/google/pprof
if ! command -v go >/dev/null || [ ! -d "$src" ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "pprof-oracle: need golang-go and golang-github-google-pprof-dev (run as root to install)" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q --no-install-recommends golang-go golang-github-google-pprof-dev >&2 \
    || { apt-get update -q >&2 && apt-get install -y -q --no-install-recommends golang-go golang-github-google-pprof-dev >&2; }
fi
mkdir -p "$out"
if [ ! -x "$bin" ] || [ "$src/driver/driver.go" -nt "$bin" ]; then
  echo "pprof-oracle: building google/pprof with $(go version)" >&2
  (cd "$out" && GO111MODULE=off GOPATH=/usr/share/gocode GOFLAGS= GOCACHE="$out/gocache" \
     go build -o "$bin" github.com/google/pprof)
fi
echo "$bin"
