"""Sends a Parca Agent report to a server with WriteArrow, built with pyarrow to the agent's v2
schema (parca-dev/parca-agent reporter/arrow_v2.go and arrow.go at 0ce643e):

- `labels.<name>` columns, each RunEndEncoded<Int32, Dictionary<UInt32, Binary>>;
- `stacktrace`: ListView<Dictionary<UInt32, Location>>, leaf first, rows of one stack sharing
  their offset and size; Location = {address: UInt64, frame_type: Utf8View, mapping_file:
  Utf8View?, mapping_build_id: Utf8View?, lines: List<{line: Int64, function:
  Dictionary<UInt32, {system_name: Utf8View?, filename: Utf8View?, start_line: Int64}>}>};
- `value` Int64; `producer`, `sample_type`, `sample_unit`, `period_type`, `period_unit`,
  `temporality` RunEndEncoded<Int32, Utf8>; `period`, `duration` RunEndEncoded<Int32, Int64>;
  `timestamp` Timestamp(ns, UTC);
- schema metadata `parca_write_schema_version: v2`; an IPC stream with LZ4-frame bodies.

With --v1, the older two-phase `Write` stream instead (arrow.go's SampleWriter and
LocationsWriter): a sample record naming stacks by `stacktrace_id` (every column run-end
encoded, strings as dictionaries of Binary, `timestamp` in milliseconds, metadata `v1`); the
server answers with a record of the ids it wants; the client sends their locations (a List of
location structs per id, the function's fields flat in each line) and closes.

The calls are grpcio's, to /parca.profilestore.v1alpha1.ProfileStoreService/WriteArrow or
/Write; their one field (`bytes ipc_buffer = 1`, `bytes record = 1`) is encoded here. Usage:
write_arrow.py HOST:PORT TIME_NS [--node NAME] [--v1] [--break COLUMN]. Prints one line of
JSON: what was sent, or the gRPC error.
"""

import argparse
import hashlib
import json
import queue

import grpc
import pyarrow as pa

HZ = 19
PERIOD = 1_000_000_000 // HZ


def runs(values):
    """Run ends and run values of `values` (one run per change)."""
    ends, values_of_runs = [], []
    for i, v in enumerate(values):
        if values_of_runs and values_of_runs[-1] == v:
            ends[-1] = i + 1
        else:
            values_of_runs.append(v)
            ends.append(i + 1)
    return pa.array(ends, pa.int32()), values_of_runs


def ree(values, value_type):
    """A run-end encoded array of `values`."""
    ends, values_of_runs = runs(values)
    return pa.RunEndEncodedArray.from_arrays(ends, pa.array(values_of_runs, value_type))


def binary_dictionary(values):
    """Dictionary<UInt32, Binary> of `values` (str or bytes; None stays null)."""
    encode = lambda v: v.encode() if isinstance(v, str) else v
    distinct = sorted({encode(v) for v in values if v is not None})
    keys = pa.array([None if v is None else distinct.index(encode(v)) for v in values], pa.uint32())
    return pa.DictionaryArray.from_arrays(keys, pa.array(distinct, pa.binary()))


def label_column(values):
    """RunEndEncoded<Int32, Dictionary<UInt32, Binary>>, null where a row has no such label."""
    ends, values_of_runs = runs(values)
    return pa.RunEndEncodedArray.from_arrays(ends, binary_dictionary(values_of_runs))


FUNCTION = pa.struct([
    pa.field("system_name", pa.string_view(), nullable=True),
    pa.field("filename", pa.string_view(), nullable=True),
    pa.field("start_line", pa.int64(), nullable=False),
])
LINE = pa.struct([
    pa.field("line", pa.int64(), nullable=False),
    pa.field("function", pa.dictionary(pa.uint32(), FUNCTION), nullable=False),
])
LOCATION = pa.struct([
    pa.field("address", pa.uint64(), nullable=False),
    pa.field("frame_type", pa.string_view(), nullable=False),
    pa.field("mapping_file", pa.string_view(), nullable=True),
    pa.field("mapping_build_id", pa.string_view(), nullable=True),
    pa.field("lines", pa.list_(LINE), nullable=False),
])

