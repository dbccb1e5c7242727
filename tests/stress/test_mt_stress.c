/* Multi-threaded stress of the malloc family with cross-thread frees.
 *
 * test_cross_thread_mix   8 threads allocate blocks of every tier (malloc,
 *                         calloc, aligned_alloc, posix_memalign, memalign),
 *                         pattern them from (address, size, thread), and pass
 *                         most of them to other threads through mutex-protected
 *                         inboxes; receivers verify, then free, realloc or
 *                         forward them.
 * test_producer_consumer  4 producers, 4 consumers: every free is remote, and
 *                         the RSS must stay bounded (remote frees get reused).
 * test_realloc_pingpong   pairs of threads take turns reallocating one block
 *                         across all tiers, each verifying the other's data.
 *
 * STRESS_SEED=N changes the random seed; STRESS_SCALE=X multiplies the
 * operations per thread (stress_common.h). */
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "stress_common.h"

/* ======================================================================= */
/* test_cross_thread_mix                                                    */
/* ======================================================================= */
#define MIX_THREADS     8
#define MIX_OPS         st_scaled(3000, 500)   /* allocations per thread */
#define MIX_LOCAL_SLOTS 64
#define MIX_INBOX_CAP   512
/* Live data stays in the hundreds of MiB (64 local slots + an inbox of 512
 * blocks per thread, ~80 KiB a block on average); the run stops early past
 * this much RSS growth. */
#define MIX_RSS_SLACK   ((size_t)3 << 30)

typedef struct {
    void    *p;
    size_t   size;
    uint64_t key;      /* pattern key: st_key(p, size, tag) */
    uint64_t tag;      /* thread that last wrote the pattern */
    int      origin;   /* thread that allocated (or last reallocated) it */
} mix_item;

typedef struct {
    pthread_mutex_t mu;
    mix_item        q[MIX_INBOX_CAP];
    unsigned        head, count;
} mix_inbox;

typedef struct {
    int      id;
    st_rng   rng;
    mix_item local[MIX_LOCAL_SLOTS];
    long     allocs, callocs, aligned, reallocs, frees, remote_frees, sent, received;
} mix_thread;

static mix_inbox  mix_inboxes[MIX_THREADS];
static mix_thread mix_threads[MIX_THREADS];
static atomic_int mix_finished;

static int mix_send(int dst, const mix_item *it)
{
    mix_inbox *b = &mix_inboxes[dst];
    int ok = 0;
    pthread_mutex_lock(&b->mu);
    if (b->count < MIX_INBOX_CAP) {
        b->q[(b->head + b->count) % MIX_INBOX_CAP] = *it;
        b->count++;
        ok = 1;
    }
    pthread_mutex_unlock(&b->mu);
    return ok;
}

/* Take everything queued for thread `id` (at most MIX_INBOX_CAP items). */
static unsigned mix_take(int id, mix_item *out)
{
    mix_inbox *b = &mix_inboxes[id];
    unsigned n = 0;
    pthread_mutex_lock(&b->mu);
    while (b->count) {
        out[n++] = b->q[b->head];
        b->head = (b->head + 1) % MIX_INBOX_CAP;
        b->count--;
    }
    pthread_mutex_unlock(&b->mu);
    return n;
}

static void mix_free(mix_thread *t, mix_item *it)
{
    if (!st_check(it->p, it->size, it->key, it->size, "free", it->tag)) {
        it->p = NULL;          /* leak it rather than hand garbage to free() */
        return;
    }
    if (it->origin != t->id) t->remote_frees++;
    t->frees++;
    free(it->p);
    it->p = NULL;
}

static void mix_stamp(mix_thread *t, mix_item *it)
{
    it->tag = (uint64_t)t->id;
    it->key = st_key(it->p, it->size, it->tag);
    st_fill(it->p, it->size, it->key);
}

static int mix_other(mix_thread *t)
{
    int d = (int)(st_next(&t->rng) % (MIX_THREADS - 1));
    return d >= t->id ? d + 1 : d;
}

/* Send to another thread, or free here when the inboxes tried are full. */
static void mix_pass_on(mix_thread *t, mix_item *it)
{
    for (int attempt = 0; attempt < 5; attempt++) {
        if (mix_send(mix_other(t), it)) {
            t->sent++;
            it->p = NULL;
            return;
        }
        if (attempt == 3) sched_yield();   /* let the receivers catch up */
    }
    mix_free(t, it);
}

