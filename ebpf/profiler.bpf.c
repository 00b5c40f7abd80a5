// SPDX-License-Identifier: GPL-2.0
//
// profiler.bpf.c: the agent's CPU sampler. Attached to a `cpu-clock` perf event on every online
// CPU. For a sample with a user stack it copies the user registers (rip, rsp, rbp), the top
// STACK_COPY_BYTES of the user stack and the kernel stack into the `stack_samples` ring buffer:
// userspace unwinds the copy with the objects' .eh_frame (perf's `--call-graph dwarf` way).
// Samples without a user stack (kernel threads), and any whose copy does not fit in the ring
// buffer, are counted per (process, user stack, kernel stack) with frame-pointer stacks
// (`bpf_get_stackid`). Userspace (`pkg/agent/src/bpf.rs`) loads it with aya.
//
// Two sets of maps, switched: `counts0`/`stacks0` and `counts1`/`stacks1`. `half` (one u32)
// says which set the program writes; userspace flips it, waits out the programs already running,
// then drains and clears the other set while new samples go to the fresh one. Nothing is lost
// while userspace reads.
//
// The ABI shared with userspace (the key layout, the `stats` indices, the `proc_event` layout)
// is mirrored in `pkg/agent/src/bpf.rs`: change both together.
//
// Frame pointers are the fast path where they are valid: for a process whose executable code
// userspace found to keep frame pointers (`fp_code`: Go binaries, and objects built with
// -fno-omit-frame-pointer, as Fedora and Ubuntu 24.04 build their packages), the program walks
// the user stack by frame pointers itself, while every return address stays in that code, and
// sends the frames with the top LEAF_COPY_BYTES of the stack (userspace checks the leaf frame
// with its CFI: a sample in a prologue, an epilogue or a frameless leaf would skip a caller).
// Any step that leaves that code or reads nothing falls back to the stack copy.
//
// CPython processes (userspace writes a `py_config` for each: `pkg/agent/src/python/`) also get
// their Python frames read at sample time, since the interpreter changes its frame chain within
// microseconds: the thread's PyThreadState from glibc's thread-specific data (the thread pointer,
// fsbase, plus the slot of CPython's `autoTSSkey`), then each frame's code object, instruction and
// entry marker, innermost first. Userspace names the code objects from /proc/PID/mem and places
// the Python frames among the native ones (ebpf/python.md).
//
// Build: ebpf/build.sh (clang -O2 -g -target bpf; the object is committed as profiler.bpf.o).

#include <linux/bpf.h>
#include <linux/bpf_perf_event.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>

// The kernel fields read, relocated by the loader against the running kernel's BTF (CO-RE).
struct thread_struct {
	unsigned long fsbase;
} __attribute__((preserve_access_index));

struct task_struct {
	struct thread_struct thread;
} __attribute__((preserve_access_index));

// Deepest stack recorded, in frames: the kernel's own limit for stack maps
// (`sysctl kernel.perf_event_max_stack` defaults to 127).
#define MAX_STACK_DEPTH 127
// Distinct stacks one half can hold per window (each bucket preallocates 127 × 8 bytes, so one
// stack map costs about 17 MB of kernel memory).
#define MAX_STACKS 16384
// Distinct (process, user stack, kernel stack) keys one half can hold per window.
#define MAX_COUNTS 16384
// Processes whose first sample has been announced to userspace.
#define MAX_KNOWN_PIDS 32768
// Bytes of user stack copied per sample, from the stack pointer up (a power of two: offsets are
// masked with it). 32 KiB hold 127 frames of typical C, C++ and Rust code and most stacks of
// code with large frames (rustc's threads needed more than 16 KiB in a fifth of samples); deeper frames
// are cut (userspace marks the stack `unreadable_memory`).
#define STACK_COPY_BYTES 32768
#define PAGE_BYTES 4096
// Bytes of user stack sent with a frame-pointer walk, from the stack pointer up: enough for the
// leaf frame's return address in all but leaves with large locals (userspace then marks the
// stack `unreadable_memory` rather than guess).
#define LEAF_COPY_BYTES 1024
// Address ranges of frame-pointer code per process (`fp_code`): its executable mappings.
#define MAX_FP_RANGES 16
// Processes with frame-pointer code known at once.
#define MAX_FP_PROCESSES 8192
// The ring buffer of stack copies, emptied by userspace every 100 ms. Userspace sizes it at load
// to four times what the CPUs send in that time (8 to 64 MiB); a copy that does not fit falls back
// to frame-pointer stacks, counted in STAT_COPY_LOST.
#define STACK_SAMPLES_BYTES (8 * 1024 * 1024)

