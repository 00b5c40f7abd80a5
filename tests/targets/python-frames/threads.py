"""Two Python threads with their own chains (worker_a → spin_a, worker_b → spin_b) while the
main thread waits. Runs for argv[1] seconds; says `ready` once the threads run."""
import sys
import threading
import time


def spin_a(end):
    x = 0
    while time.monotonic() < end:
        for i in range(5000):
            x += i
    return x


def spin_b(end):
    x = 1
    while time.monotonic() < end:
        for i in range(5000):
            x ^= i
    return x


def worker_a(end):
    spin_a(end)


def worker_b(end):
    spin_b(end)


end = time.monotonic() + float(sys.argv[1])
threads = [
    threading.Thread(target=worker_a, args=(end,), name="a"),
    threading.Thread(target=worker_b, args=(end,), name="b"),
]
for t in threads:
    t.start()
print("ready", flush=True)
for t in threads:
    t.join()
