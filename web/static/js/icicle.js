// The icicle graph on a canvas. Only what can be seen is drawn: a subtree narrower than half a
// pixel, beside the view or below the visible rows is skipped whole (pre-order `end` jumps), so
// a frame costs about the number of visible frames, whatever the size of the tree.

import { colorFor, packageOf, diffColor, DIMMED, ROOT } from './colors.js';

export const ROW = 18;
const MIN_WIDTH = 0.5; // px: narrower subtrees are not drawn
const FONT = '11px ui-monospace, SFMono-Regular, Menlo, Consolas, monospace';
const ZOOM_MS = 180;
const DIFF_STEPS = 40; // diff colours are quantized so no string is built per frame
const SMALL = '#cfcac4'; // runs of frames too narrow to draw one by one

/**
 * An icicle graph in `container`. `options.tooltip(i)` returns the tooltip's content for node
 * `i`; `options.onFocus(i)` is told when the zoomed node changes. With `options.flip` the graph
 * is drawn upside down, the root at the bottom (a sandwich's callers).
 */
export class Icicle {
  constructor(container, options = {}) {
    this.options = options;
    this.scroller = document.createElement('div');
    this.scroller.className = 'icicle-scroll';
    this.canvas = document.createElement('canvas');
    this.canvas.className = 'icicle';
    this.canvas.setAttribute('role', 'img');
    this.canvas.setAttribute('aria-label', 'icicle graph: click a frame to zoom, Escape zooms out');
    this.canvas.tabIndex = 0;
    this.spacer = document.createElement('div');
    this.tooltip = document.createElement('div');
    this.tooltip.className = 'tooltip';
    this.tooltip.hidden = true;
    this.scroller.append(this.canvas, this.spacer);
    container.append(this.scroller, this.tooltip);
    this.ctx = this.canvas.getContext('2d', { alpha: false });
    this.tree = null;
    this.focusNode = 0;
    this.hover = -1;
    this.flags = null;
    this.view = [0, 1];
    this.frameTimes = [];
    this.nameColor = [];
    this.flip = Boolean(options.flip);
    this.listen();
    this.resizeObserver = new ResizeObserver(() => this.resize());
    this.resizeObserver.observe(this.scroller);
  }

  /**
   * Shows `tree`. `diffMode` ('absolute' or 'relative') lays out and colours a diff; `focus`
   * is the node to zoom to.
   */
  setTree(tree, { diffMode = 'absolute', focus = 0 } = {}) {
    this.tree = tree;
    this.diffMode = diffMode;
    this.flags = null;
    this.hover = -1;
    this.nameColor = new Array(tree.strings.length);
    this.layout();
    this.focusNode = focus;
    this.view = [this.x[focus], this.x[focus] + this.w[focus]];
    this.resize();
  }

  /** The row (from the top) where frames of depth `d` are drawn. */
  rowOf(d) {
    return this.flip ? this.tree.maxDepth - d : d;
  }

  /** Per-node widths (`w`) and left edges (`x`) in value units. */
  layout() {
    const t = this.tree;
    const w = new Float64Array(t.n);
    if (t.isDiff) {
      // Both sides count, so a frame that vanished in B still shows.
      const rel = this.diffMode === 'relative';
      const a = rel ? 1 / (t.meta.base_total || 1) : 1;
      const b = rel ? 1 / (t.meta.total || 1) : 1;
      for (let i = 0; i < t.n; i++) w[i] = Math.abs(t.base[i]) * a + Math.abs(t.value[i]) * b;
    } else {
      for (let i = 0; i < t.n; i++) w[i] = Math.abs(t.value[i]);
    }
    const x = new Float64Array(t.n);
    const next = new Float64Array(t.n);
    for (let i = 1; i < t.n; i++) {
      const p = t.parent[i];
      x[i] = next[p] || x[p];
      next[p] = x[i] + w[i];
    }
    this.w = w;
    this.x = x;
    this.diffIndex = t.isDiff ? this.diffIndices() : null;
  }

