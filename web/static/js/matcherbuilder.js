// The selector builder: pick a label and one of its values from the API, add `label="value"`.

import { h, replace } from './dom.js';
import { labelNames, labelValues } from './api.js';

/** Pick a label and a value from the API, then add `label="value"` to the selector. */
export function matcherBuilder(currentType, onAdd) {
  const nameSel = h('select', { class: 'matcher-name', 'aria-label': 'label name' });
  const valueSel = h('select', { class: 'matcher-value', 'aria-label': 'label value' });
  const match = () => {
    const t = currentType();
    return t ? `{__name__="${t}"}` : '{__name__=~".+"}';
  };
  const loadNames = async () => {
    try {
      const names = (await labelNames(match())).filter((n) => n !== '__name__');
      replace(nameSel, h('option', { value: '' }, 'label…'), names.map((n) => h('option', { value: n }, n)));
    } catch {
      replace(nameSel, h('option', { value: '' }, 'labels unavailable'));
    }
  };
  nameSel.addEventListener('focus', loadNames);
  nameSel.addEventListener('mousedown', () => { if (nameSel.options.length <= 1) loadNames(); });
  nameSel.addEventListener('change', async () => {
    replace(valueSel);
    if (!nameSel.value) return;
    const values = await labelValues(nameSel.value, match()).catch(() => []);
    replace(valueSel, h('option', { value: '' }, 'value…'), values.map((v) => h('option', { value: v }, v)));
  });
  replace(nameSel, h('option', { value: '' }, 'label…'));
  const el = h('div', { class: 'field matcher-builder' }, h('span', {}, 'Add filter'), nameSel, h('span', {}, '='), valueSel,
    h('button', { type: 'button', class: 'add-matcher', onclick: () => { if (nameSel.value && valueSel.value) onAdd({ [nameSel.value]: valueSel.value }); } }, 'Add'));
  return { el, refresh: loadNames };
}
