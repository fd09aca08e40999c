/* A process-directed signal that the main thread blocks: the kernel delivers it to any thread
 * that does not, so a runtime thread of fltrace's that left signals open would run the
 * program's handler beside main (PostgreSQL 15's postmaster forks from its handlers). Exits 0
 * when the handler ran on the main thread once main unblocked it, 1 when it ran elsewhere
 * first. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t handled_on;

static void on_usr1(int sig) {
    (void)sig;
    handled_on = gettid();
}

int main(void) {
    signal(SIGUSR1, on_usr1);
    sigset_t usr1;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    sigprocmask(SIG_BLOCK, &usr1, NULL);
    kill(getpid(), SIGUSR1);
    struct timespec wait = {0, 200 * 1000 * 1000};
    nanosleep(&wait, NULL);
    if (handled_on != 0) {
        printf("handler ran on thread %d, not main %d\n", (int)handled_on, (int)getpid());
        return 1;
    }
    sigprocmask(SIG_UNBLOCK, &usr1, NULL);
    printf("handler ran on %s\n", handled_on == getpid() ? "main" : "no thread");
    return handled_on == getpid() ? 0 : 1;
}
