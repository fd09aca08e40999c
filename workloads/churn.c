// Mapping churn: maps one page, touches it and unmaps it, <cycles> times (3 events a cycle:
// the mapping, its first-touch fault, the unmapping). usage: churn <cycles>
// Prints the cycles done; every touch is one fault at the line marked SITE:touch.
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

static void __attribute__((noinline)) touch(volatile char *page) {
    page[0] = 1; /* SITE:touch */
}

int main(int argc, char **argv) {
    long cycles = argc > 1 ? strtol(argv[1], 0, 10) : 200000;
    for (long i = 0; i < cycles; i++) {
        char *page = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (page == MAP_FAILED) {
            perror("mmap");
            return 1;
        }
        touch(page);
        if (munmap(page, 4096) != 0) {
            perror("munmap");
            return 1;
        }
    }
    printf("cycles %ld\n", cycles);
    return 0;
}
