/* bench_xthread — cross-thread producer/consumer: every block is allocated by
 * one thread and freed by another.
 *
 *   bench_xthread [seconds=2] [min=16] [max=2048] [batch=256] [seed=42] [pairs=1]
 *
 * `pairs` producer/consumer pairs run at once, each with its own FIFO and
 * seed (seed + its index): 2 x pairs threads, for thread scaling; what
 * follows describes one pair.
 * The producer thread allocates blocks of random size in [min, max], writes an
 * 8-byte cookie (derived from the address, size and sequence number) at the
 * start of each block and a check byte at its end, and collects the pointers
 * into batches of `batch`.  Batches go through a bounded FIFO of QCAP (64)
 * batch slots to the consumer thread, which verifies and frees every block.
 * The producer waits while the FIFO is full, so at most about
 * (QCAP + 1) * batch blocks are live at any time.
 *
 * The FIFO is a ring of preallocated slots guarded by one mutex and two
 * condition variables.  Each side fills or drains a slot in place outside the
 * lock and takes the lock once per batch (to publish it and, if needed, wait
 * for the next slot), so the queue costs a few tens of nanoseconds per batch,
 * small next to `batch` mallocs or frees.
 *
 * The producer reads the clock once per batch; the first batch completed
 * after `seconds` is its last.  It publishes it and stops, and the consumer
 * drains the FIFO.  Time runs from just before both
 * threads are released until both have been joined, so it includes the drain.
 *
 * The single result line on stdout is
 *   Throughput = N ops/s (seconds=..., min=..., max=..., batch=..., seed=...,
 *                         pairs=..., blocks=..., time=T s, minflt=..., majflt=...)
 * where N = (mallocs + frees of every pair) / time; every malloc is matched by a free;
 * minflt / majflt are the page faults of the timed region.
 * Queue statistics go to stderr.  Exit status: 0 ok, 1 allocation failure or
 * detected heap corruption, 2 bad arguments. */

#include <pthread.h>

#define PROG          "bench_xthread"
#include "bench_common.h"

#define QCAP          64u
#define SECONDS_LIMIT 86400u
#define SIZE_LIMIT    (1u << 26)     /* 64 MiB */
#define BATCH_LIMIT   (1u << 16)
#define PAIRS_LIMIT   256u

struct item {
    unsigned char *p;
    uint32_t size;
};

struct slot {
    uint64_t first_seq;      /* sequence number of items[0] */
    uint32_t n;
    struct item *items;      /* `batch` entries */
};

/* One producer/consumer pair: its FIFO and its counts. */
struct pair {
    pthread_mutex_t mu;
    pthread_cond_t not_full, not_empty;
    uint64_t head, tail;     /* slots [head, tail) are published */
    int done;                /* producer finished; set under mu */
    int prod_waiting, cons_waiting;
    uint64_t full_waits, empty_waits;
    uint64_t seed, produced, consumed;
    struct slot ring[QCAP];
};

static uint64_t g_seconds = 2, g_min = 16, g_max = 2048, g_batch = 256, g_seed = 42, g_pairs = 1;
static pthread_barrier_t g_start;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: " PROG " [seconds=2] [min=16] [max=2048] [batch=256] [seed=42] [pairs=1]\n"
            "  seconds  run time of the producer, 1..%u\n"
            "  min      smallest block size, 1..%u bytes\n"
            "  max      largest block size, min..%u bytes\n"
            "  batch    pointers per batch handed to the consumer, 1..%u\n"
            "  seed     PRNG seed (non-negative integer)\n"
            "  pairs    producer/consumer pairs running at once, 1..%u\n",
            SECONDS_LIMIT, SIZE_LIMIT, SIZE_LIMIT, BATCH_LIMIT, PAIRS_LIMIT);
}

static inline uint64_t cookie_of(const void *p, uint32_t size, uint64_t seq)
{
    return ((uint64_t)(uintptr_t)p ^ 0x3C6EF372FE94F82Bull) +
           (seq * 0x9E3779B97F4A7C15ull) + size;
}

static inline unsigned char tail_of(uint64_t cookie)
{
    return (unsigned char)((cookie >> 29) ^ 0xA7u);
}

