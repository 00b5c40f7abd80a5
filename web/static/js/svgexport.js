// The icicle graph as it is on screen (zoom, hidden frames, search, colours) as an SVG file.

import { ROW } from './icicle.js';

const esc = (s) => s.replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' })[c]);

/** SVG text of what `icicle` shows now; `title(i)` gives each frame's hover text. */
export function icicleSVG(icicle, heading, title) {
  const frames = icicle.visibleFrames();
  const t = icicle.tree;
  const width = Math.round(icicle.width);
  const top = 24;
  const height = top + (t.maxDepth + 1) * ROW;
  const out = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="monospace" font-size="11">`,
    `<rect width="100%" height="100%" fill="#fff"/>`,
    `<text x="4" y="16" font-size="13">${esc(heading)}</text>`,
  ];
  const charWidth = 6.6;
  for (const f of frames) {
    const y = top + f.y;
    const name = f.i === 0 ? 'root' : t.nameOf(f.i);
    out.push(`<g><title>${esc(title(f.i))}</title><rect x="${f.x.toFixed(2)}" y="${y}" width="${Math.max(f.width - (f.width > 3 ? 1 : 0), 0.5).toFixed(2)}" height="${ROW - 1}" fill="${icicle.colorOf(f.i)}"/>`);
    const max = Math.floor((f.width - 6) / charWidth);
    if (max >= 2) {
      const text = name.length <= max ? name : `${name.slice(0, max - 1)}…`;
      out.push(`<text x="${(f.x + 3).toFixed(2)}" y="${y + 13}">${esc(text)}</text>`);
    }
    out.push('</g>');
  }
  out.push('</svg>\n');
  return out.join('');
}
