// System calls on far memory: buffers larger than local memory handed to the kernel whole,
// each call once, every byte checked. Run it under `fltrace record -L=<less than MiB>`:
// while a call runs, the pages it has passed are evicted to make room for the next ones.
//
// usage: syscallmem <MiB> <file>
//   1. fills A (MiB), write(2)s it to <file> in one call, pread(2)s it back into C in one
//      call and checks C;
//   2. forks a child (no exec) that recv(2)s from a socket pair into its own buffer B until it
//      has MiB, and checks B, while the parent send(2)s A in one call;
//   3. forks a child that readv(2)s from a pipe into B (two halves) until it has MiB, and
//      checks B, while the parent writev(2)s A in one call (two halves);
//   4. the C library's own calls with the program's buffers and its own: fwrite(3) of A to
//      <file> and fread(3) into C, fgets(3) over a file of lines and readdir(3) over /proc,
//      with A touched whole between lines (so that stdio's buffer is evicted if it can be);
//   5. a bad address still fails with EFAULT.
// Exits 0 only if everything arrived; prints what went wrong otherwise.
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
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

// Reads until `bytes` arrived (or EOF): pipes and sockets give what they have.
static int receive_all(int fd, char *buf, size_t bytes, int use_recv) {
    size_t got = 0;
    while (got < bytes) {
        ssize_t n = use_recv ? recv(fd, buf + got, bytes - got, 0) : read(fd, buf + got, bytes - got);
        if (n <= 0) {
            fprintf(stderr, "child: %s after %zu bytes: %s\n", use_recv ? "recv" : "read", got, n < 0 ? strerror(errno) : "EOF");
            return 0;
        }
        got += (size_t)n;
    }
    return 1;
}

static int child_checks(int fd, size_t bytes, int use_recv, const char *what) {
    uint64_t *b = malloc(bytes);
    if (!b)
        return 0;
    memset(b, 0, bytes); // the child's own pages, first touched here
    int ok;
    if (use_recv)
        ok = receive_all(fd, (char *)b, bytes, 1);
    else {
        // Two halves through readv, until all arrived.
        size_t got = 0;
        ok = 1;
        while (ok && got < bytes) {
            size_t half = bytes / 2;
            struct iovec iov[2];
            int n = 0;
            if (got < half) {
                iov[n++] = (struct iovec){(char *)b + got, half - got};
                iov[n++] = (struct iovec){(char *)b + half, bytes - half};
            } else {
                iov[n++] = (struct iovec){(char *)b + got, bytes - got};
            }
            ssize_t r = readv(fd, iov, n);
            if (r <= 0) {
                fprintf(stderr, "child: readv after %zu bytes: %s\n", got, r < 0 ? strerror(errno) : "EOF");
                ok = 0;
            } else
                got += (size_t)r;
        }
    }
    return ok && check(b, bytes / 8, 1, what);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: syscallmem <MiB> <file>\n");
        return 2;
    }
    size_t bytes = strtoul(argv[1], 0, 10) << 20;
    const char *path = argv[2];
    uint64_t *a = malloc(bytes), *c = malloc(bytes);
    if (!a || !c)
        return 2;
    fill(a, bytes / 8, 1);

    // 1. write and pread, one call each.
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0)
        return 2;
    ssize_t n = write(fd, a, bytes);
    if (n != (ssize_t)bytes) {
        fprintf(stderr, "write: %zd of %zu bytes: %s\n", n, bytes, strerror(errno));
        return 3;
    }
    memset(c, 0, bytes);
    n = pread(fd, c, bytes, 0);
    if (n != (ssize_t)bytes) {
        fprintf(stderr, "pread: %zd of %zu bytes: %s\n", n, bytes, strerror(errno));
        return 3;
    }
    if (!check(c, bytes / 8, 1, "pread"))
        return 3;

    // 2. send to a child over a socket pair, one call.
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
        return 2;
    pid_t child = fork();
    if (child == 0) {
        close(sv[0]);
        _exit(child_checks(sv[1], bytes, 1, "recv") ? 0 : 3);
    }
    close(sv[1]);
    n = send(sv[0], a, bytes, 0);
    if (n != (ssize_t)bytes) {
        fprintf(stderr, "send: %zd of %zu bytes: %s\n", n, bytes, strerror(errno));
        return 3;
    }
    close(sv[0]);
    int status;
    if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "the recv child failed\n");
        return 3;
    }

    // 3. writev to a child through a pipe, one call.
    int p[2];
    if (pipe(p) != 0)
        return 2;
    child = fork();
    if (child == 0) {
        close(p[1]);
        _exit(child_checks(p[0], bytes, 0, "readv") ? 0 : 3);
    }
    close(p[0]);
    struct iovec halves[2] = {{a, bytes / 2}, {(char *)a + bytes / 2, bytes - bytes / 2}};
    n = writev(p[1], halves, 2);
    if (n != (ssize_t)bytes) {
        fprintf(stderr, "writev: %zd of %zu bytes: %s\n", n, bytes, strerror(errno));
        return 3;
    }
    close(p[1]);
    if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "the readv child failed\n");
        return 3;
    }

    // 4. stdio: the program's buffers handed to fwrite and fread, the C library's own buffers
    // for lines and directory entries.
    FILE *f = fopen(path, "w+");
    if (!f || fwrite(a, 1, bytes, f) != bytes || fflush(f) != 0) {
        fprintf(stderr, "fwrite: %s\n", strerror(errno));
        return 3;
    }
    rewind(f);
    memset(c, 0, bytes);
    if (fread(c, 1, bytes, f) != bytes || !check(c, bytes / 8, 1, "fread")) {
        fprintf(stderr, "fread: %s\n", ferror(f) ? "error" : "short");
        return 3;
    }
    fclose(f);
    f = fopen(path, "w");
    for (int i = 0; i < 2000; i++)
        fprintf(f, "line %d\n", i);
    fclose(f);
    f = fopen(path, "r");
    char line[64];
    int lines = 0;
    volatile char *touch = (volatile char *)a;
    while (fgets(line, sizeof line, f)) {
        if (atoi(line + 5) != lines) {
            fprintf(stderr, "fgets: line %d reads %s", lines, line);
            return 3;
        }
        lines++;
        if (lines % 400 == 0)
            for (size_t off = 0; off < bytes; off += PAGE)
                touch[off]++;
    }
    if (ferror(f) || lines != 2000) {
        fprintf(stderr, "fgets: %d lines, error %d\n", lines, ferror(f));
        return 3;
    }
    fclose(f);
    int entries = 0, rounds = 0;
    for (; rounds < 3; rounds++) {
        DIR *d = opendir("/proc/self/task");
        if (!d)
            return 2;
        errno = 0;
        struct dirent *e;
        while ((e = readdir(d))) {
            entries++;
            for (size_t off = 0; off < bytes; off += PAGE)
                touch[off]++;
        }
        if (errno) {
            fprintf(stderr, "readdir: %s\n", strerror(errno));
            return 3;
        }
        closedir(d);
    }
    if (entries < 9) {
        fprintf(stderr, "readdir: %d entries\n", entries);
        return 3;
    }
    unlink(path);

    // 5. A bad address is still one.
    errno = 0;
    if (write(fd, (void *)16, 8) != -1 || errno != EFAULT) {
        fprintf(stderr, "write from a bad address: errno %d\n", errno);
        return 3;
    }
    printf("ok\n");
    return 0;
}
