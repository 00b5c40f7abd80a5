// SPDX-License-Identifier: GPL-2.0
//
// profiler.bpf.c: the agent's CPU sampler. Attached to a `cpu-clock` perf event on every online
// CPU. It unwinds each sample's user stack here, in the kernel, with the unwind tables userspace
// compiled from the objects' .eh_frame/.debug_frame (`parca_symbolize::unwind::compact`), and
// sends the return addresses with the kernel stack through the `stack_samples` ring buffer: no
// user stack is copied. Samples without a user stack (kernel threads), of processes whose
// mappings userspace has not told yet, and any that do not fit in the ring buffer, are counted
// per (process, user stack, kernel stack) with frame-pointer stacks (`bpf_get_stackid`).
// Userspace (`pkg/agent/src/bpf.rs`) loads it with aya.
//
// The unwind tables: `unwind_rows` is one array of fixed-size chunks of rows (sized at load time
// by the agent's budget); each object's table (by build id, shared by every process that maps the
// object) is a run of rows in it, named by an id in `unwind_objects`. `proc_maps` holds, per
// process, its executable mappings sorted by address, each with its object's table id and load
// bias. A walk step binary-searches the process's mappings, then finds the row (from a per-CPU
// cache of rows found lately, else by a binary search of the rows of the address's page, which the
// table's page index gives), and applies it:
// CFA = rsp or rbp + offset (or a PLT stub's expression, or a signal frame's saved registers),
// return address at CFA - 8, saved rbp at CFA + offset. `bpf_loop` runs the steps: the verifier
// checks one step, whatever the depth (MAX_USER_FRAMES).
//
// Frame pointers are the fast path where they are valid: in a mapping whose object keeps them
// (userspace's census, MAP_FP), every frame but the leaf is left by its frame pointer; the leaf
// always goes by its row (a sample in a prologue, an epilogue or a frameless leaf would skip a
// caller). A frame-pointer step that lands outside every mapping is redone with the row.
//
// Two sets of maps, switched: `counts0`/`stacks0` and `counts1`/`stacks1`. `half` (one u32)
// says which set the program writes; userspace flips it, waits out the programs already running,
// then drains and clears the other set while new samples go to the fresh one. Nothing is lost
// while userspace reads.
//
// The ABI shared with userspace (the key layout, the `stats` indices, the `proc_event`,
// `stack_sample`, unwind row and mapping layouts) is mirrored in `pkg/agent/src/bpf.rs`: change
// both together.
//
// CPython processes (userspace writes a `py_config` for each: `pkg/agent/src/python/`) also get
// their Python frames read at sample time, since the interpreter changes its frame chain within
// microseconds: the thread's PyThreadState from glibc's thread-specific data (the thread pointer,
// fsbase, plus the slot of CPython's `autoTSSkey`), then each frame's code object, instruction and
// entry marker, innermost first. Userspace names the code objects from /proc/PID/mem and places
// the Python frames among the native ones (ebpf/python.md).
//
// PHP processes (non-thread-safe builds: the CLI, php-fpm's workers; `pkg/agent/src/php.rs`) get
// theirs read the same way from the main thread's `executor_globals.current_execute_data`: each
// `zend_execute_data` names its function, its current opline and its caller (ebpf/php.md).
// Ruby processes (`pkg/agent/src/ruby.rs`) get each thread's control frames read from its
// execution context (`ruby_current_ec`, in libruby's static TLS below fsbase): an array of
// frames up to the end of the thread's VM stack, each naming its iseq, pc and flags
// (ebpf/ruby.md).
//
// Off-CPU time (only attached when the agent's `--off-cpu-threshold` is above 0): at a task's
// switch-out (`sched_switch`, which runs in the context of the task leaving, so its registers and
// memory are the current ones), with that probability, its stack is walked as a CPU sample's is
// and sent, and the time and whether it was preempted or went to wait are kept per thread
// (`off_cpu_start`); when the thread is switched in again, the interval's end is sent. No kprobe
// is needed (kernels built without CONFIG_KPROBES have none), only the raw tracepoint.
//
// Build: ebpf/build.sh (clang -O2 -g -target bpf; the object is committed as profiler.bpf.o).

#include <linux/bpf.h>
#include <linux/bpf_perf_event.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

// The kernel fields read, relocated by the loader against the running kernel's BTF (CO-RE).
struct thread_struct {
	unsigned long fsbase;
} __attribute__((preserve_access_index));

struct task_struct {
	struct thread_struct thread;
	unsigned int flags;
	int pid;
	int tgid;
} __attribute__((preserve_access_index));

// `task_struct.flags`: a kernel thread.
#define PF_KTHREAD 0x00200000
// A task state (`sched_switch`'s prev_state): the thread has exited.
#define TASK_DEAD 0x00000080

// Set by userspace at load (`bpf::Sampler::start`). The probability that a switch-out is
// recorded, scaled to a u32 (0xffffffff: every one); and the agent's own process, whose
// switches (it wakes for the samples it reads) are not recorded.
const volatile __u32 off_cpu_threshold = 0;
const volatile __u32 agent_tgid = 0;

// Deepest kernel stack recorded, and deepest user stack of the frame-pointer fallback, in
// frames: the kernel's own limit for stack maps (`sysctl kernel.perf_event_max_stack`).
#define MAX_STACK_DEPTH 127
// Deepest user stack the in-kernel walk records, in frames (the sampled address included); a
// deeper one keeps its innermost frames and ends WALK_DEPTH. bpf_loop's bound: the verifier
// checks the step once, so this costs no verifier work.
#define MAX_USER_FRAMES 1024
// Distinct stacks one half can hold per window (each bucket preallocates 127 × 8 bytes, so one
// stack map costs about 17 MB of kernel memory).
#define MAX_STACKS 16384
// Distinct (process, user stack, kernel stack) keys one half can hold per window.
#define MAX_COUNTS 16384
// Processes whose first sample has been announced to userspace.
#define MAX_KNOWN_PIDS 32768
// The ring buffer of samples, emptied by userspace every 100 ms; sized by userspace at load.
#define STACK_SAMPLES_BYTES (8 * 1024 * 1024)

// Rows per chunk of `unwind_rows` (a power of two): userspace writes a chunk per syscall.
#define ROWS_PER_CHUNK 512
// Objects' tables held at once.
#define MAX_OBJECTS 16384
// Executable mappings per process (`proc_maps`); a process with more has the rest walked by
// frame pointers.
#define MAX_MAPPINGS 256
// Processes whose mappings are known at once.
#define MAX_PROCESSES 8192
// Binary search steps: over MAX_MAPPINGS mappings, and over an object's rows (at most 2^24).
#define MAPPING_SEARCH_STEPS 9
#define ROW_SEARCH_STEPS 25
// Entries of each CPU's cache of rows found (a power of two), in banks of ROW_CACHE_BANK: a
// per-CPU map's value is at most 32 KiB (the kernel's per-CPU unit), so the cache is a per-CPU
// array of banks. 4,096 entries (80 KiB a CPU): on #28's busy node a sample's frames missed
// 1,024 entries 1.4 times a sample, each miss a binary search costing ~1.8 µs of cold memory.
#define ROW_CACHE_ENTRIES 4096
#define ROW_CACHE_BANK 1024

