/* bench_bulk — a big structure built and then torn down whole, again and
 * again: a program that fills a container of a million small objects and
 * destroys it, a compiler freeing a syntax tree, an interpreter's collector
 * sweeping.  No steady churn: every malloc of a round comes before every
 * free, so each block is freed long after it was made and the allocator's
 * per-thread caches see only frees, then only mallocs.
 *
 *   bench_bulk [rounds=10] [blocks=1000000] [min=16] [max=256] [order=forward]
 *              [seed=42]
 *
 * Each round allocates `blocks` blocks of random size in [min, max] bytes,
 * writing an 8-byte cookie (derived from the address and the index) at the
 * start of each and a byte at its end, then checks and frees every block
 *   order=forward  in the order they were made (a vector of pointers freed
 *                  front to back, a list from its head)
 *   order=reverse  newest first (a stack unwound)
 *   order=random   in a random order (a hash table's buckets)
 * ops = mallocs + frees.  Time covers every round; the pointer table is
 * allocated before the clock starts.  The single stdout line is
 *   Throughput = N ops/s (rounds=..., blocks=..., min=..., max=...,
 *                         order=..., seed=..., time=T s, minflt=..., majflt=...)
 * with the page faults of the timed region.  Exit status: 0 ok, 1 allocation
 * failure or detected corruption, 2 bad arguments. */

#define PROG          "bench_bulk"
#include "bench_common.h"

#define BLOCKS_LIMIT  (1u << 26)
#define SIZE_LIMIT    (1u << 20)
#define ROUNDS_LIMIT  1000000u

enum order { FORWARD, REVERSE, RANDOM };
static const char *const ORDER_NAME[] = { "forward", "reverse", "random" };

struct slot {
    unsigned char *p;
    uint32_t size;
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: " PROG " [rounds=10] [blocks=1000000] [min=16] [max=256]\n"
            "                  [order=forward] [seed=42]\n"
            "  rounds      structures built and freed (1..%u)\n"
            "  blocks      blocks in each (1..%u)\n"
            "  min, max    block sizes in bytes, 8 <= min <= max <= %u\n"
            "  order       forward, reverse or random: the order of the frees\n"
            "  seed        PRNG seed (non-negative integer)\n",
            ROUNDS_LIMIT, BLOCKS_LIMIT, SIZE_LIMIT);
}

static uint64_t cookie_of(const struct slot *s, uint64_t i)
{
    return (uint64_t)(uintptr_t)s->p * 0x9E3779B97F4A7C15ull ^ i;
}

static void check_and_free(struct slot *s, uint64_t i)
{
    uint64_t c;
    memcpy(&c, s->p, sizeof c);
    if (c != cookie_of(s, i) || s->p[s->size - 1] != (unsigned char)(c | 1u)) {
        fprintf(stderr, PROG ": corruption in block %" PRIu64 " (%p, %" PRIu32 " bytes)\n", i,
                (void *)s->p, s->size);
        exit(1);
    }
    free(s->p);
}

int main(int argc, char **argv)
{
    uint64_t rounds = 10, blocks = 1000000, min = 16, max = 256, seed = 42;
    enum order order = FORWARD;

    bench_check_args(argc, argv, 6);
    arg_or_die(argc, argv, 1, "rounds", 1, ROUNDS_LIMIT, &rounds);
    arg_or_die(argc, argv, 2, "blocks", 1, BLOCKS_LIMIT, &blocks);
    arg_or_die(argc, argv, 3, "min", 8, SIZE_LIMIT, &min);
    arg_or_die(argc, argv, 4, "max", 8, SIZE_LIMIT, &max);
    if (argc > 5) {
        unsigned k = 0;
        while (k < 3 && strcmp(argv[5], ORDER_NAME[k]) != 0) k++;
        if (k == 3) {
            fprintf(stderr, PROG ": invalid order '%s' (expected forward, reverse or random)\n",
                    argv[5]);
            usage(stderr);
            return 2;
        }
        order = (enum order)k;
    }
    arg_or_die(argc, argv, 6, "seed", 0, UINT64_MAX, &seed);
    range_or_die("min", min, "max", max);

    struct slot *tab = malloc((size_t)blocks * sizeof *tab);
    uint32_t *perm = order == RANDOM ? malloc((size_t)blocks * sizeof *perm) : NULL;
    if (tab == NULL || (order == RANDOM && perm == NULL)) {
        fprintf(stderr, PROG ": cannot allocate the table of %" PRIu64 " blocks\n", blocks);
        return 1;
    }
    uint64_t rng = seed;
    const uint64_t span = max - min + 1;

    struct bench_faults f0 = faults_now();
    double t0 = now_sec();
    for (uint64_t r = 0; r < rounds; r++) {
        for (uint64_t i = 0; i < blocks; i++) {
            struct slot *s = &tab[i];
            s->size = (uint32_t)(min + below(rng_next(&rng), span));
            s->p = malloc(s->size);
            if (s->p == NULL) {
                fprintf(stderr, PROG ": malloc(%" PRIu32 ") failed in round %" PRIu64 "\n",
                        s->size, r);
                return 1;
            }
            uint64_t c = cookie_of(s, i);
            memcpy(s->p, &c, sizeof c);
            s->p[s->size - 1] = (unsigned char)(c | 1u);
        }
        if (order == RANDOM) {
            /* a fresh shuffle each round (Fisher-Yates), drawn before the frees */
            for (uint64_t i = 0; i < blocks; i++) perm[i] = (uint32_t)i;
            for (uint64_t i = blocks - 1; i > 0; i--) {
                uint64_t j = below(rng_next(&rng), i + 1);
                uint32_t t = perm[i];
                perm[i] = perm[j];
                perm[j] = t;
            }
        }
        for (uint64_t k = 0; k < blocks; k++) {
            uint64_t i = order == FORWARD ? k : order == REVERSE ? blocks - 1 - k : perm[k];
            check_and_free(&tab[i], i);
        }
    }
    double t1 = now_sec();
    struct bench_faults df = faults_since(f0);
    free(perm);
    free(tab);

    double secs = t1 - t0;
    if (secs < 1e-9)
        secs = 1e-9;
    uint64_t ops = 2 * rounds * blocks;
    printf("Throughput = %" PRIu64 " ops/s (rounds=%" PRIu64 ", blocks=%" PRIu64 ", min=%" PRIu64
           ", max=%" PRIu64 ", order=%s, seed=%" PRIu64 ", time=%.6f s" FAULTS_FMT ")\n",
           (uint64_t)((double)ops / secs), rounds, blocks, min, max, ORDER_NAME[order], seed, secs,
           FAULTS_ARGS(df));
    return 0;
}
