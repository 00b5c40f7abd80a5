// The explorer: choose a profile type and labels (or type a query), a time range and `sum by`;
// the metrics graph shows totals over time; the profile below is the merge of the range, the
// profile of a clicked point, or the merge of a dragged range.

import { h, replace, stateBox, debounce } from './dom.js';
import { profileTypes, queryRange, queryExemplars, queryProfile, labelNames, parseQuery, serverFlags, traceUrl, ApiError } from './api.js';
import { matcherBuilder } from './matcherbuilder.js';
import { typeString, describe } from './profiletypes.js';
import { rangePicker, window as rangeWindow, graphWindow, stepFor, alignToStep, describeRange } from './timerange.js';
import { queryEditor } from './querybox.js';
import { metricsGraph, labelText } from './metricsgraph.js';
import { profileView, emptyProfile } from './profileview.js';
import { graphQuery, withMatchers, queryKind, typeOf, pointSelection, windowQuery } from './querytext.js';
import { readState, writeState, permalink } from './urlstate.js';
import { formatTime } from './units.js';

/** Series the metrics graph draws at most; the rest are one summed line. */
const GRAPH_SERIES = 20;
/** Exemplars (largest spans) asked per series for the metrics graph. */
const EXEMPLARS_PER_SERIES = 20;

const PROFILE_KEYS = ['time', 'labels', 'pfrom', 'pto', 'focus', 'search'];

