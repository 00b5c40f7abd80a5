// The rules page: the firing and pending alerts first, then every rule group with its rules'
// health, state, last evaluation and error, and each alerting rule's alerts
// (`/api/v1/rules`, refreshed every 5 s).

import { h, replace, stateBox } from './dom.js';
import { rules } from './api.js';
import { ago, formatSeconds } from './units.js';

const REFRESH_MS = 5000;
const NEVER = '0001-01-01T00:00:00Z';

/** Mounts the rules page into `app`; returns `{destroy}`. */
export function mountRules(app) {
  const body = h('div', { class: 'rules' });
  replace(app, h('section', { class: 'panel' }, h('h1', {}, 'Rules and alerts'), body));
  replace(body, stateBox('loading', 'Loading rules…'));
  let timer = 0;
  let alive = true;

  const load = async () => {
    try {
      render(await rules());
    } catch (e) {
      replace(body, stateBox('error', 'Cannot load the rules.', e.message));
    }
    if (alive) timer = setTimeout(load, REFRESH_MS);
  };

  const render = (data) => {
    const groups = data.groups || [];
    if (!groups.length) {
      replace(body, stateBox('empty', 'No rules are evaluated.',
        'Name rule files under rule_files in parca.yaml and reload (SIGHUP, or POST /-/reload with --web-enable-lifecycle); see documentation/rules.md.'));
      return;
    }
    const active = groups.flatMap((g) => g.rules.flatMap((r) => (r.alerts || []).map((a) => ({ rule: r.name, ...a }))));
    replace(body,
      h('section', { class: 'alerts-summary' },
        h('h2', {}, 'Alerts', h('span', { class: 'muted' }, ` (${active.filter((a) => a.state === 'firing').length} firing, ${active.filter((a) => a.state === 'pending').length} pending)`)),
        active.length ? alertTable(active) : h('p', { class: 'muted' }, 'No alert is pending or firing.')),
      groups.map(groupSection));
  };

  load();
  return {
    destroy() {
      alive = false;
      clearTimeout(timer);
    },
  };
}

function badge(kind, value) {
  return h('span', { class: `${kind} ${value}` }, value);
}

function when(iso) {
  if (!iso || iso === NEVER) return h('span', { class: 'muted' }, 'never');
  const t = Date.parse(iso);
  return h('time', { datetime: iso, title: new Date(t).toLocaleString() }, ago(t));
}

function chips(labels) {
  return Object.entries(labels || {}).map(([k, v]) => h('span', { class: 'label-chip' }, `${k}="${v}"`));
}

function alertTable(alerts) {
  return h('table', { class: 'targets-table alerts-table' },
    h('thead', {}, h('tr', {}, ['Alert', 'State', 'Labels', 'Active since', 'Value', 'Annotations'].map((c) => h('th', {}, c)))),
    h('tbody', {}, alerts.map((a) => h('tr', { class: `alert ${a.state}` },
      h('td', {}, a.rule || a.labels.alertname),
      h('td', {}, badge('state', a.state)),
      h('td', { class: 'labels' }, chips(a.labels)),
      h('td', {}, when(a.activeAt)),
      h('td', { class: 'value' }, Number(a.value).toPrecision(4)),
      h('td', { class: 'annotations' }, Object.entries(a.annotations || {}).map(([k, v]) => h('div', {}, h('span', { class: 'muted' }, `${k}: `), v)))))));
}

function groupSection(g) {
  return h('section', { class: 'job rule-group', dataset: { group: g.name } },
    h('h2', {}, g.name, h('span', { class: 'muted' }, ` ${g.file} · every ${formatSeconds(g.interval)} · evaluated `, when(g.lastEvaluation), ` in ${formatSeconds(g.evaluationTime)}`)),
    h('table', { class: 'targets-table rules-table' },
      h('thead', {}, h('tr', {}, ['Rule', 'Query', 'Health', 'State', 'Labels', 'Last evaluation', 'Duration', 'Error'].map((c) => h('th', {}, c)))),
      h('tbody', {}, g.rules.map((r) => h('tr', { class: `rule ${r.type}`, dataset: { rule: r.name } },
        h('td', {}, h('strong', {}, r.name), h('div', { class: 'muted' }, r.type === 'alerting' ? `alert${r.duration ? `, for ${formatSeconds(r.duration)}` : ''}` : 'record')),
        h('td', {}, h('code', { class: 'rule-query' }, r.query)),
        h('td', {}, badge('health', r.health)),
        h('td', {}, r.type === 'alerting' ? badge('state', r.state) : ''),
        h('td', { class: 'labels' }, chips(r.labels)),
        h('td', {}, when(r.lastEvaluation)),
        h('td', {}, formatSeconds(r.evaluationTime)),
        h('td', { class: 'error-text' }, r.lastError || ''))))));
}
