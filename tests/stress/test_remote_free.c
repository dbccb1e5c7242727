/* Remote frees under contention.
 *
 * test_remote_free_contention
 *     4 producer threads allocate 8000 blocks each (x STRESS_SCALE) over
 *     Tiny, L2 and L2.5, pattern them and push them, in batches of 32, onto
 *     one shared queue; 4 consumer threads take them off in batches of 8 (so
 *     the blocks of one producer batch, often neighbours in one slab, are
 *     freed by several consumers at once), check the pattern and free them.  The producers keep allocating
 *     and freeing a local working set meanwhile, so each owner collects remote
 *     frees from slabs that other threads are still pushing onto.  Every block
 *     must arrive intact and every block must be freed exactly once.
 *
 * test_remote_free_reuse
 *     The main thread allocates a batch (~35 MiB, the same sizes every round),
 *     then blocks while 3 freer threads free all of it (interleaved, so they
 *     free into the same slabs concurrently), then allocates the next batch.
 *     Over 12 rounds (x STRESS_SCALE) the owner must reuse what was freed
 *     remotely: the number of SuperSlabs in use (hak_get_info: HOT +
 *     DRAINING) must stay within a quarter batch of round 1's and must not
 *     trend upwards (the fewest of the later rounds against the earlier's),
 *     nor must the resident size grow (by more than 16 MiB; with the heap
 *     profiler on, by one batch more: see the test).
 *
 * test_remote_free_batch_exit, test_remote_free_batch_trim
 *     A thread that frees another thread's blocks holds the last of them
 *     back, not yet on their slab (its batch of remote frees,
 *     hakmem_remote.h).  A freer frees main's 16 MiB of Tiny and 4 MiB of
 *     L2 blocks, last a run of 32 from the middle (whose SuperSlab holds
 *     nothing else), then exits (or calls malloc_trim and stays); after
 *     main's own malloc_trim, no more SuperSlabs may be in use than before
 *     the blocks were made: a block held back keeps its SuperSlab in use.
 *
 * test_remote_free_batch_late_free
 *     The same check for frees made after the thread's heap has left: a
 *     thread frees its own blocks from a key destructor in glibc's last
 *     round of destructors (as glibc's own __libc_thread_freeres does after
 *     them all).  They are remote frees then, and a batch started there
 *     would never be pushed.
 *
 * Worker threads never call cmocka assertions; they count problems in
 * stress_errors (stress_common.h), which the test checks at the end. */
#include <limits.h>
#include <malloc.h>
#include <pthread.h>
#include <stdlib.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "hakmem.h"
#include "stress_common.h"

static void print_info(const char *when)
{
    hak_info_t in;
    hak_get_info(&in);
    print_message("%s: SuperSlabs hot %zu draining %zu free %zu; heaps %zu (%zu abandoned); RSS %zu KiB\n",
                  when, in.ss_hot, in.ss_draining, in.ss_free, in.heaps, in.heaps_abandoned,
                  st_rss_bytes() >> 10);
}

static void info_ss(size_t *in_use, size_t *draining)
{
    hak_info_t in;
    hak_get_info(&in);
    *in_use = in.ss_hot + in.ss_draining;
    if (draining) *draining = in.ss_draining;
}

/* ==== contention: producers -> shared queue -> consumers ================= */
#define NPROD          4
#define NCONS          4
#define PROD_ITEMS     ((uint64_t)st_scaled(8000, 1000))   /* per producer */
#define PUSH_BATCH     32
#define POP_BATCH      8
#define LOCAL_WINDOW   64
#define QCAP           2048

static struct {
    pthread_mutex_t mu;
    pthread_cond_t  not_empty, not_full;
    item_t          buf[QCAP];
    size_t          head, count;
    int             closed;
} q = { .mu = PTHREAD_MUTEX_INITIALIZER, .not_empty = PTHREAD_COND_INITIALIZER,
        .not_full = PTHREAD_COND_INITIALIZER };

static atomic_long n_produced, n_consumed;

