// The table of functions: flat and cumulative values, sortable, with a filter box. Clicking a
// row asks the graph to focus that function.

import { h, replace, debounce } from './dom.js';
import { formatValue, formatPercent, formatDelta } from './units.js';

const MAX_ROWS = 500; // rows drawn at once; the filter narrows the rest

/**
 * A table of `rows` (from `topTable`), values in `unit` out of `total`. `state` holds
 * `{sort, filter}`; `onState(patch)` persists changes; `onPick(name)` is a row click;
 * `onSandwich(name)`, when given, opens a function's sandwich from a button in its row.
 */
export function functionTable(rows, { unit, total, isDiff }, state, onState, onPick, onSandwich = null) {
  let sort = state.sort || (isDiff ? 'delta' : 'flat');
  let filter = state.filter || '';
  const body = h('tbody');
  const count = h('span', { class: 'muted table-count' });
  const columns = isDiff
    ? [['name', 'Function'], ['baseFlat', 'Flat A'], ['flat', 'Flat B'], ['delta', 'Flat change'], ['baseCum', 'Cum A'], ['cum', 'Cum B']]
    : [['name', 'Function'], ['flat', 'Flat'], ['flatPct', 'Flat %'], ['cum', 'Cumulative'], ['cumPct', 'Cum %']];
  const key = {
    name: (r) => r.name,
    flat: (r) => r.flat,
    flatPct: (r) => r.flat,
    cum: (r) => r.cum,
    cumPct: (r) => r.cum,
    baseFlat: (r) => r.baseFlat,
    baseCum: (r) => r.baseCum,
    delta: (r) => Math.abs(r.flat - r.baseFlat),
  };
  const head = h('tr');
  const render = () => {
    replace(head, columns.map(([k, label]) => h('th', {
      class: `${k === 'name' ? 'name' : 'num'} ${sort === k ? 'sorted' : ''}`,
      dataset: { sort: k },
      'aria-sort': sort === k ? (k === 'name' ? 'ascending' : 'descending') : null,
      onclick: () => {
        sort = k;
        onState({ sort });
        render();
      },
    }, label, sort === k ? (k === 'name' ? ' ▲' : ' ▼') : '')), onSandwich ? h('th', { class: 'actions' }) : null);
    let list = rows;
    if (filter) {
      const low = filter.toLowerCase();
      list = list.filter((r) => r.name.toLowerCase().includes(low));
    }
    const f = key[sort];
    list = list.slice().sort(sort === 'name' ? (a, b) => (a.name < b.name ? -1 : 1) : (a, b) => f(b) - f(a));
    const shown = list.slice(0, MAX_ROWS);
    replace(body, shown.map((r) => h('tr', { onclick: () => onPick(r.name), title: 'Focus the graph on this function' },
      columns.map(([k]) => h('td', { class: k === 'name' ? 'name' : 'num' }, cell(k, r))),
      onSandwich ? h('td', { class: 'actions' }, h('button', {
        type: 'button', class: 'row-sandwich', title: 'Callers and callees of this function (sandwich)',
        onclick: (e) => { e.stopPropagation(); onSandwich(r.name); },
      }, 'sandwich')) : null)));
    if (!shown.length) replace(body, h('tr', {}, h('td', { colspan: columns.length + (onSandwich ? 1 : 0), class: 'muted' }, filter ? `No function matches “${filter}”.` : 'No functions.')));
    count.textContent = list.length > MAX_ROWS ? `showing ${MAX_ROWS} of ${list.length} functions` : `${list.length} functions`;
  };
  const cell = (k, r) => {
    switch (k) {
      case 'name': return r.name;
      case 'flat': return formatValue(r.flat, unit);
      case 'cum': return formatValue(r.cum, unit);
      case 'flatPct': return formatPercent(r.flat, total);
      case 'cumPct': return formatPercent(r.cum, total);
      case 'baseFlat': return formatValue(r.baseFlat, unit);
      case 'baseCum': return formatValue(r.baseCum, unit);
      case 'delta': return h('span', { class: r.flat > r.baseFlat ? 'grew' : r.flat < r.baseFlat ? 'shrank' : '' },
        formatDelta(r.flat - r.baseFlat, unit), r.baseFlat ? ` (${formatPercent(r.flat - r.baseFlat, r.baseFlat)})` : '');
      default: return '';
    }
  };
  const input = h('input', {
    type: 'search', class: 'table-filter', placeholder: 'Filter functions', value: filter, 'aria-label': 'filter functions',
    oninput: debounce((e) => {
      filter = e.target.value;
      onState({ filter });
      render();
    }, 120),
  });
  render();
  return h('div', { class: 'table-panel' },
    h('div', { class: 'table-tools' }, input, count),
    h('div', { class: 'table-scroll' }, h('table', { class: 'functions' }, h('thead', {}, head), body)));
}