/* Keep in a local slot; whatever was there is verified and freed or passed on. */
static void mix_keep(mix_thread *t, mix_item *it)
{
    mix_item *slot = &t->local[st_next(&t->rng) % MIX_LOCAL_SLOTS];
    if (slot->p) {
        if (st_chance(&t->rng, 40)) {
            mix_free(t, slot);
        } else if (st_check(slot->p, slot->size, slot->key, slot->size, "evict", slot->tag)) {
            mix_pass_on(t, slot);
        }
    }
    *slot = *it;
    it->p = NULL;
}

static void mix_realloc(mix_thread *t, mix_item *it)
{
    size_t nsize = st_rand_size(&t->rng);
    void *np = realloc(it->p, nsize);
    if (!np) {
        stress_fail("realloc(%p, %zu) failed", it->p, nsize);
        return;            /* old block still valid; caller frees it */
    }
    t->reallocs++;
    st_check_align(np, nsize, "realloc");
    /* The old contents (up to the smaller size) must have moved along. */
    size_t keep = it->size < nsize ? it->size : nsize;
    st_check(np, it->size, it->key, keep, "realloc-moved", it->tag);
    it->p = np;
    it->size = nsize;
    it->origin = t->id;
    mix_stamp(t, it);
}

static void mix_handle_received(mix_thread *t, mix_item *it, int finishing)
{
    t->received++;
    if (!st_check(it->p, it->size, it->key, it->size, "received", it->tag))
        return;            /* leak the corrupted block */
    if (finishing) { mix_free(t, it); return; }
    unsigned roll = (unsigned)(st_next(&t->rng) % 100);
    if (roll < 55) {
        mix_free(t, it);
    } else if (roll < 80) {
        mix_realloc(t, it);
        if (st_chance(&t->rng, 50)) mix_pass_on(t, it); else mix_keep(t, it);
    } else if (roll < 92) {
        mix_stamp(t, it);  /* rewrite with our own tag, then forward */
        mix_pass_on(t, it);
    } else {
        mix_keep(t, it);
    }
}

static void mix_drain(mix_thread *t, int finishing)
{
    mix_item got[MIX_INBOX_CAP];
    unsigned n = mix_take(t->id, got);
    for (unsigned i = 0; i < n; i++) mix_handle_received(t, &got[i], finishing);
}

static void *mix_worker(void *arg)
{
    mix_thread *t = arg;
    for (long i = 0; i < MIX_OPS; i++) {
        if ((i & 3) == 0) mix_drain(t, 0);
        if (i % 1024 == 0 && st_rss_guard()) break;

        mix_item it = { .size = st_rand_size(&t->rng), .origin = t->id };
        unsigned kind = (unsigned)(st_next(&t->rng) % 100);
        size_t align = 0;
        const char *fn = "malloc";
        if (kind < 10) {
            size_t n = 1 + (size_t)(st_next(&t->rng) % 4);
            it.size = (it.size + n - 1) / n * n;
            it.p = calloc(n, it.size / n);
            fn = "calloc";
            t->callocs++;
        } else if (kind < 16) {
            /* Aligned blocks of every tier, freed (often remotely) like any other. */
            align = (size_t)32 << (st_next(&t->rng) % 12);          /* 32 B .. 64 KiB */
            if (kind == 10) {
                fn = "aligned_alloc";
                it.size = (it.size + align - 1) / align * align;
                it.p = aligned_alloc(align, it.size);
            } else if (kind < 13) {
                fn = "posix_memalign";
                int rc = posix_memalign(&it.p, align, it.size);
                if (rc != 0) it.p = NULL;
            } else {
                fn = "memalign";
                it.p = memalign(align, it.size);
            }
            t->aligned++;
        } else {
            it.p = malloc(it.size);
        }
        t->allocs++;
        if (!it.p) {
            stress_fail("%s(%zu) returned NULL", fn, it.size);
            continue;
        }
        st_check_align(it.p, it.size, fn);
        if (align && ((uintptr_t)it.p & (align - 1)))
            stress_fail("MISALIGNED: %s(%zu, %zu) returned %p", fn, align, it.size, it.p);
        if (kind < 10) st_check_zero(it.p, it.size, "calloc");
        /* The usable size is at least the request, and all of it is ours:
         * now and then use every byte of it. */
        size_t usable = malloc_usable_size(it.p);
        if (usable < it.size)
            stress_fail("malloc_usable_size(%p) = %zu < requested %zu (%s)", it.p, usable, it.size, fn);
        else if (st_chance(&t->rng, 10))
            it.size = usable;
        mix_stamp(t, &it);

        if (st_chance(&t->rng, 70)) mix_pass_on(t, &it);
        else                        mix_keep(t, &it);
    }
    for (int s = 0; s < MIX_LOCAL_SLOTS; s++)
        if (t->local[s].p) mix_free(t, &t->local[s]);
    atomic_fetch_add(&mix_finished, 1);
    /* Nobody sends once every thread has finished its loop: drain until then. */
    while (atomic_load(&mix_finished) < MIX_THREADS) {
        mix_drain(t, 1);
        sched_yield();
    }
    mix_drain(t, 1);
    return NULL;
}

