// Render benchmark of the profile view in the same headless Chromium. Synthetic CPU profiles of
// 10k, 100k and 800k unique stacks are pushed to the real server as pprof; for each, the page
// fetches the answer the UI uses (`/api/v1/query?format=columns`) and times, from its bytes in
// memory, reading the columns, laying out and drawing the icicle graph up to the first painted
// frame, then the function table that follows, and the draw and frame times while zooming and
// panning. For comparison it times JSON.parse of the same tree as the `json` format and as JSON
// arrays. Prints tables; it asserts nothing (figures, not a timed test).

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { startServer, REPO } from './lib/server.mjs';
import { launch } from './lib/browser.mjs';
import { syntheticPprof } from './lib/synthetic.mjs';

const SIZES = (process.env.BENCH_SIZES || '10000,100000,800000').split(',').map(Number);
// Each size is measured this many times and the best run reported: on a shared machine the
// minimum is the closest to the cost itself.
const ROUNDS = Number(process.env.BENCH_ROUNDS || 3);
const CPU = 'process_cpu:cpu:nanoseconds:cpu:nanoseconds:delta';
const NOW = Date.now();

let server;

async function push(bytes, labels) {
  const res = await fetch(`${server.url}/api/v1/write?${new URLSearchParams({ __name__: 'process_cpu', ...labels })}`, { method: 'POST', body: bytes });
  if (!res.ok) throw new Error(`push of ${labels.job} failed: ${res.status} ${await res.text()}`);
}

/**
 * End to end in the explorer with a real profile: google/pprof's large.cpu (425k frames), pushed
 * and opened by URL; times from the page's own marks and the fetch's resource timing.
 */
async function realProfile(b) {
  const page = await b.newPage({ viewport: { width: 1400, height: 1000 } });
  const T = 1666107597086; // its time, from the corpus manifest
  const figures = [];
  for (let k = 0; k < ROUNDS; k++) {
    await page.goto(`${server.url}/?${new URLSearchParams({ query: `${CPU}{job="large"}`, from: T - 60e3, to: T + 60e3 })}`);
    await page.waitForFunction(() => performance.getEntriesByName('parca:complete').length, null, { timeout: 120000 });
    figures.push(await page.evaluate(() => {
      const at = (name) => performance.getEntriesByName(name)[0].startTime;
      const fetched = performance.getEntriesByType('resource').find((e) => e.name.includes('/api/v1/query?'));
      return {
        server: fetched.responseStart - fetched.requestStart,
        transfer: fetched.responseEnd - fetched.responseStart,
        firstDraw: at('parca:first-draw') - at('parca:profile-bytes'),
        complete: at('parca:complete') - at('parca:first-draw'),
        bytes: fetched.decodedBodySize,
      };
    }));
  }
  const min = (f) => Math.min(...figures.map(f));
  const ms = (x) => `${x.toFixed(0)} ms`;
  console.log(`\nreal profile (google/pprof large.cpu, ${(figures[0].bytes / 1e6).toFixed(1)} MB of columns) in the explorer, best of ${ROUNDS}: server ${ms(min((t) => t.server))}, transfer ${ms(min((t) => t.transfer))}, columns read and first draw ${ms(min((t) => t.firstDraw))} after the bytes, table and binaries ${ms(min((t) => t.complete))} later`);
  await page.close();
}

/** Per figure, the smallest of the runs. */
function best(runs) {
  const min = (f) => Math.min(...runs.map(f));
  const r = runs[0];
  return {
    ...r,
    server: min((x) => x.server), read: min((x) => x.read), firstPaint: min((x) => x.firstPaint), table: min((x) => x.table),
    zoom: { p50: min((x) => x.zoom.p50), p95: min((x) => x.zoom.p95), max: min((x) => x.zoom.max) },
    frames: { p50: min((x) => x.frames.p50), p95: min((x) => x.frames.p95) },
    pan: { p50: min((x) => x.pan.p50), max: min((x) => x.pan.max) },
  };
}

