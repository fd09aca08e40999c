// Mapping churn: maps one page, touches it and unmaps it, <cycles> times (3 events a cycle:
// the mapping, its first-touch fault, the unmapping). usage: churn <cycles>
// Every touch is one fault at the line marked SITE:touch, or more: under load the kernel
// sometimes takes a touch's fault twice (2,000,002 faults for 2,000,000 touches, untraced).
// Prints the cycles done and the loop's page faults as the kernel counted them (the
// page-faults perf event of this thread; -1 if it cannot be opened).
#include <linux/perf_event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

static void __attribute__((noinline)) touch(volatile char *page) {
    page[0] = 1; /* SITE:touch */
}

int main(int argc, char **argv) {
    long cycles = argc > 1 ? strtol(argv[1], 0, 10) : 200000;
    // A cycle without the touch first, so that the loop's only faults are the touches: the
    // C library's mmap and munmap code is mapped in by then.
    munmap(mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0), 4096);
    struct perf_event_attr attr;
    memset(&attr, 0, sizeof attr);
    attr.type = PERF_TYPE_SOFTWARE;
    attr.size = sizeof attr;
    attr.config = PERF_COUNT_SW_PAGE_FAULTS;
    int counter = (int)syscall(SYS_perf_event_open, &attr, 0, -1, -1, 0);
    for (long i = 0; i < cycles; i++) {
        char *page = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (page == MAP_FAILED) {
            perror("mmap");
            return 1;
        }
        touch(page);
        if (munmap(page, 4096) != 0) {
            perror("munmap");
            return 1;
        }
    }
    long long faults = -1;
    // Read through syscall(), whose code the loop's start mapped in: read()'s first call
    // could fault in the C library and count.
    if (counter < 0 || syscall(SYS_read, counter, &faults, sizeof faults) != sizeof faults)
        faults = -1;
    printf("cycles %ld, %lld page faults in the loop\n", cycles, faults);
    return 0;
}