static void test_cross_thread_mix(void **state)
{
    (void)state;
    pthread_t th[MIX_THREADS];
    uint64_t seed = stress_seed();
    long errs0 = atomic_load(&stress_errors);
    atomic_store(&mix_finished, 0);
    for (int i = 0; i < MIX_THREADS; i++) {
        pthread_mutex_init(&mix_inboxes[i].mu, NULL);
        mix_inboxes[i].head = mix_inboxes[i].count = 0;
        memset(&mix_threads[i], 0, sizeof mix_threads[i]);
        mix_threads[i].id = i;
        st_rng_seed(&mix_threads[i].rng, seed * 131 + (uint64_t)i);
    }
    st_rss_guard_arm(MIX_RSS_SLACK);
    double t0 = st_now();
    for (int i = 0; i < MIX_THREADS; i++)
        assert_int_equal(pthread_create(&th[i], NULL, mix_worker, &mix_threads[i]), 0);
    for (int i = 0; i < MIX_THREADS; i++)
        assert_int_equal(pthread_join(th[i], NULL), 0);

    long allocs = 0, reallocs = 0, frees = 0, remote = 0, callocs = 0, aligned = 0;
    for (int i = 0; i < MIX_THREADS; i++) {
        allocs += mix_threads[i].allocs;
        callocs += mix_threads[i].callocs;
        aligned += mix_threads[i].aligned;
        reallocs += mix_threads[i].reallocs;
        frees += mix_threads[i].frees;
        remote += mix_threads[i].remote_frees;
        assert_int_equal(mix_inboxes[i].count, 0);
        pthread_mutex_destroy(&mix_inboxes[i].mu);
    }
    printf("  mix: %ld allocs (%ld calloc, %ld aligned), %ld reallocs, %ld frees (%ld cross-thread) in %.2fs, peak RSS %zu MiB\n",
           allocs, callocs, aligned, reallocs, frees, remote, st_now() - t0, atomic_load(&st_rss_peak) >> 20);
    assert_int_equal(atomic_load(&stress_errors) - errs0, 0);
    assert_int_equal(frees, allocs);      /* every block was freed exactly once */
    assert_true(remote * 100 >= frees * 50); /* most frees were cross-thread */
    assert_true(reallocs > allocs / 10);
}

/* ======================================================================= */
/* test_producer_consumer                                                   */
/* ======================================================================= */
#define PC_PAIRS   4
#define PC_BLOCKS  st_scaled(8000, 500)   /* per producer */
#define PC_CAP     64

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t  not_empty, not_full;
    mix_item        q[PC_CAP];
    unsigned        head, count;
    int             producers_left;
} pc_queue;

static pc_queue pc_queues[PC_PAIRS];
static atomic_long pc_consumed, pc_produced;
static atomic_int  pc_abort;      /* set when the RSS bound is exceeded */
static size_t      pc_rss_limit;

typedef struct { int id; st_rng rng; } pc_arg;

static void pc_push(pc_queue *q, const mix_item *it)
{
    pthread_mutex_lock(&q->mu);
    while (q->count == PC_CAP) pthread_cond_wait(&q->not_full, &q->mu);
    q->q[(q->head + q->count) % PC_CAP] = *it;
    q->count++;
    pthread_cond_signal(&q->not_empty);
    pthread_mutex_unlock(&q->mu);
}

static int pc_pop(pc_queue *q, mix_item *it)
{
    pthread_mutex_lock(&q->mu);
    while (q->count == 0 && q->producers_left > 0) pthread_cond_wait(&q->not_empty, &q->mu);
    if (q->count == 0) { pthread_mutex_unlock(&q->mu); return 0; }
    *it = q->q[q->head];
    q->head = (q->head + 1) % PC_CAP;
    q->count--;
    pthread_cond_signal(&q->not_full);
    pthread_mutex_unlock(&q->mu);
    return 1;
}

