// Test workload with page faults at known lines. Each site is marked with a comment
// "SITE:<name>"; the tests find the line numbers by that marker, so the file can be edited.
//
// usage: faults <mode> [args]
//   nested N        N write faults in fill() called through level1 -> level2
//   read N          N read faults in read_pages()
//   threads T N     T threads, each N write faults in thread_fill()
//   fork N          parent N faults in fill(), forked child (no exec) N faults in child_fill()
//   exec N          N faults in fill(), then exec "faults nested N"
//   dlopen LIB N    N faults in lib_fill() of the shared library LIB
//   file PATH N     N read faults on a private file mapping of PATH
//   syscall N       read(2) from /dev/zero into N fresh pages: faults taken by the kernel
//   crash N         N faults in fill(), then a write through a null pointer
//   wait N          N faults in fill(), print "ready", then sleep until killed
//   loop N          print "ready", then every 50 ms N faults in fill() on a fresh mapping
//   remap N         mremap a fresh page to N pages where it must move, print the new range
//                   ("remapped START END", hex), then N faults in fill() over it
//   phases MS       write over 64 MiB for MS ms, then over 8 MiB of it for MS ms, then idle
//                   for MS ms (a working set of 64, then 8, then 0 MiB)
#define _GNU_SOURCE // mremap
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PAGE 4096

static char *fresh(size_t pages) {
    char *p = mmap(0, pages * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        exit(2);
    }
    // One fault per page, whatever the system's transparent huge page setting.
    madvise(p, pages * PAGE, MADV_NOHUGEPAGE);
    return p;
}

__attribute__((noinline)) void fill(volatile char *p, size_t pages) {
    for (size_t i = 0; i < pages; i++)
        p[i * PAGE] = (char)i; /* SITE:fill */
}

__attribute__((noinline)) long read_pages(volatile char *p, size_t pages) {
    long sum = 0;
    for (size_t i = 0; i < pages; i++)
        sum += p[i * PAGE]; /* SITE:read */
    return sum;
}

__attribute__((noinline)) void level2(size_t pages) {
    char *p = fresh(pages);
    fill(p, pages); /* SITE:level2 */
    __asm__ volatile("" ::: "memory"); // not a tail call: level2 stays on the stack
}

__attribute__((noinline)) void level1(size_t pages) {
    level2(pages); /* SITE:level1 */
    __asm__ volatile("" ::: "memory");
}

struct job {
    size_t pages;
    char *buffer;
    pthread_barrier_t *start;
};

__attribute__((noinline)) void thread_fill(volatile char *p, size_t pages) {
    for (size_t i = 0; i < pages; i++)
        p[i * PAGE] = 1; /* SITE:thread */
}

static void *worker(void *arg) {
    struct job *job = arg;
    // Every mapping is made before any thread faults: an mmap while another thread faults can
    // make the kernel retry that fault, which the tracepoint then reports twice.
    pthread_barrier_wait(job->start);
    thread_fill(job->buffer, job->pages);
    return 0;
}

