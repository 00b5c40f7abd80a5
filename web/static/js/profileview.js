// One profile on screen: toolbar (view, granularity, bottom-up, search, hide frames, downloads),
// breadcrumb, icicle graph and function table, call graph and sandwich, all driven by state kept
// in the URL.

import { h, replace, debounce, download, stateBox } from './dom.js';
import { Icicle } from './icicle.js';
import { invert, hide, hidePredicate, search, topTable, folded, binaries } from './tree.js';
import { functionTable } from './table.js';
import { icicleSVG } from './svgexport.js';
import { formatValue, formatPercent, formatDelta } from './units.js';
import { url } from './api.js';
import { withFrameFilters } from './querytext.js';
import { callGraphView } from './callgraph.js';
import { sandwichView } from './sandwich.js';

/** Values of `granularity` the switch offers (the server's names). */
const GRANULARITIES = [['', 'Functions'], ['line', 'Lines'], ['address', 'Addresses']];

/**
 * Renders the flame-graph `original` (a `Tree`, as `readColumns` gives it) into `root`.
 * `state`: `{view, invert, search, hide, hidebin, focus, diffmode, sort, filter, granularity,
 * sandwich, nodes, gfocus}`; `onState(patch)` stores changes in the URL; `pprofQuery` is
 * `{query, params}` for the pprof download (the server renders it, with the frames hidden here
 * and only the samples through the zoomed frame's path) and for the call graph and sandwich
 * views, which the server computes (both are offered only with it); `hooks.reload(patch)` stores
 * `patch` and loads the profile again (a new granularity).
 *
 * The icicle is drawn at once; the function table and the list of binaries, which cost a pass
 * over the whole tree and many DOM nodes, follow right after the first paint.
 */
