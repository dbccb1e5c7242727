/* larson — a server-style allocation benchmark after Larson & Krishnan
 * ("Memory allocation for long-running server applications", ISMM 1998).
 * Written from the description of the workload, not from their sources.
 *
 *   larson [seconds=2] [min=8] [max=1024] [blocks_per_thread=1000]
 *          [rounds=1000] [seed=42] [threads=2]
 *
 * `threads` independent chains run concurrently.  Each chain owns a table of
 * `blocks_per_thread` blocks, pre-filled by the main thread before timing
 * starts.  The thread currently running a chain does `rounds` iterations of:
 * pick a random victim, verify and free it, malloc a new block of a random
 * size in [min, max], write its first and last byte, store it.  Then, unless
 * the time is up, it starts a NEW thread, hands it the chain (table and PRNG
 * state), and exits -- so every successor frees memory its predecessors
 * allocated, and thread exit happens continuously while the heap is busy.
 *
 * Each new thread joins its predecessor, so no thread is ever leaked; the
 * final thread of each chain posts the chain's semaphore and main joins it.
 * Main sleeps `seconds`, raises a stop flag (polled between batches), waits
 * for every chain, stops the clock, and frees all remaining blocks.
 *
 * ops = every malloc and free done by the chain threads (2 per iteration),
 * accumulated with one atomic add per thread.  The single stdout line is
 *   Throughput = N ops/s (seconds=..., min=..., max=..., blocks=..., rounds=...,
 *                         seed=..., threads=..., ops=..., handoffs=..., time=T s)
 * Diagnostics go to stderr.  Exit status: 0 ok, 1 allocation/thread failure
 * or detected heap corruption, 2 bad arguments. */

#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <stdatomic.h>

#define PROG          "larson"
#include "bench_common.h"

#define THREADS_LIMIT 4096u
#define SECONDS_LIMIT 86400u
#define SIZE_LIMIT    (1u << 30)
#define BLOCKS_LIMIT  (1u << 26)

struct slot {
    unsigned char *p;
    uint32_t size;
};

struct chain {
    struct slot *tab;
    uint64_t rng;              /* PRNG state, carried across handoffs */
    unsigned index;
    pthread_t pred;            /* thread to join (set by the handing-off thread) */
    int has_pred;
    pthread_t last;            /* final thread of the chain, joined by main */
    sem_t done;
    char pad[64];
};

static uint64_t g_min = 8, g_max = 1024, g_blocks = 1000, g_rounds = 1000;
static atomic_int g_stop;
static atomic_uint_fast64_t g_ops;
static atomic_uint_fast64_t g_handoffs;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: " PROG " [seconds=2] [min=8] [max=1024] [blocks_per_thread=1000]\n"
            "              [rounds=1000] [seed=42] [threads=2]\n"
            "  seconds            run time, 1..%u\n"
            "  min, max           block size range in bytes, 1 <= min <= max <= %u\n"
            "  blocks_per_thread  live blocks per chain, 1..%u\n"
            "  rounds             free+malloc iterations per thread before handoff (positive)\n"
            "  seed               PRNG seed (non-negative integer); chain i uses seed+i\n"
            "  threads            concurrent chains, 1..%u\n",
            SECONDS_LIMIT, SIZE_LIMIT, BLOCKS_LIMIT, THREADS_LIMIT);
}

/* Byte written at the start of a block; depends on address, slot and chain. */
static inline unsigned char head_of(const void *p, uint32_t idx, unsigned ch)
{
    uint64_t a = (uint64_t)(uintptr_t)p;
    return (unsigned char)((a >> 4) ^ (a >> 12) ^ idx ^ (idx >> 8) ^ (ch * 0x3Du) ^ 0xC3u);
}

static inline void fill(unsigned char *p, uint32_t size, uint32_t idx, unsigned ch)
{
    unsigned char h = head_of(p, idx, ch);
    p[size - 1] = (unsigned char)(h ^ 0x5Au);
    p[0] = h;                              /* last, so size 1 keeps the head */
}

