// The flame-graph tree in columns (typed arrays in pre-order), built from the API's nested JSON,
// and the operations on it that the views need: inverting, hiding frames, search, top table,
// folded text. Nothing recurses: stacks can be thousands of frames deep.

/**
 * Nodes are numbered in pre-order: node 0 is the root, a node's subtree is `[i, end[i])`, and
 * children follow their parent in order. Strings (names, files, binaries) are interned in
 * `strings`; 0 is the empty string.
 */
export class Tree {
  constructor(n, meta) {
    this.n = n;
    this.meta = meta; // {sample_type, unit, period_type, period_unit, period, total, base_total?}
    this.isDiff = meta.base_total !== undefined;
    this.strings = [''];
    this.name = new Int32Array(n);
    this.file = new Int32Array(n);
    this.binary = new Int32Array(n);
    this.line = new Int32Array(n);
    this.parent = new Int32Array(n);
    this.depth = new Int32Array(n);
    this.end = new Int32Array(n);
    this.value = new Float64Array(n);
    this.self = new Float64Array(n);
    this.base = this.isDiff ? new Float64Array(n) : null;
    this.baseSelf = this.isDiff ? new Float64Array(n) : null;
    this.maxDepth = 0;
    this.pruned = 0; // children left out by a quick build
  }

  /** The name of node `i`. */
  nameOf(i) {
    return this.strings[this.name[i]];
  }

  /** Node ids from the root down to `i`, both included. */
  path(i) {
    const out = [];
    for (let j = i; j >= 0; j = this.parent[j]) out.push(j);
    return out.reverse();
  }

  /** The child of `i` named `name`, or -1. */
  childNamed(i, name) {
    for (let c = i + 1; c < this.end[i]; c = this.end[c]) if (this.nameOf(c) === name) return c;
    return -1;
  }

  /** The node reached from the root by a list of names, as far as it goes. */
  find(names) {
    let i = 0;
    for (const name of names) {
      const c = this.childNamed(i, name);
      if (c < 0) break;
      i = c;
    }
    return i;
  }
}

class Interner {
  constructor(strings) {
    this.strings = strings;
    this.ids = new Map(strings.map((s, i) => [s, i]));
  }

  id(s) {
    if (s === undefined || s === null || s === '') return 0;
    let id = this.ids.get(s);
    if (id === undefined) {
      id = this.strings.length;
      this.strings.push(s);
      this.ids.set(s, id);
    }
    return id;
  }
}

/**
 * Builds a `Tree` from the API's flame-graph JSON (`data` of `/api/v1/query?format=json`).
 * With `minValue`, children smaller than that are left out (their parent keeps its total): a
 * quick tree for the first paint, where such frames would be narrower than a pixel anyway.
 */
export function fromJSON(data, { minValue = 0 } = {}) {
  const b = new JSONBuilder(data, minValue);
  while (!b.step(Infinity));
  return b.finish();
}

/**
 * `fromJSON` in slices of about `sliceMs` on the main thread, so a large profile never blocks
 * the page; resolves to the tree, or to null once `signal.aborted`.
 */
export function fromJSONAsync(data, { signal, sliceMs = 12 } = {}) {
  const b = new JSONBuilder(data, 0);
  return new Promise((resolve) => {
    const run = () => {
      if (signal && signal.aborted) return resolve(null);
      if (b.step(performance.now() + sliceMs)) resolve(b.finish());
      else setTimeout(run, 0);
    };
    run();
  });
}

/** The walk of `fromJSON`, resumable: pre-order with an explicit stack. */
class JSONBuilder {
  constructor(data, minValue) {
    const { root: _root, ...meta } = data;
    this.meta = meta;
    this.isDiff = meta.base_total !== undefined;
    this.minValue = minValue;
    this.cap = 1024;
    this.t = new Tree(this.cap, meta);
    this.strings = new Interner(this.t.strings);
    this.nodes = [data.root];
    this.parents = [-1];
    this.i = 0;
    this.pruned = 0;
  }

  grow() {
    const { t } = this;
    const next = new Tree(this.cap * 2, this.meta);
    for (const k of COLUMNS) if (t[k]) next[k].set(t[k]);
    next.strings = t.strings;
    next.maxDepth = t.maxDepth;
    this.cap *= 2;
    this.t = next;
  }

