// SPDX-License-Identifier: GPL-2.0 OR MIT
// fltrace's in-kernel side: one counting program attachable to any tracepoint, software perf
// event or uprobe, and the outstanding-allocation table of memleak. Everything the programs
// do is set from user space through the `config` array (one slot per attached program), so
// one object serves every command. Self-contained (no libbpf or kernel headers; the types and
// helpers it shares with the recorder's program are fltrace-capture's bpf/fltrace_bpf.h): only
// clang is needed to build it.

#include "fltrace_bpf.h"

#define BPF_F_USER_STACK (1ULL << 8)

static long (*bpf_get_current_comm)(void *buf, u32 size) = (void *)16;
static long (*bpf_get_stackid)(void *ctx, void *map, u64 flags) = (void *)27;
static u64 (*bpf_get_current_cgroup_id)(void) = (void *)80;
static long (*bpf_ringbuf_output)(void *ringbuf, void *data, u64 size, u64 flags) = (void *)130;
static u64 (*bpf_get_attach_cookie)(void *ctx) = (void *)174;
static long (*bpf_get_stack)(void *ctx, void *buf, u32 size, u64 flags) = (void *)67;

#define MAX_STACK_DEPTH 127
#define SLOTS 8

// What makes a count's key (config.key_flags).
#define KEY_COMM (1 << 0)
#define KEY_PID (1 << 1)
#define KEY_TGID (1 << 2)
#define KEY_USTACK (1 << 3)
#define KEY_KSTACK (1 << 4)
#define KEY_FIELD (1 << 5)
#define KEY_FIELD2 (1 << 6)
// The attachment's cookie (the index of the tracepoint among those counted) in `field2`: the
// kernel overwrites the first 8 bytes of the record it hands BPF (common_type among them), so
// the record cannot say which tracepoint of a wildcard fired.
#define KEY_PROBE (1 << 7)

// Which events are kept (config.filter_flags).
#define FILTER_TGIDS (1 << 0)
#define FILTER_CGROUP (1 << 1)
#define FILTER_COMM (1 << 2)
#define FILTER_FIELD (1 << 3)
// Announce each new process on the ring buffer, so that user space keeps its mappings.
#define ANNOUNCE_TGIDS (1 << 4)

// Field comparisons (config.filter_op).
enum { OP_EQ = 1, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE, OP_AND };

// What a memleak allocation slot reads (config.size_kind).
enum { SIZE_FIELD = 0, SIZE_PAGES_ORDER = 1 };

// Totals kept per CPU (index into `totals`).
enum { TOTAL_EVENTS = 0, TOTAL_DROPPED = 1, TOTAL_STACK_ERRORS = 2, TOTAL_ALLOCS = 3, TOTAL_FREES = 4, TOTAL_USTACKS_LOST = 5 };

struct config {
	u32 key_flags;
	u32 filter_flags;
	u32 field_off;
	u32 field_size;
	u32 field_signed;
	u32 filter_off;
	u32 filter_size;
	u32 filter_signed;
	u32 filter_op;
	u32 ptr_off;
	u32 ptr_size;
	u32 size_off;
	u32 size_size;
	u32 size_kind;
	u32 field2_off;
	u32 field2_size;
	u64 filter_value;
	u64 cgroup_id;
	char comm[16];
};

struct key {
	u32 tgid;
	u32 pid;
	s32 ustack;
	s32 kstack;
	u64 field;
	u64 field2;
	char comm[16];
};

struct alloc {
	u64 size;
	u64 time_ns;
	s32 stack;
	u32 tgid;
	char comm[16];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, SLOTS);
	__type(key, u32);
	__type(value, struct config);
} config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, u32);
	__type(value, u8);
} tgids SEC(".maps");

// The offset of sched_process_fork's `child_pid` (from tracefs), for follow_fork.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u32);
} fork_child SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 131072);
	__type(key, struct key);
	__type(value, u64);
} counts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(max_entries, 32768);
	__uint(key_size, sizeof(u32));
	__uint(value_size, MAX_STACK_DEPTH * sizeof(u64));
} stacks SEC(".maps");

