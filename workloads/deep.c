/* A deliberately deep stack: `deep PAGES [DEPTH [PAUSE_MS]]` recurses DEPTH calls deep (2,000 by
 * default) and there writes one byte on each of PAGES fresh pages, each write a first-touch
 * fault at the SITE:deep_touch line; with PAUSE_MS, it waits that long after the first write
 * (the recorder reads that fault's stack meanwhile), then writes the rest and exits at once. Built as C and as C++ (the same source), without frame pointers,
 * so that every stack must be unwound from DWARF CFI over far more stack than one copy.
 * The work after each call keeps the compiler from making the recursion a loop. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#define PAGE 4096

static volatile long sink;
static long pause_ms;

__attribute__((noinline)) static long touch(char *buf, long pages) {
    for (long i = 0; i < pages; i++) {
        buf[i * PAGE] = (char)i; /* SITE:deep_touch */
        if (i == 0 && pause_ms > 0)
            usleep((useconds_t)pause_ms * 1000);
    }
    return pages;
}

__attribute__((noinline)) static long descend(char *buf, long pages, long depth) {
    volatile long frame[4] = {depth, depth + 1, depth + 2, depth + 3};
    long done = depth == 0 ? touch(buf, pages) : descend(buf, pages, depth - 1); /* SITE:deep_call */
    sink += frame[depth & 3];
    return done + frame[0] - depth;
}

int main(int argc, char **argv) {
    long pages = argc > 1 ? atol(argv[1]) : 64;
    long depth = argc > 2 ? atol(argv[2]) : 2000;
    pause_ms = argc > 3 ? atol(argv[3]) : 0;
    char *buf = (char *)mmap(NULL, (size_t)pages * PAGE, PROT_READ | PROT_WRITE,
                             MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    long done = descend(buf, pages, depth); /* SITE:deep_main */
    printf("%ld\n", done);
    return 0;
}
