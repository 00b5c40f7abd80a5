// Small CPU profiles whose samples carry span and trace ids (`spanPprof`), written by hand for the
// browser tests with the synthetic profiles' protobuf writer.

import { gzipSync } from 'node:zlib';
import { Writer } from './synthetic.mjs';

/**
 * A CPU profile (gzipped pprof) at `timeMs` of `spans` (`[{span_id, trace_id, nanos}]`): per
 * span one sample of `main;spanWork` worth `nanos`, its span and trace ids as the string labels
 * `span_id` and `trace_id` (as Go's `pprof.Do` and the Pyroscope SDKs write them).
 */
export function spanPprof(timeMs, spans) {
  const strings = ['', 'cpu', 'nanoseconds', 'main', 'spanWork', 'span_id', 'trace_id'];
  const str = (s) => {
    let i = strings.indexOf(s);
    if (i < 0) i = strings.push(s) - 1;
    return i;
  };
  const w = new Writer();
  const valueType = () => { const m = new Writer(); m.varintField(1, 1); m.varintField(2, 2); return m; };
  w.messageField(1, valueType());
  for (const span of spans) {
    const s = new Writer();
    s.packedField(1, [2, 1]); // spanWork, main: leaf first
    s.packedField(2, [span.nanos]);
    for (const [key, value] of [['span_id', span.span_id], ['trace_id', span.trace_id]]) {
      const l = new Writer();
      l.varintField(1, str(key));
      l.varintField(2, str(value));
      s.messageField(3, l);
    }
    w.messageField(2, s);
  }
  for (const [id, name] of [[1, 'main'], [2, 'spanWork']]) {
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
  }
  for (const s of strings) w.bytesField(6, Buffer.from(s));
  w.varintField(9, timeMs * 1e6);
  w.varintField(10, 10e9);
  w.messageField(11, valueType());
  w.varintField(12, 1e7);
  return gzipSync(w.bytes(), { level: 1 });
}
