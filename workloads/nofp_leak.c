// Workload of memleak's DWARF stack test: blocks kept three calls below main in code built
// without frame pointers (gcc -O2 -g -fomit-frame-pointer), where the kernel's frame-pointer
// walk stops at the allocating function and only DWARF unwinding reaches main.
//   nofp_leak M SIZE   on a line on stdin: M blocks of SIZE bytes kept at the line marked
//                      deep_leak (main -> leak_outer -> leak_middle -> leak_inner), around
//                      calloc/realloc/free churn that leaves nothing; then prints "ready" and
//                      ends at EOF on stdin
//   nofp_leak M SIZE LIB   the same, then M more blocks of SIZE bytes kept by lib_keep() of
//                      the shared library LIB (libfault.c), loaded with dlopen after the line
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static void *volatile sink;

__attribute__((noinline)) static void leak_inner(void **kept, long n, long size) {
    for (long i = 0; i < n; i++) {
        // Freed again: realloc's old block and the churn must not stay outstanding.
        char *churn = calloc(1, 24);
        churn = realloc(churn, 4096);
        sink = churn;
        free(churn);
        kept[i] = malloc((size_t)size); /* SITE:deep_leak */
    }
}

// The empty asm after each call keeps it from becoming a jump (a tail call leaves no frame).
__attribute__((noinline)) static void leak_middle(void **kept, long n, long size) {
    leak_inner(kept, n, size);
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) static void leak_outer(void **kept, long n, long size) {
    leak_middle(kept, n, size);
    __asm__ volatile("" ::: "memory");
}

int main(int argc, char **argv) {
    if (argc < 3)
        return 2;
    long n = atol(argv[1]);
    long size = atol(argv[2]);
    char buf[64];
    if (read(0, buf, sizeof buf) <= 0)
        return 1;
    void **kept = calloc((size_t)n, sizeof(void *));
    if (!kept)
        return 1;
    leak_outer(kept, n, size);
    sink = kept;
    if (argc > 3) {
        void *lib = dlopen(argv[3], RTLD_NOW);
        void **(*lib_keep)(size_t, size_t) =
            lib ? (void **(*)(size_t, size_t))dlsym(lib, "lib_keep") : NULL;
        if (!lib_keep) {
            fprintf(stderr, "dlopen: %s\n", dlerror());
            return 1;
        }
        sink = lib_keep((size_t)n, (size_t)size);
    }
    printf("ready\n");
    fflush(stdout);
    while (read(0, buf, sizeof buf) > 0) {
    }
    return 0;
}
