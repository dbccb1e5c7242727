/* larson — the server workload of Larson & Krishnan ("Memory allocation for
 * long-running server applications", ISMM 1998), run the way the benchmark
 * defines it (and the way mimalloc-bench runs it).  Written from the
 * description of the workload, not from their sources.
 *
 *   larson [seconds=2] [min=8] [max=1000] [chunks=1000] [rounds=10]
 *          [seed=42] [threads=2]
 *
 * The arguments are the original's, in its order: run time, smallest and
 * largest block size, blocks per thread, rounds, seed, threads.
 * mimalloc-bench runs `larson 5 8 1000 5000 100 4141 N`.
 *
 * Warm-up (main thread, not timed): threads x chunks blocks of random size
 * are allocated, shuffled, and 4 x threads x chunks random replacements are
 * done on them; thread i then gets blocks [i*chunks, (i+1)*chunks).
 *
 * `threads` chains then run at once.  The thread running a chain does
 * rounds x chunks replacements: pick a random block of its table, free it,
 * malloc a new one of a size drawn uniformly from [min, max) (min when
 * min == max), write its first two bytes.  It checks the stop flag after
 * every replacement.  When its replacements are done and the time is not
 * up, it creates a new thread, hands it the chain (table, PRNG state,
 * counters) and exits.  Nobody joins anybody: the threads are detached, a
 * successor starts while its predecessor is still exiting, and every
 * successor frees blocks its predecessors (and, at first, main) allocated.
 *
 * Main sleeps `seconds`, raises the stop flag and waits until the thread
 * running each chain has seen it; that stops the clock.
 * Throughput is what the original reports: allocations done by all the
 * generations of threads, divided by the time.  (A replacement is one free
 * and one malloc; this counts it once.)
 *
 * After the clock has stopped, main waits until the last threads of every
 * chain have exited (/proc/self/task/TID is gone), then checks and frees
 * every block.  The two bytes written into each block
 * are checked before it is freed; a mismatch is reported as heap corruption.
 *
 * The single stdout line is
 *   Throughput = N ops/s (seconds=..., min=..., max=..., chunks=..., rounds=...,
 *                         seed=..., threads=..., allocs=..., threads_created=...,
 *                         time=T s, minflt=..., majflt=...)
 * with the page faults of the timed region.  Diagnostics go to stderr.
 * Exit status: 0 ok, 1 allocation/thread failure or detected heap
 * corruption, 2 bad arguments. */

#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <sys/syscall.h>

#define PROG          "larson"
#include "bench_common.h"

#define THREADS_LIMIT 4096u
#define SECONDS_LIMIT 86400u
#define SIZE_LIMIT    (1u << 30)
#define CHUNKS_LIMIT  (1u << 24)
#define TOTAL_LIMIT   (1u << 26)      /* threads x chunks */

struct slot {
    unsigned char *p;
    uint32_t size;
};

/* One chain: what a thread hands to its successor. */
struct chain {
    struct slot *tab;          /* `chunks` blocks */
    uint64_t rng;
    uint64_t allocs;           /* by every generation so far */
    uint64_t generations;      /* threads that ran this chain */
    pid_t last_tid, pred_tid;  /* kernel ids of the chain's last two threads */
    unsigned index;
    sem_t done;                /* posted once, by the thread that saw the stop */
    char pad[64];
};

static uint64_t g_min = 8, g_max = 1000, g_chunks = 1000, g_rounds = 10;
static atomic_int g_stop;
static pthread_attr_t g_detached;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: " PROG " [seconds=2] [min=8] [max=1000] [chunks=1000] [rounds=10]\n"
            "              [seed=42] [threads=2]\n"
            "  seconds  run time, 1..%u\n"
            "  min, max block sizes are drawn from [min, max), 1 <= min <= max <= %u\n"
            "  chunks   live blocks per thread, 1..%u\n"
            "  rounds   each thread does rounds x chunks replacements, then starts\n"
            "           its successor and exits (positive)\n"
            "  seed     PRNG seed (non-negative integer)\n"
            "  threads  concurrent chains, 1..%u (threads x chunks <= %u)\n",
            SECONDS_LIMIT, SIZE_LIMIT, CHUNKS_LIMIT, THREADS_LIMIT, TOTAL_LIMIT);
}

/* The two bytes written at the start of a block: they depend on its address
 * and on its slot, so a block handed out twice is noticed. */
static inline uint16_t mark_of(const void *p, uint32_t slot)
{
    uint64_t a = (uint64_t)(uintptr_t)p;
    return (uint16_t)((a >> 4) ^ (a >> 20) ^ (slot * 0x9E37u) ^ 0xA5C3u);
}

static inline void mark(unsigned char *p, uint32_t size, uint32_t slot)
{
    uint16_t m = mark_of(p, slot);
    p[0] = (unsigned char)m;
    if (size > 1)
        p[1] = (unsigned char)(m >> 8);
}

