// Runs a command and prints its peak resident memory from wait4's rusage, on stderr, as
// "peak_rss_kb N"; exits with the command's status (128 + signal if killed).
//
// A fork of this small process, not of the test: a child vforked or forked from a large test
// process is charged that process's memory (the kernel keeps the peak across exec).
//
// usage: peakrss COMMAND [ARGS...]
#include <stdio.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: peakrss COMMAND [ARGS...]\n");
        return 2;
    }
    pid_t pid = fork();
    if (pid == 0) {
        execvp(argv[1], argv + 1);
        _exit(127);
    }
    int status = 0;
    struct rusage usage;
    if (pid < 0 || wait4(pid, &status, 0, &usage) != pid)
        return 126;
    fprintf(stderr, "peak_rss_kb %ld\n", usage.ru_maxrss);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