  /** Works until `deadline` (a `performance.now()` time); true when done. */
  step(deadline) {
    const { nodes, parents, strings, isDiff, minValue } = this;
    let { t, i } = this;
    let n = 0;
    while (nodes.length) {
      if ((++n & 1023) === 0 && performance.now() > deadline) break;
      const node = nodes.pop();
      const p = parents.pop();
      if (i === this.cap) {
        this.grow();
        t = this.t;
      }
      t.name[i] = strings.id(node.name);
      if (node.file) t.file[i] = strings.id(node.file);
      if (node.binary) t.binary[i] = strings.id(node.binary);
      if (node.line) t.line[i] = node.line;
      t.value[i] = node.value;
      t.self[i] = node.self;
      if (isDiff) {
        t.base[i] = node.base || 0;
        t.baseSelf[i] = node.base_self || 0;
      }
      t.parent[i] = p;
      const d = p < 0 ? 0 : t.depth[p] + 1;
      t.depth[i] = d;
      if (d > t.maxDepth) t.maxDepth = d;
      const ch = node.children;
      if (ch) {
        for (let k = ch.length - 1; k >= 0; k--) {
          const c = ch[k];
          if (minValue > 0 && Math.abs(c.value) + (isDiff ? Math.abs(c.base) : 0) < minValue) {
            this.pruned++;
            continue;
          }
          nodes.push(c);
          parents.push(i);
        }
      }
      i++;
    }
    this.i = i;
    return nodes.length === 0;
  }

  finish() {
    const out = trimmed(this.t, this.i);
    out.pruned = this.pruned;
    return out;
  }
}

const COLUMNS = ['name', 'file', 'binary', 'line', 'parent', 'depth', 'value', 'self', 'base', 'baseSelf'];

/** `t` cut to its first `n` nodes (views, no copy), with `end` filled. */
function trimmed(t, n) {
  const out = new Tree(0, t.meta);
  out.n = n;
  for (const k of COLUMNS) out[k] = t[k] ? t[k].subarray(0, n) : null;
  out.end = new Int32Array(n);
  out.strings = t.strings;
  out.maxDepth = t.maxDepth;
  finishEnds(out);
  return out;
}

/** Fills `end` from `parent` (pre-order: a subtree is contiguous). */
function finishEnds(t) {
  const size = new Int32Array(t.n).fill(1);
  for (let i = t.n - 1; i > 0; i--) size[t.parent[i]] += size[i];
  for (let i = 0; i < t.n; i++) t.end[i] = i + size[i];
}

/**
 * Grows a tree node by node (in any order) keyed by (parent, name), then lays it out in
 * pre-order. Used by `invert` and `hide`.
 */
class Builder {
  constructor(src) {
    this.src = src;
    this.cap = 1024;
    this.n = 1;
    this.key = new Map();
    this.alloc();
    this.tmpl[0] = 0;
  }

  alloc() {
    const grow = (a, T) => {
      const b = new T(this.cap);
      if (a) b.set(a);
      return b;
    };
    this.parent = grow(this.parent, Int32Array);
    this.tmpl = grow(this.tmpl, Int32Array); // a source node to copy name, file, line, binary from
    this.value = grow(this.value, Float64Array);
    this.self = grow(this.self, Float64Array);
    this.base = grow(this.base, Float64Array);
    this.baseSelf = grow(this.baseSelf, Float64Array);
  }

  /** The child of `parent` with the frame of source node `s`, created if missing. */
  child(parent, s) {
    // Keyed by parent and name id: 2^31 nodes × 2^22 names stays below 2^53.
    const k = parent * 4194304 + this.src.name[s];
    let c = this.key.get(k);
    if (c === undefined) {
      c = this.n++;
      if (c >= this.cap) {
        this.cap *= 2;
        this.alloc();
      }
      this.parent[c] = parent;
      this.tmpl[c] = s;
      this.key.set(k, c);
    }
    return c;
  }

