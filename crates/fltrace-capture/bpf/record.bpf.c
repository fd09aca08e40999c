// SPDX-License-Identifier: GPL-2.0 OR MIT
// fltrace record's in-kernel side: each page fault of the traced processes, with its user
// registers and a copy of the live part of its thread's stack (from the stack pointer up to
// the top of the stack, at most `stack_cap` bytes), and each major-fault mark, go into one
// BPF ring buffer shared by all CPUs, so that the kernel memory a recording takes does not
// grow with the number of CPUs. The traced processes are the `tgids` table: seeded by the
// recorder with the command or the attached processes, each new process they make added
// before it can run (`task_newtask`), each removed when its last thread ends.
// Self-contained (no libbpf or kernel headers, only bpf/fltrace_bpf.h): only clang is needed to
// build it.

#include "fltrace_bpf.h"

#define BPF_RB_NO_WAKEUP 1
#define BPF_RB_FORCE_WAKEUP 2
#define BPF_RB_AVAIL_DATA 0

struct bpf_dynptr {
	u64 opaque[2];
} __attribute__((aligned(8)));

// Only the fields read, located in the running kernel's task_struct by the loader (CO-RE).
struct task_struct {
	int pid;
	int pagefault_disabled;
} __attribute__((preserve_access_index));
// The first two fields, as every kernel since 2.6 lays them out (BTF-checked by the verifier).
struct vm_area_struct {
	u64 vm_start;
	u64 vm_end;
};

struct bpf_pidns_info {
	u32 pid;
	u32 tgid;
};
static long (*bpf_get_ns_current_pid_tgid)(u64 dev, u64 ino, struct bpf_pidns_info *nsdata, u32 size) = (void *)120;
static long (*bpf_probe_read_user)(void *dst, u32 size, const void *src) = (void *)112;
static u64 (*bpf_ringbuf_query)(void *ringbuf, u64 flags) = (void *)134;
static struct task_struct *(*bpf_get_current_task_btf)(void) = (void *)158;
static void *(*bpf_task_pt_regs)(struct task_struct *task) = (void *)175;
static long (*bpf_find_vma)(struct task_struct *task, u64 addr, void *callback, void *ctx, u64 flags) = (void *)180;
static long (*bpf_loop)(u32 nr_loops, void *callback, void *ctx, u64 flags) = (void *)181;
static long (*bpf_ringbuf_reserve_dynptr)(void *ringbuf, u32 size, u64 flags, struct bpf_dynptr *ptr) = (void *)198;
static void (*bpf_ringbuf_submit_dynptr)(struct bpf_dynptr *ptr, u64 flags) = (void *)199;
static void (*bpf_ringbuf_discard_dynptr)(struct bpf_dynptr *ptr, u64 flags) = (void *)200;
static long (*bpf_dynptr_write)(const struct bpf_dynptr *dst, u32 offset, void *src, u32 len, u64 flags) = (void *)202;
static void *(*bpf_dynptr_data)(const struct bpf_dynptr *ptr, u32 offset, u32 len) = (void *)203;

// Set by the recorder before loading (read-only to the programs, so the verifier knows them).
// The most stack copied with a fault, bytes (a multiple of 8).
volatile const u32 stack_cap = 262144;
// Wake the recorder once this much is waiting in the ring (else it wakes on its own timer).
volatile const u32 wake_bytes = 1 << 20;
// And, when not 0, once a CPU has written this many records since it last woke it: under far
// memory served in the faulting thread, the runtime stops its threads once the recorder is a
// number of faults behind (its backlog), and small records would not reach `wake_bytes`
// before that, leaving them stopped until the recorder's timer.
volatile const u32 wake_records = 0;
// The recorder's pid namespace (the device and inode of /proc/self/ns/pid), when it is not the
// first one: the records then carry pids as the recorder sees them, as its perf records do.
volatile const u64 pidns_dev = 0;
volatile const u64 pidns_ino = 0;

#define CLONE_THREAD 0x00010000ULL

// What each record is (`struct head.kind`).
enum { REC_FAULT = 1, REC_MAJOR = 2 };
// `struct head.flags` of a fault.
#define FAULT_KERNEL 1     // exceptions:page_fault_kernel (the kernel touched user memory)
#define FAULT_CAPPED 2     // the live stack was larger than stack_cap: the copy ends there
#define FAULT_NO_BOUNDS 4  // the stack's mapping could not be looked up: nothing copied

// At most this many runs of unreadable pages are skipped; at the next one the copy ends.
#define HOLES 4

struct hole {
	u32 start;
	u32 end;
};

