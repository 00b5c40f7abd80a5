"""C extension code under its Python caller: compress_loop calls zlib.compress (libz) in a
loop. Runs for argv[1] seconds; says `ready` as the loop begins."""
import sys
import time
import zlib


def compress_loop(seconds):
    data = bytes(range(256)) * 4096 + b"".join(str(i).encode() for i in range(100000))
    end = time.monotonic() + seconds
    print("ready", flush=True)
    while time.monotonic() < end:
        zlib.compress(data, 9)


compress_loop(float(sys.argv[1]))