static void q_push(const item_t *items, size_t n)
{
    pthread_mutex_lock(&q.mu);
    while (q.count + n > QCAP) pthread_cond_wait(&q.not_full, &q.mu);
    for (size_t i = 0; i < n; i++) q.buf[(q.head + q.count + i) % QCAP] = items[i];
    q.count += n;
    pthread_cond_broadcast(&q.not_empty);
    pthread_mutex_unlock(&q.mu);
}

/* Up to max items; 0 once the queue is closed and empty. */
static size_t q_pop(item_t *out, size_t max)
{
    pthread_mutex_lock(&q.mu);
    while (q.count == 0 && !q.closed) pthread_cond_wait(&q.not_empty, &q.mu);
    size_t n = q.count < max ? q.count : max;
    for (size_t i = 0; i < n; i++) out[i] = q.buf[(q.head + i) % QCAP];
    q.head = (q.head + n) % QCAP;
    q.count -= n;
    if (n) pthread_cond_broadcast(&q.not_full);
    pthread_mutex_unlock(&q.mu);
    return n;
}

static void q_close(void)
{
    pthread_mutex_lock(&q.mu);
    q.closed = 1;
    pthread_cond_broadcast(&q.not_empty);
    pthread_mutex_unlock(&q.mu);
}

static void *producer(void *arg)
{
    uint64_t id = (uint64_t)(uintptr_t)arg;
    st_rng r;
    st_rng_seed(&r, stress_seed() * 31 + id);
    item_t local[LOCAL_WINDOW];
    memset(local, 0, sizeof local);
    item_t batch[PUSH_BATCH];
    size_t nb = 0;
    for (uint64_t seq = 0; seq < PROD_ITEMS; seq++) {
        uint64_t tag = (id << 40) | seq;
        if (item_new(&batch[nb], st_mixed_size(&r), tag, "producer"))
            nb++;
        if (nb == PUSH_BATCH) {
            q_push(batch, nb);
            atomic_fetch_add(&n_produced, (long)nb);
            nb = 0;
        }
        /* The owner's own traffic, into the same slabs remote frees land in. */
        if (st_chance(&r, 50)) {
            item_t *l = &local[st_next(&r) % LOCAL_WINDOW];
            item_free(l, "producer-local");
            item_new(l, st_mixed_size(&r), tag | (1ull << 39), "producer-local");
        }
    }
    if (nb) {
        q_push(batch, nb);
        atomic_fetch_add(&n_produced, (long)nb);
    }
    for (size_t i = 0; i < LOCAL_WINDOW; i++) item_free(&local[i], "producer-local-end");
    return NULL;
}

static void *consumer(void *arg)
{
    st_rng r;
    st_rng_seed(&r, stress_seed() * 37 + (uint64_t)(uintptr_t)arg);
    item_t got[POP_BATCH];
    size_t n;
    while ((n = q_pop(got, POP_BATCH)) != 0) {
        for (size_t i = 0; i < n; i++) item_free(&got[i], "consumer");
        atomic_fetch_add(&n_consumed, (long)n);
        /* A consumer allocates a little too (its own heap, its own slabs). */
        if (st_chance(&r, 10)) {
            item_t mine;
            if (item_new(&mine, st_range(&r, 1, 4096), 0xC0, "consumer-own"))
                item_free(&mine, "consumer-own");
        }
    }
    return NULL;
}

static void test_remote_free_contention(void **state)
{
    (void)state;
    long errs0 = atomic_load(&stress_errors);
    atomic_store(&n_produced, 0);
    atomic_store(&n_consumed, 0);
    q.head = q.count = 0;
    q.closed = 0;

    pthread_t pt[NPROD], ct[NCONS];
    for (uintptr_t i = 0; i < NCONS; i++)
        assert_int_equal(pthread_create(&ct[i], NULL, consumer, (void *)i), 0);
    for (uintptr_t i = 0; i < NPROD; i++)
        assert_int_equal(pthread_create(&pt[i], NULL, producer, (void *)(i + 1)), 0);
    for (int i = 0; i < NPROD; i++) assert_int_equal(pthread_join(pt[i], NULL), 0);
    q_close();
    for (int i = 0; i < NCONS; i++) assert_int_equal(pthread_join(ct[i], NULL), 0);

    print_info("after contention");
    long prod = atomic_load(&n_produced), cons = atomic_load(&n_consumed);
    print_message("contention: %ld blocks produced, %ld consumed\n", prod, cons);
    assert_int_equal(prod, (long)NPROD * PROD_ITEMS);
    assert_int_equal(cons, prod);
    assert_int_equal(q.count, 0);
    assert_int_equal(atomic_load(&stress_errors) - errs0, 0);
}