// The counts' user stacks: a stack trace map keeps one stack per hash bucket and refuses
// (-EEXIST) every later stack whose hash falls in a taken bucket, which left the busiest stacks
// of a machine blank after about a thousand distinct ones. Here a stack is known by a 64-bit
// hash of its frames and gets a number of its own until the table is full; the stacks refused
// then are counted (TOTAL_USTACKS_LOST). Allocated as used (BPF_F_NO_PREALLOC).
#define MAX_USTACKS 65536
#define BPF_F_NO_PREALLOC (1U << 0)

struct ustack {
	u64 len;
	u64 ip[MAX_STACK_DEPTH];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_USTACKS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, u64);
	__type(value, u32);
} ustack_ids SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_USTACKS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, u32);
	__type(value, struct ustack);
} ustack_frames SEC(".maps");

// The frames being looked up, per CPU (too large for the BPF stack).
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct ustack);
} ustack_scratch SEC(".maps");

// The next user stack number.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u64);
} ustack_next SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 8);
	__type(key, u32);
	__type(value, u64);
} totals SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, u32);
	__type(value, u8);
} seen SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} announcements SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 262144);
	__type(key, u64);
	__type(value, struct alloc);
} outstanding SEC(".maps");

// Requested sizes between an allocator's entry and its return, by thread.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, u64);
	__type(value, u64);
} pending SEC(".maps");

static __always_inline void add_total(u32 which)
{
	u64 *total = bpf_map_lookup_elem(&totals, &which);
	if (total)
		*total += 1;
}

// Reads an unsigned or sign-extended integer of 1, 2, 4 or 8 bytes at `ctx + off`.
static __always_inline int read_int(void *ctx, u32 off, u32 size, u32 is_signed, u64 *out)
{
	u64 v = 0;
	long err;
	switch (size) {
	case 1:
		err = bpf_probe_read_kernel(&v, 1, ctx + off);
		if (is_signed)
			v = (u64)(s64)(signed char)v;
		break;
	case 2:
		err = bpf_probe_read_kernel(&v, 2, ctx + off);
		if (is_signed)
			v = (u64)(s64)(short)v;
		break;
	case 4:
		err = bpf_probe_read_kernel(&v, 4, ctx + off);
		if (is_signed)
			v = (u64)(s64)(s32)v;
		break;
	case 8:
		err = bpf_probe_read_kernel(&v, 8, ctx + off);
		break;
	default:
		return -1;
	}
	*out = v;
	return err ? -1 : 0;
}

static __always_inline int compare(u64 v, u32 op, u64 want, u32 is_signed)
{
	s64 sv = (s64)v, sw = (s64)want;
	switch (op) {
	case OP_EQ:
		return v == want;
	case OP_NE:
		return v != want;
	case OP_LT:
		return is_signed ? sv < sw : v < want;
	case OP_LE:
		return is_signed ? sv <= sw : v <= want;
	case OP_GT:
		return is_signed ? sv > sw : v > want;
	case OP_GE:
		return is_signed ? sv >= sw : v >= want;
	case OP_AND:
		return (v & want) != 0;
	}
	return 1;
}

// Whether the current task passes the process filters of `c`; fills `comm`.
static __always_inline int task_wanted(struct config *c, u32 tgid, char *comm)
{
	bpf_get_current_comm(comm, 16);
	if (c->filter_flags & FILTER_TGIDS) {
		if (!bpf_map_lookup_elem(&tgids, &tgid))
			return 0;
	}
	if ((c->filter_flags & FILTER_CGROUP) && bpf_get_current_cgroup_id() != c->cgroup_id)
		return 0;
	if (c->filter_flags & FILTER_COMM) {
		for (int i = 0; i < 16; i++) {
			if (comm[i] != c->comm[i])
				return 0;
			if (comm[i] == 0)
				break;
		}
	}
	return 1;
}

static __always_inline void announce(struct config *c, u32 tgid)
{
	u8 one = 1;
	// A lookup first: an insert that fails costs more, and this runs at every event.
	if ((c->filter_flags & ANNOUNCE_TGIDS) && !bpf_map_lookup_elem(&seen, &tgid) &&
	    bpf_map_update_elem(&seen, &tgid, &one, BPF_NOEXIST) == 0)
		bpf_ringbuf_output(&announcements, &tgid, sizeof(tgid), 0);
}

