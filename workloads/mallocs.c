// A thousand 4 KiB blocks from malloc, each written whole: under `record --allocs`, every
// fault on them is the program's, at one of its two lines, none the tracer's.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BLOCKS 1000
#define SIZE 4096

int main(void) {
    char *first = NULL, *last = NULL;
    for (int i = 0; i < BLOCKS; i++) {
        char *block = malloc(SIZE); // SITE:malloc
        if (!block)
            return 1;
        memset(block, i, SIZE); // SITE:write
        if (!first)
            first = block;
        last = block;
    }
    // The first and last block, for the test to know the pages they span.
    printf("%lx %lx\n", (unsigned long)first, (unsigned long)last);
    return 0;
}