// Python frames read per sample, at most (innermost first); a deeper chain is cut (PY_DEPTH).
#define MAX_PY_FRAMES 96
// CPython processes whose frames are read at once.
#define MAX_PY_PROCESSES 4096
// Bytes read of each Python frame at most (`py_config.window_len`); a power of two.
#define PY_WINDOW_BYTES 128
// `py_config.cframe_frame` when the thread state points at the frame itself (3.10, 3.13+).
#define PY_NO_CFRAME 0xffffffff
// Threads switched out whose off-CPU interval is open at once.
#define MAX_OFF_CPU_THREADS 65536
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
	STAT_SAMPLES_LOST = 7,     // a walked sample did not fit in `stack_samples`: sent (or counted) walked by frame pointers
	STAT_WALKED = 8,           // samples sent with their user stack walked here
	STAT_FP_WALKED = 9,        // of which some frames were left by their frame pointers (the fast path)
	STAT_FP_FALLBACK = 10,     // frame-pointer steps that led outside every mapping, redone with the row
	STAT_PY_WALKED = 11,       // samples of a Python thread sent with its Python frames
	STAT_PY_CUT = 12,          // of which the Python frame chain was cut (depth or an unreadable frame)
	STAT_NO_PROCESS = 13,      // samples of a process whose mappings userspace has not told yet
	STAT_OFF_CPU = 14,         // off-CPU intervals whose start was sent with its stack
	STAT_OFF_CPU_LOST = 15,    // off-CPU intervals not sent (start or end): process not told yet, no user context, ring buffer full
	STAT_PHP_WALKED = 16,      // samples of a PHP thread sent with its PHP frames
	STAT_PHP_CUT = 17,         // of which the PHP frame chain was cut (depth or an unreadable frame)
	STAT_RUBY_WALKED = 18,     // samples of a Ruby thread sent with its Ruby frames
	STAT_RUBY_CUT = 19,        // of which the Ruby frame chain was cut (depth or an unreadable frame)
	STAT_V8_WALKED = 20,       // samples of a V8 (Node.js) process sent with its JavaScript frames
	STAT_V8_CUT = 21,          // of which some JavaScript frames were left out (more than MAX_PY_FRAMES)
	STAT_JVM_WALKED = 22,      // samples of a JVM process sent with its interpreted Java frames
	STAT_JVM_CUT = 23,         // of which some interpreted frames were left out (more than MAX_PY_FRAMES)
	STAT_JVM_STEPS = 24,       // frames of compiled Java code (or the VM's stubs) left by their size
	STAT_JVM_LOST = 25,        // walks that ended at a frame in the code cache that no blob covers
	STAT_COUNTED = 26,         // samples recorded in `counts<half>` (the ring buffer was full): userspace drains those maps only when this moved
	STAT_KERNEL_WALKED = 27,   // samples sent with a user stack the kernel walked by frame pointers (process not told yet)
	STAT_LEN = 28,
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

// How a walk ended (`stack_sample.walk_end`): mirrored by `StackEnd` in userspace.
enum walk_end {
	WALK_COMPLETE = 1,   // reached the start: an outermost function, a null return address or frame pointer
	WALK_NO_INFO = 2,    // a frame without unwind information, and frame pointers did not lead on
	WALK_UNREADABLE = 3, // memory the next frame needed could not be read
	WALK_DEPTH = 4,      // stopped at MAX_USER_FRAMES frames with more left
	WALK_BAD_INFO = 5,   // a row the walk cannot apply, or one that led nowhere (no progress)
};

// `stack_sample.flags`.
#define SAMPLE_UNKNOWN_ADDRESS 1  // the sampled address is in no mapping userspace told: reread them
#define SAMPLE_TABLE_MISSING 2    // a mapping's object has no table loaded (evicted, or failed)
#define SAMPLE_FP 4               // some frames were left by their frame pointers
#define SAMPLE_KERNEL_FP 8        // the user frames are the kernel's frame-pointer walk (`bpf_get_stack`): userspace judges how it ended

// `stack_sample.kind`: what the sample's value counts.
enum sample_kind {
	KIND_CPU = 0,            // one CPU sample (value 1)
	KIND_OFF_CPU_WAIT = 1,   // nanoseconds off CPU after the task went to wait (sleep, lock, I/O)
	KIND_OFF_CPU_PREEMPTED = 2, // nanoseconds off CPU after the task was preempted while runnable
	KIND_OFF_CPU_END = 3,    // not a sample: the end of an off-CPU interval (`struct off_cpu_end`)
};

// What `off_cpu_start` keeps of a thread switched out.
struct off_cpu_start {
	__u64 at;            // bpf_ktime_get_ns() at the switch-out
	__u32 kind;          // KIND_OFF_CPU_*
	__u32 pad;
};

// One row of an object's unwind table (`parca_symbolize::unwind::compact::CompactRow`): from
// `pc` (the object's virtual address) up to the next row's, the rule `kind` holds.
enum row_kind {
	ROW_END = 0,         // no CFI covers the addresses from here
	ROW_SP = 1,          // CFA = rsp + cfa_offset
	ROW_BP = 2,          // CFA = rbp + cfa_offset
	ROW_PLT = 3,         // CFA = rsp + 8, + 8 once (rip & 15) >= cfa_offset
	ROW_SIGNAL = 4,      // a signal trampoline: the interrupted registers are in the ucontext at rsp
	ROW_OUTERMOST = 5,   // the return address is undefined: the stack's start
	ROW_UNSUPPORTED = 6, // a rule the walk cannot apply
};

enum rbp_rule {
	RBP_SAME = 0,        // unchanged
	RBP_AT = 1,          // saved at CFA + rbp_offset
	RBP_LOST = 2,        // unknown from here on
};

struct unwind_row {
	__u32 pc;
	__u8 kind;           // enum row_kind
	__u8 rbp_rule;       // enum rbp_rule
	__s16 rbp_offset;
	__s32 cfa_offset;
};

struct row_chunk {
	struct unwind_row rows[ROWS_PER_CHUNK];
};

// Where an object's rows are: `n_rows` from global row index `first_row`.
struct object_table {
	__u32 first_row;
	__u32 n_rows;
	// The table's page index, after its rows in `unwind_rows` (packed three u32 to a row,
	// from row `index_row`): entry p counts the rows at or before the first byte of page p
	// (`base_pc + (p << page_shift)`), so an address's row is among entries p to p + 1 of its
	// page: a few search steps over adjacent rows, not ~20 spread over the table, each a cache
	// and TLB miss at 19 Hz. `n_pages` 0: no index (a small table), the whole table is searched.
	__u32 index_row;
	__u32 n_pages;
	__u32 base_pc;
	__u32 page_shift;
};

// `mapping.flags`.
#define MAP_FP 1             // its object keeps frame pointers: non-leaf frames go by them

// One executable mapping of a process: [start, end), its object's table (0: none) and the load
// bias (address - bias = the object's virtual address).
struct mapping {
	__u64 start;
	__u64 end;
	__u64 bias;
	__u32 object;
	__u32 flags;
};

struct proc_maps {
	__u32 n;             // mappings used, sorted by start
	__u32 pad;
	struct mapping m[MAX_MAPPINGS];
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
	__u64 aux;           // V8: the function's SharedFunctionInfo (`py_config.function_aux`); Ruby: ep[-2]; else 0
};
_Static_assert(sizeof(struct py_frame) == 32, "parse_sample reads frames of 32 bytes");

// Which interpreter a `py_config` describes, and so where its innermost frame is found.
enum vm_kind {
	VM_CPYTHON = 0,      // per thread: the thread state in glibc's thread-specific data
	VM_PHP = 1,          // the main thread's only: a global pointer (`executor_globals.current_execute_data`)
	VM_RUBY = 2,         // per thread: the execution context in static TLS (`ruby_current_ec`), its control frames an array
	VM_V8 = 3,           // V8 (Node.js): JavaScript frames are native frames with frame pointers, read during the walk
	VM_HOTSPOT = 4,      // the JVM: compiled frames left by their code blob's frame size, interpreted ones read during the walk
};

// Code heaps of a JVM's code cache described (non-nmethods, profiled and non-profiled methods).
#define HOTSPOT_HEAPS 3
// Hops back through a code heap's segment map to a blob's first segment: each hop goes back up
// to 254 segments (of 64 or 128 bytes), so 32 cover a blob of 500 KiB.
#define HOTSPOT_SEGMAP_HOPS 32
// A compiled frame larger than this many words is taken for a misread.
#define HOTSPOT_MAX_FRAME_WORDS 65536

// How a frame's instruction is sampled (`py_config.instr_mode`), in units from the start of its code.
enum instr_mode {
	INSTR_INDEX = 0,     // an int index in the frame (CPython 3.10's f_lasti)
	INSTR_IN_CODE = 1,   // a pointer into the code object, its bytecode at `code_bytecode` (CPython 3.11+)
	INSTR_IN_ARRAY = 2,  // a pointer into the array whose address is at `code_bytecode` in the code (PHP's opline)
	INSTR_IN_BODY = 3,   // a pointer into the array at `code_bytecode` of the body at `code_body` of the code (Ruby's pc)
};

