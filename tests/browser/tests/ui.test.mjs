// The web UI in a real headless Chromium against a real server holding real profiles:
// explorer, metrics graph, icicle graph (pixels drawn), zoom, search, table, bottom-up, compare,
// targets, rules and alerts, a bad query, downloads and the URL state. Screenshots go to tests/browser/out/.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { isDeepStrictEqual } from 'node:util';
import { join } from 'node:path';
import { startServer, profileTimeMs, until, REPO } from '../lib/server.mjs';
import { launch, openPage, canvasStats } from '../lib/browser.mjs';
import { spanPprof, cpuPprof } from '../lib/pprof.mjs';
import { formatValue } from '../../../web/static/js/units.js';

const OUT = join(REPO, 'tests/browser/out');
const CPU = 'process_cpu:cpu:nanoseconds:cpu:nanoseconds:delta';
const ROW = 18;
let server;
let browser;
let page;
const pageErrors = [];

// The pushed Go CPU profiles keep their own timestamps: look there.
const T = profileTimeMs('go/go-cpu.pb.gz');
const FROM = T - 5 * 60e3;
const TO = T + 5 * 60e3;

const explorerUrl = (params) => `${server.url}/?${new URLSearchParams({ from: FROM, to: TO, ...params })}`;
const shot = (name) => page.screenshot({ path: join(OUT, `${name}.png`), fullPage: true });

before(async () => {
  mkdirSync(OUT, { recursive: true });
  server = await startServer({ args: ['--web-trace-url-template=http://tracing.example/trace/{trace_id}?span={span_id}'] });
  browser = await launch();
  page = await openPage(browser, pageErrors);
});

after(async () => {
  if (browser) await browser.close();
  if (server) await server.stop();
});

/** Waits until the icicle canvas has painted frames; returns its stats. */
async function drawnIcicle() {
  await page.waitForSelector('canvas.icicle');
  return until(async () => {
    const s = await canvasStats(page);
    return s.painted > s.total * 0.05 && s.colours > 5 ? s : null;
  }, 15000, 'the icicle graph to be drawn');
}

test('the explorer loads and offers profile types with human names', async () => {
  await page.goto(`${server.url}/`);
  await page.waitForSelector('select.type-select option[value^="process_cpu"]', { state: 'attached' });
  const options = await page.$$eval('select.type-select option', (os) => os.map((o) => o.textContent));
  assert.ok(options.some((o) => o.startsWith('CPU time')), `options: ${options}`);
  assert.ok(options.some((o) => o.startsWith('Memory in use (bytes)')), `options: ${options}`);
  // With no query, the first CPU type is chosen and written to the URL.
  await until(() => new URL(page.url()).searchParams.get('query'), 10000, 'a default query');
  await page.waitForSelector('.type-help strong');
  await shot('explorer-default');
  // The permalink fixes the relative range ("last 1h") to absolute times.
  await page.click('a.permalink');
  await until(() => /^\d+$/.test(new URL(page.url()).searchParams.get('from') || ''), 10000, 'absolute times in the URL');
});

test('a query draws the metrics graph and the icicle graph', async () => {
  await page.goto(explorerUrl({ query: `${CPU}{job="go"}` }));
  await page.waitForSelector('.graph-svg circle.point');
  const series = await page.$$eval('.legend li', (li) => li.length);
  assert.ok(series >= 2, `expected several series, got ${series}`);
  const stats = await drawnIcicle();
  assert.ok(stats.colours > 10, `few colours drawn: ${JSON.stringify(stats)}`);
  const summary = await page.textContent('.profile-summary');
  assert.match(summary, /total [\d.]+ (s|ms)/);
  const rows = await page.$$eval('table.functions tbody tr', (tr) => tr.length);
  assert.ok(rows > 10, `table rows: ${rows}`);
  await shot('explorer-query');
});

