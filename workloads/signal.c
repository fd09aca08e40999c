// Workload of the signal-frame test: page faults inside a signal handler, in code built without
// frame pointers (gcc -O2 -g -fomit-frame-pointer), so the unwinder must step through the
// kernel's signal frame (the handler returns to libc's `__restore_rt`) to reach main.
//   signal N   main -> send_signal raises SIGUSR1; its handler on_signal calls touch_pages,
//              which takes N first-touch faults on fresh anonymous pages at touch_in_handler
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>

static volatile char *pages;
static long count;

__attribute__((noinline)) static void touch_pages(void) {
    for (long i = 0; i < count; i++)
        pages[i * 4096] = (char)i; /* SITE:touch_in_handler */
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) static void on_signal(int sig) {
    (void)sig;
    touch_pages();
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) static void send_signal(void) {
    raise(SIGUSR1);
    __asm__ volatile("" ::: "memory");
}

int main(int argc, char **argv) {
    count = argc > 1 ? atol(argv[1]) : 100;
    void *p = mmap(NULL, (size_t)count * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return 1;
    pages = p;
    struct sigaction action = {0};
    action.sa_handler = on_signal;
    sigemptyset(&action.sa_mask);
    if (sigaction(SIGUSR1, &action, NULL) != 0)
        return 1;
    send_signal();
    return 0;
}