// Where an interpreter process keeps its frames: written by userspace for each process running
// a CPython (`python::bpf_config`) or PHP (`php::bpf_config`) it recognized, from that version's
// layout. The frames of both are a chain of records, each naming its code and its caller; the
// names of the fields are CPython's.
struct py_config {
	__u64 tss;              // CPython: address of the interpreter's `Py_tss_t autoTSSkey`: {int initialized; unsigned key};
	                        // PHP: address of `executor_globals`
	__u32 tsd_offset;       // from the thread pointer to glibc's slot 0 value; slots are 16 bytes apart
	__u32 tstate_frame;     // offset in PyThreadState of the frame (3.10, 3.13+) or of the _PyCFrame (3.11, 3.12);
	                        // PHP: of `current_execute_data` in `executor_globals`
	__u32 cframe_frame;     // offset in _PyCFrame of `current_frame`; PY_NO_CFRAME when there is none
	__u32 frame_window;     // offset in a frame of the bytes read of it,
	__u32 window_len;       // how many (at most PY_WINDOW_BYTES),
	__u32 window_code;      // and offsets in them of: the code object,
	__u32 window_previous;  // the caller's frame,
	__u32 window_instr;     // the instruction (a pointer into the code object; 3.10: the int f_lasti),
	__u32 window_marker;    // the entry marker byte (PY_WINDOW_BYTES when there is none: 3.10)
	__u32 instr_mode;       // enum instr_mode
	__u32 instr_shift;      // log2 of the bytes of an instruction (pointer modes)
	__u32 code_bytecode;    // offset of the bytecode in the code object (co_code_adaptive; PHP: of `opcodes`)
	__u32 code_argcount;    // offset of co_argcount: 8 bytes from there are fingerprinted
	__u32 code_firstlineno; // offset of co_firstlineno: the 8 bytes ending with it are fingerprinted
	__u32 kind;             // enum vm_kind
	__u32 frame_stride;     // frames in an array (Ruby): the caller is this many bytes on; 0: `window_previous` points at it
	__u32 code_body;        // INSTR_IN_BODY: offset of the body pointer in the code
	__u32 ec_stack;         // Ruby: offsets in the execution context of the VM stack
	__u32 ec_stack_size;    // and of its size in words (the frames end at stack + 8 * size)
	__u32 marker_indirect;  // 1: `window_marker` holds a pointer to the u32 marker (Ruby's ep → flags), and
	                        // the word two before it (ep[-2]: the method entry, or a cref) goes to `aux`
	__u64 code_end;         // V8: the end of the embedded builtins' code, which starts at `tss` (the
	                        // interpreter's frames run there); V8's frame slots are `window_*`
	                        // bytes into the V8_WINDOW_BYTES below the frame pointer
	__u64 code2_start;      // V8: the copy of the builtins it maps beside its compiled code (0..0: none)
	__u64 code2_end;        // HotSpot: `tss`..`code_end` is the interpreter's code
	// V8 and HotSpot: a frame's slots (`window_code`, `window_marker`) are taken for its
	// function's when their low bits (`slot_mask`) are `slot_tag`; frames of anonymous code are
	// read too when `anon_frames` (V8's compiled code), else only those in the ranges above.
	__u32 slot_mask;
	__u32 slot_tag;
	__u32 anon_frames;
	// V8: where from a function's (tagged) address its SharedFunctionInfo field is, read into
	// each frame's `aux` here, where it costs a read of memory the walk just touched, instead
	// of a system call per sample in userspace; 0: nothing read.
	__u32 function_aux;
	// HotSpot: each code heap's memory (`heap_low`..`heap_high`, none when equal) and its segment
	// map (a byte per segment of `1 << segment_shift` bytes: 0xff free, 0 a block's first
	// segment, else how many segments back to hop), and where a CodeBlob (`blob_header` bytes
	// into its block) keeps its frame's size in words (`blob_frame_size`, an int), the offset
	// from its code's start where its frame is set up (`blob_frame_complete`: an int, or with
	// BLOB_COMPLETE_SHORT a short), and its code's start (`blob_code`: a pointer, or with
	// BLOB_CODE_OFFSET an int from the blob); the flags in `blob_flags`.
	__u64 heap_low[HOTSPOT_HEAPS];
	__u64 heap_high[HOTSPOT_HEAPS];
	__u64 heap_segmap[HOTSPOT_HEAPS];
	__u32 segment_shift;
	__u32 blob_header;
	__u32 blob_frame_size;
	__u32 blob_frame_complete;
	__u32 blob_code;
	__u32 blob_flags;
};

#define BLOB_CODE_OFFSET 1
#define BLOB_COMPLETE_SHORT 2

// The bytes below a V8 frame's frame pointer read for its slots (function, context or frame
// type marker, bytecode offset).
#define V8_WINDOW_BYTES 64

// The frame pointers (rbp) of one sample's native frames, by position, kept by the walk (per
// CPU) for `walk_v8`.
struct v8_fps {
	__u64 fp[MAX_USER_FRAMES];
};

// The bytes after the header for the user frames (8 bytes each, the sampled address first)
// and the Python frames after them; the kernel frames, when there are any, follow those.
#define SAMPLE_DATA_BYTES (MAX_USER_FRAMES * 8 + MAX_PY_FRAMES * sizeof(struct py_frame))

// A sample with its user stack walked: mirrored by `parse_sample` in pkg/agent/src/bpf.rs. Only
// the header and `user_len + py_len + kernel_len` bytes of `data` are sent: the kernel frames,
// taken first into `kernel`, are copied after the others, so that a sample taken in user mode
// (most of a busy program's) sends no room for them (the 1 KiB of kernel frames the header once
// held took sending a C program's sample from about 0.9 to 1.6 µs, of 7.9).
struct stack_sample {
	__u32 pid;
	__u32 tid;
	__u32 kernel_len;    // bytes of `kernel` used (8 per frame)
	__u32 user_len;      // bytes of user frames at the start of `data`
	__u32 walk_end;      // enum walk_end
	__u32 py_len;        // bytes of `struct py_frame` after the user frames
	__u32 py_end;        // enum py_end
	__u32 flags;         // SAMPLE_*
	__u64 value;         // 1 for a CPU sample; 0 for an off-CPU one (its end carries the time)
	__u32 kind;          // enum sample_kind
	__u32 pad;
	__u8 data[SAMPLE_DATA_BYTES + MAX_STACK_DEPTH * 8];
	__u64 kernel[MAX_STACK_DEPTH]; // not sent from here: copied into `data`
};

#define SAMPLE_HEADER_BYTES __builtin_offsetof(struct stack_sample, data)
_Static_assert(SAMPLE_HEADER_BYTES == 48, "parse_sample reads the data at byte 48");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} half SEC(".maps");

// Scratch space for one `stack_sample` per CPU (too large for the 512-byte BPF stack): an array
// indexed by CPU number, sized to the possible CPUs by userspace at load time. A perf event
// program is not preempted on its CPU.
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

// The rows of every object's table, in chunks; userspace sizes it at load (the table budget).
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct row_chunk);
} unwind_rows SEC(".maps");

// Object table id → where its rows are. Ids are never reused: a mapping naming an evicted table
// finds nothing rather than another object's rows.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_OBJECTS);
	__type(key, __u32);
	__type(value, struct object_table);
} unwind_objects SEC(".maps");

// Rows found lately, per CPU: (table id, address) → row, direct-mapped. A stack's frames mostly
// return into call sites sampled before (a recursion's one call site hundreds of times), each
// of which the binary search over the table would find again. An address no row covers is kept
// too (kind ROW_END). Table ids are never reused, so an entry stays true for as long as it can
// match.
struct row_cache_entry {
	__u32 object;
	__u32 pc;
	struct unwind_row row;
};

struct row_cache {
	struct row_cache_entry e[ROW_CACHE_BANK];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, ROW_CACHE_ENTRIES / ROW_CACHE_BANK);
	__type(key, __u32);
	__type(value, struct row_cache);
} row_cache SEC(".maps");

// Process → its executable mappings; allocated per entry (8 KiB each), bounded by userspace.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_PROCESSES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, struct proc_maps);
} proc_maps SEC(".maps");

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
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct v8_fps);
} v8_scratch SEC(".maps");

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

// Every counter in one value, so that userspace reads them all with one system call.
struct stat_counters {
	__u64 n[STAT_LEN];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct stat_counters);
} stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_KNOWN_PIDS);
	__type(key, __u32);
	__type(value, __u8);
} known_pids SEC(".maps");

// Thread → when it was switched out (recorded ones only); LRU, since a thread may never run again.
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_OFF_CPU_THREADS);
	__type(key, __u32);
	__type(value, struct off_cpu_start);
} off_cpu_start SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 64 * 1024);
} proc_events SEC(".maps");

static __always_inline void bump(__u32 index)
{
	__u32 zero = 0;
	struct stat_counters *c = bpf_map_lookup_elem(&stats, &zero);
	if (c && index < STAT_LEN)
		c->n[index] += 1; // per-CPU: no other writer
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
	// Looked up first: an update that finds the key (nearly every sample) still takes the
	// bucket's lock with interrupts off, measured at 1.3 µs a sample, a sixth of a short
	// walk's sample; the lookup takes no lock.
	if (bpf_map_lookup_elem(&known_pids, &pid))
		return;
	__u8 yes = 1;
	if (bpf_map_update_elem(&known_pids, &pid, &yes, BPF_NOEXIST) == 0)
		announce(pid);
}

