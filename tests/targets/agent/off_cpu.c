// A known workload for the agent's off-CPU test: the main thread sleeps 10 ms at a time in
// `sleeping_function` (time off CPU, waiting), while SPINNERS threads spin in `spin_forever`
// (on CPU, preempted now and then; with more of them than CPUs the machine is loaded).
// Build: gcc -O0 -fno-omit-frame-pointer -g -pthread. Usage: agent-c-off-cpu [SECONDS [SPINNERS]]
// (default: an hour, 1 spinner).
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

volatile unsigned long sink;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

void spin_forever(void)
{
	for (;;)
		sink++;
}

static void *spinner(void *arg)
{
	(void)arg;
	spin_forever();
	return NULL;
}

void sleeping_function(void)
{
	struct timespec ten_ms = {0, 10 * 1000 * 1000};
	nanosleep(&ten_ms, NULL);
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 3600;
	int spinners = argc > 2 ? atoi(argv[2]) : 1;
	for (int i = 0; i < spinners; i++) {
		pthread_t t;
		pthread_create(&t, NULL, spinner, NULL);
	}
	double start = now();
	while (now() - start < seconds)
		sleeping_function();
	return 0;
}
