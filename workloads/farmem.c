// Correctness workload for far-memory emulation: every mode checks the data it wrote and
// exits 0 only if every byte came back. Run it under `fltrace record -L <small> -M <large>`.
//
// usage: farmem <mode> <MiB> [n]
//   threads MiB n    n threads, each writes and verifies its own MiB buffer, 3 rounds
//   fork MiB         parent's data survives into a child forked without exec, and back
//   forkevict MiB    as fork, then the parent writes as much again: its pages, shared with
//                    the child at the fork, are evicted and fetched, and both buffers checked
//   exec MiB         write and verify, then exec "farmem threads MiB 1" under a new runtime
//   readinto MiB     read(2) from a file into evicted pages
//   reuse MiB n      n rounds of mmap, check zeros, write, munmap (more than -M in all)
//   realloc MiB      grow a block by realloc to MiB, the contents kept at every step
//   dontneed MiB     MADV_DONTNEED makes pages read as zeros
//   exhaust MiB      allocate MiB blocks until the runtime stops the program
//   brk MiB          move the break up by MiB in 1 MiB steps, write and verify it all, give
//                    half back and take it again (it reads as zeros)
//   hot MiB n        n rounds of streaming writes over MiB of cold pages, a hot page written
//                    after every cold one
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define PAGE 4096

static uint64_t pattern(uint64_t seed, size_t i) { return (seed * 0x9E3779B97F4A7C15ull) ^ (i * 0xBF58476D1CE4E5B9ull); }

static void fill(uint64_t *p, size_t words, uint64_t seed) {
    for (size_t i = 0; i < words; i++)
        p[i] = pattern(seed, i);
}

static int check(const uint64_t *p, size_t words, uint64_t seed, const char *what) {
    for (size_t i = 0; i < words; i++)
        if (p[i] != pattern(seed, i)) {
            fprintf(stderr, "%s: word %zu is %llx, expected %llx\n", what, i, (unsigned long long)p[i],
                    (unsigned long long)pattern(seed, i));
            return 0;
        }
    return 1;
}

static size_t bytes;

