// The targets page: every scrape target grouped by job, with health, labels, last scrape,
// its duration, the scrape interval and the last error, per profile endpoint too.

import { h, replace, stateBox } from './dom.js';
import { targets } from './api.js';
import { ago, formatSeconds } from './units.js';

const REFRESH_MS = 5000;

/** Mounts the targets page into `app`; returns `{destroy}`. */
export function mountTargets(app) {
  const body = h('div', { class: 'targets' });
  replace(app, h('section', { class: 'panel' }, h('h1', {}, 'Targets'), body));
  replace(body, stateBox('loading', 'Loading targets…'));
  let timer = 0;
  let alive = true;

  const load = async () => {
    try {
      render(await targets());
    } catch (e) {
      replace(body, stateBox('error', 'Cannot load the targets.', e.message));
    }
    if (alive) timer = setTimeout(load, REFRESH_MS);
  };

  const render = (data) => {
    const active = data.activeTargets || [];
    if (!active.length) {
      replace(body, stateBox('empty', 'No scrape targets are configured.',
        'Add a job under scrape_configs in parca.yaml and reload (SIGHUP, or POST /-/reload with --web-enable-lifecycle); profiles can also be pushed to /api/v1/write.'));
      return;
    }
    const jobs = new Map();
    for (const t of active) {
      const job = t.scrapePool || t.labels.job || '(no job)';
      if (!jobs.has(job)) jobs.set(job, []);
      jobs.get(job).push(t);
    }
    replace(body, [...jobs.entries()].sort().map(([job, list]) => {
      const up = list.filter((t) => t.health === 'up').length;
      return h('section', { class: 'job', dataset: { job } },
        h('h2', {}, job, h('span', { class: 'muted' }, ` (${up}/${list.length} up)`)),
        h('table', { class: 'targets-table' },
          h('thead', {}, h('tr', {}, ['Endpoint', 'Health', 'Labels', 'Last scrape', 'Duration', 'Interval', 'Error'].map((c) => h('th', {}, c)))),
          h('tbody', {}, list.flatMap((t) => [targetRow(t), ...(t.profiles || []).map(profileRow)]))));
    }), (data.droppedTargets || []).length ? h('p', { class: 'muted' }, `${data.droppedTargets.length} targets dropped by relabeling.`) : null);
  };

  load();
  return {
    destroy() {
      alive = false;
      clearTimeout(timer);
    },
  };
}

function health(value) {
  return h('span', { class: `health ${value}` }, value);
}

function when(iso) {
  if (!iso) return h('span', { class: 'muted' }, 'never');
  const t = Date.parse(iso);
  return h('time', { datetime: iso, title: new Date(t).toLocaleString() }, ago(t));
}

function targetRow(t) {
  return h('tr', { class: 'target' },
    h('td', {}, h('a', { href: t.scrapeUrl, rel: 'noopener' }, t.scrapeUrl.replace(/\?.*$/, ''))),
    h('td', {}, health(t.health)),
    h('td', { class: 'labels' }, Object.entries(t.labels).map(([k, v]) => h('span', { class: 'label-chip' }, `${k}="${v}"`))),
    h('td', {}, when(t.lastScrape)),
    h('td', {}, t.lastScrape ? formatSeconds(t.lastScrapeDuration) : ''),
    h('td', {}, t.scrapeInterval || ''),
    h('td', { class: 'error-text' }, t.lastError || ''));
}

function profileRow(p) {
  return h('tr', { class: 'endpoint' },
    h('td', { class: 'endpoint-name' }, '↳ ', h('code', {}, p.name), ' ', h('span', { class: 'muted' }, p.scrapeUrl.replace(/^[a-z]+:\/\/[^/]+/, ''))),
    h('td', {}, health(p.health)),
    h('td', {}),
    h('td', {}, when(p.lastScrape)),
    h('td', {}, p.lastScrape ? formatSeconds(p.lastScrapeDuration) : ''),
    h('td', {}),
    h('td', { class: 'error-text' }, p.lastError || ''));
}
