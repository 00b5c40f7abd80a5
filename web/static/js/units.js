// Values with their units, written for people: 12.3 ms, 4.5 MiB, 1.2k.

const TIME_NS = { nanoseconds: 1, microseconds: 1e3, milliseconds: 1e6, seconds: 1e9 };
const TIME_STEPS = [[3600e9, 'h'], [60e9, 'min'], [1e9, 's'], [1e6, 'ms'], [1e3, 'µs'], [1, 'ns']];
const BYTE_STEPS = [[2 ** 40, 'TiB'], [2 ** 30, 'GiB'], [2 ** 20, 'MiB'], [2 ** 10, 'KiB'], [1, 'B']];
const COUNT_STEPS = [[1e12, 'T'], [1e9, 'G'], [1e6, 'M'], [1e3, 'k'], [1, '']];

function scaled(v, steps, sep) {
  const a = Math.abs(v);
  for (const [size, name] of steps) {
    if (a >= size || size === steps[steps.length - 1][0]) {
      const x = v / size;
      const digits = Math.abs(x) >= 100 || Number.isInteger(x) ? 0 : Math.abs(x) >= 10 ? 1 : 2;
      return `${x.toFixed(digits)}${name ? sep + name : ''}`;
    }
  }
  return String(v);
}

/** `value` in `unit` (pprof's unit names: nanoseconds, bytes, count, …) for people. */
export function formatValue(value, unit) {
  if (!Number.isFinite(value)) return String(value);
  if (value === 0) return unit in TIME_NS ? '0 s' : unit === 'bytes' ? '0 B' : '0';
  if (unit in TIME_NS) return scaled(value * TIME_NS[unit], TIME_STEPS, ' ');
  if (unit === 'bytes') return scaled(value, BYTE_STEPS, ' ');
  const s = scaled(value, COUNT_STEPS, '');
  return unit && unit !== 'count' ? `${s} ${unit}` : s;
}

/** A signed difference: `+12 ms`, `−3 MiB`. */
export function formatDelta(delta, unit) {
  const s = formatValue(Math.abs(delta), unit);
  return delta > 0 ? `+${s}` : delta < 0 ? `−${s}` : `±${s}`;
}

/** A share as a percentage with sensible digits. */
export function formatPercent(part, whole) {
  if (!whole) return '–';
  const p = (100 * part) / whole;
  const a = Math.abs(p);
  return `${p.toFixed(a >= 10 || a === 0 ? 1 : a >= 1 ? 2 : 3)}%`;
}

/** "12s ago", "3 min ago", "2 h ago" from a Date or ms. */
export function ago(then, now = Date.now()) {
  const s = Math.round((now - then) / 1000);
  if (s < 0) return 'in the future';
  if (s < 90) return `${s}s ago`;
  if (s < 5400) return `${Math.round(s / 60)} min ago`;
  if (s < 2 * 86400) return `${Math.round(s / 3600)} h ago`;
  return `${Math.round(s / 86400)} days ago`;
}

/** Seconds for people: 0.5 ms, 1.2 s. */
export function formatSeconds(s) {
  return formatValue(s * 1e9, 'nanoseconds');
}

/** A local date and time, to the second. */
export function formatTime(ms) {
  const d = new Date(ms);
  const pad = (n) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}