  /** The finished tree, children ordered by `order` ('name' or 'value', heaviest first). */
  finish(order) {
    const { src, n } = this;
    const count = new Int32Array(n + 1);
    for (let i = 1; i < n; i++) count[this.parent[i] + 1]++;
    for (let i = 0; i < n; i++) count[i + 1] += count[i];
    const kids = new Int32Array(Math.max(n - 1, 0));
    const fill = count.slice();
    for (let i = 1; i < n; i++) kids[fill[this.parent[i]]++] = i;
    const cmp = order === 'value'
      ? (a, b) => this.value[b] - this.value[a]
      : (a, b) => { const x = src.nameOf(this.tmpl[a]); const y = src.nameOf(this.tmpl[b]); return x < y ? -1 : x > y ? 1 : 0; };
    for (let i = 0; i < n; i++) {
      if (count[i + 1] - count[i] > 1) kids.subarray(count[i], count[i + 1]).sort(cmp);
    }
    const meta = { ...src.meta };
    const t = new Tree(n, meta);
    t.strings = src.strings;
    const stack = [0];
    const parentOut = [-1];
    let o = 0;
    while (stack.length) {
      const b = stack.pop();
      const p = parentOut.pop();
      const s = this.tmpl[b];
      t.name[o] = b === 0 ? src.name[0] : src.name[s];
      t.file[o] = src.file[s];
      t.binary[o] = src.binary[s];
      t.line[o] = src.line[s];
      t.value[o] = this.value[b];
      t.self[o] = this.self[b];
      if (t.isDiff) {
        t.base[o] = this.base[b];
        t.baseSelf[o] = this.baseSelf[b];
      }
      t.parent[o] = p;
      const d = p < 0 ? 0 : t.depth[p] + 1;
      t.depth[o] = d;
      if (d > t.maxDepth) t.maxDepth = d;
      for (let k = count[b + 1] - 1; k >= count[b]; k--) {
        stack.push(kids[k]);
        parentOut.push(o);
      }
      o++;
    }
    finishEnds(t);
    return t;
  }
}

/**
 * The bottom-up tree: the roots' children are the functions where time is spent (self), each
 * with its callers below. The heaviest leaf functions come first.
 */
export function invert(t) {
  const b = new Builder(t);
  b.value[0] = t.value[0];
  if (t.isDiff) b.base[0] = t.base[0];
  for (let i = 1; i < t.n; i++) {
    const v = t.self[i];
    const bv = t.isDiff ? t.baseSelf[i] : 0;
    if (v === 0 && bv === 0) continue;
    let cur = 0;
    for (let j = i; j > 0; j = t.parent[j]) {
      cur = b.child(cur, j);
      b.value[cur] += v;
      if (t.isDiff) b.base[cur] += bv;
    }
    // The path ends at the outermost caller: that is where this value is "self" bottom-up.
    b.self[cur] += v;
    if (t.isDiff) b.baseSelf[cur] += bv;
  }
  return b.finish('value');
}

/**
 * The tree without the frames `hidden(i)` is true for: their children move up to the nearest
 * kept ancestor and merge with siblings of the same name.
 */
export function hide(t, hidden) {
  const b = new Builder(t);
  const map = new Int32Array(t.n);
  b.self[0] = t.self[0];
  if (t.isDiff) b.baseSelf[0] = t.baseSelf[0];
  for (let i = 1; i < t.n; i++) {
    const p = map[t.parent[i]];
    const to = hidden(i) ? p : b.child(p, i);
    map[i] = to;
    b.self[to] += t.self[i];
    if (t.isDiff) b.baseSelf[to] += t.baseSelf[i];
  }
  // Children are created after their parents: one backwards pass sums totals.
  for (let i = 0; i < b.n; i++) {
    b.value[i] = b.self[i];
    b.base[i] = b.baseSelf[i];
  }
  for (let i = b.n - 1; i > 0; i--) {
    b.value[b.parent[i]] += b.value[i];
    b.base[b.parent[i]] += b.base[i];
  }
  return b.finish('name');
}

/**
 * A predicate for `hide` from a name pattern and a binary pattern (case-insensitive regexes;
 * empty means none). Throws a SyntaxError for a bad regex.
 */
export function hidePredicate(t, namePattern, binaryPattern) {
  const nameRe = namePattern ? new RegExp(namePattern, 'i') : null;
  const binRe = binaryPattern ? new RegExp(binaryPattern, 'i') : null;
  const memo = new Int8Array(t.strings.length); // 0 unknown, 1 hidden, 2 kept, per name
  const binMemo = new Int8Array(t.strings.length);
  const test = (re, m, id) => {
    if (m[id] === 0) m[id] = re.test(t.strings[id]) ? 1 : 2;
    return m[id] === 1;
  };
  return (i) => (nameRe !== null && test(nameRe, memo, t.name[i]))
    || (binRe !== null && t.binary[i] !== 0 && test(binRe, binMemo, t.binary[i]));
}

