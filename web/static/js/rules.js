// The rules page: the firing and pending alerts first, then the deploy insights (what changed
// when a service's version changed, with a link to compare the two windows), then every rule
// group with its rules' health, state, last evaluation and error, and each alerting rule's
// alerts (`/api/v1/rules` and `/api/v1/insights`, refreshed every 5 s).

import { h, replace, stateBox } from './dom.js';
import { rules, insights } from './api.js';
import { ago, formatSeconds, formatTime } from './units.js';

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
      const [r, i] = await Promise.all([rules(), insights()]);
      render(r, i);
    } catch (e) {
      replace(body, stateBox('error', 'Cannot load the rules.', e.message));
    }
    if (alive) timer = setTimeout(load, REFRESH_MS);
  };

  const render = (data, found) => {
    const groups = data.groups || [];
    const insightSection = found.length ? insightsSection(found) : null;
    if (!groups.length) {
      replace(body, insightSection, stateBox('empty', 'No rules are evaluated.',
        'Name rule files under rule_files in parca.yaml and reload (SIGHUP, or POST /-/reload with --web-enable-lifecycle); see documentation/rules.md.'));
      return;
    }
    const active = groups.flatMap((g) => g.rules.flatMap((r) => (r.alerts || []).map((a) => ({ rule: r.name, ...a }))));
    replace(body,
      h('section', { class: 'alerts-summary' },
        h('h2', {}, 'Alerts', h('span', { class: 'muted' }, ` (${active.filter((a) => a.state === 'firing').length} firing, ${active.filter((a) => a.state === 'pending').length} pending)`)),
        active.length ? alertTable(active) : h('p', { class: 'muted' }, 'No alert is pending or firing.')),
      insightSection,
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

/** A label value in a query's double quotes. */
const quoted = (v) => `"${v.replace(/\\/g, '\\\\').replace(/"/g, '\\"')}"`;

/**
 * The query of one side of an insight: its profile type, its service's labels and the change
 * label's value(s) (several old ones, `a,b`, as a regex).
 */
export function insightQuery(insight, values) {
  const matchers = Object.entries(insight.labels).map(([k, v]) => `${k}=${quoted(v)}`);
  const { label } = insight.change;
  matchers.push(values.length === 1
    ? `${label}=${quoted(values[0])}`
    : `${label}=~${quoted(values.map((v) => v.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')).join('|'))}`);
  return `${insight.profile_type}{${matchers.join(',')}}`;
}

/**
 * The compare view of an insight: A the old value(s) over the window before, B the new one over
 * the window after (each `(from, to]` in ms, so the windows' first milliseconds are in).
 */
export function compareLink(insight) {
  const ms = (s) => Math.round(s * 1000);
  return `/compare?${new URLSearchParams({
    a: insightQuery(insight, insight.change.from.split(',')),
    afrom: ms(insight.before[0]) - 1,
    ato: ms(insight.before[1]),
    b: insightQuery(insight, [insight.change.to]),
    bfrom: ms(insight.after[0]) - 1,
    bto: ms(insight.after[1]),
  })}`;
}

const percent = (share) => `${(share * 100).toFixed(1)}%`;
const points = (d) => `${d > 0 ? '+' : ''}${(d * 100).toFixed(1)} pp`;

function insightsSection(list) {
  return h('section', { class: 'insights' },
    h('h2', {}, 'Deploy insights', h('span', { class: 'muted' }, ` (${list.length})`)),
    list.map((i) => {
      const key = `${Object.values(i.labels).join('/')}:${i.change.from}→${i.change.to}`;
      return h('section', { class: 'insight', dataset: { insight: key } },
        h('h3', {}, chips(i.labels), ` ${i.change.label} ${i.change.from} → ${i.change.to}`,
          h('span', { class: 'muted' }, ` at ${formatTime(i.at * 1000)} · ${i.profile_type} `),
          h('a', { class: 'compare-link', href: compareLink(i), 'data-nav': '' }, 'Compare the two windows')),
        i.functions.length
          ? h('table', { class: 'targets-table insight-table' },
            h('thead', {}, h('tr', {}, ['Function', 'Before', 'After', 'Change', 'Self before', 'Self after'].map((c) => h('th', {}, c)))),
            h('tbody', {}, i.functions.map((f) => h('tr', { class: 'insight-function', dataset: { function: f.name } },
              h('td', {}, h('code', {}, f.name)),
              h('td', { class: 'value' }, percent(f.before)),
              h('td', { class: 'value' }, percent(f.after)),
              h('td', { class: `value change ${f.after > f.before ? 'grew' : 'shrank'}` }, points(f.after - f.before)),
              h('td', { class: 'value' }, percent(f.self_before)),
              h('td', { class: 'value' }, percent(f.self_after))))))
          : h('p', { class: 'muted' }, 'No function moved by more than the noise floor.'));
    }));
}