# The frames of the report: (frame_type, address, mapping file, build id, [(function, file, line)]).
GZIP = "/usr/bin/gzip"
GZIP_ID = "3f1c2b0a9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f40"
FRAMES = {
    "deflate": ("native", 0x4A10, GZIP, GZIP_ID, []),
    "zip": ("native", 0x3B20, GZIP, GZIP_ID, []),
    "main": ("native", 0x2C30, GZIP, GZIP_ID, []),
    "sys_read": ("kernel", 0xFFFFFFFF81234560, None, None, [("ksys_read", "", 0)]),
    "entry": ("kernel", 0xFFFFFFFF81000100, None, None, [("entry_SYSCALL_64_after_hwframe", "", 0)]),
    "compress": ("cpython", 0, None, None, [("compress", "/srv/app/compress.py", 12)]),
    "module": ("cpython", 0, None, None, [("<module>", "/srv/app/compress.py", 30)]),
}
# Stacks, leaf first.
STACKS = {
    "gzip_deflate": ["deflate", "zip", "main"],
    "gzip_read": ["sys_read", "entry", "main"],
    "py_compress": ["compress", "module"],
}
# Rows: (stack, comm, thread name or None, value).
ROWS = (
    [("gzip_deflate", "gzip", None, 1)] * 5
    + [("gzip_read", "gzip", None, 1)] * 2
    + [("py_compress", "python3", "MainThread", 1)] * 4
    + [("py_compress", "python3", "worker", 1)] * 3
)


def stacktrace_column():
    """The ListView of dictionary-encoded locations, each stack written once."""
    names = list(FRAMES)
    functions = []  # (system_name, filename, start_line)
    line_offsets, line_numbers, function_keys = [0], [], []
    for name in names:
        _, _, _, _, lines = FRAMES[name]
        for function, filename, line in lines:
            key = (function, filename or None, 0)
            if key not in functions:
                functions.append(key)
            function_keys.append(functions.index(key))
            line_numbers.append(line)
        line_offsets.append(len(line_numbers))
    function_values = pa.StructArray.from_arrays(
        [pa.array([f[0] for f in functions], pa.string_view()),
         pa.array([f[1] for f in functions], pa.string_view()),
         pa.array([f[2] for f in functions], pa.int64())],
        fields=list(FUNCTION))
    function_dict = pa.DictionaryArray.from_arrays(pa.array(function_keys, pa.uint32()), function_values)
    line_structs = pa.StructArray.from_arrays([pa.array(line_numbers, pa.int64()), function_dict], fields=list(LINE))
    lines = pa.ListArray.from_arrays(pa.array(line_offsets, pa.int32()), line_structs, type=pa.list_(LINE))
    locations = pa.StructArray.from_arrays(
        [pa.array([FRAMES[n][1] for n in names], pa.uint64()),
         pa.array([FRAMES[n][0] for n in names], pa.string_view()),
         pa.array([FRAMES[n][2] for n in names], pa.string_view()),
         pa.array([FRAMES[n][3] for n in names], pa.string_view()),
         lines],
        fields=list(LOCATION))
    keys, where = [], {}
    for stack, frames in STACKS.items():
        where[stack] = (len(keys), len(frames))
        keys.extend(names.index(f) for f in frames)
    values = pa.DictionaryArray.from_arrays(pa.array(keys, pa.uint32()), locations)
    offsets = [where[r[0]][0] for r in ROWS]
    sizes = [where[r[0]][1] for r in ROWS]
    return pa.ListViewArray.from_arrays(pa.array(offsets, pa.int32()), pa.array(sizes, pa.int32()), values)


