// Workload of the table tests (crates/fltrace/tests/suite/tables.rs): a heap that one brk
// grows, written page by page. Lines of interest carry "SITE:<name>".
#include <stdio.h>
#include <stdlib.h>

#define PAGE 4096

int main(int argc, char **argv) {
    int pages = argc > 1 ? atoi(argv[1]) : 16;
    // Below malloc's mmap threshold (128 KiB): from the heap, grown by a single brk.
    char *heap = malloc((size_t)pages * PAGE);
    if (!heap)
        return 1;
    for (int i = 0; i < pages; i++)
        heap[(size_t)i * PAGE] = 1; /* SITE:heap */
    printf("heap %p\n", (void *)heap);
    return 0;
}
