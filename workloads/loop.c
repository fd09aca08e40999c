// A steady fault rate that counts itself, for `fltrace top`: maps 4 MiB, writes one byte per
// page (a first-touch fault each, at SITE:loop_touch), unmaps, and again, at most RATE pages a
// second (paced every 10 ms) for SECONDS seconds (0: without end). Each second it prints to
// stderr the pages it touched in that second, `loop: N pages/s`; at its end `loop: N pages in all`.
// usage: loop <seconds> [rate=20000]
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

#define CHUNK_PAGES 1024
#define PAGE 4096

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void __attribute__((noinline)) loop_touch(volatile char *p, long pages) {
    for (long i = 0; i < pages; i++)
        p[i * PAGE] = 1; /* SITE:loop_touch */
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 5;
    long rate = argc > 2 ? atol(argv[2]) : 20000;
    if (rate <= 0)
        rate = 20000;
    char *p = NULL;
    long left = 0; // pages of the current mapping not touched yet
    double start = now(), second = start;
    long this_second = 0, budget = 0, total = 0;
    double paced = start;
    setvbuf(stderr, NULL, _IOLBF, 0);
    while (seconds <= 0 || now() - start < seconds) {
        // Every 10 ms, another hundredth of the second's pages.
        budget += rate / 100;
        while (budget > 0) {
            if (left == 0) {
                if (p)
                    munmap(p, CHUNK_PAGES * PAGE);
                p = mmap(0, CHUNK_PAGES * PAGE, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
                if (p == MAP_FAILED)
                    return 1;
                left = CHUNK_PAGES;
            }
            long n = budget < left ? budget : left;
            loop_touch(p + (CHUNK_PAGES - left) * PAGE, n);
            left -= n;
            budget -= n;
            this_second += n;
            total += n;
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
            fprintf(stderr, "loop: %ld pages/s\n", (long)(this_second / (t - second) + 0.5));
            this_second = 0;
            second = t;
        }
    }
    fprintf(stderr, "loop: %ld pages in all\n", total);
    return 0;
}
