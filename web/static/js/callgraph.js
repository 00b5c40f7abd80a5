// The call graph: pprof's graph of functions and calls (`format=callgraph`), laid out top-down
// by dagre (web/static/vendor/dagre) and drawn as SVG. Node size follows the flat value, colour
// the cumulative one (red and green for a diff's change); click a node to focus it: its callers
// and callees stay lit, the rest fades, and a panel lists them with a link to its sandwich.

import { graphlib, layout } from '../vendor/dagre/dagre.esm.js';
import { h, replace, stateBox, download } from './dom.js';
import { get, getBlob } from './api.js';
import { diffColor } from './colors.js';
import { formatValue, formatPercent, formatDelta } from './units.js';

const SVG = 'http://www.w3.org/2000/svg';
/** Node counts offered; pprof's default view keeps 80. */
const SIZES = ['25', '50', '100', '200', 'all'];
const DEFAULT_SIZE = '100';
/** More nodes than this are not laid out here (dagre takes seconds and the result is unreadable). */
const MAX_LAYOUT = 1500;

function s(tag, attrs = {}, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) if (v !== null && v !== undefined) el.setAttribute(k, String(v));
  for (const c of children.flat()) if (c !== null && c !== undefined) el.append(c);
  return el;
}

/** A function name without its package path (`net/http.(*conn).serve` → `http.(*conn).serve`). */
export function shortName(name) {
  const paren = name.indexOf('(');
  const slash = name.lastIndexOf('/', paren >= 0 ? paren : name.length);
  return slash >= 0 && !name.startsWith('[') ? name.slice(slash + 1) : name;
}

/** Breaks `text` into lines of at most `width` characters, at `.`, `::`, `/` or spaces. */
function wrap(text, width) {
  const lines = [];
  let rest = text;
  while (rest.length > width) {
    let cut = -1;
    for (let i = width; i > width / 3; i--) {
      if ('. /:'.includes(rest[i])) {
        cut = i;
        break;
      }
    }
    if (cut <= 0) cut = width;
    lines.push(rest.slice(0, cut));
    rest = rest.slice(rest[cut] === ' ' ? cut + 1 : cut);
  }
  lines.push(rest);
  return lines.slice(0, 4);
}

/** pprof's node colour: grey to red as the cumulative share grows. */
function shareColor(share) {
  const a = Math.min(1, Math.sqrt(Math.abs(share)));
  const mix = (x, y) => Math.round(x + (y - x) * a);
  return `rgb(${mix(236, 232)} ${mix(234, 110)} ${mix(231, 90)})`;
}

/**
 * Mounts the call graph of `query` (over `params`, the window) into `root`. `state` holds
 * `{granularity, nodes, gfocus}`; `onState(patch)` keeps them in the URL; `onSandwich(name)`
 * opens a function's sandwich. Returns `{destroy}`.
 */