// Python frames read per sample, at most (innermost first); a deeper chain is cut (PY_DEPTH).
#define MAX_PY_FRAMES 96
// CPython processes whose frames are read at once.
#define MAX_PY_PROCESSES 4096
// Bytes read of each Python frame at most (`py_config.window_len`); a power of two.
#define PY_WINDOW_BYTES 128
// `py_config.cframe_frame` when the thread state points at the frame itself (3.10, 3.13+).
#define PY_NO_CFRAME 0xffffffff
// glibc keeps the first 32 thread-specific keys inline in the thread descriptor.
#define PY_INLINE_TSD_KEYS 32

// `bpf_get_stackid` returns -EFAULT when there is no stack of that kind (the kernel stack of a
// sample taken in user mode, the user stack of a kernel thread), -EEXIST when another stack
// already holds its hash bucket (no BPF_F_REUSE_STACKID: reusing would corrupt counted ids).
#define EFAULT 14
#define EEXIST 17

// Indices into `stats`: mirrored by `Stat` in pkg/agent/src/bpf.rs.
enum stat {
	STAT_SAMPLES = 0,          // samples of a process (pid != 0) seen by the program
	STAT_IDLE = 1,             // samples of the idle task, not recorded
	STAT_STACK_COLLISION = 2,  // a stack's bucket was taken by another stack: recorded without it
	STAT_STACK_ERROR = 3,      // any other stack map failure (map full, no memory)
	STAT_USER_UNREADABLE = 4,  // a user-mode sample whose user stack could not be read
	STAT_COUNTS_FULL = 5,      // the counts map was full: the sample is lost
	STAT_EVENTS_LOST = 6,      // the ring buffer was full: a new process was not announced
	STAT_COPY_LOST = 7,        // the stack copy did not fit in `stack_samples`: counted with frame pointers
	STAT_COPIED = 8,           // samples sent with a copy of their user stack
	STAT_FP_WALKED = 9,        // samples sent with their user stack walked by frame pointers
	STAT_FP_FALLBACK = 10,     // a frame-pointer walk left the process's frame-pointer code: copied instead
	STAT_PY_WALKED = 11,       // samples of a Python thread sent with its Python frames
	STAT_PY_CUT = 12,          // of which the Python frame chain was cut (depth or an unreadable frame)
	STAT_LEN = 13,
};

struct count_key {
	__u32 pid;           // the process (thread group id)
	__s32 user_stack;    // id in stacks<half>, or -1 when there is none
	__s32 kernel_stack;  // id in stacks<half>, or -1 when there is none
};

// Sent at a process's first sample (and first after an exec) so userspace reads /proc/PID while it lives.
struct proc_event {
	__u32 pid;
	__u32 kind;          // 0: first sample of the process (or first since its exec)
	char comm[16];       // the sampled thread's name
};

// How a frame-pointer walk ended (`stack_sample.walk_end`).
enum walk_end {
	WALK_NONE = 0,       // not walked: `stack` is a copy of the stack
	WALK_COMPLETE = 1,   // reached a null frame pointer or return address: the start
	WALK_DEPTH = 2,      // stopped at MAX_STACK_DEPTH frames with more left
};

// How the Python frame chain of a sample ended (`stack_sample.py_end`).
enum py_end {
	PY_NONE = 0,         // not a Python thread (or a process without `py_config`)
	PY_COMPLETE = 1,     // reached the thread's outermost frame
	PY_DEPTH = 2,        // stopped at MAX_PY_FRAMES frames with more left
	PY_UNREADABLE = 3,   // a frame could not be read: the frames before it are sent
};

// One Python frame as read at sample time: mirrored by `parse_sample` in pkg/agent/src/bpf.rs.
struct py_frame {
	__u64 code;          // the code object (or, for a 3.12+ shim frame, whatever it points at)
	__u64 fingerprint;   // of the code object's fields, to tell a reused address (py_fingerprint)
	__s32 index;         // the instruction, in code units from the start of the bytecode
	__u32 marker;        // the entry marker byte (is_entry in 3.11, owner in 3.12+), 0 in 3.10
};

