// Workload of the in-kernel tools' tests (fltrace count, faults, ffaults, memleak, triage):
// exact numbers of events at marked lines.
//   memtools brk N              N brk(12345) syscalls at the line marked brk, then 3 brk(54321) at the line marked brk_other
//   memtools touch N [wait]     N first-touch faults at the line marked touch on fresh anonymous pages
//   memtools touch-counted N    the same, then the kernel's own count of the loop's page faults on
//                               stderr ("N page faults in the loop", the page-faults perf event)
//   memtools file PATH K        K faults on PATH's first K pages (private writes) at the line marked file
// `wait` (touch) prints "ready" and ends at EOF on stdin.
//   memtools leak M SIZE [wait] M blocks of SIZE bytes kept at the line marked leak, 100 freed ones;
//                               with `wait`, starts on a line on stdin and ends at its EOF
//   memtools stacks N           N first-touch faults at the line marked stacks, each under a call
//                               stack of its own (a path of step_zero/step_one calls)
//   memtools sockets N          N sockets kept open until stdin reaches EOF
//   memtools spin MIB           maps, touches and unmaps MIB MiB until stdin reaches EOF
// Modes that wait print "ready" once their events are done; the others print nothing.
#include <fcntl.h>
#include <linux/perf_event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

// The syscall instruction itself, so that the user stack's first frame is this line.
static inline long raw_brk(unsigned long addr) {
    long ret;
    __asm__ volatile("syscall" : "=a"(ret) : "a"(12L), "D"(addr) : "rcx", "r11", "memory");
    return ret;
}

// A counter of this thread's page faults as the kernel counts them (every exception, a page's
// fault retried included), or -1.
static int page_fault_counter(void) {
    struct perf_event_attr attr;
    memset(&attr, 0, sizeof attr);
    attr.type = PERF_TYPE_SOFTWARE;
    attr.size = sizeof attr;
    attr.config = PERF_COUNT_SW_PAGE_FAULTS;
    return (int)syscall(SYS_perf_event_open, &attr, 0, -1, -1, 0);
}

static void wait_eof(void) {
    char buf[64];
    while (read(0, buf, sizeof buf) > 0) {
    }
}

static void *volatile sink;

// `stacks`: each fault under its own call path, from the bits of its number.
static volatile char *stack_pages;
static volatile long stack_touched, zeros, ones;

static void __attribute__((noinline)) stack_leaf(void) {
    stack_pages[stack_touched++ * 4096] = 1; /* SITE:stacks */
}

static void step(int depth, unsigned long bits);

static void __attribute__((noinline)) step_zero(int depth, unsigned long bits) {
    step(depth, bits);
    zeros++;
}

static void __attribute__((noinline)) step_one(int depth, unsigned long bits) {
    step(depth, bits);
    ones++;
}

static void __attribute__((noinline)) step(int depth, unsigned long bits) {
    if (depth == 0)
        stack_leaf();
    else if (bits & 1)
        step_one(depth - 1, bits >> 1);
    else
        step_zero(depth - 1, bits >> 1);
    __asm__ volatile("" ::: "memory");
}

int main(int argc, char **argv) {
    if (argc < 3)
        return 2;
    const char *mode = argv[1];
    long n = strtol(argv[2], 0, 10);
    if (!strcmp(mode, "brk")) {
        for (long i = 0; i < n; i++)
            raw_brk(12345); /* SITE:brk */
        for (int i = 0; i < 3; i++)
            raw_brk(54321); /* SITE:brk_other */
    } else if (!strcmp(mode, "stacks")) {
        stack_pages = mmap(0, n * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (stack_pages == MAP_FAILED)
            return 1;
        int depth = 0;
        while ((1L << depth) < n)
            depth++;
        for (long i = 0; i < n; i++)
            step(depth, (unsigned long)i);
    } else if (!strcmp(mode, "touch") || !strcmp(mode, "touch-counted")) {
        volatile char *p = mmap(0, n * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED)
            return 1;
        int counter = strcmp(mode, "touch-counted") ? -2 : page_fault_counter();
        if (counter == -1)
            return 2;
        for (long i = 0; i < n; i++)
            p[i * 4096] = 1; /* SITE:touch */
        long long counted = 0;
        if (counter >= 0 && read(counter, &counted, sizeof counted) == sizeof counted)
            fprintf(stderr, "memtools: %lld page faults in the loop\n", counted);
        if (argc > 3) {
            printf("ready\n");
            fflush(stdout);
            wait_eof();
            return 0;
        }
    } else if (!strcmp(mode, "file")) {
        long k = argc > 3 ? strtol(argv[3], 0, 10) : 0;
        int fd = open(argv[2], O_RDONLY);
        if (fd < 0)
            return 1;
        // Private writes: each page faults through the file once, without fault-around.
        volatile char *p = mmap(0, k * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED)
            return 1;
        for (long i = 0; i < k; i++)
            p[i * 4096] = 1; /* SITE:file */
    } else if (!strcmp(mode, "leak")) {
        long size = argc > 3 ? strtol(argv[3], 0, 10) : 64;
        if (argc > 4) {
            char buf[8];
            if (read(0, buf, sizeof buf) <= 0)
                return 1;
        }
        for (int i = 0; i < 100; i++) {
            sink = malloc(size + 1);
            free(sink);
        }
        void **kept = calloc(n, sizeof(void *));
        for (long i = 0; i < n; i++)
            kept[i] = malloc(size); /* SITE:leak */
        sink = kept;
        if (argc > 4) {
            printf("ready\n");
            fflush(stdout);
            wait_eof();
        }
        return 0;
    } else if (!strcmp(mode, "leak-exec")) {
        /* memtools leak-exec N SIZE PROGRAM ARGS...: N blocks kept, then PROGRAM replaces
           this image (a launcher, `sh -c "...; exec prog"`). */
        if (argc < 5)
            return 2;
        long size = strtol(argv[3], 0, 10);
        void **kept = calloc(n, sizeof(void *));
        for (long i = 0; i < n; i++)
            kept[i] = malloc(size); /* SITE:leak_exec */
        sink = kept;
        execv(argv[4], argv + 4);
        return 1;
    } else if (!strcmp(mode, "sockets")) {
        for (long i = 0; i < n; i++)
            if (socket(AF_UNIX, SOCK_DGRAM, 0) < 0)
                return 1;
        printf("ready\n");
        fflush(stdout);
        wait_eof();
        return 0;
    } else if (!strcmp(mode, "spin")) {
        fcntl(0, F_SETFL, O_NONBLOCK);
        printf("ready\n");
        fflush(stdout);
        for (;;) {
            char buf[64];
            if (read(0, buf, sizeof buf) == 0)
                return 0;
            size_t bytes = (size_t)n << 20;
            volatile char *p = mmap(0, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (p == MAP_FAILED)
                return 1;
            for (size_t off = 0; off < bytes; off += 4096)
                p[off] = 1; /* SITE:spin */
            munmap((void *)p, bytes);
        }
    } else {
        return 2;
    }
    return 0;
}
