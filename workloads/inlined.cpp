// Faults in C++ member functions inlined into their caller (g++ -O2 -g): their frames must come
// out demangled with the class and namespace, at their own lines.
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <sys/mman.h>

namespace pages {

class Table {
  public:
    explicit Table(std::size_t pages) : pages_(pages) {
        void *p = mmap(nullptr, pages * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                       -1, 0);
        if (p == MAP_FAILED) {
            std::perror("mmap");
            std::exit(1);
        }
        data_ = static_cast<char *>(p);
    }

    // Inlined into `Loader::load`.
    __attribute__((always_inline)) inline void fill(char value) {
        for (std::size_t i = 0; i < pages_; i++)
            data_[i * 4096] = value; // SITE:fill
    }

  private:
    std::size_t pages_;
    char *data_;
};

struct Loader {
    __attribute__((noinline)) static void load(Table &table, char value) {
        table.fill(value); // SITE:load
    }
};

} // namespace pages

int main() {
    pages::Table table(25);
    pages::Loader::load(table, 7);
    return 0;
}
