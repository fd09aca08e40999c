// Fault-bound workload: maps anonymous memory and writes one byte per page.
// usage: touch <MiB> <rounds>. Each round maps, touches and unmaps the region, so every
// write is a first-touch fault at the line marked FAULT_SITE.
#include <stdlib.h>
#include <sys/mman.h>

static void __attribute__((noinline)) touch_pages(volatile char *p, size_t bytes) {
    for (size_t off = 0; off < bytes; off += 4096)
        p[off] = 1; /* FAULT_SITE touch */
}

int main(int argc, char **argv) {
    size_t mib = argc > 1 ? strtoul(argv[1], 0, 10) : 512;
    int rounds = argc > 2 ? atoi(argv[2]) : 4;
    size_t bytes = mib << 20;
    for (int r = 0; r < rounds; r++) {
        char *p = mmap(0, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED)
            return 1;
        touch_pages(p, bytes);
        munmap(p, bytes);
    }
    return 0;
}
