// Faults under a libc function whose code is split into a hot part and a `.cold` one: the
// first output allocates stdout's buffer from a fresh heap, inside puts. `fltrace script` must
// give the frame's offset from the symbol's start as nm has it (it gave the address itself).
#include <stdio.h>

int main(void) {
    puts("offsets");
    return 0;
}
