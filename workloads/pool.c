// A program with its own pool allocator: `pool_alloc` carves page-sized chunks from big
// blocks it mallocs (`pool_grow`) and writes each chunk's header, so the page's first touch is
// in pool_alloc; the line to act on is its caller's.
//
// Usage: pool NODES STRINGS: NODES chunks for make_nodes, then STRINGS for make_strings, one
// page each (and one fault each, in pool_alloc's header write).
//
// Lines are marked "SITE:<name>" for the tests.
#include <stdio.h>
#include <stdlib.h>

#define PAGE 4096
#define BLOCK_PAGES 64

struct chunk {
    size_t size;
    struct chunk *next;
};

static char *pool_next, *pool_end;
static struct chunk *pool_chunks;

// A fresh block: malloc's large blocks are fresh mappings, untouched.
__attribute__((noinline)) static void pool_grow(void) {
    char *block = malloc((BLOCK_PAGES + 1) * PAGE); /* SITE:grow */
    if (!block) {
        perror("malloc");
        exit(1);
    }
    // Chunks start on page boundaries: one chunk, one page, one fault.
    pool_next = (char *)(((unsigned long)block + PAGE - 1) & ~(unsigned long)(PAGE - 1));
    pool_end = pool_next + BLOCK_PAGES * PAGE;
}

__attribute__((noinline)) void *pool_alloc(size_t size) {
    size_t rounded = (size + PAGE - 1) & ~(size_t)(PAGE - 1);
    if (!pool_next || pool_next + rounded > pool_end)
        pool_grow();
    struct chunk *c = (struct chunk *)pool_next;
    pool_next += rounded;
    c->size = size; /* SITE:header */
    c->next = pool_chunks;
    pool_chunks = c;
    return c + 1;
}

__attribute__((noinline)) long make_nodes(int n) {
    long sum = 0;
    for (int i = 0; i < n; i++) {
        long *node = pool_alloc(PAGE - 64); /* SITE:nodes */
        node[0] = i;
        sum += node[0];
    }
    return sum;
}

__attribute__((noinline)) long make_strings(int n) {
    long sum = 0;
    for (int i = 0; i < n; i++) {
        char *s = pool_alloc(PAGE - 64); /* SITE:strings */
        s[0] = (char)i;
        sum += s[0];
    }
    return sum;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: pool NODES STRINGS\n");
        return 2;
    }
    long sum = make_nodes(atoi(argv[1])); /* SITE:main_nodes */
    sum += make_strings(atoi(argv[2])); /* SITE:main_strings */
    printf("%ld\n", sum);
    return 0;
}
