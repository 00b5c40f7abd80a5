// The query editor: a text area that completes profile types, label names and label values
// from the API, and marks a parse error at its line and column.

import { h, replace, debounce } from './dom.js';
import { labelNames, labelValues, parseQuery } from './api.js';
import { describe } from './profiletypes.js';
import { typeOf } from './querytext.js';

/**
 * Where the cursor is in a selector: completing a profile type, a label name or a label value.
 * Returns `{kind: 'type'|'label'|'value', prefix, from, label?, quoted?}` or null.
 */
export function completionContext(text, cursor) {
  const before = text.slice(0, cursor);
  let inString = null;
  let brace = -1;
  let segStart = 0;
  for (let i = 0; i < before.length; i++) {
    const c = before[i];
    if (inString) {
      if (c === '\\') i++;
      else if (c === inString) inString = null;
    } else if (c === '"' || c === "'" || c === '`') inString = c;
    else if (c === '{') {
      brace = i;
      segStart = i + 1;
    } else if (c === '}') brace = -1;
    else if (c === ',' && brace >= 0) segStart = i + 1;
  }
  if (brace >= 0) {
    const seg = before.slice(segStart);
    let m = /^\s*([a-zA-Z_]\w*)?$/.exec(seg);
    if (m) return { kind: 'label', prefix: m[1] || '', from: cursor - (m[1] || '').length };
    m = /^\s*([a-zA-Z_]\w*)\s*(=~|!~|!=|=)\s*(["'`]?)([^"'`]*)$/.exec(seg);
    if (m) return { kind: 'value', label: m[1], prefix: m[4], quoted: m[3] !== '', from: cursor - m[4].length - (m[3] ? 0 : 0) };
    return null;
  }
  if (inString) return null;
  const m = /(^|[\s(,])([a-zA-Z_][\w:]*)$/.exec(before);
  if (m && !/\b(by|without)\s*\([^)]*$/.test(before)) return { kind: 'type', prefix: m[2], from: cursor - m[2].length };
  return null;
}

/** The character offset of a 1-based line and column in `text`. */
export function offsetOf(text, line, column) {
  const lines = text.split('\n');
  let off = 0;
  for (let k = 0; k < line - 1 && k < lines.length; k++) off += lines[k].length + 1;
  return off + column - 1;
}

/**
 * The editor. `types()` lists known profile type strings; `onSubmit(text)` runs the query.
 * Returns `{el, value(), setValue(text), setError(err)}`.
 */
export function queryEditor({ value = '', placeholder = '', types, onSubmit, onInput, label = 'query' }) {
  const area = h('textarea', { class: 'query-input', rows: 1, spellcheck: 'false', placeholder, 'aria-label': label, autocomplete: 'off' });
  area.value = value;
  const mirror = h('div', { class: 'query-mirror', 'aria-hidden': 'true' });
  const list = h('ul', { class: 'completions', role: 'listbox', hidden: true });
  const errorBox = h('div', { class: 'query-error', role: 'alert', hidden: true });
  const el = h('div', { class: 'query-editor' }, h('div', { class: 'query-wrap' }, mirror, area, list), errorBox);
  let items = [];
  let active = 0;
  let ctx = null;
  let errorAt = -1;
  let request = 0;
  let fetched = []; // the last answer, unfiltered

  const fit = () => {
    area.style.height = 'auto';
    area.style.height = `${Math.max(area.scrollHeight, 34)}px`;
  };
  const paintMirror = () => {
    const text = area.value;
    if (errorAt < 0) {
      replace(mirror, text);
      return;
    }
    const at = Math.min(errorAt, text.length);
    replace(mirror, text.slice(0, at), h('mark', { class: 'error-mark' }, text.slice(at, at + 1) || ' '), text.slice(at + 1));
  };

  const close = () => {
    list.hidden = true;
    items = [];
  };
  const show = (found) => {
    items = found.slice(0, 50);
    active = 0;
    if (!items.length) return close();
    replace(list, items.map((it, k) => h('li', {
      role: 'option', class: k === active ? 'active' : '', 'aria-selected': k === active ? 'true' : 'false',
      onmousedown: (e) => {
        e.preventDefault();
        accept(k);
      },
    }, h('code', {}, it.text), it.help ? h('span', { class: 'muted' }, ` ${it.help}`) : null)));
    list.hidden = false;
  };
  const highlight = () => {
    [...list.children].forEach((li, k) => {
      li.className = k === active ? 'active' : '';
      li.setAttribute('aria-selected', k === active ? 'true' : 'false');
    });
  };

  const accept = (k) => {
    const it = items[k];
    if (!it || !ctx) return;
    const text = area.value;
    const cursor = area.selectionStart;
    let insert = it.text;
    let end = cursor;
    if (ctx.kind === 'value') {
      const q = ctx.quoted ? '' : '"';
      insert = `${q}${it.text.replace(/["\\]/g, '\\$&')}"`;
      // Swallow a closing quote already there.
      if (text[end] === '"') end++;
    } else if (ctx.kind === 'label') {
      insert = `${it.text}="`;
    }
    area.value = text.slice(0, ctx.from) + insert + text.slice(end);
    const pos = ctx.from + insert.length;
    area.setSelectionRange(pos, pos);
    close();
    changed();
    if (ctx.kind === 'label') complete();
  };

  const complete = debounce(async () => {
    ctx = completionContext(area.value, area.selectionStart);
    if (!ctx || document.activeElement !== area) return close();
    const mine = ++request;
    // The type the query selects, from the server's lenient parse of the half-typed text.
    const type = await parseQuery(area.value, { lenient: true }).then(typeOf, () => null);
    const match = type ? `{__name__="${type}"}` : '{__name__=~".+"}';
    let all = [];
    try {
      if (ctx.kind === 'type') {
        all = (types() || []).map((t) => ({ text: t, help: describe(t).title }));
      } else if (ctx.kind === 'label') {
        all = (await labelNames(match)).filter((n) => n !== '__name__').map((n) => ({ text: n }));
      } else {
        all = (await labelValues(ctx.label, match)).map((v) => ({ text: v }));
      }
    } catch {
      all = [];
    }
    if (mine !== request) return;
    const now = completionContext(area.value, area.selectionStart);
    if (!now || now.kind !== ctx.kind) return close();
    ctx = now;
    fetched = all;
    show(all.filter((it) => it.text.startsWith(now.prefix) && (it.text !== now.prefix || now.kind === 'value')));
  }, 120);

  const changed = () => {
    errorAt = -1;
    errorBox.hidden = true;
    area.classList.remove('has-error');
    paintMirror();
    fit();
    if (onInput) onInput(area.value);
  };

  area.addEventListener('input', () => {
    changed();
    // Narrow the open list at once; the API is asked again after a pause.
    const now = completionContext(area.value, area.selectionStart);
    if (now && ctx && now.kind === ctx.kind && now.label === ctx.label && fetched.length) {
      ctx = now;
      show(fetched.filter((it) => it.text.startsWith(now.prefix) && it.text !== now.prefix));
    }
    complete();
  });
  area.addEventListener('click', complete);
  area.addEventListener('blur', () => setTimeout(close, 100));
  area.addEventListener('keydown', (e) => {
    if (!list.hidden && items.length) {
      if (e.key === 'ArrowDown' || e.key === 'ArrowUp') {
        e.preventDefault();
        active = (active + (e.key === 'ArrowDown' ? 1 : items.length - 1)) % items.length;
        highlight();
        return;
      }
      if (e.key === 'Tab' || (e.key === 'Enter' && !e.shiftKey && !e.ctrlKey)) {
        e.preventDefault();
        accept(active);
        return;
      }
      if (e.key === 'Escape') {
        close();
        return;
      }
    }
    if (e.key === 'Enter' && !e.shiftKey) {
      e.preventDefault();
      close();
      onSubmit(area.value);
    }
  });
  area.addEventListener('scroll', () => {
    mirror.scrollTop = area.scrollTop;
  });
  paintMirror();
  requestAnimationFrame(fit);

  return {
    el,
    value: () => area.value,
    setValue(text) {
      area.value = text;
      changed();
    },
    focus: () => area.focus(),
    hasError: () => !errorBox.hidden,
    /**
     * Shows an API error; a parse error is marked at its place. `shift` is where the editor's
     * text starts in the query that was sent (e.g. 6 for `merge(…)`). Null clears.
     */
    setError(err, shift = 0) {
      if (!err) {
        errorAt = -1;
        errorBox.hidden = true;
        area.classList.remove('has-error');
        paintMirror();
        return;
      }
      const pos = err.position;
      errorAt = pos ? offsetOf(area.value, pos.line, pos.line === 1 ? pos.column - shift : pos.column) : -1;
      if (errorAt < 0) errorAt = 0;
      area.classList.toggle('has-error', !!pos);
      replace(errorBox, h('pre', {}, err.message));
      errorBox.hidden = false;
      paintMirror();
    },
  };
}
