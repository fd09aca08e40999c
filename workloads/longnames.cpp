// A C++ function with a long name (namespaces, a class template, its argument): tables must
// print it whole when the terminal is wide enough.
//
// Usage: longnames PAGES
//
// Lines are marked "SITE:<name>" for the tests.
#include <cstdlib>
#include <sys/mman.h>

namespace mesh {

struct subdivision_policy {};

template <typename Policy> struct refinement_pool {
    __attribute__((noinline)) static void touch_pages(volatile char *p,
                                                     std::size_t pages) {
        for (std::size_t i = 0; i < pages; i++)
            p[i * 4096] = 1; /* SITE:touch */
    }
};

} // namespace mesh

int main(int argc, char **argv) {
    std::size_t pages = argc > 1 ? std::strtoul(argv[1], 0, 10) : 10;
    char *p = static_cast<char *>(mmap(0, pages * 4096, PROT_READ | PROT_WRITE,
                                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    if (p == MAP_FAILED)
        return 1;
    using namespace mesh;
    refinement_pool<subdivision_policy>::touch_pages(
        p, pages);
    return 0;
}