__attribute__((noinline)) void child_fill(volatile char *p, size_t pages) {
    for (size_t i = 0; i < pages; i++)
        p[i * PAGE] = 2; /* SITE:child */
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: faults <mode> [args]\n");
        return 2;
    }
    const char *mode = argv[1];
    size_t n = strtoul(argv[argc - 1], 0, 10);
    if (!strcmp(mode, "nested")) {
        level1(n); /* SITE:main */
    } else if (!strcmp(mode, "read")) {
        char *p = fresh(n);
        printf("%ld\n", read_pages(p, n));
    } else if (!strcmp(mode, "threads")) {
        int threads = atoi(argv[2]);
        if (threads > 64)
            threads = 64;
        // Static, not on main's stack: main's frame stays small enough that the stack copy
        // taken at each fault reaches _start (the nested mode's stacks pass through it).
        static pthread_t tids[64];
        static struct job jobs[64];
        static pthread_barrier_t start;
        pthread_barrier_init(&start, 0, threads);
        for (int t = 0; t < threads; t++)
            jobs[t] = (struct job){n, fresh(n), &start};
        for (int t = 0; t < threads; t++)
            pthread_create(&tids[t], 0, worker, &jobs[t]);
        for (int t = 0; t < threads; t++)
            pthread_join(tids[t], 0);
    } else if (!strcmp(mode, "fork")) {
        fill(fresh(n), n);
        pid_t child = fork();
        if (child == 0) {
            child_fill(fresh(n), n);
            _exit(0);
        }
        int status;
        waitpid(child, &status, 0);
        return WEXITSTATUS(status);
    } else if (!strcmp(mode, "exec")) {
        fill(fresh(n), n);
        execl("/proc/self/exe", argv[0], "nested", argv[2], (char *)0);
        perror("exec");
        return 2;
    } else if (!strcmp(mode, "dlopen")) {
        void *lib = dlopen(argv[2], RTLD_NOW);
        if (!lib) {
            fprintf(stderr, "%s\n", dlerror());
            return 2;
        }
        void (*lib_fill)(size_t) = (void (*)(size_t))dlsym(lib, "lib_fill");
        lib_fill(n); /* SITE:lib_fill */
    } else if (!strcmp(mode, "file")) {
        int fd = open(argv[2], O_RDONLY);
        if (fd < 0) {
            perror(argv[2]);
            return 2;
        }
        char *p = mmap(0, n * PAGE, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            perror("mmap");
            return 2;
        }
        madvise(p, n * PAGE, MADV_NOHUGEPAGE);
        printf("%ld\n", read_pages(p, n));
    } else if (!strcmp(mode, "syscall")) {
        char *p = fresh(n);
        int fd = open("/dev/zero", O_RDONLY);
        ssize_t got = read(fd, p, n * PAGE); /* SITE:syscall */
        return got == (ssize_t)(n * PAGE) ? 0 : 2;
    } else if (!strcmp(mode, "crash")) {
        fill(fresh(n), n);
        *(volatile int *)(long)(argc * 0) = 1; /* SITE:crash */
    } else if (!strcmp(mode, "wait")) {
        fill(fresh(n), n);
        printf("ready\n");
        fflush(stdout);
        for (;;)
            pause();
    } else if (!strcmp(mode, "remap")) {
        // The first page of a two-page mapping cannot grow in place: the second is in the
        // way, so the kernel moves it. Called directly, not through realloc, so that no
        // allocator threshold decides.
        char *p = fresh(2);
        char *q = mremap(p, PAGE, n * PAGE, MREMAP_MAYMOVE);
        if (q == MAP_FAILED) {
            perror("mremap");
            return 2;
        }
        printf("remapped %lx %lx\n", (unsigned long)q, (unsigned long)(q + n * PAGE));
        fflush(stdout);
        fill(q, n);
    } else if (!strcmp(mode, "phases")) {
        size_t pages = (64 << 20) / PAGE;
        volatile char *p = fresh(pages);
        struct timespec t0, t;
        long phase_ns = (long)n * 1000000L;
        for (int phase = 0; phase < 2; phase++) {
            size_t span = phase == 0 ? pages : pages / 8;
            clock_gettime(CLOCK_MONOTONIC, &t0);
            do {
                for (size_t i = 0; i < span; i++)
                    p[i * PAGE]++;
                clock_gettime(CLOCK_MONOTONIC, &t);
            } while ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < phase_ns);
        }
        usleep(n * 1000);
    } else if (!strcmp(mode, "tree")) {
        // Defined after main, so that no line above moves (tests find sites by line).
        int tree(size_t pages);
        return tree(n);
    } else if (!strcmp(mode, "loop")) {
        printf("ready\n");
        fflush(stdout);
        for (;;) {
            char *p = fresh(n);
            fill(p, n);
            munmap(p, n * PAGE);
            usleep(50000);
        }
    } else {
        fprintf(stderr, "unknown mode %s\n", mode);
        return 2;
    }
    return 0;
}

// Mode `tree N` (kept below main: see there): fork two children, print "ready CHILD1 CHILD2",
// then for 100 rounds of 50 ms each process takes N faults on a fresh mapping (the parent in
// fill(), the first child in child_fill(), the second in second_child_fill()); the parent then
// waits for both.
__attribute__((noinline)) void second_child_fill(volatile char *p, size_t pages) {
    for (size_t i = 0; i < pages; i++)
        p[i * PAGE] = 3; /* SITE:second_child */
}

/// 100 rounds, 50 ms apart, of `pages` faults by `fill_fn` on a fresh mapping.
static void rounds(void (*fill_fn)(volatile char *, size_t), size_t pages) {
    for (int round = 0; round < 100; round++) {
        char *p = fresh(pages);
        fill_fn(p, pages);
        munmap(p, pages * PAGE);
        usleep(50000);
    }
}

int tree(size_t pages) {
    void (*fills[2])(volatile char *, size_t) = {child_fill, second_child_fill};
    pid_t children[2];
    for (int c = 0; c < 2; c++) {
        children[c] = fork();
        if (children[c] < 0) {
            perror("fork");
            return 2;
        }
        if (children[c] == 0) {
            rounds(fills[c], pages);
            _exit(0);
        }
    }
    printf("ready %d %d\n", children[0], children[1]);
    fflush(stdout);
    rounds(fill, pages);
    for (int c = 0; c < 2; c++)
        waitpid(children[c], 0, 0);
    return 0;
}