// The number of the current user stack, or a negative error: -7 (E2BIG) when the table is
// full.
static __always_inline s32 user_stack_id(void *ctx)
{
	u32 zero = 0;
	struct ustack *s = bpf_map_lookup_elem(&ustack_scratch, &zero);
	if (!s)
		return -1;
	long n = bpf_get_stack(ctx, s->ip, sizeof(s->ip), BPF_F_USER_STACK);
	if (n <= 0)
		return n < 0 ? n : -14;
	u64 depth = (u64)n / 8;
	s->len = depth;
	// FNV-1a over the frames, with a final mix: 64 bits make a collision among 65,536
	// stacks a chance of about 1 in 10^10.
	u64 h = 14695981039346656037ULL ^ depth;
	for (int i = 0; i < MAX_STACK_DEPTH; i++) {
		if (i >= depth)
			break;
		h = (h ^ s->ip[i]) * 1099511628211ULL;
		h ^= h >> 29;
	}
	u32 *id = bpf_map_lookup_elem(&ustack_ids, &h);
	if (id)
		return *id;
	u64 *next = bpf_map_lookup_elem(&ustack_next, &zero);
	if (!next)
		return -1;
	u64 fresh = __sync_fetch_and_add(next, 1);
	if (fresh >= MAX_USTACKS)
		return -7;
	u32 fresh32 = fresh;
	if (bpf_map_update_elem(&ustack_frames, &fresh32, s, 0))
		return -7;
	if (bpf_map_update_elem(&ustack_ids, &h, &fresh32, BPF_NOEXIST)) {
		// Another CPU numbered it first (its frames are under that number).
		bpf_map_delete_elem(&ustack_frames, &fresh32);
		id = bpf_map_lookup_elem(&ustack_ids, &h);
		return id ? *id : -7;
	}
	return fresh32;
}

// Counts one event of slot `slot`; `fields` says whether ctx holds readable raw fields.
static __always_inline int count_event(void *ctx, u32 slot, int fields)
{
	struct config *c = bpf_map_lookup_elem(&config, &slot);
	if (!c)
		return 0;
	u64 pid_tgid = bpf_get_current_pid_tgid();
	u32 tgid = pid_tgid >> 32;
	struct key k = {};
	if (!task_wanted(c, tgid, k.comm))
		return 0;
	if (fields && (c->filter_flags & FILTER_FIELD)) {
		u64 v;
		if (read_int(ctx, c->filter_off, c->filter_size, c->filter_signed, &v) ||
		    !compare(v, c->filter_op, c->filter_value, c->filter_signed))
			return 0;
	}
	if (!(c->key_flags & KEY_COMM))
		__builtin_memset(k.comm, 0, sizeof(k.comm));
	if (c->key_flags & KEY_TGID)
		k.tgid = tgid;
	if (c->key_flags & KEY_PID)
		k.pid = (u32)pid_tgid;
	k.ustack = -1;
	k.kstack = -1;
	if (c->key_flags & KEY_USTACK) {
		k.ustack = user_stack_id(ctx);
		if (k.ustack == -7)
			add_total(TOTAL_USTACKS_LOST);
		else if (k.ustack < 0)
			add_total(TOTAL_STACK_ERRORS);
		announce(c, tgid);
	}
	if (c->key_flags & KEY_KSTACK) {
		k.kstack = bpf_get_stackid(ctx, &stacks, 0);
		if (k.kstack < 0 && k.kstack != -14 /* EFAULT: no kernel stack in user context */)
			add_total(TOTAL_STACK_ERRORS);
	}
	if (fields && (c->key_flags & KEY_FIELD)) {
		if (read_int(ctx, c->field_off, c->field_size, c->field_signed, &k.field))
			return 0;
	}
	if (fields && (c->key_flags & KEY_FIELD2)) {
		if (read_int(ctx, c->field2_off, c->field2_size, 0, &k.field2))
			return 0;
	}
	if (c->key_flags & KEY_PROBE)
		k.field2 = bpf_get_attach_cookie(ctx);
	add_total(TOTAL_EVENTS);
	u64 *count = bpf_map_lookup_elem(&counts, &k);
	if (count) {
		__sync_fetch_and_add(count, 1);
		return 0;
	}
	u64 one = 1;
	if (bpf_map_update_elem(&counts, &k, &one, BPF_NOEXIST)) {
		// Another CPU inserted it first, or the table is full.
		count = bpf_map_lookup_elem(&counts, &k);
		if (count)
			__sync_fetch_and_add(count, 1);
		else
			add_total(TOTAL_DROPPED);
	}
	return 0;
}

