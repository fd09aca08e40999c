// Workload of the quick-exit test: page faults at the bottom of a recursion about 10 KiB deep
// (deeper than a small stack copy, so outer frames come from beyond it), then the process
// exits at once, in code built without frame pointers (gcc -O2 -g -fomit-frame-pointer).
//   quickexit N   main -> descend (100 levels) -> touch: N first-touch faults at quick_touch
#include <stdlib.h>
#include <sys/mman.h>

static volatile char *pages;
static long count;

__attribute__((noinline)) static void touch(void) {
    for (long i = 0; i < count; i++)
        pages[i * 4096] = (char)i; /* SITE:quick_touch */
    __asm__ volatile("" ::: "memory");
}

// Each level keeps 96 bytes of its own on the stack.
__attribute__((noinline)) static long descend(int depth) {
    volatile char pad[96];
    pad[0] = (char)depth;
    if (depth > 0)
        descend(depth - 1);
    else
        touch();
    return pad[0];
}

int main(int argc, char **argv) {
    count = argc > 1 ? atol(argv[1]) : 100;
    void *p = mmap(NULL, (size_t)count * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return 1;
    pages = p;
    descend(100);
    return 0;
}
