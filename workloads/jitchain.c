// Workload of the JIT frame-chain tests: main -> jit_outer -> generated code (machine code
// written into an anonymous executable mapping, no CFI, named in /tmp/perf-PID.map as
// `jit_trampoline`) -> jit_touch, which touches N fresh pages.
//   jitchain N fp     the generated code keeps the frame-pointer chain, as V8's JIT code and
//                     HotSpot's with -XX:+PreserveFramePointer do: push %rbp; mov %rsp,%rbp;
//                     call *%rdx; pop %rbp; ret
//   jitchain N nofp   it uses %rbp as a general register, as HotSpot's compiled code does
//                     without PreserveFramePointer: push %rbp; mov $0x5a5a5a5a,%ebp;
//                     call *%rdx; pop %rbp; ret
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static const unsigned char KEEPS_CHAIN[] = {
    0x55,             // push %rbp
    0x48, 0x89, 0xe5, // mov %rsp,%rbp
    0xff, 0xd2,       // call *%rdx
    0x5d,             // pop %rbp
    0xc3,             // ret
};

static const unsigned char USES_RBP[] = {
    0x55,                         // push %rbp
    0xbd, 0x5a, 0x5a, 0x5a, 0x5a, // mov $0x5a5a5a5a,%ebp
    0xff, 0xd2,                   // call *%rdx
    0x5d,                         // pop %rbp
    0xc3,                         // ret
};

typedef void (*trampoline)(volatile char *p, long n, void (*callee)(volatile char *, long));

__attribute__((noinline)) void jit_touch(volatile char *p, long n) {
    for (long i = 0; i < n; i++)
        p[i * 4096] = 1; /* SITE:jit_touch */
}

// The empty asm after the call keeps it from becoming a jump (a tail call leaves no frame).
__attribute__((noinline)) void jit_outer(trampoline code, volatile char *p, long n) {
    code(p, n, jit_touch);
    __asm__ volatile("" ::: "memory");
}

int main(int argc, char **argv) {
    if (argc < 3)
        return 2;
    long n = atol(argv[1]);
    int keeps_chain = strcmp(argv[2], "fp") == 0;
    const unsigned char *bytes = keeps_chain ? KEEPS_CHAIN : USES_RBP;
    size_t len = keeps_chain ? sizeof KEEPS_CHAIN : sizeof USES_RBP;
    unsigned char *code = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    char *pages = mmap(NULL, (size_t)n * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (code == MAP_FAILED || pages == MAP_FAILED)
        return 1;
    memcpy(code, bytes, len);
    if (mprotect(code, 4096, PROT_READ | PROT_EXEC) != 0)
        return 1;
    char path[64];
    snprintf(path, sizeof path, "/tmp/perf-%d.map", getpid());
    FILE *map = fopen(path, "w");
    if (!map)
        return 1;
    fprintf(map, "%lx %zx jit_trampoline\n", (unsigned long)code, len);
    fclose(map);
    jit_outer((trampoline)code, pages, n);
    return 0;
}
