// A deep stack for the agent's tests: main → rec × (DEPTH + 1) → spin, where all the time goes.
// Deeper than the agent's 1,024 frames, it keeps the innermost (spin and 1,023 rec) and marks the
// stack cut. Build: gcc -O1 -fomit-frame-pointer -g. Usage: agent-c-deep [SECONDS] [DEPTH]
// (defaults: an hour, 1,100).
#include <stdlib.h>
#include <time.h>

volatile unsigned long sink;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) void spin(double seconds)
{
	double start = now();
	unsigned long x = 1;
	while (now() - start < seconds)
		for (int i = 0; i < 100000; i++)
			x = x * 6364136223846793005UL + 1442695040888963407UL;
	sink = x;
}

// Not a tail call (the volatile read after it), so every level keeps its frame.
__attribute__((noinline)) void rec(int depth, double seconds)
{
	volatile int here = depth;
	if (depth == 0)
		spin(seconds);
	else
		rec(depth - 1, seconds);
	sink += here;
}

int main(int argc, char **argv)
{
	rec(argc > 2 ? atoi(argv[2]) : 1100, argc > 1 ? atof(argv[1]) : 3600);
	return 0;
}
