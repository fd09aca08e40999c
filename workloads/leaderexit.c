// A process whose main thread ends first: a forked child starts a thread and ends its main
// thread (pthread_exit); the thread waits <ms>, long enough for the main thread's end to be
// read, then touches <pages> pages. The process lives until that thread ends.
// usage: leaderexit <pages> <ms>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define PAGE 4096

static size_t pages;
static unsigned wait_ms;

__attribute__((noinline)) static void late_touch(volatile char *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        p[i * PAGE] = 1; /* SITE:leaderexit_late */
}

static void *outliving(void *arg) {
    (void)arg;
    usleep(wait_ms * 1000);
    char *p = mmap(0, pages * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        exit(2);
    late_touch(p, pages);
    return 0;
}

int main(int argc, char **argv) {
    pages = argc > 1 ? strtoul(argv[1], 0, 10) : 100;
    wait_ms = argc > 2 ? (unsigned)strtoul(argv[2], 0, 10) : 300;
    pid_t child = fork();
    if (child < 0)
        return 2;
    if (child == 0) {
        pthread_t thread;
        if (pthread_create(&thread, 0, outliving, 0) != 0)
            _exit(2);
        pthread_exit(0);
    }
    int status = 0;
    if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return 3;
    printf("%d\n", (int)child);
    return 0;
}