  /** Per-node index into the quantized diff palette. */
  diffIndices() {
    const t = this.tree;
    const rel = this.diffMode === 'relative';
    const a = rel ? 1 / (t.meta.base_total || 1) : 1;
    const b = rel ? 1 / (t.meta.total || 1) : 1;
    const out = new Uint8Array(t.n);
    for (let i = 0; i < t.n; i++) {
      const before = t.base[i] * a;
      const after = t.value[i] * b;
      const m = Math.max(Math.abs(before), Math.abs(after));
      const ratio = m === 0 ? 0 : (after - before) / m;
      out[i] = Math.round((ratio + 1) * (DIFF_STEPS / 2));
    }
    if (!this.diffPalette) {
      this.diffPalette = [];
      for (let k = 0; k <= DIFF_STEPS; k++) this.diffPalette.push(diffColor(k / (DIFF_STEPS / 2) - 1));
    }
    return out;
  }

  /** Search matches (per-node flags) to highlight, or null. */
  setSearch(flags) {
    this.flags = flags;
    this.draw();
  }

  /** Zooms to node `i` (animated unless `animate` is false). */
  focus(i, animate = true) {
    if (!this.tree) return;
    this.focusNode = i;
    const target = [this.x[i], this.x[i] + this.w[i]];
    if (this.options.onFocus) this.options.onFocus(i);
    const rowTop = this.rowOf(this.tree.depth[i]) * ROW;
    if (rowTop < this.scroller.scrollTop || rowTop > this.scroller.scrollTop + this.canvasHeight - ROW) {
      this.scroller.scrollTop = Math.max(0, rowTop - ROW * 2);
    }
    if (!animate) {
      this.view = target;
      this.draw();
      return;
    }
    this.animateTo(target);
  }

  animateTo(target) {
    const from = this.view.slice();
    const started = performance.now();
    cancelAnimationFrame(this.anim);
    const step = (now) => {
      const k = Math.min(1, (now - started) / ZOOM_MS);
      const e = 1 - (1 - k) ** 3;
      this.view = [from[0] + (target[0] - from[0]) * e, from[1] + (target[1] - from[1]) * e];
      this.draw();
      if (k < 1) this.anim = requestAnimationFrame(step);
    };
    this.anim = requestAnimationFrame(step);
  }

  resize() {
    if (!this.tree) return;
    const dpr = window.devicePixelRatio || 1;
    const width = this.scroller.clientWidth;
    const total = (this.tree.maxDepth + 1) * ROW;
    const maxHeight = Math.max(ROW * 8, Math.round(window.innerHeight * 0.7));
    const height = Math.min(total, maxHeight);
    this.canvasHeight = height;
    this.scroller.style.height = `${height}px`;
    this.canvas.style.width = `${width}px`;
    this.canvas.style.height = `${height}px`;
    this.canvas.width = Math.round(width * dpr);
    this.canvas.height = Math.round(height * dpr);
    this.spacer.style.height = `${total - height}px`;
    this.width = width;
    this.dpr = dpr;
    // Upside down, the root is at the bottom: start there.
    if (this.flip && !this.scrolled) {
      this.scrolled = true;
      this.scroller.scrollTop = total - height;
    }
    this.draw();
  }

  colorOf(i) {
    const t = this.tree;
    if (i === 0) return ROOT;
    if (this.flags && !this.flags[i]) return DIMMED;
    if (this.diffIndex) return this.diffPalette[this.diffIndex[i]];
    const id = t.name[i];
    let c = this.nameColor[id];
    if (c === undefined) {
      c = colorFor(t.binary[i] ? t.strings[t.binary[i]] : packageOf(t.strings[id]));
      this.nameColor[id] = c;
    }
    return c;
  }

