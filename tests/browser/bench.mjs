// Render benchmark of the icicle graph in the same headless Chromium: for synthetic profiles of
// 10k, 100k and 800k nodes, the time from the API's JSON text to the first painted frame
// (JSON.parse, columns, layout and first draw), and the draw and frame times while zooming and
// panning. Prints a table; it asserts nothing (figures, not a timed test).

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { startServer, REPO } from './lib/server.mjs';
import { launch } from './lib/browser.mjs';

const SIZES = (process.env.BENCH_SIZES || '10000,100000,800000').split(',').map(Number);
// Each size is measured this many times and the best run reported: on a shared machine the
// minimum is the closest to the cost itself.
const ROUNDS = Number(process.env.BENCH_ROUNDS || 3);

// BENCH_URL serves the UI from elsewhere (e.g. a static server over web/static while editing).
const server = process.env.BENCH_URL ? { url: process.env.BENCH_URL, stop: async () => {} } : await startServer();
// window.gc(): the generator's garbage is collected before timing, not during.
const browser = await launch(['--js-flags=--expose-gc']);
// Pushed at once: the store refuses profiles older than its open head once it has cut a block.
if (!process.env.BENCH_URL) await pushLarge();
try {
  const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  await page.goto(`${server.url}/index.html`);
  console.log('| nodes | JSON | JSON.parse | quick tree + first draw | first paint after parse | first paint from text | whole tree in slices (columns + layout + draw) | zoom: draw p50 / p95 / max | zoom: frame interval p50 / p95 | pan: draw p50 / max |');
  console.log('|---|---|---|---|---|---|---|---|---|---|');
  for (const n of SIZES) {
    const runs = [];
    for (let k = 0; k < ROUNDS; k++) runs.push(await page.evaluate(run, n));
    const r = best(runs);
    const ms = (x) => `${x.toFixed(1)} ms`;
    console.log(`| ${r.nodes.toLocaleString('en')} | ${(r.bytes / 1e6).toFixed(1)} MB | ${ms(r.parse)} | ${ms(r.quick)} (${r.quickNodes.toLocaleString('en')} nodes) | ${ms(r.afterParse)} | ${ms(r.firstPaint)} | ${ms(r.whole)} | ${ms(r.zoom.p50)} / ${ms(r.zoom.p95)} / ${ms(r.zoom.max)} | ${ms(r.frames.p50)} / ${ms(r.frames.p95)} | ${ms(r.pan.p50)} / ${ms(r.pan.max)} |`);
  }
  if (!process.env.BENCH_URL) await realProfile(browser);
} finally {
  await browser.close();
  await server.stop();
}

/**
 * End to end in the explorer with a real profile: google/pprof's large.cpu (425k frames, a
 * 44 MB JSON answer), pushed and opened by URL; times from the page's own marks.
 */
async function pushLarge() {
  const file = join(REPO, 'tests/testdata/pprof/published/google-pprof/large.cpu');
  const res = await fetch(`${server.url}/api/v1/write?__name__=process_cpu&job=large&instance=bench`, { method: 'POST', body: readFileSync(file) });
  if (!res.ok) throw new Error(`push of large.cpu failed: ${res.status} ${await res.text()}`);
}

async function realProfile(b) {
  const T = 1666107597086; // its time, from the corpus manifest
  const page = await b.newPage({ viewport: { width: 1400, height: 1000 } });
  await page.goto(`${server.url}/?${new URLSearchParams({ query: 'process_cpu:samples:count:cpu:nanoseconds:delta{job="large"}', from: T - 60e3, to: T + 60e3, view: 'icicle' })}`);
  await page.waitForFunction(() => performance.getEntriesByName('parca:whole-tree').length, null, { timeout: 120000 });
  const t = await page.evaluate(() => {
    const at = (name) => performance.getEntriesByName(name)[0].startTime;
    const fetched = performance.getEntriesByType('resource').find((e) => e.name.includes('/api/v1/query?'));
    return {
      server: fetched.responseStart - fetched.requestStart,
      transfer: fetched.responseEnd - fetched.responseStart,
      parse: at('parca:profile-json') - fetched.responseEnd,
      firstDraw: at('parca:first-draw') - at('parca:profile-json'),
      whole: at('parca:whole-tree') - at('parca:first-draw'),
      bytes: fetched.decodedBodySize,
    };
  });
  const ms = (x) => `${x.toFixed(0)} ms`;
  console.log(`\nreal profile (google/pprof large.cpu, ${(t.bytes / 1e6).toFixed(1)} MB of JSON) in the explorer: server ${ms(t.server)}, transfer ${ms(t.transfer)}, JSON parse ${ms(t.parse)}, first draw after parse ${ms(t.firstDraw)}, whole tree ${ms(t.whole)} later`);
  await page.close();
}

