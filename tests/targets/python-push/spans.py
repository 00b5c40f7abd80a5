"""e2e-python-spans: span profiles as Grafana documents them for Python, for the end-to-end
test of span profiles (tests/e2e/spans.rs).

pyroscope-io samples the program; OpenTelemetry's SDK traces it, and pyroscope-otel's
PyroscopeSpanProcessor tags the samples taken during each root span with its span_id,
trace_id and span_name. The program serves --requests requests one after the other, each a
root span named "request" that burns --burn seconds of CPU in span_hot_work, then shuts
pyroscope down (which pushes what is left) and prints one line of JSON:

    {"spans": [{"span_id": "…", "trace_id": "…"}, …]}

Usage: python spans.py --server http://127.0.0.1:PORT --app NAME [--requests 5] [--burn 0.2]
"""
import argparse
import json
import time

import pyroscope
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from pyroscope.otel import PyroscopeSpanProcessor


def span_hot_work(seconds):
    end = time.process_time() + seconds
    x = 0
    while time.process_time() < end:
        for i in range(2000):
            x = (x * 31 + i) % 1000003
    return x


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", required=True, help="the server's base URL")
    ap.add_argument("--app", required=True, help="application name (service_name)")
    ap.add_argument("--requests", type=int, default=5)
    ap.add_argument("--burn", type=float, default=0.2, help="CPU seconds per request")
    a = ap.parse_args()
    pyroscope.configure(
        application_name=a.app,
        server_address=a.server,
        sample_rate=100,
        upload_interval=1,
        tags={"e2e": "python-spans"},
    )
    provider = TracerProvider()
    provider.add_span_processor(PyroscopeSpanProcessor())
    trace.set_tracer_provider(provider)
    tracer = trace.get_tracer("e2e-python-spans")
    spans = []
    for _ in range(a.requests):
        with tracer.start_as_current_span("request") as span:
            ctx = span.get_span_context()
            spans.append({"span_id": format(ctx.span_id, "016x"), "trace_id": format(ctx.trace_id, "032x")})
            span_hot_work(a.burn)
    # Let the last upload interval close, then push what is left.
    time.sleep(1.5)
    pyroscope.shutdown()
    print(json.dumps({"spans": spans}), flush=True)


if __name__ == "__main__":
    main()
