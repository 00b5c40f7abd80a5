// The metrics graph: one line per series of `query_range`, hover for labels and value, click a
// point to open that profile, drag across to merge a range. Exemplars (the largest spans of
// `query_exemplars`) are diamonds at their time and value; a click opens that span's profile.

import { h } from './dom.js';
import { SERIES } from './colors.js';
import { formatValue, formatTime } from './units.js';

const NS = 'http://www.w3.org/2000/svg';
const HEIGHT = 200;
const M = { left: 70, right: 12, top: 10, bottom: 24 };

const svg = (tag, attrs = {}) => {
  const el = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  return el;
};

/** `{job="api", instance="a"}` from a label map (without `__name__` when others exist). */
export function labelText(metric) {
  const entries = Object.entries(metric).filter(([k]) => k !== '__name__' || Object.keys(metric).length === 1);
  if (!entries.length) return 'all series together';
  return `{${entries.map(([k, v]) => `${k}="${v}"`).join(', ')}}`;
}

function niceTicks(max, count) {
  if (max <= 0) return [0];
  const raw = max / count;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw);
  const out = [0];
  // The last tick is at or above the maximum, so every point is inside the plot.
  while (out[out.length - 1] < max) out.push(out.length * step);
  return out;
}

const TIME_STEPS = [1e3, 2e3, 5e3, 10e3, 15e3, 30e3, 60e3, 120e3, 300e3, 600e3, 900e3, 1800e3, 3600e3, 2 * 3600e3, 3 * 3600e3, 6 * 3600e3, 12 * 3600e3, 86400e3, 2 * 86400e3, 7 * 86400e3];

/** Round local times between `start` and `end`, at most `max` of them, with their labels. */
export function timeTicks(start, end, max) {
  const step = TIME_STEPS.find((s) => (end - start) / s <= max) || Math.ceil((end - start) / max / 86400e3) * 86400e3;
  // Steps of an hour or more fall on local hours (and days on local midnight).
  const offset = step >= 3600e3 ? new Date(start).getTimezoneOffset() * 60e3 : 0;
  const pad = (n) => String(n).padStart(2, '0');
  const out = [];
  for (let t = Math.ceil((start - offset) / step) * step + offset; t <= end; t += step) {
    const d = new Date(t);
    const hm = `${pad(d.getHours())}:${pad(d.getMinutes())}`;
    const label = step >= 86400e3 ? `${pad(d.getMonth() + 1)}-${pad(d.getDate())}` : step < 60e3 ? `${hm}:${pad(d.getSeconds())}` : hm;
    out.push([t, label]);
  }
  return out;
}

/**
 * Draws `result` (the matrix of `query_range`) over `[start, end]` ms. `selection` is
 * `{time}` or `{start, end}` to mark; `onPoint(metric, timeMs)` and `onRange(startMs, endMs)`
 * report clicks and drags. `omitted` (`data.omitted` of a `limit`ed query) is drawn as one
 * dashed grey line, the sum of the series left out. `exemplars` (the `data` of
 * `query_exemplars`) are drawn as diamonds; `onExemplar(seriesLabels, spanLabels, timeMs)`
 * reports a click on one.
 */
