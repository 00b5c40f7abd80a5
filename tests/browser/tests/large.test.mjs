// A flame graph of more than a million nodes, in a real headless Chromium against the real
// server: served whole by default (no node folded into an "other" bucket) and drawn whole, every
// node searchable in the page.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, until } from '../lib/server.mjs';
import { launch, openPage, canvasStats } from '../lib/browser.mjs';
import { syntheticPprof } from '../lib/synthetic.mjs';

const CPU = 'process_cpu:cpu:nanoseconds:cpu:nanoseconds:delta';
const NODES = 1_050_000;
const NOW = Date.now();
const SELECTOR = `${CPU}{job="million"}`;
let server;
let browser;
let page;
const pageErrors = [];

before(async () => {
  server = await startServer();
  const res = await fetch(`${server.url}/api/v1/write?${new URLSearchParams({ __name__: 'process_cpu', job: 'million' })}`, {
    method: 'POST',
    body: syntheticPprof(NODES, NOW),
  });
  assert.equal(res.status, 200, await res.text());
  browser = await launch();
  page = await openPage(browser, pageErrors);
  page.setDefaultTimeout(120000);
});

after(async () => {
  if (browser) await browser.close();
  if (server) await server.stop();
});

/** The header and the `name` column (as strings) of a `format=columns` answer. */
function readColumns(bytes) {
  const view = new DataView(bytes);
  assert.equal(new TextDecoder().decode(new Uint8Array(bytes, 0, 8)), 'PARCACOL');
  const headerAt = Number(view.getBigUint64(8, true));
  const header = JSON.parse(new TextDecoder().decode(new Uint8Array(bytes, headerAt)));
  const n = header.graphs[0].nodes;
  const size = { f64: 8, i32: 4, u32: 4 };
  let at = 16;
  let names = null;
  for (const [name, type] of header.columns) {
    if (name === 'name') names = Array.from(new Uint32Array(bytes.slice(at, at + n * 4)), (i) => header.strings[i]);
    at += Math.ceil((n * size[type]) / 8) * 8;
  }
  return { header, names };
}

test('a flame graph of over a million nodes is served and drawn whole by default', async () => {
  const window = { start: ((NOW - 3600e3) / 1000).toFixed(3), end: ((NOW + 60e3) / 1000).toFixed(3) };
  const res = await fetch(`${server.url}/api/v1/query?${new URLSearchParams({ query: `merge(${SELECTOR})`, ...window, format: 'columns' })}`);
  assert.equal(res.status, 200);
  const { header, names } = readColumns(await res.arrayBuffer());
  const graph = header.graphs[0];
  assert.equal(graph.nodes, NODES, 'every node of the tree is served');
  assert.equal(graph.omitted_nodes, undefined, 'nothing is folded into an "other" bucket');
  // Frames of one method, spread over the whole tree.
  const pattern = /Method39$/;
  const expected = names.filter((name, i) => i > 0 && pattern.test(name)).length;
  assert.ok(expected > 10000, `${expected} frames of Method39`);

  await page.goto(`${server.url}/?${new URLSearchParams({ query: SELECTOR, from: NOW - 3600e3, to: NOW + 60e3, search: '/Method39$/' })}`);
  await page.waitForFunction(() => performance.getEntriesByName('parca:complete').length);
  const stats = await until(async () => {
    const s = await canvasStats(page);
    return s.painted > s.total * 0.02 && s.colours > 3 ? s : null;
  }, 30000, 'the icicle graph to be drawn');
  assert.ok(stats.painted > 0);
  // The page holds every node: its search finds every frame the API's tree has.
  const info = await page.textContent('.search-info');
  const found = Number(/^([\d,]+) frames/.exec(info)?.[1].replaceAll(',', ''));
  assert.equal(found, expected, info);
  assert.deepEqual(pageErrors, []);
});
