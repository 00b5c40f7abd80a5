// The library agent-c-dlopen loads: its time goes to lib_hot_leaf ← lib_work.
// Build: gcc -O2 -fomit-frame-pointer -g -shared -fPIC -o libagenthot.so dlopen_lib.c.
#include <time.h>

volatile unsigned long lib_sink;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) unsigned long lib_hot_leaf(unsigned long x)
{
	for (int i = 0; i < 200000; i++)
		x = x * 6364136223846793005UL + 1442695040888963407UL;
	return x;
}

__attribute__((noinline)) void lib_work(double seconds)
{
	double start = now();
	unsigned long x = 1;
	while (now() - start < seconds)
		x = lib_hot_leaf(x);
	lib_sink = x;
}
