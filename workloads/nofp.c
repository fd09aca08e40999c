// Workload of the DWARF stack tests: page faults three calls below main in code built
// without frame pointers (gcc -O2 -g -fomit-frame-pointer), where the kernel's frame-pointer
// walk stops at the faulting function and only DWARF unwinding reaches main.
//   nofp N    N first-touch faults on fresh anonymous pages at the line marked deep_touch,
//             reached as main -> fault_outer -> fault_middle -> fault_inner; then exits
#include <stdlib.h>
#include <sys/mman.h>

__attribute__((noinline)) static void fault_inner(volatile char *p, long n) {
    for (long i = 0; i < n; i++)
        p[i * 4096] = (char)i; /* SITE:deep_touch */
}

// The empty asm after each call keeps it from becoming a jump (a tail call leaves no frame).
__attribute__((noinline)) static void fault_middle(volatile char *p, long n) {
    fault_inner(p, n);
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) static void fault_outer(volatile char *p, long n) {
    fault_middle(p, n);
    __asm__ volatile("" ::: "memory");
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 100;
    char *p = mmap(NULL, (size_t)n * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return 1;
    fault_outer(p, n);
    return 0;
}
