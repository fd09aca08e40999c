// Workload of the stack-holes test: a frame whose middle pages are never touched (as
// jemalloc's 10,960-byte start-up frame in redis, or postgres's pg_tzset), under which a call
// faults:
//   holes PAGES   main -> big (a 64 KiB frame of which only the two ends are written) -> leaf
//                 writes PAGES fresh pages at the line marked holes_touch; the process exits
//                 at once, so that no live read of its stack finds big's frame: the frames
//                 above big come from the fault's own stack copy or from nowhere
// Built without stack-clash protection (gcc's default here), which would touch every page.
#include <stdlib.h>
#include <sys/mman.h>

__attribute__((noinline)) static void leaf(volatile char *p, long pages) {
    for (long i = 0; i < pages; i++)
        p[i * 4096] = (char)i; /* SITE:holes_touch */
}

// The empty asm after each call keeps it from becoming a jump (a tail call leaves no frame).
__attribute__((noinline)) static long big(volatile char *p, long pages) {
    volatile char frame[65536];
    frame[0] = 1;
    frame[sizeof frame - 1] = 2;
    leaf(p, pages); /* SITE:holes_leaf */
    __asm__ volatile("" ::: "memory");
    return frame[0] + frame[sizeof frame - 1];
}

int main(int argc, char **argv) {
    long pages = argc > 1 ? atol(argv[1]) : 32;
    char *p = mmap(NULL, (size_t)pages * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return 1;
    long r = big(p, pages); /* SITE:holes_big */
    __asm__ volatile("" ::: "memory");
    return r == 3 ? 0 : 2;
}
