// Workload of the wide-frame test: a frame larger than the default 16 KiB stack copy (as
// postgres's pg_tzset, about 26 KiB), from which two different calls fault:
//   wide PAGES PAUSE_MS   main -> wide (a 20 KiB frame) -> first writes page 0 at the line
//                         marked wide_first and pauses PAUSE_MS (the recorder reads that stack
//                         from the live process meanwhile); then wide -> second writes the
//                         other pages at the line marked wide_second, and the process exits at
//                         once
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

static long pause_ms;

__attribute__((noinline)) static void first(volatile char *p) {
    p[0] = 1; /* SITE:wide_first */
    usleep((useconds_t)pause_ms * 1000);
}

__attribute__((noinline)) static void second(volatile char *p, long pages) {
    for (long i = 1; i < pages; i++)
        p[i * 4096] = (char)i; /* SITE:wide_second */
}

// The empty asm after each call keeps the last from becoming a jump (a tail call leaves no
// frame); `big` keeps the frame 20 KiB wide.
__attribute__((noinline)) static long wide(volatile char *p, long pages) {
    volatile char big[20480];
    big[0] = 1;
    big[sizeof big - 1] = 2;
    first(p);
    second(p, pages);
    __asm__ volatile("" ::: "memory");
    return big[0] + big[sizeof big - 1];
}

int main(int argc, char **argv) {
    long pages = argc > 1 ? atol(argv[1]) : 64;
    pause_ms = argc > 2 ? atol(argv[2]) : 300;
    char *p = mmap(NULL, (size_t)pages * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return 1;
    return wide(p, pages) == 3 ? 0 : 1;
}
