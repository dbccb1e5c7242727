/* bench_large_reuse — a few large buffers replaced at random, each one
 * zero-filled when it is made, as `std::make_unique<char[]>(n)` (or
 * `new char[n]()`) does: the memory is reused soon and in other sizes.
 *
 *   bench_large_reuse [replacements=500] [live=20] [min_mib=5] [max_mib=25]
 *                     [zero=memset] [seed=42]
 *
 * A table of `live` buffers of random size in [min_mib, max_mib] MiB (byte
 * granularity) is filled first (not timed).  Then each replacement picks a
 * buffer at random, checks it, frees it, and makes a new one of a new random
 * size, zero-filled:
 *   zero=memset  malloc + memset(0), what C++ value-initialisation compiles to
 *   zero=calloc  calloc (the allocator may know the memory is already zero)
 * and writes an 8-byte cookie at its start and a byte at its end (the
 * program uses its buffer).  The check before the free reads the cookie, the
 * end byte and one byte in every 64 KiB, which must still be zero.
 *
 * Time covers the replacements only; ops = mallocs + frees (2 per
 * replacement).  The single stdout line is
 *   Throughput = N ops/s (replacements=..., live=..., min_mib=..., max_mib=...,
 *                         zero=..., seed=..., peak_rss_mib=..., time=T s,
 *                         minflt=..., majflt=...)
 * with the page faults of the timed region.  Exit status: 0 ok, 1
 * allocation failure or detected corruption, 2 bad arguments. */

#define PROG          "bench_large_reuse"
#include "bench_common.h"

#define LIVE_LIMIT    4096u
#define MIB_LIMIT     4096u
#define PROBE_STRIDE  (64u << 10)

struct buf {
    unsigned char *p;
    size_t size;
    uint64_t cookie;
};

static int g_calloc;

/* Called through a volatile pointer: the compiler would otherwise fuse
 * malloc + memset(0) into calloc, which a C++ `new char[n]()` never becomes
 * (operator new is not malloc). */
static void *(*volatile g_memset)(void *, int, size_t) = memset;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: " PROG " [replacements=500] [live=20] [min_mib=5] [max_mib=25]\n"
            "                         [zero=memset] [seed=42]\n"
            "  replacements  buffers freed and made anew (positive integer)\n"
            "  live          buffers alive at once, 1..%u\n"
            "  min_mib, max_mib  buffer sizes in MiB, 1 <= min <= max <= %u\n"
            "  zero          memset: malloc + memset(0); calloc: calloc\n"
            "  seed          PRNG seed (non-negative integer)\n",
            LIVE_LIMIT, MIB_LIMIT);
}

static void make(struct buf *b, size_t size, uint64_t cookie)
{
    unsigned char *p;
    if (g_calloc) {
        p = calloc(1, size);
    } else {
        p = malloc(size);
        if (p != NULL)
            g_memset(p, 0, size);
    }
    if (p == NULL) {
        fprintf(stderr, PROG ": %s(%zu) failed\n", g_calloc ? "calloc" : "malloc", size);
        exit(1);
    }
    cookie ^= (uint64_t)(uintptr_t)p;
    memcpy(p, &cookie, sizeof cookie);
    p[size - 1] = (unsigned char)(cookie | 1u);
    b->p = p;
    b->size = size;
    b->cookie = cookie;
}

static void check(const struct buf *b)
{
    uint64_t c;
    memcpy(&c, b->p, sizeof c);
    int ok = c == b->cookie && b->p[b->size - 1] == (unsigned char)(b->cookie | 1u);
    for (size_t i = PROBE_STRIDE; ok && i < b->size - 1; i += PROBE_STRIDE)
        ok = b->p[i] == 0;
    if (!ok) {
        fprintf(stderr, PROG ": corruption in buffer %p of %zu bytes\n", (void *)b->p, b->size);
        exit(1);
    }
}

int main(int argc, char **argv)
{
    uint64_t reps = 500, live = 20, min_mib = 5, max_mib = 25, seed = 42;

    bench_check_args(argc, argv, 6);
    arg_or_die(argc, argv, 1, "replacements", 1, UINT64_MAX / 2, &reps);
    arg_or_die(argc, argv, 2, "live", 1, LIVE_LIMIT, &live);
    arg_or_die(argc, argv, 3, "min_mib", 1, MIB_LIMIT, &min_mib);
    arg_or_die(argc, argv, 4, "max_mib", 1, MIB_LIMIT, &max_mib);
    if (argc > 5) {
        if (strcmp(argv[5], "calloc") == 0) {
            g_calloc = 1;
        } else if (strcmp(argv[5], "memset") != 0) {
            fprintf(stderr, PROG ": invalid zero '%s' (expected memset or calloc)\n", argv[5]);
            usage(stderr);
            return 2;
        }
    }
    arg_or_die(argc, argv, 6, "seed", 0, UINT64_MAX, &seed);
    range_or_die("min_mib", min_mib, "max_mib", max_mib);

    const uint64_t lo = min_mib << 20, span = ((max_mib - min_mib) << 20) + 1;
    struct buf *tab = calloc((size_t)live, sizeof *tab);
    if (tab == NULL) {
        fprintf(stderr, PROG ": out of memory\n");
        return 1;
    }
    uint64_t rng = seed;
    for (uint64_t i = 0; i < live; i++) {
        uint64_t r = rng_next(&rng);
        make(&tab[i], (size_t)(lo + below(r, span)), r);
    }

    struct bench_faults f0 = faults_now();
    double t0 = now_sec();
    for (uint64_t k = 0; k < reps; k++) {
        uint64_t r = rng_next(&rng);
        struct buf *b = &tab[below(r, live)];
        check(b);
        free(b->p);
        r = rng_next(&rng);
        make(b, (size_t)(lo + below(r, span)), r);
    }
    double secs = now_sec() - t0;
    struct bench_faults df = faults_since(f0);

    for (uint64_t i = 0; i < live; i++) {
        check(&tab[i]);
        free(tab[i].p);
    }
    free(tab);

    if (secs < 1e-9)
        secs = 1e-9;
    printf("Throughput = %" PRIu64 " ops/s (replacements=%" PRIu64 ", live=%" PRIu64
           ", min_mib=%" PRIu64 ", max_mib=%" PRIu64 ", zero=%s, seed=%" PRIu64
           ", peak_rss_mib=%.1f, time=%.3f s" FAULTS_FMT ")\n",
           (uint64_t)((double)(2 * reps) / secs), reps, live, min_mib, max_mib,
           g_calloc ? "calloc" : "memset", seed, (double)peak_rss_kib() / 1024.0, secs,
           FAULTS_ARGS(df));
    return 0;
}
