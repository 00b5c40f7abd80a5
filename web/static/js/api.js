// The documented HTTP API (documentation/http-api.md), and nothing else.

import { readColumns } from './tree.js';

/** An answer with `status: "error"`, or a failed request. */
export class ApiError extends Error {
  /**
   * `type`: the envelope's `errorType`; `position`: its `{line, column}` of a query that does not
   * parse; `reason`: its stable condition name, such as `no_profiles`.
   */
  constructor(message, { type = 'error', status = 0, position = null, reason = null } = {}) {
    super(message);
    this.type = type;
    this.status = status;
    this.position = position;
    this.reason = reason;
  }
}

/** The ApiError of an error envelope. */
function envelopeError(body, status) {
  return new ApiError(body.error || `request failed with ${status}`, {
    type: body.errorType, status, position: body.position || null, reason: body.reason || null,
  });
}

const warningsByPath = new Map();

/**
 * Keeps the warnings of the latest answer of `path` (a partial answer: a shard of a querier did
 * not answer) and tells the page: a `parca:warnings` event on `window` with every path's
 * current warnings in `detail`. An answer without warnings clears its path's.
 */
function noteWarnings(path, warnings) {
  const before = warningsByPath.get(path) || [];
  if (!warnings.length && !before.length) return;
  if (warnings.length) warningsByPath.set(path, warnings);
  else warningsByPath.delete(path);
  window.dispatchEvent(new CustomEvent('parca:warnings', { detail: currentWarnings() }));
}

/** The warnings of the latest answers, once each. */
export function currentWarnings() {
  return [...new Set([...warningsByPath.values()].flat())];
}

/** GETs `path` with `params` (arrays repeat the key) and returns the envelope's `data`. */
export async function get(path, params = {}, { signal } = {}) {
  const res = await fetchApi(url(path, params), signal);
  let body;
  try {
    body = await res.json();
  } catch {
    throw new ApiError(`the server answered ${res.status} ${res.statusText} without JSON`, { status: res.status });
  }
  if (body.status !== 'success') throw envelopeError(body, res.status);
  noteWarnings(path, body.warnings || []);
  return body.data;
}

/** The warnings of an answer that is not JSON, from its `Parca-Warning` headers. */
function headerWarnings(path, res) {
  const header = res.headers.get('parca-warning');
  noteWarnings(path, header ? [header] : []);
}

/** The API's error of a failed answer (its JSON envelope when there is one). */
async function failure(res) {
  try {
    return envelopeError(await res.json(), res.status);
  } catch {
    return new ApiError(`${res.status} ${res.statusText}`, { status: res.status });
  }
}

/** GETs `path` and returns the raw body as a Blob (downloads), throwing the API's error. */
export async function getBlob(path, params = {}) {
  const res = await fetchApi(url(path, params));
  if (!res.ok) throw await failure(res);
  headerWarnings(path, res);
  return res.blob();
}

/** GETs `path` and returns the raw body as an ArrayBuffer, throwing the API's error. */
export async function getBytes(path, params = {}, { signal } = {}) {
  const res = await fetchApi(url(path, params), signal);
  if (!res.ok) throw await failure(res);
  headerWarnings(path, res);
  return res.arrayBuffer();
}

async function fetchApi(u, signal) {
  try {
    return await fetch(u, { signal, headers: { Accept: 'application/json' } });
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    throw new ApiError(`cannot reach the server: ${e.message}`);
  }
}

/** The URL of `path` with `params` encoded (arrays repeat the key). */
export function url(path, params = {}) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v === undefined || v === null || v === '') continue;
    for (const item of Array.isArray(v) ? v : [v]) q.append(k, String(item));
  }
  const s = q.toString();
  return s ? `${path}?${s}` : path;
}

/** Seconds (the API's time format) from milliseconds. */
export const seconds = (ms) => (ms / 1000).toFixed(3);

/** Profile types stored, all of them or only those with data in `[startMs, endMs]`. */
export const profileTypes = (range, opts) =>
  get('/api/v1/profile_types', range ? { start: seconds(range.start), end: seconds(range.end) } : {}, opts);
