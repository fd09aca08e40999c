// A program with its own SIGBUS and SIGSEGV handlers, its memory mostly far: run it under
// `fltrace record -L=<less than MiB>`. Its handlers must see its own faults, and only them.
//
// usage: ownsignals <MiB>
//   - a SIGSEGV handler (every signal blocked while it runs) catches reads of NULL, and
//     touches far memory from inside the handler;
//   - a SIGBUS handler (installed with signal(3), then replaced by one of sigaction(2) whose
//     mask holds every signal) catches the reads past the end of a truncated file mapping, and
//     a SIGBUS sent with raise(3); sigaction(2) gives the handler back as installed;
//   - with every signal blocked (sigprocmask, and in a thread of its own with
//     pthread_sigmask), the buffer is written and checked;
//   - the buffer, larger than local memory, is written and checked between all of these.
// Exits 0 only if each handler ran exactly as often as expected, with the right addresses,
// and every word came back; prints what went wrong otherwise.
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define PAGE 4096

static uint64_t *buffer;
static size_t words;
static sigjmp_buf back;
static volatile sig_atomic_t segvs, buses, bus_faults, bus_sent, old_handler_ran, bad;
static void *volatile expected_bus_addr;

static uint64_t pattern(uint64_t seed, size_t i) { return (seed * 0x9E3779B97F4A7C15ull) ^ (i * 0xBF58476D1CE4E5B9ull); }

static void fill(uint64_t seed) {
    for (size_t i = 0; i < words; i++)
        buffer[i] = pattern(seed, i);
}

static int check(uint64_t seed, const char *what) {
    for (size_t i = 0; i < words; i++)
        if (buffer[i] != pattern(seed, i)) {
            fprintf(stderr, "%s: word %zu differs\n", what, i);
            return 0;
        }
    return 1;
}

static void on_segv(int sig, siginfo_t *info, void *context) {
    (void)context;
    if (sig != SIGSEGV || info->si_addr != 0)
        bad = 1;
    segvs++;
    // Far memory, from inside a handler run with every signal blocked.
    uint64_t sum = 0;
    for (size_t i = 0; i < words; i += PAGE / 8)
        sum += buffer[i];
    if (sum == 42)
        bad = 2;
    siglongjmp(back, 1);
}

static void on_bus_old(int sig) {
    (void)sig;
    old_handler_ran = 1;
}

static void on_bus(int sig, siginfo_t *info, void *context) {
    (void)context;
    buses++;
    if (sig != SIGBUS)
        bad = 3;
    if (info->si_code == BUS_ADRERR) {
        if (info->si_addr != expected_bus_addr)
            bad = 4;
        bus_faults++;
        siglongjmp(back, 1);
    }
    if (info->si_code == SI_TKILL || info->si_code == SI_USER)
        bus_sent++;
}

static void *blocked_thread(void *arg) {
    (void)arg;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, 0);
    fill(5);
    return (void *)(intptr_t)check(5, "thread with every signal blocked");
}

int main(int argc, char **argv) {
    size_t bytes = (argc > 1 ? strtoul(argv[1], 0, 10) : 64) << 20;
    words = bytes / 8;
    buffer = malloc(bytes);
    if (!buffer)
        return 2;
    fill(1);

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO;
    sigfillset(&sa.sa_mask);
    if (sigaction(SIGSEGV, &sa, 0) != 0)
        return 2;
    // A first SIGBUS handler, then the one that stays: the program sees its own.
    if (signal(SIGBUS, on_bus_old) == SIG_ERR)
        return 2;
    struct sigaction bus, old;
    memset(&bus, 0, sizeof bus);
    bus.sa_sigaction = on_bus;
    bus.sa_flags = SA_SIGINFO;
    sigfillset(&bus.sa_mask);
    if (sigaction(SIGBUS, &bus, &old) != 0 || old.sa_handler != on_bus_old)
        return 5;
    struct sigaction now;
    if (sigaction(SIGBUS, 0, &now) != 0 || now.sa_sigaction != on_bus || !(now.sa_flags & SA_SIGINFO))
        return 5;

    // NULL reads, caught.
    for (int i = 0; i < 3; i++) {
        if (!sigsetjmp(back, 1)) {
            volatile int *null = 0;
            bad |= *null;
        }
        if (!check(1, "after a NULL read"))
            return 3;
    }

    // Reads past the end of a truncated file mapping, caught.
    char path[] = "/tmp/ownsignals-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0 || ftruncate(fd, 2 * PAGE) != 0)
        return 2;
    char *map = mmap(0, 2 * PAGE, PROT_READ, MAP_SHARED, fd, 0);
    unlink(path);
    if (map == MAP_FAILED || ftruncate(fd, PAGE) != 0)
        return 2;
    for (int i = 0; i < 2; i++) {
        expected_bus_addr = map + PAGE + 8 * i;
        if (!sigsetjmp(back, 1))
            bad |= ((volatile char *)map)[PAGE + 8 * i];
        fill(10 + i);
        if (!check(10 + i, "after a SIGBUS of the program"))
            return 3;
    }
    // A SIGBUS sent, to the program's handler, which returns.
    raise(SIGBUS);

    // Every signal blocked.
    sigset_t all, before;
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, &before);
    fill(4);
    if (!check(4, "with every signal blocked"))
        return 3;
    sigprocmask(SIG_SETMASK, &before, 0);
    pthread_t t;
    void *ok = 0;
    if (pthread_create(&t, 0, blocked_thread, 0) != 0 || pthread_join(t, &ok) != 0 || !ok)
        return 3;

    if (bad || segvs != 3 || bus_faults != 2 || bus_sent != 1 || buses != 3 || old_handler_ran) {
        fprintf(stderr, "bad %d, SIGSEGV %d, SIGBUS %d (faults %d, sent %d), first handler %d\n", bad, segvs,
                buses, bus_faults, bus_sent, old_handler_ran);
        return 4;
    }
    printf("ok\n");
    return 0;
}