test('hovering the metrics graph shows labels and a value with its unit', async () => {
  await page.goto(explorerUrl({ query: `${CPU}{job="go"}` }));
  await page.waitForSelector('.graph-svg circle.point');
  const point = await page.$eval('.graph-svg circle.point', (c) => {
    const r = c.getBoundingClientRect();
    return { x: r.x + r.width / 2, y: r.y + r.height / 2 };
  });
  await page.mouse.move(point.x, point.y);
  await page.waitForSelector('.graph-tip:not([hidden])');
  const tip = await page.textContent('.graph-tip');
  assert.match(tip, /job="go"/);
  assert.match(tip, /\d (ms|s|µs)/);
  // A click opens that point's profile: CPU time is a delta type, so the merge of its window.
  await page.mouse.click(point.x, point.y);
  await page.waitForFunction(() => document.querySelector('.profile-head h2')?.textContent.startsWith('Profile of {'));
  assert.ok(new URL(page.url()).searchParams.get('pto'));
  await drawnIcicle();
  // A drag merges a range.
  const box = await page.$eval('.graph-svg .overlay', (r) => { const b = r.getBoundingClientRect(); return { x: b.x, y: b.y, w: b.width, h: b.height }; });
  await page.mouse.move(box.x + box.w * 0.3, box.y + box.h / 2);
  await page.mouse.down();
  await page.mouse.move(box.x + box.w * 0.5, box.y + box.h / 2, { steps: 5 });
  await page.mouse.move(box.x + box.w * 0.7, box.y + box.h / 2, { steps: 5 });
  await page.mouse.up();
  await page.waitForFunction(() => document.querySelector('.profile-head h2')?.textContent.startsWith('Merged profile of'));
  assert.ok(new URL(page.url()).searchParams.get('pfrom'));
  await page.waitForSelector('.graph-svg rect.selection');
  await drawnIcicle();
  await shot('explorer-range-selected');
});

/** The metrics graph's circle nearest to time `t` (ms) in a graph over [FROM, TO]: its centre. */
async function pointAt(t, scope = '') {
  return page.$$eval(`${scope} .graph-svg`, ([svg], [t0, from, to]) => {
    const overlay = svg.querySelector('.overlay');
    const o = overlay.getBoundingClientRect();
    const x = o.x + ((t0 - from) / (to - from)) * o.width;
    let best = null;
    for (const c of svg.querySelectorAll('circle.point')) {
      const r = c.getBoundingClientRect();
      const cx = r.x + r.width / 2;
      if (!best || Math.abs(cx - x) < Math.abs(best.x - x)) best = { x: cx, y: r.y + r.height / 2 };
    }
    return best;
  }, [t, FROM, TO]);
}

/** The value at time `t` (ms) of the only series of `query` over [FROM, TO] in 10 s steps. */
async function pointValue(query, t) {
  const params = new URLSearchParams({ query, start: String(FROM / 1000), end: String(TO / 1000), step: '10s' });
  const res = await (await fetch(`${server.url}/api/v1/query_range?${params}`)).json();
  assert.equal(res.data.result.length, 1, JSON.stringify(res.data.result.map((r) => r.metric)));
  const point = res.data.result[0].values.find(([ts]) => Math.round(ts * 1000) === t);
  assert.ok(point, `a point at ${t}`);
  return Number(point[1]);
}

/** The exact total of the profile the pprof download link asks for (the same query, as `top`). */
async function downloadTotal() {
  const href = new URL(await page.getAttribute('a.dl-pprof', 'href'), server.url);
  href.searchParams.set('format', 'top');
  return (await (await fetch(href)).json()).data.total;
}

test('a click on a point opens the merge of its step window, whose total is the point', async () => {
  // Job `steps` has profiles 2 s, 12 s and 17 s after T: the point at T+20s sums two of them.
  const query = `${CPU}{job="steps"}`;
  const t = T + 20e3;
  const expected = await pointValue(`sum by (job) (${query})`, t);
  const one = await pointValue(`sum by (job) (${query})`, T + 10e3);
  assert.equal(expected, 2 * one, 'the point sums two profiles');
  await page.goto(explorerUrl({ query, by: 'job', view: 'icicle' }));
  await page.waitForSelector('.graph-svg circle.point');
  const p = await pointAt(t);
  await page.mouse.move(p.x, p.y);
  await page.waitForSelector('.graph-tip:not([hidden])');
  assert.match(await page.textContent('.graph-tip'), new RegExp(formatValue(expected, 'nanoseconds').replace('.', '\\.')));
  await page.mouse.click(p.x, p.y);
  await page.waitForFunction(() => document.querySelector('.profile-head h2')?.textContent.startsWith('Profile of {job="steps"} in ('));
  const url = new URL(page.url()).searchParams;
  assert.deepEqual([url.get('pfrom'), url.get('pto'), url.get('labels')], [String(t - 10e3), String(t), '{"job":"steps"}']);
  assert.equal(await page.textContent('.profile-query'), `merge(${CPU}{job="steps"}[10s])`);
  await drawnIcicle();
  const summary = () => page.textContent('.profile-summary');
  assert.match(await summary(), new RegExp(`total ${formatValue(expected, 'nanoseconds').replace('.', '\\.')} `));
  assert.equal(await downloadTotal(), expected);
  await page.waitForSelector('.graph-svg rect.selection');
  await shot('explorer-point-window');
  // The URL reproduces it.
  await page.reload();
  await drawnIcicle();
  assert.match(await summary(), new RegExp(`total ${formatValue(expected, 'nanoseconds').replace('.', '\\.')} `));
  assert.equal(await downloadTotal(), expected);
});

