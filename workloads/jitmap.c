// A JIT in miniature: writes one function's machine code into an anonymous executable
// mapping, names it in /tmp/perf-PID.map as JITs do (perf's convention), and calls it to
// touch N fresh pages: every fault of the run is in that function, which no ELF file holds.
// usage: jitmap <pages>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define PAGE 4096

// x86-64: for (; rsi; rsi--, rdi += 4096) *(char *)rdi = 1; return;
static const unsigned char TOUCH_PAGES[] = {
    0xc6, 0x07, 0x01,                         // mov byte [rdi], 1
    0x48, 0x81, 0xc7, 0x00, 0x10, 0x00, 0x00, // add rdi, 4096
    0x48, 0xff, 0xce,                         // dec rsi
    0x75, 0xf1,                               // jnz back to the mov
    0xc3,                                     // ret
};

int main(int argc, char **argv) {
    size_t pages = argc > 1 ? strtoul(argv[1], NULL, 10) : 100;
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
    char name[64];
    snprintf(name, sizeof name, "/tmp/perf-%d.map", (int)getpid());
    FILE *map = fopen(name, "w");
    if (!map) {
        perror(name);
        return 2;
    }
    fprintf(map, "%lx %zx jit_touch_pages\n", (unsigned long)entry, sizeof TOUCH_PAGES);
    fclose(map);
    void (*touch)(char *, size_t) = (void (*)(char *, size_t))entry;
    touch(data, pages);
    return 0;
}
