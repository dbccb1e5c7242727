/* Thousands of short-lived threads.
 *
 * test_thread_churn_rss  a warm-up round and 2 measured rounds of 128
 *                        threads each (x STRESS_SCALE), created in waves
 *                        of 16.  Every thread
 *                        allocates blocks over all tiers, frees some itself,
 *                        and leaves the others in a
 *                        global array, where later threads, a long-lived reaper
 *                        thread or the main thread verify and free them (often
 *                        after the allocating thread is gone).  Each thread
 *                        also has a pthread-key destructor that frees and
 *                        allocates at thread exit.  Contents must stay intact,
 *                        and the RSS after round 2 must stay within
 *                        RSS(round 1) * 1.5 + 16 MiB: memory of dead threads
 *                        has to be reused.  (The warm-up round exists because
 *                        even glibc's RSS keeps climbing through the first
 *                        round, while its arenas are still being created.)
 * test_thread_churn_detached  128 detached threads (x STRESS_SCALE) that exit
 *                        while other threads are freeing their blocks. */
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "stress_common.h"

#define ROUND_THREADS   ((int)st_scaled(128, 4 * WAVE))   /* per round */
#define WAVE            16
#define GLOBAL_SLOTS    1024
#define BLOCKS_PER_THR  24
/* Live data is at most the global array plus 16 threads' blocks; stop early
 * past this RSS growth. */
#define CHURN_RSS_SLACK ((size_t)3 << 30)

/* ---- self-describing blocks: a header {size, tag} then the pattern ----- */

static atomic_long n_alloc, n_free;

static void *blk_new(size_t size, uint64_t tag, const char *what)
{
    void *p = st_blk_new(size, tag, what);
    if (p) atomic_fetch_add_explicit(&n_alloc, 1, memory_order_relaxed);
    return p;
}

static void blk_free(void *p, const char *what)
{
    if (!p) return;
    if (!st_blk_check(p, what)) return;   /* corrupted: leak it */
    free(p);
    atomic_fetch_add_explicit(&n_free, 1, memory_order_relaxed);
}

/* ---- the global array ------------------------------------------------- */
static _Atomic(void *) gslots[GLOBAL_SLOTS];

static void gslot_put(st_rng *r, void *p, const char *what)
{
    void *old = atomic_exchange(&gslots[st_next(r) % GLOBAL_SLOTS], p);
    blk_free(old, what);   /* most likely allocated by a thread that is gone */
}

static void gslots_free_all(const char *what)
{
    for (int i = 0; i < GLOBAL_SLOTS; i++) blk_free(atomic_exchange(&gslots[i], NULL), what);
}

/* ---- pthread-key destructor: allocator use during thread teardown ------ */
static pthread_key_t exit_key;

typedef struct { void *blk; uint64_t seed; int detached; } exit_state;

static void detached_done(void);

static void exit_destructor(void *v)
{
    exit_state *es = v;
    st_rng r;
    st_rng_seed(&r, es->seed);
    blk_free(es->blk, "destructor-free");
    void *a = blk_new(st_rand_size_nolarge(&r), es->seed, "destructor");
    void *b = blk_new(st_range(&r, 16, 2048), es->seed, "destructor");
    blk_free(a, "destructor-free2");
    if (b) gslot_put(&r, b, "destructor-put");   /* survives the thread */
    int detached = es->detached;
    free(es);
    if (detached) detached_done();
}

/* ---- one short-lived thread -------------------------------------------- */
typedef struct { uint64_t seed; int detached; } churn_arg;

static void churn_body(uint64_t seed, int detached)
{
    st_rng r;
    st_rng_seed(&r, seed);
    void *blocks[BLOCKS_PER_THR];
    for (int i = 0; i < BLOCKS_PER_THR; i++)
        blocks[i] = blk_new(st_rand_size(&r), seed, "thread");

    exit_state *es = malloc(sizeof *es);
    if (!es) {
        stress_fail("malloc(exit_state) returned NULL");
        if (detached) detached_done();
    } else {
        es->seed = seed ^ 0x55;
        es->detached = detached;
        es->blk = blk_new(st_rand_size_nolarge(&r), seed, "thread-key");
        pthread_setspecific(exit_key, es);
    }

    for (int i = 0; i < BLOCKS_PER_THR; i++) {
        if (!blocks[i]) continue;
        unsigned roll = (unsigned)(st_next(&r) % 100);
        if (roll < 35) {
            blk_free(blocks[i], "thread-own-free");             /* freed by its owner */
        } else if (roll < 45) {
            blocks[i] = st_blk_realloc(blocks[i], st_rand_size(&r), seed, "thread-realloc");
            gslot_put(&r, blocks[i], "thread-put");
        } else {
            gslot_put(&r, blocks[i], "thread-put");             /* left behind */
        }
        blocks[i] = NULL;
    }
    /* A few more small ones straight into the global array. */
    for (int i = 0; i < 4; i++) gslot_put(&r, blk_new(st_range(&r, 16, 512), seed, "thread-small"), "thread-put");
}

static void *churn_thread(void *arg)
{
    churn_arg *a = arg;
    churn_body(a->seed, 0);
    if (a->seed & 1) pthread_exit(NULL);   /* both ways of ending a thread */
    return NULL;
}

/* ---- a long-lived reaper that frees blocks of dead threads ------------ */
static atomic_int reaper_stop;

static void *reaper(void *arg)
{
    st_rng r;
    st_rng_seed(&r, (uint64_t)(uintptr_t)arg);
    while (!atomic_load(&reaper_stop)) {
        for (int i = 0; i < 64; i++)
            blk_free(atomic_exchange(&gslots[st_next(&r) % GLOBAL_SLOTS], NULL), "reaper");
        sched_yield();
    }
    return NULL;
}