/** Mounts the explorer into `app`; returns `{destroy}`. */
export function mountExplorer(app) {
  let state = readState();
  let types = [];
  let controller = null;
  let profile = null;
  let graph = null;
  /** The query shown and its structure from the server's parser. */
  let shown = { q: '', parsed: null };

  const typeSelect = h('select', { class: 'type-select', 'aria-label': 'profile type', onchange: () => chooseType(typeSelect.value) });
  const typeHelp = h('p', { class: 'type-help muted' });
  const editor = queryEditor({
    value: state.query || '',
    placeholder: 'process_cpu:samples:count:cpu:nanoseconds:delta{job="api"}',
    types: () => types,
    onSubmit: (text) => run({ query: text.trim() }),
    onInput: (text) => typeHelpSoon(text),
  });
  const byInput = h('input', { type: 'text', class: 'sum-by', placeholder: 'label, label', value: state.by || '', list: 'label-names', 'aria-label': 'sum by labels',
    onchange: () => run({ by: byInput.value.trim() }) });
  const labelList = h('datalist', { id: 'label-names' });
  const builder = matcherBuilder(() => typeOfText(editor.value()), async (m) => {
    const text = editor.value();
    try {
      editor.setValue(withMatchers(text, await parseQuery(text), m));
      run({ query: editor.value() });
    } catch (e) {
      editor.setError(e);
    }
  });
  const graphPanel = h('section', { class: 'panel graph-panel', 'aria-label': 'metrics graph' });
  const profileHead = h('div', { class: 'profile-head' });
  const profilePanel = h('section', { class: 'panel profile-panel', 'aria-label': 'profile' });
  const picker = h('div', { class: 'range-slot' });

  replace(app, h('div', { class: 'explorer' },
    h('section', { class: 'panel query-panel' },
      h('div', { class: 'row' }, h('label', { class: 'field' }, h('span', {}, 'Profile type'), typeSelect), typeHelp),
      h('div', { class: 'row query-row' }, editor.el, h('button', { type: 'button', class: 'run primary', onclick: () => run({ query: editor.value().trim() }) }, 'Run')),
      h('div', { class: 'row' }, builder.el,
        h('label', { class: 'field' }, h('span', {}, 'Sum by'), byInput), labelList,
        h('a', { class: 'compare-link', href: '#', onclick: (e) => { e.preventDefault(); openCompare(); } }, 'Compare this query…'),
        h('a', { class: 'permalink', href: '#', title: 'This view with the time range fixed, to share', onclick: (e) => { e.currentTarget.href = permalink([['from', 'to']]); } }, 'Permalink')),
      picker),
    graphPanel, h('div', { class: 'panel profile-wrap' }, profileHead, profilePanel)));

  /** The profile type a (maybe half-typed) query selects, from the server's lenient parse. */
  const typeOfText = (text) => parseQuery(text, { lenient: true }).then(typeOf, () => null);
  const typeHelpSoon = debounce(async (text) => {
    const type = await typeOfText(text);
    if (editor.value() === text) showTypeHelp(type);
  }, 150);

  const showTypeHelp = (type) => {
    if (!type) {
      typeHelp.textContent = '';
      return;
    }
    const d = describe(type);
    replace(typeHelp, h('strong', {}, d.title), ` — ${d.help}`);
    if ([...typeSelect.options].some((o) => o.value === type)) typeSelect.value = type;
  };

  /** The query with its profile type written before `{` replaced, or the type alone. */
  const chooseType = async (type) => {
    const q = editor.value();
    const sel = (await parseQuery(q, { lenient: true }).catch(() => null))?.selectors[0];
    const chars = Array.from(q);
    const named = sel && sel.profile_type && chars.slice(sel.start, sel.start + sel.profile_type.length).join('') === sel.profile_type;
    const next = named ? [...chars.slice(0, sel.start), type, ...chars.slice(sel.start + sel.profile_type.length)].join('') : type;
    editor.setValue(next);
    run({ query: next });
  };

  const openCompare = () => {
    const { start, end } = rangeWindow(state);
    const mid = Math.round((start + end) / 2);
    const q = state.query || '';
    history.pushState(null, '', `/compare?${new URLSearchParams({ a: q, afrom: start, ato: mid, b: q, bfrom: mid, bto: end })}`);
    window.dispatchEvent(new PopStateEvent('popstate'));
  };

  /** Applies a change of query, range or grouping: new history entry, selection cleared. */
  const run = (patch) => {
    const clear = Object.fromEntries(PROFILE_KEYS.map((k) => [k, '']));
    writeState({ ...clear, ...patch }, { push: true });
    state = readState();
    load();
  };

  const renderPicker = () => replace(picker, rangePicker({ from: state.from || 'now-1h', to: state.to || 'now' }, (r) => run(r)));

  async function load() {
    if (controller) controller.abort();
    controller = new AbortController();
    const { signal } = controller;
    renderPicker();
    const q = (state.query || '').trim();
    if (editor.value().trim() !== q) editor.setValue(q);
    byInput.value = state.by || '';
    editor.setError(null);
    if (!q) {
      showTypeHelp(null);
      replace(graphPanel, stateBox('empty', 'Choose a profile type or type a query to start.'));
      replace(profilePanel);
      replace(profileHead);
      return;
    }
    let parsed;
    try {
      parsed = await parseQuery(q);
    } catch (e) {
      if (signal.aborted) return;
      typeOfText(q).then(showTypeHelp);
      replace(profileHead);
      showError(graphPanel, e, q, q);
      showError(profilePanel, e, q, q);
      return;
    }
    if (signal.aborted) return;
    shown = { q, parsed };
    const type = typeOf(parsed);
    showTypeHelp(type);
    const range = { from: state.from || 'now-1h', to: state.to || 'now' };
    const { start, end } = graphWindow(range);
    loadGraph(q, parsed, start, end, range, signal);
    loadProfile(q, parsed, start, end, range, signal);
    if (type) labelNames(`{__name__="${type}"}`, { signal }).then((names) => replace(labelList, names.filter((n) => n !== '__name__').map((n) => h('option', { value: n })))).catch(() => {});
  }

  async function loadGraph(q, parsed, start, end, range, signal) {
    const kind = queryKind(parsed);
    if (graph) graph.destroy();
    graph = null;
    if (kind === 'profile') {
      replace(graphPanel, stateBox('empty', 'No metrics graph for a profile query.', 'merge(…) and diff(…) give one profile. Type a selector such as process_cpu:samples:count:cpu:nanoseconds:delta{job="api"} to see its totals over time.'));
      return;
    }
    replace(graphPanel, stateBox('loading', 'Loading the metrics graph…'));
    const gq = kind === 'series' ? q : graphQuery(q, state.by);
    try {
      // A fleet's thousands of series: the biggest GRAPH_SERIES drawn, the rest as one line.
      // Exemplars, the largest spans, are an extra: a store without spans, or a failure, shows
      // the graph without them.
      const step = stepFor(start, end);
      const aligned = alignToStep(start, end, step);
      const [data, exemplars] = await Promise.all([
        queryRange(gq, aligned.start, aligned.end, step, { signal, limit: GRAPH_SERIES }),
        queryExemplars(gq, start, end, { signal, limit: EXEMPLARS_PER_SERIES }).catch(() => []),
      ]);
      if (!data.result.length) {
        replace(graphPanel, stateBox('empty', `No series match in ${describeRange(range)}.`,
          h('p', {}, 'Try a longer range (24h or 7d), remove label matchers, or check the ', h('a', { href: '/targets', 'data-nav': '' }, 'targets'), ' are up and scraped.')));
        return;
      }
      const sel = state.time ? { time: Number(state.time) } : state.pfrom ? { start: Number(state.pfrom), end: Number(state.pto) } : null;
      graph = metricsGraph(data.result, {
        start: aligned.start, end: aligned.end, selection: sel,
        // A point's profile: the merge of the window its value sums (delta types), or the
        // profiles at its time (snapshots).
        onPoint: (metric, t) => {
          const delta = (metric.__name__ || typeOf(parsed) || '').endsWith(':delta');
          select(pointSelection(parsed, metric, Math.round(t), step, delta));
        },
        // A selection of whole steps (of steps of whole 5 minutes): its merge reads summaries.
        onRange: (a, b) => {
          const w = alignToStep(a, b, step);
          select({ pfrom: String(w.start), pto: String(w.end), time: '', labels: '' });
        },
        omitted: data.omitted,
        exemplars,
        // A span's profile: its series' profile at the span's time, its samples selected by
        // the span's ids (`{…, span_id="…"}`; its trace id kept for the link to the trace).
        onExemplar: (series, span, t) => {
          const ids = span.span_id ? { span_id: span.span_id, ...(span.trace_id ? { trace_id: span.trace_id } : {}) } : span;
          select({ time: String(Math.round(t)), labels: JSON.stringify({ ...series, ...ids }), pfrom: '', pto: '' });
        },
      });
      const count = data.omitted
        ? `the ${data.result.length} largest of ${(data.result.length + data.omitted.series).toLocaleString('en-US')} series`
        : `${data.result.length} series`;
      replace(graphPanel, h('div', { class: 'panel-title' }, h('code', {}, gq), h('span', { class: 'muted' }, ` · ${count} · ${describeRange(range)}`)), graph);
    } catch (e) {
      if (e.name === 'AbortError') return;
      showError(graphPanel, e, gq, q);
    }
  }

  const select = (patch) => {
    writeState({ ...patch, focus: '' }, { push: true });
    state = readState();
    if (controller) controller.abort();
    controller = new AbortController();
    const q = state.query.trim();
    if (shown.q !== q) {
      load();
      return;
    }
    const range = { from: state.from || 'now-1h', to: state.to || 'now' };
    const { start, end } = graphWindow(range);
    loadGraph(q, shown.parsed, start, end, range, controller.signal);
    loadProfile(q, shown.parsed, start, end, range, controller.signal);
  };

  async function loadProfile(q, parsed, start, end, range, signal) {
    const kind = queryKind(parsed);
    if (profile) profile.destroy();
    profile = null;
    if (kind === 'series') {
      replace(profileHead);
      replace(profilePanel, stateBox('empty', 'An aggregation or arithmetic gives numbers, not a profile.', 'Use the “Sum by” field with a plain selector to keep both the graph and the profile.'));
      return;
    }
    let pq;
    let win;
    let title;
    if (kind === 'profile') {
      pq = q;
      win = { start, end };
      title = `Profile of ${describeRange(range)}`;
    } else if (state.time) {
      const labels = state.labels ? JSON.parse(state.labels) : {};
      pq = withMatchers(q, parsed, labels);
      win = { time: Number(state.time) };
      title = `Profile at ${formatTime(win.time)} of ${labelText(labels)}`;
    } else if (state.pfrom && state.labels) {
      // A clicked point of a delta type: the window its value sums, (pfrom, pto].
      const labels = JSON.parse(state.labels);
      const [a, b] = [Number(state.pfrom), Number(state.pto)];
      pq = windowQuery(q, parsed, labels, a, b);
      win = { time: b };
      title = `Profile of ${labelText(labels)} in (${formatTime(a)} – ${formatTime(b)}]`;
    } else if (state.pfrom) {
      pq = `merge(${q})`;
      win = { start: Number(state.pfrom), end: Number(state.pto) };
      title = `Merged profile of ${formatTime(win.start)} – ${formatTime(win.end)}`;
    } else {
      pq = `merge(${q})`;
      win = { start, end };
      title = `Merged profile of ${describeRange(range)}`;
    }
    const back = state.time || state.pfrom
      ? h('button', { type: 'button', class: 'back-to-range', onclick: () => select({ time: '', labels: '', pfrom: '', pto: '' }) }, 'Merge the whole range')
      : null;
    replace(profileHead, h('h2', {}, title), h('code', { class: 'profile-query muted' }, pq), back);
    showTraceLink(parsed, state.labels ? JSON.parse(state.labels) : {}, signal);
    replace(profilePanel, stateBox('loading', 'Loading the profile…'));
    try {
      const data = await queryProfile(pq, win, { signal, granularity: state.granularity });
      showProfile(data, pq, win);
    } catch (e) {
      if (e.name === 'AbortError') return;
      if (e.reason === 'no_profiles') {
        replace(profilePanel, emptyProfile(`Nothing was stored for this selector in ${win.time ? 'the time clicked' : 'this range'}. Widen the time range (try 24h or 7d), drop a label matcher, or check /targets.`));
        return;
      }
      showError(profilePanel, e, pq, q);
    }
  }

  /**
   * A link to the trace of the span shown, when the profile is one trace's (a clicked exemplar,
   * or `trace_id="…"` in the query) and the server has `--web-trace-url-template`.
   */
  async function showTraceLink(parsed, labels, signal) {
    const ids = { ...idsOf(parsed), ...labels };
    if (!ids.trace_id) return;
    const href = traceUrl((await serverFlags())['web-trace-url-template'], ids);
    if (!href || signal.aborted) return;
    profileHead.append(h('a', { class: 'trace-link', href, target: '_blank', rel: 'noopener noreferrer', title: `trace ${ids.trace_id}` }, 'Open the trace ↗'));
  }

  function showProfile(data, pq, win) {
    const params = win.time !== undefined ? { time: (win.time / 1000).toFixed(3) } : { start: (win.start / 1000).toFixed(3), end: (win.end / 1000).toFixed(3) };
    const onState = (patch) => writeState(patch);
    if (data.grouped) {
      const k = Math.min(Number(state.group || 0), data.graphs.length - 1);
      const tabs = h('div', { class: 'groups' }, data.graphs.map((g, j) => h('button', {
        type: 'button', class: j === k ? 'active' : '',
        onclick: () => {
          writeState({ group: j ? String(j) : '', focus: '' });
          state = readState();
          showProfile(data, pq, win);
        },
      }, labelText(g.labels), h('span', { class: 'muted' }, ` (${g.profiles})`))));
      const inner = h('div');
      replace(profilePanel, tabs, inner);
      profile = profileView(inner, data.graphs[k].tree, { ...state }, onState, null, { reload: reloadProfile });
      return;
    }
    const tree = data.graphs[0].tree;
    if (tree.n < 2) {
      replace(profilePanel, emptyProfile('The profiles in this range have no samples: try a longer range or another profile type.'));
      return;
    }
    profile = profileView(profilePanel, tree, { ...state }, onState, { query: pq, params }, { reload: reloadProfile });
  }

  /** Stores `patch` (a granularity) and loads the profile again, the graph kept. */
  function reloadProfile(patch) {
    writeState({ ...patch, focus: '' });
    state = readState();
    if (controller) controller.abort();
    controller = new AbortController();
    const range = { from: state.from || 'now-1h', to: state.to || 'now' };
    const { start, end } = graphWindow(range);
    loadProfile(shown.q, shown.parsed, start, end, range, controller.signal);
  }

  /**
   * An error of the query `sent`, built around the user's text `q`: a parse error is marked in
   * the editor (once, at the user's text) and the panel points there.
   */
  function showError(panel, e, sent, q) {
    const isParse = e instanceof ApiError && e.status === 400 && e.position;
    if (!isParse) {
      replace(panel, stateBox('error', 'The server answered with an error.', e.message));
      return;
    }
    const shift = Math.max(0, sent.indexOf(q));
    const inUserText = e.position.line > 1 || (e.position.column > shift && e.position.column <= shift + q.length + 1);
    if (inUserText) {
      // The query sent as typed (the graph's) is the better picture; a wrapped one fills in.
      if (shift === 0 || !editor.hasError()) editor.setError(e, shift);
      replace(panel, stateBox('error', 'The query is not valid: the message is under the query.'));
    } else {
      replace(panel, stateBox('error', 'The query is not valid.', e.message));
    }
  }

  // Profile types fill the picker; without a query, the first CPU type with data is chosen.
  profileTypes(null).then((list) => {
    types = list.map(typeString);
    const options = types.map((t) => h('option', { value: t }, `${describe(t).title} — ${t}`));
    replace(typeSelect, h('option', { value: '', disabled: true, selected: true }, types.length ? 'Choose a profile type…' : 'No profiles stored yet'), options);
    if (!types.length && !state.query) {
      replace(graphPanel, stateBox('empty', 'No profiles are stored yet.',
        h('p', {}, 'Add scrape targets to parca.yaml (see ', h('a', { href: '/targets', 'data-nav': '' }, 'Targets'), ') or push a profile: ',
          h('code', {}, 'curl -X POST --data-binary @cpu.pb.gz "http://HOST:7070/api/v1/write?__name__=process_cpu&job=app"'))));
      return;
    }
    if (!state.query) {
      // The default: a CPU type with data in the range, else any type with data, else any.
      const pick = (list) => list.find((t) => t.startsWith('process_cpu:') || t.startsWith('parca_agent')) || list[0];
      profileTypes(rangeWindow({ from: state.from || 'now-1h', to: state.to || 'now' })).catch(() => []).then((inRange) => {
        if (state.query) return;
        writeState({ query: pick(inRange.map(typeString)) || pick(types) });
        state = readState();
        load();
      });
    } else {
      typeOfText(state.query).then(showTypeHelp);
    }
  }).catch((e) => replace(graphPanel, stateBox('error', 'Cannot list profile types.', e.message)));

  load();
  const onPop = () => {
    if (location.pathname !== '/') return;
    state = readState();
    load();
  };
  window.addEventListener('popstate', onPop);
  return {
    destroy() {
      window.removeEventListener('popstate', onPop);
      if (controller) controller.abort();
      if (profile) profile.destroy();
      if (graph) graph.destroy();
    },
  };
}

/** `trace_id` and `span_id` of `parsed`'s first selector where it matches them exactly. */
function idsOf(parsed) {
  const matchers = parsed.selectors && parsed.selectors[0] ? parsed.selectors[0].matchers : [];
  return Object.fromEntries(matchers
    .filter((m) => m.op === '=' && (m.name === 'trace_id' || m.name === 'span_id'))
    .map((m) => [m.name, m.value]));
}
