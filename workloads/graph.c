// Example workload in the spirit of the seed's GAPBS BFS: generate a random graph, build it in
// compressed sparse row form, and run breadth-first searches from a few roots. Edge generation
// and BFS initialisation run on all cores with OpenMP when built with -fopenmp.
// usage: graph <scale> <trials>   (2^scale vertices, 16 edges per vertex)
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct {
    int64_t n;
    int64_t *offsets; // n + 1
    int32_t *targets; // 2 * edges, both directions
} graph_t;

static uint64_t rng_state = 88172645463325252ull;

static uint64_t next_random(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static uint64_t mix(uint64_t x) { // splitmix64: the same graph whatever the thread count
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static int32_t *generate_edges(int64_t n, int64_t edges) {
    int32_t *list = malloc(sizeof(int32_t) * 2 * edges);
#pragma omp parallel for schedule(static)
    for (int64_t e = 0; e < edges; e++) {
        list[2 * e] = (int32_t)(mix(2 * e) % n); // first touch of the edge list
        list[2 * e + 1] = (int32_t)(mix(2 * e + 1) % n);
    }
    return list;
}

static graph_t build_csr(int64_t n, const int32_t *list, int64_t edges) {
    graph_t g = {n, calloc(n + 1, sizeof(int64_t)), malloc(sizeof(int32_t) * 2 * edges)};
    for (int64_t e = 0; e < 2 * edges; e++)
        g.offsets[list[e] + 1]++; // degree count
    for (int64_t v = 0; v < n; v++)
        g.offsets[v + 1] += g.offsets[v];
    int64_t *fill = malloc(sizeof(int64_t) * n);
    for (int64_t v = 0; v < n; v++)
        fill[v] = g.offsets[v];
    for (int64_t e = 0; e < edges; e++) {
        int32_t u = list[2 * e], v = list[2 * e + 1];
        g.targets[fill[u]++] = v; // scattered writes into the neighbour array
        g.targets[fill[v]++] = u;
    }
    free(fill);
    return g;
}

static int64_t bfs(const graph_t *g, int32_t root) {
    int32_t *parent = malloc(sizeof(int32_t) * g->n);
    int32_t *queue = malloc(sizeof(int32_t) * g->n);
#pragma omp parallel for schedule(static)
    for (int64_t v = 0; v < g->n; v++)
        parent[v] = -1;
    int64_t head = 0, tail = 0, visited = 1;
    parent[root] = root;
    queue[tail++] = root;
    while (head < tail) {
        int32_t u = queue[head++];
        for (int64_t i = g->offsets[u]; i < g->offsets[u + 1]; i++) {
            int32_t v = g->targets[i]; // reads of the neighbour array
            if (parent[v] < 0) {
                parent[v] = u;
                queue[tail++] = v;
                visited++;
            }
        }
    }
    free(parent);
    free(queue);
    return visited;
}

int main(int argc, char **argv) {
    int scale = argc > 1 ? atoi(argv[1]) : 18;
    int trials = argc > 2 ? atoi(argv[2]) : 2;
    int64_t n = (int64_t)1 << scale, edges = n * 16;
    int32_t *list = generate_edges(n, edges);
    graph_t g = build_csr(n, list, edges);
    free(list);
    for (int t = 0; t < trials; t++)
        printf("bfs %d: %ld vertices reached\n", t, (long)bfs(&g, (int32_t)(next_random() % n)));
    free(g.offsets);
    free(g.targets);
    return 0;
}