// A tracepoint program's 0 stops the kernel from handing the event to every other perf user of
// that tracepoint (perf_trace_run_bpf_submit): `fltrace record` or `perf record` running at the
// same time would see no events. Tracepoint programs therefore always return 1.
#define PASS_ON 1

SEC("tracepoint")
int count_tracepoint(void *ctx)
{
	count_event(ctx, 0, 1);
	return PASS_ON;
}

SEC("perf_event")
int count_perf_event(void *ctx)
{
	return count_event(ctx, 0, 0);
}

SEC("uretprobe")
int count_uretprobe(void *ctx)
{
	return count_event(ctx, 0, 1);
}

// A uprobe's context is the registers: fields are read at their offsets in struct pt_regs.
SEC("uprobe")
int count_uprobe(void *ctx)
{
	return count_event(ctx, 0, 1);
}

// After an exec the process's mappings are new: announce it again at its next event.
SEC("tracepoint")
int exec_forget(void *ctx)
{
	u32 tgid = bpf_get_current_pid_tgid() >> 32;
	bpf_map_delete_elem(&seen, &tgid);
	return PASS_ON;
}

// -p names processes with the children they start: a fork in a process of `tgids` adds the
// new task's id (a process's id is its tgid; a thread's matches no tgid while it runs). A
// full table leaves the child out, counted as dropped.
SEC("tracepoint")
int follow_fork(void *ctx)
{
	u32 parent = bpf_get_current_pid_tgid() >> 32;
	if (!bpf_map_lookup_elem(&tgids, &parent))
		return PASS_ON;
	u32 zero = 0;
	u32 *off = bpf_map_lookup_elem(&fork_child, &zero);
	if (!off)
		return PASS_ON;
	u32 child = 0;
	if (bpf_probe_read_kernel(&child, sizeof(child), ctx + (*off & 0xfff)))
		return PASS_ON;
	u8 one = 1;
	if (bpf_map_update_elem(&tgids, &child, &one, BPF_ANY))
		add_total(TOTAL_DROPPED);
	return PASS_ON;
}

// ---- memleak ----

static __always_inline void record_alloc(void *ctx, struct config *c, u64 addr, u64 size, u32 tgid,
					 char *comm, u64 stack_flags)
{
	struct alloc a = {};
	a.size = size;
	a.time_ns = bpf_ktime_get_ns();
	a.tgid = tgid;
	__builtin_memcpy(a.comm, comm, 16);
	a.stack = bpf_get_stackid(ctx, &stacks, stack_flags);
	if (a.stack < 0)
		add_total(TOTAL_STACK_ERRORS);
	if (bpf_map_update_elem(&outstanding, &addr, &a, BPF_ANY))
		add_total(TOTAL_DROPPED);
	else
		add_total(TOTAL_ALLOCS);
}

// A kernel allocation tracepoint: the address and size are raw fields.
static __always_inline int kernel_alloc(void *ctx, u32 slot)
{
	struct config *c = bpf_map_lookup_elem(&config, &slot);
	if (!c)
		return 0;
	u32 tgid = bpf_get_current_pid_tgid() >> 32;
	char comm[16] = {};
	if (!task_wanted(c, tgid, comm))
		return 0;
	u64 addr, size;
	if (read_int(ctx, c->ptr_off, c->ptr_size, 0, &addr) || addr == 0)
		return 0;
	if (read_int(ctx, c->size_off, c->size_size, 0, &size))
		return 0;
	if (c->size_kind == SIZE_PAGES_ORDER)
		size = 4096ULL << (size & 31);
	record_alloc(ctx, c, addr, size, tgid, comm, 0);
	return 0;
}

