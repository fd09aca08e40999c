// Workload of the thread-name tests: a thread named with a space, as the JVM names its own
// ("GC Thread#0", "C2 CompilerThre"), touches fresh pages beside the main thread.
//   threadname N   the thread "GC Thread#0" writes N fresh pages (at named_thread_write), then
//                  main writes 2N (at main_write)
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>

static long n;

static void *worker(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "GC Thread#0");
    char *p = mmap(NULL, (size_t)n * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    for (long i = 0; i < n; i++)
        p[i * 4096] = 1; /* SITE:named_thread_write */
    return NULL;
}

int main(int argc, char **argv) {
    n = argc > 1 ? atol(argv[1]) : 16;
    pthread_t t;
    if (pthread_create(&t, NULL, worker, NULL) != 0 || pthread_join(t, NULL) != 0)
        return 1;
    char *p = mmap(NULL, (size_t)n * 2 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return 1;
    for (long i = 0; i < 2 * n; i++)
        p[i * 4096] = 1; /* SITE:main_write */
    return 0;
}