test('the UI reads the columns answer as the same tree as the json format', async () => {
  await page.goto(explorerUrl({ query: `${CPU}{job="go"}`, view: 'icicle' }));
  await drawnIcicle();
  const problems = await page.evaluate(async ([from, to, cpu]) => {
    const { readColumns } = await import('/js/tree.js');
    const params = new URLSearchParams({ query: `merge(${cpu}{job="go"})`, start: String(from / 1000), end: String(to / 1000) });
    const t = readColumns(await (await fetch(`/api/v1/query?${params}&format=columns`)).arrayBuffer()).graphs[0].tree;
    const { data } = await (await fetch(`/api/v1/query?${params}&format=json`)).json();
    const out = [];
    if (t.meta.total !== data.total) out.push(`total ${t.meta.total} != ${data.total}`);
    // Pre-order walk of the JSON tree, node by node against the columns.
    const stack = [[data.root, -1]];
    let i = 0;
    while (stack.length && out.length < 5) {
      const [node, parent] = stack.pop();
      const got = [t.nameOf(i), t.strings[t.file[i]], t.line[i], t.strings[t.binary[i]], t.value[i], t.self[i], t.parent[i]];
      const want = [node.name, node.file || '', node.line || 0, node.binary || '', node.value, node.self, parent];
      if (JSON.stringify(got) !== JSON.stringify(want)) out.push(`node ${i}: ${JSON.stringify(got)} != ${JSON.stringify(want)}`);
      for (let c = node.children.length - 1; c >= 0; c--) stack.push([node.children[c], i]);
      i++;
    }
    if (i !== t.n) out.push(`${t.n} nodes in columns, ${i} in json`);
    return out;
  }, [FROM, TO, CPU]);
  assert.deepEqual(problems, []);
});

test('merge by shows one profile per group', async () => {
  await page.goto(explorerUrl({ query: `merge by (instance) (${CPU}{job="go"})`, view: 'icicle' }));
  await page.waitForSelector('.groups button');
  const tabs = await page.$$eval('.groups button', (b) => b.map((x) => x.textContent));
  assert.deepEqual(tabs.map((t) => t.replace(/ \(\d+\)$/, '')), ['{instance="go-cpu"}', '{instance="go-cpu-b"}']);
  await drawnIcicle();
  const first = await page.textContent('.profile-summary');
  await page.click('.groups button:nth-child(2)');
  await page.waitForFunction((s) => document.querySelector('.profile-summary')?.textContent !== s, first);
  await drawnIcicle();
  assert.equal(new URL(page.url()).searchParams.get('group'), '1');
});

test('sum by groups the series of the graph', async () => {
  await page.goto(explorerUrl({ query: `${CPU}{job="go"}`, by: 'instance' }));
  await page.waitForSelector('.graph-svg circle.point');
  assert.match(await page.textContent('.graph-panel .panel-title'), /sum by \(instance\)/);
  const legend = await page.$$eval('.legend li', (li) => li.map((l) => l.textContent));
  assert.deepEqual(legend.sort(), ['{instance="go-cpu"}', '{instance="go-cpu-b"}']);
  assert.equal(await page.inputValue('input.sum-by'), 'instance');
});

test('a fleet graph draws its 20 largest series and one line for the rest', async () => {
  // 30 pods, pod i with i + 1 samples: the graph keeps pods 10–29 and sums pods 0–9.
  // Now: older times may lie before the head's open window once other pushes moved it.
  const from = Math.floor(Date.now() / 1000) - 60;
  for (let i = 0; i < 30; i++) {
    const name = encodeURIComponent(`fleet.cpu{pod=p${i}}`);
    const res = await fetch(`${server.url}/ingest?name=${name}&from=${from}&until=${from + 10}&format=folded`, {
      method: 'POST', body: `main;work ${i + 1}\n`,
    });
    assert.equal(res.status, 200, await res.text());
  }
  await page.goto(`${server.url}/?${new URLSearchParams({
    from: (from - 300) * 1000, to: (from + 300) * 1000,
    query: 'process_cpu:samples:count:cpu:nanoseconds:delta{service_name="fleet"}',
  })}`);
  await page.waitForSelector('.graph-svg path.line.other, .graph-svg circle.point');
  assert.match(await page.textContent('.graph-panel .panel-title'), /the 20 largest of 30 series/);
  const legend = await page.$$eval('.legend li', (li) => li.map((l) => l.textContent));
  assert.equal(legend.length, 21, legend.join(' | '));
  assert.ok(legend.includes('the other 10 series, summed'), legend.join(' | '));
  assert.ok(legend.some((l) => l.includes('pod="p29"')) && !legend.some((l) => l.includes('pod="p9"')), legend.join(' | '));
  await shot('explorer-fleet');
});