/* ==== reuse: the owner blocks while others free its whole batch ========= */
#define REUSE_ROUNDS  ((size_t)st_scaled(12, 4))
#define REUSE_BLOCKS  2000
#define NFREERS       3

static item_t reuse_items[REUSE_BLOCKS];
static pthread_barrier_t reuse_start, reuse_done;
static atomic_int reuse_stop;

static void *freer(void *arg)
{
    size_t k = (size_t)(uintptr_t)arg;
    for (;;) {
        pthread_barrier_wait(&reuse_start);
        if (atomic_load(&reuse_stop)) break;
        /* Interleaved: neighbouring blocks go to different freers. */
        for (size_t i = k; i < REUSE_BLOCKS; i += NFREERS) item_free(&reuse_items[i], "freer");
        pthread_barrier_wait(&reuse_done);
    }
    return NULL;
}

static void test_remote_free_reuse(void **state)
{
    (void)state;
    long errs0 = atomic_load(&stress_errors);
    assert_int_equal(pthread_barrier_init(&reuse_start, NULL, NFREERS + 1), 0);
    assert_int_equal(pthread_barrier_init(&reuse_done, NULL, NFREERS + 1), 0);
    atomic_store(&reuse_stop, 0);
    pthread_t ft[NFREERS];
    for (uintptr_t i = 0; i < NFREERS; i++)
        assert_int_equal(pthread_create(&ft[i], NULL, freer, (void *)i), 0);

    const size_t rounds = REUSE_ROUNDS;
    size_t *ss = calloc(rounds, sizeof *ss), *rss = calloc(rounds, sizeof *rss), bytes = 0;
    assert_non_null(ss);
    assert_non_null(rss);
    print_info("reuse start");
    for (size_t round = 0; round < rounds; round++) {
        st_rng r;
        st_rng_seed(&r, stress_seed() + 77);   /* the same batch every round */
        bytes = 0;
        for (size_t i = 0; i < REUSE_BLOCKS; i++) {
            size_t n = st_mixed_size(&r);
            item_new(&reuse_items[i], n, ((uint64_t)round << 32) | i, "owner");
            bytes += n;
        }
        info_ss(&ss[round], NULL);
        rss[round] = st_rss_bytes();
        pthread_barrier_wait(&reuse_start);    /* the freers free it all ... */
        pthread_barrier_wait(&reuse_done);     /* ... while we wait */
    }
    atomic_store(&reuse_stop, 1);
    pthread_barrier_wait(&reuse_start);
    for (int i = 0; i < NFREERS; i++) assert_int_equal(pthread_join(ft[i], NULL), 0);
    pthread_barrier_destroy(&reuse_start);
    pthread_barrier_destroy(&reuse_done);

    /* Rounds 2..mid and mid+1..rounds: the fewest SuperSlabs of each half. */
    const size_t mid = 1 + (rounds - 1) / 2;
    size_t ss_max = 0, early_floor = SIZE_MAX, late_floor = SIZE_MAX;
    for (size_t i = 0; i < rounds; i++) if (ss[i] > ss_max) ss_max = ss[i];
    for (size_t i = 1; i < mid; i++) if (ss[i] < early_floor) early_floor = ss[i];
    for (size_t i = mid; i < rounds; i++) if (ss[i] < late_floor) late_floor = ss[i];
    print_message("reuse: batch %zu KiB; SuperSlabs in use round 1 %zu, 2 %zu, %zu %zu, max %zu; "
                  "fewest in rounds 2-%zu %zu, in %zu-%zu %zu; RSS round 2 %zu KiB, round %zu %zu KiB\n",
                  bytes >> 10, ss[0], ss[1], rounds, ss[rounds - 1], ss_max, mid, early_floor,
                  mid + 1, rounds, late_floor, rss[1] >> 10, rounds, rss[rounds - 1] >> 10);
    assert_int_equal(atomic_load(&stress_errors) - errs0, 0);
    /* One batch needs ss[0]; memory freed remotely must be reused, so later
     * rounds need at most a quarter batch more (layout noise, and the empty
     * slabs each class keeps queued for its next refills), not one batch more
     * per round.  CI once saw 56 against 51 in the profiling row. */
    const size_t ss_bound = ss[0] + ss[0] / 4 + 4;
    for (size_t i = 1; i < rounds; i++) {
        if (ss[i] > ss_bound)
            fail_msg("round %zu: %zu SuperSlabs in use, round 1 needed %zu", i + 1, ss[i], ss[0]);
    }
    /* That bound alone lets a slow leak pass: one SuperSlab per round stays
     * under it for the first ss[0] / 4 rounds.  A leak and noise look
     * different: noise lifts single rounds (layout, empty slabs queued for
     * the next refills: the 56 against 51 CI saw), and what the test before
     * this one left behind drains away, so the count falls; a leak lifts
     * every later round, the fewest included.  So the fewest SuperSlabs of
     * the second half of the rounds after the first may exceed the fewest
     * of the first half by 2 plus one per 16 rounds.  A leak of one per
     * round lifts it by about half the rounds (6 at 12 rounds, against 2);
     * one per 4 rounds fails from about 40 rounds on (STRESS_SCALE=4), once
     * no leftovers hide it.  Slower growth passes: with HAKMEM_PROFILE this
     * test alone has seen about one more per 10 rounds, and 2 more over 192
     * rounds after the first test. */
    if (late_floor > early_floor + 2 + rounds / 16)
        fail_msg("SuperSlabs in use grow: at least %zu in rounds 2-%zu, %zu in rounds %zu-%zu",
                 early_floor, mid, late_floor, mid + 1, rounds);
    /* The resident size may not grow by more than 16 MiB either.  With the
     * heap profiler on (HAKMEM_PROFILE), sampled blocks live in the
     * profiler's heap, and which blocks are sampled changes every round
     * (sampling goes by bytes, so most big blocks are): main's heap and the
     * profiler's each come to hold slabs for their changing share of the
     * same classes, up to one batch between them (seen: 18-22 MiB over 12
     * rounds, 34 MiB over 96), which the purge delay gives back later. */
    const char *prof = getenv("HAKMEM_PROFILE");
    size_t rss_slack = ((size_t)16 << 20) + (prof != NULL && *prof != '\0' ? bytes : 0);
    if (rss[rounds - 1] > rss[1] + rss_slack)
        fail_msg("resident size grew from %zu KiB in round 2 to %zu KiB in round %zu (bound: +%zu KiB)",
                 rss[1] >> 10, rss[rounds - 1] >> 10, rounds, rss_slack >> 10);
    free(ss);
    free(rss);
}

