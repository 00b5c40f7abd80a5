"""A known call chain for the agent's Python frame tests: outer_loop → middle_step → inner_hot,
with nearly all the time in inner_hot. Runs for argv[1] seconds."""
import sys
import time


def inner_hot(n):
    total = 0
    for i in range(n):
        total += i * i
    return total


def middle_step(n):
    return inner_hot(n)


def outer_loop(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        middle_step(20000)


outer_loop(float(sys.argv[1]))