// A kernel free tracepoint: only the address.
static __always_inline int kernel_free(void *ctx, u32 slot)
{
	struct config *c = bpf_map_lookup_elem(&config, &slot);
	if (!c)
		return 0;
	u64 addr;
	if (read_int(ctx, c->ptr_off, c->ptr_size, 0, &addr))
		return 0;
	if (bpf_map_delete_elem(&outstanding, &addr) == 0)
		add_total(TOTAL_FREES);
	return 0;
}

SEC("tracepoint")
int alloc_0(void *ctx) { kernel_alloc(ctx, 1); return PASS_ON; }
SEC("tracepoint")
int alloc_1(void *ctx) { kernel_alloc(ctx, 2); return PASS_ON; }
SEC("tracepoint")
int alloc_2(void *ctx) { kernel_alloc(ctx, 3); return PASS_ON; }
SEC("tracepoint")
int free_0(void *ctx) { kernel_free(ctx, 4); return PASS_ON; }
SEC("tracepoint")
int free_1(void *ctx) { kernel_free(ctx, 5); return PASS_ON; }
SEC("tracepoint")
int free_2(void *ctx) { kernel_free(ctx, 6); return PASS_ON; }

// User allocations: x86_64 struct pt_regs, in u64 units.
#define REG_AX 10
#define REG_SI 13
#define REG_DI 14

static __always_inline u64 reg(void *ctx, int index)
{
	u64 v = 0;
	bpf_probe_read_kernel(&v, 8, (u64 *)ctx + index);
	return v;
}

static __always_inline int user_wanted(u32 *tgid, char *comm)
{
	u32 slot = 7;
	struct config *c = bpf_map_lookup_elem(&config, &slot);
	if (!c)
		return 0;
	*tgid = bpf_get_current_pid_tgid() >> 32;
	return task_wanted(c, *tgid, comm);
}

static __always_inline int remember_size(u64 size)
{
	u32 tgid;
	char comm[16];
	if (!user_wanted(&tgid, comm))
		return 0;
	u64 tid = bpf_get_current_pid_tgid();
	bpf_map_update_elem(&pending, &tid, &size, BPF_ANY);
	return 0;
}

static __always_inline int forget(u64 addr)
{
	if (addr && bpf_map_delete_elem(&outstanding, &addr) == 0)
		add_total(TOTAL_FREES);
	return 0;
}

SEC("uprobe")
int malloc_enter(void *ctx) { return remember_size(reg(ctx, REG_DI)); }
SEC("uprobe")
int calloc_enter(void *ctx) { return remember_size(reg(ctx, REG_DI) * reg(ctx, REG_SI)); }
// aligned_alloc and memalign: (alignment, size).
SEC("uprobe")
int memalign_enter(void *ctx) { return remember_size(reg(ctx, REG_SI)); }
SEC("uprobe")
int realloc_enter(void *ctx)
{
	forget(reg(ctx, REG_DI));
	return remember_size(reg(ctx, REG_SI));
}
SEC("uprobe")
int free_enter(void *ctx) { return forget(reg(ctx, REG_DI)); }

// At the return the user stack starts in the caller, at the line of the call.
SEC("uretprobe")
int alloc_return(void *ctx)
{
	u64 tid = bpf_get_current_pid_tgid();
	u64 *size = bpf_map_lookup_elem(&pending, &tid);
	if (!size)
		return 0;
	u64 bytes = *size;
	bpf_map_delete_elem(&pending, &tid);
	u64 addr = reg(ctx, REG_AX);
	if (!addr)
		return 0;
	u32 slot = 7;
	struct config *c = bpf_map_lookup_elem(&config, &slot);
	if (!c)
		return 0;
	char comm[16] = {};
	bpf_get_current_comm(comm, 16);
	u32 tgid = tid >> 32;
	announce(c, tgid);
	record_alloc(ctx, c, addr, bytes, tgid, comm, BPF_F_USER_STACK);
	return 0;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
