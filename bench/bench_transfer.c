/* bench_transfer — blocks passed between threads that come and go, sizes from
 * a few bytes to megabytes.  The workload is the one of mimalloc's stress
 * test (`mstress` in mimalloc-bench), written here from its description.
 *
 *   bench_transfer [threads=2] [scale=50] [rounds=10] [seed=42]
 *
 * A shared exchange table of XCHG_SLOTS pointers starts empty.  Each round
 * main starts `threads` workers and joins them.  Worker w does
 * (w % 4 + 1) x scale x 100 steps, so workers end at different times and
 * some exit while others still run.  One step:
 *   - allocates a block: every other step a short-lived one, kept in the
 *     worker's list, else a kept one that lives until the worker ends;
 *   - with probability 2/3 frees a random entry of its short-lived list;
 *   - with probability 1/4 swaps a random entry of that list with a random
 *     slot of the exchange table (an atomic exchange), so blocks allocated
 *     by one thread are freed by another, often after it has exited.
 * A block has 2^k words (8 bytes each), k uniform in 0..4 for short-lived
 * blocks (8..128 B) and 0..6 for kept ones (8..512 B); one block in 100 is
 * 100 times larger, one in 1 000 1 000 times and one in 10 000 10 000 times
 * (up to 5 MB).  Every word of a block is written when it is allocated and
 * checked before it is freed, as a program that uses its memory would.
 * The short-lived list grows with realloc.  At the end of its steps a worker
 * frees everything it still holds.  After each round main frees a random
 * half of the exchange table (all of it after the last round).
 *
 * Time runs from the first worker's creation to the last free.  ops = every
 * malloc, realloc and free done, by workers and main.  The single stdout
 * line is
 *   Throughput = N ops/s (threads=..., scale=..., rounds=..., seed=..., ops=...,
 *                         peak_rss_mib=..., time=T s, minflt=..., majflt=...)
 * with the page faults of the timed region; peak_rss_mib is the process's
 * peak resident set.  Exit status: 0 ok, 1 allocation failure or detected
 * heap corruption, 2 bad arguments. */

#include <pthread.h>
#include <stdatomic.h>

#define PROG           "bench_transfer"
#include "bench_common.h"

#define XCHG_SLOTS     1000u
#define THREADS_LIMIT  1024u
#define SCALE_LIMIT    100000u
#define ROUNDS_LIMIT   100000u
#define WORD           sizeof(uint64_t)

static _Atomic(uint64_t *) g_xchg[XCHG_SLOTS];
static uint64_t g_scale = 50, g_seed = 42;
static atomic_uint_fast64_t g_ops;

struct worker {
    pthread_t tid;
    unsigned index;
    uint64_t round;
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: " PROG " [threads=2] [scale=50] [rounds=10] [seed=42]\n"
            "  threads  workers started each round, 1..%u\n"
            "  scale    work per worker: (w %% 4 + 1) x scale x 100 steps, 1..%u\n"
            "  rounds   times the workers are started anew, 1..%u\n"
            "  seed     PRNG seed (non-negative integer)\n",
            THREADS_LIMIT, SCALE_LIMIT, ROUNDS_LIMIT);
}

/* True with probability num/den. */
static inline int chance(uint64_t *rng, uint64_t num, uint64_t den)
{
    return below(rng_next(rng), den) < num;
}

/* Word i of a block of n words; word 0 also tells the checker n. */
static inline uint64_t word_of(uint64_t n, uint64_t i)
{
    return (n << 24 | i) ^ 0x6A09E667F3BCC908ull;
}

static uint64_t *new_block(uint64_t *rng, unsigned max_shift)
{
    uint64_t n = (uint64_t)1 << below(rng_next(rng), max_shift + 1);
    if (chance(rng, 1, 100)) {
        if (chance(rng, 1, 100))
            n *= 10000;
        else if (chance(rng, 1, 10))
            n *= 1000;
        else
            n *= 100;
    }
    uint64_t *p = malloc(n * WORD);
    if (p == NULL) {
        fprintf(stderr, PROG ": malloc(%" PRIu64 ") failed\n", n * WORD);
        fatal();
    }
    for (uint64_t i = 0; i < n; i++)
        p[i] = word_of(n, i);
    return p;
}

/* Check every word, then free; NULL is allowed (and counted, as free(NULL)
 * is a call too). */
