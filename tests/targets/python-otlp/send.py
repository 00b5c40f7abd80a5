"""Sends OTLP profiles (v1development) built with the `opentelemetry-proto` package from PyPI,
as an OpenTelemetry SDK or the eBPF profiler would, to a server.

Usage:
  send.py http URL SERVICE    POST an ExportProfilesServiceRequest to URL (OTLP/HTTP,
                              application/x-protobuf); prints {"status": ..., "rejected": ...}
  send.py grpc HOST:PORT SERVICE
                              the same through ProfilesService/Export over gRPC (grpcio);
                              prints {"status": "OK"} or the gRPC status code and details
  send.py grpc-tls HOST:PORT CA_FILE N
                              N exports over gRPC with TLS (the server's CA in CA_FILE) and no
                              credentials, one after another on one channel; prints
                              {"codes": [the gRPC status code of each]}
  send.py http-bad URL        POST a request whose sample names a stack that does not exist;
                              prints the HTTP status and the google.rpc.Status message
  send.py http-links URL SERVICE N
                              POST a profile of N spans: sample i (`main;work`, value i + 1)
                              linked through the dictionary's link table to a span of its own
                              (random 8-byte span id, 16-byte trace id); prints {"status": ...,
                              "spans": [{"span_id", "trace_id", "value"} as lowercase hex]}

The profile: CPU samples (samples/count, period cpu/nanoseconds, 10 s at 20 Hz) of two threads,
`main;work` 4 times on t1 and `main` 2 times on t2, with `service.name` = SERVICE.
"""

import json
import sys
import time
import urllib.error
import urllib.request

from opentelemetry.proto.collector.profiles.v1development import (
    profiles_service_pb2 as service,
)
from opentelemetry.proto.common.v1 import common_pb2 as common
from opentelemetry.proto.profiles.v1development import profiles_pb2 as profiles
from opentelemetry.proto.resource.v1 import resource_pb2 as resource

STRINGS = ["", "samples", "count", "cpu", "nanoseconds", "main", "work", "thread.name"]


def request(service_name: str, bad: bool = False) -> service.ExportProfilesServiceRequest:
    d = profiles.ProfilesDictionary(string_table=STRINGS)
    d.function_table.add()  # the zero element
    d.function_table.add(name_strindex=5)
    d.function_table.add(name_strindex=6)
    d.location_table.add()
    d.location_table.add().lines.add(function_index=1, line=3)
    d.location_table.add().lines.add(function_index=2, line=7)
    d.stack_table.add()
    d.stack_table.add(location_indices=[2, 1])  # leaf first: work, main
    d.stack_table.add(location_indices=[1])
    d.attribute_table.add()
    for thread in ("t1", "t2"):
        d.attribute_table.add(key_strindex=7, value=common.AnyValue(string_value=thread))
    now = time.time_ns()
    p = profiles.Profile(
        sample_type=profiles.ValueType(type_strindex=1, unit_strindex=2),
        period_type=profiles.ValueType(type_strindex=3, unit_strindex=4),
        period=50_000_000,
        time_unix_nano=now - 10_000_000_000,
        duration_nano=10_000_000_000,
    )
    p.samples.add(stack_index=9 if bad else 1, attribute_indices=[1], values=[4])
    p.samples.add(stack_index=2, attribute_indices=[2], values=[2])
    req = service.ExportProfilesServiceRequest(dictionary=d)
    rp = req.resource_profiles.add(
        resource=resource.Resource(
            attributes=[
                common.KeyValue(key="service.name", value=common.AnyValue(string_value=service_name))
            ]
        )
    )
    sp = rp.scope_profiles.add(scope=common.InstrumentationScope(name="python-otlp-test"))
    sp.profiles.append(p)
    return req


def linked_request(service_name: str, n: int) -> tuple[service.ExportProfilesServiceRequest, list]:
    """The profile of `request`, its samples replaced by n samples each linked to a span."""
    import os

    req = request(service_name)
    d = req.dictionary
    d.link_table.add()  # the zero element: no link
    p = req.resource_profiles[0].scope_profiles[0].profiles[0]
    del p.samples[:]
    spans = []
    for i in range(n):
        trace_id, span_id = os.urandom(16), os.urandom(8)
        d.link_table.add(trace_id=trace_id, span_id=span_id)
        p.samples.add(stack_index=1, attribute_indices=[1], link_index=i + 1, values=[i + 1])
        spans.append({"span_id": span_id.hex(), "trace_id": trace_id.hex(), "value": i + 1})
    return req, spans


def post(url: str, body: bytes) -> tuple[int, bytes]:
    req = urllib.request.Request(
        url, data=body, method="POST", headers={"Content-Type": "application/x-protobuf"}
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def varint(data: bytes, i: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, i


def rpc_status_message(body: bytes) -> str:
    """Field 2 (`message`) of a google.rpc.Status, read off the wire (the message type lives in
    googleapis-common-protos, which this venv does not need otherwise)."""
    i = 0
    while i < len(body):
        key, i = varint(body, i)
        field, wire = key >> 3, key & 7
        if wire == 0:
            _, i = varint(body, i)
        elif wire == 2:
            n, i = varint(body, i)
            if field == 2:
                return body[i : i + n].decode()
            i += n
        else:
            break
    return ""


def main() -> None:
    mode = sys.argv[1]
    if mode == "http":
        status, body = post(sys.argv[2], request(sys.argv[3]).SerializeToString())
        answer = service.ExportProfilesServiceResponse.FromString(body)
        print(json.dumps({"status": status, "rejected": answer.partial_success.rejected_profiles}))
    elif mode == "http-links":
        req, spans = linked_request(sys.argv[3], int(sys.argv[4]))
        status, _ = post(sys.argv[2], req.SerializeToString())
        print(json.dumps({"status": status, "spans": spans}))
    elif mode == "http-bad":
        status, body = post(sys.argv[2], request("bad", bad=True).SerializeToString())
        print(json.dumps({"status": status, "message": rpc_status_message(body)}))
    elif mode == "grpc":
        import grpc
        from opentelemetry.proto.collector.profiles.v1development import (
            profiles_service_pb2_grpc as service_grpc,
        )

        with grpc.insecure_channel(sys.argv[2]) as channel:
            stub = service_grpc.ProfilesServiceStub(channel)
            try:
                stub.Export(request(sys.argv[3]), timeout=30)
                print(json.dumps({"status": "OK"}))
            except grpc.RpcError as error:
                print(json.dumps({"status": error.code().name, "details": error.details()}))
    elif mode == "grpc-tls":
        import grpc
        from opentelemetry.proto.collector.profiles.v1development import (
            profiles_service_pb2_grpc as service_grpc,
        )

        with open(sys.argv[3], "rb") as ca:
            credentials = grpc.ssl_channel_credentials(root_certificates=ca.read())
        codes = []
        with grpc.secure_channel(sys.argv[2], credentials) as channel:
            stub = service_grpc.ProfilesServiceStub(channel)
            for _ in range(int(sys.argv[4])):
                try:
                    stub.Export(request("refused"), timeout=30)
                    codes.append("OK")
                except grpc.RpcError as error:
                    codes.append(error.code().name)
        print(json.dumps({"codes": codes}))
    else:
        sys.exit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
