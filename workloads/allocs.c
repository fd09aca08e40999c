// Test workload for allocation tracing: calls into the allocator at known lines, with known
// sizes and counts. Sites are marked "SITE:<name>" for the tests, as in faults.c.
//
// usage: allocs <mode> [args]
//   sites           every kind of call once or a known number of times (see sites())
//   threads N       a producer thread allocates N blocks of 48 bytes, a consumer frees them
//   fork N          the parent allocates N blocks of 24 bytes, a forked child N of 40
//   forkwrite N     a forked child overwrites a block it inherited, then N malloc/free pairs
//                   in each; prints what the parent's block holds after the child exited
//   faults N        an aligned block of N pages, each page written once
//   crash N         N blocks of 72 bytes, never freed, then abort()
//   dlopen LIB N    lib_fill(N) in the shared library LIB (an mmap of N pages)
//   attach N        print "ready", wait until stdin closes, then N blocks of 56 bytes, the
//                   odd ones freed (for a tracer attaching to a running process)
//   hold N          N blocks of 88 bytes, kept, then print "ready" and wait until stdin closes
//                   (for a recorder killed while the program runs)
//   signals N       N malloc/free pairs of 32 bytes while a timer signal every 50 us maps and
//                   unmaps a page from its handler; prints how many signals were handled
//   malloc4m [N]    N (default 4,000,000) malloc/free pairs of 16 to 527 bytes, every seventh
//                   block kept in a ring of 1,024: malloc-4m of ../shared/PEERS.md
//   steady S [RATE] RATE (default 20,000) blocks of STEADY_SIZE bytes a second at
//                   SITE:steady_alloc, paced every 10 ms, for S seconds (0: without end);
//                   every tenth kept (listed through the blocks themselves: no other call),
//                   the others freed at once. Each second it prints to stderr the blocks of
//                   that second, `allocs: N allocs/s` (for `fltrace top --allocs`)
//   heap MB         MB MiB in 64 KiB malloc blocks plus a calloc, a growing realloc, a
//                   memalign and an 8 MiB block, all kept and filled; prints a checksum of
//                   their bytes, then the file (from /proc/self/maps) that holds each kind
//                   and, if a file does, its size then
#define _GNU_SOURCE
#include <dlfcn.h>
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PAGE 4096

static void *volatile sink;
static void *before_main;

// An allocation before main: the tracer must already be working in constructors.
__attribute__((constructor)) static void early(void) {
    before_main = malloc(333); /* SITE:constructor */
}

// The results go through `sink` so that neither a tail call (the frame would vanish) nor the
// compiler's removal of unused malloc/free pairs hides a call.
__attribute__((noinline)) static void *repeated(size_t size) {
    void *p = malloc(size); /* SITE:repeated */
    sink = p;
    return p;
}

__attribute__((noinline)) static void *leak(void) {
    void *p = malloc(4096); /* SITE:leak */
    sink = p;
    return p;
}

static void sites(void) {
    // 1000 blocks of 100 bytes, each freed at once (temporary allocations).
    for (int i = 0; i < 1000; i++) {
        void *p = repeated(100);
        sink = p;
        free(p);
    }
    // Three leaked blocks of 4096 bytes.
    for (int i = 0; i < 3; i++)
        sink = leak(); /* SITE:leak_call */
    // A realloc chain: 16 grows to 1024 in six steps, then freed.
    char *chain = malloc(16); /* SITE:chain_start */
    sink = chain;
    for (size_t size = 32; size <= 1024; size *= 2) {
        chain = realloc(chain, size); /* SITE:chain */
        sink = chain;
    }
    free(chain);
    // Aligned allocations.
    void *a = NULL;
    if (posix_memalign(&a, 64, 256) != 0) /* SITE:posix_memalign */
        exit(2);
    sink = a;
    void *b = aligned_alloc(4096, 8192); /* SITE:aligned_alloc */
    sink = b;
    void *c = memalign(128, 512); /* SITE:memalign */
    sink = c;
    void *z = calloc(10, 100); /* SITE:calloc */
    sink = z;
    free(a);
    free(b);
    free(c);
    free(z);
    // An anonymous mapping of 1 MiB, then unmapped.
    char *m = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0); /* SITE:mmap */
    m[0] = 1;
    munmap(m, 1 << 20);
    // The break moved by hand: 64 KiB up, then back.
    void *brk_start = sbrk(65536); /* SITE:sbrk */
    sink = brk_start;
    sbrk(-65536);
    free(before_main);
}