/** Runs in the page: one round for the answer of `params`. */
async function run({ params, json }) {
  const { readColumns } = await import('/js/tree.js');
  const { profileView } = await import('/js/profileview.js');
  const nextFrame = () => new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));
  const timing = (u) => {
    const e = performance.getEntriesByName(new URL(u, location.href).href).pop();
    return e.responseStart - e.requestStart;
  };
  performance.clearResourceTimings();
  const u = `/api/v1/query?${params}&format=columns`;
  const bytes = await (await fetch(u)).arrayBuffer();
  const server = timing(u);
  const out = { bytes: bytes.byteLength, server };
  if (window.gc) window.gc();
  const box = document.createElement('div');
  box.style.width = '1360px';
  document.body.prepend(box);
  await nextFrame();

  // From the bytes to the first painted frame, as the explorer does. The first task after the
  // frame is ours: asked for before the view asks for its own (the table follows the paint).
  const painted = nextFrame().then(() => performance.now());
  const t0 = performance.now();
  const tree = readColumns(bytes).graphs[0].tree;
  const t1 = performance.now();
  const view = profileView(box, tree, { view: 'both' }, () => {}, null);
  const t2 = await painted;
  while (box.dataset.complete !== 'true') await new Promise((r) => setTimeout(r, 1));
  const t3 = performance.now();
  Object.assign(out, { nodes: tree.n, read: t1 - t0, firstPaint: t2 - t0, table: t3 - t2 });

  const stats = (xs) => {
    const s = xs.slice().sort((a, b) => a - b);
    return { p50: s[Math.floor(s.length / 2)] || 0, p95: s[Math.floor(s.length * 0.95)] || 0, max: s[s.length - 1] || 0 };
  };
  // Zoom: into ten heavy frames at depth 2..6 and back out, animated, recording frame intervals.
  const { icicle } = view;
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
  out.zoom = stats(icicle.frameTimes);
  out.frames = stats(intervals);
  // Pan: shift a zoomed view 60 times.
  icicle.focus(candidates[0] || 0, false);
  icicle.frameTimes.length = 0;
  const span = icicle.view[1] - icicle.view[0];
  for (let k = 0; k < 60; k++) {
    icicle.view = icicle.clamp([icicle.view[0] + span / 50, icicle.view[1] + span / 50]);
    icicle.draw();
  }
  out.pan = stats(icicle.frameTimes);
  view.destroy();
  box.remove();

  if (json) {
    // The same tree as the `json` format, and as JSON arrays of numbers (strings, then one
    // array per column), parsed to what the views need.
    const ju = `/api/v1/query?${params}&format=json`;
    const text = await (await fetch(ju)).text();
    const jsonServer = timing(ju);
    if (window.gc) window.gc();
    const a = performance.now();
    JSON.parse(text);
    const jsonParse = performance.now() - a;
    const cols = ['value', 'self', 'parent', 'name', 'file', 'line', 'binary'];
    const arraysText = JSON.stringify({ strings: tree.strings, ...Object.fromEntries(cols.map((c) => [c, Array.from(tree[c])])) });
    if (window.gc) window.gc();
    const b = performance.now();
    const parsed = JSON.parse(arraysText);
    for (const c of cols) new (c === 'value' || c === 'self' ? Float64Array : Int32Array)(parsed[c]);
    const arraysParse = performance.now() - b;
    out.json = { bytes: text.length, server: jsonServer, parse: jsonParse };
    out.arrays = { bytes: arraysText.length, parse: arraysParse };
  }
  return out;
}

async function main() {
  server = await startServer();
  // window.gc(): garbage of the previous round is collected before timing, not during.
  const browser = await launch(['--js-flags=--expose-gc']);
  try {
    // Pushed at once, oldest first: the store refuses profiles older than the time still open
    // for appends, which moves on with newer profiles.
    await push(readFileSync(join(REPO, 'tests/testdata/pprof/published/google-pprof/large.cpu')), { job: 'large', instance: 'bench' });
    for (const n of SIZES) await push(syntheticPprof(n, NOW), { job: `bench-${n}`, instance: 'bench' });
    const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
    // A page of the UI that loads its stylesheet and fetches nothing by itself.
    await page.goto(`${server.url}/no-such-page`);
    const rows = [];
    for (const n of SIZES) {
      const params = new URLSearchParams({ query: `merge(${CPU}{job="bench-${n}"})`, start: ((NOW - 3600e3) / 1000).toFixed(3), end: ((NOW + 60e3) / 1000).toFixed(3) });
      const runs = [];
      for (let k = 0; k < ROUNDS; k++) runs.push(await page.evaluate(run, { params: params.toString(), json: k === 0 }));
      rows.push(best(runs));
    }
    const ms = (x) => `${x.toFixed(1)} ms`;
    const mb = (x) => `${(x / 1e6).toFixed(1)} MB`;
    console.log('| nodes | columns answer | server | read columns | first paint from the bytes | table after first paint | zoom: draw p50 / p95 / max | zoom: frame interval p50 / p95 | pan: draw p50 / max |');
    console.log('|---|---|---|---|---|---|---|---|---|');
    for (const r of rows) {
      console.log(`| ${r.nodes.toLocaleString('en')} | ${mb(r.bytes)} | ${ms(r.server)} | ${ms(r.read)} | ${ms(r.firstPaint)} | ${ms(r.table)} | ${ms(r.zoom.p50)} / ${ms(r.zoom.p95)} / ${ms(r.zoom.max)} | ${ms(r.frames.p50)} / ${ms(r.frames.p95)} | ${ms(r.pan.p50)} / ${ms(r.pan.max)} |`);
    }
    console.log('\nthe same trees in the other layouts (one run):\n');
    console.log('| nodes | `json` answer | its server time | its JSON.parse | as JSON arrays | their JSON.parse to typed arrays |');
    console.log('|---|---|---|---|---|---|');
    for (const r of rows) {
      console.log(`| ${r.nodes.toLocaleString('en')} | ${mb(r.json.bytes)} | ${ms(r.json.server)} | ${ms(r.json.parse)} | ${mb(r.arrays.bytes)} | ${ms(r.arrays.parse)} |`);
    }
    await realProfile(browser);
  } finally {
    await browser.close();
    await server.stop();
  }
}

await main();