struct head {
	u32 kind;
	u32 flags;
	u32 pid;
	u32 tid;
	u64 time_ns;
};

struct fault {
	struct head h;
	u64 addr;
	u64 error_code;
	u64 ip;
	u64 sp;
	u64 bp;
	// The stack's mapping as the copy took it: [stack_low, stack_top).
	u64 stack_low;
	u64 stack_top;
	// Bytes of stack from `sp` that follow; fewer than the record holds when a page of it
	// could not be read and no hole was left to note it in.
	u32 stack_len;
	// The thread's id in the first pid namespace: its key in `stacks`.
	u32 stack_key;
	// rbx, where the dynamic loader's resolver keeps its frame's base (its CFA rule).
	u64 bx;
	// The parts of the copy that could not be read (pages not present: never touched, as the
	// middle of a large frame), [start, end) from `sp`: their bytes are no stack words.
	u32 holes;
	u32 pad;
	struct hole hole[HOLES];
};

struct major {
	struct head h;
	u64 addr;
};

// A thread's stack as the copies take it: from where the stack's mapping starts to where the
// copies end (the mapping's end, or, once the recorder knows the thread's outermost frame,
// just above it).
struct bounds {
	u64 low;
	u64 top;
};

// What the programs count, per CPU (index into `counts`).
enum {
	COUNT_LOST = 0,          // records that found no room in the ring
	COUNT_LOST_BYTES = 1,    // their size
	COUNT_CHILDREN_LOST = 2, // processes of the traced tree left untraced: `tgids` full
	COUNT_NO_BOUNDS = 3,     // faults whose stack mapping could not be looked up
	COUNT_FAULTS = 4,        // fault records written
	COUNT_STACK_BYTES = 5,   // stack bytes copied
	COUNT_HOLE_BYTES = 6,    // stack bytes skipped: pages not present, noted as holes
	COUNT_HOLES_FULL = 7,    // copies that ended at a page not present, with no hole left
	COUNTS = 8,
};

// The traced processes, by their id in the first pid namespace (the programs' view). The
// maps' sizes count in the recording's budget (budget::bpf_fixed): a process made while the
// table is full is not traced, and counted.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, u32);
	__type(value, u8);
} tgids SEC(".maps");

// A recorder in a pid namespace of its own names processes by their ids there: each is moved
// to `tgids` at its first event.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, u32);
	__type(value, u8);
} ns_tgids SEC(".maps");

// The threads' stack bounds: the least recently used give way to new threads (whose copies
// then look their mapping up again).
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, u32);
	__type(value, struct bounds);
} stacks SEC(".maps");

// Set on a CPU while its program copies a stack: a page of it that is not present makes the
// kernel take a fault of its own (`page_fault_kernel`), which is the copy's, not the program's.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u32);
} copying SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, COUNTS);
	__type(key, u32);
	__type(value, u64);
} counts SEC(".maps");

// Records each CPU wrote since it last woke the recorder (`wake_records`).
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u32);
} unwoken SEC(".maps");

// Sized by the recorder (`max_entries`, a power of two of pages).
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} events SEC(".maps");

static __always_inline void count(u32 which, u64 n)
{
	u64 *c = bpf_map_lookup_elem(&counts, &which);
	if (c)
		*c += n;
}

// The current task if it is traced: its ids in the first pid namespace (`global`) and as
// the recorder sees them (`ours`), as `tgid << 32 | pid`.
static __always_inline int traced(u64 *global, u64 *ours)
{
	u64 pid_tgid = bpf_get_current_pid_tgid();
	u32 tgid = pid_tgid >> 32;
	*global = pid_tgid;
	*ours = pid_tgid;
	int known = bpf_map_lookup_elem(&tgids, &tgid) != 0;
	if (!pidns_ino)
		return known;
	struct bpf_pidns_info ns = {};
	if (bpf_get_ns_current_pid_tgid(pidns_dev, pidns_ino, &ns, sizeof(ns)))
		return 0;
	*ours = (u64)ns.tgid << 32 | ns.pid;
	if (known)
		return 1;
	if (!bpf_map_lookup_elem(&ns_tgids, &ns.tgid))
		return 0;
	u8 one = 1;
	if (bpf_map_update_elem(&tgids, &tgid, &one, BPF_ANY)) {
		count(COUNT_CHILDREN_LOST, 1);
		return 0;
	}
	bpf_map_delete_elem(&ns_tgids, &ns.tgid);
	return 1;
}