struct queue {
    void **slots;
    int n;
};

static void *produce(void *arg) {
    struct queue *q = arg;
    for (int i = 0; i < q->n; i++)
        q->slots[i] = malloc(48); /* SITE:produce */
    sink = q->slots;
    return NULL;
}

static void *consume(void *arg) {
    struct queue *q = arg;
    for (int i = 0; i < q->n; i++)
        free(q->slots[i]);
    return NULL;
}

static void threads(int n) {
    struct queue q = {calloc(n, sizeof(void *)), n};
    pthread_t t;
    pthread_create(&t, NULL, produce, &q);
    pthread_join(t, NULL);
    pthread_create(&t, NULL, consume, &q);
    pthread_join(t, NULL);
    free(q.slots);
}

__attribute__((noinline)) static void child_allocs(int n) {
    for (int i = 0; i < n; i++)
        sink = malloc(40); /* SITE:child */
}

static void forked(int n) {
    for (int i = 0; i < n; i++)
        sink = malloc(24); /* SITE:parent */
    pid_t pid = fork();
    if (pid == 0) {
        child_allocs(n);
        _exit(0);
    }
    waitpid(pid, NULL, 0);
}

// A forked child overwrites a block it inherited and allocates; the parent's block must keep
// its value, and its heap must stay usable.
static void fork_write(int n) {
    char *block = malloc(64);
    strcpy(block, "parent");
    pid_t pid = fork();
    if (pid == 0) {
        strcpy(block, "child");
        for (int i = 0; i < n; i++)
            free(malloc(40));
        _exit(strcmp(block, "child") != 0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    for (int i = 0; i < n; i++)
        free(malloc(40));
    printf("parent sees %s, child exited %d\n", block, WEXITSTATUS(status));
}

static void faults(size_t pages) {
    void *p = NULL;
    // Page-aligned, so that the allocator's own header is on the page before: every page
    // of the block is first written here.
    if (posix_memalign(&p, PAGE, pages * PAGE) != 0) /* SITE:fault_block */
        exit(2);
    // One fault per page, whatever the system's transparent huge page setting.
    madvise(p, pages * PAGE, MADV_NOHUGEPAGE);
    char *c = p;
    for (size_t i = 0; i < pages; i++)
        c[i * PAGE] = 1; /* SITE:fault_touch */
    free(p);
}

static void crash(int n) {
    for (int i = 0; i < n; i++)
        sink = malloc(72); /* SITE:crash */
    abort();
}

__attribute__((noinline)) static void attached(int n) {
    void **blocks = calloc(n, sizeof(void *));
    for (int i = 0; i < n; i++)
        blocks[i] = malloc(56); /* SITE:attached */
    for (int i = 1; i < n; i += 2)
        free(blocks[i]);
    sink = blocks;
}

__attribute__((noinline)) static void hold(int n) {
    void **blocks = calloc(n, sizeof(void *));
    for (int i = 0; i < n; i++)
        blocks[i] = malloc(88); /* SITE:hold */
    sink = blocks;
    printf("ready\n");
    fflush(stdout);
    char buf[16];
    while (read(0, buf, sizeof buf) > 0) {
    }
}

static volatile long handled;

static void on_alarm(int sig) {
    (void)sig;
    void *p = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0); /* SITE:handler_mmap */
    if (p != MAP_FAILED)
        munmap(p, PAGE);
    handled++;
}

static void signals(long n) {
    struct sigaction sa = {0};
    sa.sa_handler = on_alarm;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval every = {{0, 50}, {0, 50}};
    setitimer(ITIMER_REAL, &every, NULL);
    for (long i = 0; i < n; i++) {
        void *p = malloc(32); /* SITE:interrupted */
        sink = p;
        free(p);
    }
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, NULL);
    printf("handled %ld\n", handled);
}

