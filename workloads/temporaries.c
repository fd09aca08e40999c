// Temporary allocations in known patterns, counted as heaptrack counts them: a free is
// temporary when the freed block has the size and stack of the last allocation, with no free
// in between. Each pattern runs 1000 times (the realloc one 500); per site:
//   alone    malloc, free:                                     1000 temporaries
//   pair     two blocks of one size at one line, first freed
//            first (it follows an allocation of its size and
//            stack; the second's free follows a free):         1000 of 2000 blocks
//   lifo     the same, last freed first:                       1000 of 2000 blocks
//   first    two blocks of one size at two lines, first freed
//   second   first: neither (another stack was last, then a
//            free came between):                               0 and 0
//   sizes    two sizes at one line: neither                    0 of 2000 blocks
//   grown    malloc, realloc, free: the realloc's free and
//   regrown  the free each follow their block's allocation:    500 and 500
// In all: 4000 temporaries of 10,000 allocations. Loops over `two` (volatile, so never
// unrolled) make two blocks at one call site, with one stack.
// Sites are marked "SITE:<name>" for the tests. No stdio: nothing else allocates.
#include <stdlib.h>

static void *volatile sink;
static volatile int two = 2;

int main(void) {
    static const size_t sizes[2] = {24, 40};
    void *block[2];
    for (int i = 0; i < 1000; i++) {
        void *p = malloc(64); /* SITE:alone */
        sink = p;
        free(p);
    }
    for (int i = 0; i < 1000; i++) {
        for (int k = 0; k < two; k++)
            sink = block[k] = malloc(32); /* SITE:pair */
        free(block[0]);
        free(block[1]);
    }
    for (int i = 0; i < 1000; i++) {
        for (int k = 0; k < two; k++)
            sink = block[k] = malloc(80); /* SITE:lifo */
        free(block[1]);
        free(block[0]);
    }
    for (int i = 0; i < 1000; i++) {
        void *a = malloc(48); /* SITE:first */
        sink = a;
        void *b = malloc(48); /* SITE:second */
        sink = b;
        free(a);
        free(b);
    }
    for (int i = 0; i < 1000; i++) {
        for (int k = 0; k < two; k++)
            sink = block[k] = malloc(sizes[k]); /* SITE:sizes */
        free(block[0]);
        free(block[1]);
    }
    for (int i = 0; i < 500; i++) {
        void *p = malloc(100); /* SITE:grown */
        sink = p;
        p = realloc(p, 200); /* SITE:regrown */
        sink = p;
        free(p);
    }
    return 0;
}