/* ==== a freer's batch reaches its slabs ===================================== */
#define HANDOFF_SMALL 262144    /* 64 B: 16 MiB of Tiny blocks */
#define HANDOFF_MID   1024      /* 4 KiB: 4 MiB of L2 blocks */
#define HANDOFF_LAST  (HANDOFF_SMALL / 2)   /* freed last: a SuperSlab of these blocks only */
static void *handoff[HANDOFF_SMALL + HANDOFF_MID];
static pthread_barrier_t handoff_checked;

static void *handoff_freer(void *arg)
{
    bool stay = arg != NULL;
    for (size_t i = 0; i < HANDOFF_SMALL + HANDOFF_MID; i++)
        if (i < HANDOFF_LAST || i >= HANDOFF_LAST + 32) free(handoff[i]);
    for (size_t i = HANDOFF_LAST; i < HANDOFF_LAST + 32; i++) free(handoff[i]);
    if (stay) {
        malloc_trim(0);
        pthread_barrier_wait(&handoff_checked);     /* main checks ... */
        pthread_barrier_wait(&handoff_checked);     /* ... with this thread alive */
    }
    return NULL;
}

/* main's or a worker's blocks for the freers; false if malloc failed. */
static bool handoff_alloc(void)
{
    for (size_t i = 0; i < HANDOFF_SMALL + HANDOFF_MID; i++) {
        handoff[i] = malloc(i < HANDOFF_SMALL ? 64 : 4096);
        if (handoff[i] == NULL) return false;
        *(volatile char *)handoff[i] = 1;
    }
    return true;
}

