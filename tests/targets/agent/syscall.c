// A syscall-heavy workload for the agent's tests: main → work → read_zero_loop reads /dev/zero
// in 1 MiB blocks, so most time is in the kernel (read → vfs_read → read_iter_zero → …).
// Build: gcc -O0 -fno-omit-frame-pointer -g. Usage: agent-c-syscall [SECONDS].
#include <fcntl.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static char buf[1 << 20];

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

void read_zero_loop(int fd)
{
	for (int i = 0; i < 64; i++)
		if (read(fd, buf, sizeof buf) < 0)
			exit(1);
}

void work(double seconds)
{
	int fd = open("/dev/zero", O_RDONLY);
	if (fd < 0)
		exit(1);
	double start = now();
	while (now() - start < seconds)
		read_zero_loop(fd);
}

int main(int argc, char **argv)
{
	work(argc > 1 ? atof(argv[1]) : 3600);
	return 0;
}
