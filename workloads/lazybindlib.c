// Shared library of the lazy-binding workload (lazybind.c): `lazy_touch` is an IFUNC, so the
// dynamic loader runs its resolver while it binds the first call to it, inside
// `_dl_runtime_resolve_*` -> `_dl_fixup`; the resolver writes 16 pages of its own, each a
// first touch.
#define PAGES 16

__attribute__((aligned(4096))) static volatile char pages[PAGES][4096];

static void touched(void *decoy) { (void)decoy; }

static void (*resolve_lazy_touch(void))(void *) {
    for (int i = 0; i < PAGES; i++)
        pages[i][0] = (char)i; /* SITE:lazy_resolver */
    return touched;
}

void lazy_touch(void *decoy) __attribute__((ifunc("resolve_lazy_touch")));
