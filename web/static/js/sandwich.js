// The sandwich view of one function: its callers as an upside-down icicle above, its callees as
// an icicle below, each merged across every place the function runs (`format=columns` with
// `function`: the server's two trees, whose first levels are `pprof -peek`'s).

import { h, replace, stateBox } from './dom.js';
import { getBytes } from './api.js';
import { readColumns } from './tree.js';
import { Icicle } from './icicle.js';
import { formatValue, formatPercent, formatDelta } from './units.js';

/**
 * Mounts the sandwich of `state.sandwich` for `query` over `params` into `root`. `functions`
 * lists names to offer in the picker (the table's); `onState(patch)` keeps the function in
 * the URL; `onPick(name)` shows another function's sandwich. Returns `{destroy}`.
 */
export function sandwichView(root, { query, params, state, functions, onPick, total }) {
  const controller = new AbortController();
  const icicles = [];
  const name = state.sandwich || '';
  const picker = h('input', {
    type: 'search', class: 'sandwich-function', list: 'sandwich-functions', value: name,
    placeholder: 'Function name', 'aria-label': 'function of the sandwich',
    onchange: (e) => { if (e.target.value.trim()) onPick(e.target.value.trim()); },
  });
  const options = h('datalist', { id: 'sandwich-functions' }, functions.slice(0, 2000).map((f) => h('option', { value: f })));
  const summary = h('span', { class: 'muted sandwich-summary' });
  const callersBox = h('div', { class: 'graph-box sandwich-callers' });
  const calleesBox = h('div', { class: 'graph-box sandwich-callees' });
  replace(root, h('div', { class: 'sandwich' },
    h('div', { class: 'sandwich-tools' }, h('label', { class: 'field-inline' }, 'Sandwich of ', picker), options, summary),
    h('h4', { class: 'sandwich-label' }, 'Callers ↑ (merged across every call site; the function at the bottom)'),
    callersBox,
    h('h4', { class: 'sandwich-label' }, 'Callees ↓ (what it calls, merged)'),
    calleesBox));
  if (!name) {
    replace(callersBox, stateBox('empty', 'Pick a function: type its name above, or use “Sandwich” in the table, on a frame or next to the search box.'));
    return { destroy: () => {} };
  }
  replace(callersBox, stateBox('loading', 'Loading the sandwich…'));
  getBytes('/api/v1/query', { ...params, query, format: 'columns', function: name, granularity: state.granularity }, { signal: controller.signal })
    .then((bytes) => {
      const { graphs } = readColumns(bytes);
      const part = (p) => graphs.find((g) => g.tree.meta.sandwich === p).tree;
      const callers = part('callers');
      const callees = part('callees');
      const unit = callees.meta.unit;
      const isDiff = callees.isDiff;
      summary.textContent = isDiff
        ? ` · A ${formatValue(callees.base[0], unit)} → B ${formatValue(callees.value[0], unit)} (${formatDelta(callees.value[0] - callees.base[0], unit)})`
        : ` · cumulative ${formatValue(callees.value[0], unit)} (${formatPercent(callees.value[0], total)} of the profile)`;
      const tooltip = (tree) => (i) => {
        const rows = [];
        const row = (k, v) => rows.push(h('tr', {}, h('th', {}, k), h('td', {}, v)));
        if (isDiff) {
          row('A (base)', formatValue(tree.base[i], unit));
          row('B', formatValue(tree.value[i], unit));
          row('Change', formatDelta(tree.value[i] - tree.base[i], unit));
        } else {
          row('Total', `${formatValue(tree.value[i], unit)} · ${formatPercent(tree.value[i], tree.value[0])} of the function`);
          row('Self', formatValue(tree.self[i], unit));
        }
        const file = tree.strings[tree.file[i]];
        if (file) row('File', tree.line[i] ? `${file}:${tree.line[i]}` : file);
        return h('div', {}, h('div', { class: 'tt-name' }, i === 0 ? name : tree.nameOf(i)), h('table', {}, rows),
          h('div', { class: 'tt-hint muted' }, 'click to zoom'));
      };
      replace(callersBox);
      replace(calleesBox);
      const up = new Icicle(callersBox, { flip: true, tooltip: tooltip(callers) });
      const down = new Icicle(calleesBox, { tooltip: tooltip(callees) });
      up.setTree(callers);
      down.setTree(callees);
      icicles.push(up, down);
      root.dataset.complete = 'true';
    })
    .catch((e) => {
      if (e.name === 'AbortError') return;
      const missing = e.reason === 'no_such_function';
      replace(callersBox, stateBox(missing ? 'empty' : 'error', missing ? `No frame is named “${name}”.` : 'Cannot show the sandwich.', e.message));
    });
  return {
    icicles,
    destroy: () => {
      controller.abort();
      for (const i of icicles) i.destroy();
    },
  };
}
