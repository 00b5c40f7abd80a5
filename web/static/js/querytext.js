// Building queries from the explorer's parts: which query draws the graph, which gives the
// profile, matchers for a clicked series, a range and offset for compare. Where a query's parts
// are comes from the server's parser (`parseQuery` in api.js): the grammar has one owner.

/**
 * The kind of a query from its structure (`parseQuery`'s answer): 'profile' (merge, diff),
 * 'series' (an aggregation, arithmetic, a number) or 'set' (a selector, with offsets and stack
 * filters).
 */
export function queryKind(parsed) {
  const kinds = { profile: 'profile', series_set: 'series', scalar: 'series', profile_set: 'set' };
  return kinds[parsed.value_type] || 'set';
}

/** The profile type the query's first selector selects, or null. */
export function typeOf(parsed) {
  return (parsed && parsed.selectors[0] && parsed.selectors[0].profile_type) || null;
}

/** The query of the metrics graph: the profile set, summed by labels when asked. */
export function graphQuery(q, by) {
  const labels = (by || '').split(',').map((s) => s.trim()).filter(Boolean);
  return labels.length ? `sum by (${labels.join(', ')}) (${q})` : q;
}

const quote = (v) => `"${String(v).replace(/["\\]/g, '\\$&')}"`;

/**
 * `q` with its first selector changed: equality matchers for `labels` added (those it has
 * already and a `__name__` its type names are left out), and `range` and `offset` (querylang
 * durations) put after its matchers. The places come from the server's parse (`parsed`), whose
 * offsets count characters.
 */
export function editSelector(q, parsed, { labels = {}, range = '', offset = '' } = {}) {
  const sel = parsed.selectors[0];
  if (!sel) return q;
  const chars = Array.from(q);
  const text = (a, b) => chars.slice(a, b).join('');
  const has = new Set(sel.matchers.filter((m) => m.op === '=').map((m) => `${m.name}=${m.value}`));
  const extra = Object.entries(labels)
    .filter(([k, v]) => !(k === '__name__' && sel.profile_type) && !has.has(`${k}=${v}`))
    .map(([k, v]) => `${k}=${quote(v)}`);
  let body = text(sel.start, sel.body_end);
  if (extra.length && sel.braces) {
    // Inside the braces, without the `}`: a comma after what is there already.
    const open = text(sel.start, sel.braces.end - 1).trimEnd();
    const sep = open.endsWith('{') || open.endsWith(',') ? '' : ', ';
    body = `${open}${open.endsWith(',') ? ' ' : sep}${extra.join(', ')}}`;
  } else if (extra.length) body = `${body}{${extra.join(', ')}}`;
  return `${text(0, sel.start)}${body}${range ? `[${range}]` : ''}${text(sel.body_end, sel.end)}${offset ? ` offset ${offset}` : ''}${text(sel.end)}`;
}

/** `q` with equality matchers for `labels` added to its selector. */
export function withMatchers(q, parsed, labels) {
  return editSelector(q, parsed, { labels });
}

/** A duration in querylang's units: 1h30m, 45s, 250ms. */
export function duration(ms) {
  let rest = Math.max(0, Math.round(ms));
  if (rest === 0) return '0s';
  let out = '';
  for (const [size, unit] of [[86400e3, 'd'], [3600e3, 'h'], [60e3, 'm'], [1e3, 's'], [1, 'ms']]) {
    const n = Math.floor(rest / size);
    if (n) {
      out += `${n}${unit}`;
      rest -= n * size;
    }
  }
  return out;
}

/**
 * `merge(q[range] offset o)` covering `[start, end]` when evaluated at time `at` (for compare,
 * where both sides are evaluated at one time); `labels` are added as matchers.
 */
export function mergeWindow(q, parsed, start, end, at, labels = {}) {
  const off = at - end;
  return `merge(${editSelector(q, parsed, { labels, range: duration(end - start), offset: off > 0 ? duration(off) : '' })})`;
}

/** Whether the query's selector has its own range (`x{…}[5m]`). */
export function hasRange(parsed) {
  return !!(parsed.selectors[0] && parsed.selectors[0].range);
}

/**
 * The URL state for a click on the metrics graph's point at step `t` (ms) of the series
 * `labels`, in a graph of steps of `stepMs`. For `…:delta` types (`delta`) a point sums the
 * profiles in `(t − step, t]`: the click selects that window (`pfrom`, `pto`) of that series,
 * whose merge totals the point's value. For snapshots, and for queries with their own `[range]`,
 * the query at time `t` is already what the point shows: the click selects `time`.
 */
export function pointSelection(parsed, labels, t, stepMs, delta) {
  const l = JSON.stringify(labels);
  if (delta && !hasRange(parsed)) return { pfrom: String(t - stepMs), pto: String(t), labels: l, time: '' };
  return { time: String(t), labels: l, pfrom: '', pto: '' };
}

/**
 * A compare side as an operand of `diff` evaluated at time `at`: the merge of the window
 * `(start, end]` (`{start, end}`), or of the latest profile of each series at `time` (`{time}`,
 * how snapshot types are shown at a point).
 */
export function sideQuery(q, parsed, { start, end, time }, at) {
  if (time === undefined) return mergeWindow(q, parsed, start, end, at);
  const off = at - time;
  return `merge(${editSelector(q, parsed, { offset: off > 0 ? duration(off) : '' })})`;
}

/**
 * The query of a selected window `(fromMs, toMs]` of one series (`labels`) of `q`, evaluated at
 * `toMs`: `merge(q{labels}[range])`.
 */
export function windowQuery(q, parsed, labels, fromMs, toMs) {
  return mergeWindow(q, parsed, fromMs, toMs, toMs, labels);
}

/** A stack filter keeping the samples with a frame named exactly `name` (`|~`, regex-escaped). */
export function exactFrameFilter(name) {
  const re = name.replace(/[\\.+*?()|[\]{}^$#&\-~]/g, '\\$&');
  return re.includes('`') ? `|~ "${re.replace(/["\\]/g, '\\$&')}"` : `|~ \`${re}\``;
}

/**
 * `q` keeping only the samples whose stacks hold every frame of `names` (a zoom path): what a
 * zoomed icicle shows, unless those functions also meet elsewhere.
 */
export function withFrameFilters(q, names) {
  const unique = [...new Set(names)];
  return unique.length ? `${q} ${unique.map(exactFrameFilter).join(' ')}` : q;
}