static void *thread_main(void *arg) {
    uint64_t id = (uint64_t)(uintptr_t)arg;
    uint64_t *p = malloc(bytes);
    for (int round = 0; round < 3; round++) {
        fill(p, bytes / 8, id * 100 + round);
        if (!check(p, bytes / 8, id * 100 + round, "thread"))
            return (void *)1;
    }
    free(p);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: farmem <mode> <MiB> [n]\n");
        return 2;
    }
    const char *mode = argv[1];
    bytes = strtoul(argv[2], 0, 10) << 20;
    int n = argc > 3 ? atoi(argv[3]) : 1;
    if (!strcmp(mode, "threads")) {
        pthread_t t[64];
        for (int i = 0; i < n && i < 64; i++)
            pthread_create(&t[i], 0, thread_main, (void *)(uintptr_t)(i + 1));
        int bad = 0;
        for (int i = 0; i < n && i < 64; i++) {
            void *ret;
            pthread_join(t[i], &ret);
            bad |= ret != 0;
        }
        return bad ? 3 : 0;
    }
    if (!strcmp(mode, "fork")) {
        uint64_t *p = malloc(bytes);
        fill(p, bytes / 8, 7);
        pid_t child = fork();
        if (child == 0) {
            if (!check(p, bytes / 8, 7, "child sees parent data"))
                _exit(3);
            uint64_t *q = malloc(bytes);
            fill(q, bytes / 8, 8);
            _exit(check(q, bytes / 8, 8, "child's own data") ? 0 : 3);
        }
        int status;
        waitpid(child, &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            return 3;
        return check(p, bytes / 8, 7, "parent after fork") ? 0 : 3;
    }
    if (!strcmp(mode, "forkevict")) {
        uint64_t *p = malloc(bytes);
        fill(p, bytes / 8, 7);
        pid_t child = fork();
        if (child == 0)
            _exit(check(p, bytes / 8, 7, "child sees parent data") ? 0 : 3);
        int status;
        waitpid(child, &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            return 3;
        uint64_t *q = malloc(bytes);
        fill(q, bytes / 8, 5);
        return check(q, bytes / 8, 5, "parent's new data") && check(p, bytes / 8, 7, "parent's data shared at the fork") ? 0 : 3;
    }
    if (!strcmp(mode, "exec")) {
        uint64_t *p = malloc(bytes);
        fill(p, bytes / 8, 9);
        if (!check(p, bytes / 8, 9, "before exec"))
            return 3;
        execl("/proc/self/exe", argv[0], "threads", argv[2], "1", (char *)0);
        return 2;
    }
    if (!strcmp(mode, "readinto")) {
        char path[] = "/tmp/farmem-XXXXXX";
        int fd = mkstemp(path);
        uint64_t *src = malloc(1 << 20);
        fill(src, (1 << 20) / 8, 11);
        if (write(fd, src, 1 << 20) != 1 << 20)
            return 2;
        uint64_t *p = malloc(bytes);
        fill(p, bytes / 8, 12); // the buffer's first pages are evicted by the end
        lseek(fd, 0, SEEK_SET);
        ssize_t got = read(fd, p, 1 << 20); /* SITE:readinto */
        unlink(path);
        if (got != 1 << 20)
            return 2;
        if (!check(p, (1 << 20) / 8, 11, "read into evicted pages"))
            return 3;
        for (size_t i = (1 << 20) / 8; i < bytes / 8; i++)
            if (p[i] != pattern(12, i)) {
                fprintf(stderr, "rest: word %zu differs\n", i);
                return 3;
            }
        return 0;
    }
    if (!strcmp(mode, "reuse")) {
        for (int round = 0; round < n; round++) {
            uint64_t *p = mmap(0, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (p == MAP_FAILED)
                return 2;
            for (size_t i = 0; i < bytes / 8; i += PAGE / 8)
                if (p[i] != 0) {
                    fprintf(stderr, "round %d: fresh mapping not zero\n", round);
                    return 3;
                }
            fill(p, bytes / 8, round);
            if (!check(p, bytes / 8, round, "mapping"))
                return 3;
            munmap(p, bytes);
        }
        return 0;
    }
    if (!strcmp(mode, "realloc")) {
        size_t size = 4096;
        uint64_t *p = malloc(size);
        fill(p, size / 8, 13);
        while (size < bytes) {
            size_t next = size * 2;
            p = realloc(p, next);
            if (!check(p, size / 8, 13, "realloc kept"))
                return 3;
            fill(p, next / 8, 13);
            size = next;
        }
        return 0;
    }
    if (!strcmp(mode, "brk")) {
        size_t step = 1 << 20;
        char *start = sbrk(0);
        for (size_t done = 0; done < bytes; done += step)
            if (sbrk((intptr_t)step) == (void *)-1) {
                perror("sbrk");
                return 1;
            }
        uint64_t *words = (uint64_t *)start;
        fill(words, bytes / 8, 7); /* SITE:brk */
        if (!check(words, bytes / 8, 7, "brk"))
            return 1;
        size_t half = (bytes) / 2;
        if (sbrk(-(intptr_t)half) == (void *)-1 || sbrk((intptr_t)half) == (void *)-1)
            return 1;
        for (size_t i = half / 8; i < bytes / 8; i++)
            if (words[i] != 0) {
                fprintf(stderr, "brk: word %zu not zero after shrink and regrow\n", i);
                return 1;
            }
        return check(words, half / 8, 7, "brk, kept half") ? 0 : 1;
    }
    if (!strcmp(mode, "dontneed")) {
        uint64_t *p = mmap(0, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        fill(p, bytes / 8, 14);
        madvise(p, bytes, MADV_DONTNEED);
        for (size_t i = 0; i < bytes / 8; i++)
            if (p[i] != 0)
                return 3;
        return 0;
    }
    if (!strcmp(mode, "exhaust")) {
        for (;;) {
            char *p = malloc(bytes);
            if (!p)
                return 4; // the runtime should have stopped us first
            memset(p, 1, PAGE);
        }
    }
    if (!strcmp(mode, "hot")) {
        volatile char *hot = malloc(PAGE * 2);
        volatile char *cold = malloc(bytes);
        for (int round = 0; round < n; round++)
            for (size_t off = 0; off < bytes; off += PAGE) {
                cold[off] = (char)round; /* SITE:cold */
                hot[0] = (char)off; /* SITE:hot */
            }
        return 0;
    }
    fprintf(stderr, "unknown mode %s\n", mode);
    return 2;
}