def record(time_ns, node, broken=None):
    n = len(ROWS)
    columns = {
        "labels.comm": label_column([r[1] for r in ROWS]),
        "labels.node": label_column([node] * n),
        "labels.thread_name": label_column([r[2] for r in ROWS]),
        "stacktrace": stacktrace_column(),
        "value": pa.array([r[3] for r in ROWS], pa.int64()),
        "producer": ree(["parca_agent"] * n, pa.string()),
        "sample_type": ree(["samples"] * n, pa.string()),
        "sample_unit": ree(["count"] * n, pa.string()),
        "period_type": ree(["cpu"] * n, pa.string()),
        "period_unit": ree(["nanoseconds"] * n, pa.string()),
        "temporality": ree(["delta"] * n, pa.string()),
        "period": ree([PERIOD] * n, pa.int64()),
        "duration": ree([1_000_000_000] * n, pa.int64()),
        # The rows of a report span its interval.
        "timestamp": pa.array([time_ns + i * 100_000_000 for i in range(n)], pa.timestamp("ns", tz="UTC")),
    }
    return batch_of(columns, "v2", broken)


def batch_of(columns, version, broken):
    """The record of `columns`, with `broken` (a column name) dropped or, for `value`, floats."""
    if broken == "value":
        columns["value"] = pa.array([1.5] * len(ROWS), pa.float64())
    elif broken:
        del columns[broken]
    schema = pa.schema([pa.field(k, v.type, nullable=k.startswith("labels.") or k == "temporality") for k, v in columns.items()],
                       metadata={"parca_write_schema_version": version})
    return pa.RecordBatch.from_arrays(list(columns.values()), schema=schema)


def stack_id(stack):
    return hashlib.md5(stack.encode()).digest()


def dict_ree(values):
    """RunEndEncoded<Int32, Dictionary<UInt32, Binary>>: v1's string and id columns."""
    return label_column(values)


def v1_samples(time_ns, node, broken=None):
    n = len(ROWS)
    columns = {
        "labels.comm": label_column([r[1] for r in ROWS]),
        "labels.node": label_column([node] * n),
        "labels.thread_name": label_column([r[2] for r in ROWS]),
        "stacktrace_id": dict_ree([stack_id(r[0]) for r in ROWS]),
        "value": pa.array([r[3] for r in ROWS], pa.int64()),
        "producer": dict_ree(["parca_agent"] * n),
        "sample_type": dict_ree(["samples"] * n),
        "sample_unit": dict_ree(["count"] * n),
        "period_type": dict_ree(["cpu"] * n),
        "period_unit": dict_ree(["nanoseconds"] * n),
        "temporality": dict_ree(["delta"] * n),
        "period": ree([PERIOD] * n, pa.int64()),
        "duration": ree([1_000_000_000] * n, pa.int64()),
        "timestamp": ree([time_ns // 1_000_000 + i * 100 for i in range(n)], pa.int64()),
    }
    return batch_of(columns, "v1", broken)


V1_LINE = pa.struct([
    pa.field("line", pa.int64()),
    pa.field("function_name", pa.dictionary(pa.uint32(), pa.binary())),
    pa.field("function_system_name", pa.dictionary(pa.uint32(), pa.binary())),
    pa.field("function_filename", pa.run_end_encoded(pa.int32(), pa.dictionary(pa.uint32(), pa.binary()))),
    pa.field("function_start_line", pa.int64()),
])


def v1_locations(ids):
    """The locations record for the stacks `ids` (as the server asked for them)."""
    by_id = {stack_id(name): frames for name, frames in STACKS.items()}
    frames = [f for i in ids for f in by_id[i]]
    offsets = [0]
    for i in ids:
        offsets.append(offsets[-1] + len(by_id[i]))
    lines, line_offsets = [], [0]
    for f in frames:
        lines.extend(FRAMES[f][4])
        line_offsets.append(len(lines))
    line_structs = pa.StructArray.from_arrays(
        [pa.array([l[2] for l in lines], pa.int64()),
         binary_dictionary([l[0] for l in lines]),
         binary_dictionary([l[0] for l in lines]),
         dict_ree([l[1] for l in lines]) if lines else pa.array([], V1_LINE.field("function_filename").type),
         pa.array([0] * len(lines), pa.int64())],
        fields=list(V1_LINE))
    locations = pa.StructArray.from_arrays(
        [pa.array([FRAMES[f][1] for f in frames], pa.uint64()),
         dict_ree([FRAMES[f][0] for f in frames]),
         ree([0] * len(frames), pa.uint64()),
         ree([0] * len(frames), pa.uint64()),
         ree([0] * len(frames), pa.uint64()),
         dict_ree([FRAMES[f][2] or "" for f in frames]),
         dict_ree([FRAMES[f][3] or "" for f in frames]),
         pa.ListArray.from_arrays(pa.array(line_offsets, pa.int32()), line_structs)],
        names=["address", "frame_type", "mapping_start", "mapping_limit", "mapping_offset", "mapping_file", "mapping_build_id", "lines"])
    batch = pa.RecordBatch.from_arrays(
        [pa.array(ids, pa.binary()), pa.array([True] * len(ids)), pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), locations)],
        schema=pa.schema([pa.field("stacktrace_id", pa.binary()), pa.field("is_complete", pa.bool_()), pa.field("locations", pa.list_(locations.type))],
                         metadata={"parca_write_schema_version": "v1"}))
    return batch


