// Parca's own client, @parca/client, over one of protobuf-ts' transports, against our server.
// Writes a pprof file with WriteRaw, then reads it back with every QueryService method the
// test checks, and prints what it got as one JSON object.
//
//   node client.cjs TRANSPORT ADDRESS PPROF_FILE JOB TIME_MS
//
// TIME_MS: the profile's time; queries cover the two hours around it.
// TRANSPORT: grpc-web (binary), grpc-web-text (what Parca's UI sends) or grpc (native, HTTP/2).
// @parca/client's dist imports its files without `.js`, which plain Node refuses: targets.sh
// bundles this file with esbuild into client.cjs.
import { readFileSync } from 'node:fs';
import {
  ProfileStoreServiceClient,
  QueryRequest_Mode,
  QueryRequest_ReportType,
  QueryServiceClient,
  Timestamp,
} from '@parca/client';
import { ChannelCredentials } from '@grpc/grpc-js';
import { GrpcTransport } from '@protobuf-ts/grpc-transport';
import { GrpcWebFetchTransport } from '@protobuf-ts/grpcweb-transport';
import { tableFromIPC } from '@uwdata/flechette';

const [transportName, address, pprofFile, job, timeMs] = process.argv.slice(2);
const transport = transportName === 'grpc'
  ? new GrpcTransport({ host: address, channelCredentials: ChannelCredentials.createInsecure() })
  // Parca's UI calls under /api; the server takes the method from the path's end.
  : new GrpcWebFetchTransport({
    baseUrl: `http://${address}/api`,
    format: transportName === 'grpc-web-text' ? 'text' : 'binary',
  });
const queries = new QueryServiceClient(transport);
const store = new ProfileStoreServiceClient(transport);

/**
 * A copy of an Arrow IPC buffer in memory of its own. Native gRPC hands out Node Buffers, views
 * into a shared pool at any offset (and Buffer.slice makes another view), which the Arrow reader
 * cannot lay 32-bit arrays over; a browser's gRPC-web has no such pool.
 */
const copied = (bytes) => Uint8Array.from(bytes);

