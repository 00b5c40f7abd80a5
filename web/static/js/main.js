// Entry point: routes the page by path (/, /compare, /targets, /rules) and keeps links in the app.

import { mountExplorer } from './explorer.js';
import { mountCompare } from './compare.js';
import { mountTargets } from './targets.js';
import { mountRules } from './rules.js';
import { stateBox, replace } from './dom.js';
import { currentWarnings } from './api.js';

const PAGES = { '/': ['explorer', mountExplorer], '/compare': ['compare', mountCompare], '/targets': ['targets', mountTargets], '/rules': ['rules', mountRules] };
const app = document.getElementById('app');
let current = null;
let currentPath = null;

function route() {
  const path = location.pathname.replace(/\/+$/, '') || '/';
  if (path === currentPath && current) return; // the page itself reacts to popstate
  if (current) current.destroy();
  current = null;
  currentPath = path;
  const page = PAGES[path];
  for (const a of document.querySelectorAll('nav a[data-page]')) a.classList.toggle('active', page && a.dataset.page === page[0]);
  if (!page) {
    replace(app, stateBox('error', `No page at ${location.pathname}.`, 'Use the Explorer, Compare, Targets or Rules links above.'));
    return;
  }
  document.title = `Parca · ${page[0][0].toUpperCase()}${page[0].slice(1)}`;
  current = page[1](app);
}

document.addEventListener('click', (e) => {
  const a = e.target.closest('a[data-nav]');
  if (!a || e.ctrlKey || e.metaKey || e.shiftKey || e.button !== 0) return;
  e.preventDefault();
  if (a.getAttribute('href') !== `${location.pathname}${location.search}`) history.pushState(null, '', a.getAttribute('href'));
  currentPath = null; // a nav link always opens the page afresh
  route();
});
window.addEventListener('popstate', route);

// A partial answer (a querier's shard did not answer) is said above every page, for as long as
// the latest answers carry warnings.
const banner = document.getElementById('warnings');
function showWarnings(warnings) {
  banner.hidden = warnings.length === 0;
  const title = document.createElement('strong');
  title.textContent = 'Partial answer: some data is missing from what is shown.';
  const list = document.createElement('ul');
  for (const w of warnings) {
    const li = document.createElement('li');
    li.textContent = w;
    list.append(li);
  }
  banner.replaceChildren(title, list);
}
window.addEventListener('parca:warnings', (e) => showWarnings(e.detail));
showWarnings(currentWarnings());
route();