static inline void check(const struct slot *s, uint32_t idx, unsigned ch, const char *when)
{
    unsigned char h = head_of(s->p, idx, ch);
    unsigned char t = (unsigned char)(h ^ 0x5Au);
    unsigned char gh = s->p[0], gt = s->p[s->size - 1];
    if (gh != h || (s->size > 1 && gt != t)) {
        fprintf(stderr,
                PROG ": heap corruption (%s) in chain %u, slot %" PRIu32
                " (ptr %p, size %" PRIu32 "): head 0x%02x expected 0x%02x,"
                " tail 0x%02x expected 0x%02x\n",
                when, ch, idx, (void *)s->p, s->size, gh, h, gt, t);
        fatal();
    }
}

static inline uint32_t random_size(uint64_t r)
{
    uint64_t span = g_max - g_min + 1;
    return (uint32_t)(g_min + (((r & 0xFFFFFFFFull) * span) >> 32));
}

static void *chain_thread(void *arg)
{
    struct chain *c = arg;
    const unsigned ch = c->index;
    const uint64_t rounds = g_rounds, nblocks = g_blocks;
    struct slot *tab = c->tab;
    uint64_t rng = c->rng;

    for (uint64_t i = 0; i < rounds; i++) {
        uint64_t r = rng_next(&rng);
        uint32_t idx = (uint32_t)below(r, nblocks);
        struct slot *s = &tab[idx];
        check(s, idx, ch, "before free");
        free(s->p);
        uint32_t size = random_size(r);
        unsigned char *p = malloc(size);
        if (p == NULL) {
            fprintf(stderr, PROG ": malloc(%" PRIu32 ") failed in chain %u\n", size, ch);
            fatal();
        }
        fill(p, size, idx, ch);
        s->p = p;
        s->size = size;
    }
    c->rng = rng;
    atomic_fetch_add_explicit(&g_ops, 2 * rounds, memory_order_relaxed);

    /* Reap the thread that started us (it only had to return). */
    if (c->has_pred) {
        int rc = pthread_join(c->pred, NULL);
        if (rc != 0) {
            fprintf(stderr, PROG ": pthread_join (chain %u): %s\n", ch, strerror(rc));
            fatal();
        }
    }

    if (!atomic_load_explicit(&g_stop, memory_order_acquire)) {
        c->pred = pthread_self();
        c->has_pred = 1;
        pthread_t next;
        int rc, tries = 0;
        while ((rc = pthread_create(&next, NULL, chain_thread, c)) == EAGAIN && tries++ < 1000)
            sched_yield();
        if (rc == 0) {
            atomic_fetch_add_explicit(&g_handoffs, 1, memory_order_relaxed);
            return NULL;       /* c now belongs to the successor */
        }
        fprintf(stderr, PROG ": pthread_create (chain %u): %s\n", ch, strerror(rc));
        fatal();
    }

    c->last = pthread_self();
    sem_post(&c->done);        /* main joins us after this */
    return NULL;
}