async function main() {
  const name = 'parca_client_cpu';
  await store.writeRaw({
    normalized: true,
    series: [{
      labels: { labels: [{ name: '__name__', value: name }, { name: 'job', value: job }] },
      samples: [{ rawProfile: readFileSync(pprofFile), executableInfo: [] }],
    }],
  }).response;

  const { response: types } = await queries.profileTypes({});
  const type = types.types.find((t) => t.name === name);
  const typeName = [type.name, type.sampleType, type.sampleUnit, type.periodType, type.periodUnit]
    .join(':') + (type.delta ? ':delta' : '');
  const selector = `${typeName}{job="${job}"}`;
  const start = Timestamp.fromDate(new Date(Number(timeMs) - 3600e3));
  const end = Timestamp.fromDate(new Date(Number(timeMs) + 3600e3));

  const { response: labels } = await queries.labels({ match: [], profileType: typeName, start, end });
  const { response: values } = await queries.values({
    labelName: 'job', match: [], profileType: typeName, start, end,
  });
  const { response: range } = await queries.queryRange({
    query: selector, start, end, step: { seconds: 60n, nanos: 0 }, limit: 0, sumBy: [],
  });
  const merge = (reportType) => queries.query({
    mode: QueryRequest_Mode.MERGE,
    options: { oneofKind: 'merge', merge: { query: selector, start, end } },
    reportType,
    filter: [],
  }).response;
  const top = await merge(QueryRequest_ReportType.TOP);
  const flame = await merge(QueryRequest_ReportType.FLAMEGRAPH_TABLE);
  const pprof = await merge(QueryRequest_ReportType.PPROF);
  // The Arrow reports Parca's UI draws, read with the library it reads them with.
  const flameArrow = await merge(QueryRequest_ReportType.FLAMEGRAPH_ARROW);
  // flechette reads Int32 buffers in place: the record is copied out of the message, whose
  // bytes sit at any offset of the response.
  const flameTable = tableFromIPC(copied(flameArrow.report.flamegraphArrow.record), { useBigInt: true });
  const arrowNames = flameTable.getChild('function_name').toArray()
    .map((v) => (v == null ? null : new TextDecoder().decode(v)));
  // Grouped by a label: a `labels_only` row per worker under the root, as Parca's UI draws it.
  const byWorker = await queries.query({
    mode: QueryRequest_Mode.MERGE,
    options: { oneofKind: 'merge', merge: { query: selector, start, end } },
    reportType: QueryRequest_ReportType.FLAMEGRAPH_ARROW,
    groupBy: { fields: ['function_name', 'labels.worker'] },
    filter: [],
  }).response;
  const workerTable = tableFromIPC(copied(byWorker.report.flamegraphArrow.record), { useBigInt: true });
  const labelRows = [];
  {
    const only = workerTable.getChild('labels_only').toArray();
    const worker = workerTable.getChild('labels.worker').toArray();
    const cumulative = workerTable.getChild('cumulative').toArray();
    for (let i = 0; i < workerTable.numRows; i++) {
      if (only[i]) labelRows.push({ worker: worker[i] == null ? null : new TextDecoder().decode(worker[i]), cumulative: Number(cumulative[i]) });
    }
  }
  // Single mode: the profiles at one time (the pushed one's).
  const atTime = Timestamp.fromDate(new Date(Number(timeMs)));
  const single = await queries.query({
    mode: QueryRequest_Mode.SINGLE_UNSPECIFIED,
    options: { oneofKind: 'single', single: { query: selector, time: atTime } },
    reportType: QueryRequest_ReportType.TOP,
    filter: [],
  }).response;
  // Diff mode, absolute and relative: the window against itself (every node's diff 0).
  const side = { mode: 1, options: { oneofKind: 'merge', merge: { query: selector, start, end } } };
  const diff = async (absolute) => (await queries.query({
    mode: QueryRequest_Mode.DIFF,
    options: { oneofKind: 'diff', diff: { a: side, b: side, absolute } },
    reportType: QueryRequest_ReportType.TOP,
    filter: [],
  }).response);
  const diffs = [];
  for (const absolute of [true, false]) {
    const d = await diff(absolute);
    diffs.push({
      absolute,
      total: Number(d.total),
      rows: d.report.top.list.length,
      nonzero: d.report.top.list.filter((r) => Number(r.diff) !== 0).length,
    });
  }
  // Trimming: nodes under 5% of the total left out of the Arrow flame graph, and counted.
  const trimmedArrow = await queries.query({
    mode: QueryRequest_Mode.MERGE,
    options: { oneofKind: 'merge', merge: { query: selector, start, end } },
    reportType: QueryRequest_ReportType.FLAMEGRAPH_ARROW,
    nodeTrimThreshold: 5,
    filter: [],
  }).response;
  const trimmedTable = tableFromIPC(copied(trimmedArrow.report.flamegraphArrow.record), { useBigInt: true });
  const { response: hasData } = await queries.hasProfileData({});
  const tableArrow = await merge(QueryRequest_ReportType.TABLE_ARROW);
  const table = tableFromIPC(copied(tableArrow.report.tableArrow.record), { useBigInt: true });
  const flat = table.getChild('flat').toArray().reduce((a, v) => a + Number(v), 0);
  const metadata = await merge(QueryRequest_ReportType.PROFILE_METADATA);
  const filtered = await queries.query({
    mode: QueryRequest_Mode.MERGE,
    options: { oneofKind: 'merge', merge: { query: selector, start, end } },
    reportType: QueryRequest_ReportType.TOP,
    filter: [{
      filter: {
        oneofKind: 'stackFilter',
        stackFilter: {
          filter: {
            oneofKind: 'criteria',
            criteria: { functionName: { condition: { oneofKind: 'contains', contains: 'RUNTIME.' } } },
          },
        },
      },
    }],
  }).response;
  const callgraph = await merge(QueryRequest_ReportType.CALLGRAPH);
  const sandwich = await queries.query({
    mode: QueryRequest_Mode.MERGE,
    options: { oneofKind: 'merge', merge: { query: selector, start, end } },
    reportType: QueryRequest_ReportType.TOP,
    sandwichByFunction: 'main.spin',
    filter: [],
  }).response;
  const inverted = (await queries.query({
    mode: QueryRequest_Mode.MERGE,
    options: { oneofKind: 'merge', merge: { query: selector, start, end } },
    reportType: QueryRequest_ReportType.FLAMEGRAPH_TABLE,
    invertCallStack: true,
    filter: [],
  }).response).report.flamegraph;
  // Only libc's frames: the Go program has none, so nothing is left under the root.
  const onlyLibc = (await queries.query({
    mode: QueryRequest_Mode.MERGE,
    options: { oneofKind: 'merge', merge: { query: selector, start, end } },
    reportType: QueryRequest_ReportType.FLAMEGRAPH_TABLE,
    filter: [{
      filter: {
        oneofKind: 'frameFilter',
        frameFilter: { filter: { oneofKind: 'binaryFrameFilter', binaryFrameFilter: { includeBinaries: ['libc.so.6'] } } },
      },
    }],
  }).response);
  // Filter criteria on other fields than function names: frames of functions starting with
  // `MAIN.` (any case) only; stacks with a frame in a `.GO` file (every Go sample).
  const criteria = (kind, c) => [{ filter: { oneofKind: kind, [kind]: { filter: { oneofKind: 'criteria', criteria: c } } } }];
  const onlyMain = (await queries.query({
    mode: QueryRequest_Mode.MERGE,
    options: { oneofKind: 'merge', merge: { query: selector, start, end } },
    reportType: QueryRequest_ReportType.FLAMEGRAPH_TABLE,
    filter: criteria('frameFilter', { functionName: { condition: { oneofKind: 'startsWith', startsWith: 'MAIN.' } } }),
  }).response);
  const inGoFiles = (await queries.query({
    mode: QueryRequest_Mode.MERGE,
    options: { oneofKind: 'merge', merge: { query: selector, start, end } },
    reportType: QueryRequest_ReportType.TOP,
    filter: criteria('stackFilter', { filename: { condition: { oneofKind: 'contains', contains: '.GO' } } }),
  }).response);
  const nameOfNode = (fg, node) => {
    const location = fg.locations[node.meta.locationIndex - 1];
    const fn = fg.function[location.lines[0].functionIndex - 1];
    return fg.stringTable[fn.nameStringIndex];
  };
  let unimplemented = null;
  try {
    await merge(QueryRequest_ReportType.SOURCE);
  } catch (e) {
    unimplemented = { code: e.code, message: e.message };
  }

  const flameNames = flame.report.flamegraph.function
    .map((f) => flame.report.flamegraph.stringTable[f.nameStringIndex]);
  console.log(JSON.stringify({
    types: types.types.map((t) => t.name),
    type: typeName,
    labels: labels.labelNames,
    values: values.labelValues,
    range: range.series.map((s) => ({
      labels: s.labelset.labels,
      points: s.samples.length,
      sum: s.samples.reduce((a, p) => a + Number(p.value), 0),
      sampleType: s.sampleType,
    })),
    top: {
      total: Number(top.total),
      rows: top.report.top.list.length,
      unit: top.report.top.unit,
      first: top.report.top.list[0]?.meta?.function?.name,
    },
    flame: {
      total: Number(flame.total),
      rootCumulative: Number(flame.report.flamegraph.root.cumulative),
      height: flame.report.flamegraph.height,
      functions: flameNames.length,
      names: flameNames.filter((n) => n.startsWith('main.')).sort(),
    },
    pprofBytes: pprof.report.pprof.length,
    flameArrow: {
      total: Number(flameArrow.total),
      rows: flameTable.numRows,
      rootCumulative: Number(flameTable.getChild('cumulative').at(0)),
      height: flameArrow.report.flamegraphArrow.height,
      unit: flameArrow.report.flamegraphArrow.unit,
      hasSpin: arrowNames.includes('main.spin'),
    },
    tableArrow: { total: Number(tableArrow.total), rows: table.numRows, flat },
    byWorker: { total: Number(byWorker.total), labelRows },
    single: { total: Number(single.total) },
    diffs,
    trimmed: {
      rows: trimmedTable.numRows,
      trimmed: Number(trimmedArrow.report.flamegraphArrow.trimmed),
      rootCumulative: Number(trimmedTable.getChild('cumulative').at(0)),
    },
    hasData: hasData.hasData,
    sandwich: { total: Number(sandwich.total) },
    onlyLibc: {
      total: Number(onlyLibc.total),
      roots: onlyLibc.report.flamegraph.root.children.length,
    },
    inverted: {
      rootCumulative: Number(inverted.root.cumulative),
      roots: inverted.root.children.map((c) => nameOfNode(inverted, c)),
    },
    callgraph: {
      total: Number(callgraph.total),
      nodes: callgraph.report.callgraph.nodes.length,
      edges: callgraph.report.callgraph.edges.length,
      flat: callgraph.report.callgraph.nodes.reduce((a, n) => a + Number(n.flat), 0),
    },
    metadata: metadata.report.profileMetadata,
    filtered: { total: Number(filtered.total), filtered: Number(filtered.filtered) },
    onlyMain: (() => {
      const fg = onlyMain.report.flamegraph;
      const names = new Set();
      const walk = (node) => { for (const c of node.children) { names.add(nameOfNode(fg, c)); walk(c); } };
      walk(fg.root);
      return { total: Number(onlyMain.total), rootCumulative: Number(fg.root.cumulative), names: [...names].sort() };
    })(),
    inGoFiles: { total: Number(inGoFiles.total), filtered: Number(inGoFiles.filtered) },
    unimplemented,
  }));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
