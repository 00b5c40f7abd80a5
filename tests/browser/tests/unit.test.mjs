// The UI's pure modules under Node (no browser): the tree columns and what is derived from them,
// query building, units, colours and completion contexts.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readColumns, invert, hide, hidePredicate, search, topTable, folded } from '../../../web/static/js/tree.js';
import { withFrameFilters } from '../../../web/static/js/querytext.js';
import { formatValue, formatPercent, ago } from '../../../web/static/js/units.js';
import { packageOf, colorFor } from '../../../web/static/js/colors.js';
import { completionContext, offsetOf } from '../../../web/static/js/querybox.js';
import { describe } from '../../../web/static/js/profiletypes.js';
import { timeTicks } from '../../../web/static/js/metricsgraph.js';
import { alignToStep, stepFor } from '../../../web/static/js/timerange.js';

/** A flame-graph JSON from folded lines (`a;b;c 5`), as the API would send it. */
function fromFolded(text, base) {
  const root = { name: 'root', value: 0, self: 0, children: [] };
  const add = (line, key) => {
    const [stack, v] = line.split(' ');
    const value = Number(v);
    let node = root;
    node[key === 'value' ? 'value' : 'base'] = (node[key === 'value' ? 'value' : 'base'] || 0) + value;
    for (const name of stack.split(';')) {
      let child = node.children.find((c) => c.name === name);
      if (!child) {
        child = { name, value: 0, self: 0, children: [] };
        if (base) Object.assign(child, { base: 0, base_self: 0 });
        node.children.push(child);
        node.children.sort((a, b) => (a.name < b.name ? -1 : 1));
      }
      child[key === 'value' ? 'value' : 'base'] += value;
      node = child;
    }
    node[key === 'value' ? 'self' : 'base_self'] += value;
  };
  for (const line of text.trim().split('\n')) add(line, 'value');
  if (base) {
    root.base = 0;
    root.base_self = 0;
    for (const line of base.trim().split('\n')) add(line, 'base');
  }
  const data = { sample_type: 'cpu', unit: 'nanoseconds', total: root.value, root };
  if (base) data.base_total = root.base;
  return data;
}

/**
 * The bytes of a `format=columns` answer holding the flame-graph JSON trees `datas`, laid out as
 * documentation/http-api.md says (an independent writer: the server's is Rust).
 */
function encodeColumns(datas, extra = []) {
  const strings = [''];
  const ids = new Map([['', 0]]);
  const id = (s) => {
    if (!s) return 0;
    if (!ids.has(s)) {
      ids.set(s, strings.length);
      strings.push(s);
    }
    return ids.get(s);
  };
  const isDiff = datas[0].base_total !== undefined;
  const names = ['value', 'self', ...(isDiff ? ['base', 'base_self'] : []), 'parent', 'name', 'file', 'line', 'binary'];
  const columns = names.map((n) => [n, ['value', 'self', 'base', 'base_self'].includes(n) ? 'f64' : n === 'parent' ? 'i32' : 'u32']);
  const graphs = [];
  const bodies = [];
  datas.forEach((data, k) => {
    const { root, ...meta } = data;
    const rows = [];
    const stack = [[root, -1]];
    while (stack.length) {
      const [node, parent] = stack.pop();
      const at = rows.length;
      rows.push({ value: node.value, self: node.self, base: node.base || 0, base_self: node.base_self || 0, parent, name: id(node.name), file: id(node.file), line: node.line || 0, binary: id(node.binary) });
      for (let c = node.children.length - 1; c >= 0; c--) stack.push([node.children[c], at]);
    }
    graphs.push({ nodes: rows.length, ...meta, ...(extra[k] || {}) });
    for (const [name, type] of columns) {
      const a = type === 'f64' ? new Float64Array(rows.length) : type === 'i32' ? new Int32Array(rows.length) : new Uint32Array(rows.length);
      rows.forEach((r, i) => { a[i] = r[name]; });
      bodies.push(new Uint8Array(a.buffer));
    }
  });
  const head = new TextEncoder().encode(JSON.stringify({ version: 1, columns, strings, graphs }));
  const pad8 = (n) => Math.ceil(n / 8) * 8;
  const headerAt = 16 + bodies.reduce((n, b) => n + pad8(b.length), 0);
  const out = new Uint8Array(headerAt + head.length);
  out.set(new TextEncoder().encode('PARCACOL'));
  new DataView(out.buffer).setBigUint64(8, BigInt(headerAt), true);
  let at = 16;
  for (const b of bodies) {
    out.set(b, at);
    at += pad8(b.length);
  }
  out.set(head, headerAt);
  return out;
}

/** A `Tree` from flame-graph JSON, through the columns layout the UI reads. */
const fromJSON = (data) => readColumns(encodeColumns([data])).graphs[0].tree;

const PROFILE = `
main;work;compute 50
main;work;alloc;mallocgc 20
main;idle 10
gc;mark;scan 15
gc;mallocgc 5
`;

