// Test workload for the preload library's hardening: allocations made off the thread's own
// stack, and forks while far-memory handler threads evict. Sites are marked "SITE:<name>".
//
// usage: hardening <mode> [args]
//   altstack N        N signals handled on a sigaltstack, each handler mallocs and frees
//                     40 bytes; the signal stack has an inaccessible page right above it
//   coroutine N       N switches into a makecontext coroutine that mallocs and frees 56 bytes;
//                     its stack has an inaccessible page right above it
//   switch N          N calls run on a guarded stack switched to by hand (as coroutine
//                     libraries do), each mallocs and frees 72 bytes: the caller's unwind
//                     information still describes its frame on the thread's stack, so an
//                     unwinder that follows it reads right above the switched-to stack's top
//   forkevict N MiB   two threads fill and free fresh blocks of MiB without pause (under -L
//                     the handlers fault pages in and evict all the time)
//                     while the main thread forks N times; each child mallocs, writes and
//                     frees 4 MiB, then exits; prints "forks N"
//   mainexit MiB      main starts a worker that mallocs MiB and writes each page once (SITE:
//                     mainexit_touch), then leaves through pthread_exit while it runs; the
//                     process ends with the worker, status 0
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <ucontext.h>
#include <unistd.h>

#define PAGE 4096
#define STACK (64 * 1024)

static volatile sig_atomic_t handled;

// A stack of STACK bytes with a PROT_NONE page right above it: a read past its top faults.
static char *guarded_stack(void) {
    char *base = mmap(NULL, STACK + PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                      -1, 0);
    if (base == MAP_FAILED || mprotect(base + STACK, PAGE, PROT_NONE) != 0) {
        perror("stack");
        exit(2);
    }
    return base;
}

__attribute__((noinline)) static void on_signal(int sig) {
    (void)sig;
    void *volatile p = malloc(40); // SITE:altstack_malloc
    free(p);
    handled++;
}

static int altstack(int n) {
    stack_t ss = {.ss_sp = guarded_stack(), .ss_size = STACK, .ss_flags = 0};
    if (sigaltstack(&ss, NULL) != 0) {
        perror("sigaltstack");
        return 2;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_ONSTACK;
    sigaction(SIGUSR1, &sa, NULL);
    for (int i = 0; i < n; i++)
        raise(SIGUSR1);
    printf("handled %d\n", (int)handled);
    return handled == n ? 0 : 1;
}

static ucontext_t main_context, co_context;
static int co_rounds;

__attribute__((noinline)) static void co_alloc(void) {
    void *volatile p = malloc(56); // SITE:coroutine_malloc
    free(p);
}

static void coroutine_main(void) {
    for (;;) {
        co_alloc();
        co_rounds++;
        swapcontext(&co_context, &main_context);
    }
}

static int coroutine(int n) {
    getcontext(&co_context);
    co_context.uc_stack.ss_sp = guarded_stack();
    co_context.uc_stack.ss_size = STACK;
    co_context.uc_link = &main_context;
    makecontext(&co_context, coroutine_main, 0);
    for (int i = 0; i < n; i++)
        swapcontext(&main_context, &co_context);
    printf("rounds %d\n", co_rounds);
    return co_rounds == n ? 0 : 1;
}

__attribute__((noinline)) static void switch_alloc(void) {
    void *volatile p = malloc(72); // SITE:switch_malloc
    free(p);
}

// Calls `fn` with the stack pointer at `top`. The compiler's unwind information for this
// function knows nothing of the switch: unwinding out of `fn` computes this frame's return
// address slot from `top`, in the guard page above it.
__attribute__((noinline)) static void run_on(char *top, void (*fn)(void)) {
    __asm__ volatile("mov %%rsp, %%rbx\n\t"
                     "mov %0, %%rsp\n\t"
                     "call *%1\n\t"
                     "mov %%rbx, %%rsp\n\t"
                     :
                     : "r"(top), "r"(fn)
                     : "rbx", "rax", "rcx", "rdx", "rsi", "rdi", "r8", "r9", "r10", "r11", "cc",
                       "memory");
}

static int switched(int n) {
    char *top = guarded_stack() + STACK;
    for (int i = 0; i < n; i++)
        run_on(top, switch_alloc);
    printf("switched %d\n", n);
    return 0;
}

static atomic_int stop;
static size_t writer_bytes;

// Fresh blocks filled and freed in turn: every page is a missing fault, every free a discard,
// so the handlers hold the region lock most of the time.
static void *writer(void *arg) {
    (void)arg;
    for (unsigned round = 1; !atomic_load(&stop); round++) {
        char *buf = malloc(writer_bytes);
        for (size_t i = 0; i < writer_bytes && !atomic_load(&stop); i += PAGE)
            buf[i] = (char)round;
        free(buf);
    }
    return NULL;
}

static int forkevict(int n, int mib) {
    writer_bytes = (size_t)mib << 20;
    pthread_t threads[2];
    for (int t = 0; t < 2; t++)
        pthread_create(&threads[t], NULL, writer, NULL);
    int forks = 0;
    for (int i = 0; i < n; i++) {
        pid_t child = fork();
        if (child == 0) {
            char *p = malloc(4 << 20);
            memset(p, 1, 4 << 20);
            free(p);
            _exit(0);
        }
        int status = 0;
        if (child > 0 && waitpid(child, &status, 0) == child && WIFEXITED(status) &&
            WEXITSTATUS(status) == 0)
            forks++;
    }
    atomic_store(&stop, 1);
    for (int t = 0; t < 2; t++)
        pthread_join(threads[t], NULL);
    printf("forks %d\n", forks);
    return forks == n ? 0 : 1;
}

static size_t mainexit_bytes;

static void *mainexit_worker(void *arg) {
    (void)arg;
    // Long enough for main to be gone before the first touch.
    usleep(100 * 1000);
    // volatile: the stores into a block freed unread are not optimized away.
    volatile char *buf = malloc(mainexit_bytes);
    for (size_t i = 0; i < mainexit_bytes; i += PAGE)
        buf[i] = 1; // SITE:mainexit_touch
    free((char *)buf);
    return NULL;
}

// main leaves through pthread_exit, as many servers' do: the process lives on in its worker.
static int mainexit(int mib) {
    mainexit_bytes = (size_t)mib << 20;
    pthread_t worker;
    pthread_create(&worker, NULL, mainexit_worker, NULL);
    pthread_exit(NULL);
}

int main(int argc, char **argv) {
    if (argc >= 3 && strcmp(argv[1], "altstack") == 0)
        return altstack(atoi(argv[2]));
    if (argc >= 3 && strcmp(argv[1], "coroutine") == 0)
        return coroutine(atoi(argv[2]));
    if (argc >= 3 && strcmp(argv[1], "switch") == 0)
        return switched(atoi(argv[2]));
    if (argc >= 4 && strcmp(argv[1], "forkevict") == 0)
        return forkevict(atoi(argv[2]), atoi(argv[3]));
    if (argc >= 3 && strcmp(argv[1], "mainexit") == 0)
        return mainexit(atoi(argv[2]));
    fprintf(stderr,
            "usage: hardening altstack N | coroutine N | switch N | forkevict N MiB | mainexit MiB\n");
    return 2;
}