test('clicking a frame zooms, the breadcrumb follows, reset goes back', async () => {
  await page.goto(explorerUrl({ query: `${CPU}{job="go"}`, view: 'icicle' }));
  const before = await drawnIcicle();
  const box = await page.$eval('canvas.icicle', (c) => { const b = c.getBoundingClientRect(); return { x: b.x, y: b.y }; });
  // The tooltip: total and self with percentages, and where the function is.
  await page.mouse.move(box.x + 4, box.y + ROW * 1.5);
  await page.waitForSelector('.tooltip:not([hidden]) .tt-name');
  const tip = await page.textContent('.tooltip:not([hidden])');
  assert.match(tip, /Total.*\d.*% of all/s);
  assert.match(tip, /Self/);
  assert.match(tip, /File.*\.go(:\d+)?/s);
  await page.mouse.click(box.x + 4, box.y + ROW * 1.5);
  await page.waitForFunction(() => document.querySelectorAll('.breadcrumb .crumb').length === 2);
  await until(() => new URL(page.url()).searchParams.get('focus'), 5000, 'focus in the URL');
  // The zoom animates: wait for the canvas to change, up to a bound.
  await until(async () => !isDeepStrictEqual(await canvasStats(page), before), 5000, 'the canvas to change on zoom');
  // Deeper still.
  await page.mouse.click(box.x + 4, box.y + ROW * 2.5);
  await page.waitForFunction(() => document.querySelectorAll('.breadcrumb .crumb').length === 3);
  await shot('icicle-zoomed');
  // The URL reproduces the zoom.
  await page.reload();
  await page.waitForFunction(() => document.querySelectorAll('.breadcrumb .crumb').length === 3);
  // Escape zooms out one level.
  await page.focus('canvas.icicle');
  await page.keyboard.press('Escape');
  await page.waitForFunction(() => document.querySelectorAll('.breadcrumb .crumb').length === 2);
  await page.click('.breadcrumb .reset');
  await page.waitForFunction(() => document.querySelectorAll('.breadcrumb .crumb').length === 1);
  await until(() => !new URL(page.url()).searchParams.get('focus'), 5000, 'focus cleared from the URL');
});

test('search highlights matches and shows their share', async () => {
  await page.goto(explorerUrl({ query: `${CPU}{job="go"}`, view: 'icicle' }));
  await drawnIcicle();
  await page.fill('input.search', 'sort');
  await page.waitForFunction(() => /frames · .* of all/.test(document.querySelector('.search-info').textContent));
  const info = await page.textContent('.search-info');
  const share = Number(/([\d.]+)% of all/.exec(info)[1]);
  assert.ok(share > 0 && share < 100, info);
  const stats = await canvasStats(page);
  assert.ok(stats.dimmed > 0, 'frames that do not match are dimmed');
  assert.equal(new URL(page.url()).searchParams.get('search'), 'sort');
  await shot('icicle-search');
  await page.fill('input.search', 'no-such-function-anywhere');
  await page.waitForFunction(() => document.querySelector('.search-info').textContent === 'no frame matches');
});

test('the table sorts, filters, and a click focuses the graph', async () => {
  await page.goto(explorerUrl({ query: `${CPU}{job="go"}` }));
  await drawnIcicle();
  const flat = await page.$$eval('table.functions tbody tr td:nth-child(2)', (td) => td.length);
  assert.ok(flat > 10);
  await page.click('table.functions th[data-sort="cum"]');
  await page.waitForSelector('table.functions th.sorted[data-sort="cum"]');
  await page.fill('input.table-filter', 'sort.');
  await page.waitForFunction(() => [...document.querySelectorAll('table.functions tbody td.name')].every((td) => td.textContent.includes('sort.')));
  const name = await page.textContent('table.functions tbody tr:first-child td.name');
  await page.click('table.functions tbody tr:first-child');
  await page.waitForFunction(() => document.querySelectorAll('.breadcrumb .crumb').length > 1);
  const current = await page.textContent('.breadcrumb .crumb.current');
  assert.equal(current, name);
  assert.match(await page.inputValue('input.search'), /^\/\^.*\$\/$/);
  await shot('table-focus');
});

