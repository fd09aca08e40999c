// Read-mostly far-memory workload: two threads each write their own array once, then read it
// whole in further passes and check every page's value. Under -L at half the peak, every page
// of every later pass is fetched back clean: the case where a runtime that keeps the far copy
// of each resident clean page holds it twice.
// usage: readscan <MiB per thread> <passes>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define PAGE 4096

struct scan {
    size_t bytes;
    int passes;
    int id;
    int failed;
};

__attribute__((noinline)) void fill(volatile char *p, size_t bytes, int id) {
    for (size_t off = 0; off < bytes; off += PAGE)
        p[off] = (char)(off / PAGE + id); /* SITE:readscan_write */
}

__attribute__((noinline)) long sum_pages(volatile char *p, size_t bytes) {
    long sum = 0;
    for (size_t off = 0; off < bytes; off += PAGE)
        sum += p[off]; /* SITE:readscan_read */
    return sum;
}

static void *scan(void *arg) {
    struct scan *s = arg;
    char *p = malloc(s->bytes);
    if (!p) {
        s->failed = 1;
        return 0;
    }
    fill(p, s->bytes, s->id);
    long expected = 0;
    for (size_t off = 0; off < s->bytes; off += PAGE)
        expected += (char)(off / PAGE + s->id);
    for (int i = 1; i < s->passes; i++)
        if (sum_pages(p, s->bytes) != expected) {
            fprintf(stderr, "thread %d pass %d: wrong checksum\n", s->id, i);
            s->failed = 1;
        }
    free(p);
    return 0;
}

int main(int argc, char **argv) {
    size_t bytes = (argc > 1 ? strtoul(argv[1], 0, 10) : 64) << 20;
    int passes = argc > 2 ? atoi(argv[2]) : 4;
    struct scan scans[2] = {{bytes, passes, 0, 0}, {bytes, passes, 1, 0}};
    pthread_t threads[2];
    for (int i = 0; i < 2; i++)
        if (pthread_create(&threads[i], 0, scan, &scans[i]) != 0)
            return 2;
    for (int i = 0; i < 2; i++)
        pthread_join(threads[i], 0);
    if (scans[0].failed || scans[1].failed)
        return 3;
    printf("ok\n");
    return 0;
}
