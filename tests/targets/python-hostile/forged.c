// A program that looks like CPython 3.11 to the agent and whose interpreter memory is hostile:
// built as an executable named like python (`python3.11-forged`), it exports `_PyRuntime`,
// `Py_Version` and `_PyEval_EvalFrameDefault` as CPython does, and its runtime state leads to
// thread states whose frame chains are forged. Each of its threads spins in
// `_PyEval_EvalFrameDefault` with one kind of forgery:
//
//   0. a frame that is its own caller (a cycle), whose code object's fields point at itself,
//      at unmapped memory, and at a "bytes" object claiming 2^40 bytes;
//   1. a frame whose code object is at an unmapped address and whose caller is unmapped;
//   2. a chain of 10,000 frames (longer than any walk reads), each with a code object of
//      random words.
//
// The offsets are CPython 3.11's (x86_64), as `pkg/agent/src/python/layout.rs` has them.
// Usage: python3.11-forged SECONDS

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RUNTIME_INTERPRETERS_HEAD 40
#define RUNTIME_TSS 592
#define INTERP_THREADS_HEAD 16
#define TSTATE_NEXT 8
#define TSTATE_THREAD_ID 152
#define TSTATE_CFRAME 56
#define CFRAME_CURRENT_FRAME 8
#define FRAME_CODE 32
#define FRAME_PREVIOUS 48
#define FRAME_PREV_INSTR 56
#define FRAME_IS_ENTRY 68
#define CODE_FILENAME 112
#define CODE_NAME 128
#define CODE_LINETABLE 136

#define THREADS 3
#define LONG_CHAIN 10000
#define UNMAPPED 0xdead00000000ull

__attribute__((visibility("default"), aligned(64))) unsigned char _PyRuntime[4096];
__attribute__((visibility("default"))) const unsigned long Py_Version = 0x030B07F0;

static unsigned char interp[256];
static unsigned char tstates[THREADS][512];
static unsigned char cframes[THREADS][64];
static unsigned char cyclic_frame[128];
static unsigned char cyclic_code[512];
static unsigned char huge_bytes[64];
static unsigned char unmapped_frame[128];
static unsigned char (*chain)[128];
static unsigned char (*chain_codes)[256];
static pthread_key_t key;
static double seconds;

static void put(unsigned char *base, unsigned offset, uint64_t value)
{
	memcpy(base + offset, &value, sizeof(value));
}

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

// Where a real interpreter runs Python code: the agent places Python frames at its native
// frames, so the threads spin here.
__attribute__((visibility("default"), noinline)) uint64_t _PyEval_EvalFrameDefault(void *tstate,
										   void *frame, int throwflag)
{
	(void)frame;
	(void)throwflag;
	volatile uint64_t x = (uint64_t)tstate;
	double end = now() + seconds;
	while (now() < end)
		for (int i = 0; i < 1000000; i++)
			x = x * 6364136223846793005ull + 1442695040888963407ull;
	return x;
}

static void *run(void *arg)
{
	long i = (long)arg;
	put(tstates[i], TSTATE_THREAD_ID, (uint64_t)pthread_self());
	pthread_setspecific(key, tstates[i]);
	_PyEval_EvalFrameDefault(tstates[i], 0, 0);
	return 0;
}

int main(int argc, char **argv)
{
	seconds = argc > 1 ? atof(argv[1]) : 60;
	pthread_key_create(&key, 0);

	// 0: a cycle, its code object pointing at itself, at nothing, and at a huge "bytes".
	put(cyclic_frame, FRAME_CODE, (uint64_t)cyclic_code);
	put(cyclic_frame, FRAME_PREVIOUS, (uint64_t)cyclic_frame);
	put(cyclic_frame, FRAME_PREV_INSTR, (uint64_t)cyclic_code + 200);
	cyclic_frame[FRAME_IS_ENTRY] = 1;
	memset(cyclic_code, 0x41, sizeof(cyclic_code));
	put(cyclic_code, CODE_FILENAME, (uint64_t)cyclic_code);
	put(cyclic_code, CODE_NAME, UNMAPPED);
	put(huge_bytes, 16, 1ull << 40);
	put(cyclic_code, CODE_LINETABLE, (uint64_t)huge_bytes);
	put(cframes[0], CFRAME_CURRENT_FRAME, (uint64_t)cyclic_frame);

	// 1: a code object and a caller at unmapped addresses.
	put(unmapped_frame, FRAME_CODE, UNMAPPED + 0x1000);
	put(unmapped_frame, FRAME_PREVIOUS, UNMAPPED + 0x2000);
	put(unmapped_frame, FRAME_PREV_INSTR, UNMAPPED + 0x3000);
	put(cframes[1], CFRAME_CURRENT_FRAME, (uint64_t)unmapped_frame);

	// 2: a chain longer than any walk, of code objects made of random words.
	chain = calloc(LONG_CHAIN, sizeof(*chain));
	chain_codes = calloc(LONG_CHAIN, sizeof(*chain_codes));
	uint64_t r = 0x9e3779b97f4a7c15ull;
	for (int i = 0; i < LONG_CHAIN; i++) {
		for (unsigned w = 0; w < sizeof(chain_codes[i]); w += 8) {
			r ^= r << 13;
			r ^= r >> 7;
			r ^= r << 17;
			put(chain_codes[i], w, r);
		}
		put(chain[i], FRAME_CODE, (uint64_t)chain_codes[i]);
		put(chain[i], FRAME_PREVIOUS, i + 1 < LONG_CHAIN ? (uint64_t)chain[i + 1] : 0);
		put(chain[i], FRAME_PREV_INSTR, (uint64_t)chain_codes[i] + 8 * (i % 16));
		chain[i][FRAME_IS_ENTRY] = i % 7 == 0;
	}
	put(cframes[2], CFRAME_CURRENT_FRAME, (uint64_t)chain[0]);

	// The runtime: initialized, its key, one interpreter with the three thread states.
	uint32_t tss[2] = {1, (uint32_t)key};
	memcpy(_PyRuntime + RUNTIME_TSS, tss, sizeof(tss));
	put(_PyRuntime, RUNTIME_INTERPRETERS_HEAD, (uint64_t)interp);
	put(interp, INTERP_THREADS_HEAD, (uint64_t)tstates[0]);
	for (int i = 0; i < THREADS; i++) {
		put(tstates[i], TSTATE_CFRAME, (uint64_t)cframes[i]);
		put(tstates[i], TSTATE_NEXT, i + 1 < THREADS ? (uint64_t)tstates[i + 1] : 0);
	}

	pthread_t threads[THREADS];
	for (long i = 1; i < THREADS; i++)
		pthread_create(&threads[i], 0, run, (void *)i);
	run((void *)0);
	for (int i = 1; i < THREADS; i++)
		pthread_join(threads[i], 0);
	return 0;
}
