"""e2e-python-push: a small Python program for the end-to-end test of the server's push ingest.

It keeps two recognisable functions busy on worker threads and lets the real Pyroscope Python
SDK (pyroscope-io, which samples it with py-spy) push its CPU profile to a server:

    push_hot_fib     recursive Fibonacci
    push_hot_hash    sha256 over a growing buffer

pyroscope-io 1.x (requirements.txt) pushes to POST {server}/push.v1.PusherService/Push every
--upload-interval seconds; 0.8.x (requirements-legacy.txt) pushes to the legacy
POST {server}/ingest?name=...&from=...&until=...&format=pprof on 10-second aligned windows (it
has no upload interval). The application name becomes the series' `service_name`.

Usage: python app.py --server http://127.0.0.1:PORT --app NAME [--upload-interval 2] [--duty 0.1]
"""
import argparse
import hashlib
import inspect
import signal
import sys
import threading
import time

import pyroscope


def push_hot_fib(n):
    return n if n < 2 else push_hot_fib(n - 1) + push_hot_fib(n - 2)


def push_hot_hash(rounds):
    h = hashlib.sha256()
    for i in range(rounds):
        h.update(str(i).encode())
    return h.hexdigest()


def busy(work, duty):
    while True:
        started = time.monotonic()
        work()
        worked = time.monotonic() - started
        time.sleep(worked * (1 - duty) / duty)


def sdk_version():
    try:
        from importlib.metadata import version
        return version("pyroscope-io")
    except Exception:  # noqa: BLE001 - only for the log line
        return "unknown"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", required=True, help="the server's base URL")
    ap.add_argument("--app", required=True, help="application name (service_name)")
    ap.add_argument("--upload-interval", type=int, default=2, help="seconds (pyroscope-io 1.x only)")
    ap.add_argument("--duty", type=float, default=0.1, help="fraction of wall time each worker works")
    a = ap.parse_args()
    duty = min(max(a.duty, 0.01), 1.0)
    version = sdk_version()
    options = dict(
        application_name=a.app,
        server_address=a.server,
        sample_rate=100,
        tags={"e2e": "python-push", "sdk": version},
    )
    # 0.8.x has no upload interval (it pushes on 10-second windows).
    if "upload_interval" in inspect.signature(pyroscope.configure).parameters:
        options["upload_interval"] = a.upload_interval
    pyroscope.configure(**options)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    for name, work in (("fib", lambda: push_hot_fib(18)), ("hash", lambda: push_hot_hash(5000))):
        threading.Thread(target=busy, args=(work, duty), name=name, daemon=True).start()
    print("e2e-python-push: Python %s, pyroscope-io %s pushing to %s as %s"
          % (sys.version.split()[0], version, a.server, a.app), flush=True)
    try:
        while True:
            time.sleep(1)
    except (KeyboardInterrupt, SystemExit):
        pyroscope.shutdown()


if __name__ == "__main__":
    main()