static __always_inline u64 wake_flag(void)
{
	if (bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >= wake_bytes)
		return BPF_RB_FORCE_WAKEUP;
	// The count by CPU only where it is asked for: the default path pays no map lookup a
	// record (a constant the verifier prunes).
	if (!wake_records)
		return BPF_RB_NO_WAKEUP;
	u32 zero = 0;
	u32 *n = bpf_map_lookup_elem(&unwoken, &zero);
	if (!n)
		return BPF_RB_NO_WAKEUP;
	if (++*n < wake_records)
		return BPF_RB_NO_WAKEUP;
	*n = 0;
	return BPF_RB_FORCE_WAKEUP;
}

static long vma_bounds(struct task_struct *task, struct vm_area_struct *vma, struct bounds *out)
{
	out->low = vma->vm_start;
	out->top = vma->vm_end;
	return 0;
}

// The top of the stack `sp` is on: the thread's known bounds, else its mapping's end (kept for
// the next fault). 0 when unknown: a stack pointer outside any mapping (a stack growing into
// new space) or the mapping lock taken.
static __always_inline u64 stack_top(u32 tid, u64 sp, u64 *low)
{
	struct bounds *known = bpf_map_lookup_elem(&stacks, &tid);
	if (known && sp >= known->low && sp < known->top) {
		*low = known->low;
		return known->top;
	}
	struct bounds found = {};
	if (bpf_find_vma(bpf_get_current_task_btf(), sp, vma_bounds, &found, 0) || found.top <= sp)
		return 0;
	bpf_map_update_elem(&stacks, &tid, &found, BPF_ANY);
	*low = found.low;
	return found.top;
}

// A stack copy in progress: the record's dynptr, the next byte to copy (from `sp`), the end,
// and the holes left so far.
struct copy {
	struct bpf_dynptr d;
	u64 sp;
	u32 off;
	u32 end;
	u32 failed;
	u32 holes;
	struct hole hole[HOLES];
};

#define PAGE 4096
#define MAX_PAGES 2048 /* 8 MiB */
#define HEAD_LEN sizeof(struct fault)

// The `n` bytes at the copy's offset could not be read (their page is not present: a stack
// page never touched, as in the middle of a frame larger than the pages it uses): noted as a
// hole (joined to the previous one where they meet), and the copy goes on past them, so that
// the frames above are kept. With no hole left, the copy ends there (`failed` stays set).
static __always_inline void skip(struct copy *c, u32 n)
{
	u32 last = c->holes - 1;
	if (c->holes && last < HOLES && c->hole[last].end == c->off) {
		c->hole[last].end += n;
	} else {
		u32 i = c->holes;
		if (i >= HOLES)
			return;
		c->hole[i].start = c->off;
		c->hole[i].end = c->off + n;
		c->holes = i + 1;
	}
	c->off += n;
	c->failed = 0;
}

// Copies `n` bytes (a constant the verifier knows) at `at` of `c`, unless a copy failed.
#define COPY_AT(c, at, n)                                                                \
	if (!(c)->failed) {                                                              \
		void *dst = bpf_dynptr_data(&(c)->d, HEAD_LEN + (at), (n));              \
		if (!dst || bpf_probe_read_user(dst, (n), (void *)((c)->sp + (at))))     \
			(c)->failed = 1;                                                 \
	}
#define COPY(c, n)                                                                       \
	{                                                                                \
		COPY_AT(c, (c)->off, n)                                                  \
		if (!(c)->failed)                                                        \
			(c)->off += (n);                                                 \
		else                                                                     \
			skip(c, n);                                                      \
	}
// Copies `n` bytes (at most `2 * p`, at least `p`) as two pieces of `p` bytes, the second
// ending at `n`: they overlap, and hold the same bytes where they do.
#define COPY_TWO(c, n, p)                                                                \
	{                                                                                \
		COPY_AT(c, (c)->off, p)                                                  \
		COPY_AT(c, (c)->off + (n) - (p), p)                                      \
		if (!(c)->failed)                                                        \
			(c)->off += (n);                                                 \
		else                                                                     \
			skip(c, n);                                                      \
	}
// Copies `rest` (a multiple of 8 below a page, within one page of the stack) in two pieces:
// both read the same page, so the part is read whole or is a hole whole.
#define COPY_BITS(c, rest)                                                               \
	{                                                                                \
		u32 n_ = (rest);                                                         \
		if (n_ >= 2048) COPY_TWO(c, n_, 2048)                                    \
		else if (n_ >= 1024) COPY_TWO(c, n_, 1024)                               \
		else if (n_ >= 512) COPY_TWO(c, n_, 512)                                 \
		else if (n_ >= 256) COPY_TWO(c, n_, 256)                                 \
		else if (n_ >= 128) COPY_TWO(c, n_, 128)                                 \
		else if (n_ >= 64) COPY_TWO(c, n_, 64)                                   \
		else if (n_ >= 32) COPY_TWO(c, n_, 32)                                   \
		else if (n_ >= 16) COPY_TWO(c, n_, 16)                                   \
		else if (n_ >= 8) COPY_TWO(c, n_, 8)                                     \
	}

