// Plants in its own allocation log what a hostile program could: the header says the tracer
// stopped (as on a full file system) and that 1 GiB of chunks were handed out, over a file
// made sparse to that length. The recorder copies a stopped log into memory before removing
// it; only the log's data should be copied, not the length the program claims.
// usage: hostilelog [GiB]
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
    uint64_t size = (uint64_t)(argc > 1 ? strtoul(argv[1], 0, 10) : 1) << 30;
    free(malloc(100));
    // The log is mapped shared: its path is in our maps, `.../log-<pid>.0`.
    char suffix[64], line[8192], path[4096] = "";
    snprintf(suffix, sizeof suffix, "/log-%d.0\n", getpid());
    FILE *maps = fopen("/proc/self/maps", "r");
    if (!maps) return 2;
    while (fgets(line, sizeof line, maps)) {
        size_t len = strlen(line), tail = strlen(suffix);
        char *name = strchr(line, '/');
        if (name && len >= tail && strcmp(line + len - tail, suffix) == 0) {
            line[len - 1] = 0;
            snprintf(path, sizeof path, "%s", name);
            break;
        }
    }
    fclose(maps);
    if (!path[0]) return 3;
    int fd = open(path, O_RDWR);
    if (fd < 0 || ftruncate(fd, (off_t)size) != 0) return 4;
    uint64_t stopped_ns = 1;
    if (pwrite(fd, &size, 8, 16) != 8 || pwrite(fd, &stopped_ns, 8, 32) != 8) return 5;
    printf("planted %s\n", path);
    return 0;
}