/* Cookie in the first min(size, 8) bytes, check byte at the end (blocks of
 * 8 bytes or less carry the cookie only). */
static inline void fill(unsigned char *p, uint32_t size, uint64_t seq)
{
    uint64_t c = cookie_of(p, size, seq);
    memcpy(p, &c, size < sizeof c ? size : sizeof c);
    if (size > sizeof c)
        p[size - 1] = tail_of(c);
}

static inline void check(const struct item *it, uint64_t seq)
{
    uint64_t want = cookie_of(it->p, it->size, seq), got = want;
    size_t n = it->size < sizeof got ? it->size : sizeof got;
    memcpy(&got, it->p, n);
    int ok = got == want && (it->size <= sizeof got || it->p[it->size - 1] == tail_of(want));
    if (!ok) {
        fprintf(stderr,
                PROG ": heap corruption in block #%" PRIu64 " (ptr %p, size %" PRIu32
                "): head %016" PRIx64 " expected %016" PRIx64 "\n",
                seq, (void *)it->p, it->size, got, want);
        exit(1);
    }
}

static void *producer(void *arg)
{
    struct pair *q = arg;
    uint64_t rng = q->seed;
    const uint64_t span = g_max - g_min + 1;
    uint64_t seq = 0, slot_no = 0;

    pthread_barrier_wait(&g_start);
    const double deadline = now_sec() + (double)g_seconds;
    int last = 0;

    while (!last) {
        /* slot_no is ours: the consumer only reads slots in [head, tail). */
        struct slot *s = &q->ring[slot_no % QCAP];
        s->first_seq = seq;
        for (uint32_t i = 0; i < g_batch; i++) {
            uint64_t r = rng_next(&rng);
            uint32_t size = (uint32_t)(g_min + below(r, span));
            unsigned char *p = malloc(size);
            if (p == NULL) {
                fprintf(stderr, PROG ": malloc(%" PRIu32 ") failed after %" PRIu64
                        " blocks\n", size, seq);
                exit(1);
            }
            fill(p, size, seq);
            s->items[i].p = p;
            s->items[i].size = size;
            seq++;
        }
        s->n = (uint32_t)g_batch;
        last = now_sec() >= deadline;

        pthread_mutex_lock(&q->mu);
        q->tail = ++slot_no;
        if (last)
            q->done = 1;
        if (q->cons_waiting)
            pthread_cond_signal(&q->not_empty);
        while (!last && q->tail - q->head >= QCAP) {
            q->full_waits++;
            q->prod_waiting = 1;
            pthread_cond_wait(&q->not_full, &q->mu);
            q->prod_waiting = 0;
        }
        pthread_mutex_unlock(&q->mu);
    }
    q->produced = seq;
    return NULL;
}

static void *consumer(void *arg)
{
    struct pair *q = arg;
    uint64_t consumed = 0, slot_no = 0;

    pthread_barrier_wait(&g_start);
    pthread_mutex_lock(&q->mu);
    for (;;) {
        while (q->head == q->tail && !q->done) {
            q->empty_waits++;
            q->cons_waiting = 1;
            pthread_cond_wait(&q->not_empty, &q->mu);
            q->cons_waiting = 0;
        }
        if (q->head == q->tail)          /* done and drained */
            break;
        pthread_mutex_unlock(&q->mu);

        struct slot *s = &q->ring[slot_no % QCAP];
        if (s->first_seq != consumed) {
            fprintf(stderr, PROG ": queue out of order: batch starts at #%" PRIu64
                    ", expected #%" PRIu64 "\n", s->first_seq, consumed);
            exit(1);
        }
        for (uint32_t i = 0; i < s->n; i++) {
            check(&s->items[i], consumed);
            free(s->items[i].p);
            consumed++;
        }

        pthread_mutex_lock(&q->mu);
        q->head = ++slot_no;
        if (q->prod_waiting)
            pthread_cond_signal(&q->not_full);
    }
    pthread_mutex_unlock(&q->mu);
    q->consumed = consumed;
    return NULL;
}

