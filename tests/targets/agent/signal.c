// Time spent in a signal handler, for the agent's tests: work() raises SIGUSR1 in a loop and the
// handler does the work, so stacks go sig_hot_leaf ← on_signal ← (the kernel's signal frame,
// glibc's __restore_rt) ← raise ← work ← main.
// Build: gcc -O2 -fomit-frame-pointer -g. Usage: agent-c-signal [SECONDS].
#include <signal.h>
#include <stdlib.h>
#include <time.h>

volatile unsigned long sink;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) unsigned long sig_hot_leaf(unsigned long x)
{
	for (int i = 0; i < 200000; i++)
		x = x * 6364136223846793005UL + 1442695040888963407UL;
	return x;
}

__attribute__((noinline)) static void on_signal(int sig)
{
	sink = sig_hot_leaf(sink + (unsigned long)sig);
}

__attribute__((noinline)) void work(double seconds)
{
	double start = now();
	while (now() - start < seconds)
		raise(SIGUSR1);
}

int main(int argc, char **argv)
{
	signal(SIGUSR1, on_signal);
	work(argc > 1 ? atof(argv[1]) : 3600);
	return 0;
}
