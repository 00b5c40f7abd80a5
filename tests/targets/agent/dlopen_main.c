// Loads a library after a delay (so after the agent has read the process) and spends its
// time in it: lib_hot_leaf ← lib_work (in libagenthot.so) ← main.
// Build: gcc -O2 -fomit-frame-pointer -g -o agent-c-dlopen dlopen_main.c -ldl.
// Usage: agent-c-dlopen LIBRARY DELAY_SECONDS SECONDS.
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	if (argc < 4)
		return 2;
	double delay = atof(argv[2]), seconds = atof(argv[3]);
	// Busy before the library exists in the process, so the agent reads its maps early.
	double start = now();
	volatile unsigned long x = 1;
	while (now() - start < delay)
		x = x * 3 + 1;
	void *lib = dlopen(argv[1], RTLD_NOW);
	if (!lib) {
		fprintf(stderr, "%s\n", dlerror());
		return 1;
	}
	void (*lib_work)(double) = (void (*)(double))dlsym(lib, "lib_work");
	if (!lib_work)
		return 1;
	fprintf(stderr, "loaded\n");
	lib_work(seconds);
	return 0;
}
