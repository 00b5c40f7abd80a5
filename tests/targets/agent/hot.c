// A known workload for the agent's tests: nearly all time in main → work → hot_leaf.
// Build: gcc -O0 -fno-omit-frame-pointer -g (at -O2 gcc drops the leaf's frame, and the walk
// would skip `work`). Usage: agent-c-hot [SECONDS] (default: an hour).
#include <stdlib.h>
#include <time.h>

volatile unsigned long sink;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

unsigned long hot_leaf(unsigned long x)
{
	for (int i = 0; i < 200000; i++)
		x = x * 6364136223846793005UL + 1442695040888963407UL;
	return x;
}

void work(double seconds)
{
	double start = now();
	unsigned long x = 1;
	while (now() - start < seconds)
		x = hot_leaf(x);
	sink = x;
}

int main(int argc, char **argv)
{
	work(argc > 1 ? atof(argv[1]) : 3600);
	return 0;
}