/** Per figure, the smallest of the runs. */
function best(runs) {
  const min = (f) => Math.min(...runs.map(f));
  const r = runs[0];
  return {
    ...r,
    parse: min((x) => x.parse), quick: min((x) => x.quick), afterParse: min((x) => x.afterParse),
    firstPaint: min((x) => x.firstPaint), whole: min((x) => x.whole),
    zoom: { p50: min((x) => x.zoom.p50), p95: min((x) => x.zoom.p95), max: min((x) => x.zoom.max) },
    frames: { p50: min((x) => x.frames.p50), p95: min((x) => x.frames.p95) },
    pan: { p50: min((x) => x.pan.p50), max: min((x) => x.pan.max) },
  };
}

/** Runs in the page. */
async function run(target) {
  const { fromJSON, fromJSONAsync } = await import('/js/tree.js');
  const { Icicle } = await import('/js/icicle.js');
  // A deterministic random tree shaped like a real profile: wide near the root, then mostly
  // chains with some branching, about 30 frames deep.
  let seed = 42;
  const rand = () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const names = [];
  for (let p = 0; p < 300; p++) for (let f = 0; f < 40; f++) names.push(`github.com/org${p % 17}/pkg${p}.(*Type${f % 7}).Method${f}`);
  const nodes = [{ name: 'root', value: 0, self: 0, children: [] }];
  const parent = [-1];
  const depth = [0];
  for (let head = 0; nodes.length < target; head++) {
    if (head >= nodes.length) head = 0;
    const d = depth[head];
    const r = rand();
    const k = d < 3 ? 4 + Math.floor(rand() * 5) : r < 0.55 ? 1 : r < 0.8 ? 2 : r < 0.9 ? 3 : 0;
    for (let c = 0; c < k && nodes.length < target; c++) {
      const node = { name: names[Math.floor(rand() * names.length)], file: 'src/file.go', line: 1 + Math.floor(rand() * 500), value: 0, self: 0, children: [] };
      nodes[head].children.push(node);
      nodes.push(node);
      parent.push(head);
      depth.push(d + 1);
    }
  }
  for (let i = nodes.length - 1; i > 0; i--) {
    const node = nodes[i];
    if (!node.children.length || rand() < 0.2) node.self = 1e6 * (1 + Math.floor(rand() * 100));
    node.value += node.self;
    nodes[parent[i]].value += node.value;
  }
  const text = JSON.stringify({ sample_type: 'cpu', unit: 'nanoseconds', period_type: 'cpu', period_unit: 'nanoseconds', period: 1e7, total: nodes[0].value, root: nodes[0] });
  nodes.length = 0;

  const box = document.createElement('div');
  box.style.width = '1360px';
  document.body.prepend(box);
  await new Promise((r) => requestAnimationFrame(r));
  // As the UI does (profileview.js): a quick tree without sub-pixel frames is painted first.
  const t0 = performance.now();
  const data = JSON.parse(text);
  const t1 = performance.now();
  const quick = fromJSON(data, { minValue: (Math.abs(data.root.value) * 0.5) / Math.max(window.innerWidth, 800) });
  const icicle = new Icicle(box, {});
  icicle.setTree(quick);
  const t2 = performance.now();
  await new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));
  const t3 = performance.now();
  const tree = await fromJSONAsync(data);
  icicle.setTree(tree);
  const t4 = performance.now();

  const stats = (xs) => {
    const s = xs.slice().sort((a, b) => a - b);
    return { p50: s[Math.floor(s.length / 2)] || 0, p95: s[Math.floor(s.length * 0.95)] || 0, max: s[s.length - 1] || 0 };
  };
  // Zoom: into ten heavy frames at depth 2..6 and back out, animated, recording frame intervals.
  const candidates = [];
  for (let i = 1; i < tree.n && candidates.length < 10; i++) if (tree.depth[i] === 2 + (candidates.length % 5) && tree.value[i] > tree.value[0] / 200) candidates.push(i);
  icicle.frameTimes.length = 0;
  const intervals = [];
  for (const node of candidates) {
    for (const target of [node, 0]) {
      icicle.focus(target);
      let last = performance.now();
      const end = last + 220;
      while (performance.now() < end) {
        await new Promise((r) => requestAnimationFrame(r));
        const now = performance.now();
        intervals.push(now - last);
        last = now;
      }
    }
  }
  const zoom = stats(icicle.frameTimes);
  // Pan: shift a zoomed view 60 times.
  icicle.focus(candidates[0] || 0, false);
  icicle.frameTimes.length = 0;
  const span = icicle.view[1] - icicle.view[0];
  for (let k = 0; k < 60; k++) {
    icicle.view = icicle.clamp([icicle.view[0] + span / 50, icicle.view[1] + span / 50]);
    icicle.draw();
  }
  const pan = stats(icicle.frameTimes);
  icicle.destroy();
  box.remove();
  return { nodes: tree.n, quickNodes: quick.n, bytes: text.length, parse: t1 - t0, quick: t2 - t1, afterParse: t3 - t1, firstPaint: t3 - t0, whole: t4 - t3, zoom, frames: stats(intervals), pan };
}