// The state of a binary search (`search_step`): the first index in [lo, hi) whose key is above
// `key` ends up in `lo`. `maps` set: over a process's mappings by start; else over rows by pc.
struct search {
	struct proc_maps *maps;
	__u64 key;
	__u32 lo;
	__u32 hi;
	__u32 failed;        // an index could not be read
	__u32 pad;
};

static __always_inline struct unwind_row *row_at(__u32 index);

// One step of a binary search; 1 stops. Run by bpf_loop, so the verifier checks one step
// (a bounded loop here, inside the walk's step, made it explore every path of every
// iteration).
static long search_step(__u32 index, void *data)
{
	struct search *r = data;
	if (r->lo >= r->hi)
		return 1;
	__u32 mid = r->lo + (r->hi - r->lo) / 2;
	__u64 key;
	if (r->maps) {
		asm volatile("" : "+r"(mid));
		if (mid >= MAX_MAPPINGS) {
			r->failed = 1;
			return 1;
		}
		key = r->maps->m[mid].start;
	} else {
		struct unwind_row *row = row_at(mid);
		if (!row) {
			r->failed = 1;
			return 1;
		}
		key = row->pc;
	}
	if (key <= r->key)
		r->lo = mid + 1;
	else
		r->hi = mid;
	return 0;
}

// The mapping of `maps` holding `addr`, or NULL.
static __always_inline struct mapping *find_mapping(struct proc_maps *maps, __u64 addr)
{
	__u32 n = maps->n;
	struct search r = {
		.maps = maps,
		.key = addr,
		.lo = 0,
		.hi = n > MAX_MAPPINGS ? MAX_MAPPINGS : n,
	};
	bpf_loop(MAPPING_SEARCH_STEPS, search_step, &r, 0);
	__u32 at = r.lo - 1;
	asm volatile("" : "+r"(at));
	if (r.failed || r.lo == 0 || at >= MAX_MAPPINGS)
		return 0;
	struct mapping *m = &maps->m[at];
	return addr < m->end ? m : 0;
}

// The row with global index `index`, or NULL.
static __always_inline struct unwind_row *row_at(__u32 index)
{
	__u32 chunk = index / ROWS_PER_CHUNK;
	struct row_chunk *c = bpf_map_lookup_elem(&unwind_rows, &chunk);
	if (!c)
		return 0;
	return &c->rows[index & (ROWS_PER_CHUNK - 1)];
}

// Entry `k` of a table's page index that starts at row `index_row`, into `out`; 0 when it
// cannot be read.
static __always_inline int index_entry(__u32 index_row, __u32 k, __u32 *out)
{
	struct unwind_row *row = row_at(index_row + k / 3);
	if (!row)
		return 0;
	// The row's 12 bytes read as three u32.
	__u64 off = (k % 3) * 4;
	asm volatile("" : "+r"(off));
	if (off > 8)
		return 0;
	*out = *(__u32 *)((__u8 *)row + off);
	return 1;
}

// A row search's range narrowed by the table's page index (`struct object_table`): in, the
// table and the address; out, the rows [from, to) of the table that can hold its row.
struct page_query {
	__u32 index_row;
	__u32 n_pages;
	__u32 base_pc;
	__u32 page_shift;
	__u32 n_rows;
	__u32 pc;
	__u32 from;
	__u32 to;
};

// Narrows `q` to the address's page (left whole without an index, or for an address outside
// it). Global: the verifier checks it once, where inlined its branches doubled the walk step's
// paths (239,000 instructions processed became 407,000).
__attribute__((noinline)) int page_range(struct page_query *q)
{
	if (!q)
		return 0;
	q->from = 0;
	q->to = q->n_rows;
	__u32 page = (q->pc - q->base_pc) >> (q->page_shift & 31);
	if (q->pc < q->base_pc || page >= q->n_pages)
		return 0;
	__u32 from, to;
	if (!index_entry(q->index_row, page, &from) || !index_entry(q->index_row, page + 1, &to) ||
	    from > to || to > q->n_rows)
		return 0;
	q->from = from;
	q->to = to;
	return 1;
}

// Copies into `out` the row of mapping `m` that covers `addr`; 0 when none does (no table, a
// gap between functions, an address before the first row).
static __always_inline int find_row(struct stack_sample *s, struct mapping *m, __u64 addr,
				    struct unwind_row *out)
{
	if (m->object == 0)
		return 0;
	__u64 rel = addr - m->bias;
	if (rel >> 32)
		return 0;
	__u32 pc = (__u32)rel;
	__u32 hash = ((pc ^ (pc >> 12)) * 0x9e3779b1u ^ m->object) & (ROW_CACHE_ENTRIES - 1);
	__u32 bank = hash / ROW_CACHE_BANK;
	__u32 slot = hash & (ROW_CACHE_BANK - 1);
	struct row_cache *cache = bpf_map_lookup_elem(&row_cache, &bank);
	// Never null (bank < ROW_CACHE_ENTRIES / ROW_CACHE_BANK); ended here, the verifier does
	// not walk the rest of the step without a cache too.
	if (!cache)
		return 0;
	struct row_cache_entry *e = &cache->e[slot];
	if (e->object == m->object && e->pc == pc) {
		// ROW_END: no row covers the address (code without CFI, as a JIT's builtins),
		// which the search would find again as slowly.
		if (e->row.kind == ROW_END)
			return 0;
		*out = e->row;
		return 1;
	}
	// A cached row stays true after its table is evicted (the same object, the same
	// address), so the table is looked up only when the cache misses.
	struct object_table *t = bpf_map_lookup_elem(&unwind_objects, &m->object);
	if (!t) {
		s->flags |= SAMPLE_TABLE_MISSING;
		return 0;
	}
	__u32 first = t->first_row;
	struct page_query q = {
		.index_row = t->index_row,
		.n_pages = t->n_pages,
		.base_pc = t->base_pc,
		.page_shift = t->page_shift,
		.n_rows = t->n_rows,
		.pc = pc,
	};
	page_range(&q);
	struct search r = {
		.maps = 0,
		.key = pc,
		.lo = first + q.from,
		.hi = first + q.to,
	};
	bpf_loop(ROW_SEARCH_STEPS, search_step, &r, 0);
	__u32 lo = r.lo;
	if (r.failed || r.lo < r.hi)
		return 0;
	struct unwind_row *row = lo > first ? row_at(lo - 1) : 0;
	if (lo > first && !row)
		return 0;
	struct unwind_row found = {};
	if (row)
		found = *row;
	e->object = m->object;
	e->pc = pc;
	e->row = found;
	if (found.kind == ROW_END)
		return 0;
	*out = found;
	return 1;
}

static __always_inline int read_u64(__u64 *out, __u64 addr)
{
	return bpf_probe_read_user(out, sizeof(*out), (void *)addr) == 0;
}

// The state of a walk, for its steps (`walk_step`): the registers of the frame last written.
struct walk {
	struct stack_sample *s;
	struct proc_maps *maps;
	__u64 ip;
	__u64 sp;
	__u64 bp;
	__u32 n;             // frames written
	__u32 end;           // enum walk_end, once the walk stops
	__u8 bp_known;       // rbp is known (a row may have lost it)
	__u8 exact;          // `ip` is exact (the leaf, or interrupted by a signal), not a return address
	__u8 after_fp;       // this frame was reached through a frame pointer without a row
	__u8 pad;
	struct v8_fps *fps;  // the frames' frame pointers
};

// A frame's registers, in and out of `hotspot_step`, and its process.
struct jvm_regs {
	__u64 ip;
	__u64 sp;
	__u64 bp;
	__u32 exact;
	__u32 pid;
};

// `hotspot_step`: the address is in none of the JVM's code it knows; frame pointers may lead on.
#define JVM_NOT_MINE 100

// The first segment of the block of a code heap (`low`, its segment map `segmap`) holding
// `at`, hopping back through the map; -1 when the segment is free or not found.
static __always_inline __s64 hotspot_block(__u64 low, __u64 segmap, __u32 shift, __u64 at)
{
	__u64 seg = (at - low) >> shift;
	for (int i = 0; i < HOTSPOT_SEGMAP_HOPS; i++) {
		__u8 tag;
		if (bpf_probe_read_user(&tag, 1, (void *)(segmap + seg)) != 0 || tag == 0xff)
			return -1;
		if (tag == 0)
			return (__s64)seg;
		if (tag > seg)
			return -1;
		seg -= tag;
	}
	return -1;
}

