/* A tiny JIT for the agent's perf-map test: it writes the machine code of one function
 * (a counted loop with a frame-pointer frame) into anonymous executable memory, names it
 * `jit_hot_loop` in /tmp/perf-PID.map as JITs such as the JVM's perf-map agent or LuaJIT do,
 * and calls it for argv[1] seconds. x86-64 only. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static const unsigned char code[] = {
	0x55,             /* push rbp */
	0x48, 0x89, 0xe5, /* mov rbp, rsp */
	0x48, 0x89, 0xf9, /* mov rcx, rdi */
	0x48, 0xff, 0xc9, /* loop: dec rcx */
	0x75, 0xfb,       /* jnz loop */
	0x5d,             /* pop rbp */
	0xc3,             /* ret */
};

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

/* Kept out of line, with a frame, so the JIT code's caller is a named native frame. */
__attribute__((noinline)) static void run(void (*hot)(long), double seconds)
{
	double end = now() + seconds;
	while (now() < end)
		hot(20 * 1000 * 1000);
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 10;
	unsigned char *mem = mmap(NULL, 4096, PROT_READ | PROT_WRITE | PROT_EXEC,
				  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (mem == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	memcpy(mem + 64, code, sizeof(code));
	char path[64];
	snprintf(path, sizeof(path), "/tmp/perf-%d.map", getpid());
	FILE *map = fopen(path, "w");
	if (!map) {
		perror(path);
		return 1;
	}
	fprintf(map, "%lx %zx jit_hot_loop\n", (unsigned long)(mem + 64), sizeof(code));
	fclose(map);
	run((void (*)(long))(mem + 64), seconds);
	unlink(path);
	return 0;
}
