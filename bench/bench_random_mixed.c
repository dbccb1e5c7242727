/* bench_random_mixed — single-threaded random malloc/free churn over small sizes.
 *
 *   bench_random_mixed [cycles=10000000] [ws=8192] [seed=42]
 *
 * A table of `ws` slots starts empty.  Every step draws one 64-bit random
 * number, uses its upper half to pick a slot and its lower half to pick a size
 * in 16..1040 bytes.  An occupied slot is verified and freed; an empty one is
 * filled with a fresh malloc whose first 8 bytes and last byte are written.
 * Each step is exactly one malloc or one free, so ops = cycles.
 *
 * The single result line on stdout is
 *   Throughput = N ops/s (cycles=..., ws=..., seed=..., time=T s, minflt=..., majflt=...)
 * with the page faults of the timed region.
 * Diagnostics go to stderr.  Exit status: 0 ok, 1 allocation failure or
 * detected heap corruption, 2 bad arguments. */

#define PROG     "bench_random_mixed"
#include "bench_common.h"

#define SZ_MIN   16u
#define SZ_MAX   1040u
#define SZ_SPAN  (SZ_MAX - SZ_MIN + 1u)
#define WS_LIMIT (1u << 28)

struct slot {
    unsigned char *p;
    uint32_t size;
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: " PROG " [cycles=10000000] [ws=8192] [seed=42]\n"
            "  cycles  number of malloc/free operations (positive integer)\n"
            "  ws      number of table slots, 1..%u\n"
            "  seed    PRNG seed (non-negative integer)\n",
            WS_LIMIT);
}

/* Value stored in a block's first 8 bytes; depends on the address and the
 * slot, so two live slots sharing memory are noticed. */
static inline uint64_t cookie_of(const void *p, uint32_t idx)
{
    return ((uint64_t)(uintptr_t)p ^ 0xA5C3F00DD15EA5E5ull) + (uint64_t)idx * 0x9E3779B97F4A7C15ull;
}

static inline unsigned char tail_of(uint64_t cookie, uint32_t size)
{
    return (unsigned char)((cookie >> 13) ^ size ^ 0x5Au);
}

static void fill(unsigned char *p, uint32_t size, uint32_t idx)
{
    uint64_t c = cookie_of(p, idx);
    memcpy(p, &c, sizeof c);
    p[size - 1] = tail_of(c, size);
}

static void check(const struct slot *s, uint32_t idx, uint64_t step)
{
    uint64_t want = cookie_of(s->p, idx), got;
    memcpy(&got, s->p, sizeof got);
    unsigned char tw = tail_of(want, s->size), tg = s->p[s->size - 1];
    if (got != want || tg != tw) {
        fprintf(stderr,
                PROG ": heap corruption at step %" PRIu64 ", slot %" PRIu32
                " (ptr %p, size %" PRIu32 "): head %016" PRIx64 " expected %016" PRIx64
                ", tail 0x%02x expected 0x%02x\n",
                step, idx, (void *)s->p, s->size, got, want, tg, tw);
        exit(1);
    }
}

int main(int argc, char **argv)
{
    uint64_t cycles = 10000000, ws = 8192, seed = 42;

    bench_check_args(argc, argv, 3);
    arg_or_die(argc, argv, 1, "cycles", 1, UINT64_MAX, &cycles);
    arg_or_die(argc, argv, 2, "ws", 1, WS_LIMIT, &ws);
    arg_or_die(argc, argv, 3, "seed", 0, UINT64_MAX, &seed);

    struct slot *tab = calloc((size_t)ws, sizeof *tab);
    if (tab == NULL) {
        fprintf(stderr, PROG ": cannot allocate table of %" PRIu64 " slots\n", ws);
        return 1;
    }

    uint64_t rng = seed;
    const uint64_t nslots = ws;

    struct bench_faults f0 = faults_now();
    double t0 = now_sec();
    for (uint64_t i = 0; i < cycles; i++) {
        uint64_t r = rng_next(&rng);
        uint32_t idx = (uint32_t)below(r, nslots);
        struct slot *s = &tab[idx];
        if (s->p != NULL) {
            check(s, idx, i);
            free(s->p);
            s->p = NULL;
        } else {
            uint32_t size = SZ_MIN + (uint32_t)(((r & 0xFFFFFFFFull) * SZ_SPAN) >> 32);
            unsigned char *p = malloc(size);
            if (p == NULL) {
                fprintf(stderr, PROG ": malloc(%" PRIu32 ") failed at step %" PRIu64 "\n",
                        size, i);
                return 1;
            }
            fill(p, size, idx);
            s->p = p;
            s->size = size;
        }
    }
    double t1 = now_sec();
    struct bench_faults df = faults_since(f0);

    for (uint64_t i = 0; i < ws; i++) {
        if (tab[i].p != NULL) {
            check(&tab[i], (uint32_t)i, cycles);
            free(tab[i].p);
        }
    }
    free(tab);

    double secs = t1 - t0;
    if (secs < 1e-9)
        secs = 1e-9;
    uint64_t tput = (uint64_t)((double)cycles / secs);
    printf("Throughput = %" PRIu64 " ops/s (cycles=%" PRIu64 ", ws=%" PRIu64
           ", seed=%" PRIu64 ", time=%.6f s" FAULTS_FMT ")\n",
           tput, cycles, ws, seed, secs, FAULTS_ARGS(df));
    return 0;
}
