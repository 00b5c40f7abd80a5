"""Calls one method of Parca's QueryService with grpcio (a real gRPC client, over HTTP/2) and
prints one line of JSON: the status code, and the response's initial metadata, where a
server whose shard did not answer puts its warnings (`parca-warning`).

Usage: grpc_metadata.py HOST:PORT METHOD. The request is the method's empty message (all its
fields default), so METHOD is one whose defaults make sense, e.g. ProfileTypes.
"""

import json
import sys

import grpc


def main():
    target, method = sys.argv[1], sys.argv[2]
    with grpc.insecure_channel(target) as channel:
        call = channel.unary_unary(f"/parca.query.v1alpha1.QueryService/{method}")
        try:
            _, outcome = call.with_call(b"", timeout=60)
            code = outcome.code().name
            metadata = outcome.initial_metadata()
        except grpc.RpcError as e:
            code = e.code().name
            metadata = e.initial_metadata()
    print(json.dumps({"code": code, "metadata": [[k, v] for k, v in metadata]}))


if __name__ == "__main__":
    main()