static inline void check(const struct slot *s, uint32_t slot, const char *when)
{
    uint16_t m = mark_of(s->p, slot);
    int ok = s->p[0] == (unsigned char)m && (s->size < 2 || s->p[1] == (unsigned char)(m >> 8));
    if (!ok) {
        fprintf(stderr, PROG ": heap corruption (%s): slot %" PRIu32 " (ptr %p, size %" PRIu32
                ") does not hold what was written into it\n", when, slot, (void *)s->p, s->size);
        fatal();
    }
}

static inline uint32_t random_size(uint64_t r)
{
    if (g_min == g_max)
        return (uint32_t)g_min;
    return (uint32_t)(g_min + below(r, g_max - g_min));
}

static pid_t my_tid(void)
{
    return (pid_t)syscall(SYS_gettid);
}

static void chain_done(struct chain *c)
{
    c->last_tid = my_tid();
    sem_post(&c->done);
}

static void *chain_thread(void *arg)
{
    struct chain *c = arg;

    /* Created just before the stop: end the chain here. */
    if (atomic_load_explicit(&g_stop, memory_order_relaxed)) {
        chain_done(c);
        return NULL;
    }
    c->generations++;

    struct slot *tab = c->tab;
    const uint64_t chunks = g_chunks, n = g_rounds * g_chunks;
    const uint32_t base = c->index * (uint32_t)chunks;
    uint64_t rng = c->rng, done = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t r = rng_next(&rng);
        uint32_t v = (uint32_t)below(r, chunks);
        struct slot *s = &tab[v];
        check(s, base + v, "before free");
        free(s->p);
        uint32_t size = random_size(r << 32);
        unsigned char *p = malloc(size);
        if (p == NULL) {
            fprintf(stderr, PROG ": malloc(%" PRIu32 ") failed in chain %u\n", size, c->index);
            fatal();
        }
        mark(p, size, base + v);
        s->p = p;
        s->size = size;
        done++;
        if (atomic_load_explicit(&g_stop, memory_order_relaxed))
            break;
    }
    c->rng = rng;
    c->allocs += done;

    if (atomic_load_explicit(&g_stop, memory_order_relaxed)) {
        chain_done(c);
        return NULL;
    }
    /* Hand the chain to a new thread and exit without waiting for it.  The
     * thread limit can be reached for a moment while exited threads are
     * still being torn down: retry then. */
    c->pred_tid = my_tid();
    pthread_t next;
    int rc, tries = 0;
    while ((rc = pthread_create(&next, &g_detached, chain_thread, c)) == EAGAIN && tries++ < 10000)
        sched_yield();
    if (rc != 0) {
        fprintf(stderr, PROG ": pthread_create (chain %u): %s\n", c->index, strerror(rc));
        fatal();
    }
    return NULL;
}