// Where a CPython process keeps its frames: written by userspace (`python::BpfConfig`) for
// each process running a CPython it recognized, from that version's layout.
struct py_config {
	__u64 tss;              // address of the interpreter's `Py_tss_t autoTSSkey`: {int initialized; unsigned key}
	__u32 tsd_offset;       // from the thread pointer to glibc's slot 0 value; slots are 16 bytes apart
	__u32 tstate_frame;     // offset in PyThreadState of the frame (3.10, 3.13+) or of the _PyCFrame (3.11, 3.12)
	__u32 cframe_frame;     // offset in _PyCFrame of `current_frame`; PY_NO_CFRAME when there is none
	__u32 frame_window;     // offset in a frame of the bytes read of it,
	__u32 window_len;       // how many (at most PY_WINDOW_BYTES),
	__u32 window_code;      // and offsets in them of: the code object,
	__u32 window_previous;  // the caller's frame,
	__u32 window_instr;     // the instruction (a pointer into the code object; 3.10: the int f_lasti),
	__u32 window_marker;    // the entry marker byte (PY_WINDOW_BYTES when there is none: 3.10)
	__u32 instr_is_pointer; // 1: `window_instr` holds a pointer; 0: an int index
	__u32 code_bytecode;    // offset of the bytecode in the code object (co_code_adaptive)
	__u32 code_argcount;    // offset of co_argcount: 8 bytes from there are fingerprinted
	__u32 code_firstlineno; // offset of co_firstlineno: the 8 bytes ending with it are fingerprinted
	__u32 pad;
};

// A sample with its user stack copied or walked: mirrored by `parse_sample` in
// pkg/agent/src/bpf.rs. Only the header, the kernel frames and `stack_len` bytes of `stack`
// are sent. `stack` holds `user_len` bytes of return addresses (8 each, innermost first; the
// sampled `ip` is not among them) when the stack was walked, then `py_len` bytes of Python
// frames (`struct py_frame`) when the thread runs Python, then the top of the stack from `sp`
// (all of it that was copied, or enough to check a walked stack's leaf frame).
struct stack_sample {
	__u32 pid;
	__u32 tid;
	__u32 kernel_len;    // bytes of `kernel` used (8 per frame)
	__u32 stack_len;     // bytes of `stack` sent
	__u32 user_len;      // bytes of return addresses at the start of `stack` (walked samples)
	__u32 walk_end;      // enum walk_end
	__u32 py_len;        // bytes of `struct py_frame` after the return addresses
	__u32 py_end;        // enum py_end
	__u64 ip;            // user registers: where the thread was in user mode
	__u64 sp;
	__u64 bp;
	__u64 kernel[MAX_STACK_DEPTH];
	// PAGE_BYTES of slack past the copy's limit: the verifier checks every page-sized read at a
	// masked offset below STACK_COPY_BYTES against the buffer, so the buffer must hold one more.
	__u8 stack[STACK_COPY_BYTES + PAGE_BYTES];
};

#define SAMPLE_HEADER_BYTES (sizeof(struct stack_sample) - STACK_COPY_BYTES - PAGE_BYTES)

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} half SEC(".maps");

// Scratch space for one `stack_sample` per CPU (too large for the 512-byte BPF stack, and for a
// per-CPU array, whose values are at most 32 KiB): an array indexed by CPU number, sized to the
// possible CPUs by userspace at load time. A perf event program is not preempted on its CPU.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct stack_sample);
} scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, STACK_SAMPLES_BYTES);
} stack_samples SEC(".maps");

// The executable code of a process that keeps frame pointers, as [start, end) ranges; a process
// has an entry only when all its executable code does (userspace writes it: `Sampler::set_fp_code`).
struct fp_code {
	__u32 n;             // ranges used
	__u32 pad;
	__u64 start[MAX_FP_RANGES];
	__u64 end[MAX_FP_RANGES];
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_FP_PROCESSES);
	__type(key, __u32);
	__type(value, struct fp_code);
} fp_code SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_PY_PROCESSES);
	__type(key, __u32);
	__type(value, struct py_config);
} py_configs SEC(".maps");