// One page of the copy (a bpf_loop step): stops at the last whole page, or at one that cannot
// be read (not present) when no hole is left to note it in.
static long copy_page(u64 index, struct copy *c)
{
	if (c->failed || c->end - c->off < PAGE)
		return 1;
	COPY(c, PAGE)
	return c->failed;
}

// Copies the `len` bytes of user stack from `sp` into the record after its head: up to the
// next page boundary, then page by page, then the rest, each part in pieces of sizes the
// verifier knows. A page that cannot be read (perf's copy stops there) is skipped and noted
// as a hole; the copy stops at one only when all the holes are taken. Returns the bytes
// copied, holes included, a hole at the end left out.
static __always_inline u32 copy_stack(struct copy *c, u32 len)
{
	c->off = 0;
	c->end = len;
	c->failed = 0;
	c->holes = 0;
	u32 head = (PAGE - (c->sp & (PAGE - 1))) & (PAGE - 1);
	if (head > len)
		head = len;
	COPY_BITS(c, head)
	if (!c->failed && len - c->off >= PAGE)
		bpf_loop((len - c->off) / PAGE + 1, copy_page, c, 0);
	if (!c->failed && c->end - c->off < PAGE)
		COPY_BITS(c, c->end - c->off)
	if (c->failed)
		count(COUNT_HOLES_FULL, 1);
	// Nothing readable after the last hole: the copy ends where it starts.
	u32 last = c->holes - 1;
	if (c->holes && last < HOLES && c->hole[last].end == c->off) {
		c->off = c->hole[last].start;
		c->holes = last;
	}
	return c->off;
}

// x86_64 struct pt_regs, in words.
#define PT_BP 4
#define PT_BX 5
#define PT_IP 16
#define PT_SP 19
#define PT_WORDS 21

static __always_inline int on_fault(u64 addr, u64 error_code, void *user_regs, u32 flags)
{
	u64 pid_tgid, ours;
	if (!traced(&pid_tgid, &ours))
		return 0;
	u64 now = bpf_ktime_get_ns();
	u64 regs[PT_WORDS];
	if (bpf_probe_read_kernel(regs, sizeof(regs), user_regs))
		return 0;
	u32 tid = (u32)pid_tgid;
	u64 sp = regs[PT_SP];
	u64 low = 0;
	u64 top = stack_top(tid, sp, &low);
	u64 want = 0;
	if (top > sp) {
		want = top - sp;
	} else {
		flags |= FAULT_NO_BOUNDS;
		count(COUNT_NO_BOUNDS, 1);
	}
	if (want > stack_cap) {
		want = stack_cap;
		flags |= FAULT_CAPPED;
	}
	u32 len = want & ~7ULL;
	u32 zero = 0;
	u32 *busy = bpf_map_lookup_elem(&copying, &zero);
	if (!busy)
		return 0;
	struct copy c = {.sp = sp};
	if (bpf_ringbuf_reserve_dynptr(&events, HEAD_LEN + len, 0, &c.d)) {
		bpf_ringbuf_discard_dynptr(&c.d, 0);
		count(COUNT_LOST, 1);
		count(COUNT_LOST_BYTES, HEAD_LEN + len);
		return 0;
	}
	*busy = 1;
	u32 copied = copy_stack(&c, len);
	*busy = 0;
	u32 skipped = 0;
	struct fault f = {
		.h = {.kind = REC_FAULT,
		      .flags = flags,
		      .pid = ours >> 32,
		      .tid = (u32)ours,
		      .time_ns = now},
		.addr = addr,
		.error_code = error_code,
		.ip = regs[PT_IP],
		.sp = sp,
		.bp = regs[PT_BP],
		.stack_low = low,
		.stack_top = top,
		.stack_len = copied,
		.stack_key = tid,
		.bx = regs[PT_BX],
		.holes = c.holes,
	};
	for (u32 i = 0; i < HOLES; i++) {
		if (i < c.holes) {
			f.hole[i] = c.hole[i];
			skipped += c.hole[i].end - c.hole[i].start;
		}
	}
	bpf_dynptr_write(&c.d, 0, &f, sizeof(f), 0);
	count(COUNT_FAULTS, 1);
	count(COUNT_STACK_BYTES, copied - skipped);
	if (skipped)
		count(COUNT_HOLE_BYTES, skipped);
	bpf_ringbuf_submit_dynptr(&c.d, wake_flag());
	return 0;
}