/* SuperSlabs in use once everything free that main's malloc_trim reaches
 * has gone back. */
static size_t ss_trimmed(void)
{
    size_t n;
    malloc_trim(0);
    info_ss(&n, NULL);
    return n;
}

static void check_reached(size_t before, size_t after, const char *when)
{
    print_message("batch (%s): SuperSlabs in use %zu before, %zu after\n", when, before, after);
    if (after > before)
        fail_msg("%zu SuperSlabs in use after %s, %zu before: blocks freed there never "
                 "reached their slabs", after, when, before);
}

static void handoff_run(bool stay)
{
    size_t before = ss_trimmed();
    assert_true(handoff_alloc());
    if (stay) assert_int_equal(pthread_barrier_init(&handoff_checked, NULL, 2), 0);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, handoff_freer, stay ? &t : NULL), 0);
    if (stay) pthread_barrier_wait(&handoff_checked);
    else assert_int_equal(pthread_join(t, NULL), 0);
    size_t after = ss_trimmed();
    if (stay) {
        pthread_barrier_wait(&handoff_checked);
        assert_int_equal(pthread_join(t, NULL), 0);
        pthread_barrier_destroy(&handoff_checked);
    }
    check_reached(before, after, stay ? "the freer called malloc_trim and stayed"
                                      : "the freer exited");
}

/* A destructor that re-arms itself until glibc's last round
 * (PTHREAD_DESTRUCTOR_ITERATIONS, 4), then frees what its thread made. */
static pthread_key_t late_key;
static void late_free(void *arg)
{
    int *round = arg;
    if (++*round < PTHREAD_DESTRUCTOR_ITERATIONS) {
        pthread_setspecific(late_key, round);
        return;
    }
    handoff_freer(NULL);
}

static void *late_owner(void *arg)
{
    static int round;
    (void)arg;
    round = 0;
    if (!handoff_alloc()) {
        stress_fail("late_owner: malloc failed");
        return NULL;
    }
    pthread_setspecific(late_key, &round);
    return NULL;
}

static void test_remote_free_batch_late_free(void **state)
{
    (void)state;
    long errs0 = atomic_load(&stress_errors);
    assert_int_equal(pthread_key_create(&late_key, late_free), 0);
    size_t before = ss_trimmed();
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, late_owner, NULL), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    size_t after = ss_trimmed();
    pthread_key_delete(late_key);
    assert_int_equal(atomic_load(&stress_errors) - errs0, 0);
    check_reached(before, after, "a thread freed its blocks in its last destructor round");
}

static void test_remote_free_batch_exit(void **state)
{
    (void)state;
    handoff_run(false);
}

static void test_remote_free_batch_trim(void **state)
{
    (void)state;
    handoff_run(true);
}

int main(void)
{
    struct CMUnitTest tests[] = {
        cmocka_unit_test(test_remote_free_contention),
        cmocka_unit_test(test_remote_free_reuse),
        cmocka_unit_test(test_remote_free_batch_exit),
        cmocka_unit_test(test_remote_free_batch_trim),
        cmocka_unit_test(test_remote_free_batch_late_free),
    };
    return st_run_group_tests(tests, NULL, NULL);
}