test('bottom-up view and hiding frames rebuild the graph', async () => {
  await page.goto(explorerUrl({ query: `${CPU}{job="go"}`, view: 'icicle' }));
  await drawnIcicle();
  await page.waitForSelector('.profile-panel[data-complete="true"], .profile-panel [data-complete="true"]', { state: 'attached' });
  const framesBefore = Number((await page.textContent('.profile-summary')).match(/([\d,]+) frames/)[1].replace(/,/g, ''));
  const topRow = async () => (await page.$$eval('table.functions tbody tr:first-child td', (td) => td.map((t) => t.textContent))).join('|');
  await page.click('.segmented button[data-view="both"]');
  await page.waitForSelector('table.functions tbody tr');
  const rowBefore = await topRow();
  await page.check('input.invert');
  await page.waitForFunction(() => document.querySelector('.profile-summary').textContent.includes('bottom-up'));
  await drawnIcicle();
  assert.equal(new URL(page.url()).searchParams.get('invert'), '1');
  assert.equal(await topRow(), rowBefore, 'flat and cumulative do not change bottom-up');
  // The heaviest self function is the first frame below the root.
  await shot('icicle-bottom-up');
  await page.uncheck('input.invert');
  await page.fill('input.hide-pattern', '^runtime\\.');
  await page.press('input.hide-pattern', 'Enter');
  await page.waitForFunction((n) => Number(document.querySelector('.profile-summary').textContent.match(/([\d,]+) frames/)[1].replace(/,/g, '')) < n, framesBefore);
  assert.equal(new URL(page.url()).searchParams.get('hide'), '^runtime\\.');
  const names = await page.$$eval('table.functions tbody td.name', (td) => td.map((t) => t.textContent));
  assert.ok(!names.some((n) => n.startsWith('runtime.')), 'hidden frames are gone from the table');
});

test('downloads: folded and SVG of the view, pprof from the server', async () => {
  await page.goto(explorerUrl({ query: `${CPU}{job="go"}`, view: 'icicle' }));
  await drawnIcicle();
  const [folded] = await Promise.all([page.waitForEvent('download'), page.click('button.dl-folded')]);
  const text = await (await folded.createReadStream()).toArray();
  const lines = Buffer.concat(text).toString().trim().split('\n');
  assert.ok(lines.length > 10 && lines.every((l) => /^\S.*;?.* \d+$/.test(l)), lines.slice(0, 3).join('\n'));
  const [svg] = await Promise.all([page.waitForEvent('download'), page.click('button.dl-svg')]);
  const svgText = Buffer.concat(await (await svg.createReadStream()).toArray()).toString();
  assert.match(svgText, /^<svg[^>]+xmlns="http:\/\/www.w3.org\/2000\/svg"/);
  assert.ok((svgText.match(/<rect/g) || []).length > 20);
  const href = await page.getAttribute('a.dl-pprof', 'href');
  const res = await fetch(new URL(href, server.url));
  assert.equal(res.status, 200);
  const bytes = new Uint8Array(await res.arrayBuffer());
  assert.deepEqual([bytes[0], bytes[1]], [0x1f, 0x8b], 'pprof download is gzip');
});

test('the pprof download holds what is on screen: hidden frames removed, the zoomed samples', async () => {
  await page.goto(explorerUrl({ query: `${CPU}{job="go"}`, view: 'icicle', hide: '^runtime\\.' }));
  await drawnIcicle();
  const link = () => page.getAttribute('a.dl-pprof', 'href');
  assert.equal(new URL(await link(), server.url).searchParams.get('hide'), '^runtime\\.');
  // Zoom into the first frame below the root.
  const box = await page.$eval('canvas.icicle', (c) => { const b = c.getBoundingClientRect(); return { x: b.x, y: b.y }; });
  await page.mouse.click(box.x + 4, box.y + ROW * 1.5);
  await page.waitForFunction(() => document.querySelectorAll('.breadcrumb .crumb').length === 2);
  const zoomed = await page.textContent('.breadcrumb .crumb.current');
  await until(async () => new URL(await link(), server.url).searchParams.get('query').includes('|~'), 5000, 'the zoom in the pprof link');
  const href = new URL(await link(), server.url);
  assert.ok(href.searchParams.get('query').endsWith(` |~ \`${zoomed.replace(/[\\.+*?()|[\]{}^$#&\-~]/g, '\\$&')}\``), href.searchParams.get('query'));
  const pprof = await fetch(href);
  assert.equal(pprof.status, 200);
  assert.deepEqual([...new Uint8Array(await pprof.arrayBuffer()).subarray(0, 2)], [0x1f, 0x8b]);
  // The same request as folded text: what the pprof holds, to compare with the screen's folded.
  href.searchParams.set('format', 'folded');
  const served = (await (await fetch(href)).text()).trim().split('\n');
  assert.ok(served.length > 0 && served.every((l) => !/(^|;)runtime\./.test(l) && l.includes(zoomed)), served.slice(0, 3).join('\n'));
  const [dl] = await Promise.all([page.waitForEvent('download'), page.click('button.dl-folded')]);
  const onScreen = Buffer.concat(await (await dl.createReadStream()).toArray()).toString().trim().split('\n');
  const sum = (lines) => lines.reduce((n, l) => n + Number(l.slice(l.lastIndexOf(' ') + 1)), 0);
  assert.equal(sum(served), sum(onScreen));
  assert.ok(sum(served) > 0);
});

