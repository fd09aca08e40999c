// The floor of far-memory emulation by userfaultfd (issue #12): what ANY handler costs per fault,
// preloaded into a real program. It serves the malloc family from one region registered with
// userfaultfd for missing faults and resolves each fault from one handler thread with
// UFFDIO_ZEROPAGE for a read and UFFDIO_COPY of a zero page for a write (for every fault with
// MIN_UFFD_COPY=1): no recording, no eviction, no
// page state, no locks. With MIN_UFFD_SIGBUS=1 there is no handler thread: the userfaultfd has
// UFFD_FEATURE_SIGBUS and each fault is served the same way by a SIGBUS handler in the
// faulting thread (the floor of the in-thread path; the kernel's own accesses to a missing page
// then fail with EFAULT, which the programs it is meant for do not make). free() keeps the memory (a bump allocator; the region is MIN_UFFD_MB,
// default 8192, of address space reserved without backing). At exit it prints the faults it
// served to stderr when MIN_UFFD_VERBOSE=1.
// build: gcc -O2 -shared -fPIC -o min_uffd.so bench/min_uffd.c -lpthread
// usage: LD_PRELOAD=./min_uffd.so prog args
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <ucontext.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#define PAGE 4096ul
static char *base;
static size_t size;
static _Atomic size_t next_free;
static int uffd = -1;
static int use_copy, use_sigbus;
static _Atomic unsigned long served;
static char zero_page[PAGE] __attribute__((aligned(PAGE)));

static void reserve(void) {
    if (base)
        return;
    const char *mb = getenv("MIN_UFFD_MB");
    size = (mb ? strtoul(mb, 0, 10) : 8192) << 20;
    base = mmap(0, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED)
        abort();
    // Base pages only, as the runtime serves them: a fault is one 4 KiB page.
    madvise(base, size, MADV_NOHUGEPAGE);
}

// Aligned bump allocation; a block's size is kept in the 16 bytes before it (for realloc).
static void *bump(size_t bytes, size_t align) {
    reserve();
    if (align < 16)
        align = 16;
    for (;;) {
        size_t old = atomic_load(&next_free);
        size_t start = (old + 16 + align - 1) & ~(align - 1);
        size_t end = start + ((bytes + 15) & ~15ul);
        if (end > size || end < start) {
            errno = ENOMEM;
            return 0;
        }
        if (atomic_compare_exchange_weak(&next_free, &old, end)) {
            ((size_t *)(base + start))[-1] = bytes;
            return base + start;
        }
    }
}

void *malloc(size_t n) { return bump(n, 16); }
void free(void *p) { (void)p; }
void *calloc(size_t n, size_t m) {
    if (m && n > SIZE_MAX / m)
        return 0;
    return bump(n * m, 16); // never used before: zero
}
void *realloc(void *p, size_t n) {
    void *q = bump(n, 16);
    if (p && q) {
        size_t old = ((size_t *)p)[-1];
        memcpy(q, p, old < n ? old : n);
    }
    return q;
}
void *memalign(size_t a, size_t n) { return bump(n, a); }
void *aligned_alloc(size_t a, size_t n) { return bump(n, a); }
void *valloc(size_t n) { return bump(n, PAGE); }
void *pvalloc(size_t n) { return bump((n + PAGE - 1) & ~(PAGE - 1), PAGE); }
int posix_memalign(void **out, size_t a, size_t n) {
    void *p = bump(n, a);
    if (!p)
        return ENOMEM;
    *out = p;
    return 0;
}
size_t malloc_usable_size(void *p) { return p ? ((size_t *)p)[-1] : 0; }

static void *serve(void *arg) {
    (void)arg;
    struct uffd_msg msgs[32];
    for (;;) {
        struct pollfd p = {uffd, POLLIN, 0};
        poll(&p, 1, -1);
        ssize_t n = read(uffd, msgs, sizeof msgs);
        if (n <= 0)
            continue;
        for (size_t i = 0; i < n / sizeof msgs[0]; i++) {
            if (msgs[i].event != UFFD_EVENT_PAGEFAULT)
                continue;
            unsigned long page = msgs[i].arg.pagefault.address & ~(PAGE - 1);
            // A write fault gets a page of its own at once; a zero page would cost it a second,
            // copy-on-write fault.
            if (use_copy || msgs[i].arg.pagefault.flags & UFFD_PAGEFAULT_FLAG_WRITE) {
                struct uffdio_copy c = {.dst = page, .src = (unsigned long)zero_page, .len = PAGE};
                ioctl(uffd, UFFDIO_COPY, &c); // EEXIST when another fault raced: resolved
            } else {
                struct uffdio_zeropage z = {.range = {page, PAGE}};
                ioctl(uffd, UFFDIO_ZEROPAGE, &z);
            }
            atomic_fetch_add_explicit(&served, 1, memory_order_relaxed);
        }
    }
    return 0;
}

// In-thread: the fault's page filled as the handler thread would, from the faulting thread.
static void on_sigbus(int sig, siginfo_t *info, void *context) {
    (void)sig;
    int saved = errno;
    unsigned long page = (unsigned long)info->si_addr & ~(PAGE - 1);
    int write = ((ucontext_t *)context)->uc_mcontext.gregs[REG_ERR] & 2;
    if (use_copy || write) {
        struct uffdio_copy c = {.dst = page, .src = (unsigned long)zero_page, .len = PAGE};
        ioctl(uffd, UFFDIO_COPY, &c);
    } else {
        struct uffdio_zeropage z = {.range = {page, PAGE}};
        ioctl(uffd, UFFDIO_ZEROPAGE, &z);
    }
    atomic_fetch_add_explicit(&served, 1, memory_order_relaxed);
    errno = saved;
}

__attribute__((constructor)) static void start(void) {
    reserve();
    use_copy = getenv("MIN_UFFD_COPY") && atoi(getenv("MIN_UFFD_COPY")) == 1;
    use_sigbus = getenv("MIN_UFFD_SIGBUS") && atoi(getenv("MIN_UFFD_SIGBUS")) == 1;
    uffd = syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
    struct uffdio_api api = {.api = UFFD_API, .features = use_sigbus ? UFFD_FEATURE_SIGBUS : 0};
    if (uffd < 0 || ioctl(uffd, UFFDIO_API, &api)) {
        perror("min_uffd: userfaultfd");
        _exit(127);
    }
    if (use_sigbus) {
        struct sigaction sa = {.sa_sigaction = on_sigbus, .sa_flags = SA_SIGINFO};
        sigfillset(&sa.sa_mask);
        if (sigaction(SIGBUS, &sa, 0)) {
            perror("min_uffd: sigaction");
            _exit(127);
        }
    } else {
        // The handler first: creating it may allocate, and a fault with no handler would hang.
        pthread_t t;
        if (pthread_create(&t, 0, serve, 0)) {
            perror("min_uffd: pthread_create");
            _exit(127);
        }
    }
    // What is already allocated stays as it is; the rest of the region faults to the handler.
    size_t used = (atomic_load(&next_free) + PAGE - 1) & ~(PAGE - 1);
    struct uffdio_register reg = {.range = {(unsigned long)base + used, size - used},
                                  .mode = UFFDIO_REGISTER_MODE_MISSING};
    if (ioctl(uffd, UFFDIO_REGISTER, &reg)) {
        perror("min_uffd: UFFDIO_REGISTER");
        _exit(127);
    }
}

__attribute__((destructor)) static void report(void) {
    const char *v = getenv("MIN_UFFD_VERBOSE");
    if (v && atoi(v) == 1)
        fprintf(stderr, "min_uffd: %lu faults served\n", atomic_load(&served));
}