test('the columns answer reads as a tree in pre-order, with totals and subtree ends', () => {
  const t = fromJSON(fromFolded(PROFILE));
  assert.equal(t.n, 11);
  assert.equal(t.value[0], 100);
  assert.equal(t.nameOf(1), 'gc');
  const main = t.childNamed(0, 'main');
  assert.equal(t.value[main], 80);
  assert.equal(t.end[main] - main, 6); // main, work, compute, alloc, mallocgc, idle
  assert.equal(t.maxDepth, 4);
  assert.deepEqual(t.path(t.find(['main', 'work', 'alloc'])).map((i) => t.nameOf(i)), ['root', 'main', 'work', 'alloc']);
});

test('columns: groups share strings, odd offsets are copied, bad bytes are refused', () => {
  const a = fromFolded('main;work 3\nmain;idle 1\n');
  const b = fromFolded('main;work 5\n');
  const bytes = encodeColumns([a, b], [{ labels: { instance: 'a' }, profiles: 2 }, { labels: { instance: 'b' }, profiles: 1 }]);
  const shifted = new Uint8Array(bytes.length + 3);
  shifted.set(bytes, 3);
  const { grouped, graphs } = readColumns(shifted.subarray(3));
  assert.equal(grouped, true);
  assert.deepEqual(graphs.map((g) => [g.labels.instance, g.profiles, g.tree.value[0], g.tree.n]), [['a', 2, 4, 4], ['b', 1, 5, 3]]);
  assert.equal(graphs[1].tree.nameOf(graphs[1].tree.find(['main', 'work'])), 'work');
  assert.equal(readColumns(encodeColumns([a])).grouped, false);
  assert.throws(() => readColumns(new TextEncoder().encode('{"status":"success"}')), /not a columns answer/);
  const cut = bytes.slice();
  new DataView(cut.buffer).setBigUint64(8, 40n, true);
  assert.throws(() => readColumns(cut), /runs into the header|JSON/);
});

test('bottom-up puts the heaviest self functions first with their callers below', () => {
  const t = invert(fromJSON(fromFolded(PROFILE)));
  const first = t.nameOf(1);
  assert.equal(first, 'compute');
  const malloc = t.childNamed(0, 'mallocgc');
  assert.equal(t.value[malloc], 25);
  assert.deepEqual([t.nameOf(malloc + 1), t.nameOf(t.end[malloc + 1])].sort(), ['alloc', 'gc']);
  assert.equal(t.value[0], 100);
});

test('hiding frames moves their children up and merges them', () => {
  const t0 = fromJSON(fromFolded(PROFILE));
  const t = hide(t0, hidePredicate(t0, '^(work|alloc)$', ''));
  const main = t.childNamed(0, 'main');
  assert.deepEqual(['compute', 'idle', 'mallocgc'].map((n) => t.value[t.childNamed(main, n)]), [50, 10, 20]);
  assert.equal(t.value[0], 100);
  assert.throws(() => hidePredicate(t0, '(', ''), SyntaxError);
});

test('search counts nested matches once', () => {
  const t = fromJSON(fromFolded('a;b;a 10\nc 5\n'));
  const m = search(t, 'a');
  assert.equal(m.count, 2);
  assert.equal(m.value, 10);
  assert.equal(search(t, '/^c$/').value, 5);
  assert.equal(search(t, ''), null);
});

test('the function table counts recursion once in cumulative', () => {
  const rows = topTable(fromJSON(fromFolded('a;b;a 10\na 4\nc 5\n')));
  const a = rows.find((r) => r.name === 'a');
  assert.equal(a.flat, 14);
  assert.equal(a.cum, 14);
  assert.equal(rows.find((r) => r.name === 'b').cum, 10);
});

test('folded text round-trips, and below a zoomed frame keeps its path', () => {
  const t = fromJSON(fromFolded(PROFILE));
  const lines = folded(t).trim().split('\n').sort();
  assert.deepEqual(lines, PROFILE.trim().split('\n').sort());
  const work = t.find(['main', 'work']);
  assert.deepEqual(folded(t, work).trim().split('\n').sort(), ['main;work;alloc;mallocgc 20', 'main;work;compute 50']);
});

test('a diff carries both sides through every derived tree', () => {
  const t = fromJSON(fromFolded('a;b 10\na;c 5\n', 'a;b 4\na;c 9\n'));
  assert.ok(t.isDiff);
  const b = t.find(['a', 'b']);
  assert.deepEqual([t.base[b], t.value[b]], [4, 10]);
  const inv = invert(t);
  const c = inv.childNamed(0, 'c');
  assert.deepEqual([inv.base[c], inv.value[c]], [9, 5]);
  assert.match(folded(t), /^a;b 4 10$/m);
  const row = topTable(t).find((r) => r.name === 'c');
  assert.deepEqual([row.baseFlat, row.flat], [9, 5]);
});

test('a zoom path becomes exact-name stack filters', () => {
  assert.equal(withFrameFilters('merge(x)', []), 'merge(x)');
  assert.equal(withFrameFilters('merge(x)', ['main.(*T).run', 'a-b', 'main.(*T).run']), 'merge(x) |~ `main\\.\\(\\*T\\)\\.run` |~ `a\\-b`');
  assert.equal(withFrameFilters('x', ['odd`name"']), 'x |~ "odd`name\\""');
});

