// Faults in functions with known names, for attribution without debug info: the tests build it
// without -g (symbol table only) and stripped. `f`, `d` and `St` are plain C names that a C++
// demangler misreads (as float, double, std); `zero` faults inside libc's memset.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define PAGE 4096

static char *region(size_t pages) {
    void *p = mmap(NULL, pages * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        exit(1);
    }
    return p;
}

// Each writes a different value at a different offset, so that no two are folded into one.
__attribute__((noinline)) void f(char *p, int pages) {
    for (int i = 0; i < pages; i++)
        p[(size_t)i * PAGE] = 1;
}

__attribute__((noinline)) void d(char *p, int pages) {
    for (int i = 0; i < pages; i++)
        p[(size_t)i * PAGE + 8] = 2;
}

__attribute__((noinline)) void St(char *p, int pages) {
    for (int i = 0; i < pages; i++)
        p[(size_t)i * PAGE + 16] = 3;
}

__attribute__((noinline)) void zero(char *p, int pages) {
    memset(p, 0, (size_t)pages * PAGE); // SITE:zero_memset
    // Keeps `zero` on the stack: no tail call into memset.
    __asm__ volatile("" : : "r"(p) : "memory");
}

int main(void) {
    f(region(10), 10);
    d(region(20), 20);
    St(region(30), 30);
    zero(region(40), 40);
    return 0;
}
