// Small CPU profiles written by hand for the browser tests with the synthetic profiles' protobuf
// writer: of given stacks (`cpuPprof`), and whose samples carry span and trace ids (`spanPprof`).

import { gzipSync } from 'node:zlib';
import { Writer } from './synthetic.mjs';

/**
 * A CPU profile (gzipped pprof) at `timeMs` covering 10 s of `samples`
 * (`[{stack: ['main', 'work'], nanos, labels: {key: value}}]`, stacks root first), each frame a
 * function of its own name.
 */
export function cpuPprof(timeMs, samples) {
  const strings = ['', 'cpu', 'nanoseconds'];
  const str = (s) => {
    let i = strings.indexOf(s);
    if (i < 0) i = strings.push(s) - 1;
    return i;
  };
  const functions = [];
  const fn = (name) => {
    let i = functions.indexOf(name);
    if (i < 0) i = functions.push(name) - 1;
    return i + 1;
  };
  const w = new Writer();
  const valueType = () => { const m = new Writer(); m.varintField(1, 1); m.varintField(2, 2); return m; };
  w.messageField(1, valueType());
  for (const sample of samples) {
    const s = new Writer();
    s.packedField(1, [...sample.stack].reverse().map(fn)); // leaf first
    s.packedField(2, [sample.nanos]);
    for (const [key, value] of Object.entries(sample.labels || {})) {
      const l = new Writer();
      l.varintField(1, str(key));
      l.varintField(2, str(value));
      s.messageField(3, l);
    }
    w.messageField(2, s);
  }
  functions.forEach((name, i) => {
    const id = i + 1;
    const line = new Writer();
    line.varintField(1, id);
    const loc = new Writer();
    loc.varintField(1, id);
    loc.messageField(4, line);
    w.messageField(4, loc);
    const f = new Writer();
    f.varintField(1, id);
    f.varintField(2, str(name));
    w.messageField(5, f);
  });
  for (const s of strings) w.bytesField(6, Buffer.from(s));
  w.varintField(9, timeMs * 1e6);
  w.varintField(10, 10e9);
  w.messageField(11, valueType());
  w.varintField(12, 1e7);
  return gzipSync(w.bytes(), { level: 1 });
}

/**
 * A CPU profile (gzipped pprof) at `timeMs` of `spans` (`[{span_id, trace_id, nanos}]`): per
 * span one sample of `main;spanWork` worth `nanos`, its span and trace ids as the string labels
 * `span_id` and `trace_id` (as Go's `pprof.Do` and the Pyroscope SDKs write them).
 */
export function spanPprof(timeMs, spans) {
  return cpuPprof(timeMs, spans.map((span) => ({
    stack: ['main', 'spanWork'],
    nanos: span.nanos,
    labels: { span_id: span.span_id, trace_id: span.trace_id },
  })));
}