test('units for people', () => {
  assert.equal(formatValue(1.5e9, 'nanoseconds'), '1.50 s');
  assert.equal(formatValue(12.3e6, 'nanoseconds'), '12.3 ms');
  assert.equal(formatValue(3 * 2 ** 20, 'bytes'), '3 MiB');
  assert.equal(formatValue(1234, 'count'), '1.23k');
  assert.equal(formatValue(0, 'bytes'), '0 B');
  assert.equal(formatPercent(1, 3), '33.3%');
  assert.equal(ago(Date.now() - 12e3), '12s ago');
});

test('colours are stable per package', () => {
  assert.equal(packageOf('net/http.(*conn).serve'), 'net/http');
  assert.equal(packageOf('runtime.mallocgc'), 'runtime');
  assert.equal(packageOf('<alloc::vec::Vec<T> as Drop>::drop'), 'alloc');
  assert.equal(packageOf('std::io::read'), 'std');
  assert.equal(packageOf('github.com/a/b/pkg.(*T).M'), 'github.com/a/b/pkg');
  assert.equal(colorFor('runtime'), colorFor('runtime'));
  assert.notEqual(colorFor('runtime'), colorFor('net/http'));
});

test('completion knows where the cursor is', () => {
  const q = 'memory:inuse_space:bytes:space:bytes{job="a", ins';
  assert.deepEqual(completionContext(q, q.length), { kind: 'label', prefix: 'ins', from: q.length - 3 });
  const v = 'x{job="ap';
  assert.equal(completionContext(v, v.length).kind, 'value');
  assert.equal(completionContext(v, v.length).label, 'job');
  assert.equal(completionContext(v, v.length).prefix, 'ap');
  assert.equal(completionContext('proc', 4).kind, 'type');
  assert.equal(completionContext('sum by (jo', 10), null);
  assert.equal(offsetOf('ab\ncd', 2, 2), 4);
});

test('profile types have human names', () => {
  assert.equal(describe('process_cpu:cpu:nanoseconds:cpu:nanoseconds:delta').title, 'CPU time');
  assert.equal(describe('memory:inuse_space:bytes:space:bytes').title, 'Memory in use (bytes)');
  assert.equal(describe('custom:things:count:x:y').known, false);
});

test('time ticks fall on round times with distinct labels', () => {
  const start = Date.UTC(2026, 10, 22, 1, 18, 4);
  const ticks = timeTicks(start, start + 600e3, 10);
  assert.ok(ticks.length >= 5 && ticks.length <= 10, `${ticks.length} ticks`);
  assert.ok(ticks.every(([t]) => t % 60e3 === 0 && t >= start && t <= start + 600e3));
  assert.equal(new Set(ticks.map(([, l]) => l)).size, ticks.length);
  const week = timeTicks(start, start + 7 * 86400e3, 10);
  assert.ok(week.length >= 3 && week.length <= 10);
});

test('frames of a binary can be hidden, and binaries are listed heaviest first', async () => {
  const { binaries } = await import('../../../web/static/js/tree.js');
  const data = {
    unit: 'count', total: 10,
    root: { name: 'root', value: 10, self: 0, children: [
      { name: 'main', value: 10, self: 0, children: [
        { name: '0x1000', binary: 'libc.so.6', value: 7, self: 0, children: [{ name: 'leaf', value: 7, self: 7, children: [] }] },
        { name: '0x2000', binary: 'libz.so', value: 3, self: 3, children: [] },
      ] },
    ] },
  };
  const t = fromJSON(data);
  assert.deepEqual(binaries(t), ['libz.so', 'libc.so.6']);
  const h = hide(t, hidePredicate(t, '', '^libc\\.so\\.6$'));
  const main = h.childNamed(0, 'main');
  assert.equal(h.value[h.childNamed(main, 'leaf')], 7);
  assert.equal(h.childNamed(main, '0x1000'), -1);
});

test('series labels for people', async () => {
  const { labelText } = await import('../../../web/static/js/metricsgraph.js');
  assert.equal(labelText({ __name__: 'a:b:c:d:e', job: 'x' }), '{job="x"}');
  assert.equal(labelText({}), 'all series together');
});

test('a graph of a week asks for steps on the hour, a graph of minutes keeps its window', () => {
  const now = Date.UTC(2026, 10, 26, 17, 28, 17);
  const week = { start: now - 7 * 86400e3, end: now };
  const step = stepFor(week.start, week.end);
  assert.equal(step, 3600e3);
  const aligned = alignToStep(week.start, week.end, step);
  assert.equal(aligned.start, Date.UTC(2026, 10, 19, 17));
  assert.equal(aligned.end, Date.UTC(2026, 10, 26, 18));
  const minutes = { start: now - 10 * 60e3, end: now };
  assert.deepEqual(alignToStep(minutes.start, minutes.end, stepFor(minutes.start, minutes.end)), minutes);
});

