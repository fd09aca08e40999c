// Workload of the lazy-binding stack-growth test, linked with -Wl,-z,lazy against
// liblazybind.so (lazybindlib.c):
//   lazygrow PAUSE_MS   a thread (on a fresh stack) sets its stack pointer a little above a
//                       page boundary, then calls lazy_touch for the first time, at the line
//                       marked lazygrow_call, through its unbound PLT slot: the dynamic loader's
//                       resolver (`_dl_runtime_resolve_*`) saves its caller's frame base in rbx
//                       and moves the stack pointer down past its register save area, onto the
//                       page below, never touched: its first write there faults, before the
//                       resolver has called anything that saves rbx on the stack. Then the
//                       IFUNC resolver writes 16 pages; then the thread pauses PAUSE_MS (the
//                       recorder reads the PLT's GOT slots meanwhile)
#include <alloca.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

void lazy_touch(void *decoy);

static long pause_ms;

// How far above a page boundary the call leaves the stack pointer: room for the return
// address, the PLT's two words and the resolver's `push rbx`, less than its save area (at least
// 832 bytes with AVX).
#define ABOVE 256

// The empty asm after the call keeps it from becoming a jump (a tail call leaves no frame).
__attribute__((noinline)) static void call_at_boundary(void) {
    uintptr_t sp;
    __asm__ volatile("mov %%rsp, %0" : "=r"(sp));
    volatile char *room = alloca(((sp - ABOVE) & 4095) + 16);
    __asm__ volatile("" ::"r"(room) : "memory");
    lazy_touch(0); /* SITE:lazygrow_call */
    __asm__ volatile("" ::: "memory");
}

static void *worker(void *arg) {
    (void)arg;
    call_at_boundary();
    usleep((useconds_t)pause_ms * 1000);
    return 0;
}

int main(int argc, char **argv) {
    pause_ms = argc > 1 ? atol(argv[1]) : 0;
    pthread_t thread;
    if (pthread_create(&thread, 0, worker, 0))
        return 1;
    pthread_join(thread, 0);
    return 0;
}
