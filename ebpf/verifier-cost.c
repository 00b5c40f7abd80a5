/* Loads the agent's BPF object with the verifier's statistics on and prints, for each program,
 * how many instructions the verifier processed (its limit is a million). Run as root through
 * ebpf/verifier-cost.sh. */
#include <stdio.h>
#include <string.h>
#include <bpf/libbpf.h>

#define MAX_PROGRAMS 16
static char logs[MAX_PROGRAMS][1 << 16];

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s OBJECT\n", argv[0]);
		return 2;
	}
	struct bpf_object *obj = bpf_object__open_file(argv[1], NULL);
	if (!obj) {
		perror(argv[1]);
		return 1;
	}
	struct bpf_program *prog;
	int i = 0;
	bpf_object__for_each_program(prog, obj) {
		if (i == MAX_PROGRAMS)
			break;
		bpf_program__set_log_level(prog, 4); /* statistics only */
		bpf_program__set_log_buf(prog, logs[i], sizeof(logs[i]));
		i++;
	}
	int err = bpf_object__load(obj);
	i = 0;
	bpf_object__for_each_program(prog, obj) {
		if (i == MAX_PROGRAMS)
			break;
		const char *stats = strstr(logs[i], "processed");
		printf("%s: %s", bpf_program__name(prog), stats ? stats : "no statistics\n");
		i++;
	}
	bpf_object__close(obj);
	if (err) {
		fprintf(stderr, "load failed: %d\n", err);
		return 1;
	}
	return 0;
}
