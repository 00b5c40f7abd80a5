// Deep work for the agent's tests: main → down_vla / down_fixed, alternating, 400 levels deep →
// work, which sorts with libc's qsort (whose frames keep no frame pointer) calling back into
// `compare`. Built without frame pointers: only the unwind tables find every frame, through
// frames whose CFA is rsp-based (down_fixed) and rbp-based (down_vla: a variable-length array).
// Build: gcc -O2 -fomit-frame-pointer -g. Usage: agent-c-deep-work [SECONDS] [DEPTH] (defaults:
// an hour, 400).
#include <stdlib.h>
#include <time.h>

#define N 4096

volatile unsigned long sink;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) static int compare(const void *a, const void *b)
{
	unsigned long x = *(const unsigned long *)a, y = *(const unsigned long *)b;
	return (x > y) - (x < y);
}

__attribute__((noinline)) void work(double seconds)
{
	static unsigned long values[N];
	unsigned long x = 1;
	double start = now();
	while (now() - start < seconds) {
		for (int i = 0; i < N; i++) {
			x = x * 6364136223846793005UL + 1442695040888963407UL;
			values[i] = x >> 17;
		}
		qsort(values, N, sizeof(values[0]), compare);
		sink += values[N / 2];
	}
}

void down_vla(int depth, double seconds);

// A fixed frame: its CFA is rsp-based throughout.
__attribute__((noinline)) void down_fixed(int depth, double seconds)
{
	volatile char pad[64];
	pad[depth % 64] = (char)depth;
	if (depth == 0)
		work(seconds);
	else
		down_vla(depth - 1, seconds);
	sink += pad[depth % 64];
}

// A variable-length array: the compiler keeps rbp as this frame's base (CFA = rbp + 16).
__attribute__((noinline)) void down_vla(int depth, double seconds)
{
	volatile char pad[16 + depth % 5 * 8];
	pad[0] = (char)depth;
	if (depth == 0)
		work(seconds);
	else
		down_fixed(depth - 1, seconds);
	sink += pad[0];
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 3600;
	int depth = argc > 2 ? atoi(argv[2]) : 400;
	down_fixed(depth - 1, seconds);
	return 0;
}
