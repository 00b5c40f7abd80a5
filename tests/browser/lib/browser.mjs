// Debian's Chromium, headless, driven by playwright-core.

import { chromium } from 'playwright-core';
import { existsSync } from 'node:fs';

/** Launches Chromium (`CHROMIUM` or /usr/bin/chromium), with extra command-line `args`. */
export async function launch(args = []) {
  const executablePath = process.env.CHROMIUM || ['/usr/bin/chromium', '/usr/bin/chromium-browser'].find(existsSync);
  if (!executablePath) throw new Error('no Chromium found: apt-get install chromium, or set CHROMIUM');
  return chromium.launch({ executablePath, headless: true, args: ['--no-sandbox', '--disable-dev-shm-usage', ...args] });
}

/**
 * The page the UI tests drive: 1400×1000, downloads accepted, 20 s per step; the page's
 * uncaught errors are pushed to `errors` (a test asserts there are none).
 */
export async function openPage(browser, errors) {
  const page = await browser.newPage({ viewport: { width: 1400, height: 1000 }, acceptDownloads: true });
  page.on('pageerror', (e) => errors.push(e.message));
  page.setDefaultTimeout(20000);
  return page;
}

/**
 * What the icicle canvas shows: painted (non-white) pixels, distinct colours, and counts of
 * reddish, greenish and dimmed pixels. Read in the page from the canvas itself.
 */
export function canvasStats(page, selector = 'canvas.icicle') {
  return page.$eval(selector, (c) => {
    const ctx = c.getContext('2d');
    const { data } = ctx.getImageData(0, 0, c.width, c.height);
    let painted = 0;
    let red = 0;
    let green = 0;
    let dimmed = 0;
    const colours = new Set();
    for (let i = 0; i < data.length; i += 16) { // every 4th pixel is plenty
      const r = data[i];
      const g = data[i + 1];
      const b = data[i + 2];
      if (r > 250 && g > 250 && b > 250) continue;
      painted++;
      colours.add((r << 16) | (g << 8) | b);
      if (r > 180 && g < 120 && b < 120) red++;
      if (g > 130 && r < 120 && b < 130) green++;
      if (r === 228 && g === 226 && b === 223) dimmed++;
    }
    return { painted, total: data.length / 16, colours: colours.size, red, green, dimmed, width: c.width, height: c.height };
  });
}