  /** Draws the visible frames; returns the number drawn. */
  draw() {
    const t = this.tree;
    if (!t || !this.width) return 0;
    const started = performance.now();
    const { ctx, width: W, canvasHeight: H, x, w } = this;
    const { depth, end } = t;
    ctx.setTransform(this.dpr, 0, 0, this.dpr, 0, 0);
    ctx.fillStyle = '#fff';
    ctx.fillRect(0, 0, W, H);
    ctx.font = FONT;
    ctx.textBaseline = 'middle';
    this.lastTextColor = '';
    if (!this.charWidth) this.charWidth = ctx.measureText('abcdefghijklmnopqrstuvwxyz').width / 26;
    const [v0, v1] = this.view;
    const scale = W / (v1 - v0 || 1);
    const yOff = this.scroller.scrollTop;
    // Depths on screen (rows counted from the top, turned into depths when upside down).
    const topRow = Math.floor(yOff / ROW);
    const bottomRow = Math.floor((yOff + H) / ROW);
    const minD = this.flip ? Math.max(0, t.maxDepth - bottomRow) : topRow;
    const maxD = this.flip ? t.maxDepth - topRow : bottomRow;
    let drawn = 0;
    let i = 0;
    const n = t.n;
    // Labels are drawn after all rectangles, in one colour pass each: fewer state changes.
    const labels = this.labelQueue || (this.labelQueue = []);
    labels.length = 0;
    let hovered = null;
    let lastColor = '';
    // Siblings too narrow to draw one by one are drawn together as one grey run, so a frame
    // with thousands of tiny children does not look empty below.
    const rows = maxD + 2;
    if (!this.runL || this.runL.length < rows) {
      this.runL = new Float64Array(rows);
      this.runR = new Float64Array(rows);
    }
    const { runL, runR } = this;
    const runN = this.runN && this.runN.length >= rows ? this.runN : (this.runN = new Float64Array(rows));
    const runW = this.runW && this.runW.length >= rows ? this.runW : (this.runW = new Float64Array(rows));
    runR.fill(-1e9, 0, rows);
    const runs = [];
    const flush = (d) => {
      if (runR[d] - runL[d] >= 1) {
        ctx.fillStyle = SMALL;
        lastColor = SMALL;
        ctx.fillRect(runL[d], this.rowOf(d) * ROW - yOff, runR[d] - runL[d], ROW - 1);
        runs.push({ d, left: runL[d], right: runR[d], n: runN[d], w: runW[d] });
      }
      runR[d] = -1e9;
    };
    while (i < n) {
      const d = depth[i];
      const pw = w[i] * scale;
      if (d > maxD) {
        i = end[i];
        continue;
      }
      const px = (x[i] - v0) * scale;
      if (px >= W || px + pw <= 0) {
        i = end[i];
        continue;
      }
      if (pw < MIN_WIDTH) {
        if (d >= minD && pw > 0) {
          if (px <= runR[d] + 0.5) {
            if (px + pw > runR[d]) runR[d] = px + pw;
          } else {
            flush(d);
            runL[d] = px;
            runR[d] = px + pw;
            runN[d] = 0;
            runW[d] = 0;
          }
          runN[d]++;
          runW[d] += w[i];
        }
        i = end[i];
        continue;
      }
      if (d >= minD) {
        const y = this.rowOf(d) * ROW - yOff;
        const left = px > -1 ? px : -1;
        const right = px + pw < W + 1 ? px + pw : W + 1;
        const color = this.colorOf(i);
        if (color !== lastColor) {
          ctx.fillStyle = color;
          lastColor = color;
        }
        const width = right - left - (pw > 3 ? 1 : 0);
        ctx.fillRect(left, y, width > 0.5 ? width : 0.5, ROW - 1);
        if (right - left > 28) labels.push(i, left, right - left, y);
        if (i === this.hover) hovered = [left, right, y];
        drawn++;
      }
      i++;
    }
    for (let d = minD; d <= maxD; d++) flush(d);
    this.runs = runs;
    for (let k = 0; k < labels.length; k += 4) this.label(labels[k], labels[k + 1], labels[k + 2], labels[k + 3]);
    if (hovered) {
      ctx.strokeStyle = '#222';
      ctx.lineWidth = 1.5;
      ctx.strokeRect(hovered[0] + 0.75, hovered[2] + 0.75, Math.max(hovered[1] - hovered[0] - 2.5, 0), ROW - 2.5);
    }
    this.drawn = drawn;
    this.frameTimes.push(performance.now() - started);
    if (this.frameTimes.length > 600) this.frameTimes.splice(0, 300);
    return drawn;
  }

