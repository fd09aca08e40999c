/* A deliberately deep stack: `deep PAGES [DEPTH [PAUSE_MS [MODE]]]` recurses DEPTH calls deep
 * (2,000 by default) and there writes one byte on each of PAGES fresh pages, each write a
 * first-touch fault at the line marked deep_touch; with PAUSE_MS, it waits that long after the
 * first write (the recorder reads that fault's stack meanwhile), then writes the rest and exits
 * at once. Built as C and as C++ (the same source), without frame pointers, so that every stack
 * must be unwound from DWARF CFI over far more stack than one copy.
 * MODE `fork`: after the first write (and the pause) the process forks there, deep down; the
 * child writes the other pages and exits at once, the parent waits for it.
 * MODE `paths`: the first page is written under `via_a`, the rest under `via_b`, two callers of
 * the recursion with the same frame, so that both paths put the same return address at the
 * same stack address inside the recursion; each path pauses after its first write.
 * MODE `wide`: the recursion's frames are about 300 bytes each (a local array), so that 300
 * calls make a stack about 90 KB deep.
 * MODE `linger`: also waits PAUSE_MS after the last write, before returning and exiting, so
 * that a recorder has read every fault of the writes before the process's last ones.
 * The work after each call keeps the compiler from making the recursion a loop. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define PAGE 4096

static volatile long sink;
static long pause_ms;

static int fork_there;
static int linger;

__attribute__((noinline)) static long touch(char *buf, long pages) {
    int child = 0;
    for (long i = 0; i < pages; i++) {
        buf[i * PAGE] = (char)i; /* SITE:deep_touch */
        if (i == 0 && pause_ms > 0)
            usleep((useconds_t)pause_ms * 1000);
        if (i == 0 && fork_there) {
            pid_t pid = fork();
            if (pid > 0) {
                waitpid(pid, NULL, 0);
                return pages;
            }
            child = pid == 0;
        }
    }
    if (child)
        _exit(0);
    if (linger && pause_ms > 0)
        usleep((useconds_t)pause_ms * 1000);
    return pages;
}

__attribute__((noinline)) static long descend(char *buf, long pages, long depth) {
    volatile long frame[4] = {depth, depth + 1, depth + 2, depth + 3};
    long done = depth == 0 ? touch(buf, pages) : descend(buf, pages, depth - 1); /* SITE:deep_call */
    sink += frame[depth & 3];
    return done + frame[0] - depth;
}

/* About 300 bytes a call: the array is written and read so that it stays on the stack. */
__attribute__((noinline)) static long descend_wide(char *buf, long pages, long depth) {
    volatile long frame[36];
    for (int i = 0; i < 36; i++)
        frame[i] = depth + i;
    long done = depth == 0 ? touch(buf, pages) : descend_wide(buf, pages, depth - 1); /* SITE:deep_wide_call */
    sink += frame[depth % 36];
    return done + frame[0] - depth;
}

/* The same frame, another name: the two paths differ only in this caller. */
__attribute__((noinline)) static long via_a(char *buf, long pages, long depth) {
    volatile long frame[2] = {depth, pages};
    long done = descend(buf, pages, depth); /* SITE:deep_via_a */
    return done + frame[0] - depth;
}

__attribute__((noinline)) static long via_b(char *buf, long pages, long depth) {
    volatile long frame[2] = {depth, pages};
    long done = descend(buf, pages, depth); /* SITE:deep_via_b */
    return done + frame[1] - pages;
}

int main(int argc, char **argv) {
    long pages = argc > 1 ? atol(argv[1]) : 64;
    long depth = argc > 2 ? atol(argv[2]) : 2000;
    pause_ms = argc > 3 ? atol(argv[3]) : 0;
    const char *mode = argc > 4 ? argv[4] : "";
    fork_there = strcmp(mode, "fork") == 0;
    linger = strcmp(mode, "linger") == 0;
    char *buf = (char *)mmap(NULL, (size_t)pages * PAGE, PROT_READ | PROT_WRITE,
                             MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    long done;
    if (strcmp(mode, "paths") == 0)
        done = via_a(buf, 1, depth) + via_b(buf + PAGE, pages - 1, depth);
    else if (strcmp(mode, "wide") == 0)
        done = descend_wide(buf, pages, depth); /* SITE:deep_main_wide */
    else
        done = descend(buf, pages, depth); /* SITE:deep_main */
    printf("%ld\n", done);
    return 0;
}