int main(int argc, char **argv)
{
    bench_check_args(argc, argv, 6);
    arg_or_die(argc, argv, 1, "seconds", 1, SECONDS_LIMIT, &g_seconds);
    arg_or_die(argc, argv, 2, "min", 1, SIZE_LIMIT, &g_min);
    arg_or_die(argc, argv, 3, "max", g_min, SIZE_LIMIT, &g_max);
    arg_or_die(argc, argv, 4, "batch", 1, BATCH_LIMIT, &g_batch);
    arg_or_die(argc, argv, 5, "seed", 0, UINT64_MAX, &g_seed);
    arg_or_die(argc, argv, 6, "pairs", 1, PAIRS_LIMIT, &g_pairs);

    /* The pairs and their batch slots are set up before the clock starts and
     * freed after it stops; they are never touched by malloc/free in the
     * timed region. */
    struct pair *pairs = calloc((size_t)g_pairs, sizeof *pairs);
    struct item *items = calloc((size_t)g_pairs * QCAP * g_batch, sizeof *items);
    pthread_t *threads = calloc((size_t)g_pairs * 2, sizeof *threads);
    if (pairs == NULL || items == NULL || threads == NULL) {
        fprintf(stderr, PROG ": cannot allocate %" PRIu64 " x %u batch slots of %" PRIu64 "\n",
                g_pairs, QCAP, g_batch);
        return 1;
    }
    for (uint64_t k = 0; k < g_pairs; k++) {
        struct pair *q = &pairs[k];
        pthread_mutex_init(&q->mu, NULL);
        pthread_cond_init(&q->not_full, NULL);
        pthread_cond_init(&q->not_empty, NULL);
        q->seed = g_seed + k;
        for (unsigned i = 0; i < QCAP; i++)
            q->ring[i].items = items + ((size_t)k * QCAP + i) * g_batch;
    }

    if (pthread_barrier_init(&g_start, NULL, (unsigned)(2 * g_pairs + 1)) != 0) {
        fprintf(stderr, PROG ": pthread_barrier_init failed\n");
        return 1;
    }
    for (uint64_t k = 0; k < g_pairs; k++) {
        int e = pthread_create(&threads[2 * k], NULL, consumer, &pairs[k]);
        if (e == 0)
            e = pthread_create(&threads[2 * k + 1], NULL, producer, &pairs[k]);
        if (e != 0) {
            fprintf(stderr, PROG ": pthread_create: %s\n", strerror(e));
            return 1;
        }
    }
    struct bench_faults f0 = faults_now();
    double t0 = now_sec();
    pthread_barrier_wait(&g_start);
    for (uint64_t k = 0; k < 2 * g_pairs; k++)
        pthread_join(threads[k], NULL);
    double secs = now_sec() - t0;
    struct bench_faults df = faults_since(f0);
    pthread_barrier_destroy(&g_start);

    uint64_t produced = 0, consumed = 0, batches = 0, full_waits = 0, empty_waits = 0;
    for (uint64_t k = 0; k < g_pairs; k++) {
        if (pairs[k].consumed != pairs[k].produced) {
            fprintf(stderr, PROG ": pair %" PRIu64 ": consumer freed %" PRIu64
                    " blocks, producer allocated %" PRIu64 "\n",
                    k, pairs[k].consumed, pairs[k].produced);
            return 1;
        }
        produced += pairs[k].produced;
        consumed += pairs[k].consumed;
        batches += pairs[k].tail;
        full_waits += pairs[k].full_waits;
        empty_waits += pairs[k].empty_waits;
    }
    free(items);
    free(pairs);
    free(threads);
    if (secs < 1e-9)
        secs = 1e-9;
    uint64_t ops = produced + consumed;
    fprintf(stderr, PROG ": %" PRIu64 " blocks in %" PRIu64 " batches; producers waited "
            "on a full queue %" PRIu64 " times, consumers on an empty one %" PRIu64 " times\n",
            produced, batches, full_waits, empty_waits);
    printf("Throughput = %" PRIu64 " ops/s (seconds=%" PRIu64 ", min=%" PRIu64 ", max=%"
           PRIu64 ", batch=%" PRIu64 ", seed=%" PRIu64 ", pairs=%" PRIu64 ", blocks=%" PRIu64
           ", time=%.6f s" FAULTS_FMT ")\n",
           (uint64_t)((double)ops / secs), g_seconds, g_min, g_max, g_batch, g_seed, g_pairs,
           produced, secs, FAULTS_ARGS(df));
    return 0;
}
