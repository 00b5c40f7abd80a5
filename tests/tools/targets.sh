#!/usr/bin/env bash
# Prepares one real target of the server's end-to-end tests and prints what to run:
#   tests/tools/targets.sh go          builds tests/targets/go with Debian's Go (1.19) in GOPATH
#                                      mode and prints the binary's path
#   tests/tools/targets.sh go-client   builds tests/targets/go-client (Go's net/http client, HTTP/2
#                                      over TLS) the same way and prints the binary's path
#   tests/tools/targets.sh go-spans    builds tests/targets/go-spans (runtime/pprof labels with span
#                                      and trace ids) the same way and prints the binary's path
#   tests/tools/targets.sh python      makes a venv with tests/targets/python/requirements.txt
#                                      (every version pinned) and prints its python's path
#   tests/tools/targets.sh prometheus  prints the path of Debian's prometheus
#   tests/tools/targets.sh python-push         makes a venv with pyroscope-io 1.x from
#                                      tests/targets/python-push/requirements.txt and prints its
#                                      python's path
#   tests/tools/targets.sh python-push-legacy  the same with pyroscope-io 0.8.x from
#                                      tests/targets/python-push/requirements-legacy.txt
#   tests/tools/targets.sh python-promapi      makes a venv with prometheus-api-client from
#                                      tests/targets/python-promapi/requirements.txt and prints
#                                      its python's path
#   tests/tools/targets.sh python-otlp         makes a venv with opentelemetry-proto and grpcio
#                                      from tests/targets/python-otlp/requirements.txt and prints
#                                      its python's path
#   tests/tools/targets.sh python-arrow        makes a venv with pyarrow and grpcio from
#                                      tests/targets/python-arrow/requirements.txt (records
#                                      of Parca Agent's Arrow schemas) and prints its python's path
#   tests/tools/targets.sh python-s3           makes a venv with moto's S3-compatible server from
#                                      tests/targets/python-s3/requirements.txt and prints its
#                                      python's path (run `python -m moto.server`)
#   tests/tools/targets.sh parca-client        installs Parca's JavaScript client (@parca/client and
#                                      protobuf-ts' transports, tests/targets/parca-client/
#                                      package-lock.json) with npm, bundles client.mjs with
#                                      esbuild and prints the bundle's path (run it with node)
#   tests/tools/targets.sh all         all twelve, one per line
# Everything is built into ${PARCA_TESTS_CACHE:-~/.cache/parca-tests}/targets, never into the
# repository. Run as root, it installs the Debian packages it needs (golang-go, prometheus,
# python3-venv); otherwise it says what is missing and exits 1, and the tests skip.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
out=${PARCA_TESTS_CACHE:-$HOME/.cache/parca-tests}/targets
mkdir -p "$out"
log() { echo "targets.sh: $*" >&2; }

# apt_install PKG...: installs Debian packages when root, else fails saying what to install.
apt_install() {
  if [ "$(id -u)" != 0 ]; then
    log "missing: run as root, or apt-get install $*"
    return 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q --no-install-recommends "$@" >&2 \
    || { apt-get update -q >&2 && apt-get install -y -q --no-install-recommends "$@" >&2; }
}

# go_build DIR NAME: builds tests/targets/DIR with Debian's Go in GOPATH mode (stdlib only)
# into NAME, once, and prints the binary's path.
go_build() {
  command -v go >/dev/null || apt_install golang-go
  local src=$here/targets/$1 bin=$out/$2
  if [ ! -x "$bin" ] || [ "$src/main.go" -nt "$bin" ]; then
    log "building $bin with $(go version)"
    (cd "$src" && GO111MODULE=off GOFLAGS= GOCACHE="$out/gocache" go build -o "$bin.tmp" . \
      && mv "$bin.tmp" "$bin")
  fi
  echo "$bin"
}

go_target() { go_build go e2e-go-target; }
go_client_target() { go_build go-client e2e-go-client; }
go_spans_target() { go_build go-spans e2e-go-spans; }

# python_venv REQUIREMENTS: makes (once) a venv with that pinned requirements file, named after
# its hash, and prints its python's path.
python_venv() {
  local req=$1 py=${PYTHON:-python3}
  command -v "$py" >/dev/null || { log "no $py"; return 1; }
  local venv=$out/venv-$(sha256sum "$req" | cut -c1-12)
  if [ ! -e "$venv/.complete" ]; then
    rm -rf "$venv"
    if ! "$py" -m venv "$venv" >&2; then
      rm -rf "$venv"
      apt_install python3-venv
      "$py" -m venv "$venv" >&2
    fi
    log "installing $req into $venv"
    "$venv/bin/pip" install -q --disable-pip-version-check -r "$req" >&2
    touch "$venv/.complete"
  fi
  echo "$venv/bin/python"
}

python_target() { python_venv "$here/targets/python/requirements.txt"; }
python_push_target() { python_venv "$here/targets/python-push/requirements.txt"; }
python_push_legacy_target() { python_venv "$here/targets/python-push/requirements-legacy.txt"; }
python_promapi_target() { python_venv "$here/targets/python-promapi/requirements.txt"; }
python_otlp_target() { python_venv "$here/targets/python-otlp/requirements.txt"; }
python_arrow_target() { python_venv "$here/targets/python-arrow/requirements.txt"; }
python_s3_target() { python_venv "$here/targets/python-s3/requirements.txt"; }

parca_client_target() {
  command -v npm >/dev/null || apt_install nodejs npm
  local src=$here/targets/parca-client dir=$out/parca-client
  local stamp
  stamp=$(cat "$src/package-lock.json" "$src/client.mjs" | sha256sum | cut -c1-12)
  if [ ! -e "$dir/.complete-$stamp" ]; then
    rm -rf "$dir"
    mkdir -p "$dir"
    cp "$src/package.json" "$src/package-lock.json" "$src/client.mjs" "$dir/"
    log "installing @parca/client into $dir"
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >&2 \
      && npx esbuild client.mjs --bundle --platform=node --format=cjs --target=node18 \
        --outfile=client.cjs --log-level=warning >&2)
    touch "$dir/.complete-$stamp"
  fi
  echo "$dir/client.cjs"
}

prometheus_target() {
  command -v prometheus >/dev/null || apt_install prometheus
  command -v prometheus
}

case ${1:-all} in
  go) go_target ;;
  go-client) go_client_target ;;
  go-spans) go_spans_target ;;
  python) python_target ;;
  prometheus) prometheus_target ;;
  python-push) python_push_target ;;
  python-push-legacy) python_push_legacy_target ;;
  python-promapi) python_promapi_target ;;
  python-otlp) python_otlp_target ;;
  python-arrow) python_arrow_target ;;
  python-s3) python_s3_target ;;
  parca-client) parca_client_target ;;
  all) go_target; go_client_target; go_spans_target; python_target; prometheus_target; python_push_target; python_push_legacy_target
       python_promapi_target; python_otlp_target; python_arrow_target; python_s3_target
       parca_client_target ;;
  *) echo "usage: $0 go|go-client|go-spans|python|prometheus|python-push|python-push-legacy|python-promapi|python-otlp|python-arrow|python-s3|parca-client|all" >&2
     exit 2 ;;
esac
