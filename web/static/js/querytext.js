// Building queries from the explorer's parts: which query draws the graph, which gives the
// profile, matchers for a clicked series, a range and offset for compare.

/** The kind of a typed query: 'profile' (merge, diff), 'series' (an aggregation) or 'set'. */
export function queryKind(q) {
  const s = q.trim();
  if (/^(merge|diff)\b/.test(s)) return 'profile';
  if (/^(sum|avg|min|max|count|topk)\b/.test(s)) return 'series';
  return 'set';
}

/** The query of the metrics graph: the profile set, summed by labels when asked. */
export function graphQuery(q, by) {
  const labels = (by || '').split(',').map((s) => s.trim()).filter(Boolean);
  return labels.length ? `sum by (${labels.join(', ')}) (${q})` : q;
}

/** Where the selector at the start of `q` ends (after its `}`, or after the type name). */
export function selectorEnd(q) {
  let i = 0;
  while (i < q.length && /\s/.test(q[i])) i++;
  while (i < q.length && /[\w:]/.test(q[i])) i++;
  let j = i;
  while (j < q.length && /\s/.test(q[j])) j++;
  if (q[j] !== '{') return i;
  let inString = null;
  for (let k = j + 1; k < q.length; k++) {
    const c = q[k];
    if (inString) {
      if (c === '\\') k++;
      else if (c === inString) inString = null;
    } else if (c === '"' || c === "'" || c === '`') inString = c;
    else if (c === '}') return k + 1;
  }
  return q.length;
}

const quote = (v) => `"${String(v).replace(/["\\]/g, '\\$&')}"`;

/** `q` with equality matchers for `labels` added to its selector. */
export function withMatchers(q, labels) {
  // A selector that starts with its profile type may not match `__name__` again.
  const typed = !q.trimStart().startsWith('{');
  const end = selectorEnd(q);
  const head = q.slice(0, end);
  const tail = q.slice(end);
  // A matcher the selector already has (`job="api"`, spaces aside) is not added again.
  const has = new Set((head.match(/[\w]+\s*=\s*"(?:[^"\\]|\\.)*"/g) || []).map((m) => m.replace(/\s*=\s*/, '=')));
  const extra = Object.entries(labels).filter(([k]) => !(typed && k === '__name__'))
    .map(([k, v]) => `${k}=${quote(v)}`).filter((m) => !has.has(m));
  if (!extra.length) return q;
  if (head.trimEnd().endsWith('}')) {
    const close = head.lastIndexOf('}');
    const inside = head.slice(head.indexOf('{') + 1, close).trim();
    return `${head.slice(0, head.indexOf('{') + 1)}${inside ? `${inside.replace(/,\s*$/, '')}, ` : ''}${extra.join(', ')}}${tail}`;
  }
  return `${head}{${extra.join(', ')}}${tail}`;
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
 * where both sides are evaluated at one time).
 */
export function mergeWindow(q, start, end, at) {
  const end0 = selectorEnd(q);
  const off = at - end;
  const ranged = `${q.slice(0, end0)}[${duration(end - start)}]${off > 0 ? ` offset ${duration(off)}` : ''}${q.slice(end0)}`;
  return `merge(${ranged})`;
}

/** Whether the selector at the start of `q` has its own range (`x{…}[5m]`). */
export function hasRange(q) {
  return /^\s*\[/.test(q.slice(selectorEnd(q)));
}

/**
 * The URL state for a click on the metrics graph's point at step `t` (ms) of the series
 * `labels`, in a graph of steps of `stepMs`. For `…:delta` types (`delta`) a point sums the
 * profiles in `(t − step, t]`: the click selects that window (`pfrom`, `pto`) of that series,
 * whose merge totals the point's value. For snapshots, and for queries with their own `[range]`,
 * the query at time `t` is already what the point shows: the click selects `time`.
 */
export function pointSelection(q, labels, t, stepMs, delta) {
  const l = JSON.stringify(labels);
  if (delta && !hasRange(q)) return { pfrom: String(t - stepMs), pto: String(t), labels: l, time: '' };
  return { time: String(t), labels: l, pfrom: '', pto: '' };
}

/**
 * A compare side as an operand of `diff` evaluated at time `at`: the merge of the window
 * `(start, end]` (`{start, end}`), or of the latest profile of each series at `time` (`{time}`,
 * how snapshot types are shown at a point).
 */
export function sideQuery(q, { start, end, time }, at) {
  if (time === undefined) return mergeWindow(q, start, end, at);
  const cut = selectorEnd(q);
  const off = at - time;
  return `merge(${q.slice(0, cut)}${off > 0 ? ` offset ${duration(off)}` : ''}${q.slice(cut)})`;
}

/**
 * The query of a selected window `(fromMs, toMs]` of one series (`labels`) of `q`, evaluated at
 * `toMs`: `merge(q{labels}[range])`.
 */
export function windowQuery(q, labels, fromMs, toMs) {
  return mergeWindow(withMatchers(q, labels), fromMs, toMs, toMs);
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