/** The binaries (mappings) named in the tree, heaviest first by self value. */
export function binaries(t) {
  const self = new Map();
  for (let i = 0; i < t.n; i++) if (t.binary[i]) self.set(t.binary[i], (self.get(t.binary[i]) || 0) + t.self[i]);
  return [...self.entries()].sort((a, b) => b[1] - a[1]).map(([id]) => t.strings[id]);
}

/**
 * Search: a case-insensitive substring, or a regex when written `/…/`. Returns per-node flags
 * and the share of the root covered by matches (nested matches counted once), or null for an
 * empty term. Throws SyntaxError for a bad regex.
 */
export function search(t, term) {
  if (!term) return null;
  let test;
  const re = /^\/(.+)\/$/.exec(term);
  if (re) {
    const r = new RegExp(re[1], 'i');
    test = (s) => r.test(s);
  } else {
    const low = term.toLowerCase();
    test = (s) => s.toLowerCase().includes(low);
  }
  const byName = new Int8Array(t.strings.length);
  const flags = new Uint8Array(t.n);
  let value = 0;
  let base = 0;
  let count = 0;
  let coveredUntil = 0; // nodes before this index lie inside a counted match
  for (let i = 0; i < t.n; i++) {
    const id = t.name[i];
    if (byName[id] === 0) byName[id] = test(t.strings[id]) ? 1 : 2;
    if (byName[id] === 1 && i > 0) {
      flags[i] = 1;
      count++;
      if (i >= coveredUntil) {
        value += t.value[i];
        if (t.isDiff) base += t.base[i];
        coveredUntil = t.end[i];
      }
    }
  }
  return { flags, value, base, count };
}

/**
 * Flat and cumulative value per function name: flat is the self value, cumulative counts
 * each stack once however often the function recurs on it (pprof's -top).
 */
export function topTable(t) {
  const flat = new Float64Array(t.strings.length);
  const cum = new Float64Array(t.strings.length);
  const baseFlat = t.isDiff ? new Float64Array(t.strings.length) : null;
  const baseCum = t.isDiff ? new Float64Array(t.strings.length) : null;
  const seen = new Uint8Array(t.strings.length);
  const onStack = new Int32Array(t.strings.length);
  const open = []; // nodes on the current path, for leaving them
  for (let i = 1; i < t.n; i++) {
    while (open.length && t.end[open[open.length - 1]] <= i) onStack[t.name[open.pop()]]--;
    const id = t.name[i];
    seen[id] = 1;
    flat[id] += t.self[i];
    if (baseFlat) baseFlat[id] += t.baseSelf[i];
    if (onStack[id] === 0) {
      cum[id] += t.value[i];
      if (baseCum) baseCum[id] += t.base[i];
    }
    onStack[id]++;
    open.push(i);
  }
  const rows = [];
  for (let id = 0; id < seen.length; id++) {
    if (!seen[id]) continue;
    rows.push({
      name: t.strings[id],
      flat: flat[id],
      cum: cum[id],
      baseFlat: baseFlat ? baseFlat[id] : undefined,
      baseCum: baseCum ? baseCum[id] : undefined,
    });
  }
  return rows;
}

/**
 * Folded stacks of the subtree of `focus` (its ancestors kept in every line), one line per
 * node with self value: `root;a;b 123` (diffs: `… base value`, inferno's two-column form).
 */
export function folded(t, focus = 0) {
  const lines = [];
  // names[d - 1] is the name at depth d on the current path (pre-order keeps it right).
  const names = t.path(focus).slice(1).map((j) => t.nameOf(j));
  for (let i = focus; i < t.end[focus]; i++) {
    if (i !== focus) {
      names.length = t.depth[i] - 1;
      names.push(t.nameOf(i));
    }
    const v = t.self[i];
    const bv = t.isDiff ? t.baseSelf[i] : 0;
    if ((v !== 0 || bv !== 0) && names.length) lines.push(t.isDiff ? `${names.join(';')} ${bv} ${v}` : `${names.join(';')} ${v}`);
  }
  return lines.join('\n') + (lines.length ? '\n' : '');
}