// Scratch space for the bytes of one Python frame per CPU.
struct py_window {
	__u8 bytes[PY_WINDOW_BYTES];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct py_window);
} py_scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_COUNTS);
	__type(key, struct count_key);
	__type(value, __u64);
} counts0 SEC(".maps"), counts1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(max_entries, MAX_STACKS);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, MAX_STACK_DEPTH * sizeof(__u64));
} stacks0 SEC(".maps"), stacks1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, STAT_LEN);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_KNOWN_PIDS);
	__type(key, __u32);
	__type(value, __u8);
} known_pids SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 64 * 1024);
} proc_events SEC(".maps");

static __always_inline void bump(__u32 index)
{
	__u64 *value = bpf_map_lookup_elem(&stats, &index);
	if (value)
		*value += 1; // per-CPU: no other writer
}

static __always_inline void announce(__u32 pid)
{
	struct proc_event *event = bpf_ringbuf_reserve(&proc_events, sizeof(*event), 0);
	if (!event) {
		bump(STAT_EVENTS_LOST);
		// Forget the process so that its next sample tries again.
		bpf_map_delete_elem(&known_pids, &pid);
		return;
	}
	event->pid = pid;
	event->kind = 0;
	bpf_get_current_comm(event->comm, sizeof(event->comm));
	bpf_ringbuf_submit(event, 0);
}

// Stack id from `bpf_get_stackid`, counting failures; -1 when there is none.
static __always_inline __s32 stack_id(long id, int user_mode_sample, int is_user_stack)
{
	if (id >= 0)
		return (__s32)id;
	if (id == -EFAULT) {
		// Empty, except for the user stack of a sample taken in user mode.
		if (is_user_stack && user_mode_sample)
			bump(STAT_USER_UNREADABLE);
	} else if (id == -EEXIST) {
		bump(STAT_STACK_COLLISION);
	} else {
		bump(STAT_STACK_ERROR);
	}
	return -1;
}

static __always_inline void announce_if_new(__u32 pid)
{
	__u8 yes = 1;
	if (bpf_map_update_elem(&known_pids, &pid, &yes, BPF_NOEXIST) == 0)
		announce(pid);
}

static __always_inline int in_fp_code(const struct fp_code *code, __u64 addr)
{
	for (int i = 0; i < MAX_FP_RANGES; i++) {
		if (i >= code->n)
			break;
		if (addr >= code->start[i] && addr < code->end[i])
			return 1;
	}
	return 0;
}

// Copies the user stack from `sp` up into `s->stack` at `at`, page by page, until `limit`
// bytes or an unmapped page (the top of the stack: one read that crossed it would fail whole).
// Returns the bytes copied.
static __always_inline __u32 copy_user_stack(struct stack_sample *s, __u32 at, __u64 sp, __u32 limit)
{
	__u32 len = 0;
	for (int i = 0; i < STACK_COPY_BYTES / PAGE_BYTES + 1; i++) {
		if (len >= limit)
			break;
		__u64 addr = sp + len;
		__u32 chunk = PAGE_BYTES - (addr & (PAGE_BYTES - 1));
		if (chunk > limit - len)
			chunk = limit - len;
		// The compiler would drop checks it can prove; the verifier cannot prove them. The
		// empty asm hides the values so the checks stay and bound the read for the verifier.
		__u64 off = at + len, n = chunk;
		asm volatile("" : "+r"(off), "+r"(n));
		if (off >= STACK_COPY_BYTES || n > PAGE_BYTES)
			break;
		if (bpf_probe_read_user(&s->stack[off], n, (void *)addr) != 0)
			break;
		len += chunk;
	}
	return len;
}

