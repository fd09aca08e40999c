// Workload of the stack-search test: a function without CFI and without frame pointers in the
// middle of the stack (as loader and library start-up code, `__do_global_dtors_aux`,
// jemalloc's start-up), written in assembly without `.cfi` directives:
//   nocfi N   N first-touch faults at the line marked nocfi_touch, reached as main ->
//             fault_outer -> nocfi_middle (no CFI) -> fault_inner; then one more fault in
//             nocfi_middle itself (the first frame without CFI); then exits
#include <stdlib.h>
#include <sys/mman.h>

__attribute__((noinline, used)) void fault_inner(volatile char *p, long n) {
    for (long i = 0; i < n; i++)
        p[i * 4096] = (char)i; /* SITE:nocfi_touch */
}

// nocfi_middle(p, n): calls fault_inner(p, n), then writes page n. Its 40-byte frame holds
// p, n and zeros (no stale words), so that only its return address follows a call.
void nocfi_middle(volatile char *p, long n);
__asm__(".text\n"
        ".globl nocfi_middle\n"
        ".type nocfi_middle, @function\n"
        "nocfi_middle:\n"
        "  sub $40, %rsp\n"
        "  movq %rdi, (%rsp)\n"
        "  movq %rsi, 8(%rsp)\n"
        "  movq $0, 16(%rsp)\n"
        "  movq $0, 24(%rsp)\n"
        "  movq $0, 32(%rsp)\n"
        "  call fault_inner\n"
        "  movq (%rsp), %rdi\n"
        "  movq 8(%rsp), %rsi\n"
        "  shlq $12, %rsi\n"
        "  movb $1, (%rdi,%rsi)\n"
        "  add $40, %rsp\n"
        "  ret\n"
        ".size nocfi_middle, .-nocfi_middle\n");

// The empty asm after the call keeps it from becoming a jump (a tail call leaves no frame).
__attribute__((noinline)) static void fault_outer(volatile char *p, long n) {
    nocfi_middle(p, n);
    __asm__ volatile("" ::: "memory");
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 100;
    char *p = mmap(NULL, (size_t)(n + 1) * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return 1;
    fault_outer(p, n);
    return 0;
}
