// Two threads with known fault counts: `small` touches SMALL fresh pages, `big` BIG, each in a
// mapping of its own, one after the other (the second starts when the first has ended).
//
// Usage: threads2 SMALL BIG
//
// Lines are marked "SITE:<name>" for the tests.
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#define PAGE 4096

struct job {
    const char *name;
    size_t pages;
    char *buffer;
};

__attribute__((noinline)) void fill_pages(volatile char *p, size_t pages) {
    for (size_t i = 0; i < pages; i++)
        p[i * PAGE] = 1; /* SITE:fill */
}

static void *worker(void *arg) {
    struct job *job = arg;
    pthread_setname_np(pthread_self(), job->name);
    fill_pages(job->buffer, job->pages);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: threads2 SMALL BIG\n");
        return 2;
    }
    struct job jobs[2] = {{"small", strtoul(argv[1], 0, 10), 0}, {"big", strtoul(argv[2], 0, 10), 0}};
    // Every mapping before any thread faults (an mmap during a fault can make it retry).
    for (int t = 0; t < 2; t++) {
        jobs[t].buffer = mmap(0, jobs[t].pages * PAGE, PROT_READ | PROT_WRITE,
                              MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (jobs[t].buffer == MAP_FAILED) {
            perror("mmap");
            return 1;
        }
    }
    for (int t = 0; t < 2; t++) {
        pthread_t tid;
        pthread_create(&tid, 0, worker, &jobs[t]);
        pthread_join(tid, 0);
    }
    return 0;
}
