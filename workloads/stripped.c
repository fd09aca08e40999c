// Faults from two different store instructions of one static function, for naming stripped
// code: the tests build it without -g and strip it, so the function has no symbol, only its
// unwind info (FDE). `two_stores` touches every page of both regions.
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#define PAGE 4096
#define PAGES 15

static char *region(size_t pages) {
    void *p = mmap(NULL, pages * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        exit(1);
    }
    return p;
}

// noipa: no clone of it (`two_stores.constprop.0`) and no inlining into main.
static __attribute__((noipa)) void two_stores(char *a, char *b, int pages) {
    for (int i = 0; i < pages; i++) {
        a[(size_t)i * PAGE] = 1;
        b[(size_t)i * PAGE + 8] = 2;
    }
}

int main(void) {
    two_stores(region(PAGES), region(PAGES), PAGES);
    return 0;
}
