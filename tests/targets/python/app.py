"""e2e-python-target: a small Python program for the end-to-end tests of the server.

Serves pypprof's Go-style endpoints on 127.0.0.1:PORT (/debug/pprof/profile?seconds=N is a
CPU profile from zprofile; /debug/pprof/goroutine lists the threads' stacks) and keeps two
recognisable functions busy on worker threads:

    py_hot_fib     recursive Fibonacci
    py_hot_hash    sha256 over a growing buffer

Usage: python app.py --port PORT [--duty 0.1]
"""
import argparse
import hashlib
import sys
import threading
import time

from pypprof.net_http import start_pprof_server


def py_hot_fib(n):
    return n if n < 2 else py_hot_fib(n - 1) + py_hot_fib(n - 2)


def py_hot_hash(rounds):
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


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--duty", type=float, default=0.1)
    a = ap.parse_args()
    duty = min(max(a.duty, 0.01), 1.0)
    # The profiler's signal handler must be registered on the main thread: start it first.
    start_pprof_server(host="127.0.0.1", port=a.port)
    for name, work in (("fib", lambda: py_hot_fib(18)), ("hash", lambda: py_hot_hash(5000))):
        threading.Thread(target=busy, args=(work, duty), name=name, daemon=True).start()
    print("e2e-python-target %s serving pypprof on http://127.0.0.1:%d/debug/pprof/"
          % (sys.version.split()[0], a.port), flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