// Walks the user stack by frame pointers from `s->bp` while every return address is in the
// process's frame-pointer code, writing the return addresses to the start of `s->stack`.
// Returns the walk's end (enum walk_end), or WALK_NONE when the walk cannot be trusted (a
// return address outside that code, an unreadable or misaligned frame, a frame below its
// callee's): the caller then copies the stack instead.
static __always_inline __u32 walk_frame_pointers(struct stack_sample *s, const struct fp_code *code)
{
	__u64 bp = s->bp;
	__u64 floor = s->sp;
	__u32 n = 0;
	// A null frame pointer at the leaf: an outermost function or a frameless leaf whose
	// caller cannot be told apart by frame pointers. The copy's CFI walk knows.
	if (bp == 0)
		return WALK_NONE;
	for (int i = 0; i < MAX_STACK_DEPTH - 1; i++) {
		if (bp == 0) {
			s->user_len = n * 8;
			return WALK_COMPLETE;
		}
		if (bp < floor || (bp & 7) != 0)
			return WALK_NONE;
		__u64 frame[2];
		if (bpf_probe_read_user(frame, sizeof(frame), (void *)bp) != 0)
			return WALK_NONE;
		__u64 ra = frame[1];
		if (ra == 0) {
			s->user_len = n * 8;
			return WALK_COMPLETE;
		}
		// The call instruction is before the return address.
		if (!in_fp_code(code, ra - 1))
			return WALK_NONE;
		__u32 at = n * 8;
		asm volatile("" : "+r"(at));
		if (at > (MAX_STACK_DEPTH - 2) * 8)
			return WALK_NONE;
		*(__u64 *)&s->stack[at] = ra;
		n++;
		floor = bp + 16;
		bp = frame[0];
	}
	s->user_len = n * 8;
	return bp == 0 ? WALK_COMPLETE : WALK_DEPTH;
}

// The u64 at `off` in a Python frame's window (0 when `off` is out of it).
static __always_inline __u64 py_window_u64(const struct py_window *w, __u32 off)
{
	asm volatile("" : "+r"(off));
	if (off > PY_WINDOW_BYTES - 8)
		return 0;
	return *(const __u64 *)&w->bytes[off];
}

// What tells one code object from another that later takes its address: 8 bytes from
// co_argcount (argcount, posonlyargcount) and the 8 ending with co_firstlineno. Userspace
// computes the same from the code object it reads (`python::fingerprint`).
static __always_inline __u64 py_fingerprint(const struct py_config *c, __u64 code)
{
	__u64 args = 0, lines = 0;
	bpf_probe_read_user(&args, sizeof(args), (void *)(code + c->code_argcount));
	bpf_probe_read_user(&lines, sizeof(lines), (void *)(code + c->code_firstlineno - 4));
	return args ^ (lines * 0x9E3779B97F4A7C15ULL);
}

// The state of a Python frame walk, for its steps (`py_step`).
struct py_walk {
	struct stack_sample *s;
	const struct py_config *c;
	struct py_window *w;
	__u64 frame;         // the next frame to read (0: the chain's end)
	__u32 at;            // where in `s->stack` the frames go
	__u32 n;             // frames written
	__u32 end;           // enum py_end, once the walk stops
};

// One step of a Python frame walk: reads frame `walk->frame` and moves to its caller; 1 stops.
static long py_step(__u32 index, void *data)
{
	struct py_walk *walk = data;
	struct stack_sample *s = walk->s;
	const struct py_config *c = walk->c;
	struct py_window *w = walk->w;
	__u64 frame = walk->frame;
	if (frame == 0) {
		walk->end = PY_COMPLETE;
		return 1;
	}
	__u64 window_len = c->window_len;
	asm volatile("" : "+r"(window_len));
	if (window_len == 0 || window_len > PY_WINDOW_BYTES ||
	    bpf_probe_read_user(w->bytes, window_len, (void *)(frame + c->frame_window)) != 0) {
		walk->end = PY_UNREADABLE;
		return 1;
	}
	__u64 code = py_window_u64(w, c->window_code);
	__u64 instr = py_window_u64(w, c->window_instr);
	__u32 marker_at = c->window_marker;
	asm volatile("" : "+r"(marker_at));
	__u32 marker = marker_at < PY_WINDOW_BYTES ? w->bytes[marker_at] : 0;
	__u32 off = walk->at + walk->n * sizeof(struct py_frame);
	asm volatile("" : "+r"(off));
	if (off > STACK_COPY_BYTES - sizeof(struct py_frame)) {
		walk->end = PY_DEPTH;
		return 1;
	}
	struct py_frame *f = (struct py_frame *)&s->stack[off];
	f->code = code;
	f->fingerprint = code ? py_fingerprint(c, code) : 0;
	f->index = c->instr_is_pointer ? (__s32)((__s64)(instr - code - c->code_bytecode) >> 1)
				       : (__s32)instr;
	f->marker = marker;
	walk->n++;
	walk->frame = py_window_u64(w, c->window_previous);
	return 0;
}