struct raw_args {
	u64 args[3];
};

// page_fault_user and page_fault_kernel (address, regs, error_code), one program for both: the
// error code says whether the fault was the program's own access (its user-mode bit) or the
// kernel's on its memory (as in read(2)), and the user registers are those the task entered
// the kernel with either way. A fault the kernel takes while this program copies a stack is
// the copy's: not recorded.
SEC("raw_tracepoint")
int fault(struct raw_args *ctx)
{
	u32 zero = 0;
	u32 *busy = bpf_map_lookup_elem(&copying, &zero);
	if (!busy || *busy)
		return 0;
	struct task_struct *task = bpf_get_current_task_btf();
	// A read of user memory with page faults disabled (another BPF program's or perf's walk
	// of the stack, bpf_probe_read_user) faults without mapping anything: not the program's.
	if (task->pagefault_disabled)
		return 0;
	void *user_regs = bpf_task_pt_regs(task);
	if (!user_regs)
		return 0;
	u64 error_code = ctx->args[2];
	return on_fault(ctx->args[0], error_code, user_regs, error_code & 4 ? 0 : FAULT_KERNEL);
}

// A major fault (the software event PERF_COUNT_SW_PAGE_FAULTS_MAJ, after the kernel needed
// I/O for it): marks the fault row of its thread and page.
struct perf_event_data {
	u64 regs[PT_WORDS];
	u64 sample_period;
	u64 addr;
};

SEC("perf_event")
int major_fault(struct perf_event_data *ctx)
{
	u64 pid_tgid, ours;
	if (!traced(&pid_tgid, &ours))
		return 0;
	struct major m = {
		.h = {.kind = REC_MAJOR,
		      .pid = ours >> 32,
		      .tid = (u32)ours,
		      .time_ns = bpf_ktime_get_ns()},
		.addr = ctx->addr,
	};
	struct bpf_dynptr d;
	if (bpf_ringbuf_reserve_dynptr(&events, sizeof(m), 0, &d)) {
		bpf_ringbuf_discard_dynptr(&d, 0);
		count(COUNT_LOST, 1);
		count(COUNT_LOST_BYTES, sizeof(m));
		return 0;
	}
	bpf_dynptr_write(&d, 0, &m, sizeof(m), 0);
	bpf_ringbuf_submit_dynptr(&d, wake_flag());
	return 0;
}

// task_newtask(task, clone_flags): a new task made by a traced process. A new process (not a
// thread, whose process is in the table already) is traced from its first instruction on:
// this runs before it can run. A raw tracepoint: detaching a program from a perf tracepoint
// event waits for an RCU-tasks-trace grace period, up to 0.2 s at every recording's end.
SEC("raw_tracepoint/task_newtask")
int new_task(struct raw_args *ctx)
{
	u64 pid_tgid, ours;
	if (!traced(&pid_tgid, &ours))
		return 0;
	if (ctx->args[1] & CLONE_THREAD)
		return 0;
	struct task_struct *task = (struct task_struct *)ctx->args[0];
	u32 child = 0;
	if (bpf_probe_read_kernel(&child, sizeof(child), &task->pid))
		return 0;
	u8 one = 1;
	if (bpf_map_update_elem(&tgids, &child, &one, BPF_ANY))
		count(COUNT_CHILDREN_LOST, 1);
	return 0;
}

// sched_process_exit(task, group_dead): a thread ends; its stack bounds go, and with the last
// thread of its process, the process (its pid may be given to another).
SEC("raw_tracepoint/sched_process_exit")
int task_exit(struct raw_args *ctx)
{
	u64 pid_tgid, ours;
	if (!traced(&pid_tgid, &ours))
		return 0;
	u32 tgid = pid_tgid >> 32, tid = (u32)pid_tgid;
	bpf_map_delete_elem(&stacks, &tid);
	if (ctx->args[1] & 0xff)
		bpf_map_delete_elem(&tgids, &tgid);
	return 0;
}

// After an exec the thread runs on a new stack.
SEC("raw_tracepoint/sched_process_exec")
int task_exec(struct raw_args *ctx)
{
	u64 pid_tgid = bpf_get_current_pid_tgid();
	u32 tgid = pid_tgid >> 32, tid = (u32)pid_tgid;
	if (bpf_map_lookup_elem(&tgids, &tgid))
		bpf_map_delete_elem(&stacks, &tid);
	return 0;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
