// Starts the real server (release binary) on a free loopback port with a temporary storage
// directory, a configuration that scrapes the server itself and one closed port (a target that
// is down), and pushes real profiles from tests/testdata/pprof.

import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync, readFileSync, rmSync, existsSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gunzipSync } from 'node:zlib';

export const REPO = resolve(dirname(fileURLToPath(import.meta.url)), '../../..');
const TESTDATA = join(REPO, 'tests/testdata/pprof');

/** A port nothing listens on now. */
export function freePort() {
  return new Promise((ok, fail) => {
    const s = createServer();
    s.once('error', fail);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => ok(port));
    });
  });
}

/** Polls `check` until it returns a truthy value or `ms` pass. */
export async function until(check, ms, what) {
  const deadline = Date.now() + ms;
  let last;
  while (Date.now() < deadline) {
    try {
      const v = await check();
      if (v) return v;
    } catch (e) {
      last = e;
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`timed out after ${ms} ms waiting for ${what}${last ? `: ${last.message}` : ''}`);
}

/**
 * The profiles pushed at start: file, labels, and optionally a time (ms) to give it instead of
 * its own. Job `steps` holds go-cpu.pb.gz three times, 2 s, 12 s and 17 s after its own time:
 * with 10 s steps, the point 20 s after sums two profiles, the point 10 s after one.
 */
export const PUSHED = [
  ['go/go-cpu.pb.gz', { __name__: 'process_cpu', job: 'go', instance: 'go-cpu' }],
  ['go/go-cpu-b.pb.gz', { __name__: 'process_cpu', job: 'go', instance: 'go-cpu-b' }],
  ['go/go-heap.pb.gz', { __name__: 'memory', job: 'go', instance: 'go-heap' }],
  ['prometheus/prometheus-cpu.pb.gz', { __name__: 'process_cpu', job: 'prometheus', instance: 'prometheus-cpu' }],
  ['rust/rust-cpu.pb.gz', { __name__: 'process_cpu', job: 'rust', instance: 'rust-cpu' }],
  ...[2e3, 12e3, 17e3].map((after) => ['go/go-cpu.pb.gz', { __name__: 'process_cpu', job: 'steps', instance: 'steps' }, { after }]),
];

/**
 * A pprof (gzipped or not) with its `time_nanos` (field 9) set to `ms`: the other top-level
 * fields are copied as they are.
 */
export function withTime(bytes, ms) {
  const b = bytes[0] === 0x1f && bytes[1] === 0x8b ? gunzipSync(bytes) : bytes;
  const parts = [];
  let i = 0;
  const varint = () => {
    let v = 0n;
    for (let shift = 0n; ; shift += 7n) {
      const x = b[i++];
      v |= BigInt(x & 0x7f) << shift;
      if (x < 0x80) return v;
    }
  };
  while (i < b.length) {
    const start = i;
    const key = Number(varint());
    const wire = key & 7;
    if (wire === 0) varint();
    else if (wire === 1) i += 8;
    else if (wire === 2) {
      const length = Number(varint());
      i += length;
    } else if (wire === 5) i += 4;
    else throw new Error(`wire type ${wire} in a pprof`);
    if (key >> 3 !== 9) parts.push(b.subarray(start, i));
  }
  const out = [];
  let v = BigInt(ms) * 1000000n;
  out.push(9 << 3);
  while (v >= 0x80n) {
    out.push(Number(v & 0x7fn) | 0x80);
    v >>= 7n;
  }
  out.push(Number(v));
  return Buffer.concat([...parts, Buffer.from(out)]);
}

/** `timeNanos` of a corpus file as milliseconds, from the corpus manifest. */
export function profileTimeMs(file) {
  for (const line of readFileSync(join(TESTDATA, 'MANIFEST.jsonl'), 'utf8').split('\n')) {
    if (!line) continue;
    const entry = JSON.parse(line);
    if (entry.file === file) return Number(BigInt(entry.timeNanos) / 1000000n);
  }
  throw new Error(`${file} is not in the corpus manifest`);
}

/** Starts the server with extra command-line `args`; returns `{url, port, stop()}`. */
export async function startServer({ args = [] } = {}) {
  const bin = process.env.PARCA_BIN || join(REPO, 'target/release/parca');
  if (!existsSync(bin)) throw new Error(`no server binary at ${bin}: run cargo build --release -p parca`);
  const dir = mkdtempSync(join(tmpdir(), 'parca-browser-'));
  const port = await freePort();
  const closed = await freePort();
  const config = join(dir, 'parca.yaml');
  // Rules over the server's own CPU (scraped every 2 s): one records, one fires, and a group
  // whose limit the pushed profiles exceed is unhealthy.
  writeFileSync(join(dir, 'rules.yml'), `groups:
  - name: cpu
    interval: 1s
    rules:
      - record: job:cpu:sum
        expr: sum by (job) (process_cpu:cpu:nanoseconds:cpu:nanoseconds:delta{job="parca"})
      - alert: ServerBusy
        expr: sum by (job) (process_cpu:cpu:nanoseconds:cpu:nanoseconds:delta{job="parca"}) > 0
        labels: { severity: ticket }
        annotations: { summary: "{{ $labels.job }} used {{ $value | humanize }}ns of CPU" }
  - name: limited
    interval: 1s
    limit: 1
    rules:
      - record: job:cpu:all
        expr: sum by (job) (process_cpu:cpu:nanoseconds:cpu:nanoseconds:delta[3650d])
`);
  // Deploy insights of pushed CPU profiles with a `version` label (the UI test pushes them).
  writeFileSync(config, `rule_files: [rules.yml]
insights:
  - profile_type: process_cpu:cpu:nanoseconds:cpu:nanoseconds:delta
    by: [job]
    change_label: version
    window: 10s
scrape_configs:
  - job_name: parca
    scrape_interval: 2s
    static_configs:
      - targets: ["127.0.0.1:${port}"]
    profiling_config:
      pprof_config:
        memory: { enabled: false }
        block: { enabled: false }
        mutex: { enabled: false }
        goroutine: { enabled: false }
  - job_name: broken
    scrape_interval: 2s
    static_configs:
      - targets: ["127.0.0.1:${closed}"]
        labels: { env: "test" }
    profiling_config:
      pprof_config:
        memory: { enabled: false }
        block: { enabled: false }
        mutex: { enabled: false }
        goroutine: { enabled: false }
`);
  const log = [];
  const child = spawn(bin, [`--config-path=${config}`, `--storage-path=${join(dir, 'data')}`, `--http-address=127.0.0.1:${port}`,
    // The corpus profiles keep their own timestamps, which only grow older: keep them all.
    '--storage-retention-time=3650d', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  child.stdout.on('data', (d) => log.push(String(d)));
  child.stderr.on('data', (d) => log.push(String(d)));
  let exited = null;
  child.on('exit', (code) => { exited = code; });
  // A test run that dies (an uncaught error, a failed assertion in a hook) takes its server along.
  const reap = () => {
    if (exited === null) child.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  };
  process.on('exit', reap);
  const url = `http://127.0.0.1:${port}`;
  try {
    await until(async () => {
      if (exited !== null) throw new Error(`server exited with ${exited}: ${log.join('')}`);
      return (await fetch(`${url}/-/ready`)).ok;
    }, 30000, 'the server to be ready');
    for (const [file, labels, shift] of PUSHED) {
      let body = readFileSync(join(TESTDATA, file));
      if (shift) body = withTime(body, profileTimeMs(file) + shift.after);
      const res = await fetch(`${url}/api/v1/write?${new URLSearchParams(labels)}`, { method: 'POST', body });
      if (!res.ok) throw new Error(`push of ${file} failed: ${res.status} ${await res.text()}`);
    }
  } catch (e) {
    child.kill('SIGKILL');
    throw e;
  }
  return {
    url,
    port,
    log,
    async stop() {
      process.off('exit', reap);
      if (exited === null) {
        child.kill('SIGTERM');
        await until(() => exited !== null, 15000, 'the server to stop').catch(() => child.kill('SIGKILL'));
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
