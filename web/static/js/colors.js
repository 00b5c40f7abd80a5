// Frame colours: stable per package (or binary, for unsymbolized frames), so the same code has
// the same colour in every profile; red and green for diffs.

/**
 * The package of a function name: Go `net/http.(*conn).serve` → `net/http`, Rust
 * `<alloc::vec::Vec<T> as Drop>::drop` → `alloc`, C++ `std::vector<int>::push_back` → `std`,
 * Python `module.func` → `module`. Names without a separator are their own package.
 */
export function packageOf(name) {
  let s = name;
  if (s.startsWith('<')) s = s.slice(1);
  const colons = s.indexOf('::');
  const slash = s.lastIndexOf('/', s.indexOf('(') >= 0 ? s.indexOf('(') : s.length);
  if (colons > 0 && (slash < 0 || colons < slash)) return s.slice(0, colons);
  const tail = slash >= 0 ? s.slice(slash + 1) : s;
  const dot = tail.indexOf('.');
  if (dot > 0) return s.slice(0, (slash >= 0 ? slash + 1 : 0) + dot);
  const space = s.indexOf(' ');
  return space > 0 ? s.slice(0, space) : s;
}

function hash(s) {
  // FNV-1a, 32 bits: cheap and stable across sessions.
  let x = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) {
    x ^= s.charCodeAt(i);
    x = Math.imul(x, 0x01000193);
  }
  return x >>> 0;
}

/** A warm colour for a package or binary name, always the same for the same name. */
export function colorFor(key) {
  const x = hash(key);
  const hue = 8 + (x % 44); // red-orange to yellow, flame colours
  const sat = 70 + ((x >>> 8) % 20);
  const light = 55 + ((x >>> 16) % 14);
  return `hsl(${hue} ${sat}% ${light}%)`;
}

/** The colour for frames nothing matched when a search is active. */
export const DIMMED = '#e4e2df';
/** The colour of the root frame. */
export const ROOT = '#9aa0a6';

/**
 * Diff colour for a change `ratio` in [-1, 1]: red when it grew, green when it shrank, more
 * saturated the bigger the change; grey when unchanged.
 */
export function diffColor(ratio) {
  const r = Math.max(-1, Math.min(1, ratio));
  const a = Math.min(1, Math.abs(r) * 1.4 + (r === 0 ? 0 : 0.12));
  const mix = (x, y) => Math.round(x + (y - x) * a);
  const grey = [208, 206, 204];
  const target = r > 0 ? [222, 45, 38] : [49, 163, 84];
  return `rgb(${mix(grey[0], target[0])} ${mix(grey[1], target[1])} ${mix(grey[2], target[2])})`;
}

/** Colours for the metric graph's series, distinct and readable. */
export const SERIES = ['#1f77b4', '#d62728', '#2ca02c', '#9467bd', '#ff7f0e', '#17becf', '#8c564b', '#e377c2', '#7f7f7f', '#bcbd22'];
