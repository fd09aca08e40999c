// Workload of the invalid-access tests: accesses the mappings do not allow, each caught by a
// SIGSEGV handler that jumps back (as a JVM's implicit null checks and a program's own guard
// pages are caught), beside first touches of fresh memory:
//   segv N   N reads through a null pointer (at null_read), N writes to a read-only page
//            (at readonly_write), N reads of a PROT_NONE page (at guard_read), then N
//            first-touch writes of fresh pages (at fresh_write)
#include <setjmp.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>

static sigjmp_buf back;

static void on_segv(int sig) {
    (void)sig;
    siglongjmp(back, 1);
}

__attribute__((noinline)) static int read_at(volatile char *p) {
    return *p; /* SITE:null_read */
}

__attribute__((noinline)) static void write_readonly(volatile char *p) {
    *p = 1; /* SITE:readonly_write */
}

__attribute__((noinline)) static int read_guard(volatile char *p) {
    return *p + 1; /* SITE:guard_read */
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 10;
    struct sigaction sa = {0};
    sa.sa_handler = on_segv;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGSEGV, &sa, NULL) != 0)
        return 1;
    char *readonly = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    char *guard = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    char *fresh = mmap(NULL, (size_t)n * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (readonly == MAP_FAILED || guard == MAP_FAILED || fresh == MAP_FAILED)
        return 1;
    int sum = 0;
    for (long i = 0; i < n; i++)
        if (!sigsetjmp(back, 1))
            sum += read_at((volatile char *)(i * 8));
    for (long i = 0; i < n; i++)
        if (!sigsetjmp(back, 1))
            write_readonly(readonly + i);
    for (long i = 0; i < n; i++)
        if (!sigsetjmp(back, 1))
            sum += read_guard(guard + i);
    for (long i = 0; i < n; i++)
        fresh[i * 4096] = 1; /* SITE:fresh_write */
    return sum == 0 ? 0 : 2;
}