static void malloc4m(long n) {
    static void *ring[1024];
    for (long i = 0; i < n; i++) {
        void *p = malloc(16 + (size_t)(i * 37) % 512); /* SITE:malloc4m */
        if (i % 7 == 0) {
            free(ring[i % 1024]);
            ring[i % 1024] = p;
        } else {
            free(p);
        }
    }
}

// The mapping's file holding `p`, from /proc/self/maps: "anon" for anonymous memory.
static char path[4096];
static void backing_of(const char *kind, const void *p) {
    FILE *maps = fopen("/proc/self/maps", "r");
    char line[4096];
    strcpy(path, "anon");
    while (maps && fgets(line, sizeof line, maps)) {
        unsigned long start, end;
        char file[4096] = "";
        if (sscanf(line, "%lx-%lx %*s %*s %*s %*s %4095s", &start, &end, file) >= 2 &&
            (unsigned long)p >= start && (unsigned long)p < end) {
            if (file[0] == '/')
                strcpy(path, file);
            break;
        }
    }
    if (maps)
        fclose(maps);
    printf(" %s=%s", kind, path);
}

// Page faults the kernel counted for this thread while it filled blocks: what fltrace must
// find at heap_fill, whatever the file system behind the heap maps per fault (a tmpfs with
// huge pages maps 2 MiB at once).
static long fill_faults;

static long thread_faults(void) {
    struct rusage usage;
    getrusage(RUSAGE_THREAD, &usage);
    return usage.ru_minflt + usage.ru_majflt;
}

static void fill(unsigned char *p, size_t len, unsigned seed) {
    long before = thread_faults();
    for (size_t i = 0; i < len; i++)
        p[i] = (unsigned char)(seed + i * 31); /* SITE:heap_fill */
    fill_faults += thread_faults() - before;
}

static unsigned long sum(const unsigned char *p, size_t len) {
    unsigned long s = 0;
    for (size_t i = 0; i < len; i++)
        s = s * 131 + p[i];
    return s;
}

