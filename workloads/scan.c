// Far-memory workload: allocate a buffer, write every page once (first touches), then read
// every page in further passes. Under -L smaller than the buffer with FIFO eviction, every
// page of every later pass is fetched back from far memory.
// usage: scan <MiB> <passes>
#include <stdio.h>
#include <stdlib.h>

#define PAGE 4096

__attribute__((noinline)) void write_pass(volatile char *p, size_t bytes) {
    for (size_t off = 0; off < bytes; off += PAGE)
        p[off] = (char)(off / PAGE); /* SITE:scan_write */
}

__attribute__((noinline)) long read_pass(volatile char *p, size_t bytes) {
    long sum = 0;
    for (size_t off = 0; off < bytes; off += PAGE)
        sum += p[off]; /* SITE:scan_read */
    return sum;
}

int main(int argc, char **argv) {
    size_t bytes = (argc > 1 ? strtoul(argv[1], 0, 10) : 64) << 20;
    int passes = argc > 2 ? atoi(argv[2]) : 3;
    char *p = malloc(bytes);
    if (!p)
        return 1;
    write_pass(p, bytes);
    long expected = 0;
    for (size_t off = 0; off < bytes; off += PAGE)
        expected += (char)(off / PAGE);
    for (int i = 1; i < passes; i++) {
        long sum = read_pass(p, bytes);
        if (sum != expected) {
            fprintf(stderr, "pass %d: checksum %ld, expected %ld\n", i, sum, expected);
            return 3;
        }
    }
    printf("ok\n");
    return 0;
}
