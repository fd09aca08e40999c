// A JIT in miniature: writes one function's machine code into an anonymous executable
// mapping, names it as JITs do, and calls it to touch N fresh pages: every fault of the run is
// in that function, which no ELF file holds.
//
// By default it names the code in /tmp/perf-PID.map (perf's convention). With --jitdump DIR it
// writes DIR/jit-PID.dump instead (the jitdump format, mapped executable as a marker as JITs
// do): a debug record giving the function's lines (jitmap.js:10 at offset 0, :11 at the store
// that faults, :12 after it), the function loaded at one address, then moved to another, where
// it runs. --linger MS sleeps before exiting, so that a recorder sees the process alive.
// usage: jitmap <pages> [--jitdump DIR] [--linger MS]
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define PAGE 4096

// x86-64: three nops, then for (; rsi; rsi--, rdi += 4096) *(char *)rdi = 1; return;
static const unsigned char TOUCH_PAGES[] = {
    0x90, 0x90, 0x90,                         // nop x3: the store is at offset 3
    0xc6, 0x07, 0x01,                         // mov byte [rdi], 1
    0x48, 0x81, 0xc7, 0x00, 0x10, 0x00, 0x00, // add rdi, 4096
    0x48, 0xff, 0xce,                         // dec rsi
    0x75, 0xf1,                               // jnz back to the mov
    0xc3,                                     // ret
};
#define STORE_OFFSET 3
#define AFTER_STORE 6
#define CODE_INDEX 7

static void put(FILE *f, const void *bytes, size_t len) {
    if (fwrite(bytes, 1, len, f) != len) {
        perror("jitdump");
        exit(2);
    }
}

static void put32(FILE *f, uint32_t v) { put(f, &v, 4); }
static void put64(FILE *f, uint64_t v) { put(f, &v, 8); }

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void record_header(FILE *f, uint32_t kind, uint32_t size) {
    put32(f, kind);
    put32(f, size);
    put64(f, now_ns());
}

// Writes DIR/jit-PID.dump naming `from` (with lines), then its move to `to`.
static void write_jitdump(const char *dir, unsigned char *from, unsigned char *to) {
    char name[4096];
    snprintf(name, sizeof name, "%s/jit-%d.dump", dir, (int)getpid());
    FILE *f = fopen(name, "w+");
    if (!f) {
        perror(name);
        exit(2);
    }
    put32(f, 0x4A695444); // "JiTD" in this machine's byte order
    put32(f, 1);          // version
    put32(f, 40);         // header size
    put32(f, 62);         // EM_X86_64
    put32(f, 0);          // reserved
    put32(f, (uint32_t)getpid());
    put64(f, now_ns());
    put64(f, 0); // flags
    fflush(f);
    // The marker perf looks for: the file mapped executable.
    if (mmap(NULL, PAGE, PROT_READ | PROT_EXEC, MAP_PRIVATE, fileno(f), 0) == MAP_FAILED) {
        perror("mmap jitdump");
        exit(2);
    }

    static const char FILE_NAME[] = "jitmap.js";
    // code_addr, nr_entry; three entries: (addr, line, discrim, name); \xff: the same file.
    uint32_t debug_size = 16 + 16 + (16 + sizeof FILE_NAME) + (16 + 2) + (16 + sizeof FILE_NAME);
    record_header(f, 2, debug_size);
    put64(f, (uint64_t)(uintptr_t)from);
    put64(f, 3);
    put64(f, (uint64_t)(uintptr_t)from);
    put32(f, 10);
    put32(f, 0);
    put(f, FILE_NAME, sizeof FILE_NAME);
    put64(f, (uint64_t)(uintptr_t)(from + STORE_OFFSET));
    put32(f, 11);
    put32(f, 0);
    put(f, "\xff", 2);
    put64(f, (uint64_t)(uintptr_t)(from + AFTER_STORE));
    put32(f, 12);
    put32(f, 0);
    put(f, FILE_NAME, sizeof FILE_NAME);

    static const char FUNCTION[] = "jit_touch_pages";
    record_header(f, 0, 16 + 40 + sizeof FUNCTION + sizeof TOUCH_PAGES);
    put32(f, (uint32_t)getpid());
    put32(f, (uint32_t)getpid());
    put64(f, (uint64_t)(uintptr_t)from);
    put64(f, (uint64_t)(uintptr_t)from);
    put64(f, sizeof TOUCH_PAGES);
    put64(f, CODE_INDEX);
    put(f, FUNCTION, sizeof FUNCTION);
    put(f, TOUCH_PAGES, sizeof TOUCH_PAGES);

    record_header(f, 1, 16 + 48);
    put32(f, (uint32_t)getpid());
    put32(f, (uint32_t)getpid());
    put64(f, (uint64_t)(uintptr_t)to);
    put64(f, (uint64_t)(uintptr_t)from);
    put64(f, (uint64_t)(uintptr_t)to);
    put64(f, sizeof TOUCH_PAGES);
    put64(f, CODE_INDEX);
    fclose(f);
}

int main(int argc, char **argv) {
    size_t pages = argc > 1 ? strtoul(argv[1], NULL, 10) : 100;
    const char *jitdump_dir = NULL;
    long linger_ms = 0;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--jitdump")) {
            jitdump_dir = argv[i + 1];
        } else if (!strcmp(argv[i], "--linger")) {
            linger_ms = strtol(argv[i + 1], NULL, 10);
        }
    }
    unsigned char *code = mmap(NULL, PAGE, PROT_READ | PROT_WRITE | PROT_EXEC,
                               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    char *data = mmap(NULL, pages * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                      -1, 0);
    if (code == MAP_FAILED || data == MAP_FAILED || pages == 0) {
        perror("mmap");
        return 2;
    }
    // Somewhere inside the page, as a JIT's code heap puts functions.
    unsigned char *entry = code + 0x100;
    memcpy(entry, TOUCH_PAGES, sizeof TOUCH_PAGES);
    if (jitdump_dir) {
        // Loaded at `entry`, then moved (as a moving code collector does) to where it runs.
        unsigned char *moved = code + 0x800;
        write_jitdump(jitdump_dir, entry, moved);
        memcpy(moved, TOUCH_PAGES, sizeof TOUCH_PAGES);
        memset(entry, 0xcc, sizeof TOUCH_PAGES);
        entry = moved;
    } else {
        char name[64];
        snprintf(name, sizeof name, "/tmp/perf-%d.map", (int)getpid());
        FILE *map = fopen(name, "w");
        if (!map) {
            perror(name);
            return 2;
        }
        fprintf(map, "%lx %zx jit_touch_pages\n", (unsigned long)entry, sizeof TOUCH_PAGES);
        fclose(map);
    }
    void (*touch)(char *, size_t) = (void (*)(char *, size_t))entry;
    touch(data, pages);
    if (linger_ms > 0) {
        struct timespec pause = {linger_ms / 1000, (linger_ms % 1000) * 1000000};
        nanosleep(&pause, NULL);
    }
    return 0;
}
