// Time ranges: relative (last 15m … 7d, kept as `now-1h` in the URL) or absolute (ms).

import { h } from './dom.js';
import { formatTime } from './units.js';

export const PRESETS = [['15m', 15 * 60e3], ['1h', 3600e3], ['6h', 6 * 3600e3], ['24h', 86400e3], ['7d', 7 * 86400e3]];

/** Milliseconds of a `now-1h` / `now` / epoch-ms string, at `now`. */
export function resolve(s, now = Date.now()) {
  if (!s || s === 'now') return now;
  const rel = /^now-(\d+)(m|h|d)$/.exec(s);
  if (rel) return now - Number(rel[1]) * { m: 60e3, h: 3600e3, d: 86400e3 }[rel[2]];
  const n = Number(s);
  return Number.isFinite(n) ? n : now;
}

/** `{start, end}` in ms of a `{from, to}` pair. */
export function window({ from, to }, now = Date.now()) {
  const start = resolve(from, now);
  const end = resolve(to, now);
  return start <= end ? { start, end } : { start: end, end: start };
}

/** A step giving about 200 points, at least 10 s (the default scrape interval). */
export function stepFor(start, end) {
  const nice = [10e3, 15e3, 30e3, 60e3, 120e3, 300e3, 600e3, 900e3, 1800e3, 3600e3, 3 * 3600e3, 6 * 3600e3, 12 * 3600e3, 86400e3];
  const want = (end - start) / 200;
  return nice.find((s) => s >= want) || Math.ceil(want / 86400e3) * 86400e3;
}

/**
 * The graph's window for `step`: for steps of whole 5 minutes, `[start, end]` widened to
 * multiples of the step (as Grafana aligns its queries), so that every step holds whole
 * windows of the store's summaries and a week reads a point an hour per series instead of every
 * profile; shorter steps keep the window as it is.
 */
export function alignToStep(start, end, step) {
  if (step % 300e3 !== 0) return { start, end };
  return { start: Math.floor(start / step) * step, end: Math.ceil(end / step) * step };
}

/**
 * The window a range shows: its graph's, [`alignToStep`] of the range at its step; the merged
 * profile of the whole range is of the same window, so it is the merge of what the graph
 * shows, and reads the store's summaries too.
 */
export function graphWindow(range, now = Date.now()) {
  const w = window(range, now);
  return alignToStep(w.start, w.end, stepFor(w.start, w.end));
}

function toLocalInput(ms) {
  const d = new Date(ms - new Date(ms).getTimezoneOffset() * 60e3);
  return d.toISOString().slice(0, 19);
}

/** Words for a range: "last 1h" or two dates. */
export function describeRange({ from, to }) {
  const p = PRESETS.find(([name]) => from === `now-${name}`);
  if (p && (!to || to === 'now')) return `the last ${p[0]}`;
  const w = window({ from, to });
  return `${formatTime(w.start)} – ${formatTime(w.end)}`;
}

/**
 * The range picker: preset buttons and two datetime fields. `onChange({from, to})` fires on
 * every choice.
 */
export function rangePicker(range, onChange) {
  const w = window(range);
  const fromInput = h('input', { type: 'datetime-local', step: 1, value: toLocalInput(w.start), 'aria-label': 'from', class: 'abs-from' });
  const toInput = h('input', { type: 'datetime-local', step: 1, value: toLocalInput(w.end), 'aria-label': 'to', class: 'abs-to' });
  const apply = () => {
    const f = new Date(fromInput.value).getTime();
    const t = new Date(toInput.value).getTime();
    if (Number.isFinite(f) && Number.isFinite(t)) onChange({ from: String(Math.min(f, t)), to: String(Math.max(f, t)) });
  };
  return h('div', { class: 'range-picker' },
    h('span', { class: 'muted' }, 'Last'),
    PRESETS.map(([name]) => h('button', {
      type: 'button',
      class: range.from === `now-${name}` && (!range.to || range.to === 'now') ? 'preset active' : 'preset',
      dataset: { range: name },
      onclick: () => onChange({ from: `now-${name}`, to: 'now' }),
    }, name)),
    h('span', { class: 'abs' }, fromInput, '→', toInput,
      h('button', { type: 'button', class: 'apply-abs', onclick: apply }, 'Apply')));
}
