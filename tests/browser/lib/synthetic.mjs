// Synthetic profiles of a chosen size, for the render benchmark and the large-graph test.

import { gzipSync } from 'node:zlib';

/**
 * A CPU profile (gzipped pprof) whose flame graph has `target` nodes, shaped like a real one:
 * wide near the root, then mostly chains with some branching, about 30 frames deep; siblings
 * never share a name, so every node is a unique stack. Deterministic; its window ends at `now`
 * (ms since the epoch).
 */
export function syntheticPprof(target, now = Date.now()) {
  let seed = 42;
  const rand = () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const names = [];
  for (let p = 0; p < 300; p++) for (let f = 0; f < 40; f++) names.push(`github.com/org${p % 17}/pkg${p}.(*Type${f % 7}).Method${f}`);
  const fn = [-1]; // function index of each node; node 0 is the root
  const parent = [-1];
  const depth = [0];
  const kids = [[]];
  for (let head = 0; fn.length < target; head++) {
    if (head >= fn.length) head = 0;
    const d = depth[head];
    const r = rand();
    const k = d < 3 ? 4 + Math.floor(rand() * 5) : r < 0.55 ? 1 : r < 0.8 ? 2 : r < 0.9 ? 3 : 0;
    for (let c = 0; c < k && fn.length < target; c++) {
      const f = Math.floor(rand() * names.length);
      if (kids[head].includes(f)) continue;
      kids[head].push(f);
      fn.push(f);
      parent.push(head);
      depth.push(d + 1);
      kids.push([]);
    }
  }
  // pprof: strings, one function and one location (at a line of its own) per name, and one
  // sample per node with a self value, its stack leaf first.
  const w = new Writer();
  const str = (i) => 4 + i; // strings: "", cpu, nanoseconds, src/file.go, names…
  const valueType = (type, unit) => { const m = new Writer(); m.varintField(1, type); m.varintField(2, unit); return m; };
  w.messageField(1, valueType(1, 2));
  for (let i = 1; i < fn.length; i++) {
    if (kids[i].length && rand() >= 0.2) continue;
    const s = new Writer();
    const ids = [];
    for (let j = i; j > 0; j = parent[j]) ids.push(fn[j] + 1);
    s.packedField(1, ids);
    s.packedField(2, [1e6 * (1 + Math.floor(rand() * 100))]);
    w.messageField(2, s);
  }
  for (let f = 0; f < names.length; f++) {
    const line = new Writer();
    line.varintField(1, f + 1);
    line.varintField(2, 1 + (f % 500));
    const loc = new Writer();
    loc.varintField(1, f + 1);
    loc.messageField(4, line);
    w.messageField(4, loc);
  }
  for (let f = 0; f < names.length; f++) {
    const m = new Writer();
    m.varintField(1, f + 1);
    m.varintField(2, str(f));
    m.varintField(3, str(f));
    m.varintField(4, 3);
    w.messageField(5, m);
  }
  for (const s of ['', 'cpu', 'nanoseconds', 'src/file.go', ...names]) w.bytesField(6, Buffer.from(s));
  w.varintField(9, now * 1e6 - 10e9);
  w.varintField(10, 10e9);
  w.messageField(11, valueType(1, 2));
  w.varintField(12, 1e7);
  return gzipSync(w.bytes(), { level: 1 });
}

/** Protobuf wire format, just what `syntheticPprof` and the span profiles of `pprof.mjs` need. */
export class Writer {
  constructor() {
    this.buf = Buffer.alloc(64);
    this.at = 0;
  }

  room(n) {
    if (this.at + n <= this.buf.length) return;
    const next = Buffer.alloc(Math.max(this.buf.length * 2, this.at + n));
    this.buf.copy(next, 0, 0, this.at);
    this.buf = next;
  }

  varint(v) {
    this.room(10);
    if (v >= 0 && v < 2 ** 31) {
      let y = v;
      while (y >= 0x80) {
        this.buf[this.at++] = (y & 0x7f) | 0x80;
        y >>>= 7;
      }
      this.buf[this.at++] = y;
      return;
    }
    let x = BigInt.asUintN(64, BigInt(v));
    while (x >= 0x80n) {
      this.buf[this.at++] = Number(x & 0x7fn) | 0x80;
      x >>= 7n;
    }
    this.buf[this.at++] = Number(x);
  }

  raw(bytes) {
    this.room(bytes.length);
    this.buf.set(bytes, this.at);
    this.at += bytes.length;
  }

  varintField(field, v) {
    this.varint(field << 3);
    this.varint(v);
  }

  bytesField(field, bytes) {
    this.varint((field << 3) | 2);
    this.varint(bytes.length);
    this.raw(bytes);
  }

  messageField(field, m) {
    this.bytesField(field, m.bytes());
  }

  packedField(field, values) {
    const m = new Writer();
    for (const v of values) m.varint(v);
    this.bytesField(field, m.bytes());
  }

  bytes() {
    return this.buf.subarray(0, this.at);
  }
}
