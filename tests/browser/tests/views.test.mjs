// The views after the icicle graph, in a real headless Chromium against a real server holding
// real Go and Prometheus CPU profiles: the granularity switch (frames per source line), the call
// graph (laid out, focus, SVG and Graphviz downloads, diff colours in compare) and the sandwich
// (from the table, a frame, the search box and the URL; in compare). Screenshots go to
// tests/browser/out/.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { startServer, profileTimeMs, until, REPO } from '../lib/server.mjs';
import { launch, openPage, canvasStats } from '../lib/browser.mjs';

const OUT = join(REPO, 'tests/browser/out');
const CPU = 'process_cpu:cpu:nanoseconds:cpu:nanoseconds:delta';
const ROW = 18;
let server;
let browser;
let page;
const pageErrors = [];

const T = profileTimeMs('go/go-cpu.pb.gz');
const FROM = T - 5 * 60e3;
const TO = T + 5 * 60e3;
const GO = `${CPU}{instance="go-cpu"}`;

const explorerUrl = (params) => `${server.url}/?${new URLSearchParams({ from: FROM, to: TO, ...params })}`;
/** A screenshot of the profile panel (the view this file tests); documentation/images has some. */
const shot = (name) => page.locator('.profile-wrap').screenshot({ path: join(OUT, `${name}.png`) });
const param = (name) => new URL(page.url()).searchParams.get(name);

/** `/api/v1/query` of the explorer's merged profile of GO, with `extra` parameters. */
async function api(extra) {
  const q = new URLSearchParams({ query: `merge(${GO})`, start: (FROM / 1000).toFixed(3), end: (TO / 1000).toFixed(3), ...extra });
  const res = await fetch(`${server.url}/api/v1/query?${q}`);
  const body = await res.json();
  assert.equal(body.status, 'success', JSON.stringify(body));
  return body.data;
}

before(async () => {
  mkdirSync(OUT, { recursive: true });
  server = await startServer();
  browser = await launch();
  page = await openPage(browser, pageErrors);
});

after(async () => {
  if (browser) await browser.close();
  if (server) await server.stop();
});

async function drawn(selector = 'canvas.icicle') {
  await page.waitForSelector(selector);
  return until(async () => {
    const s = await canvasStats(page, selector);
    return s.painted > s.total * 0.02 && s.colours > 3 ? s : null;
  }, 15000, `${selector} to be drawn`);
}

test('the granularity switch splits frames per source line, as the API (pprof -top -lines) does', async () => {
  await page.goto(explorerUrl({ query: GO }));
  await drawn();
  await page.selectOption('select.granularity', 'line');
  await until(() => param('granularity') === 'line', 5000, 'granularity in the URL');
  await page.waitForFunction(() => {
    const td = document.querySelector('table.functions tbody tr:first-child td.name');
    return td && /\.(go|s):\d+/.test(td.textContent);
  });
  await drawn();
  // The table's flat values are the API's top at line granularity.
  const top = await api({ format: 'top', granularity: 'line' });
  const first = top.rows[0];
  const name = await page.textContent('table.functions tbody tr:first-child td.name');
  assert.equal(name, first.name);
  assert.match(first.name, /^\S+ \/\S+:\d+$/);
  await shot('granularity-lines');
  // Back to functions: no line numbers.
  await page.selectOption('select.granularity', '');
  await until(() => param('granularity') === null, 5000, 'granularity gone from the URL');
  await page.waitForFunction(() => !/:\d+$/.test(document.querySelector('table.functions tbody tr:first-child td.name')?.textContent || ':1'));
});

