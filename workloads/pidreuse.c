// A pid reused within one recording: a child touches <first> pages and exits; the parent then
// makes its next child get the same pid (writing ns_last_pid, which needs root and a pid
// namespace of its own, so that nothing else takes the pid in between), which touches
// <second> pages. Each child also leaks as many blocks as it touches pages (24 bytes each for
// the first, 48 for the second: what `record --allocs` finds). Prints the two children's pids;
// fails (status 4) if the pid was not reused.
// usage: pidreuse <first pages> <second pages> [ms to wait before the second child]
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define PAGE 4096

__attribute__((noinline)) void first_touch(volatile char *p, size_t pages) {
    for (size_t i = 0; i < pages; i++)
        p[i * PAGE] = 1; /* SITE:pidreuse_first */
}

__attribute__((noinline)) void second_touch(volatile char *p, size_t pages) {
    for (size_t i = 0; i < pages; i++)
        p[i * PAGE] = 2; /* SITE:pidreuse_second */
}

__attribute__((noinline)) void first_allocs(size_t blocks) {
    for (size_t i = 0; i < blocks; i++) {
        void *volatile block = malloc(24); /* SITE:pidreuse_first_alloc */
        (void)block;
    }
}

__attribute__((noinline)) void second_allocs(size_t blocks) {
    for (size_t i = 0; i < blocks; i++) {
        void *volatile block = malloc(48); /* SITE:pidreuse_second_alloc */
        (void)block;
    }
}

/* A child that maps `pages` fresh pages, touches each once with `touch`, then leaks `pages`
   blocks with `allocate`. */
static pid_t spawn(void (*touch)(volatile char *, size_t), void (*allocate)(size_t), size_t pages) {
    pid_t pid = fork();
    if (pid == 0) {
        char *p = mmap(0, pages * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED)
            _exit(2);
        touch(p, pages);
        allocate(pages);
        _exit(0);
    }
    return pid;
}

static int reap(pid_t pid) {
    int status = 0;
    return waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

int main(int argc, char **argv) {
    size_t first = argc > 1 ? strtoul(argv[1], 0, 10) : 100;
    size_t second = argc > 2 ? strtoul(argv[2], 0, 10) : 300;
    unsigned wait_ms = argc > 3 ? (unsigned)strtoul(argv[3], 0, 10) : 0;
    pid_t a = spawn(first_touch, first_allocs, first);
    if (a < 0 || !reap(a))
        return 2;
    /* Waits first: a task made in the namespace while it waited would take the pid. */
    usleep(wait_ms * 1000);
    /* The next pid the namespace hands out is the one after ns_last_pid. */
    int fd = open("/proc/sys/kernel/ns_last_pid", O_WRONLY);
    char text[32];
    int len = snprintf(text, sizeof text, "%d", (int)a - 1);
    if (fd < 0 || write(fd, text, (size_t)len) != len)
        return 3;
    close(fd);
    pid_t b = spawn(second_touch, second_allocs, second);
    if (b < 0 || !reap(b))
        return 2;
    printf("%d %d\n", (int)a, (int)b);
    return a == b ? 0 : 4;
}