def ipc_stream(batch):
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema, options=pa.ipc.IpcWriteOptions(compression="lz4")) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def field_bytes(number, payload):
    """One length-delimited protobuf field."""
    out = bytearray([number << 3 | 2])
    n = len(payload)
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out) + payload


def first_field(message):
    """The payload of field 1 (length-delimited) of a protobuf message, or b""."""
    if not message:
        return b""
    assert message[0] == 1 << 3 | 2, message[:4]
    n, shift, i = 0, 0, 1
    while True:
        b = message[i]
        n |= (b & 0x7F) << shift
        i += 1
        shift += 7
        if b < 0x80:
            return message[i:i + n]


SERVICE = "/parca.profilestore.v1alpha1.ProfileStoreService/"


def write_v2(channel, time_ns, node, broken):
    buffer = ipc_stream(record(time_ns, node, broken))
    call = channel.unary_unary(SERVICE + "WriteArrow", request_serializer=lambda ipc: field_bytes(1, ipc),
                               response_deserializer=lambda b: b)
    call(buffer, timeout=20)
    return {"ok": True, "rows": len(ROWS), "bytes": len(buffer)}


def write_v1(channel, time_ns, node, broken):
    outbox = queue.Queue()

    def requests():
        while (item := outbox.get()) is not None:
            yield item

    call = channel.stream_stream(SERVICE + "Write", request_serializer=lambda r: field_bytes(1, r),
                                 response_deserializer=first_field)
    answers = call(requests(), timeout=20)
    outbox.put(ipc_stream(v1_samples(time_ns, node, broken)))
    try:
        asked = next(answers)
        ids = pa.ipc.open_stream(asked).read_all().column("stacktrace_id").to_pylist() if asked else []
        if ids:
            outbox.put(ipc_stream(v1_locations(ids)))
        outbox.put(None)
        for _ in answers:
            pass
    finally:
        outbox.put(None)
    return {"ok": True, "rows": len(ROWS), "asked_for": len(ids)}


def main():
    args = argparse.ArgumentParser()
    args.add_argument("address")
    args.add_argument("time_ns", type=int)
    args.add_argument("--node", default="node-a")
    args.add_argument("--v1", action="store_true")
    args.add_argument("--break", dest="broken")
    a = args.parse_args()
    with grpc.insecure_channel(a.address) as channel:
        try:
            result = (write_v1 if a.v1 else write_v2)(channel, a.time_ns, a.node, a.broken)
        except grpc.RpcError as e:
            result = {"ok": False, "code": e.code().name, "message": e.details()}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