static void sleep_sec(uint64_t secs)
{
    struct timespec ts = { .tv_sec = (time_t)secs, .tv_nsec = 0 };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

int main(int argc, char **argv)
{
    uint64_t seconds = 2, seed = 42, nthreads = 2;

    bench_check_args(argc, argv, 7);
    arg_or_die(argc, argv, 1, "seconds", 1, SECONDS_LIMIT, &seconds);
    arg_or_die(argc, argv, 2, "min", 1, SIZE_LIMIT, &g_min);
    arg_or_die(argc, argv, 3, "max", 1, SIZE_LIMIT, &g_max);
    arg_or_die(argc, argv, 4, "blocks_per_thread", 1, BLOCKS_LIMIT, &g_blocks);
    arg_or_die(argc, argv, 5, "rounds", 1, UINT64_MAX / 2, &g_rounds);
    arg_or_die(argc, argv, 6, "seed", 0, UINT64_MAX, &seed);
    arg_or_die(argc, argv, 7, "threads", 1, THREADS_LIMIT, &nthreads);
    if (g_min > g_max) {
        fprintf(stderr, PROG ": min (%" PRIu64 ") must not exceed max (%" PRIu64 ")\n",
                g_min, g_max);
        usage(stderr);
        return 2;
    }

    const unsigned n = (unsigned)nthreads;
    struct chain *chains = calloc(n, sizeof *chains);
    if (chains == NULL) {
        fprintf(stderr, PROG ": out of memory\n");
        return 1;
    }

    /* Pre-fill every chain's table from the main thread (untimed). */
    for (unsigned t = 0; t < n; t++) {
        struct chain *c = &chains[t];
        c->index = t;
        c->rng = seed + t;
        c->tab = malloc((size_t)g_blocks * sizeof(struct slot));
        if (c->tab == NULL) {
            fprintf(stderr, PROG ": cannot allocate table of %" PRIu64 " blocks\n", g_blocks);
            return 1;
        }
        if (sem_init(&c->done, 0, 0) != 0) {
            fprintf(stderr, PROG ": sem_init: %s\n", strerror(errno));
            return 1;
        }
        for (uint64_t i = 0; i < g_blocks; i++) {
            uint32_t size = random_size(rng_next(&c->rng));
            unsigned char *p = malloc(size);
            if (p == NULL) {
                fprintf(stderr, PROG ": malloc(%" PRIu32 ") failed during pre-fill\n", size);
                return 1;
            }
            fill(p, size, (uint32_t)i, t);
            c->tab[i].p = p;
            c->tab[i].size = size;
        }
    }

    double t0 = now_sec();
    for (unsigned t = 0; t < n; t++) {
        pthread_t tid;
        int rc = pthread_create(&tid, NULL, chain_thread, &chains[t]);
        if (rc != 0) {
            fprintf(stderr, PROG ": pthread_create (chain %u): %s\n", t, strerror(rc));
            fatal();
        }
    }

    sleep_sec(seconds);
    atomic_store_explicit(&g_stop, 1, memory_order_release);

    for (unsigned t = 0; t < n; t++) {
        while (sem_wait(&chains[t].done) != 0) {
            if (errno != EINTR) {
                fprintf(stderr, PROG ": sem_wait: %s\n", strerror(errno));
                fatal();
            }
        }
        int rc = pthread_join(chains[t].last, NULL);
        if (rc != 0) {
            fprintf(stderr, PROG ": pthread_join (chain %u): %s\n", t, strerror(rc));
            fatal();
        }
    }
    double t1 = now_sec();

    uint64_t ops = atomic_load(&g_ops);
    uint64_t handoffs = atomic_load(&g_handoffs);

    /* Verify and free everything that is still live (untimed). */
    for (unsigned t = 0; t < n; t++) {
        struct chain *c = &chains[t];
        for (uint64_t i = 0; i < g_blocks; i++) {
            check(&c->tab[i], (uint32_t)i, t, "final");
            free(c->tab[i].p);
        }
        free(c->tab);
        sem_destroy(&c->done);
    }
    free(chains);

    double secs = t1 - t0;
    if (secs < 1e-9)
        secs = 1e-9;
    uint64_t tput = (uint64_t)((double)ops / secs);
    printf("Throughput = %" PRIu64 " ops/s (seconds=%" PRIu64 ", min=%" PRIu64
           ", max=%" PRIu64 ", blocks=%" PRIu64 ", rounds=%" PRIu64 ", seed=%" PRIu64
           ", threads=%" PRIu64 ", ops=%" PRIu64 ", handoffs=%" PRIu64 ", time=%.3f s)\n",
           tput, seconds, g_min, g_max, g_blocks, g_rounds, seed, nthreads, ops,
           handoffs, secs);
    return 0;
}