// Reads the Python frames of the current thread into `s->stack` at `at`, innermost first, when
// its process runs a CPython that userspace described (`py_configs`) and the thread has a
// Python thread state. Returns the bytes written; sets `s->py_end`.
static __always_inline __u32 walk_python(struct stack_sample *s, __u32 at)
{
	s->py_end = PY_NONE;
	struct py_config *c = bpf_map_lookup_elem(&py_configs, &s->pid);
	if (!c)
		return 0;
	__u32 tss[2];
	if (bpf_probe_read_user(tss, sizeof(tss), (void *)c->tss) != 0 || tss[0] != 1 ||
	    tss[1] >= PY_INLINE_TSD_KEYS)
		return 0;
	struct task_struct *task = bpf_get_current_task_btf();
	__u64 fsbase = task->thread.fsbase;
	__u64 tstate = 0, frame = 0;
	// A thread that never ran Python has no thread state in its slot.
	if (bpf_probe_read_user(&tstate, sizeof(tstate),
				(void *)(fsbase + c->tsd_offset + 16 * (__u64)tss[1])) != 0 ||
	    tstate == 0)
		return 0;
	if (bpf_probe_read_user(&frame, sizeof(frame), (void *)(tstate + c->tstate_frame)) != 0)
		return 0;
	if (c->cframe_frame != PY_NO_CFRAME && frame != 0 &&
	    bpf_probe_read_user(&frame, sizeof(frame), (void *)(frame + c->cframe_frame)) != 0)
		return 0;
	__u32 zero = 0;
	struct py_window *w = bpf_map_lookup_elem(&py_scratch, &zero);
	if (!w)
		return 0;
	struct py_walk walk = {
		.s = s,
		.c = c,
		.w = w,
		.frame = frame,
		.at = at,
		.n = 0,
		.end = PY_DEPTH,
	};
	// bpf_loop: the verifier checks one step, not MAX_PY_FRAMES unrolled ones (which, with the
	// stack copy after them, passed its limit of a million instructions).
	bpf_loop(MAX_PY_FRAMES, py_step, &walk, 0);
	__u32 n = walk.n;
	__u32 end = walk.end;
	if (n == 0 && end == PY_COMPLETE)
		return 0; // a thread state with no frame: the thread runs no Python now
	s->py_end = end;
	bump(STAT_PY_WALKED);
	if (end != PY_COMPLETE)
		bump(STAT_PY_CUT);
	return n * sizeof(struct py_frame);
}

// Sends the sample with its user registers and kernel stack, and its user stack walked by frame
// pointers (when the process's code keeps them) or copied; 1 when sent. 0 when there is no user
// context (a kernel thread) or the ring buffer is full: the caller then counts it with
// frame-pointer stacks.
static __always_inline int send_user_stack(struct bpf_perf_event_data *ctx, __u32 pid, int user_mode)
{
	__u32 cpu = bpf_get_smp_processor_id();
	struct stack_sample *s = bpf_map_lookup_elem(&scratch, &cpu);
	if (!s)
		return 0;
	if (user_mode) {
		s->ip = ctx->regs.rip;
		s->sp = ctx->regs.rsp;
		s->bp = ctx->regs.rbp;
	} else {
		// In the kernel: the user registers are those saved on entry, at the top of the
		// task's kernel stack.
		struct pt_regs regs;
		struct task_struct *task = bpf_get_current_task_btf();
		struct pt_regs *saved = (struct pt_regs *)bpf_task_pt_regs(task);
		if (!saved || bpf_probe_read_kernel(&regs, sizeof(regs), saved) != 0)
			return 0;
		// A kernel thread has no user context.
		if ((regs.cs & 3) != 3)
			return 0;
		s->ip = regs.rip;
		s->sp = regs.rsp;
		s->bp = regs.rbp;
	}
	if (s->ip == 0 || s->sp == 0)
		return 0;
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	s->pid = pid;
	s->tid = (__u32)pid_tgid;
	long k = user_mode ? 0 : bpf_get_stack(ctx, s->kernel, sizeof(s->kernel), 0);
	s->kernel_len = k > 0 ? (__u32)k : 0;

	s->user_len = 0;
	s->walk_end = WALK_NONE;
	struct fp_code *code = bpf_map_lookup_elem(&fp_code, &pid);
	if (code && in_fp_code(code, s->ip)) {
		s->walk_end = walk_frame_pointers(s, code);
		if (s->walk_end == WALK_NONE) {
			s->user_len = 0;
			bump(STAT_FP_FALLBACK);
		}
	}

	__u32 at = s->user_len;
	asm volatile("" : "+r"(at));
	if (at > (MAX_STACK_DEPTH - 1) * 8)
		return 0;
	s->py_len = walk_python(s, at);
	at += s->py_len;
	asm volatile("" : "+r"(at));
	if (at > (MAX_STACK_DEPTH - 1) * 8 + MAX_PY_FRAMES * sizeof(struct py_frame))
		return 0;
	__u32 limit = s->walk_end == WALK_NONE ? STACK_COPY_BYTES : LEAF_COPY_BYTES;
	__u64 len = at + copy_user_stack(s, at, s->sp, limit);
	// Python frames take their room from the copy: what was copied past STACK_COPY_BYTES
	// (into the slack page) is not sent. (A limit of STACK_COPY_BYTES - at for the copy
	// itself made the verifier's work pass its limit.)
	if (len > STACK_COPY_BYTES)
		len = STACK_COPY_BYTES;
	asm volatile("" : "+r"(len));
	if (len > STACK_COPY_BYTES)
		return 0;
	s->stack_len = len;
	__u64 size = SAMPLE_HEADER_BYTES + len;
	if (bpf_ringbuf_output(&stack_samples, s, size, 0) != 0) {
		bump(STAT_COPY_LOST);
		return 0;
	}
	bump(s->walk_end == WALK_NONE ? STAT_COPIED : STAT_FP_WALKED);
	return 1;
}

