// A deep stack for the agent's tests: main → rec × 200 → spin, where all the time goes. The
// agent keeps the innermost 127 frames (spin and 126 rec) and marks the stack cut.
// Build: gcc -O1 -fomit-frame-pointer -g. Usage: agent-c-deep [SECONDS] (default: an hour).
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
	rec(200, argc > 1 ? atof(argv[1]) : 3600);
	return 0;
}
