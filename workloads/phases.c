// Allocations in phases with known live blocks, for the one-pass allocation report: 100
// blocks of 1000 bytes, then 50 of 2000 (the heap peak: 200,000 bytes, both sites alive), then
// all of the second and 60 of the first freed, 1000 temporaries of 64 bytes, and 3 leaks of
// 500 bytes at the end. Phases are 50 ms apart, far past the allocation clock's 1 ms
// resolution (its ticker may lag on a busy machine).
// Sites are marked "SITE:<name>" for the tests. No stdio: nothing else allocates.
#include <stdlib.h>
#include <unistd.h>

static void *volatile sink;

int main(void) {
    static void *first[100], *second[50];
    for (int i = 0; i < 100; i++)
        first[i] = malloc(1000); /* SITE:first */
    usleep(50000);
    for (int i = 0; i < 50; i++)
        second[i] = malloc(2000); /* SITE:second */
    usleep(50000);
    for (int i = 0; i < 50; i++)
        free(second[i]);
    for (int i = 0; i < 60; i++)
        free(first[i]);
    usleep(50000);
    for (int i = 0; i < 1000; i++) {
        void *p = malloc(64); /* SITE:temporary */
        sink = p;
        free(p);
    }
    usleep(50000);
    for (int i = 0; i < 3; i++)
        sink = malloc(500); /* SITE:leak */
    return 0;
}
