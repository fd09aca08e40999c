// Per-fault latency of bringing a page in, in two setups measured the same way (the access is
// timed from the faulting thread):
//   raw N      a minimal userfaultfd handler: one thread, UFFDIO_COPY of a fixed page
//   runtime N  fltrace's runtime (run under fltrace record -L small): every access fetches an
//              evicted page, evicting another one to make room
// Prints "median_ns p99_ns" for N page accesses.
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define PAGE 4096
static int uffd;
static char source[PAGE] __attribute__((aligned(PAGE)));

static void *serve(void *arg) {
    (void)arg;
    for (;;) {
        struct pollfd p = {uffd, POLLIN, 0};
        poll(&p, 1, -1);
        struct uffd_msg msg;
        if (read(uffd, &msg, sizeof msg) != sizeof msg || msg.event != UFFD_EVENT_PAGEFAULT)
            continue;
        struct uffdio_copy copy = {.dst = msg.arg.pagefault.address & ~(PAGE - 1ull), .src = (unsigned long)source, .len = PAGE};
        ioctl(uffd, UFFDIO_COPY, &copy);
    }
    return 0;
}

static long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000L + t.tv_nsec;
}

static int by_value(const void *a, const void *b) {
    long x = *(const long *)a, y = *(const long *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc < 3)
        return 2;
    size_t n = strtoul(argv[2], 0, 10);
    long *lat = calloc(n, sizeof(long));
    volatile char *p;
    if (!strcmp(argv[1], "raw")) {
        p = mmap(0, n * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        madvise((void *)p, n * PAGE, MADV_NOHUGEPAGE);
        uffd = syscall(SYS_userfaultfd, O_CLOEXEC);
        struct uffdio_api api = {.api = UFFD_API};
        struct uffdio_register reg = {.range = {(unsigned long)p, n * PAGE}, .mode = UFFDIO_REGISTER_MODE_MISSING};
        if (uffd < 0 || ioctl(uffd, UFFDIO_API, &api) || ioctl(uffd, UFFDIO_REGISTER, &reg))
            return 3;
        pthread_t t;
        pthread_create(&t, 0, serve, 0);
    } else {
        // Written once, then pushed out by a second buffer larger than local memory.
        p = malloc(n * PAGE);
        for (size_t i = 0; i < n; i++)
            p[i * PAGE] = 1;
        volatile char *flush = malloc(n * PAGE);
        for (size_t i = 0; i < n; i++)
            flush[i * PAGE] = 2;
    }
    for (size_t i = 0; i < n; i++) {
        long t0 = now_ns();
        (void)p[i * PAGE];
        lat[i] = now_ns() - t0;
    }
    qsort(lat, n, sizeof(long), by_value);
    printf("%ld %ld\n", lat[n / 2], lat[n * 99 / 100]);
    return 0;
}