export const labelNames = (match, opts) => get('/api/v1/labels', { 'match[]': match }, opts);
export const labelValues = (name, match, opts) =>
  get(`/api/v1/label/${encodeURIComponent(name)}/values`, { 'match[]': match }, opts);
export const targets = (opts) => get('/api/v1/targets', {}, opts);
export const rules = (opts) => get('/api/v1/rules', {}, opts);
export const insights = (opts) => get('/api/v1/insights', {}, opts);

/**
 * `query_range` over `[startMs, endMs]` with `stepMs`; with `opts.limit`, only that many series
 * (the largest), the rest summed in `data.omitted`.
 */
export const queryRange = (query, startMs, endMs, stepMs, opts = {}) =>
  get('/api/v1/query_range', {
    query, start: seconds(startMs), end: seconds(endMs), step: `${Math.max(1, Math.round(stepMs / 1000))}s`,
    ...(opts.limit ? { limit: String(opts.limit) } : {}),
  }, opts);

/**
 * The largest spans of each series `query` reads in `[startMs, endMs]`
 * (`/api/v1/query_exemplars`): `[{seriesLabels, exemplars: [{labels, value, timestamp}]}]`.
 */
export const queryExemplars = (query, startMs, endMs, opts = {}) =>
  get('/api/v1/query_exemplars', {
    query, start: seconds(startMs), end: seconds(endMs), ...(opts.limit ? { limit: String(opts.limit) } : {}),
  }, opts);

let flagsAnswer = null;

/**
 * The server's flags (`/api/v1/status/flags`: long name to value), asked once per page; a
 * failed request gives `{}` and is asked again next time.
 */
export function serverFlags() {
  if (!flagsAnswer) {
    flagsAnswer = get('/api/v1/status/flags').catch(() => {
      flagsAnswer = null;
      return {};
    });
  }
  return flagsAnswer;
}

/**
 * The tracing UI's page of trace `ids.trace_id` (span `ids.span_id`) under `template`, the
 * server's `--web-trace-url-template` (`{trace_id}`, `{span_id}` filled in), or null without a
 * template or a trace id.
 */
export function traceUrl(template, ids) {
  if (!template || !ids.trace_id) return null;
  return template.replace(/\{(trace_id|span_id)\}/g, (_, name) => encodeURIComponent(ids[name] || ''));
}

/**
 * Parameters of `/api/v1/query` for a window: `{start, end}` or `{time}`; `format` is added by
 * the caller.
 */
export function windowParams(w) {
  return w.time !== undefined ? { time: seconds(w.time) } : { start: seconds(w.start), end: seconds(w.end) };
}

/**
 * A profile as flame-graph columns: `{grouped, graphs: [{labels, profiles, tree}]}` (several
 * graphs for `merge by`); `opts.granularity` splits frames by line or address. `performance`
 * marks `parca:profile-bytes` when the answer is in.
 */
export async function queryProfile(query, w, opts = {}) {
  const bytes = await getBytes('/api/v1/query', { query, ...windowParams(w), format: 'columns', granularity: opts.granularity }, opts);
  performance.mark('parca:profile-bytes');
  return readColumns(bytes);
}

const parsedQueries = new Map();

/**
 * The structure of `query` from the server's parser (`/api/v1/parse_query`): its value type
 * and where its selectors, matchers and range are (offsets in characters). Strict by default:
 * a query that does not parse throws the ApiError a query would (with its position). With
 * `lenient`, a half-typed query is repaired and its errors come in `errors`. Answers are kept
 * per text: the UI asks again for every click on a graph.
 */
export function parseQuery(query, { lenient = false } = {}) {
  const key = `${lenient ? 'l' : 's'}${query}`;
  let answer = parsedQueries.get(key);
  if (!answer) {
    answer = get('/api/v1/parse_query', { query, lenient: lenient ? 'true' : '' });
    // A failed request (not a failed parse, which is an answer too) is asked again next time.
    answer.catch((e) => { if (!e.position) parsedQueries.delete(key); });
    if (parsedQueries.size >= 256) parsedQueries.delete(parsedQueries.keys().next().value);
    parsedQueries.set(key, answer);
  }
  return answer;
}
