// Reserve-then-commit, as managed runtimes (HotSpot, V8, Go) take their heaps: address space
// reserved PROT_NONE, committed in place in chunks, uncommitted and committed again. Every
// mode checks its data and exits 0 only if every byte came back. Run it under
// `fltrace record -L <small> -M <large>`.
//
// usage: reserve <mode> <MiB> [chunk MiB]
//   fixed MiB chunk      reserve MiB (PROT_NONE, MAP_NORESERVE), commit it chunk by chunk with
//                        mmap(MAP_FIXED, PROT_READ|PROT_WRITE), write every word, read it all
//                        back twice; uncommit the first half with mmap(MAP_FIXED, PROT_NONE),
//                        commit it again: it reads as zeros; write and check it again
//   mprotect MiB chunk   the same, committing with mprotect(PROT_READ|PROT_WRITE) and
//                        uncommitting with madvise(MADV_DONTNEED) and mprotect(PROT_NONE)
//   protect MiB          commit and write MiB, make it read-only (the kernel keeps it), check
//                        it, make it writable again, write and check, then inaccessible and
//                        writable again: the contents stay throughout
//   rawmmap MiB          map MiB by the raw system call (no interposer sees it) and write it,
//                        beside a 16 MiB block from malloc; stay 2.5 s so that the recorder
//                        samples it, then exit
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MIB (1ul << 20)

static uint64_t pattern(uint64_t seed, size_t i) { return (seed * 0x9E3779B97F4A7C15ull) ^ (i * 0xBF58476D1CE4E5B9ull); }

static void fill(uint64_t *p, size_t words, uint64_t seed) {
    for (size_t i = 0; i < words; i++)
        p[i] = pattern(seed, i); /* SITE:commit_write */
}

static int check(const uint64_t *p, size_t words, uint64_t seed, const char *what) {
    for (size_t i = 0; i < words; i++)
        if (p[i] != pattern(seed, i)) { /* SITE:commit_read */
            fprintf(stderr, "%s: word %zu is %llx, expected %llx\n", what, i, (unsigned long long)p[i],
                    (unsigned long long)pattern(seed, i));
            return 0;
        }
    return 1;
}

static int zeros(const uint64_t *p, size_t words, const char *what) {
    for (size_t i = 0; i < words; i++)
        if (p[i] != 0) {
            fprintf(stderr, "%s: word %zu is %llx after the uncommit, not 0\n", what, i, (unsigned long long)p[i]);
            return 0;
        }
    return 1;
}

static char *reserve(size_t bytes) {
    char *p = mmap(NULL, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        perror("reserve");
        exit(2);
    }
    return p;
}

static void commit(char *p, size_t bytes, int fixed) {
    if (fixed) {
        if (mmap(p, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != p) {
            perror("commit (MAP_FIXED)");
            exit(2);
        }
    } else if (mprotect(p, bytes, PROT_READ | PROT_WRITE) != 0) {
        perror("commit (mprotect)");
        exit(2);
    }
}

static void uncommit(char *p, size_t bytes, int fixed) {
    if (fixed) {
        if (mmap(p, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0) != p) {
            perror("uncommit (MAP_FIXED)");
            exit(2);
        }
    } else if (madvise(p, bytes, MADV_DONTNEED) != 0 || mprotect(p, bytes, PROT_NONE) != 0) {
        perror("uncommit (madvise, mprotect)");
        exit(2);
    }
}

static int commit_mode(size_t bytes, size_t chunk, int fixed) {
    char *base = reserve(bytes);
    for (size_t off = 0; off < bytes; off += chunk) {
        commit(base + off, chunk, fixed);
        fill((uint64_t *)(base + off), chunk / 8, off / chunk);
    }
    for (int pass = 0; pass < 2; pass++)
        for (size_t off = 0; off < bytes; off += chunk)
            if (!check((uint64_t *)(base + off), chunk / 8, off / chunk, "committed"))
                return 1;
    size_t half = bytes / 2 / chunk * chunk;
    uncommit(base, half, fixed);
    commit(base, half, fixed);
    if (!zeros((uint64_t *)base, half / 8, "recommitted"))
        return 1;
    fill((uint64_t *)base, half / 8, 1000);
    if (!check((uint64_t *)base, half / 8, 1000, "recommitted"))
        return 1;
    for (size_t off = half; off < bytes; off += chunk)
        if (!check((uint64_t *)(base + off), chunk / 8, off / chunk, "kept"))
            return 1;
    if (munmap(base, bytes) != 0) {
        perror("munmap");
        return 1;
    }
    printf("ok %zu MiB committed in %zu MiB chunks by %s\n", bytes / MIB, chunk / MIB, fixed ? "MAP_FIXED" : "mprotect");
    return 0;
}

static int protect_mode(size_t bytes) {
    char *p = reserve(bytes);
    commit(p, bytes, 1);
    fill((uint64_t *)p, bytes / 8, 7);
    if (mprotect(p, bytes, PROT_READ) != 0 || !check((uint64_t *)p, bytes / 8, 7, "read-only"))
        return 1;
    if (mprotect(p, bytes, PROT_READ | PROT_WRITE) != 0 || !check((uint64_t *)p, bytes / 8, 7, "writable again"))
        return 1;
    fill((uint64_t *)p, bytes / 8, 8);
    if (mprotect(p, bytes, PROT_NONE) != 0 || mprotect(p, bytes, PROT_READ | PROT_WRITE) != 0 ||
        !check((uint64_t *)p, bytes / 8, 8, "inaccessible and back"))
        return 1;
    munmap(p, bytes);
    printf("ok %zu MiB kept through read-only, inaccessible and writable again\n", bytes / MIB);
    return 0;
}

static int rawmmap_mode(size_t bytes) {
    long raw = syscall(SYS_mmap, 0, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw < 0) {
        perror("mmap by system call");
        return 1;
    }
    char *p = (char *)raw;
    memset(p, 1, bytes);
    char *block = malloc(16 * MIB);
    memset(block, 2, 16 * MIB);
    usleep(2500 * 1000);
    printf("ok %zu MiB mapped by system call, %d %d\n", bytes / MIB, p[bytes - 1], block[16 * MIB - 1]);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: reserve fixed|mprotect|protect|rawmmap MiB [chunk MiB]\n");
        return 2;
    }
    size_t bytes = strtoul(argv[2], 0, 10) * MIB;
    size_t chunk = (argc > 3 ? strtoul(argv[3], 0, 10) : 8) * MIB;
    if (!strcmp(argv[1], "fixed") || !strcmp(argv[1], "mprotect"))
        return commit_mode(bytes / chunk * chunk, chunk, !strcmp(argv[1], "fixed"));
    if (!strcmp(argv[1], "protect"))
        return protect_mode(bytes);
    if (!strcmp(argv[1], "rawmmap"))
        return rawmmap_mode(bytes);
    fprintf(stderr, "unknown mode %s\n", argv[1]);
    return 2;
}