static void churn_round(uint64_t seed)
{
    pthread_t rt;
    atomic_store(&reaper_stop, 0);
    assert_int_equal(pthread_create(&rt, NULL, reaper, (void *)(uintptr_t)(seed + 999)), 0);
    churn_arg args[WAVE];
    for (int base = 0; base < ROUND_THREADS && !st_rss_guard(); base += WAVE) {
        pthread_t th[WAVE];
        for (int i = 0; i < WAVE; i++) {
            args[i].seed = seed * 100003 + (uint64_t)(base + i);
            args[i].detached = 0;
            assert_int_equal(pthread_create(&th[i], NULL, churn_thread, &args[i]), 0);
        }
        for (int i = 0; i < WAVE; i++) assert_int_equal(pthread_join(th[i], NULL), 0);
    }
    atomic_store(&reaper_stop, 1);
    assert_int_equal(pthread_join(rt, NULL), 0);
    gslots_free_all("main-final");
}

static int setup(void **state)
{
    (void)state;
    return pthread_key_create(&exit_key, exit_destructor);
}

static int teardown(void **state)
{
    (void)state;
    return pthread_key_delete(exit_key);
}

static void test_thread_churn_rss(void **state)
{
    (void)state;
    uint64_t seed = stress_seed();
    long errs0 = atomic_load(&stress_errors);
    atomic_store(&n_alloc, 0);
    atomic_store(&n_free, 0);
    st_rss_guard_arm(CHURN_RSS_SLACK);
    double t0 = st_now();
    size_t rss0 = st_rss_bytes();
    churn_round(seed);   /* warm-up: caches, arenas and thread stacks fill up */
    double t1 = st_now();
    size_t rssw = st_rss_bytes();
    churn_round(seed);   /* round 1 */
    size_t rss1 = st_rss_bytes();
    double t2 = st_now();
    churn_round(seed);   /* round 2, identical */
    size_t rss2 = st_rss_bytes();
    printf("  3 x %d threads in %.2fs + %.2fs + %.2fs; RSS KiB: start %zu, warm-up %zu, round 1 %zu, round 2 %zu\n",
           ROUND_THREADS, t1 - t0, t2 - t1, st_now() - t2, rss0 >> 10, rssw >> 10, rss1 >> 10, rss2 >> 10);
    assert_int_equal(atomic_load(&stress_errors) - errs0, 0);
    assert_int_equal(atomic_load(&n_alloc), atomic_load(&n_free));
    assert_true(rss2 <= rss1 + rss1 / 2 + (size_t)16 * 1024 * 1024);
}

/* ---- detached threads ---------------------------------------------------- */
#define DETACHED_THREADS ((int)st_scaled(128, 4 * DETACHED_LIVE))
#define DETACHED_LIVE    16

static pthread_mutex_t live_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t  live_cv = PTHREAD_COND_INITIALIZER;
static int             live_threads;

/* Called at the very end of a detached thread's key destructor. */
static void detached_done(void)
{
    pthread_mutex_lock(&live_mu);
    live_threads--;
    pthread_cond_signal(&live_cv);
    pthread_mutex_unlock(&live_mu);
}

static void *detached_thread(void *arg)
{
    churn_arg *a = arg;
    churn_body(a->seed, 1);
    free(a);   /* allocated by the main thread */
    return NULL;   /* the key destructor runs after this and calls detached_done() */
}

static void test_thread_churn_detached(void **state)
{
    (void)state;
    uint64_t seed = stress_seed() + 7;
    long errs0 = atomic_load(&stress_errors);
    atomic_store(&n_alloc, 0);
    atomic_store(&n_free, 0);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_t rt;
    atomic_store(&reaper_stop, 0);
    assert_int_equal(pthread_create(&rt, NULL, reaper, (void *)(uintptr_t)seed), 0);
    st_rss_guard_arm(CHURN_RSS_SLACK);
    double t0 = st_now();
    for (int i = 0; i < DETACHED_THREADS && !(i % WAVE == 0 && st_rss_guard()); i++) {
        pthread_mutex_lock(&live_mu);
        while (live_threads >= DETACHED_LIVE) pthread_cond_wait(&live_cv, &live_mu);
        live_threads++;
        pthread_mutex_unlock(&live_mu);
        churn_arg *a = malloc(sizeof *a);
        assert_non_null(a);
        a->seed = seed * 7919 + (uint64_t)i * 2;   /* even: plain return */
        a->detached = 1;
        pthread_t th;
        assert_int_equal(pthread_create(&th, &attr, detached_thread, a), 0);
    }
    pthread_mutex_lock(&live_mu);
    while (live_threads > 0) pthread_cond_wait(&live_cv, &live_mu);
    pthread_mutex_unlock(&live_mu);
    pthread_attr_destroy(&attr);
    atomic_store(&reaper_stop, 1);
    assert_int_equal(pthread_join(rt, NULL), 0);
    gslots_free_all("main-final");
    printf("  %d detached threads in %.2fs\n", DETACHED_THREADS, st_now() - t0);
    assert_int_equal(atomic_load(&stress_errors) - errs0, 0);
    assert_int_equal(atomic_load(&n_alloc), atomic_load(&n_free));
}

int main(void)
{
    setvbuf(stdout, NULL, _IONBF, 0);
    struct CMUnitTest tests[] = {
        cmocka_unit_test(test_thread_churn_rss),
        cmocka_unit_test(test_thread_churn_detached),
    };
    return st_run_group_tests(tests, setup, teardown);
}