export function callGraphView(root, { query, params, state, onState, onSandwich }) {
  const controller = new AbortController();
  let data = null;
  let svg = null;
  let focus = state.gfocus || '';
  let centreOn = () => {};
  const size = SIZES.includes(state.nodes) ? state.nodes : DEFAULT_SIZE;
  const graphParams = () => ({
    ...params,
    query,
    granularity: state.granularity,
    ...(size === 'all' ? {} : { max_nodes: size, node_fraction: '0.005', edge_fraction: '0.001' }),
  });
  const info = h('aside', { class: 'cg-info', 'aria-live': 'polite' });
  const canvas = h('div', { class: 'cg-canvas' });
  const summary = h('span', { class: 'muted cg-summary' });
  const fitButtons = h('span', { class: 'cg-fit-buttons' });
  const sizeSelect = h('select', {
    class: 'cg-size', 'aria-label': 'nodes shown',
    onchange: (e) => onState({ nodes: e.target.value === DEFAULT_SIZE ? '' : e.target.value }, { reload: true }),
  }, SIZES.map((v) => h('option', { value: v, selected: v === size }, v === 'all' ? 'All nodes' : `${v} nodes`)));
  const fileBase = 'callgraph';
  const tools = h('div', { class: 'cg-tools' },
    h('label', { class: 'field-inline' }, 'Show ', sizeSelect), fitButtons, summary,
    h('span', { class: 'downloads' }, h('span', { class: 'muted' }, 'Download:'),
      h('button', { type: 'button', class: 'dl-graph-svg', onclick: () => svg && download(`${fileBase}.svg`, svgText(), 'image/svg+xml') }, 'SVG'),
      h('button', {
        type: 'button', class: 'dl-dot',
        onclick: async () => {
          const blob = await getBlob('/api/v1/query', { ...graphParams(), format: 'dot' });
          download(`${fileBase}.dot`, await blob.text(), 'text/vnd.graphviz');
        },
      }, 'Graphviz dot')));
  replace(root, h('div', { class: 'callgraph' }, tools, h('div', { class: 'cg-body' }, canvas, info)));
  replace(canvas, stateBox('loading', 'Loading the call graph…'));

  const svgText = () => {
    const copy = svg.cloneNode(true);
    copy.setAttribute('xmlns', SVG);
    const [, , w, hgt] = copy.getAttribute('data-extent').split(' ').map(Number);
    copy.setAttribute('viewBox', copy.getAttribute('data-extent'));
    copy.setAttribute('width', w);
    copy.setAttribute('height', hgt);
    return `<?xml version="1.0" encoding="UTF-8"?>\n${new XMLSerializer().serializeToString(copy)}`;
  };

  get('/api/v1/query', { ...graphParams(), format: 'callgraph' }, { signal: controller.signal }).then((d) => {
    data = d;
    draw();
  }).catch((e) => {
    if (e.name === 'AbortError') return;
    replace(canvas, stateBox(e.reason === 'no_profiles' ? 'empty' : 'error', 'Cannot show the call graph.', e.message));
  });

  function draw() {
    const { nodes, edges, unit } = data;
    const isDiff = data.base_total !== undefined;
    const total = Math.abs(data.total) || 1;
    const baseTotal = Math.abs(data.base_total || 0) || 1;
    summary.textContent = ` ${nodes.length} nodes · ${edges.length} edges · total ${formatValue(data.total, unit)}`;
    if (!nodes.length) {
      replace(canvas, stateBox('empty', 'No calls in this profile.'));
      return;
    }
    if (nodes.length > MAX_LAYOUT) {
      replace(canvas, stateBox('empty', `${nodes.length.toLocaleString('en-US')} functions are too many to draw here.`,
        'Show fewer nodes, or download the Graphviz dot and draw it with dot -Tsvg.'));
      return;
    }
    const maxFlat = Math.max(1, ...nodes.map((n) => Math.abs(n.flat)));
    const g = new graphlib.Graph({ multigraph: false });
    g.setGraph({ rankdir: 'TB', nodesep: 18, ranksep: 42, edgesep: 8, marginx: 12, marginy: 12 });
    g.setDefaultEdgeLabel(() => ({}));
    const boxes = nodes.map((n, i) => {
      const font = 10 + Math.round(12 * Math.sqrt(Math.abs(n.flat) / maxFlat));
      const lines = wrap(shortName(n.name), 28);
      const values = isDiff
        ? [`${formatDelta(n.cum - n.base_cum, unit)}`, `A ${formatValue(n.base_cum, unit)} → B ${formatValue(n.cum, unit)}`]
        : [n.flat ? `${formatValue(n.flat, unit)} (${formatPercent(n.flat, data.total)})` : '0', `of ${formatValue(n.cum, unit)} (${formatPercent(n.cum, data.total)})`];
      const chars = Math.max(...lines.map((l) => l.length)) * font * 0.6;
      const width = Math.max(chars, ...values.map((v) => v.length * 6)) + 16;
      const height = lines.length * font * 1.2 + values.length * 13 + 12;
      g.setNode(String(i), { width, height });
      return { font, lines, values, width, height };
    });
    for (const e of edges) g.setEdge(String(e.from), String(e.to));
    layout(g);
    const { width: W, height: H } = g.graph();
    // A diff colours the change of a node's share of its side's total, relative to the larger
    // share (as the icicle's default): red grew, green shrank, grey unchanged.
    const fill = (n) => {
      if (!isDiff) return shareColor(n.cum / total);
      const before = n.base_cum / baseTotal;
      const after = n.cum / total;
      const m = Math.max(Math.abs(before), Math.abs(after));
      return diffColor(m === 0 ? 0 : (after - before) / m);
    };
    const arrow = s('marker', { id: 'cg-arrow', viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse' },
      s('path', { d: 'M0,0 L10,5 L0,10 z', fill: '#6b6660' }));
    const edgeEls = edges.map((e) => {
      const pts = g.edge(String(e.from), String(e.to)).points;
      const d = `M${pts.map((p) => `${p.x.toFixed(1)},${p.y.toFixed(1)}`).join(' L')}`;
      const width = 1 + Math.min(5, (5 * Math.abs(e.value)) / total);
      const mid = pts[Math.floor(pts.length / 2)];
      const label = isDiff ? formatDelta(e.value - e.base_value, unit) : formatValue(e.value, unit);
      const title = `${nodes[e.from].name} → ${nodes[e.to].name}: ${isDiff ? `A ${formatValue(e.base_value, unit)} → B ${formatValue(e.value, unit)}` : formatValue(e.value, unit)}${e.inline ? ' (inlined)' : ''}${e.residual ? ' (through nodes not shown)' : ''}`;
      return s('g', { class: 'cg-edge', 'data-from': e.from, 'data-to': e.to },
        s('title', {}, title),
        s('path', { d, fill: 'none', stroke: '#6b6660', 'stroke-width': width.toFixed(1), 'stroke-dasharray': e.residual ? '4 3' : null, 'marker-end': 'url(#cg-arrow)' }),
        s('text', { x: mid.x + 4, y: mid.y, 'font-size': 10, fill: '#4a4642', 'font-family': 'sans-serif' }, `${label}${e.inline ? ' (inline)' : ''}`));
    });
    const nodeEls = nodes.map((n, i) => {
      const p = g.node(String(i));
      const b = boxes[i];
      const x = p.x - b.width / 2;
      const y = p.y - b.height / 2;
      const text = [];
      let ty = y + 6 + b.font;
      for (const line of b.lines) {
        text.push(s('text', { x: p.x, y: ty, 'font-size': b.font, 'text-anchor': 'middle', 'font-family': 'sans-serif', fill: '#1d1b19' }, line));
        ty += b.font * 1.2;
      }
      for (const v of b.values) {
        text.push(s('text', { x: p.x, y: ty + 1, 'font-size': 11, 'text-anchor': 'middle', 'font-family': 'sans-serif', fill: '#3a3632' }, v));
        ty += 13;
      }
      return s('g', { class: 'cg-node', 'data-index': i, tabindex: 0, role: 'button', 'aria-label': n.name },
        s('title', {}, `${n.name}${n.file ? `\n${n.file}` : ''}\nflat ${formatValue(n.flat, unit)}, cum ${formatValue(n.cum, unit)}`),
        s('rect', { x, y, width: b.width, height: b.height, rx: 4, fill: fill(n), stroke: '#6b6660', 'stroke-width': 1 }),
        text);
    });
    svg = s('svg', { class: 'cg-svg', 'data-extent': `0 0 ${W.toFixed(0)} ${H.toFixed(0)}`, role: 'img', 'aria-label': 'call graph' },
      s('defs', {}, arrow), s('rect', { x: 0, y: 0, width: W, height: H, fill: '#fff', class: 'cg-bg' }), s('g', { class: 'cg-edges' }, edgeEls), s('g', { class: 'cg-nodes' }, nodeEls));
    replace(canvas, svg);
    const view = { x: 0, y: 0, w: W, h: H };
    const apply = () => svg.setAttribute('viewBox', `${view.x} ${view.y} ${view.w} ${view.h}`);
    // `whole`: the whole graph in view; else readable first: at least 80% of full size, the
    // top of the graph, centred on the heaviest node (the largest cumulative value).
    const fit = (whole) => {
      const r = canvas.getBoundingClientRect();
      const [cw, ch] = [r.width || W, r.height || H];
      const k = whole ? Math.min(cw / W, ch / H) : Math.max(0.8, Math.min(1, cw / W));
      view.w = cw / k;
      view.h = ch / k;
      const top = g.node('0');
      view.x = whole ? (W - view.w) / 2 : Math.max(0, Math.min(W - view.w, top.x - view.w / 2));
      view.y = whole ? (H - view.h) / 2 : 0;
      apply();
    };
    fit(false);
    // Brings node `i` into view (a focus from the panel's lists).
    centreOn = (i) => {
      const p = g.node(String(i));
      if (p.x < view.x || p.x > view.x + view.w || p.y < view.y || p.y > view.y + view.h) {
        view.x = p.x - view.w / 2;
        view.y = p.y - view.h / 3;
        apply();
      }
    };
    replace(fitButtons,
      h('button', { type: 'button', class: 'cg-fit', onclick: () => fit(true) }, 'Whole graph'),
      h('button', { type: 'button', class: 'cg-readable', onclick: () => fit(false) }, 'Actual size'));
    panZoom(svg, view, apply);
    svg.addEventListener('click', (e) => {
      const node = e.target.closest('.cg-node');
      if (node) setFocus(nodes[Number(node.dataset.index)].name);
      else if (!svg.dragged) setFocus('');
    });
    svg.addEventListener('keydown', (e) => {
      const node = e.target.closest('.cg-node');
      if (node && (e.key === 'Enter' || e.key === ' ')) {
        e.preventDefault();
        setFocus(nodes[Number(node.dataset.index)].name);
      }
    });
    setFocus(focus, false);
    root.dataset.complete = 'true';
  }

  function setFocus(name, store = true) {
    focus = name;
    if (store) onState({ gfocus: name });
    const { nodes, edges, unit } = data;
    const at = nodes.findIndex((n) => n.name === name);
    const near = new Set(at >= 0 ? [at] : []);
    if (at >= 0) for (const e of edges) if (e.from === at || e.to === at) near.add(e.from).add(e.to);
    svg.classList.toggle('focused', at >= 0);
    for (const el of svg.querySelectorAll('.cg-node')) {
      const i = Number(el.dataset.index);
      el.classList.toggle('near', near.has(i));
      el.classList.toggle('current', i === at);
    }
    for (const el of svg.querySelectorAll('.cg-edge')) {
      el.classList.toggle('near', Number(el.dataset.from) === at || Number(el.dataset.to) === at);
    }
    if (at < 0) {
      replace(info, h('p', { class: 'muted' }, 'Click a function to focus it: its callers and callees stay lit. The wheel zooms, dragging pans.'));
      return;
    }
    centreOn(at);
    const n = nodes[at];
    const list = (title, pairs) => h('div', {}, h('h4', {}, title), pairs.length
      ? h('ul', {}, pairs.map(([j, v]) => h('li', {}, h('a', { href: '#', onclick: (ev) => { ev.preventDefault(); setFocus(nodes[j].name); } }, shortName(nodes[j].name)), ` ${formatValue(v, unit)}`)))
      : h('p', { class: 'muted' }, 'none shown'));
    replace(info,
      h('h3', { class: 'cg-focus-name' }, n.name),
      n.file ? h('p', { class: 'muted' }, n.file) : null,
      h('p', {}, `flat ${formatValue(n.flat, unit)} · cum ${formatValue(n.cum, unit)} (${formatPercent(n.cum, data.total)})`),
      h('button', { type: 'button', class: 'open-sandwich', onclick: () => onSandwich(n.name) }, 'Sandwich of this function'),
      list('Called by', edges.filter((e) => e.to === at).map((e) => [e.from, e.value])),
      list('Calls', edges.filter((e) => e.from === at).map((e) => [e.to, e.value])));
  }

  return { destroy: () => controller.abort(), get data() { return data; } };
}

/** Wheel zooms around the pointer, drag pans; `view` is the viewBox, `apply` writes it. */
function panZoom(svg, view, apply) {
  let drag = null;
  svg.addEventListener('wheel', (e) => {
    e.preventDefault();
    const r = svg.getBoundingClientRect();
    const px = view.x + ((e.clientX - r.left) / r.width) * view.w;
    const py = view.y + ((e.clientY - r.top) / r.height) * view.h;
    const k = Math.exp(e.deltaY * 0.0015);
    view.x = px - (px - view.x) * k;
    view.y = py - (py - view.y) * k;
    view.w *= k;
    view.h *= k;
    apply();
  }, { passive: false });
  svg.addEventListener('mousedown', (e) => {
    drag = { x: e.clientX, y: e.clientY, vx: view.x, vy: view.y };
    svg.dragged = false;
  });
  const move = (e) => {
    if (!drag) return;
    const r = svg.getBoundingClientRect();
    const dx = e.clientX - drag.x;
    const dy = e.clientY - drag.y;
    if (Math.abs(dx) + Math.abs(dy) > 3) svg.dragged = true;
    view.x = drag.vx - (dx / r.width) * view.w;
    view.y = drag.vy - (dy / r.height) * view.h;
    apply();
  };
  const up = () => { drag = null; };
  svg.addEventListener('mousemove', move);
  svg.addEventListener('mouseup', up);
  svg.addEventListener('mouseleave', up);
}