static void sleep_sec(uint64_t secs)
{
    struct timespec ts = { .tv_sec = (time_t)secs, .tv_nsec = 0 };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* Has the thread with kernel id tid exited?  /proc/self/task/TID goes away
 * when it has. */
static int tid_gone(pid_t tid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%ld", (long)tid);
    return tid <= 0 || access(path, F_OK) != 0;
}

/* Wait (up to 10 s) until the last two threads of every chain have exited:
 * they may still be running their exit path (the allocator's thread-exit
 * work among it) after `done` was posted.  Earlier generations exited
 * long before.  Nobody joins them: they are detached. */
static void wait_for_exits(const struct chain *chains, unsigned n)
{
    for (unsigned t = 0; t < n; t++) {
        for (int ms = 0; !(tid_gone(chains[t].last_tid) && tid_gone(chains[t].pred_tid)); ms++) {
            if (ms == 10000) {
                fprintf(stderr, PROG ": warning: chain %u's last threads are still alive"
                        " 10 s after the stop\n", t);
                return;
            }
            struct timespec ts = { 0, 1000000 };
            nanosleep(&ts, NULL);
        }
    }
}

int main(int argc, char **argv)
{
    uint64_t seconds = 2, seed = 42, nthreads = 2;

    bench_check_args(argc, argv, 7);
    arg_or_die(argc, argv, 1, "seconds", 1, SECONDS_LIMIT, &seconds);
    arg_or_die(argc, argv, 2, "min", 1, SIZE_LIMIT, &g_min);
    arg_or_die(argc, argv, 3, "max", 1, SIZE_LIMIT, &g_max);
    arg_or_die(argc, argv, 4, "chunks", 1, CHUNKS_LIMIT, &g_chunks);
    arg_or_die(argc, argv, 5, "rounds", 1, UINT64_MAX / CHUNKS_LIMIT, &g_rounds);
    arg_or_die(argc, argv, 6, "seed", 0, UINT64_MAX, &seed);
    arg_or_die(argc, argv, 7, "threads", 1, THREADS_LIMIT, &nthreads);
    range_or_die("min", g_min, "max", g_max);
    if (nthreads * g_chunks > TOTAL_LIMIT) {
        fprintf(stderr, PROG ": threads x chunks must not exceed %u\n", TOTAL_LIMIT);
        usage(stderr);
        return 2;
    }

    const unsigned n = (unsigned)nthreads;
    const uint64_t total = nthreads * g_chunks;
    struct chain *chains = calloc(n, sizeof *chains);
    struct slot *all = malloc((size_t)total * sizeof *all);
    if (chains == NULL || all == NULL) {
        fprintf(stderr, PROG ": out of memory\n");
        return 1;
    }
    if (pthread_attr_init(&g_detached) != 0 ||
        pthread_attr_setdetachstate(&g_detached, PTHREAD_CREATE_DETACHED) != 0) {
        fprintf(stderr, PROG ": pthread_attr_init failed\n");
        return 1;
    }

    /* Warm-up in main: allocate, shuffle, replace 4 x total at random.  The
     * marks are written once the blocks are in their final slots. */
    uint64_t rng = seed;
    for (uint64_t i = 0; i < total; i++) {
        uint32_t size = random_size(rng_next(&rng));
        all[i].p = malloc(size);
        all[i].size = size;
        if (all[i].p == NULL) {
            fprintf(stderr, PROG ": malloc(%" PRIu32 ") failed during warm-up\n", size);
            return 1;
        }
    }
    for (uint64_t i = total; i > 1; i--) {
        uint64_t j = below(rng_next(&rng), i);
        struct slot t = all[j];
        all[j] = all[i - 1];
        all[i - 1] = t;
    }
    for (uint64_t i = 0; i < 4 * total; i++) {
        uint64_t r = rng_next(&rng);
        uint64_t v = below(r, total);
        free(all[v].p);
        uint32_t size = random_size(r << 32);
        all[v].p = malloc(size);
        all[v].size = size;
        if (all[v].p == NULL) {
            fprintf(stderr, PROG ": malloc(%" PRIu32 ") failed during warm-up\n", size);
            return 1;
        }
    }
    for (uint64_t i = 0; i < total; i++)
        mark(all[i].p, all[i].size, (uint32_t)i);

    for (unsigned t = 0; t < n; t++) {
        struct chain *c = &chains[t];
        c->index = t;
        c->tab = all + (size_t)t * g_chunks;
        c->rng = rng_next(&rng);
        if (sem_init(&c->done, 0, 0) != 0) {
            fprintf(stderr, PROG ": sem_init: %s\n", strerror(errno));
            return 1;
        }
    }

    struct bench_faults f0 = faults_now();
    double t0 = now_sec();
    for (unsigned t = 0; t < n; t++) {
        pthread_t tid;
        int rc = pthread_create(&tid, &g_detached, chain_thread, &chains[t]);
        if (rc != 0) {
            fprintf(stderr, PROG ": pthread_create (chain %u): %s\n", t, strerror(rc));
            fatal();
        }
    }

    sleep_sec(seconds);
    atomic_store_explicit(&g_stop, 1, memory_order_relaxed);

    for (unsigned t = 0; t < n; t++) {
        while (sem_wait(&chains[t].done) != 0) {
            if (errno != EINTR) {
                fprintf(stderr, PROG ": sem_wait: %s\n", strerror(errno));
                fatal();
            }
        }
    }
    double t1 = now_sec();
    struct bench_faults df = faults_since(f0);

    wait_for_exits(chains, n);

    uint64_t allocs = 0, generations = 0;
    for (unsigned t = 0; t < n; t++) {
        allocs += chains[t].allocs;
        generations += chains[t].generations;
        sem_destroy(&chains[t].done);
    }
    for (uint64_t i = 0; i < total; i++) {
        check(&all[i], (uint32_t)i, "final");
        free(all[i].p);
    }
    free(all);
    free(chains);
    pthread_attr_destroy(&g_detached);

    double secs = t1 - t0;
    if (secs < 1e-9)
        secs = 1e-9;
    printf("Throughput = %" PRIu64 " ops/s (seconds=%" PRIu64 ", min=%" PRIu64 ", max=%" PRIu64
           ", chunks=%" PRIu64 ", rounds=%" PRIu64 ", seed=%" PRIu64 ", threads=%" PRIu64
           ", allocs=%" PRIu64 ", threads_created=%" PRIu64 ", time=%.3f s" FAULTS_FMT ")\n",
           (uint64_t)((double)allocs / secs), seconds, g_min, g_max, g_chunks, g_rounds, seed,
           nthreads, allocs, generations, secs, FAULTS_ARGS(df));
    return 0;
}