export function profileView(root, original, state, onState, pprofQuery, hooks = {}) {
  const meta = original.meta;
  const unit = meta.unit;
  const isDiff = original.isDiff;
  let tree = original;
  let tableTree = original;
  let matches = null;
  let hideError = '';
  let pending = 0; // the latest deferred table build; older ones are dropped
  let destroyed = false;

  const breadcrumb = h('nav', { class: 'breadcrumb', 'aria-label': 'zoom path' });
  const searchInfo = h('span', { class: 'search-info muted', 'aria-live': 'polite' });
  const hideInfo = h('span', { class: 'hide-info' });
  const graphBox = h('div', { class: 'graph-box' });
  const tableBox = h('div', { class: 'table-box' });
  const altBox = h('div', { class: 'alt-box' });
  let alt = null; // the call graph or sandwich view mounted in altBox
  const summary = h('div', { class: 'profile-summary' });

  const tooltip = (i) => {
    const name = i === 0 ? 'root' : tree.nameOf(i);
    const file = tree.strings[tree.file[i]];
    const line = tree.line[i];
    const bin = tree.strings[tree.binary[i]];
    const parent = tree.parent[i];
    const focus = icicle.focusNode;
    const rows = [];
    const row = (k, v) => rows.push(h('tr', {}, h('th', {}, k), h('td', {}, v)));
    if (isDiff) {
      row('A (base)', `${formatValue(tree.base[i], unit)} (${formatPercent(tree.base[i], tree.meta.base_total)})`);
      row('B', `${formatValue(tree.value[i], unit)} (${formatPercent(tree.value[i], tree.meta.total)})`);
      const d = tree.value[i] - tree.base[i];
      row('Change', `${formatDelta(d, unit)}${tree.base[i] ? ` (${formatPercent(d, tree.base[i])})` : ' (new)'}`);
      const ds = (tree.value[i] / (tree.meta.total || 1) - tree.base[i] / (tree.meta.base_total || 1)) * 100;
      row('Share change', `${ds >= 0 ? '+' : '−'}${Math.abs(ds).toFixed(2)} points`);
      row('Self A / B', `${formatValue(tree.baseSelf[i], unit)} / ${formatValue(tree.self[i], unit)}`);
    } else {
      row('Total', `${formatValue(tree.value[i], unit)} · ${formatPercent(tree.value[i], tree.value[0])} of all`
        + (parent >= 0 ? ` · ${formatPercent(tree.value[i], tree.value[parent])} of parent` : '')
        + (focus > 0 && focus !== i ? ` · ${formatPercent(tree.value[i], tree.value[focus])} of zoom` : ''));
      row('Self', `${formatValue(tree.self[i], unit)} · ${formatPercent(tree.self[i], tree.value[0])} of all`);
    }
    if (file) row('File', line ? `${file}:${line}` : file);
    if (bin) row('Binary', bin);
    return h('div', {}, h('div', { class: 'tt-name' }, name), h('table', {}, rows),
      h('div', { class: 'tt-hint muted' }, 'click to zoom · ctrl+wheel zooms · drag pans'));
  };

  const icicle = new Icicle(graphBox, {
    tooltip,
    onFocus: (i) => {
      renderBreadcrumb(i);
      updatePprofLink();
      onState({ focus: i === 0 ? '' : tree.path(i).slice(1).map((j) => tree.nameOf(j)).join(';') });
    },
  });

  const renderBreadcrumb = (i) => {
    const path = tree.path(i);
    replace(breadcrumb,
      h('button', { type: 'button', class: 'reset', disabled: i === 0, onclick: () => icicle.focus(0) }, 'Reset zoom'),
      path.map((j, k) => [k ? h('span', { class: 'sep' }, '›') : null,
        h('button', { type: 'button', class: j === i ? 'crumb current' : 'crumb', onclick: () => icicle.focus(j) }, j === 0 ? 'root' : tree.nameOf(j))]),
      pprofQuery && i > 0 ? h('button', {
        type: 'button', class: 'frame-sandwich', title: 'Every caller and callee of this function, merged',
        onclick: () => openSandwich(tree.nameOf(i)),
      }, `Sandwich of ${tree.nameOf(i)}`) : null);
  };

  // The call graph or the sandwich, computed by the server for this query.
  const mountAlt = () => {
    if (alt) alt.destroy();
    alt = null;
    if (!pprofQuery || (state.view !== 'graph' && state.view !== 'sandwich')) {
      replace(altBox);
      return;
    }
    const common = { query: pprofQuery.query, params: pprofQuery.params, state };
    if (state.view === 'graph') {
      alt = callGraphView(altBox, {
        ...common,
        onState: (patch, { reload = false } = {}) => {
          Object.assign(state, patch);
          onState(patch);
          if (reload) mountAlt();
        },
        onSandwich: openSandwich,
      });
    } else {
      alt = sandwichView(altBox, {
        ...common,
        functions: topTable(tableTree).sort((a, b) => b.cum - a.cum).map((r) => r.name),
        total: tableTree.value[0],
        onPick: openSandwich,
      });
    }
  };

  /** Shows the sandwich of function `name`. */
  const openSandwich = (name) => {
    state.sandwich = name;
    onState({ sandwich: name });
    setView('sandwich');
  };

  /** The function a search names exactly (`name` or `/^name$/`), if the tree has it. */
  const searchedFunction = () => {
    const text = (state.search || '').trim();
    const m = /^\/\^(.*)\$\/$/.exec(text);
    const name = m ? m[1].replace(/\\(.)/g, '$1') : text;
    if (!name) return '';
    for (let i = 1; i < tree.n; i++) if (tree.nameOf(i) === name) return name;
    return '';
  };

  const applySearch = () => {
    try {
      matches = search(tree, state.search || '');
    } catch (e) {
      matches = null;
      searchInfo.textContent = `bad pattern: ${e.message}`;
      searchInfo.className = 'search-info error-text';
      icicle.setSearch(null);
      return;
    }
    icicle.setSearch(matches ? matches.flags : null);
    if (searchSandwich) searchSandwich.hidden = !searchedFunction();
    searchInfo.className = 'search-info muted';
    if (!matches) searchInfo.textContent = '';
    else if (!matches.count) searchInfo.textContent = 'no frame matches';
    else if (isDiff) searchInfo.textContent = `${matches.count} frames · A ${formatPercent(matches.base, tree.meta.base_total)} → B ${formatPercent(matches.value, tree.meta.total)}`;
    else searchInfo.textContent = `${matches.count} frames · ${formatValue(matches.value, unit)} · ${formatPercent(matches.value, tree.value[0])} of all`;
  };

  // The tree on screen: hidden frames removed, then turned bottom-up.
  const rebuild = () => {
    tree = original;
    hideError = '';
    if (state.hide || state.hidebin) {
      try {
        tree = hide(tree, hidePredicate(tree, state.hide, state.hidebin));
      } catch (e) {
        hideError = `bad pattern: ${e.message}`;
      }
    }
    // The table counts flat and cumulative on the call tree: inverting does not change them.
    tableTree = tree;
    if (state.invert === '1') tree = invert(tree);
    hideInfo.textContent = hideError;
    hideInfo.className = hideError ? 'hide-info error-text' : 'hide-info';
    const focus = state.focus ? tree.find(state.focus.split(';')) : 0;
    icicle.setTree(tree, { diffMode: state.diffmode === 'relative' ? 'relative' : 'absolute', focus });
    renderBreadcrumb(focus);
    updatePprofLink();
    applySearch();
    renderSummary();
    if (state.view !== 'icicle') replace(tableBox, stateBox('loading', 'Building the table…'));
    afterPaint(renderTable, { latest: true });
  };

  // Runs `f` once the frame being prepared is on screen (a task after the next animation
  // frame); with `latest`, only if no later call with `latest` came in between.
  const afterPaint = (f, { latest = false } = {}) => {
    const token = latest ? ++pending : pending;
    requestAnimationFrame(() => setTimeout(() => {
      if (!destroyed && (!latest || token === pending)) f();
    }, 0));
  };

  const renderSummary = () => {
    const total = isDiff
      ? `A ${formatValue(tree.meta.base_total, unit)} → B ${formatValue(tree.meta.total, unit)} (${formatDelta(tree.meta.total - tree.meta.base_total, unit)})`
      : formatValue(tree.value[0], unit);
    replace(summary,
      h('span', {}, h('strong', {}, meta.sample_type || 'value'), ` (${unit}) · total ${total}`),
      h('span', { class: 'muted' }, ` · ${tree.n.toLocaleString()} frames${state.invert === '1' ? ' · bottom-up' : ''}`));
  };

  const renderTable = () => {
    if (state.view === 'icicle') {
      replace(tableBox);
      return;
    }
    const rows = topTable(tableTree);
    replace(tableBox, functionTable(rows, { unit, total: tableTree.value[0], isDiff }, state,
      (patch) => { Object.assign(state, patch); onState(patch); },
      (name) => focusFunction(name), pprofQuery ? openSandwich : null));
  };

  // A table click: highlight every frame of the function and zoom to its heaviest one.
  const focusFunction = (name) => {
    const exact = `/^${name.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')}$/`;
    state.search = exact;
    searchInput.value = exact;
    onState({ search: exact });
    applySearch();
    let best = -1;
    for (let i = 1; i < tree.n; i++) if (tree.nameOf(i) === name && (best < 0 || tree.value[i] > tree.value[best])) best = i;
    if (best >= 0) {
      if (state.view !== 'icicle' && state.view !== 'both') setView('both');
      icicle.focus(best);
    }
  };

  const setView = (view) => {
    state.view = view;
    onState({ view: view === 'both' ? '' : view });
    root.dataset.view = view;
    for (const b of viewButtons.querySelectorAll('button')) b.classList.toggle('active', b.dataset.view === view);
    renderTable();
    mountAlt();
    icicle.resize();
  };

  const searchInput = h('input', {
    type: 'search', class: 'search', placeholder: 'Search frames (text or /regex/)', value: state.search || '', 'aria-label': 'search frames',
    oninput: debounce((e) => {
      state.search = e.target.value;
      onState({ search: state.search });
      applySearch();
    }, 150),
  });
  const searchSandwich = pprofQuery ? h('button', {
    type: 'button', class: 'search-sandwich', hidden: true, title: 'Callers and callees of the function searched for',
    onclick: () => { const name = searchedFunction(); if (name) openSandwich(name); },
  }, 'Sandwich') : null;
  const granularitySelect = hooks.reload ? h('select', {
    class: 'granularity', 'aria-label': 'granularity: what one frame is',
    title: 'What one frame is: a function, a source line (name file:line) or an address',
    onchange: (e) => hooks.reload({ granularity: e.target.value, sandwich: '', gfocus: '' }),
  }, GRANULARITIES.map(([v, label]) => h('option', { value: v, selected: (state.granularity || '') === v }, label))) : null;
  const hideInput = h('input', {
    type: 'text', class: 'hide-pattern', placeholder: 'Hide frames matching /regex/', value: state.hide || '', 'aria-label': 'hide frames by name',
    onchange: (e) => {
      state.hide = e.target.value;
      state.focus = '';
      onState({ hide: state.hide, focus: '' });
      rebuild();
    },
  });
  const binSelect = h('select', {
    class: 'hide-binary', 'aria-label': 'hide frames of a binary',
    onchange: (e) => {
      state.hidebin = e.target.value;
      state.focus = '';
      onState({ hidebin: state.hidebin, focus: '' });
      rebuild();
    },
    hidden: true,
  });
  const fillBinaries = () => {
    const bins = binaries(original);
    binSelect.hidden = !bins.length;
    replace(binSelect, h('option', { value: '' }, 'Hide binary…'), bins.map((b) => {
      const value = `^${b.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')}$`;
      return h('option', { value, selected: state.hidebin === value }, b);
    }));
  };
  const invertBox = h('label', { class: 'toggle' }, h('input', {
    type: 'checkbox', class: 'invert', checked: state.invert === '1',
    onchange: (e) => {
      state.invert = e.target.checked ? '1' : '';
      state.focus = '';
      onState({ invert: state.invert, focus: '' });
      rebuild();
    },
  }), ' Bottom-up');
  const diffModeSelect = isDiff ? h('select', {
    class: 'diff-mode', 'aria-label': 'diff mode',
    onchange: (e) => {
      state.diffmode = e.target.value;
      onState({ diffmode: e.target.value === 'absolute' ? '' : e.target.value });
      rebuild();
    },
  }, h('option', { value: 'absolute', selected: state.diffmode !== 'relative' }, 'Absolute change'),
  h('option', { value: 'relative', selected: state.diffmode === 'relative' }, 'Relative (share of total)')) : null;
  const views = [['icicle', 'Icicle'], ['both', 'Both'], ['table', 'Table']];
  if (pprofQuery) views.push(['graph', 'Call graph'], ['sandwich', 'Sandwich']);
  const viewButtons = h('div', { class: 'segmented', role: 'group', 'aria-label': 'view' },
    views.map(([v, label]) =>
      h('button', { type: 'button', dataset: { view: v }, onclick: () => setView(v) }, label)));
  const fileBase = `profile-${(meta.sample_type || 'profile').replace(/\W+/g, '_')}`;
  const pprofLink = pprofQuery ? h('a', { class: 'dl-pprof', download: `${fileBase}.pb.gz`, title: 'From the server: hidden frames removed, only the samples through the zoomed frames' }, 'pprof') : null;
  // The server hides the same frames; a zoom keeps the samples with every frame of its path.
  const updatePprofLink = () => {
    if (!pprofLink) return;
    const focus = icicle.focusNode;
    const zoom = focus > 0 ? tree.path(focus).slice(1).map((j) => tree.nameOf(j)) : [];
    pprofLink.href = url('/api/v1/query', {
      ...pprofQuery.params,
      query: withFrameFilters(pprofQuery.query, zoom),
      format: 'pprof',
      hide: hideError ? '' : state.hide,
      hide_binary: hideError ? '' : state.hidebin,
    });
  };
  const downloads = h('div', { class: 'downloads' },
    h('span', { class: 'muted' }, 'Download:'),
    pprofLink,
    h('button', {
      type: 'button', class: 'dl-svg', title: 'The graph as it is on screen',
      onclick: () => download(`${fileBase}.svg`, icicleSVG(icicle, `${meta.sample_type} (${unit})`, titleText), 'image/svg+xml'),
    }, 'SVG'),
    h('button', {
      type: 'button', class: 'dl-folded', title: 'Stacks below the zoomed frame, hidden frames removed',
      onclick: () => download(`${fileBase}.folded.txt`, folded(tree, icicle.focusNode), 'text/plain'),
    }, 'folded'));
  const titleText = (i) => {
    const name = i === 0 ? 'root' : tree.nameOf(i);
    return isDiff
      ? `${name}: A ${formatValue(tree.base[i], unit)}, B ${formatValue(tree.value[i], unit)}`
      : `${name}: ${formatValue(tree.value[i], unit)} (${formatPercent(tree.value[i], tree.value[0])})`;
  };

  replace(root,
    h('div', { class: 'profile-toolbar' }, viewButtons, granularitySelect, invertBox, diffModeSelect,
      h('span', { class: 'search-wrap' }, searchInput, searchSandwich, searchInfo), hideInput, binSelect, hideInfo, downloads),
    summary, breadcrumb,
    isDiff ? h('div', { class: 'diff-legend' }, h('span', { class: 'swatch grew' }), 'grew in B ', h('span', { class: 'swatch shrank' }), 'shrank in B · width: both sides together · deeper colour: bigger change') : null,
    h('div', { class: 'profile-panes' }, graphBox, tableBox, altBox));
  const view = views.some(([v]) => v === state.view) ? state.view : 'both';
  root.dataset.view = view;
  for (const b of viewButtons.querySelectorAll('button')) b.classList.toggle('active', b.dataset.view === view);
  state.view = view;
  rebuild();
  mountAlt();
  performance.mark('parca:first-draw');
  afterPaint(() => {
    fillBinaries();
    root.dataset.complete = 'true';
    performance.mark('parca:complete');
  });
  return {
    icicle,
    get tree() { return tree; },
    destroy: () => {
      destroyed = true;
      icicle.destroy();
      if (alt) alt.destroy();
    },
  };
}

/** The "no profile" state with advice. */
export function emptyProfile(advice) {
  return stateBox('empty', 'No profile data for this query and range.', advice);
}