export function metricsGraph(result, { start, end, selection, onPoint, onRange, omitted, exemplars, onExemplar }) {
  const box = h('div', { class: 'metrics-graph' });
  const tip = h('div', { class: 'tooltip graph-tip', hidden: true });
  const legend = h('ul', { class: 'legend' });
  const series = result.map((s, k) => ({
    metric: s.metric,
    unit: s.unit,
    periodUnit: s.periodUnit,
    color: SERIES[k % SERIES.length],
    points: s.values.map(([t, v], j) => ({ t: t * 1000, v: Number(v), pv: s.periodValues ? Number(s.periodValues[j][1]) : undefined })),
  }));
  const othersName = omitted ? `the other ${omitted.series.toLocaleString('en-US')} series, summed` : '';
  if (omitted && omitted.values.length) {
    series.push({
      metric: null,
      other: true,
      unit: series[0] ? series[0].unit : '',
      periodUnit: series[0] ? series[0].periodUnit : undefined,
      color: '#8a8f98',
      points: omitted.values.map(([t, v], j) => ({ t: t * 1000, v: Number(v), pv: omitted.periodValues ? Number(omitted.periodValues[j][1]) : undefined })),
    });
  }
  const unit = series[0] ? series[0].unit : '';
  // One diamond per span, coloured as its series' line where the graph draws that series.
  const colorOf = (labels) => {
    const key = JSON.stringify(Object.entries(labels).sort());
    const s = series.find((x) => x.metric && JSON.stringify(Object.entries(x.metric).sort()) === key);
    return s ? s.color : '#5b6270';
  };
  const marks = (exemplars || []).flatMap((s) => s.exemplars.map((e) => ({
    series: s.seriesLabels, span: e.labels, t: e.timestamp * 1000, v: Number(e.value), color: colorOf(s.seriesLabels),
  }))).filter((m) => m.t >= start && m.t <= end);
  let max = 0;
  for (const s of series) for (const p of s.points) if (p.v > max) max = p.v;
  for (const m of marks) if (m.v > max) max = m.v;
  const root = svg('svg', { class: 'graph-svg', height: HEIGHT, role: 'img', 'aria-label': 'metrics graph' });
  box.append(root, tip);

  const draw = () => {
    const width = Math.max(300, box.clientWidth || 800);
    root.setAttribute('width', width);
    root.setAttribute('viewBox', `0 0 ${width} ${HEIGHT}`);
    root.replaceChildren();
    const iw = width - M.left - M.right;
    const ih = HEIGHT - M.top - M.bottom;
    const ticks = niceTicks(max * 1.05 || 1, 4);
    const top = ticks[ticks.length - 1] || 1;
    const X = (t) => M.left + ((t - start) / (end - start || 1)) * iw;
    const Y = (v) => M.top + ih - (v / top) * ih;
    for (const v of ticks) {
      root.append(svg('line', { x1: M.left, x2: width - M.right, y1: Y(v), y2: Y(v), class: 'grid' }));
      const label = svg('text', { x: M.left - 6, y: Y(v) + 4, 'text-anchor': 'end', class: 'axis' });
      label.textContent = formatValue(v, unit);
      root.append(label);
    }
    for (const [t, text] of timeTicks(start, end, Math.max(2, Math.floor(iw / 90)))) {
      root.append(svg('line', { x1: X(t), x2: X(t), y1: M.top + ih, y2: M.top + ih + 4, class: 'grid' }));
      const label = svg('text', { x: X(t), y: HEIGHT - 6, 'text-anchor': 'middle', class: 'axis' });
      label.textContent = text;
      root.append(label);
    }
    if (selection && selection.start !== undefined) {
      root.append(svg('rect', { x: X(selection.start), y: M.top, width: Math.max(2, X(selection.end) - X(selection.start)), height: ih, class: 'selection' }));
    }
    if (selection && selection.time !== undefined) {
      root.append(svg('line', { x1: X(selection.time), x2: X(selection.time), y1: M.top, y2: M.top + ih, class: 'selected-time' }));
    }
    for (const s of series) {
      if (s.points.length > 1) {
        const d = s.points.map((p, j) => `${j ? 'L' : 'M'}${X(p.t).toFixed(1)},${Y(p.v).toFixed(1)}`).join('');
        root.append(svg('path', { d, stroke: s.color, class: s.other ? 'line other' : 'line' }));
      }
      if (s.points.length < 120) {
        for (const p of s.points) root.append(svg('circle', { cx: X(p.t), cy: Y(p.v), r: 2.5, fill: s.color, class: 'point' }));
      }
    }
    for (const m of marks) {
      const [x, y] = [X(m.t), Y(m.v)];
      root.append(svg('path', { d: `M${x.toFixed(1)},${(y - 5).toFixed(1)}l5,5l-5,5l-5,-5z`, fill: m.color, class: 'exemplar' }));
    }
    const brush = svg('rect', { class: 'brush', y: M.top, height: ih, width: 0, visibility: 'hidden' });
    const guide = svg('line', { class: 'guide', y1: M.top, y2: M.top + ih, visibility: 'hidden' });
    const dot = svg('circle', { r: 5, class: 'hover-dot', visibility: 'hidden' });
    const overlay = svg('rect', { x: M.left, y: M.top, width: iw, height: ih, class: 'overlay' });
    root.append(brush, guide, dot, overlay);

    // A diamond within 6 pixels of the pointer wins over the lines' points.
    const nearestMark = (mx, my) => {
      let best = null;
      let bestD = 36;
      for (const m of marks) {
        const d = (X(m.t) - mx) ** 2 + (Y(m.v) - my) ** 2;
        if (d <= bestD) {
          bestD = d;
          best = m;
        }
      }
      return best;
    };
    const nearest = (mx, my) => {
      let best = null;
      let bestD = Infinity;
      for (const s of series) {
        for (const p of s.points) {
          const dx = X(p.t) - mx;
          const dy = Y(p.v) - my;
          const d = dx * dx * 4 + dy * dy; // horizontal distance counts more
          if (d < bestD) {
            bestD = d;
            best = { s, p };
          }
        }
      }
      return best;
    };
    const toTime = (mx) => start + ((mx - M.left) / iw) * (end - start);
    let drag = null;
    let hit = null;
    const local = (e) => {
      const r = root.getBoundingClientRect();
      return [e.clientX - r.left, e.clientY - r.top];
    };
    overlay.addEventListener('mousedown', (e) => {
      drag = { x: local(e)[0], moved: false };
      e.preventDefault();
    });
    overlay.addEventListener('mousemove', (e) => {
      const [mx, my] = local(e);
      if (drag) {
        if (Math.abs(mx - drag.x) > 4) drag.moved = true;
        if (drag.moved) {
          const a = Math.max(M.left, Math.min(mx, drag.x));
          const b = Math.min(M.left + iw, Math.max(mx, drag.x));
          brush.setAttribute('x', a);
          brush.setAttribute('width', b - a);
          brush.setAttribute('visibility', 'visible');
          tip.hidden = true;
          return;
        }
      }
      const mark = nearestMark(mx, my);
      if (mark) {
        hit = { mark };
        const px = X(mark.t);
        guide.setAttribute('visibility', 'hidden');
        dot.setAttribute('visibility', 'hidden');
        tip.replaceChildren(
          h('div', { class: 'tt-name' }, labelText(mark.series)),
          h('div', {}, Object.entries(mark.span).map(([k, v]) => `${k} ${v}`).join(' · ')),
          h('div', {}, formatTime(mark.t), ' · ', h('strong', {}, formatValue(mark.v, unit))),
          h('div', { class: 'tt-hint muted' }, "click: this span's profile"));
        tip.hidden = false;
        const left = px + 12 + tip.offsetWidth > width ? px - 12 - tip.offsetWidth : px + 12;
        tip.style.left = `${Math.max(0, left)}px`;
        tip.style.top = `${Math.max(0, Y(mark.v) - 10)}px`;
        return;
      }
      hit = nearest(mx, my);
      if (!hit) return;
      const px = X(hit.p.t);
      guide.setAttribute('x1', px);
      guide.setAttribute('x2', px);
      guide.setAttribute('visibility', 'visible');
      dot.setAttribute('cx', px);
      dot.setAttribute('cy', Y(hit.p.v));
      dot.setAttribute('fill', hit.s.color);
      dot.setAttribute('visibility', 'visible');
      tip.replaceChildren(
        h('div', { class: 'tt-name' }, hit.s.other ? othersName : labelText(hit.s.metric)),
        h('div', {}, formatTime(hit.p.t)),
        h('div', {}, h('strong', {}, formatValue(hit.p.v, hit.s.unit)),
          hit.p.pv !== undefined ? ` · ${formatValue(hit.p.pv, hit.s.periodUnit)} CPU` : ''),
        h('div', { class: 'tt-hint muted' }, hit.s.other ? 'drag: merge a range' : 'click: this profile · drag: merge a range'));
      tip.hidden = false;
      const left = px + 12 + tip.offsetWidth > width ? px - 12 - tip.offsetWidth : px + 12;
      tip.style.left = `${Math.max(0, left)}px`;
      tip.style.top = `${Math.max(0, Y(hit.p.v) - 10)}px`;
    });
    overlay.addEventListener('mouseleave', () => {
      tip.hidden = true;
      guide.setAttribute('visibility', 'hidden');
      dot.setAttribute('visibility', 'hidden');
    });
    overlay.addEventListener('mouseup', (e) => {
      if (!drag) return;
      const d = drag;
      drag = null;
      brush.setAttribute('visibility', 'hidden');
      if (d.moved) {
        const mx = local(e)[0];
        const a = toTime(Math.max(M.left, Math.min(mx, d.x)));
        const b = toTime(Math.min(M.left + iw, Math.max(mx, d.x)));
        if (onRange) onRange(Math.round(a), Math.round(b));
      } else if (hit && hit.mark) {
        if (onExemplar) onExemplar(hit.mark.series, hit.mark.span, hit.mark.t);
      } else if (hit && !hit.s.other && onPoint) {
        onPoint(hit.s.metric, hit.p.t);
      }
    });
  };

  const named = series.filter((s) => !s.other);
  for (const s of named.slice(0, 30)) {
    legend.append(h('li', {}, h('span', { class: 'swatch', style: { background: s.color } }), labelText(s.metric)));
  }
  if (named.length > 30) legend.append(h('li', { class: 'muted' }, `and ${named.length - 30} more series`));
  if (omitted) legend.append(h('li', { class: 'legend-other' }, h('span', { class: 'swatch swatch-other' }), othersName));
  if (marks.length) legend.append(h('li', { class: 'legend-exemplars muted' }, `◆ ${marks.length} largest spans (exemplars)`));
  const wrap = h('div', { class: 'metrics' }, box, legend);
  // Drawn once attached (it needs its width), and again on resize.
  const ro = new ResizeObserver(() => draw());
  ro.observe(box);
  wrap.destroy = () => ro.disconnect();
  return wrap;
}
