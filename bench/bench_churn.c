/* bench_churn — threads that each replace blocks of a size range at random
 * and use all of every block: the buffers of a program that reads, builds
 * or compresses data in pieces of tens or hundreds of KiB.
 *
 *   bench_churn [threads=2] [cycles=1000000] [slots=64] [min=65536]
 *               [max=262144] [seed=42]
 *
 * Every thread owns a table of `slots` blocks, filled before the clock
 * starts, and a private PRNG seeded from seed + thread index.  A step picks
 * a slot and a size uniform in [min, max]: the slot's block is checked and
 * freed, a new one of that size is allocated, and one byte of each of its
 * 4 KiB pages is written, with its first 8 bytes and its last byte (a
 * program fills its buffers; an allocator that gives pages back too soon
 * pays a page fault for each).  Each step is one malloc and one free;
 * ops = 2 x threads x cycles.
 *
 * Time is wall time from the start barrier (every thread created, its
 * table filled, the clock read before any is released) until the last one
 * has been joined.  Blocks still live are freed afterwards, outside the
 * timed region.
 *
 * The single result line on stdout is
 *   Throughput = N ops/s (threads=..., cycles=..., slots=..., min=..., max=...,
 *                         seed=..., time=T s, minflt=..., majflt=...)
 * with the page faults of the timed region.  Exit status: 0 ok, 1
 * allocation failure or detected heap corruption, 2 bad arguments. */

#include <pthread.h>

#define PROG          "bench_churn"
#include "bench_common.h"

#define THREADS_LIMIT 4096u
#define SLOTS_LIMIT   (1u << 20)
#define SIZE_LIMIT    ((uint64_t)1 << 30)
#define PAGE          4096u

struct slot {
    unsigned char *p;
    uint64_t size;
};

struct worker {
    unsigned index;
    uint64_t rng;
    struct slot *tab;
    char pad[64];            /* keep neighbouring workers on separate lines */
};

static uint64_t g_cycles = 1000000, g_slots = 64, g_min = 65536, g_max = 262144;
static pthread_barrier_t g_start;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: " PROG " [threads=2] [cycles=1000000] [slots=64] [min=65536] [max=262144]"
            " [seed=42]\n"
            "  threads  worker threads, 1..%u\n"
            "  cycles   replacements per thread (positive integer)\n"
            "  slots    live blocks per thread, 1..%u\n"
            "  min max  block sizes in bytes, 16 <= min <= max <= 2^30\n"
            "  seed     PRNG seed (non-negative integer); thread i uses seed+i\n",
            THREADS_LIMIT, SLOTS_LIMIT);
}

static inline uint64_t cookie_of(const void *p, unsigned thr)
{
    return ((uint64_t)(uintptr_t)p ^ 0xA5C3F00DD15EA5E5ull) + ((uint64_t)thr << 40);
}

static unsigned char *new_block(uint64_t size, unsigned thr)
{
    unsigned char *p = malloc(size);
    if (p == NULL) {
        fprintf(stderr, PROG ": malloc(%" PRIu64 ") failed in thread %u\n", size, thr);
        fatal();
    }
    for (uint64_t o = PAGE; o < size; o += PAGE) p[o] = (unsigned char)(o / PAGE);
    uint64_t c = cookie_of(p, thr);
    memcpy(p, &c, sizeof c);
    p[size - 1] = (unsigned char)(c >> 13);
    return p;
}

static void drop_block(const struct slot *s, unsigned thr)
{
    uint64_t want = cookie_of(s->p, thr), got;
    memcpy(&got, s->p, sizeof got);
    if (got != want || s->p[s->size - 1] != (unsigned char)(want >> 13)) {
        fprintf(stderr, PROG ": heap corruption in thread %u (ptr %p, size %" PRIu64 ")\n",
                thr, (void *)s->p, s->size);
        fatal();
    }
    free(s->p);
}

static inline uint64_t pick_size(uint64_t *rng)
{
    return g_min + (rng_next(rng) % (g_max - g_min + 1));
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    const unsigned thr = w->index;
    struct slot *tab = w->tab;
    for (uint64_t i = 0; i < g_slots; i++) {
        tab[i].size = pick_size(&w->rng);
        tab[i].p = new_block(tab[i].size, thr);
    }

    pthread_barrier_wait(&g_start);     /* 1: everyone is ready */
    pthread_barrier_wait(&g_start);     /* 2: main has read the clock, go */

    for (uint64_t i = 0; i < g_cycles; i++) {
        struct slot *s = &tab[below(rng_next(&w->rng), g_slots)];
        drop_block(s, thr);
        s->size = pick_size(&w->rng);
        s->p = new_block(s->size, thr);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    uint64_t nthreads = 2, seed = 42;

    bench_check_args(argc, argv, 6);
    arg_or_die(argc, argv, 1, "threads", 1, THREADS_LIMIT, &nthreads);
    arg_or_die(argc, argv, 2, "cycles", 1, UINT64_MAX, &g_cycles);
    arg_or_die(argc, argv, 3, "slots", 1, SLOTS_LIMIT, &g_slots);
    arg_or_die(argc, argv, 4, "min", 16, SIZE_LIMIT, &g_min);
    arg_or_die(argc, argv, 5, "max", g_min, SIZE_LIMIT, &g_max);
    arg_or_die(argc, argv, 6, "seed", 0, UINT64_MAX, &seed);

    const unsigned n = (unsigned)nthreads;
    struct worker *workers = calloc(n, sizeof *workers);
    if (workers == NULL) {
        fprintf(stderr, PROG ": out of memory\n");
        return 1;
    }
    for (unsigned t = 0; t < n; t++) {
        workers[t].index = t;
        workers[t].rng = seed + t;
        workers[t].tab = calloc(g_slots, sizeof(struct slot));
        if (workers[t].tab == NULL) {
            fprintf(stderr, PROG ": cannot allocate a table of %" PRIu64 " slots\n", g_slots);
            return 1;
        }
    }

    struct bench_faults df;
    double secs = bench_run_timed(n, worker_main, workers, sizeof *workers, &g_start, &df);

    for (unsigned t = 0; t < n; t++) {
        for (uint64_t i = 0; i < g_slots; i++) drop_block(&workers[t].tab[i], t);
        free(workers[t].tab);
    }
    free(workers);

    uint64_t tput = (uint64_t)(2.0 * (double)nthreads * (double)g_cycles / secs);
    printf("Throughput = %" PRIu64 " ops/s (threads=%" PRIu64 ", cycles=%" PRIu64
           ", slots=%" PRIu64 ", min=%" PRIu64 ", max=%" PRIu64 ", seed=%" PRIu64
           ", time=%.6f s" FAULTS_FMT ")\n",
           tput, nthreads, g_cycles, g_slots, g_min, g_max, seed, secs, FAULTS_ARGS(df));
    return 0;
}
