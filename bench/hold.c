// Holds MiB of memory and streams over it for SECONDS, printing passes per second: the
// program whose working set fltrace wss measures in bench/wss.sh.
// usage: hold <MiB> <seconds>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int main(int argc, char **argv) {
    size_t bytes = strtoul(argv[1], 0, 10) << 20;
    int seconds = atoi(argv[2]);
    volatile char *p = malloc(bytes);
    memset((char *)p, 1, bytes);
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    long passes = 0;
    do {
        for (size_t i = 0; i < bytes; i += 4096)
            p[i]++;
        passes++;
        clock_gettime(CLOCK_MONOTONIC, &t);
    } while (t.tv_sec - t0.tv_sec < seconds);
    printf("%.3f\n", passes / (double)seconds);
    return 0;
}
