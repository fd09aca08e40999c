// Workload of the lazy-binding test, linked with -Wl,-z,lazy against liblazybind.so
// (lazybindlib.c):
//   lazybind PAUSE_MS   main -> first_call calls lazy_touch for the first time, through its
//                       unbound PLT slot: the slot leads back into the PLT, whose first entry
//                       sends the call to the dynamic loader's resolver
//                       (`_dl_runtime_resolve_*` -> `_dl_fixup`), which runs lazy_touch's IFUNC
//                       resolver, which writes 16 pages at the line marked lazy_resolver; then
//                       pauses PAUSE_MS (the recorder reads the PLT's GOT slots meanwhile)
// lazy_touch's argument is a return address after an indirect call (a decoy): the resolver
// saves the argument registers at the bottom of its frame, where a search of the stack for
// its caller meets that word first.
#include <stdlib.h>
#include <unistd.h>

void lazy_touch(void *decoy);

static void *after_indirect;

__attribute__((noinline)) static void grab(void) {
    after_indirect = __builtin_return_address(0);
}

static void (*volatile grab_through)(void) = grab;

// The empty asm after each call keeps it from becoming a jump (a tail call leaves no frame).
__attribute__((noinline)) static void indirect(void) {
    grab_through();
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) static void first_call(void) {
    lazy_touch(after_indirect); /* SITE:lazy_call */
    __asm__ volatile("" ::: "memory");
}

int main(int argc, char **argv) {
    long pause_ms = argc > 1 ? atol(argv[1]) : 0;
    indirect();
    first_call();
    usleep((useconds_t)pause_ms * 1000);
    return 0;
}
