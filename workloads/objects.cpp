// C++ workload for allocation tracing: new and delete reach malloc and free through
// libstdc++, and the sites reported are these lines, not the library's.
//
// usage: objects N   N nodes of a list made with new (48 bytes each), all deleted but one;
//                    an array of N ints with new[] kept; a vector grown to N ints
#include <cstdio>
#include <cstdlib>
#include <vector>

struct Node {
    Node *next;
    long payload[5];
};

static Node *volatile kept;

__attribute__((noinline)) static Node *make_list(long n) {
    Node *head = nullptr;
    for (long i = 0; i < n; i++) {
        Node *node = new Node(); /* SITE:cpp_new */
        node->next = head;
        head = node;
    }
    return head;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000;
    Node *head = make_list(n);
    kept = head; // the first node stays: one leak of 48 bytes
    for (Node *node = head->next; node;) {
        Node *next = node->next;
        delete node;
        node = next;
    }
    int *array = new int[n]; /* SITE:cpp_array */
    array[0] = 1;
    std::vector<int> grown;
    for (long i = 0; i < n; i++)
        grown.push_back((int)i); /* SITE:cpp_vector */
    std::printf("%d %zu\n", array[0], grown.size());
    return 0;
}
