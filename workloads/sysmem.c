// Memory events of the whole system, provoked on purpose for `fltrace oomkill`, `vmscan`,
// `drsnoop`, `mmapsnoop`, `brkstack`, `shmsnoop` and `hfaults` (crates/fltrace/tests/suite/
// system.rs). Each mode does one thing at known lines (SITE: markers) with known sizes.
//
//   sysmem oom CGROUP              join memory cgroup CGROUP, then touch memory until killed
//   sysmem reclaim CGROUP FILE MB  join CGROUP, write FILE (MB) and read it back twice
//   sysmem mmap FILE               map 3 pages of FILE at offset 4096, read-only, shared
//   sysmem brk                     grow the program break by 1 MiB with sbrk
//   sysmem shm KEY SIZE            shmget, shmat, shmdt, shmctl(IPC_RMID)
//   sysmem hugetlb N               map N huge pages with MAP_HUGETLB and touch each once
//   sysmem thp N                   madvise(MADV_HUGEPAGE) N huge pages, touch each once,
//                                  print how many are transparent huge pages
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <unistd.h>

#define HUGE (2UL << 20)

static void join(const char *cgroup) {
    char path[4096];
    snprintf(path, sizeof path, "%s/cgroup.procs", cgroup);
    FILE *f = fopen(path, "w");
    if (!f || fprintf(f, "%d\n", getpid()) < 0 || fclose(f) != 0) {
        perror(path);
        exit(2);
    }
}

static void oom(void) {
    for (;;) {
        char *p = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) {
            perror("mmap");
            exit(3);
        }
        memset(p, 1, 1 << 20); // SITE:oom
    }
}

static void reclaim(const char *file, long mb) {
    static char buf[1 << 20];
    memset(buf, 7, sizeof buf);
    int fd = open(file, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) {
        perror(file);
        exit(2);
    }
    for (long i = 0; i < mb; i++) {
        if (write(fd, buf, sizeof buf) != (ssize_t)sizeof buf) {
            perror("write");
            exit(3);
        }
        if (i % 4 == 3) {
            // Clean and drop what was written, so that only reading fills the page cache.
            fdatasync(fd);
            posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        }
    }
    fdatasync(fd);
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    // Clean page cache beyond the group's limit: reclaimed by the group's own allocations.
    for (int pass = 0; pass < 2; pass++) {
        lseek(fd, 0, SEEK_SET);
        while (read(fd, buf, sizeof buf) > 0) { // SITE:reclaim
        }
    }
    close(fd);
    unlink(file);
}

static void map_file(const char *file) {
    int fd = open(file, O_RDONLY);
    if (fd < 0) {
        perror(file);
        exit(2);
    }
    char *p = mmap(NULL, 3 * 4096, PROT_READ, MAP_SHARED, fd, 4096); // SITE:mmap
    // The descriptor is closed at once: the file must still be named.
    close(fd);
    if (p == MAP_FAILED) {
        perror("mmap");
        exit(3);
    }
    volatile char c = p[0];
    (void)c;
    munmap(p, 3 * 4096);
}

static void __attribute__((noinline)) grow_break(void) {
    char *p = sbrk(1 << 20); // SITE:brk
    if (p == (void *)-1) {
        perror("sbrk");
        exit(3);
    }
    memset(p, 1, 1 << 20);
}

static void shm(long key, long size) {
    int id = shmget((key_t)key, (size_t)size, IPC_CREAT | 0600); // SITE:shmget
    if (id < 0) {
        perror("shmget");
        exit(3);
    }
    char *p = shmat(id, NULL, 0);
    if (p == (void *)-1) {
        perror("shmat");
        exit(3);
    }
    p[0] = 1;
    shmdt(p);
    shmctl(id, IPC_RMID, NULL);
    printf("shmid %d\n", id);
}

static void hugetlb(long n) {
    char *p = mmap(NULL, n * HUGE, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
    if (p == MAP_FAILED) {
        perror("mmap MAP_HUGETLB");
        exit(3);
    }
    for (long i = 0; i < n; i++)
        p[i * HUGE] = 1; // SITE:hugetlb
    printf("hugetlb %ld\n", n);
    fflush(stdout);
    // Alive a little longer: fltrace reads the mappings of its faults from /proc.
    usleep(500 * 1000);
}

static int is_thp(uintptr_t addr) {
    int pm = open("/proc/self/pagemap", O_RDONLY);
    int kf = open("/proc/kpageflags", O_RDONLY);
    uint64_t entry = 0, flags = 0;
    int thp = 0;
    if (pm >= 0 && kf >= 0 && pread(pm, &entry, 8, (addr / 4096) * 8) == 8 &&
        (entry >> 63) & 1) {
        uint64_t pfn = entry & ((1ULL << 55) - 1);
        if (pread(kf, &flags, 8, pfn * 8) == 8)
            thp = (flags >> 22) & 1;
    }
    close(pm);
    close(kf);
    return thp;
}

static void thp(long n) {
    char *raw = mmap(NULL, (n + 1) * HUGE, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) {
        perror("mmap");
        exit(3);
    }
    char *p = (char *)(((uintptr_t)raw + HUGE - 1) & ~(HUGE - 1));
    if (madvise(p, n * HUGE, MADV_HUGEPAGE) != 0) {
        perror("madvise");
        exit(3);
    }
    long huge = 0;
    for (long i = 0; i < n; i++) {
        p[i * HUGE] = 1; // SITE:thp
        huge += is_thp((uintptr_t)(p + i * HUGE));
    }
    printf("thp %ld\n", huge);
    fflush(stdout);
    usleep(500 * 1000);
}

int main(int argc, char **argv) {
    if (argc >= 3 && !strcmp(argv[1], "oom")) {
        join(argv[2]);
        oom();
    } else if (argc >= 5 && !strcmp(argv[1], "reclaim")) {
        join(argv[2]);
        reclaim(argv[3], atol(argv[4]));
    } else if (argc >= 3 && !strcmp(argv[1], "mmap")) {
        map_file(argv[2]);
    } else if (argc >= 2 && !strcmp(argv[1], "brk")) {
        grow_break();
    } else if (argc >= 4 && !strcmp(argv[1], "shm")) {
        shm(strtol(argv[2], NULL, 0), atol(argv[3]));
    } else if (argc >= 3 && !strcmp(argv[1], "hugetlb")) {
        hugetlb(atol(argv[2]));
    } else if (argc >= 3 && !strcmp(argv[1], "thp")) {
        thp(atol(argv[2]));
    } else {
        fprintf(stderr, "usage: sysmem oom|reclaim|mmap|brk|shm|hugetlb|thp ...\n");
        return 1;
    }
    return 0;
}
