// A multi-threaded workload for the agent's tests: two threads, each spending its time in
// thread_hot_leaf ← thread_work ← start_thread, while main waits in pthread_join.
// Build: gcc -O2 -fomit-frame-pointer -g -pthread. Usage: agent-c-threads [SECONDS].
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

volatile unsigned long sink;
static double seconds = 3600;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) unsigned long thread_hot_leaf(unsigned long x)
{
	for (int i = 0; i < 200000; i++)
		x = x * 6364136223846793005UL + 1442695040888963407UL;
	return x;
}

__attribute__((noinline)) void *thread_work(void *arg)
{
	double start = now();
	unsigned long x = (unsigned long)arg;
	while (now() - start < seconds)
		x = thread_hot_leaf(x);
	sink = x;
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc > 1)
		seconds = atof(argv[1]);
	pthread_t threads[2];
	for (long i = 0; i < 2; i++)
		pthread_create(&threads[i], NULL, thread_work, (void *)(i + 1));
	for (int i = 0; i < 2; i++)
		pthread_join(threads[i], NULL);
	return 0;
}
