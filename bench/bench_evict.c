/* bench_evict — a big table of short strings whose entries are replaced
 * without being read first: a cache that evicts an entry it has not looked
 * at for a while, a symbol table or a queue of messages dropped unread.
 * Unlike bench_random_mixed, which reads a block before it frees it, the
 * program does not touch the block it frees: the free's own access to it
 * is the first in a long time, so its line is cold.
 *
 *   bench_evict [ops=20000000] [slots=262144] [min=8] [max=71] [seed=42]
 *
 * Each op picks a slot at random: a full one is freed (not read), an empty
 * one gets a new string of a size drawn in [min, max] bytes, written whole.
 * The table starts empty and settles at half full.  ops = mallocs + frees.
 * After the timed ops every live string is checked (its first and last
 * byte) and freed.  The single stdout line is
 *   Throughput = N ops/s (ops=..., slots=..., min=..., max=..., seed=...,
 *                         time=T s, minflt=..., majflt=...)
 * with the page faults of the timed region.  Exit status: 0 ok, 1
 * allocation failure or detected corruption, 2 bad arguments. */

#define PROG          "bench_evict"
#include "bench_common.h"

#define SLOTS_LIMIT   (1u << 26)
#define SIZE_LIMIT    4096u

static void usage(FILE *f)
{
    fprintf(f,
            "usage: " PROG " [ops=20000000] [slots=262144] [min=8] [max=71] [seed=42]\n"
            "  ops        mallocs and frees (positive integer)\n"
            "  slots      table slots, 1..%u\n"
            "  min, max   string sizes in bytes, 1 <= min <= max <= %u\n"
            "  seed       PRNG seed (non-negative integer)\n",
            SLOTS_LIMIT, SIZE_LIMIT);
}

/* The byte a slot's string is filled with. */
static unsigned char fill_of(uint64_t slot) { return (unsigned char)(slot * 0x9Du | 1u); }

int main(int argc, char **argv)
{
    uint64_t ops = 20000000, slots = 262144, min = 8, max = 71, seed = 42;
    bench_check_args(argc, argv, 5);
    arg_or_die(argc, argv, 1, "ops", 1, UINT64_MAX / 2, &ops);
    arg_or_die(argc, argv, 2, "slots", 1, SLOTS_LIMIT, &slots);
    arg_or_die(argc, argv, 3, "min", 1, SIZE_LIMIT, &min);
    arg_or_die(argc, argv, 4, "max", 1, SIZE_LIMIT, &max);
    arg_or_die(argc, argv, 5, "seed", 0, UINT64_MAX, &seed);
    range_or_die("min", min, "max", max);

    unsigned char **tab = calloc((size_t)slots, sizeof *tab);
    uint16_t *len = calloc((size_t)slots, sizeof *len);
    if (tab == NULL || len == NULL) {
        fprintf(stderr, PROG ": cannot allocate the table of %" PRIu64 " slots\n", slots);
        return 1;
    }
    uint64_t rng = seed;
    const uint64_t span = max - min + 1;

    struct bench_faults f0 = faults_now();
    double t0 = now_sec();
    for (uint64_t i = 0; i < ops; i++) {
        uint64_t r = rng_next(&rng);
        uint64_t k = below(r, slots);
        if (tab[k] != NULL) {
            free(tab[k]);
            tab[k] = NULL;
            continue;
        }
        size_t n = (size_t)(min + below(r >> 32 | r << 32, span));
        unsigned char *p = malloc(n);
        if (p == NULL) {
            fprintf(stderr, PROG ": malloc(%zu) failed at op %" PRIu64 "\n", n, i);
            return 1;
        }
        memset(p, fill_of(k), n);
        tab[k] = p;
        len[k] = (uint16_t)n;
    }
    double t1 = now_sec();
    struct bench_faults df = faults_since(f0);

    for (uint64_t k = 0; k < slots; k++) {
        unsigned char *p = tab[k];
        if (p == NULL) continue;
        if (p[0] != fill_of(k) || p[len[k] - 1] != fill_of(k)) {
            fprintf(stderr, PROG ": corruption in slot %" PRIu64 " (%p, %u bytes)\n", k, (void *)p,
                    (unsigned)len[k]);
            return 1;
        }
        free(p);
    }
    free(tab);
    free(len);
    printf("Throughput = %.0f ops/s (ops=%" PRIu64 ", slots=%" PRIu64 ", min=%" PRIu64
           ", max=%" PRIu64 ", seed=%" PRIu64 ", time=%.6f s" FAULTS_FMT ")\n",
           (double)ops / (t1 - t0), ops, slots, min, max, seed, t1 - t0, FAULTS_ARGS(df));
    return 0;
}