static void *pc_producer(void *arg)
{
    pc_arg *a = arg;
    for (long i = 0; i < PC_BLOCKS && !atomic_load_explicit(&pc_abort, memory_order_relaxed); i++) {
        mix_item it = { .size = st_rand_size_nolarge(&a->rng), .tag = (uint64_t)a->id, .origin = a->id };
        it.p = malloc(it.size);
        if (!it.p) { stress_fail("producer malloc(%zu) returned NULL", it.size); continue; }
        st_check_align(it.p, it.size, "producer");
        it.key = st_key(it.p, it.size, it.tag);
        st_fill(it.p, it.size, it.key);
        /* Spread over the consumers so each sees blocks of several producers. */
        pc_push(&pc_queues[(a->id + i) % PC_PAIRS], &it);
        atomic_fetch_add(&pc_produced, 1);
    }
    for (int c = 0; c < PC_PAIRS; c++) {
        pthread_mutex_lock(&pc_queues[c].mu);
        pc_queues[c].producers_left--;
        pthread_cond_broadcast(&pc_queues[c].not_empty);
        pthread_mutex_unlock(&pc_queues[c].mu);
    }
    return NULL;
}

#define PC_RSS_SLACK ((size_t)512 * 1024 * 1024)

static atomic_size_t pc_peak_rss;

static void *pc_consumer(void *arg)
{
    pc_arg *a = arg;
    mix_item it;
    long n = 0;
    while (pc_pop(&pc_queues[a->id], &it)) {
        if (st_check(it.p, it.size, it.key, it.size, "consumer", it.tag)) free(it.p);
        atomic_fetch_add(&pc_consumed, 1);
        if (a->id == 0 && ++n % 1000 == 0) {   /* sample the RSS while running */
            size_t rss = st_rss_bytes();
            if (rss > atomic_load(&pc_peak_rss)) atomic_store(&pc_peak_rss, rss);
            if (rss > pc_rss_limit) atomic_store(&pc_abort, 1);   /* fail fast */
        }
    }
    return NULL;
}

static void test_producer_consumer(void **state)
{
    (void)state;
    pthread_t prod[PC_PAIRS], cons[PC_PAIRS];
    pc_arg pa[PC_PAIRS], ca[PC_PAIRS];
    uint64_t seed = stress_seed();
    long errs0 = atomic_load(&stress_errors);
    atomic_store(&pc_consumed, 0);
    atomic_store(&pc_produced, 0);
    atomic_store(&pc_abort, 0);
    for (int i = 0; i < PC_PAIRS; i++) {
        pthread_mutex_init(&pc_queues[i].mu, NULL);
        pthread_cond_init(&pc_queues[i].not_empty, NULL);
        pthread_cond_init(&pc_queues[i].not_full, NULL);
        pc_queues[i].head = pc_queues[i].count = 0;
        pc_queues[i].producers_left = PC_PAIRS;
    }
    size_t rss0 = st_rss_bytes();
    atomic_store(&pc_peak_rss, rss0);
    pc_rss_limit = rss0 + PC_RSS_SLACK;
    double t0 = st_now();
    for (int i = 0; i < PC_PAIRS; i++) {
        pa[i].id = i; st_rng_seed(&pa[i].rng, seed * 7 + 1000 + (uint64_t)i);
        ca[i].id = i; st_rng_seed(&ca[i].rng, seed * 7 + 2000 + (uint64_t)i);
        assert_int_equal(pthread_create(&cons[i], NULL, pc_consumer, &ca[i]), 0);
        assert_int_equal(pthread_create(&prod[i], NULL, pc_producer, &pa[i]), 0);
    }
    for (int i = 0; i < PC_PAIRS; i++) assert_int_equal(pthread_join(prod[i], NULL), 0);
    for (int i = 0; i < PC_PAIRS; i++) assert_int_equal(pthread_join(cons[i], NULL), 0);
    size_t rss1 = st_rss_bytes();
    size_t peak = atomic_load(&pc_peak_rss);
    if (rss1 > peak) peak = rss1;
    printf("  producer/consumer: %ld blocks in %.2fs, RSS %zu KiB before, %zu KiB peak, %zu KiB after\n",
           (long)atomic_load(&pc_consumed), st_now() - t0, rss0 >> 10, peak >> 10, rss1 >> 10);
    for (int i = 0; i < PC_PAIRS; i++) {
        pthread_mutex_destroy(&pc_queues[i].mu);
        pthread_cond_destroy(&pc_queues[i].not_empty);
        pthread_cond_destroy(&pc_queues[i].not_full);
    }
    assert_int_equal(atomic_load(&stress_errors) - errs0, 0);
    assert_false(atomic_load(&pc_abort));   /* stopped early: RSS over the bound */
    assert_int_equal(atomic_load(&pc_produced), (long)PC_PAIRS * PC_BLOCKS);
    assert_int_equal(atomic_load(&pc_consumed), (long)PC_PAIRS * PC_BLOCKS);
    /* At most PC_PAIRS*PC_CAP (+ one per thread) blocks of <= 1 MiB are live at
     * any time (~270 MiB worst case, ~10 MiB typical), while ~1.3 GiB pass
     * through (x STRESS_SCALE): if remotely freed memory were never reused the RSS would blow
     * far past this bound. */
    assert_true(peak <= rss0 + PC_RSS_SLACK);
}

