// A partial answer in the UI: a server reading a shard that is down answers from the rest and
// says what is missing; the page shows it above the explorer, naming the shard.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { startServer, freePort, profileTimeMs, REPO } from '../lib/server.mjs';
import { launch } from '../lib/browser.mjs';

const CPU = 'process_cpu:cpu:nanoseconds:cpu:nanoseconds:delta';
const T = profileTimeMs('go/go-cpu.pb.gz');
let server;
let browser;
let shard;

before(async () => {
  shard = `http://127.0.0.1:${await freePort()}`;
  server = await startServer({ args: [`--query-store=${shard}`] });
  browser = await launch();
});

after(async () => {
  if (browser) await browser.close();
  if (server) await server.stop();
});

test('a shard that is down is named above the explorer, and the rest is drawn', async () => {
  const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  page.setDefaultTimeout(20000);
  const params = new URLSearchParams({ from: T - 300e3, to: T + 300e3, query: `${CPU}{job="go"}` });
  await page.goto(`${server.url}/?${params}`);
  await page.waitForSelector('#warnings:not([hidden]) li');
  const text = await page.textContent('#warnings');
  assert.match(text, /Partial answer/);
  assert.ok(text.includes(shard), text);
  // The server's own profiles are still drawn.
  await page.waitForSelector('.graph-svg circle.point');
  await page.waitForSelector('canvas.icicle');
  await page.screenshot({ path: join(REPO, 'tests/browser/out/partial-answer.png'), fullPage: true });
  await page.close();
});