test('the call graph is laid out top-down with the API numbers, focuses on click, and downloads', async () => {
  await page.goto(explorerUrl({ query: GO }));
  await drawn();
  await page.click('.segmented button[data-view="graph"]');
  await until(() => param('view') === 'graph', 5000, 'view=graph in the URL');
  await page.waitForSelector('svg.cg-svg .cg-node');
  const data = await api({ format: 'callgraph', max_nodes: '100', node_fraction: '0.005', edge_fraction: '0.001' });
  const nodes = await page.$$eval('svg.cg-svg .cg-node', (els) => els.map((e) => e.getAttribute('aria-label')));
  assert.equal(nodes.length, data.nodes.length);
  assert.ok(nodes.length >= 20 && nodes.length <= 100, `${nodes.length} nodes`);
  assert.deepEqual(nodes, data.nodes.map((n) => n.name));
  const edges = await page.$$eval('svg.cg-svg .cg-edge', (els) => els.length);
  assert.equal(edges, data.edges.length);
  // Top-down: every non-residual edge's caller is above its callee (dagre ranks them).
  const centres = await page.$$eval('svg.cg-svg .cg-node rect', (rs) => rs.map((r) => Number(r.getAttribute('y')) + Number(r.getAttribute('height')) / 2));
  const down = data.edges.filter((e) => centres[e.from] < centres[e.to]).length;
  assert.ok(down > data.edges.length * 0.8, `${down} of ${data.edges.length} edges point down`);
  // Readable: the boxes' text is at least 10 px.
  const fonts = await page.$$eval('svg.cg-svg .cg-node text', (ts) => ts.map((t) => Number(t.getAttribute('font-size'))));
  assert.ok(Math.min(...fonts) >= 10);
  await shot('callgraph');
  // Click the heaviest node: it is focused, its neighbours stay lit, the panel names it.
  const heaviest = data.nodes[0].name;
  await page.click(`svg.cg-svg .cg-node[aria-label="${heaviest}"]`);
  await page.waitForSelector('svg.cg-svg.focused .cg-node.current');
  assert.equal(await page.textContent('.cg-info .cg-focus-name'), heaviest);
  assert.equal(param('gfocus'), heaviest);
  await shot('callgraph-focus');
  const [svg] = await Promise.all([page.waitForEvent('download'), page.click('button.dl-graph-svg')]);
  const svgText = Buffer.concat(await (await svg.createReadStream()).toArray()).toString();
  assert.match(svgText, /<svg[^>]+xmlns="http:\/\/www.w3.org\/2000\/svg"/);
  assert.equal((svgText.match(/class="cg-node(?: [^"]*)?"/g) || []).length, data.nodes.length);
  const [dot] = await Promise.all([page.waitForEvent('download'), page.click('button.dl-dot')]);
  const dotText = Buffer.concat(await (await dot.createReadStream()).toArray()).toString();
  assert.match(dotText, /^digraph "callgraph" \{/);
  assert.equal((dotText.match(/^N\d+ \[/gm) || []).length, data.nodes.length);
  // The URL state: a reload shows the same focused graph.
  await page.reload();
  await page.waitForSelector('svg.cg-svg.focused .cg-node.current');
  // All nodes on demand.
  await page.selectOption('select.cg-size', 'all');
  await until(() => param('nodes') === 'all', 5000, 'nodes=all in the URL');
  const all = await api({ format: 'callgraph' });
  await page.waitForFunction((n) => document.querySelectorAll('svg.cg-svg .cg-node').length === n, all.nodes.length);
});

/** The sandwich on screen: both halves drawn, the function in the URL; returns their stats. */
async function sandwichShown(name) {
  await until(() => param('view') === 'sandwich' && param('sandwich') === name, 5000, `the sandwich of ${name} in the URL`);
  const callers = await drawn('.sandwich-callers canvas.icicle');
  const callees = await drawn('.sandwich-callees canvas.icicle');
  assert.equal(await page.inputValue('input.sandwich-function'), name);
  return { callers, callees };
}

test('the sandwich opens from the table, with the API values, and from the URL', async () => {
  await page.goto(explorerUrl({ query: GO }));
  await drawn();
  await page.fill('input.table-filter', 'sort.insertionSort');
  await page.waitForFunction(() => [...document.querySelectorAll('table.functions tbody td.name')].every((td) => td.textContent.includes('sort.insertionSort')));
  const name = await page.textContent('table.functions tbody tr:first-child td.name');
  await page.click('table.functions tbody tr:first-child .row-sandwich');
  await sandwichShown(name);
  const data = await api({ format: 'sandwich', function: name });
  const summary = await page.textContent('.sandwich-summary');
  assert.ok(data.callees.total > 0 && summary.includes('cumulative'), summary);
  // The upside-down half: the function's row is at the bottom of the callers' canvas.
  const height = await page.$eval('.sandwich-callers canvas.icicle', (c) => c.getBoundingClientRect().height);
  await page.hover('.sandwich-callers canvas.icicle', { position: { x: 20, y: height - ROW * 1.5 } });
  await page.waitForSelector('.sandwich-callers .tooltip:not([hidden]) .tt-name');
  assert.equal(await page.textContent('.sandwich-callers .tooltip:not([hidden]) .tt-name'), name);
  await shot('sandwich');
  await page.reload();
  await sandwichShown(name);
});

test('the sandwich opens from a frame of the icicle and from the search box', async () => {
  await page.goto(explorerUrl({ query: GO, view: 'icicle' }));
  await drawn();
  const canvas = await page.$eval('canvas.icicle', (c) => { const b = c.getBoundingClientRect(); return { x: b.x, y: b.y }; });
  await page.mouse.click(canvas.x + 6, canvas.y + ROW * 1.5);
  await page.waitForSelector('.breadcrumb .frame-sandwich');
  const frame = await page.textContent('.breadcrumb .crumb.current');
  await page.click('.breadcrumb .frame-sandwich');
  await sandwichShown(frame);

  await page.goto(explorerUrl({ query: GO, view: 'icicle' }));
  await drawn();
  await page.fill('input.search', 'runtime.mallocgc');
  await page.waitForSelector('button.search-sandwich:not([hidden])');
  await page.click('button.search-sandwich');
  await sandwichShown('runtime.mallocgc');
  // Another function from the picker.
  const other = (await api({ format: 'top' })).rows.find((r) => r.name !== 'runtime.mallocgc' && r.flat > 0).name;
  await page.fill('input.sandwich-function', other);
  await page.press('input.sandwich-function', 'Enter');
  await sandwichShown(other);
});

test('compare: the call graph and the sandwich show the diff in red and green', async () => {
  const params = new URLSearchParams({
    a: `${CPU}{instance="go-cpu"}`, afrom: FROM, ato: TO,
    b: `${CPU}{instance="go-cpu-b"}`, bfrom: FROM, bto: TO,
    view: 'graph',
  });
  await page.goto(`${server.url}/compare?${params}`);
  await page.waitForSelector('svg.cg-svg .cg-node');
  const fills = await page.$$eval('svg.cg-svg .cg-node rect', (rs) => rs.map((r) => r.getAttribute('fill')));
  const rgb = fills.map((f) => f.match(/\d+/g).map(Number));
  assert.ok(rgb.some(([r, g]) => r > g + 40), `some node grew (red): ${fills.slice(0, 5)}`);
  assert.ok(rgb.some(([r, g]) => g > r + 40), `some node shrank (green): ${fills.slice(0, 5)}`);
  assert.match(await page.textContent('.cg-summary'), /nodes/);
  await shot('compare-callgraph');
  params.set('view', 'sandwich');
  params.set('sandwich', 'runtime.mallocgc');
  await page.goto(`${server.url}/compare?${params}`);
  const { callees } = await sandwichShown('runtime.mallocgc');
  assert.ok(callees.red > 0 || callees.green > 0, `diff colours: ${JSON.stringify(callees)}`);
  await shot('compare-sandwich');
});

test('no errors in the page', () => {
  assert.deepEqual(pageErrors, []);
});
