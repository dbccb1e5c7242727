/* bench_mid_large_mt — multi-threaded random malloc/free churn over 8..34 KiB.
 *
 *   bench_mid_large_mt [threads=2] [cycles=1000000] [ws=128] [seed=42]
 *
 * Every thread owns a table of `ws` slots (initially empty) and a private PRNG
 * seeded from seed + thread index.  Each step draws one 64-bit random number:
 * the upper half picks a slot, the lower half picks a base size of 8, 16 or
 * 32 KiB plus 0..2048 extra bytes.  An occupied slot is verified and freed; an
 * empty one is filled with a fresh malloc whose first 8 bytes and last byte
 * are written.  Each step is one malloc or one free; ops = threads * cycles.
 *
 * Time is wall time from the start barrier (all threads created and ready;
 * the clock is read before any of them is released) until the last one has
 * been joined.  Blocks still live are freed by the main
 * thread afterwards, outside the timed region.
 *
 * The single result line on stdout is
 *   Throughput = N ops/s (threads=..., cycles=..., ws=..., seed=..., time=T s,
 *                         minflt=..., majflt=...)
 * with the page faults of the timed region.
 * Diagnostics go to stderr.  Exit status: 0 ok, 1 allocation failure or
 * detected heap corruption, 2 bad arguments. */

#include <pthread.h>

#define PROG          "bench_mid_large_mt"
#include "bench_common.h"

#define EXTRA_SPAN    2049u           /* extra bytes 0..2048 */
#define THREADS_LIMIT 4096u
#define WS_LIMIT      (1u << 24)

struct slot {
    unsigned char *p;
    uint32_t size;
};

struct worker {
    unsigned index;
    uint64_t seed;
    struct slot *tab;        /* handed to main for the final cleanup */
    char pad[64];            /* keep neighbouring workers on separate lines */
};

static uint64_t g_cycles = 1000000, g_ws = 128;
static pthread_barrier_t g_start;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: " PROG " [threads=2] [cycles=1000000] [ws=128] [seed=42]\n"
            "  threads  worker threads, 1..%u\n"
            "  cycles   malloc/free operations per thread (positive integer)\n"
            "  ws       table slots per thread, 1..%u\n"
            "  seed     PRNG seed (non-negative integer); thread i uses seed+i\n",
            THREADS_LIMIT, WS_LIMIT);
}

static inline uint64_t cookie_of(const void *p, uint32_t idx, unsigned thr)
{
    return ((uint64_t)(uintptr_t)p ^ 0xA5C3F00DD15EA5E5ull)
         + ((uint64_t)idx * 0x9E3779B97F4A7C15ull)
         + ((uint64_t)thr << 40);
}

static inline unsigned char tail_of(uint64_t cookie, uint32_t size)
{
    return (unsigned char)((cookie >> 13) ^ size ^ 0x5Au);
}

static inline void fill(unsigned char *p, uint32_t size, uint32_t idx, unsigned thr)
{
    uint64_t c = cookie_of(p, idx, thr);
    memcpy(p, &c, sizeof c);
    p[size - 1] = tail_of(c, size);
}

static inline void check(const struct slot *s, uint32_t idx, unsigned thr, uint64_t step)
{
    uint64_t want = cookie_of(s->p, idx, thr), got;
    memcpy(&got, s->p, sizeof got);
    unsigned char tw = tail_of(want, s->size), tg = s->p[s->size - 1];
    if (got != want || tg != tw) {
        fprintf(stderr,
                PROG ": heap corruption in thread %u at step %" PRIu64 ", slot %" PRIu32
                " (ptr %p, size %" PRIu32 "): head %016" PRIx64 " expected %016" PRIx64
                ", tail 0x%02x expected 0x%02x\n",
                thr, step, idx, (void *)s->p, s->size, got, want, tg, tw);
        fatal();
    }
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    const uint64_t cycles = g_cycles, nslots = g_ws;
    const unsigned thr = w->index;
    struct slot *tab = w->tab;
    uint64_t rng = w->seed + thr;

    pthread_barrier_wait(&g_start);     /* 1: everyone is ready */
    pthread_barrier_wait(&g_start);     /* 2: main has read the clock, go */

    for (uint64_t i = 0; i < cycles; i++) {
        uint64_t r = rng_next(&rng);
        uint32_t idx = (uint32_t)below(r, nslots);
        struct slot *s = &tab[idx];
        if (s->p != NULL) {
            check(s, idx, thr, i);
            free(s->p);
            s->p = NULL;
        } else {
            uint32_t lo = (uint32_t)r;
            uint32_t base = 8192u << (((lo & 0xFFFFu) * 3u) >> 16);         /* 8/16/32 KiB */
            uint32_t extra = (uint32_t)(((uint64_t)(lo >> 16) * EXTRA_SPAN) >> 16); /* 0..2048 */
            uint32_t size = base + extra;
            unsigned char *p = malloc(size);
            if (p == NULL) {
                fprintf(stderr, PROG ": malloc(%" PRIu32 ") failed in thread %u at step %"
                                PRIu64 "\n", size, thr, i);
                fatal();
            }
            fill(p, size, idx, thr);
            s->p = p;
            s->size = size;
        }
    }
    return NULL;
}

int main(int argc, char **argv)
{
    uint64_t nthreads = 2, seed = 42;

    bench_check_args(argc, argv, 4);
    arg_or_die(argc, argv, 1, "threads", 1, THREADS_LIMIT, &nthreads);
    arg_or_die(argc, argv, 2, "cycles", 1, UINT64_MAX, &g_cycles);
    arg_or_die(argc, argv, 3, "ws", 1, WS_LIMIT, &g_ws);
    arg_or_die(argc, argv, 4, "seed", 0, UINT64_MAX, &seed);

    const unsigned n = (unsigned)nthreads;
    struct worker *workers = calloc(n, sizeof *workers);
    if (workers == NULL) {
        fprintf(stderr, PROG ": out of memory\n");
        return 1;
    }
    for (unsigned t = 0; t < n; t++) {
        workers[t].index = t;
        workers[t].seed = seed;
        /* Whole cache lines per table, so threads never share one. */
        size_t bytes = ((size_t)g_ws * sizeof(struct slot) + 63u) & ~(size_t)63u;
        workers[t].tab = aligned_alloc(64, bytes);
        if (workers[t].tab == NULL) {
            fprintf(stderr, PROG ": cannot allocate table of %" PRIu64 " slots\n", g_ws);
            return 1;
        }
        memset(workers[t].tab, 0, bytes);
    }

    struct bench_faults df;
    double secs = bench_run_timed(n, worker_main, workers, sizeof *workers, &g_start, &df);

    /* Cleanup outside the timed region: verify and free what is still live. */
    for (unsigned t = 0; t < n; t++) {
        struct slot *tab = workers[t].tab;
        for (uint64_t i = 0; i < g_ws; i++) {
            if (tab[i].p != NULL) {
                check(&tab[i], (uint32_t)i, t, g_cycles);
                free(tab[i].p);
            }
        }
        free(tab);
    }
    free(workers);

    double ops = (double)nthreads * (double)g_cycles;
    uint64_t tput = (uint64_t)(ops / secs);
    printf("Throughput = %" PRIu64 " ops/s (threads=%" PRIu64 ", cycles=%" PRIu64
           ", ws=%" PRIu64 ", seed=%" PRIu64 ", time=%.6f s" FAULTS_FMT ")\n",
           tput, nthreads, g_cycles, g_ws, seed, secs, FAULTS_ARGS(df));
    return 0;
}
