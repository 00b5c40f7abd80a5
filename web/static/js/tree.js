// The flame-graph tree in columns (typed arrays in pre-order), read straight from the API's
// `format=columns` answer, and the operations on it that the views need: inverting, hiding
// frames, search, top table, folded text. Nothing recurses: stacks can be thousands of frames
// deep.

/**
 * Nodes are numbered in pre-order: node 0 is the root, a node's subtree is `[i, end[i])`, and
 * children follow their parent in order. Strings (names, files, binaries) are indices into
 * `strings`; 0 is the empty string.
 */
export class Tree {
  /**
   * A tree of `n` nodes with zeroed columns, or with the given `columns` (`name`, `file`,
   * `binary`, `line`, `parent` as Int32Array; `value`, `self`, `base`, `baseSelf` as
   * Float64Array), whose `depth`, `end` and `maxDepth` are then derived from `parent`.
   */
  constructor(n, meta, columns = null) {
    this.n = n;
    this.meta = meta; // {sample_type, unit, period_type, period_unit, period, total, base_total?}
    this.isDiff = meta.base_total !== undefined;
    this.strings = [''];
    this.maxDepth = 0;
    if (columns) {
      Object.assign(this, columns);
      if (!this.isDiff) {
        this.base = null;
        this.baseSelf = null;
      }
      this.depth = new Int32Array(n);
      this.end = new Int32Array(n);
      finishShape(this);
      return;
    }
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

/** `depth`, `maxDepth` and `end` from `parent` (pre-order: a parent comes before its children). */
function finishShape(t) {
  const { n, parent, depth, end } = t;
  let maxDepth = 0;
  for (let i = 1; i < n; i++) {
    const d = depth[parent[i]] + 1;
    depth[i] = d;
    if (d > maxDepth) maxDepth = d;
  }
  t.maxDepth = maxDepth;
  // end[i] counts the subtree's size first, then becomes its end.
  end.fill(1);
  for (let i = n - 1; i > 0; i--) end[parent[i]] += end[i];
  for (let i = 0; i < n; i++) end[i] += i;
}

/** The magic bytes that open a `format=columns` answer. */
const MAGIC = 'PARCACOL';
const COLUMN_NAMES = { value: 'value', self: 'self', base: 'base', base_self: 'baseSelf', parent: 'parent', name: 'name', file: 'file', line: 'line', binary: 'binary' };
const LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

/**
 * Reads the API's `format=columns` answer (documentation/http-api.md): per graph its columns as
 * little-endian arrays from byte 16, then a JSON header with the string table. Typed arrays are
 * laid over the bytes without copying, so this costs the header and two passes over `parent`.
 * Returns `{grouped, graphs: [{labels, profiles, tree}]}`; `labels` and `profiles` are set for
 * `merge by` groups. Throws an Error for bytes that are not such an answer.
 */
export function readColumns(input) {
  let bytes = input instanceof Uint8Array ? input : new Uint8Array(input);
  if (bytes.byteOffset % 8 !== 0) bytes = bytes.slice(); // typed arrays of f64 need alignment
  const { buffer, byteOffset } = bytes;
  const bad = (why) => new Error(`not a columns answer: ${why}`);
  if (bytes.length < 16 || String.fromCharCode(...bytes.subarray(0, 8)) !== MAGIC) throw bad('no PARCACOL magic');
  const headerAt = Number(new DataView(buffer, byteOffset + 8, 8).getBigUint64(0, true));
  if (headerAt < 16 || headerAt > bytes.length) throw bad('the header is outside the answer');
  const header = JSON.parse(new TextDecoder().decode(bytes.subarray(headerAt)));
  if (header.version !== 1) throw bad(`version ${header.version}, this UI reads 1`);
  let at = 16;
  const graphs = header.graphs.map(({ nodes: n, labels, profiles, omitted_nodes: _omitted, ...meta }) => {
    const columns = {};
    for (const [name, type] of header.columns) {
      const T = type === 'f64' ? Float64Array : Int32Array; // u32 string indices stay below 2^31
      if (at + n * T.BYTES_PER_ELEMENT > headerAt) throw bad(`column ${name} runs into the header`);
      let col;
      if (LITTLE_ENDIAN) col = new T(buffer, byteOffset + at, n);
      else {
        const view = new DataView(buffer, byteOffset + at, n * T.BYTES_PER_ELEMENT);
        col = new T(n);
        for (let i = 0; i < n; i++) col[i] = type === 'f64' ? view.getFloat64(i * 8, true) : view.getInt32(i * 4, true);
      }
      if (COLUMN_NAMES[name]) columns[COLUMN_NAMES[name]] = col;
      at = Math.ceil((at + n * T.BYTES_PER_ELEMENT) / 8) * 8;
    }
    const tree = new Tree(n, meta, columns);
    tree.strings = header.strings;
    return { labels, profiles, tree };
  });
  return { grouped: graphs.length > 0 && graphs[0].labels !== undefined, graphs };
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
      for (let k = count[b + 1] - 1; k >= count[b]; k--) {
        stack.push(kids[k]);
        parentOut.push(o);
      }
      o++;
    }
    finishShape(t);
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
