// A library the faults workload loads with dlopen: its faults must be attributed to this file.
#include <stddef.h>
#include <stdlib.h>
#include <sys/mman.h>

__attribute__((noinline)) static void lib_touch(volatile char *p, size_t pages) {
    for (size_t i = 0; i < pages; i++)
        p[i * 4096] = 3; /* SITE:lib */
}

void lib_fill(size_t pages) {
    char *p = mmap(0, pages * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    madvise(p, pages * 4096, MADV_NOHUGEPAGE);
    lib_touch(p, pages);
}

// memleak's test of a library loaded after fltrace attached: n blocks of size bytes kept here.
void **lib_keep(size_t n, size_t size) {
    void **kept = calloc(n, sizeof(void *));
    for (size_t i = 0; kept && i < n; i++)
        kept[i] = malloc(size); /* SITE:lib_keep */
    return kept;
}