SEC("perf_event")
int profile_cpu(struct bpf_perf_event_data *ctx)
{
	__u32 pid = bpf_get_current_pid_tgid() >> 32;
	if (pid == 0) {
		bump(STAT_IDLE);
		return 0;
	}
	bump(STAT_SAMPLES);

	__u32 zero = 0;
	__u32 *which = bpf_map_lookup_elem(&half, &zero);
	if (!which)
		return 0;
	// Read once: the two maps written below must be of the same half.
	__u32 h = *which & 1;
	void *stacks = h ? (void *)&stacks1 : (void *)&stacks0;
	void *counts = h ? (void *)&counts1 : (void *)&counts0;

	// x86-64: the low two bits of CS are the privilege level, 3 in user mode.
	int user_mode = (ctx->regs.cs & 3) == 3;

	if (send_user_stack(ctx, pid, user_mode)) {
		announce_if_new(pid);
		return 0;
	}

	struct count_key key = {
		.pid = pid,
		.user_stack = stack_id(bpf_get_stackid(ctx, stacks, BPF_F_USER_STACK), user_mode, 1),
		.kernel_stack = stack_id(bpf_get_stackid(ctx, stacks, 0), user_mode, 0),
	};

	__u64 *count = bpf_map_lookup_elem(counts, &key);
	if (count) {
		__sync_fetch_and_add(count, 1);
	} else {
		__u64 one = 1;
		// BPF_NOEXIST: when two CPUs insert the same key at once, the loser adds instead.
		if (bpf_map_update_elem(counts, &key, &one, BPF_NOEXIST) != 0) {
			count = bpf_map_lookup_elem(counts, &key);
			if (count)
				__sync_fetch_and_add(count, 1);
			else
				bump(STAT_COUNTS_FULL);
		}
	}

	announce_if_new(pid);
	return 0;
}

// exec replaces a process's mappings: forget the process so that its next sample announces it
// again and userspace rereads /proc/PID/maps. (Announcing every exec would make userspace read
// /proc for processes that never run long enough to be sampled.)
SEC("raw_tracepoint/sched_process_exec")
int on_exec(void *ctx)
{
	__u32 pid = bpf_get_current_pid_tgid() >> 32;
	bpf_map_delete_elem(&known_pids, &pid);
	bpf_map_delete_elem(&fp_code, &pid);
	bpf_map_delete_elem(&py_configs, &pid);
	return 0;
}

// A process that exits is forgotten, so that a new process given the same pid is announced.
SEC("raw_tracepoint/sched_process_exit")
int on_exit(void *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 pid = pid_tgid >> 32;
	// Only the thread group leader's exit ends the process.
	if ((__u32)pid_tgid == pid) {
		bpf_map_delete_elem(&known_pids, &pid);
		bpf_map_delete_elem(&fp_code, &pid);
		bpf_map_delete_elem(&py_configs, &pid);
	}
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
