// Far memory across fork: the parent writes an array larger than local memory, then forks a
// child (no exec) that writes an array of its own and reads the parent's whole, checking every
// page. Under -L the child's own writes push the pages it inherited out of its local memory, so
// its read fetches every page of the parent's array.
// usage: forkchild <parent MiB> <child MiB>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define PAGE 4096

__attribute__((noinline)) void parent_fill(volatile char *p, size_t bytes) {
    for (size_t off = 0; off < bytes; off += PAGE)
        p[off] = (char)(off / PAGE); /* SITE:forkchild_parent_write */
}

__attribute__((noinline)) void child_fill(volatile char *p, size_t bytes) {
    for (size_t off = 0; off < bytes; off += PAGE)
        p[off] = (char)(off / PAGE + 1); /* SITE:forkchild_child_write */
}

__attribute__((noinline)) long child_sum(volatile char *p, size_t bytes) {
    long sum = 0;
    for (size_t off = 0; off < bytes; off += PAGE)
        sum += p[off]; /* SITE:forkchild_child_read */
    return sum;
}

int main(int argc, char **argv) {
    size_t parent_bytes = (argc > 1 ? strtoul(argv[1], 0, 10) : 16) << 20;
    size_t child_bytes = (argc > 2 ? strtoul(argv[2], 0, 10) : 8) << 20;
    char *p = malloc(parent_bytes);
    if (!p)
        return 2;
    parent_fill(p, parent_bytes);
    long expected = 0;
    for (size_t off = 0; off < parent_bytes; off += PAGE)
        expected += (char)(off / PAGE);
    fflush(stdout);
    pid_t child = fork();
    if (child < 0)
        return 2;
    if (child == 0) {
        char *q = malloc(child_bytes);
        if (!q)
            _exit(2);
        child_fill(q, child_bytes);
        if (child_sum(p, parent_bytes) != expected) {
            fprintf(stderr, "child: wrong checksum\n");
            _exit(3);
        }
        _exit(0);
    }
    int status = 0;
    if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return 3;
    printf("ok\n");
    return 0;
}