static void heap(long mb) {
    size_t blocks = (size_t)mb * 16, block = 64 << 10;
    unsigned char **kept = calloc(blocks, sizeof *kept); /* SITE:heap_calloc */
    unsigned long check = 0;
    for (size_t i = 0; i < blocks; i++) {
        kept[i] = malloc(block); /* SITE:heap_malloc */
        fill(kept[i], block, (unsigned)i);
    }
    unsigned char *grown = malloc(128);
    fill(grown, 128, 7);
    for (size_t size = 256; size <= (1 << 20); size *= 2) {
        grown = realloc(grown, size); /* SITE:heap_realloc */
        fill(grown + size / 2, size / 2, (unsigned)size);
    }
    void *aligned = memalign(4096, 1 << 20); /* SITE:heap_memalign */
    fill(aligned, 1 << 20, 3);
    unsigned char *large = malloc(8 << 20); /* SITE:heap_large */
    fill(large, 8 << 20, 5);
    for (size_t i = 0; i < blocks; i++)
        check ^= sum(kept[i], block);
    check ^= sum(grown, 1 << 20) ^ sum(aligned, 1 << 20) ^ sum(large, 8 << 20);
    printf("checksum %lx\n", check);
    printf("backing");
    backing_of("malloc", kept[blocks - 1]);
    backing_of("calloc", kept);
    backing_of("realloc", grown);
    backing_of("memalign", aligned);
    backing_of("large", large);
    printf("\n");
    // The backing file's size while the program still holds every block.
    struct stat st;
    if (path[0] == '/' && stat(path, &st) == 0)
        printf("file_bytes %lld\n", (long long)st.st_size);
    printf("fill_faults %ld\n", fill_faults);
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

#define STEADY_SIZE 100
#define STEADY_KEEP 10

__attribute__((noinline)) static void *steady_alloc(void) {
    void *p = malloc(STEADY_SIZE); /* SITE:steady_alloc */
    sink = p;
    return p;
}

static void steady(double seconds, long rate) {
    if (rate <= 0)
        rate = 20000;
    void *kept = NULL;
    long made = 0, this_second = 0, budget = 0;
    double start = now(), second = start, paced = start;
    setvbuf(stderr, NULL, _IOLBF, 0);
    while (seconds <= 0 || now() - start < seconds) {
        // Every 10 ms, another hundredth of the second's blocks.
        budget += rate / 100;
        for (; budget > 0; budget--) {
            void **p = steady_alloc();
            if (!p)
                exit(1);
            if (made++ % STEADY_KEEP == 0) {
                *p = kept;
                kept = p;
            } else {
                free(p);
            }
            this_second++;
        }
        paced += 0.01;
        double t = now();
        if (paced > t) {
            double wait = paced - t;
            struct timespec ts = {0, (long)(wait * 1e9)};
            nanosleep(&ts, NULL);
        } else if (t - paced > 0.1) {
            paced = t; // behind by more than 100 ms: no burst to catch up
        }
        t = now();
        if (t - second >= 1.0) {
            fprintf(stderr, "allocs: %ld allocs/s\n", (long)(this_second / (t - second) + 0.5));
            this_second = 0;
            second = t;
        }
    }
    sink = kept;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: allocs sites|threads N|fork N|faults N|crash N|dlopen LIB N|malloc4m [N]|drained N|steady S [RATE]\n");
        return 2;
    }
    const char *mode = argv[1];
    long n = argc > 2 ? atol(argv[argc - 1]) : 0;
    if (!strcmp(mode, "sites")) {
        sites();
    } else if (!strcmp(mode, "threads")) {
        threads((int)n);
    } else if (!strcmp(mode, "fork")) {
        forked((int)n);
    } else if (!strcmp(mode, "forkwrite")) {
        fork_write((int)n);
    } else if (!strcmp(mode, "faults")) {
        faults((size_t)n);
    } else if (!strcmp(mode, "crash")) {
        crash((int)n);
    } else if (!strcmp(mode, "dlopen") && argc > 3) {
        void *lib = dlopen(argv[2], RTLD_NOW);
        void (*fill)(size_t) = lib ? (void (*)(size_t))dlsym(lib, "lib_fill") : NULL;
        if (!fill) {
            fprintf(stderr, "dlopen: %s\n", dlerror());
            return 2;
        }
        fill((size_t)n);
    } else if (!strcmp(mode, "attach")) {
        printf("ready\n");
        fflush(stdout);
        char buf[16];
        while (read(0, buf, sizeof buf) > 0) {
        }
        attached((int)n);
    } else if (!strcmp(mode, "hold")) {
        hold((int)n);
    } else if (!strcmp(mode, "signals")) {
        signals(n);
    } else if (!strcmp(mode, "steady")) {
        steady(argc > 2 ? atof(argv[2]) : 5, argc > 3 ? atol(argv[3]) : 20000);
    } else if (!strcmp(mode, "heap")) {
        heap(n > 0 ? n : 16);
    } else if (!strcmp(mode, "drained")) {
        /* malloc4m's calls, then nothing until stdin closes: the recorder converts them while
           the program still runs. */
        malloc4m(n);
        printf("ready\n");
        fflush(stdout);
        char buf[16];
        while (read(0, buf, sizeof buf) > 0) {
        }
    } else if (!strcmp(mode, "malloc4m")) {
        double start = now();
        malloc4m(n > 0 ? n : 4000000);
        // The run's own time, without start-up and whatever a tracer does after exit.
        printf("elapsed_s %.6f\n", now() - start);
    } else {
        fprintf(stderr, "unknown mode %s\n", mode);
        return 2;
    }
    return 0;
}