  label(i, left, width, y) {
    const { ctx, tree: t } = this;
    const max = Math.floor((width - 6) / this.charWidth);
    if (max < 2) return;
    const name = i === 0 ? 'root' : t.strings[t.name[i]];
    const text = name.length <= max ? name : `${name.slice(0, max - 1)}…`;
    const color = this.flags && !this.flags[i] && i !== 0 ? '#8a8783' : '#1d1b19';
    if (color !== this.lastTextColor) {
      ctx.fillStyle = color;
      this.lastTextColor = color;
    }
    ctx.fillText(text, left + 3, y + ROW / 2);
  }

  /** The node under canvas point (cx, cy), or -1. */
  nodeAt(cx, cy) {
    const t = this.tree;
    if (!t) return -1;
    const row = this.rowOf(Math.floor((cy + this.scroller.scrollTop) / ROW));
    const [v0, v1] = this.view;
    const scale = this.width / (v1 - v0 || 1);
    const v = v0 + cx / scale;
    if (row === 0) return 0;
    let cur = 0;
    while (t.depth[cur] < row) {
      let found = -1;
      for (let c = cur + 1; c < t.end[cur]; c = t.end[c]) {
        if (v >= this.x[c] && v < this.x[c] + this.w[c]) {
          found = c;
          break;
        }
      }
      if (found < 0) return -1;
      cur = found;
    }
    return this.w[cur] * scale >= MIN_WIDTH ? cur : -1;
  }

  listen() {
    const c = this.canvas;
    let drag = null;
    c.addEventListener('mousedown', (e) => {
      drag = { x: e.clientX, view: this.view.slice(), moved: false };
    });
    this.onWindowMove = (e) => {
      if (!drag) return;
      const dx = e.clientX - drag.x;
      if (Math.abs(dx) > 3) drag.moved = true;
      if (drag.moved) {
        const span = drag.view[1] - drag.view[0];
        const shift = -dx * span / this.width;
        this.view = this.clamp([drag.view[0] + shift, drag.view[1] + shift]);
        this.draw();
      }
    };
    this.onWindowUp = (e) => {
      if (!drag) return;
      const moved = drag.moved;
      drag = null;
      if (moved || e.target !== c) return;
      const r = c.getBoundingClientRect();
      const i = this.nodeAt(e.clientX - r.left, e.clientY - r.top);
      if (i >= 0) this.focus(i);
    };
    window.addEventListener('mousemove', this.onWindowMove);
    window.addEventListener('mouseup', this.onWindowUp);
    c.addEventListener('mousemove', (e) => {
      const r = c.getBoundingClientRect();
      const i = this.nodeAt(e.clientX - r.left, e.clientY - r.top);
      if (i !== this.hover) {
        this.hover = i;
        this.draw();
      }
      this.showTooltip(i, e.clientX, e.clientY);
    });
    c.addEventListener('mouseleave', () => {
      this.hover = -1;
      this.tooltip.hidden = true;
      this.draw();
    });
    c.addEventListener('wheel', (e) => {
      if (!this.tree) return;
      const span = this.view[1] - this.view[0];
      if (e.ctrlKey || e.metaKey) {
        e.preventDefault();
        const r = c.getBoundingClientRect();
        const at = this.view[0] + ((e.clientX - r.left) / this.width) * span;
        const k = Math.exp(e.deltaY * 0.002);
        const next = Math.max(span * k, this.w[0] * 1e-9);
        this.view = this.clamp([at - (at - this.view[0]) * (next / span), at + (this.view[1] - at) * (next / span)]);
        this.draw();
      } else if (e.shiftKey || Math.abs(e.deltaX) > Math.abs(e.deltaY)) {
        e.preventDefault();
        const d = (e.shiftKey ? e.deltaY : e.deltaX) * span / this.width;
        this.view = this.clamp([this.view[0] + d, this.view[1] + d]);
        this.draw();
      }
    }, { passive: false });
    this.scroller.addEventListener('scroll', () => this.draw());
    c.addEventListener('keydown', (e) => {
      if (e.key === 'Escape' && this.tree && this.focusNode > 0) {
        e.preventDefault();
        this.focus(this.tree.parent[this.focusNode]);
      }
    });
  }