// Whether `addr` is in the JVM's code: its interpreter's or a code heap's.
static __always_inline int hotspot_code(const struct py_config *c, __u64 addr)
{
	if (addr >= c->tss && addr < c->code_end)
		return 1;
	for (int i = 0; i < HOTSPOT_HEAPS; i++) {
		if (addr >= c->heap_low[i] && addr < c->heap_high[i])
			return 1;
	}
	return 0;
}

// Leaves a frame of the JVM's code at `r->ip` (`r->ip - 1` for a return address) for its
// caller, in place. An interpreted frame keeps a frame pointer, and its caller's stack pointer
// (before the interpreter extended it by the arguments) just below it; a compiled frame (or a
// stub's) has no frame pointer but a fixed size, kept by its code blob, found through its code
// heap's segment map. Returns 0 when it did, JVM_NOT_MINE, or how the walk ends. A global
// function: the verifier checks it once, apart from the walk's paths.
__attribute__((noinline)) int hotspot_step(struct jvm_regs *r)
{
	if (!r)
		return WALK_NO_INFO;
	__u32 pid = r->pid;
	const struct py_config *c = bpf_map_lookup_elem(&py_configs, &pid);
	if (!c || c->kind != VM_HOTSPOT)
		return JVM_NOT_MINE;
	__u64 at = r->exact ? r->ip : r->ip - 1;
	if (at >= c->tss && at < c->code_end) {
		// [bp - 8] the caller's stack pointer, [bp] its rbp, [bp + 8] the return address.
		__u64 frame[3];
		if (r->bp <= r->sp || (r->bp & 7) != 0 ||
		    bpf_probe_read_user(frame, sizeof(frame), (void *)(r->bp - 8)) != 0)
			return JVM_NOT_MINE;
		if (frame[0] <= r->sp || frame[0] > r->bp + 16 + (1 << 20))
			frame[0] = r->bp + 16;
		r->sp = frame[0];
		r->bp = frame[1];
		r->ip = frame[2];
		return 0;
	}
	__u64 low = 0, segmap = 0;
	for (int i = 0; i < HOTSPOT_HEAPS; i++) {
		if (at >= c->heap_low[i] && at < c->heap_high[i]) {
			low = c->heap_low[i];
			segmap = c->heap_segmap[i];
		}
	}
	if (low == 0)
		return JVM_NOT_MINE;
	__u32 shift = c->segment_shift & 31;
	__s64 seg = hotspot_block(low, segmap, shift, at);
	if (seg < 0) {
		bump(STAT_JVM_LOST);
		return WALK_NO_INFO;
	}
	__u64 blob = low + ((__u64)seg << shift) + c->blob_header;
	__s32 frame_size = 0, complete = 0;
	__u64 code = 0;
	if (bpf_probe_read_user(&frame_size, 4, (void *)(blob + c->blob_frame_size)) != 0 ||
	    bpf_probe_read_user(&complete, 4, (void *)(blob + c->blob_frame_complete)) != 0)
		return WALK_UNREADABLE;
	if (c->blob_flags & BLOB_COMPLETE_SHORT)
		complete = (__s16)complete;
	if (c->blob_flags & BLOB_CODE_OFFSET) {
		__s32 offset = 0;
		if (bpf_probe_read_user(&offset, 4, (void *)(blob + c->blob_code)) != 0)
			return WALK_UNREADABLE;
		code = blob + offset;
	} else if (bpf_probe_read_user(&code, 8, (void *)(blob + c->blob_code)) != 0) {
		return WALK_UNREADABLE;
	}
	// Blobs without a frame of their own size (the call stub, adapters) keep frame pointers.
	if (frame_size <= 0 || frame_size > HOTSPOT_MAX_FRAME_WORDS)
		return JVM_NOT_MINE;
	__u64 caller_sp = r->sp + 8 * (__u64)frame_size;
	__u64 full[2];
	if (bpf_probe_read_user(full, sizeof(full), (void *)(caller_sp - 16)) != 0)
		return WALK_UNREADABLE;
	bump(STAT_JVM_STEPS);
	// The leaf may be in its prologue (before `frame_complete`, though a JDK 25 frame is often
	// built before it) or its epilogue: the return address on top, or under the caller's
	// rbp, or at the frame's end. A Java method's or stub's caller is the JVM's code; the
	// first place holding an address of it wins, the built frame first once past the prologue.
	if (r->exact) {
		__u64 top[2];
		if (bpf_probe_read_user(top, sizeof(top), (void *)r->sp) != 0)
			return WALK_UNREADABLE;
		int built = complete <= 0 || at >= code + complete;
		if (!(built && hotspot_code(c, full[1]))) {
			if (hotspot_code(c, top[0])) {
				r->ip = top[0];
				r->sp += 8;
				return 0;
			}
			if (hotspot_code(c, top[1])) {
				r->bp = top[0];
				r->ip = top[1];
				r->sp += 16;
				return 0;
			}
		}
	}
	r->bp = full[0];
	r->ip = full[1];
	r->sp = caller_sp;
	return 0;
}

// One frame-pointer step: the caller's rbp at [rbp], its return address at [rbp + 8]. Returns
// 0 with the next registers set, else how the walk ends.
static __always_inline __u32 fp_step(struct walk *w, __u64 *ip, __u64 *sp, __u64 *bp)
{
	if (!w->bp_known)
		return WALK_NO_INFO;
	// The ABI's outermost frame has a null frame pointer.
	if (w->bp == 0)
		return WALK_COMPLETE;
	if (w->bp < w->sp || (w->bp & 7) != 0)
		return WALK_NO_INFO;
	__u64 frame[2];
	if (bpf_probe_read_user(frame, sizeof(frame), (void *)w->bp) != 0)
		return WALK_UNREADABLE;
	*bp = frame[0];
	*ip = frame[1];
	*sp = w->bp + 16;
	return 0;
}