/* ======================================================================= */
/* test_realloc_pingpong                                                    */
/* ======================================================================= */
#define PP_PAIRS  2
#define PP_TURNS  st_scaled(1000, 100)   /* per thread */

typedef struct {
    atomic_int turn;   /* 0 or 1: whose turn it is */
    mix_item   blk;
} pp_baton;

typedef struct { pp_baton *b; int side; int id; st_rng rng; long turns; } pp_arg;

static void *pp_worker(void *arg)
{
    pp_arg *a = arg;
    for (long n = 0; n < PP_TURNS; n++) {
        while (atomic_load_explicit(&a->b->turn, memory_order_acquire) != a->side) sched_yield();
        mix_item *it = &a->b->blk;
        if (it->p && st_check(it->p, it->size, it->key, it->size, "pingpong", it->tag)) {
            size_t nsize = st_rand_size(&a->rng);
            void *np = realloc(it->p, nsize);
            if (!np) {
                stress_fail("realloc(%p, %zu) returned NULL", it->p, nsize);
            } else {
                st_check_align(np, nsize, "pingpong-realloc");
                st_check(np, it->size, it->key, it->size < nsize ? it->size : nsize, "pingpong-realloc", it->tag);
                it->p = np;
                it->size = nsize;
                it->tag = (uint64_t)a->id;
                it->key = st_key(np, nsize, it->tag);
                st_fill(np, nsize, it->key);
                a->turns++;
            }
        }
        atomic_store_explicit(&a->b->turn, 1 - a->side, memory_order_release);
    }
    return NULL;
}

static void test_realloc_pingpong(void **state)
{
    (void)state;
    static pp_baton batons[PP_PAIRS];
    pthread_t th[PP_PAIRS * 2];
    pp_arg args[PP_PAIRS * 2];
    uint64_t seed = stress_seed();
    long errs0 = atomic_load(&stress_errors);
    for (int p = 0; p < PP_PAIRS; p++) {
        atomic_store(&batons[p].turn, 0);
        batons[p].blk.size = 100;
        batons[p].blk.p = malloc(100);
        assert_non_null(batons[p].blk.p);
        batons[p].blk.tag = 1000;
        batons[p].blk.key = st_key(batons[p].blk.p, 100, 1000);
        st_fill(batons[p].blk.p, 100, batons[p].blk.key);
    }
    for (int i = 0; i < PP_PAIRS * 2; i++) {
        args[i] = (pp_arg){ .b = &batons[i / 2], .side = i % 2, .id = i, .turns = 0 };
        st_rng_seed(&args[i].rng, seed * 31 + 77 + (uint64_t)i);
        assert_int_equal(pthread_create(&th[i], NULL, pp_worker, &args[i]), 0);
    }
    long turns = 0;
    for (int i = 0; i < PP_PAIRS * 2; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        turns += args[i].turns;
    }
    for (int p = 0; p < PP_PAIRS; p++) {
        mix_item *it = &batons[p].blk;
        assert_true(st_check(it->p, it->size, it->key, it->size, "pingpong-final", it->tag));
        free(it->p);
    }
    assert_int_equal(atomic_load(&stress_errors) - errs0, 0);
    assert_int_equal(turns, (long)PP_PAIRS * 2 * PP_TURNS);
}

int main(void)
{
    setvbuf(stdout, NULL, _IONBF, 0);
    struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cross_thread_mix),
        cmocka_unit_test(test_producer_consumer),
        cmocka_unit_test(test_realloc_pingpong),
    };
    return st_run_group_tests(tests, NULL, NULL);
}
