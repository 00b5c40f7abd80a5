// The state of every view lives in the URL's query string, so a link shows exactly what was seen.

import { window as rangeWindow } from './timerange.js';

/** The current query parameters as a plain object. */
export function readState() {
  return Object.fromEntries(new URLSearchParams(location.search));
}

/**
 * Merges `patch` into the URL (empty values removed). `push` adds a history entry (a new
 * query, a new selection); otherwise the entry is replaced (typing, zooming).
 */
export function writeState(patch, { push = false } = {}) {
  const q = new URLSearchParams(location.search);
  for (const [k, v] of Object.entries(patch)) {
    if (v === undefined || v === null || v === '') q.delete(k);
    else q.set(k, String(v));
  }
  const s = q.toString();
  const next = `${location.pathname}${s ? `?${s}` : ''}`;
  if (next === `${location.pathname}${location.search}`) return;
  if (push) history.pushState(null, '', next);
  else history.replaceState(null, '', next);
}

/**
 * The current URL with relative ranges (`now-1h`) made absolute: a link that shows exactly
 * this data later. `pairs` are the [from, to] parameter names, e.g. [['from', 'to']].
 */
export function permalink(pairs) {
  const q = new URLSearchParams(location.search);
  const now = Date.now();
  for (const [f, t] of pairs) {
    const w = rangeWindow({ from: q.get(f) || 'now-1h', to: q.get(t) || 'now' }, now);
    q.set(f, String(w.start));
    q.set(t, String(w.end));
  }
  return `${location.pathname}?${q}`;
}