static void drop_block(uint64_t *p)
{
    if (p != NULL) {
        uint64_t n = (p[0] ^ 0x6A09E667F3BCC908ull) >> 24;
        for (uint64_t i = 0; i < n; i++) {
            if (p[i] != word_of(n, i)) {
                fprintf(stderr, PROG ": heap corruption: block %p of %" PRIu64
                        " words, word %" PRIu64 " was overwritten\n", (void *)p, n, i);
                fatal();
            }
        }
    }
    free(p);
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    uint64_t rng = g_seed ^ (w->round * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)w->index << 48);
    const uint64_t steps = (uint64_t)(w->index % 4 + 1) * g_scale * 100;
    uint64_t ops = 0;

    uint64_t **kept = malloc((steps / 2 + 1) * sizeof *kept);
    uint64_t **list = NULL;
    size_t n_kept = 0, n_list = 0, cap = 0;
    if (kept == NULL) {
        fprintf(stderr, PROG ": out of memory\n");
        fatal();
    }
    ops++;

    for (uint64_t s = 0; s < steps; s++) {
        if (s & 1) {
            kept[n_kept++] = new_block(&rng, 6);
        } else {
            if (n_list == cap) {
                cap = cap ? 2 * cap : 1024;
                uint64_t **nl = realloc(list, cap * sizeof *list);
                if (nl == NULL) {
                    fprintf(stderr, PROG ": out of memory\n");
                    fatal();
                }
                list = nl;
                ops++;
            }
            list[n_list++] = new_block(&rng, 4);
        }
        ops++;
        if (chance(&rng, 2, 3)) {
            size_t i = (size_t)below(rng_next(&rng), n_list);
            drop_block(list[i]);
            list[i] = NULL;
            ops++;
        }
        if (chance(&rng, 1, 4)) {
            size_t i = (size_t)below(rng_next(&rng), n_list);
            size_t x = (size_t)below(rng_next(&rng), XCHG_SLOTS);
            list[i] = atomic_exchange_explicit(&g_xchg[x], list[i], memory_order_acq_rel);
        }
    }
    for (size_t i = 0; i < n_kept; i++)
        drop_block(kept[i]);
    for (size_t i = 0; i < n_list; i++)
        drop_block(list[i]);
    free(kept);
    free(list);
    ops += n_kept + n_list + 2;
    atomic_fetch_add_explicit(&g_ops, ops, memory_order_relaxed);
    return NULL;
}

int main(int argc, char **argv)
{
    uint64_t nthreads = 2, rounds = 10;

    bench_check_args(argc, argv, 4);
    arg_or_die(argc, argv, 1, "threads", 1, THREADS_LIMIT, &nthreads);
    arg_or_die(argc, argv, 2, "scale", 1, SCALE_LIMIT, &g_scale);
    arg_or_die(argc, argv, 3, "rounds", 1, ROUNDS_LIMIT, &rounds);
    arg_or_die(argc, argv, 4, "seed", 0, UINT64_MAX, &g_seed);

    const unsigned n = (unsigned)nthreads;
    struct worker *workers = calloc(n, sizeof *workers);
    if (workers == NULL) {
        fprintf(stderr, PROG ": out of memory\n");
        return 1;
    }
    uint64_t rng = g_seed ^ 0x243F6A8885A308D3ull, main_ops = 0;

    struct bench_faults f0 = faults_now();
    double t0 = now_sec();
    for (uint64_t r = 0; r < rounds; r++) {
        for (unsigned t = 0; t < n; t++) {
            workers[t].index = t;
            workers[t].round = r;
            int rc = pthread_create(&workers[t].tid, NULL, worker_main, &workers[t]);
            if (rc != 0) {
                fprintf(stderr, PROG ": pthread_create: %s\n", strerror(rc));
                fatal();
            }
        }
        for (unsigned t = 0; t < n; t++) {
            int rc = pthread_join(workers[t].tid, NULL);
            if (rc != 0) {
                fprintf(stderr, PROG ": pthread_join: %s\n", strerror(rc));
                fatal();
            }
        }
        /* Half of what is in transit survives into the next round. */
        for (unsigned x = 0; x < XCHG_SLOTS; x++) {
            if (r + 1 == rounds || chance(&rng, 1, 2)) {
                drop_block(atomic_exchange_explicit(&g_xchg[x], NULL, memory_order_acq_rel));
                main_ops++;
            }
        }
    }
    double secs = now_sec() - t0;
    struct bench_faults df = faults_since(f0);
    free(workers);

    if (secs < 1e-9)
        secs = 1e-9;
    uint64_t ops = atomic_load(&g_ops) + main_ops;
    printf("Throughput = %" PRIu64 " ops/s (threads=%" PRIu64 ", scale=%" PRIu64 ", rounds=%"
           PRIu64 ", seed=%" PRIu64 ", ops=%" PRIu64 ", peak_rss_mib=%.1f, time=%.3f s"
           FAULTS_FMT ")\n",
           (uint64_t)((double)ops / secs), nthreads, g_scale, rounds, g_seed, ops,
           (double)peak_rss_kib() / 1024.0, secs, FAULTS_ARGS(df));
    return 0;
}
