// Allocations in phases with known sizes, for the allocation charts and for heaptrack as an
// oracle: 500 temporary blocks of 48 bytes; then 64 blocks of 1 MiB at one site, each filled,
// held 300 ms and freed (the heap's peak: 64 MiB, in this first phase; the first free follows
// the last block of its size and stack, so it is temporary); then after 300 ms 8 blocks of
// 1 MiB at another site and 1000 of 100 bytes at a third, filled and kept to the end (leaked:
// 8 MiB and 100,000 bytes). Each site in a function of its own. No stdio: nothing else
// allocates.
// Sites are marked "SITE:<name>" for the tests.
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MIB (1 << 20)

static void *volatile sink;

__attribute__((noinline)) static void churn(void) {
    for (int i = 0; i < 500; i++) {
        void *p = malloc(48); /* SITE:churn */
        sink = p;
        free(p);
    }
}

__attribute__((noinline)) static void first_phase(void) {
    static void *blocks[64];
    for (int i = 0; i < 64; i++) {
        blocks[i] = malloc(MIB); /* SITE:first */
        memset(blocks[i], 1, MIB);
    }
    usleep(300000);
    for (int i = 0; i < 64; i++)
        free(blocks[i]);
}

__attribute__((noinline)) static void keep(void) {
    static void *blocks[1000];
    for (int i = 0; i < 1000; i++) {
        blocks[i] = malloc(100); /* SITE:keep */
        memset(blocks[i], 3, 100);
    }
    sink = blocks;
}

__attribute__((noinline)) static void second_phase(void) {
    static void *blocks[8];
    for (int i = 0; i < 8; i++) {
        blocks[i] = malloc(MIB); /* SITE:second */
        memset(blocks[i], 2, MIB);
    }
    sink = blocks;
    keep();
    usleep(300000);
}

int main(void) {
    churn();
    first_phase();
    usleep(300000);
    second_phase();
    return 0;
}
