// Workload of the stack-growth test: THREADS threads one after the other, each on a fresh
// stack of its own (mapped, never touched, unmapped after the join, so that no live read can
// find it). Each runs `grow`, whose 12 KiB frame it writes from the top down at the line marked
// growth_touch: each write grows the stack into a page not yet present, and the kernel copies
// none of the stack with those faults (the copy starts at the stack pointer, at the bottom of
// the frame, in a missing page). Then `leaf` faults on a page of its own, with a full copy
// (growth_leaf).
//   growth THREADS
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>

#define FRAME_PAGES 3
#define STACK_BYTES (64 * 1024)

__attribute__((noinline)) static void leaf(volatile char *p) {
    p[0] = 1; /* SITE:growth_leaf */
}

// The empty asm after the call keeps it from becoming a jump (a tail call leaves no frame).
__attribute__((noinline)) static void *grow(void *page) {
    volatile char frame[FRAME_PAGES * 4096];
    for (int i = FRAME_PAGES - 1; i >= 0; i--)
        frame[i * 4096 + 64] = (char)i; /* SITE:growth_touch */
    leaf(page);
    __asm__ volatile("" ::: "memory");
    return (void *)(long)frame[64];
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 8;
    char *pages = mmap(NULL, (size_t)threads * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (pages == MAP_FAILED)
        return 1;
    for (int t = 0; t < threads; t++) {
        void *stack = mmap(NULL, STACK_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        pthread_attr_t attr;
        pthread_t thread;
        if (stack == MAP_FAILED || pthread_attr_init(&attr) || pthread_attr_setstack(&attr, stack, STACK_BYTES) ||
            pthread_create(&thread, &attr, grow, pages + (size_t)t * 4096) || pthread_join(thread, NULL))
            return 1;
        pthread_attr_destroy(&attr);
        munmap(stack, STACK_BYTES);
    }
    return 0;
}
