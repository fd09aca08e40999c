// Two faulting functions of one shared library, for naming stripped code: built with -DLIB
// as a library (the tests strip it and give it a long name, so that its frames read
// `libname+0xADDR` and a narrow table must keep the addresses apart), else as the program
// that loads it and calls both (site_a touches PAGES pages, site_b twice as many).
// usage: twosites LIBRARY PAGES
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#define PAGE 4096

static char *region(size_t pages) {
    void *p = mmap(NULL, pages * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        exit(1);
    }
    return p;
}

#ifdef LIB
// Static, so that once stripped nothing names them (the dynamic symbols keep only
// run_sites): their frames are the library's name and the function's address.
static __attribute__((noipa)) void site_a(size_t pages) {
    char *p = region(pages);
    for (size_t i = 0; i < pages; i++)
        p[i * PAGE] = 1; /* SITE:site_a */
}

static __attribute__((noipa)) void site_b(size_t pages) {
    char *p = region(pages);
    for (size_t i = 0; i < pages; i++)
        p[i * PAGE] = 2; /* SITE:site_b */
}

void run_sites(size_t pages) {
    site_a(pages);
    site_b(pages * 2);
}
#else
#include <dlfcn.h>

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: twosites LIBRARY PAGES\n");
        return 2;
    }
    void *lib = dlopen(argv[1], RTLD_NOW);
    void (*run)(size_t) = lib ? (void (*)(size_t))dlsym(lib, "run_sites") : NULL;
    if (!run) {
        fprintf(stderr, "twosites: %s\n", dlerror());
        return 2;
    }
    run(strtoul(argv[2], NULL, 0));
    return 0;
}
#endif
