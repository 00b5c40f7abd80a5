// Compare: two queries, A and B, each with its own range, and the diff icicle of B against A
// (red grew, green shrank).

import { h, replace, stateBox } from './dom.js';
import { profileTypes, queryRange, queryProfile, parseQuery, ApiError } from './api.js';
import { typeString } from './profiletypes.js';
import { rangePicker, window as rangeWindow, stepFor, alignToStep, describeRange } from './timerange.js';
import { queryEditor } from './querybox.js';
import { metricsGraph } from './metricsgraph.js';
import { profileView, emptyProfile } from './profileview.js';
import { sideQuery, queryKind, typeOf, pointSelection } from './querytext.js';
import { formatTime } from './units.js';
import { readState, writeState, permalink } from './urlstate.js';

/** Mounts the compare view into `app`; returns `{destroy}`. */
export function mountCompare(app) {
  let state = readState();
  let types = [];
  let controller = null;
  let profile = null;
  const graphs = [];
  profileTypes(null).then((list) => { types = list.map(typeString); }).catch(() => {});

  const side = (key, title) => {
    const editor = queryEditor({
      value: state[key] || '', label: `query ${key.toUpperCase()}`, types: () => types,
      onSubmit: (text) => run({ [key]: text.trim(), ...noSelection(key) }),
    });
    const picker = h('div', { class: 'range-slot' });
    const graph = h('div', { class: 'side-graph' });
    const selection = h('div', { class: 'side-selection' });
    const el = h('section', { class: `panel side side-${key}`, 'aria-label': title }, h('h2', {}, title), editor.el, picker, graph, selection);
    return { key, editor, picker, graph, selection, el };
  };
  const A = side('a', 'A (base)');
  const B = side('b', 'B (compared with A)');
  const diffHead = h('div', { class: 'profile-head' });
  const diffPanel = h('section', { class: 'panel profile-panel diff-panel', 'aria-label': 'diff' });
  replace(app, h('div', { class: 'compare' },
    h('div', { class: 'sides' }, A.el, B.el),
    h('div', { class: 'row' }, h('button', { type: 'button', class: 'primary run-compare', onclick: () => run({ a: A.editor.value().trim(), b: B.editor.value().trim() }) }, 'Compare'),
      h('span', { class: 'muted' }, 'Click a point of a graph, or drag across it, to compare that part of the range.'),
      h('a', { class: 'permalink', href: '#', title: 'This comparison with both ranges fixed, to share', onclick: (e) => { e.currentTarget.href = permalink([['afrom', 'ato'], ['bfrom', 'bto']]); } }, 'Permalink')),
    h('div', { class: 'panel profile-wrap' }, diffHead, diffPanel)));

  const rangeOf = (key) => ({ from: state[`${key}from`] || 'now-1h', to: state[`${key}to`] || 'now' });
  // What a side compares, chosen in its graph: a window `(start, end]` or the profiles at `time`
  // (URL: `apfrom`/`apto` or `atime`), else its whole range.
  const selectionOf = (key) => {
    if (state[`${key}time`]) return { time: Number(state[`${key}time`]) };
    if (state[`${key}pfrom`]) return { start: Number(state[`${key}pfrom`]), end: Number(state[`${key}pto`]) };
    return null;
  };
  const noSelection = (key) => ({ [`${key}pfrom`]: '', [`${key}pto`]: '', [`${key}time`]: '' });

  const run = (patch) => {
    writeState({ ...patch, focus: '', search: '' }, { push: true });
    state = readState();
    load();
  };

  function load() {
    if (controller) controller.abort();
    controller = new AbortController();
    const { signal } = controller;
    for (const g of graphs.splice(0)) g.destroy();
    if (profile) profile.destroy();
    profile = null;
    for (const s of [A, B]) {
      const q = (state[s.key] || '').trim();
      if (s.editor.value().trim() !== q) s.editor.setValue(q);
      s.editor.setError(null);
      replace(s.picker, rangePicker(rangeOf(s.key), (r) => run({ [`${s.key}from`]: r.from, [`${s.key}to`]: r.to, ...noSelection(s.key) })));
      const sel = selectionOf(s.key);
      replace(s.selection, sel ? [
        h('span', { class: 'muted' }, sel.time !== undefined ? `Profiles at ${formatTime(sel.time)}` : `Window (${formatTime(sel.start)} – ${formatTime(sel.end)}]`),
        h('button', { type: 'button', class: 'whole-range', onclick: () => run(noSelection(s.key)) }, 'Whole range'),
      ] : null);
      loadSide(s, q, signal);
    }
    loadDiff(signal);
  }

  async function loadSide(s, q, signal) {
    if (!q) {
      replace(s.graph, stateBox('empty', 'Type a query for this side.'));
      return;
    }
    let parsed;
    try {
      parsed = await parseQuery(q);
    } catch (e) {
      if (signal.aborted) return;
      if (e instanceof ApiError && e.position) s.editor.setError(e);
      replace(s.graph, stateBox('error', 'The query is not valid.', e.message));
      return;
    }
    if (signal.aborted) return;
    if (queryKind(parsed) !== 'set') {
      replace(s.graph, stateBox('error', 'Each side takes a profile set: a selector, optionally with stack filters.', `got: ${q}`));
      return;
    }
    const range = rangeOf(s.key);
    const { start, end } = rangeWindow(range);
    replace(s.graph, stateBox('loading', 'Loading…'));
    try {
      const step = stepFor(start, end);
      const aligned = alignToStep(start, end, step);
      const data = await queryRange(`sum(${q})`, aligned.start, aligned.end, step, { signal });
      if (!data.result.length) {
        replace(s.graph, stateBox('empty', `No data in ${describeRange(range)}.`, 'Pick a longer range or another query.'));
        return;
      }
      const k = s.key;
      const g = metricsGraph(data.result, {
        start: aligned.start, end: aligned.end, selection: selectionOf(k),
        onRange: (a, b) => run({ ...noSelection(k), [`${k}pfrom`]: String(a), [`${k}pto`]: String(b) }),
        // A point sums its step's window (delta types): compare that window, whose total is
        // the point's value; a snapshot point is the profiles at its time.
        onPoint: (_metric, t) => {
          const p = pointSelection(parsed, {}, Math.round(t), step, (typeOf(parsed) || '').endsWith(':delta'));
          run({ [`${k}pfrom`]: p.pfrom, [`${k}pto`]: p.pto, [`${k}time`]: p.time });
        },
      });
      graphs.push(g);
      replace(s.graph, g);
    } catch (e) {
      if (e.name === 'AbortError') return;
      if (e instanceof ApiError && e.position) s.editor.setError(e, 'sum('.length);
      replace(s.graph, stateBox('error', 'The server answered with an error.', e.message));
    }
  }

  async function loadDiff(signal) {
    const qa = (state.a || '').trim();
    const qb = (state.b || '').trim();
    replace(diffHead);
    const [pa, pb] = await Promise.all([qa, qb].map((q) => (q ? parseQuery(q).catch(() => null) : null)));
    if (signal.aborted) return;
    if (!pa || !pb || queryKind(pa) !== 'set' || queryKind(pb) !== 'set') {
      replace(diffPanel, stateBox('empty', 'Give both A and B a query of a profile set to see how B differs from A.'));
      return;
    }
    const wa = selectionOf('a') || rangeWindow(rangeOf('a'));
    const wb = selectionOf('b') || rangeWindow(rangeOf('b'));
    // Both sides are evaluated at one time: each reaches its own window with [range] offset.
    const at = Math.max(wa.time ?? wa.end, wb.time ?? wb.end);
    const query = `diff(${sideQuery(qa, pa, wa, at)}, ${sideQuery(qb, pb, wb, at)})`;
    replace(diffHead, h('h2', {}, 'B compared with A'), h('code', { class: 'profile-query muted' }, query));
    replace(diffPanel, stateBox('loading', 'Loading the diff…'));
    try {
      const data = await queryProfile(query, { time: at }, { signal, granularity: state.granularity });
      const reload = (patch) => {
        writeState({ ...patch, focus: '' });
        state = readState();
        if (controller) controller.abort();
        controller = new AbortController();
        loadDiff(controller.signal);
      };
      profile = profileView(diffPanel, data.graphs[0].tree, { ...state }, (patch) => writeState(patch), { query, params: { time: (at / 1000).toFixed(3) } }, { reload });
    } catch (e) {
      if (e.name === 'AbortError') return;
      if (e.reason === 'no_profiles') {
        replace(diffPanel, emptyProfile('One side has no profiles in its range. Widen that side’s range (its graph shows where data is), or check its selector.'));
        return;
      }
      replace(diffPanel, stateBox('error', 'The server answered with an error.', e.message));
    }
  }

  load();
  const onPop = () => {
    if (location.pathname !== '/compare') return;
    state = readState();
    load();
  };
  window.addEventListener('popstate', onPop);
  return {
    destroy() {
      window.removeEventListener('popstate', onPop);
      if (controller) controller.abort();
      for (const g of graphs) g.destroy();
      if (profile) profile.destroy();
    },
  };
}