test('compare shows a diff: red grew, green shrank', async () => {
  const params = new URLSearchParams({
    a: `${CPU}{instance="go-cpu"}`, afrom: FROM, ato: TO,
    b: `${CPU}{instance="go-cpu-b"}`, bfrom: FROM, bto: TO,
  });
  await page.goto(`${server.url}/compare?${params}`);
  await page.waitForSelector('.diff-legend');
  const stats = await drawnIcicle();
  assert.ok(stats.red > 0 && stats.green > 0, `diff colours: ${JSON.stringify(stats)}`);
  const canvas = await page.$eval('canvas.icicle', (c) => { const b = c.getBoundingClientRect(); return { x: b.x, y: b.y }; });
  await page.mouse.move(canvas.x + 4, canvas.y + ROW * 1.5);
  await page.waitForSelector('.tooltip:not([hidden]) .tt-name');
  const tip = await page.textContent('.tooltip:not([hidden])');
  assert.match(tip, /A \(base\)/);
  assert.match(tip, /Change/);
  await page.waitForSelector('.side-a .graph-svg');
  await page.waitForSelector('.side-b .graph-svg');
  await shot('compare');
  await page.selectOption('select.diff-mode', 'relative');
  await until(() => new URL(page.url()).searchParams.get('diffmode') === 'relative', 5000, 'relative mode in the URL');
  await drawnIcicle();
});

