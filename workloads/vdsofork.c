// Workload of the vDSO test: gettimeofday runs in the kernel's vDSO (code without a file,
// whose frames keep no frame-pointer chain), and its first call in a process faults on the
// vDSO's data page:
//   vdsofork PAUSE_MS   main -> now -> gettimeofday faults in the parent, then in a forked
//                       child (the line marked vdso_call both times); the child pauses
//                       PAUSE_MS before it exits
#include <stdlib.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

// The empty asm after the call keeps it from becoming a jump (a tail call leaves no frame).
__attribute__((noinline)) static long now(void) {
    struct timeval tv;
    gettimeofday(&tv, 0); /* SITE:vdso_call */
    __asm__ volatile("" ::: "memory");
    return tv.tv_usec;
}

int main(int argc, char **argv) {
    long pause_ms = argc > 1 ? atol(argv[1]) : 0;
    long t = now();
    pid_t child = fork();
    if (child == 0) {
        t += now();
        usleep((useconds_t)pause_ms * 1000);
        return (int)(t & 1);
    }
    waitpid(child, 0, 0);
    return 0;
}