  /** Keeps a view inside the root's extent. */
  clamp([a, b]) {
    const lo = this.x[0];
    const hi = this.x[0] + this.w[0];
    const span = Math.min(b - a, hi - lo);
    const start = Math.min(Math.max(a, lo), hi - span);
    return [start, start + span];
  }

  /** The grey block of narrow frames under canvas point (cx, cy), or null. */
  runAt(cx, cy) {
    const row = this.rowOf(Math.floor((cy + this.scroller.scrollTop) / ROW));
    return (this.runs || []).find((r) => r.d === row && cx >= r.left && cx < r.right) || null;
  }

  showTooltip(i, clientX, clientY) {
    let content = null;
    if (i >= 0 && this.options.tooltip) content = this.options.tooltip(i);
    else if (i < 0) {
      const r = this.canvas.getBoundingClientRect();
      const run = this.runAt(clientX - r.left, clientY - r.top);
      if (run) {
        const share = (100 * run.w) / (this.w[0] || 1);
        content = document.createElement('div');
        content.textContent = `${run.n.toLocaleString()} frames too narrow to show one by one (${share.toFixed(share >= 1 ? 1 : 3)}% of all): zoom in with ctrl+wheel, or click the frame above.`;
      }
    }
    if (!content) {
      this.tooltip.hidden = true;
      return;
    }
    this.tooltip.replaceChildren(content);
    this.tooltip.hidden = false;
    const pad = 14;
    const tw = this.tooltip.offsetWidth;
    const th = this.tooltip.offsetHeight;
    const left = clientX + pad + tw > window.innerWidth ? clientX - pad - tw : clientX + pad;
    const top = clientY + pad + th > window.innerHeight ? clientY - pad - th : clientY + pad;
    this.tooltip.style.left = `${Math.max(0, left)}px`;
    this.tooltip.style.top = `${Math.max(0, top)}px`;
  }

  /** Rectangles currently visible, for the SVG export: `{i, x, y, width}` in CSS pixels. */
  visibleFrames() {
    const t = this.tree;
    const out = [];
    const [v0, v1] = this.view;
    const scale = this.width / (v1 - v0 || 1);
    let i = 0;
    while (i < t.n) {
      const pw = this.w[i] * scale;
      const px = (this.x[i] - v0) * scale;
      if (pw < MIN_WIDTH || px >= this.width || px + pw <= 0) {
        i = t.end[i];
        continue;
      }
      const left = Math.max(px, 0);
      out.push({ i, x: left, y: this.rowOf(t.depth[i]) * ROW, width: Math.min(px + pw, this.width) - left });
      i++;
    }
    return out;
  }

  destroy() {
    window.removeEventListener('mousemove', this.onWindowMove);
    window.removeEventListener('mouseup', this.onWindowUp);
    this.resizeObserver.disconnect();
    cancelAnimationFrame(this.anim);
  }
}