test('compare: a click on a point of a side chooses that step window for the side', async () => {
  const query = `${CPU}{job="steps"}`;
  const t = T + 20e3;
  const a = await pointValue(`sum(${query})`, t); // two profiles
  const b = await pointValue(`sum(${query})`, T + 10e3); // one
  const params = new URLSearchParams({ a: query, afrom: FROM, ato: TO, b: query, bfrom: FROM, bto: TO });
  await page.goto(`${server.url}/compare?${params}`);
  await page.waitForSelector('.side-a .graph-svg circle.point');
  await page.waitForSelector('.side-b .graph-svg circle.point');
  await drawnIcicle();
  const pa = await pointAt(t, '.side-a');
  await page.mouse.move(pa.x, pa.y);
  await page.mouse.click(pa.x, pa.y);
  await until(() => new URL(page.url()).searchParams.get('apto') === String(t), 10000, 'side A window in the URL');
  await page.waitForSelector('.side-b .graph-svg circle.point');
  const pb = await pointAt(T + 10e3, '.side-b');
  await page.mouse.move(pb.x, pb.y);
  await page.mouse.click(pb.x, pb.y);
  await until(() => new URL(page.url()).searchParams.get('bpto') === String(T + 10e3), 10000, 'side B window in the URL');
  const url = new URL(page.url()).searchParams;
  assert.deepEqual([url.get('apfrom'), url.get('bpfrom'), url.get('afrom'), url.get('bto')], [String(t - 10e3), String(T), String(FROM), String(TO)]);
  // The diff is of those windows: A's total is its point, B's its point; the graphs keep their range.
  const summary = `A ${formatValue(a, 'nanoseconds')} → B ${formatValue(b, 'nanoseconds')}`;
  await page.waitForFunction((s) => document.querySelector('.diff-panel .profile-summary')?.textContent.includes(s), summary);
  const stats = await drawnIcicle();
  assert.ok(stats.green > 0, `B has half of A: frames shrank: ${JSON.stringify(stats)}`);
  await page.waitForSelector('.side-a .graph-svg rect.selection');
  assert.match(await page.textContent('.side-a .side-selection'), /Window \(/);
  await shot('compare-point-windows');
  // The URL reproduces it; "Whole range" goes back for one side.
  await page.reload();
  await page.waitForFunction((s) => document.querySelector('.diff-panel .profile-summary')?.textContent.includes(s), summary);
  await page.click('.side-b button.whole-range');
  await until(() => !new URL(page.url()).searchParams.get('bpto'), 10000, 'side B window cleared');
  const all = await pointValue(`sum(${query}[10m])`, TO);
  await page.waitForFunction((s) => document.querySelector('.diff-panel .profile-summary')?.textContent.includes(s), `B ${formatValue(all, 'nanoseconds')}`);
});

test('the targets page lists targets by job with health and errors', async () => {
  await page.goto(`${server.url}/targets`);
  await page.waitForSelector('section.job[data-job="parca"]');
  await page.waitForSelector('section.job[data-job="broken"]');
  // The closed port is scraped within its interval and reported down with its error.
  await page.waitForFunction(() => document.querySelector('section.job[data-job="broken"] .health.down'), null, { timeout: 30000 });
  const error = await page.textContent('section.job[data-job="broken"] tr.target td.error-text');
  assert.ok(error.length > 0, 'a down target shows its error');
  await page.waitForFunction(() => /\d+s ago/.test(document.querySelector('section.job[data-job="parca"] tr.target').textContent), null, { timeout: 30000 });
  const labels = await page.textContent('section.job[data-job="broken"] td.labels');
  assert.match(labels, /env="test"/);
  await shot('targets');
});

test('the rules page lists groups, health and firing alerts', async () => {
  await page.goto(`${server.url}/rules`);
  await page.waitForSelector('section.rule-group[data-group="cpu"] tr.rule[data-rule="job:cpu:sum"]');
  // The server's own CPU is scraped every 2 s: the alert fires once a profile is in.
  await page.waitForFunction(() => document.querySelector('.alerts-summary tr.alert.firing'), null, { timeout: 30000 });
  const alert = await page.textContent('.alerts-summary tr.alert.firing');
  assert.match(alert, /ServerBusy/);
  assert.match(alert, /severity="ticket"/);
  assert.match(alert, /parca used /);
  await page.waitForFunction(() => document.querySelector('tr.rule[data-rule="job:cpu:sum"] .health.ok'), null, { timeout: 30000 });
  await page.waitForFunction(() => document.querySelector('tr.rule[data-rule="job:cpu:all"] .health.err'), null, { timeout: 30000 });
  const error = await page.textContent('tr.rule[data-rule="job:cpu:all"] td.error-text');
  assert.match(error, /exceeded limit of 1 with \d+ series/);
  await page.click('nav a[data-page="rules"]');
  await page.waitForSelector('nav a[data-page="rules"].active');
  await shot('rules');
});

test('the rules page shows a deploy insight with a link to compare its windows', async () => {
  // Version 1 of `shop` spends its time in parse, version 2 in encode; version 2's 10 s window
  // ended before now. Whole seconds: a time in nanoseconds is then exact as a JS number.
  const start = Math.floor(Date.now() / 1e3) * 1e3 - 60e3;
  const push = async (version, t, parse, encode) => {
    const body = cpuPprof(t, [{ stack: ['main', 'serve', 'parse'], nanos: parse }, { stack: ['main', 'serve', 'encode'], nanos: encode }]);
    const res = await fetch(`${server.url}/api/v1/write?${new URLSearchParams({ __name__: 'process_cpu', job: 'shop', version })}`, { method: 'POST', body });
    assert.ok(res.ok, `push: ${res.status} ${await res.text()}`);
  };
  for (let i = 0; i < 4; i++) await push('1', start + i * 5e3, 8e8, 2e8);
  for (let i = 4; i < 8; i++) await push('2', start + i * 5e3, 3e8, 7e8);
  await page.goto(`${server.url}/rules`);
  const insight = 'section.insight[data-insight="shop:1→2"]';
  await page.waitForSelector(insight, { timeout: 30000 });
  const title = await page.textContent(`${insight} h3`);
  assert.match(title, /job="shop"/);
  assert.match(title, /version 1 → 2/);
  const rows = await page.$$eval(`${insight} tr.insight-function`, (tr) => tr.map((r) => [r.dataset.function, r.querySelector('.change').textContent]));
  assert.deepEqual(rows, [['encode', '+50.0 pp'], ['parse', '-50.0 pp']]);
  assert.equal(await page.textContent(`${insight} tr[data-function="encode"] td:nth-child(2)`), '20.0%');
  assert.equal(await page.textContent(`${insight} tr[data-function="encode"] td:nth-child(3)`), '70.0%');
  await shot('insights');
  // The link opens the compare view of the two windows: A version 1, B version 2.
  await page.click(`${insight} a.compare-link`);
  await page.waitForSelector('nav a[data-page="compare"].active');
  const params = new URL(page.url()).searchParams;
  assert.equal(params.get('a'), `${CPU}{job="shop",version="1"}`);
  assert.equal(params.get('b'), `${CPU}{job="shop",version="2"}`);
  assert.equal(Number(params.get('bfrom')), start + 20e3 - 1);
  assert.equal(Number(params.get('bto')), start + 30e3 - 1);
  await drawnIcicle();
  await shot('insight-compare');
});

test('a bad query shows its error at its place', async () => {
  await page.goto(explorerUrl({ query: `${CPU}{job="go"}` }));
  await page.waitForSelector('textarea.query-input');
  await page.fill('textarea.query-input', `${CPU}{job="go"`);
  await page.press('textarea.query-input', 'Enter');
  await page.waitForSelector('.query-error:not([hidden]) pre');
  const message = await page.textContent('.query-error pre');
  assert.match(message, /line 1, column \d+/);
  assert.match(message, /\^/);
  await page.waitForSelector('.query-mirror mark.error-mark');
  await page.waitForSelector('.state.error');
  await shot('bad-query');
});

test('no data says so and suggests what to change', async () => {
  await page.goto(explorerUrl({ query: `${CPU}{job="no-such-job"}` }));
  await page.waitForSelector('.graph-panel .state.empty');
  assert.match(await page.textContent('.graph-panel .state.empty'), /No series match.*longer range/s);
  await page.waitForSelector('.profile-panel .state.empty');
  await shot('empty');
});

test('label completion offers names and values from the API', async () => {
  await page.goto(explorerUrl({ query: CPU }));
  await page.waitForSelector('textarea.query-input');
  await page.click('textarea.query-input');
  await page.keyboard.press('End');
  await page.keyboard.type('{');
  await page.waitForSelector('.completions:not([hidden]) li');
  const names = await page.$$eval('.completions li code', (c) => c.map((x) => x.textContent));
  assert.ok(names.includes('job') && names.includes('instance'), `names: ${names}`);
  await page.keyboard.type('jo');
  await page.waitForFunction(() => document.querySelector('.completions:not([hidden]) li code')?.textContent === 'job');
  await page.keyboard.press('Enter'); // job="
  await page.waitForFunction(() => [...document.querySelectorAll('.completions:not([hidden]) li code')].some((c) => c.textContent === 'go'));
  await page.keyboard.type('g');
  await page.waitForFunction(() => document.querySelector('.completions:not([hidden]) li code')?.textContent === 'go');
  await page.keyboard.press('Enter');
  assert.equal(await page.inputValue('textarea.query-input'), `${CPU}{job="go"`);
});

test('exemplars mark the largest spans on the graph, and a click opens that span\'s profile', async () => {
  // One profile of three spans (span and trace ids as pprof labels), a minute after T.
  const t = T + 60e3;
  const spans = [
    { span_id: '00000000000000a1', trace_id: '000000000000000000000000000000f1', nanos: 30e6 },
    { span_id: '00000000000000a2', trace_id: '000000000000000000000000000000f2', nanos: 50e6 },
    { span_id: '00000000000000a3', trace_id: '000000000000000000000000000000f3', nanos: 20e6 },
  ];
  const res = await fetch(`${server.url}/api/v1/write?__name__=process_cpu&job=spans`, { method: 'POST', body: spanPprof(t, spans) });
  assert.equal(res.status, 200, await res.text());
  await page.goto(explorerUrl({ query: `${CPU}{job="spans"}`, view: 'icicle' }));
  await page.waitForSelector('.graph-svg path.exemplar');
  const marks = await page.$$eval('.graph-svg path.exemplar', (els) => els.map((e) => {
    const r = e.getBoundingClientRect();
    return { x: r.x + r.width / 2, y: r.y + r.height / 2 };
  }));
  assert.equal(marks.length, 3);
  assert.match(await page.textContent('.legend'), /3 largest spans/);
  // The highest diamond is the largest span.
  const top = marks.reduce((a, b) => (b.y < a.y ? b : a));
  await page.mouse.move(top.x, top.y);
  await page.waitForSelector('.graph-tip:not([hidden])');
  assert.match(await page.textContent('.graph-tip'), /span_id 00000000000000a2/);
  assert.match(await page.textContent('.graph-tip'), new RegExp(formatValue(50e6, 'nanoseconds').replace('.', '\\.')));
  await page.mouse.click(top.x, top.y);
  await page.waitForFunction(() => document.querySelector('.profile-query')?.textContent.includes('span_id="00000000000000a2"'));
  const url = new URL(page.url()).searchParams;
  assert.equal(url.get('time'), String(t));
  assert.equal(JSON.parse(url.get('labels')).span_id, '00000000000000a2');
  await drawnIcicle();
  assert.equal(await downloadTotal(), 50e6, 'the span\'s samples only');
  // The server's --web-trace-url-template links the span's profile to its trace.
  const link = await page.waitForSelector('a.trace-link');
  assert.equal(await link.getAttribute('href'), 'http://tracing.example/trace/000000000000000000000000000000f2?span=00000000000000a2');
  await shot('explorer-exemplar');
  // A trace selected in the query is linked too.
  await page.goto(explorerUrl({ query: `${CPU}{job="spans", trace_id="000000000000000000000000000000f1"}`, view: 'icicle' }));
  await until(async () => (await page.getAttribute('a.trace-link', 'href').catch(() => null)) === 'http://tracing.example/trace/000000000000000000000000000000f1?span=', 15000, 'the trace link of the query\'s trace_id');
});

test('no errors in the page', () => {
  assert.deepEqual(pageErrors, []);
});