// One step of a walk: finds the caller of the frame last written and writes it; 1 stops.
static long walk_step(__u32 index, void *data)
{
	struct walk *w = data;
	struct stack_sample *s = w->s;
	// For a return address, the call instruction's row applies (the return address may be the
	// first byte of the next function after a call that does not return).
	__u64 at = w->exact ? w->ip : w->ip - 1;
	int leaf = w->n == 1;
	struct mapping *m = find_mapping(w->maps, at);
	if (!m && leaf)
		s->flags |= SAMPLE_UNKNOWN_ADDRESS;
	__u64 ip = 0, sp = 0, bp = w->bp;
	__u8 bp_known = w->bp_known, exact = 0, after_fp = 0;
	int stepped = 0;


	// The fast path: frame-pointer code, past the leaf.
	if (m && (m->flags & MAP_FP) && !leaf && !w->exact && w->bp_known && w->bp >= w->sp &&
	    (w->bp & 7) == 0 && w->bp != 0) {
		__u64 frame[2];
		if (bpf_probe_read_user(frame, sizeof(frame), (void *)w->bp) == 0) {
			if (frame[1] == 0) {
				w->end = WALK_COMPLETE;
				return 1;
			}
			if (find_mapping(w->maps, frame[1] - 1)) {
				ip = frame[1];
				sp = w->bp + 16;
				bp = frame[0];
				bp_known = 1;
				stepped = 1;
				s->flags |= SAMPLE_FP;

			} else {
				bump(STAT_FP_FALLBACK);
			}
		}
	}

	struct unwind_row row = {};
	if (!stepped && m && find_row(s, m, at, &row)) {
		__u64 cfa;
		switch (row.kind) {
		case ROW_SP:
			cfa = w->sp + (__s64)row.cfa_offset;
			break;
		case ROW_BP:
			if (!w->bp_known) {
				w->end = WALK_BAD_INFO;
				return 1;
			}
			cfa = w->bp + (__s64)row.cfa_offset;
			break;
		case ROW_PLT:
			cfa = w->sp + 8 + ((w->ip & 15) >= (__u64)row.cfa_offset ? 8 : 0);
			break;
		case ROW_SIGNAL:
			// The kernel's rt_sigframe: at rsp the ucontext, whose mcontext holds rbp at 120,
			// rsp at 160 and rip at 168 from it.
			if (!read_u64(&bp, w->sp + 120) || !read_u64(&sp, w->sp + 160) ||
			    !read_u64(&ip, w->sp + 168)) {
				w->end = WALK_UNREADABLE;
				return 1;
			}
			bp_known = 1;
			exact = 1;
			cfa = 0;
			break;
		case ROW_OUTERMOST:
			w->end = WALK_COMPLETE;
			return 1;
		default:
			w->end = WALK_BAD_INFO;
			return 1;
		}
		if (row.kind != ROW_SIGNAL && row.rbp_rule == RBP_AT && row.rbp_offset == -16) {
			// rbp saved just below the return address (`push rbp` first, the common
			// prologue): one read for both, each costing about as much as the walk's
			// other work on a frame.
			__u64 pair[2];
			if (bpf_probe_read_user(pair, sizeof(pair), (void *)(cfa - 16)) != 0) {
				w->end = WALK_UNREADABLE;
				return 1;
			}
			bp = pair[0];
			ip = pair[1];
			sp = cfa;
			bp_known = 1;
		} else if (row.kind != ROW_SIGNAL) {
			if (!read_u64(&ip, cfa - 8)) {
				w->end = WALK_UNREADABLE;
				return 1;
			}
			sp = cfa;
			if (row.rbp_rule == RBP_AT) {
				if (!read_u64(&bp, cfa + (__s64)row.rbp_offset)) {
					w->end = WALK_UNREADABLE;
					return 1;
				}
				bp_known = 1;
			} else if (row.rbp_rule == RBP_LOST) {
				bp_known = 0;
			} else if ((m->flags & MAP_FP) && w->bp_known && w->bp == cfa - 16) {
				// Frame-pointer code whose CFI does not describe rbp (Go's): rbp points
				// at this frame's saved rbp, just below its return address, so the
				// function has set up its frame and the caller's rbp is there.
				if (!read_u64(&bp, cfa - 16)) {
					w->end = WALK_UNREADABLE;
					return 1;
				}
			}
		}
		stepped = 1;
	}

	// Code without rows may be a JVM's (which `hotspot_step` knows by the process). Asked for
	// every process: a flag here made the verifier check each step twice.
	if (!stepped) {
		struct jvm_regs r = {
			.ip = w->ip, .sp = w->sp, .bp = w->bp, .exact = w->exact, .pid = s->pid,
		};
		int end = hotspot_step(&r);
		if (end == 0) {
			ip = r.ip;
			sp = r.sp;
			bp = r.bp;
			bp_known = 1;
			stepped = 1;
		} else if (end != JVM_NOT_MINE) {
			w->end = end;
			return 1;
		}
	}

	if (!stepped) {
		// No row: frame pointers. A null frame pointer ends a chain of them; in a frame
		// without CFI whose caller was found otherwise, rbp may be anything, zero included.
		if (w->bp_known && w->bp == 0 && !w->after_fp) {
			w->end = WALK_NO_INFO;
			return 1;
		}
		__u32 end = fp_step(w, &ip, &sp, &bp);
		if (end) {
			w->end = end;
			return 1;
		}
		bp_known = 1;
		after_fp = 1;
	}

	if (ip == 0) {
		w->end = WALK_COMPLETE;
		return 1;
	}
	// The stack grows down: a caller's frame is above its callee's. Anything else is corrupt
	// information, and would loop.
	if (sp <= w->sp) {
		w->end = WALK_BAD_INFO;
		return 1;
	}
	if (w->n >= MAX_USER_FRAMES) {
		w->end = WALK_DEPTH;
		return 1;
	}
	__u32 off = w->n * 8;
	asm volatile("" : "+r"(off));
	if (off > (MAX_USER_FRAMES - 1) * 8) {
		w->end = WALK_DEPTH;
		return 1;
	}
	*(__u64 *)&s->data[off] = ip;
	// The frame's rbp, for `walk_v8` (V8's frames keep frame pointers). Stored for every
	// process, at the address's bounded offset: a branch here, or a store with its own index,
	// made the verifier's paths multiply past its limit.
	*(__u64 *)((__u8 *)w->fps->fp + off) = bp;
	w->n++;
	w->ip = ip;
	w->sp = sp;
	w->bp = bp;
	w->bp_known = bp_known;
	w->exact = exact;
	w->after_fp = after_fp;
	return 0;
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
	__u64 end_at;        // frames in an array: where they end (0: a linked chain)
	__u32 at;            // where in `s->data` the frames go
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
	if (frame == 0 || (walk->end_at != 0 && frame >= walk->end_at)) {
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
	__u64 aux = 0;
	if (c->marker_indirect) {
		// Ruby: ep[-2] (the method entry, or a cref), ep[-1], ep[0] (the flags), in one read.
		marker = 0;
		__u64 at_ptr = py_window_u64(w, marker_at);
		__u64 env[3];
		if (at_ptr > 16 && bpf_probe_read_user(env, sizeof(env), (void *)(at_ptr - 16)) == 0) {
			marker = (__u32)env[2];
			aux = env[0];
		}
	}
	__u32 off = walk->at + walk->n * sizeof(struct py_frame);
	asm volatile("" : "+r"(off));
	if (off > SAMPLE_DATA_BYTES - sizeof(struct py_frame)) {
		walk->end = PY_DEPTH;
		return 1;
	}
	struct py_frame *f = (struct py_frame *)&s->data[off];
	f->code = code;
	f->fingerprint = code ? py_fingerprint(c, code) : 0;
	__u64 base = code + c->code_bytecode;
	if (c->instr_mode == INSTR_IN_BODY) {
		__u64 body = 0;
		if (code == 0 ||
		    bpf_probe_read_user(&body, sizeof(body), (void *)(code + c->code_body)) != 0 ||
		    bpf_probe_read_user(&base, sizeof(base), (void *)(body + c->code_bytecode)) != 0)
			base = instr;
	} else if (c->instr_mode == INSTR_IN_ARRAY &&
		   (code == 0 || bpf_probe_read_user(&base, sizeof(base), (void *)base) != 0)) {
		base = instr;
	}
	__u32 shift = c->instr_shift & 7;
	f->index = c->instr_mode == INSTR_INDEX ? (__s32)instr : (__s32)((__s64)(instr - base) >> shift);
	f->marker = marker;
	f->aux = aux;
	walk->n++;
	walk->frame = c->frame_stride ? frame + c->frame_stride : py_window_u64(w, c->window_previous);
	return 0;
}

// Reads the frame chain from `frame` (innermost) into `s->data` at `at`: linked by each frame's
// caller pointer, or, when `frames_end` is set, an array of `frame_stride`-byte frames up to
// it. Returns the bytes written; sets `s->py_end`.
static __always_inline __u32 walk_frames(struct stack_sample *s, const struct py_config *c,
					 __u32 at, __u64 frame, __u64 frames_end)
{
	__u32 zero = 0;
	struct py_window *w = bpf_map_lookup_elem(&py_scratch, &zero);
	if (!w)
		return 0;
	struct py_walk walk = {
		.s = s,
		.c = c,
		.w = w,
		.frame = frame,
		.end_at = frames_end,
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
		return 0; // a thread state with no frame: the thread runs no Python (PHP) now
	s->py_end = end;
	// Counted per CPU sample, as the counters they are compared with are.
	if (s->kind == KIND_CPU) {
		__u32 walked = c->kind == VM_PHP ? STAT_PHP_WALKED :
			       c->kind == VM_RUBY ? STAT_RUBY_WALKED : STAT_PY_WALKED;
		bump(walked);
		if (end != PY_COMPLETE)
			bump(walked + 1); // the matching STAT_*_CUT
	}
	return n * sizeof(struct py_frame);
}

// The state of a pass over a V8 sample's native frames (`v8_step`).
struct v8_walk {
	struct stack_sample *s;
	struct proc_maps *maps;
	const struct py_config *c;
	struct v8_fps *fps;
	__u32 at;            // where in `s->data` the frames go
	__u32 n;             // frames written
	__u32 cut;           // frames were left out (more than MAX_PY_FRAMES)
	__u32 pad;
};

// Writes native frame `index` as a `py_frame` when it is one of V8's JavaScript frames: its
// function, and the bytecode array and offset an interpreted frame keeps; its `index` is the
// native frame's position. A JavaScript frame holds its context (a heap object, tagged 1)
// where V8's other frames hold a frame type marker (a Smi, tagged 0), and its function (a
// heap object) below; userspace checks what the function slot points at before naming it.
static long v8_step(__u32 index, void *data)
{
	struct v8_walk *v = data;
	__u32 i = index & (MAX_USER_FRAMES - 1);
	__u64 fp = v->fps->fp[i];
	if (fp < V8_WINDOW_BYTES || (fp & 7) != 0)
		return 0;
	// V8's JavaScript frames run in anonymous code (compiled code: a mapping without an
	// object) or in its embedded builtins (the interpreter's bytecode handlers), in the
	// executable or in the copy of them V8 maps beside its compiled code.
	__u64 ip = *(__u64 *)&v->s->data[i * 8];
	__u64 at = i == 0 ? ip : ip - 1;
	const struct py_config *c = v->c;
	if (!(at >= c->tss && at < c->code_end) && !(at >= c->code2_start && at < c->code2_end)) {
		if (!c->anon_frames)
			return 0;
		struct mapping *m = find_mapping(v->maps, at);
		if (m && m->object != 0)
			return 0;
	}
	__u64 window[V8_WINDOW_BYTES / 8];
	if (bpf_probe_read_user(window, sizeof(window), (void *)(fp - V8_WINDOW_BYTES)) != 0)
		return 0;
	// V8's heap objects are tagged 1; HotSpot's Method (both slots point at it) is aligned.
	__u64 function = window[(c->window_code / 8) & 7];
	__u64 context = window[(c->window_marker / 8) & 7];
	if (function == 0 || (function & c->slot_mask) != c->slot_tag ||
	    (context & c->slot_mask) != c->slot_tag)
		return 0;
	__u32 off = v->at + v->n * sizeof(struct py_frame);
	asm volatile("" : "+r"(off));
	if (v->n >= MAX_PY_FRAMES || off > SAMPLE_DATA_BYTES - sizeof(struct py_frame)) {
		v->cut = 1;
		return 1;
	}
	struct py_frame *f = (struct py_frame *)&v->s->data[off];
	f->code = function;
	f->fingerprint = window[(c->window_previous / 8) & 7];
	f->index = (__s32)index;
	// An interpreted frame's bytecode offset is a Smi, whose value is its upper 32 bits (no
	// pointer compression); other frames hold a heap object there.
	__u64 offset = window[(c->window_instr / 8) & 7];
	f->marker = offset & 1 ? 0 : (__u32)(offset >> 32);
	__u64 aux = 0;
	if (c->function_aux != 0 &&
	    bpf_probe_read_user(&aux, sizeof(aux), (void *)(function + c->function_aux)) != 0)
		aux = 0;
	f->aux = aux;
	v->n++;
	return 0;
}

// Writes the JavaScript frames among a V8 sample's `n` native frames into `s->data` at `at`,
// innermost first, from the frame pointers the walk kept. Returns the bytes written; sets
// `s->py_end`.
static __always_inline __u32 walk_v8(struct stack_sample *s, struct proc_maps *maps,
				     const struct py_config *c, struct v8_fps *fps, __u32 at, __u32 n)
{
	struct v8_walk v = {
		.s = s, .maps = maps, .c = c, .fps = fps, .at = at, .n = 0, .cut = 0, .pad = 0,
	};
	bpf_loop(n, v8_step, &v, 0);
	if (v.n == 0) {
		s->py_end = PY_NONE;
		return 0;
	}
	s->py_end = v.cut ? PY_DEPTH : PY_COMPLETE;
	if (s->kind == KIND_CPU) {
		__u32 walked = c->kind == VM_HOTSPOT ? STAT_JVM_WALKED : STAT_V8_WALKED;
		bump(walked);
		if (v.cut)
			bump(walked + 1); // the matching STAT_*_CUT
	}
	return v.n * sizeof(struct py_frame);
}

// Reads the Python (PHP, Ruby) frames of the current thread into `s->data` at `at`, innermost
// first, when its process runs an interpreter that userspace described (`py_configs`) and the
// thread runs its code. Returns the bytes written; sets `s->py_end`.
static __always_inline __u32 walk_interpreter(struct stack_sample *s, const struct py_config *c,
					       __u32 at)
{
	s->py_end = PY_NONE;
	if (!c)
		return 0;
	__u64 tstate = 0, frame = 0;
	if (c->kind == VM_PHP) {
		// Not thread-safe builds: the one executor is the main thread's.
		if (s->tid != s->pid ||
		    bpf_probe_read_user(&frame, sizeof(frame), (void *)(c->tss + c->tstate_frame)) != 0)
			return 0;
		return walk_frames(s, c, at, frame, 0);
	}
	if (c->kind == VM_RUBY) {
		// The thread's execution context, in libruby's static TLS block below the thread
		// pointer; its current control frame, and where its VM stack (and so the frames) ends.
		struct task_struct *task = bpf_get_current_task_btf();
		__u64 ec = 0, stack = 0, words = 0;
		if (bpf_probe_read_user(&ec, sizeof(ec), (void *)(task->thread.fsbase - c->tsd_offset)) != 0 ||
		    ec == 0 ||
		    bpf_probe_read_user(&frame, sizeof(frame), (void *)(ec + c->tstate_frame)) != 0 ||
		    bpf_probe_read_user(&stack, sizeof(stack), (void *)(ec + c->ec_stack)) != 0 ||
		    bpf_probe_read_user(&words, sizeof(words), (void *)(ec + c->ec_stack_size)) != 0 ||
		    stack == 0 || words > (1 << 24))
			return 0;
		return walk_frames(s, c, at, frame, stack + 8 * words);
	}
	__u32 tss[2];
	if (bpf_probe_read_user(tss, sizeof(tss), (void *)c->tss) != 0 || tss[0] != 1 ||
	    tss[1] >= PY_INLINE_TSD_KEYS)
		return 0;
	struct task_struct *task = bpf_get_current_task_btf();
	__u64 fsbase = task->thread.fsbase;
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
	return walk_frames(s, c, at, frame, 0);
}

// Sends the sample in the CPU's scratch, whose process, kind, value and kernel stack are set,
// with its user stack walked with the unwind tables; 1 when sent. `ip`, `sp` and `bp` are the user
// registers when `user_mode`, else they are read from the task's saved ones. 0 when there is no
// user context (a kernel thread), userspace has not told the process's mappings, or the ring
// buffer is full. A global function: the verifier checks it once, not once for each path of
// each program that calls it (the CPU program's alone was at 97% of its million instructions).
__attribute__((noinline)) int send_walked(int user_mode, __u64 ip, __u64 sp, __u64 bp)
{
	__u32 cpu = bpf_get_smp_processor_id();
	struct stack_sample *s = bpf_map_lookup_elem(&scratch, &cpu);
	if (!s)
		return 0;
	__u32 pid = s->pid;
	__u32 kind = s->kind;
	struct proc_maps *maps = bpf_map_lookup_elem(&proc_maps, &pid);
	if (!maps)
		return 0;
	if (!user_mode) {
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
		ip = regs.rip;
		sp = regs.rsp;
		bp = regs.rbp;
	}
	if (ip == 0 || sp == 0)
		return 0;
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	s->tid = (__u32)pid_tgid;
	s->flags = 0;

	*(__u64 *)&s->data[0] = ip;
	const struct py_config *vm = bpf_map_lookup_elem(&py_configs, &pid);
	__u32 zero = 0;
	struct v8_fps *fps = bpf_map_lookup_elem(&v8_scratch, &zero);
	if (!fps)
		return 0;
	fps->fp[0] = bp;
	struct walk w = {
		.s = s,
		.maps = maps,
		.ip = ip,
		.sp = sp,
		.bp = bp,
		.n = 1,
		.end = 0,
		.bp_known = 1,
		.exact = 1,
		.after_fp = 0,
		.pad = 0,
		.fps = fps,
	};
	// bpf_loop: the verifier checks one step, not MAX_USER_FRAMES unrolled ones.
	bpf_loop(MAX_USER_FRAMES, walk_step, &w, 0);
	s->walk_end = w.end ? w.end : WALK_DEPTH;
	__u32 at = w.n * 8;
	asm volatile("" : "+r"(at));
	if (at > MAX_USER_FRAMES * 8)
		return 0;
	s->user_len = at;
	if (vm && (vm->kind == VM_V8 || vm->kind == VM_HOTSPOT))
		s->py_len = walk_v8(s, maps, vm, fps, at, w.n);
	else
		s->py_len = walk_interpreter(s, vm, at);
	__u64 len = at + s->py_len;
	asm volatile("" : "+r"(len));
	if (len > SAMPLE_DATA_BYTES)
		return 0;
	// 64 bits: a 32-bit one was checked in a zero-extended copy and passed unchecked.
	__u64 kernel_len = s->kernel_len;
	asm volatile("" : "+r"(kernel_len));
	if (kernel_len > MAX_STACK_DEPTH * 8)
		return 0;
	if (kernel_len > 0) {
		if (bpf_probe_read_kernel(&s->data[len], kernel_len, s->kernel) != 0)
			return 0;
		len += kernel_len;
	}
	// No wakeup: nothing waits on this ring; userspace empties it on a timer
	// (`sample_poll_interval`), and a wakeup (an irq_work per sample) cost more than the copy.
	if (bpf_ringbuf_output(&stack_samples, s, SAMPLE_HEADER_BYTES + len, BPF_RB_NO_WAKEUP) != 0) {
		if (kind == KIND_CPU)
			bump(STAT_SAMPLES_LOST);
		return 0;
	}
	if (kind == KIND_CPU) {
		bump(STAT_WALKED);
		if (s->flags & SAMPLE_FP)
			bump(STAT_FP_WALKED);
	}
	return 1;
}

// Sends the sample (`kind`, `value`) with its kernel stack (when not `user_mode`) and its user
// stack walked (`send_walked`); 1 when sent. `ctx` is the program's context, for the kernel
// stack. 0 when there is no user context, userspace has not told the process's mappings yet, or
// the ring buffer is full: a CPU sample is then counted with frame-pointer stacks.
static __always_inline int send_user_stack(void *ctx, __u32 pid, int user_mode, __u64 ip, __u64 sp,
					   __u64 bp, __u32 kind, __u64 value)
{
	if (!bpf_map_lookup_elem(&proc_maps, &pid)) {
		if (kind == KIND_CPU)
			bump(STAT_NO_PROCESS);
		return 0;
	}
	__u32 cpu = bpf_get_smp_processor_id();
	struct stack_sample *s = bpf_map_lookup_elem(&scratch, &cpu);
	if (!s)
		return 0;
	s->pid = pid;
	s->kind = kind;
	s->value = value;
	long k = user_mode ? 0 : bpf_get_stack(ctx, s->kernel, sizeof(s->kernel), 0);
	s->kernel_len = k > 0 ? (__u32)k : 0;
	return send_walked(user_mode, ip, sp, bp);
}

// Sends a CPU sample with the user stack the kernel walks by frame pointers (at most
// MAX_STACK_DEPTH frames) and its kernel stack: the first milliseconds of a process userspace
// has not told yet, a kernel thread, a walk that could not start. Userspace judges where such a
// walk can be trusted (`Unwinder::check_kernel_walk`). 1 when sent; 0 when the ring buffer is
// full.
static __always_inline int send_kernel_walked(void *ctx, __u32 pid, int user_mode)
{
	__u32 cpu = bpf_get_smp_processor_id();
	struct stack_sample *s = bpf_map_lookup_elem(&scratch, &cpu);
	if (!s)
		return 0;
	s->pid = pid;
	s->tid = (__u32)bpf_get_current_pid_tgid();
	s->walk_end = WALK_COMPLETE; // not read: SAMPLE_KERNEL_FP
	s->py_len = 0;
	s->py_end = PY_NONE;
	s->flags = SAMPLE_KERNEL_FP;
	s->value = 1;
	s->kind = KIND_CPU;
	long u = bpf_get_stack(ctx, s->data, MAX_STACK_DEPTH * 8, BPF_F_USER_STACK);
	if (u == -EFAULT && user_mode)
		bump(STAT_USER_UNREADABLE);
	__u64 user_len = u > 0 ? (__u64)u : 0;
	asm volatile("" : "+r"(user_len));
	if (user_len > MAX_STACK_DEPTH * 8)
		return 0;
	s->user_len = user_len;
	long k = user_mode ? 0 : bpf_get_stack(ctx, s->kernel, sizeof(s->kernel), 0);
	__u64 kernel_len = k > 0 ? (__u64)k : 0;
	asm volatile("" : "+r"(kernel_len));
	if (kernel_len > MAX_STACK_DEPTH * 8)
		return 0;
	s->kernel_len = kernel_len;
	if (kernel_len > 0 && bpf_probe_read_kernel(&s->data[user_len], kernel_len, s->kernel) != 0)
		return 0;
	if (bpf_ringbuf_output(&stack_samples, s, SAMPLE_HEADER_BYTES + user_len + kernel_len,
			       BPF_RB_NO_WAKEUP) != 0)
		return 0;
	bump(STAT_KERNEL_WALKED);
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

	__u64 ip = 0, sp = 0, bp = 0;
	if (user_mode) {
		ip = ctx->regs.rip;
		sp = ctx->regs.rsp;
		bp = ctx->regs.rbp;
	}
	// Sent walked: userspace told the process's mappings, so it knows the process, and the
	// announcement's lookup (a cold hash bucket, ~1.2 µs a sample at 19 Hz) is not needed.
	if (send_user_stack(ctx, pid, user_mode, ip, sp, bp, KIND_CPU, 1))
		return 0;
	if (send_kernel_walked(ctx, pid, user_mode)) {
		announce_if_new(pid);
		return 0;
	}
	// The ring buffer is full: counted in the maps below, which userspace drains only when
	// STAT_COUNTED moved (iterating them costs a system call or more per entry, and a scan of
	// every bucket).

	struct count_key key = {
		.pid = pid,
		.user_stack = stack_id(bpf_get_stackid(ctx, stacks, BPF_F_USER_STACK), user_mode, 1),
		.kernel_stack = stack_id(bpf_get_stackid(ctx, stacks, 0), user_mode, 0),
	};

	__u64 *count = bpf_map_lookup_elem(counts, &key);
	if (count) {
		__sync_fetch_and_add(count, 1);
		bump(STAT_COUNTED);
	} else {
		__u64 one = 1;
		// BPF_NOEXIST: when two CPUs insert the same key at once, the loser adds instead.
		if (bpf_map_update_elem(counts, &key, &one, BPF_NOEXIST) == 0) {
			bump(STAT_COUNTED);
		} else {
			count = bpf_map_lookup_elem(counts, &key);
			if (count) {
				__sync_fetch_and_add(count, 1);
				bump(STAT_COUNTED);
			} else {
				bump(STAT_COUNTS_FULL);
			}
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
	bpf_map_delete_elem(&proc_maps, &pid);
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
		bpf_map_delete_elem(&proc_maps, &pid);
		bpf_map_delete_elem(&py_configs, &pid);
	}
	return 0;
}

// The end of an off-CPU interval, sent when its thread runs again: the same first 48 bytes as
// a `stack_sample`, with `kind` KIND_OFF_CPU_END and `value` the nanoseconds it was off.
struct off_cpu_end {
	__u32 pid;
	__u32 tid;
	__u32 zero[6];
	__u64 value;
	__u32 kind;
	__u32 pad;
};

// A task switch (args: preempt, prev, next, prev_state since 5.18). It runs in the context of
// `prev`, the task leaving the CPU, so its registers and memory are the current ones: with
// probability `off_cpu_threshold`, its stack is walked and sent as a CPU sample's is, marked
// with why it leaves (`value` 0), and the time kept. When `next`, the task switched in, has such
// a record, the interval's end is sent: userspace joins the two by thread.
SEC("raw_tracepoint/sched_switch")
int on_switch(struct bpf_raw_tracepoint_args *ctx)
{
	__u64 now = bpf_ktime_get_ns();
	struct task_struct *next = (struct task_struct *)ctx->args[2];
	__u32 next_tid = BPF_CORE_READ(next, pid);
	struct off_cpu_start *open = bpf_map_lookup_elem(&off_cpu_start, &next_tid);
	if (open) {
		struct off_cpu_end end = {
			.pid = BPF_CORE_READ(next, tgid),
			.tid = next_tid,
			.value = now > open->at ? now - open->at : 0,
			.kind = KIND_OFF_CPU_END,
		};
		bpf_map_delete_elem(&off_cpu_start, &next_tid);
		if (bpf_ringbuf_output(&stack_samples, &end, sizeof(end), BPF_RB_NO_WAKEUP) != 0)
			bump(STAT_OFF_CPU_LOST);
	}

	struct task_struct *prev = (struct task_struct *)ctx->args[1];
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 pid = pid_tgid >> 32;
	if (pid == 0 || pid == agent_tgid)
		return 0;
	if (BPF_CORE_READ(prev, flags) & PF_KTHREAD)
		return 0;
	// An exiting thread's last switch: it never runs again.
	if (ctx->args[3] & TASK_DEAD)
		return 0;
	if (off_cpu_threshold != 0xffffffff && bpf_get_prandom_u32() > off_cpu_threshold)
		return 0;
	// Preempted, or gave up the CPU while still runnable (sched_yield): runnable all along.
	__u32 kind = (ctx->args[0] || ctx->args[3] == 0) ? KIND_OFF_CPU_PREEMPTED : KIND_OFF_CPU_WAIT;
	if (!send_user_stack(ctx, pid, 0, 0, 0, 0, kind, 0)) {
		bump(STAT_OFF_CPU_LOST);
		announce_if_new(pid);
		return 0;
	}
	struct off_cpu_start start = {
		.at = now,
		.kind = kind,
		.pad = 0,
	};
	__u32 tid = (__u32)pid_tgid;
	bpf_map_update_elem(&off_cpu_start, &tid, &start, BPF_ANY);
	bump(STAT_OFF_CPU);
	announce_if_new(pid);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
