// Query building (web/static/js/querytext.js) on the structure the real server's parser gives
// (`/api/v1/parse_query`): matchers for a clicked series, a window's range and offset, compare
// sides, the kind and the type of a query. The UI has no lexer of its own to test apart.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer } from '../lib/server.mjs';
import {
  withMatchers, mergeWindow, duration, graphQuery, queryKind, typeOf, hasRange, pointSelection, windowQuery, sideQuery,
} from '../../../web/static/js/querytext.js';

let server;
before(async () => { server = await startServer(); });
after(async () => { if (server) await server.stop(); });

/** The server's parse of `q` (strict unless `lenient`), as the UI's `parseQuery` gets it. */
async function parse(q, lenient = false) {
  const res = await fetch(`${server.url}/api/v1/parse_query?${new URLSearchParams({ query: q, ...(lenient ? { lenient: 'true' } : {}) })}`);
  const body = await res.json();
  if (body.status !== 'success') throw new Error(`${q}: ${body.error}`);
  return body.data;
}

const CPU = 'process_cpu:cpu:nanoseconds:cpu:nanoseconds:delta';

test('matchers of a clicked series go into the selector, once', async () => {
  const add = async (q, labels) => withMatchers(q, await parse(q), labels);
  assert.equal(await add(CPU, { job: 'a', __name__: CPU }), `${CPU}{job="a"}`);
  assert.equal(await add(`${CPU}{job="a"} |= "x"`, { instance: 'i"1' }), `${CPU}{job="a", instance="i\\"1"} |= "x"`);
  assert.equal(await add('{__name__=~"m.*"}', { __name__: 'm1' }), '{__name__=~"m.*", __name__="m1"}');
  assert.equal(await add(`${CPU}{job="a", x!="b"}`, { job: 'a', x: 'b' }), `${CPU}{job="a", x!="b", x="b"}`);
  assert.equal(await add(`${CPU}{job = "a"}`, { job: 'a' }), `${CPU}{job = "a"}`);
  assert.equal(await add(`${CPU}{}`, { job: 'a' }), `${CPU}{job="a"}`);
  assert.equal(await add(`${CPU}{job="a",}`, { x: 'y' }), `${CPU}{job="a", x="y"}`);
  // What a lexer of the UI got wrong or never saw: braces and brackets inside values, a
  // selector not at the start, a quoted type, characters beyond ASCII before the insertion.
  assert.equal(await add(`${CPU}{a="}[x]"} |= "y"`, { b: 'c' }), `${CPU}{a="}[x]", b="c"} |= "y"`);
  assert.equal(await add(`(${CPU}{job="é"})`, { b: 'ü' }), `(${CPU}{job="é", b="ü"})`);
  assert.equal(await add(`{"${CPU}"}`, { job: 'a', __name__: CPU }), `{"${CPU}", job="a"}`);
  assert.equal(await add(`# a comment\n${CPU}`, { job: 'a' }), `# a comment\n${CPU}{job="a"}`);
});

test('a window gets its range and offset after the matchers', async () => {
  const q = `${CPU}{job="a"} |= "x"`;
  assert.equal(duration(5400e3 + 1500), '1h30m1s500ms');
  assert.equal(mergeWindow(q, await parse(q), 0, 3600e3, 3660e3), `merge(${CPU}{job="a"}[1h] offset 1m |= "x")`);
  assert.equal(mergeWindow(CPU, await parse(CPU), 0, 60e3, 60e3), `merge(${CPU}[1m])`);
  assert.equal(graphQuery('x', ' job, instance '), 'sum by (job, instance) (x)');
  assert.equal(graphQuery('x', ''), 'x');
});

test('a query is a profile, a series set or a profile set, by the server', async () => {
  const kinds = [];
  for (const q of [`merge(${CPU})`, `sum(${CPU})`, `${CPU}{a="b"}`, `(${CPU}) offset 1h`, `topk(2, ${CPU})`, `sum(${CPU} |= leaf "f") / sum(${CPU})`, '1 + 2']) kinds.push(queryKind(await parse(q)));
  assert.deepEqual(kinds, ['profile', 'series', 'set', 'set', 'series', 'series', 'series']);
  assert.equal(typeOf(await parse('memory:alloc_space:bytes:space:bytes{job="a"}')), 'memory:alloc_space:bytes:space:bytes');
  assert.equal(typeOf(await parse('{__name__="a:b:c:d:e", job="x"}')), 'a:b:c:d:e');
  assert.equal(typeOf(await parse('merge by (i) (a:b:c:d:e:delta{job="x"})')), 'a:b:c:d:e:delta');
  // Half-typed, as the editor sees it while typing.
  assert.equal(typeOf(await parse('sum(a:b:c:d:e{job="x', true)), 'a:b:c:d:e');
});

test('a point of the metrics graph selects the window its value sums', async () => {
  const heap = 'memory:inuse_space:bytes:space:bytes';
  const q = `${CPU}{job="a"}`;
  // Delta types: the step's window (t − step, t] of the clicked series.
  assert.deepEqual(pointSelection(await parse(q), { instance: 'i' }, 100e3, 10e3, true),
    { pfrom: '90000', pto: '100000', labels: '{"instance":"i"}', time: '' });
  const f = `${CPU}{job="a"} |= "x"`;
  assert.equal(windowQuery(f, await parse(f), { instance: 'i' }, 90e3, 100e3), `merge(${CPU}{job="a", instance="i"}[10s] |= "x")`);
  // Snapshots, and queries with their own range: the query at the point's time.
  assert.deepEqual(pointSelection(await parse(heap), {}, 100e3, 10e3, false), { time: '100000', labels: '{}', pfrom: '', pto: '' });
  assert.ok(hasRange(await parse(`${CPU}{job="a"} [5m] |= "x"`)) && !hasRange(await parse(`${CPU}{job="a"} |= "[x]"`)));
  assert.equal(pointSelection(await parse(`${CPU}[1m]`), {}, 100e3, 10e3, true).time, '100000');
});

test('compare sides are windows or times reached from one evaluation time', async () => {
  const side = async (q, w, at) => sideQuery(q, await parse(q), w, at);
  assert.equal(await side(`${CPU}{job="a"}`, { start: 90e3, end: 100e3 }, 160e3), `merge(${CPU}{job="a"}[10s] offset 1m)`);
  assert.equal(await side('memory:inuse_space:bytes:space:bytes |= "x"', { time: 100e3 }, 160e3), 'merge(memory:inuse_space:bytes:space:bytes offset 1m |= "x")');
  assert.equal(await side(CPU, { time: 100e3 }, 100e3), `merge(${CPU})`);
});
