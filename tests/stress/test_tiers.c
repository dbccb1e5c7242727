/* SuperSlab state transitions under load (HOT -> DRAINING -> FREE and back).
 *
 * test_tiers_single
 *     One thread allocates ~200 MiB (x STRESS_SCALE when that is more) in
 *     mixed small sizes (Tiny, L2, some L2.5), every block patterned.  It
 *     then frees 95% of them in random order while still allocating a little
 *     (a new block every 16 frees).
 *     Meanwhile hak_get_info must show the backend reacting: some SuperSlab
 *     DRAINING at some point, or fewer SuperSlabs in use than at the peak.
 *     Every block still live must keep its contents.  Then everything is
 *     freed: hak_trim(0) returns 1 (there was something to give back), a
 *     second hak_trim(0) returns 0, and the resident size is back within
 *     32 MiB of where the test started.
 *
 * test_tiers_threads
 *     4 threads do the same with 50 MiB each (x STRESS_SCALE when that is
 *     more) at once, but the frees cross threads: thread t frees every block
 *     whose index is t mod 4, whoever allocated it (3/4 of all frees are
 *     remote), while the owners go on allocating.  Same checks; the threads
 *     exit at the end and the main thread's hak_trim(0) sweeps their heaps.
 *
 * Worker threads never call cmocka assertions; they count problems in
 * stress_errors (stress_common.h), which the tests check. */
#include <malloc.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>
#include <cmocka.h>

#include "hakmem.h"
#include "stress_common.h"

#define MiB ((size_t)1 << 20)

/* A compact item (16 B, not stress_common.h's slim_t): the tables hold
 * millions of them and are part of the resident size being measured. */
typedef struct {
    void    *p;
    uint32_t size;
    uint32_t tag;
} slim_t;

/* "Small" sizes (everything below the large tier), by count: 50% Tiny,
 * 30% L2 up to 16 KiB, 12% L2 up to 52 KiB, 8% L2.5 up to 256 KiB; by bytes
 * mostly L2 and L2.5. */
static size_t small_size(st_rng *r)
{
    unsigned roll = (unsigned)(st_next(r) % 100);
    if (roll < 50) return st_range(r, 1, ST_TINY_MAX);
    if (roll < 80) return st_range(r, ST_TINY_MAX + 1, 16384);
    if (roll < 92) return st_range(r, 16385, ST_L2_MAX);
    return st_range(r, ST_L2_MAX + 1, 256 * 1024);
}

static int slim_new(slim_t *it, size_t size, uint32_t tag, const char *what)
{
    it->p = malloc(size);
    it->size = (uint32_t)size;
    it->tag = tag;
    if (it->p == NULL) {
        stress_fail("%s: malloc(%zu) returned NULL", what, size);
        return 0;
    }
    st_check_align(it->p, size, what);
    st_fill(it->p, size, st_key(it->p, size, tag));
    return 1;
}

static int slim_check(const slim_t *it, const char *what)
{
    return st_check(it->p, it->size, st_key(it->p, it->size, it->tag), (size_t)-1, what, it->tag);
}

static void slim_free(slim_t *it, const char *what)
{
    if (it->p == NULL) return;
    if (slim_check(it, what)) free(it->p);
    it->p = NULL;
}

static void *map_table(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

/* What the backend did meanwhile, sampled by whoever frees. */
static atomic_size_t seen_draining_max, seen_in_use_peak, seen_in_use_min_after_peak;

static void sample_info(void)
{
    hak_info_t in;
    hak_get_info(&in);
    size_t in_use = in.ss_hot + in.ss_draining;
    size_t m = atomic_load(&seen_draining_max);
    while (in.ss_draining > m && !atomic_compare_exchange_weak(&seen_draining_max, &m, in.ss_draining)) {}
    m = atomic_load(&seen_in_use_peak);
    while (in_use > m && !atomic_compare_exchange_weak(&seen_in_use_peak, &m, in_use)) {}
    m = atomic_load(&seen_in_use_min_after_peak);
    while (in_use < m && !atomic_compare_exchange_weak(&seen_in_use_min_after_peak, &m, in_use)) {}
}

static void reset_samples(void)
{
    atomic_store(&seen_draining_max, 0);
    atomic_store(&seen_in_use_peak, 0);
    atomic_store(&seen_in_use_min_after_peak, (size_t)-1);
}

static void print_info(const char *when)
{
    hak_info_t in;
    hak_get_info(&in);
    print_message("%-26s SuperSlabs hot %3zu draining %3zu free %zu; heaps %zu; RSS %7zu KiB\n", when,
                  in.ss_hot, in.ss_draining, in.ss_free, in.heaps, st_rss_bytes() >> 10);
}

/* Fisher-Yates over [0, n). */
static void shuffle(uint32_t *v, size_t n, st_rng *r)
{
    for (size_t i = 0; i < n; i++) v[i] = (uint32_t)i;
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)(st_next(r) % i);
        uint32_t t = v[i - 1];
        v[i - 1] = v[j];
        v[j] = t;
    }
}

/* ==== one thread ========================================================== */
/* x STRESS_SCALE, but never less: with 100 MiB no SuperSlab need turn
 * DRAINING, and the test would fail without a fault in the allocator. */
#define SINGLE_BYTES   ((size_t)st_scaled(200, 200) * MiB)
#define SINGLE_MAX     ((size_t)st_scaled(200000, 200000))   /* blocks, with the extra ones */
#define EXTRA_EVERY    16              /* one new block per 16 frees       */

static void test_tiers_single(void **state)
{
    (void)state;
    long errs0 = atomic_load(&stress_errors);
    hak_trim(0);
    size_t rss0 = st_rss_bytes();
    print_info("start:");

    slim_t *tab = map_table(SINGLE_MAX * sizeof(slim_t));
    uint32_t *order = map_table(SINGLE_MAX * sizeof(uint32_t));
    assert_non_null(tab);
    assert_non_null(order);
    st_rng r;
    st_rng_seed(&r, stress_seed() + 1);

    /* 1: ~200 MiB. */
    size_t n = 0, bytes = 0;
    while (bytes < SINGLE_BYTES && n < SINGLE_MAX / 2) {
        size_t sz = small_size(&r);
        if (slim_new(&tab[n], sz, (uint32_t)n, "single")) {
            bytes += sz;
            n++;
        }
    }
    size_t first = n;
    print_info("allocated:");
    reset_samples();
    sample_info();

    /* 2: 95% of them, in random order; a new block now and then. */
    shuffle(order, first, &r);
    size_t nfree = first - first / 20;
    for (size_t i = 0; i < nfree; i++) {
        slim_free(&tab[order[i]], "single-free");
        if (i % EXTRA_EVERY == 0 && n < SINGLE_MAX)
            if (slim_new(&tab[n], small_size(&r), (uint32_t)n, "single-extra")) n++;
        if (i % 256 == 0) sample_info();
    }
    sample_info();
    print_info("95% freed:");
    size_t dmax95 = atomic_load(&seen_draining_max), peak95 = atomic_load(&seen_in_use_peak),
           low95 = atomic_load(&seen_in_use_min_after_peak);
    print_message("%zu blocks (%zu MiB), %zu freed, %zu added; SuperSlabs in use: peak %zu, low %zu; "
                  "DRAINING at most %zu\n", first, bytes >> 20, nfree, n - first, peak95, low95, dmax95);

    /* 3: what is left keeps its contents. */
    size_t live = 0;
    for (size_t i = 0; i < n; i++)
        if (tab[i].p != NULL) {
            slim_check(&tab[i], "single-survivor");
            live++;
        }
    assert_int_equal(atomic_load(&stress_errors) - errs0, 0);
    assert_int_equal(live, n - nfree);

    /* 4: the survivors of the first batch go too, in random order, still
     * allocating a little: SuperSlabs empty out (DRAINING, then FREE) while
     * their owner keeps allocating. */
    size_t m = 0;
    for (size_t i = 0; i < first; i++)
        if (tab[i].p != NULL) order[m++] = (uint32_t)i;
    for (size_t i = m; i > 1; i--) {
        size_t j = (size_t)(st_next(&r) % i);
        uint32_t t = order[i - 1];
        order[i - 1] = order[j];
        order[j] = t;
    }
    size_t before4 = n;
    for (size_t i = 0; i < m; i++) {
        slim_free(&tab[order[i]], "single-free-rest");
        if (i % EXTRA_EVERY == 0 && n < SINGLE_MAX)
            if (slim_new(&tab[n], small_size(&r), (uint32_t)n, "single-extra2")) n++;
        if (i % 16 == 0) sample_info();
    }
    sample_info();
    print_info("first batch freed:");
    print_message("then %zu more freed, %zu added; SuperSlabs in use: peak %zu, low %zu; DRAINING at most %zu\n",
                  m, n - before4, atomic_load(&seen_in_use_peak), atomic_load(&seen_in_use_min_after_peak),
                  atomic_load(&seen_draining_max));

    /* 5: the extras keep their contents; then everything goes. */
    for (size_t i = 0; i < n; i++)
        if (tab[i].p != NULL) slim_check(&tab[i], "single-extra-survivor");
    for (size_t i = 0; i < n; i++) {
        if (tab[i].p == NULL) continue;
        slim_free(&tab[i], "single-final");
        if (i % 16 == 0) sample_info();
    }
    sample_info();
    print_info("all freed:");
    size_t dmax = atomic_load(&seen_draining_max), peak = atomic_load(&seen_in_use_peak),
           low = atomic_load(&seen_in_use_min_after_peak);
    /* The heap keeps empty slabs for its next refills and gives them back
     * by time: within the run a SuperSlab may not have emptied yet (1 run
     * in 20 here; more with the profiler's sampling).  Wait for the purger,
     * the thread idle: up to 4 delays, in steps of 50 ms, where the delay
     * is at most 2 s (with a longer one no purge comes within a test). */
    hak_info_t in;
    hak_get_info(&in);
    unsigned steps = in.purge_delay_ms <= 2000 ? (unsigned)(4 * in.purge_delay_ms / 50) + 1 : 0;
    for (unsigned w = 0; w < steps && !(dmax > 0 || low < peak); w++) {
        struct timespec ts = { 0, 50 * 1000000L };
        nanosleep(&ts, NULL);
        sample_info();
        dmax = atomic_load(&seen_draining_max);
        low = atomic_load(&seen_in_use_min_after_peak);
    }
    print_info("after waiting:");
    print_message("over the whole run: SuperSlabs in use: peak %zu, low %zu; DRAINING at most %zu\n",
                  peak, low, dmax);
    /* By design a SuperSlab turns DRAINING only with at most 8 of its 64
     * pages in use, and free resident pages anywhere are reused first, so
     * 5% random survivors of small blocks (plus new ones) may well keep every
     * SuperSlab HOT: only reported for the 95% phase.  Once all is freed,
     * what still pins SuperSlabs is the thread's rings and caches (until it
     * allocates again or trims) and the shared L2.5 heap's empty slabs kept
     * for its next refills, which a timed purge pass retires: required
     * where a pass comes within the wait, else (no delay: no passes; an
     * hour) only reported, the trim below giving the memory back. */
    if (steps > 1) assert_true(dmax > 0 || low < peak);
    munmap(tab, SINGLE_MAX * sizeof(slim_t));
    munmap(order, SINGLE_MAX * sizeof(uint32_t));
    assert_int_equal(atomic_load(&stress_errors) - errs0, 0);
    size_t rss_freed = st_rss_bytes();
    /* Nothing allocates between the two calls (st_rss_bytes uses stdio). */
    int t1 = hak_trim(0);
    int t2 = malloc_trim(0);
    size_t rss_trim = st_rss_bytes();
    print_info("trimmed:");
    print_message("RSS (KiB): start %zu, all freed %zu, trimmed %zu; trim returned %d then %d\n",
                  rss0 >> 10, rss_freed >> 10, rss_trim >> 10, t1, t2);
    assert_int_equal(t1, 1);
    assert_int_equal(t2, 0);
    if (rss_trim > rss0 + 32 * MiB)
        fail_msg("RSS after hak_trim %zu KiB, started at %zu KiB", rss_trim >> 10, rss0 >> 10);
}

/* ==== four threads, frees across threads ================================== */
#define MT_THREADS  4
#define MT_BYTES    ((size_t)st_scaled(50, 50) * MiB)       /* x STRESS_SCALE, never less */
#define MT_MAX      ((size_t)st_scaled(60000, 60000))   /* blocks per thread, with the extras */

static slim_t *mt_tab[MT_THREADS];
static size_t mt_first[MT_THREADS];      /* blocks of the first batch */
static atomic_size_t mt_count[MT_THREADS]; /* with the extras          */
static pthread_barrier_t mt_bar;

/* Does the 95% phase free block i of the first batch?  (5% survive.) */
static int mt_doomed(size_t owner, size_t i)
{
    return st_mix((uint64_t)owner << 32 | i) % 20 != 0;
}

static void *mt_thread(void *arg)
{
    size_t t = (size_t)(uintptr_t)arg;
    st_rng r;
    st_rng_seed(&r, stress_seed() * 17 + t);
    slim_t *tab = mt_tab[t];

    /* 1: allocate. */
    size_t n = 0, bytes = 0;
    while (bytes < MT_BYTES && n < MT_MAX / 2) {
        size_t sz = small_size(&r);
        if (slim_new(&tab[n], sz, (uint32_t)(t << 24 | n), "mt")) {
            bytes += sz;
            n++;
        }
    }
    mt_first[t] = n;
    atomic_store(&mt_count[t], n);
    pthread_barrier_wait(&mt_bar);

    /* 2: free my share of everybody's doomed blocks (index = t mod 4), in
     * random order, allocating a little into my own table meanwhile.  Only
     * the owner adds to its table; the others read mt_first. */
    size_t total = 0;
    for (size_t o = 0; o < MT_THREADS; o++) total += (mt_first[o] + MT_THREADS - 1 - t) / MT_THREADS;
    uint32_t *order = map_table(total * sizeof(uint32_t));
    if (order == NULL) {
        stress_fail("mmap failed");
        pthread_barrier_wait(&mt_bar);
        pthread_barrier_wait(&mt_bar);
        return NULL;
    }
    shuffle(order, total, &r);
    for (size_t k = 0; k < total; k++) {
        /* order[k] -> (owner, index): walk the owners' shares. */
        size_t v = order[k], o = 0, share;
        while (v >= (share = (mt_first[o] + MT_THREADS - 1 - t) / MT_THREADS)) {
            v -= share;
            o++;
        }
        size_t i = v * MT_THREADS + t;
        if (mt_doomed(o, i)) slim_free(&mt_tab[o][i], o == t ? "mt-free-own" : "mt-free-remote");
        if (k % EXTRA_EVERY == 0 && n < MT_MAX) {
            if (slim_new(&tab[n], small_size(&r), (uint32_t)(t << 24 | n), "mt-extra")) n++;
        }
        if (k % 1024 == 0) sample_info();
    }
    munmap(order, total * sizeof(uint32_t));
    atomic_store(&mt_count[t], n);
    sample_info();
    pthread_barrier_wait(&mt_bar);

    /* 3: the survivors of my share, then my share of everything, freed
     * (the owners take in the remote frees on their next slow paths). */
    for (size_t o = 0; o < MT_THREADS; o++) {
        size_t cnt = atomic_load(&mt_count[o]);
        for (size_t i = t; i < cnt; i += MT_THREADS)
            if (mt_tab[o][i].p != NULL) slim_check(&mt_tab[o][i], "mt-survivor");
    }
    pthread_barrier_wait(&mt_bar);
    for (size_t o = 0; o < MT_THREADS; o++) {
        size_t cnt = atomic_load(&mt_count[o]);
        for (size_t i = t; i < cnt; i += MT_THREADS) {
            slim_free(&mt_tab[o][i], "mt-final");
            if (i % 256 == t) sample_info();
        }
    }
    sample_info();
    pthread_barrier_wait(&mt_bar);
    /* Some more traffic: each owner collects the remote frees into its
     * slabs, which empties its SuperSlabs. */
    for (int i = 0; i < 2000; i++) {
        void *p = malloc(small_size(&r));
        free(p);
    }
    sample_info();
    return NULL;
}

static void test_tiers_threads(void **state)
{
    (void)state;
    long errs0 = atomic_load(&stress_errors);
    hak_trim(0);
    size_t rss0 = st_rss_bytes();
    print_info("start:");
    for (int t = 0; t < MT_THREADS; t++) {
        mt_tab[t] = map_table(MT_MAX * sizeof(slim_t));
        assert_non_null(mt_tab[t]);
    }
    reset_samples();
    assert_int_equal(pthread_barrier_init(&mt_bar, NULL, MT_THREADS), 0);
    pthread_t th[MT_THREADS];
    for (uintptr_t t = 0; t < MT_THREADS; t++)
        assert_int_equal(pthread_create(&th[t], NULL, mt_thread, (void *)t), 0);
    for (int t = 0; t < MT_THREADS; t++) assert_int_equal(pthread_join(th[t], NULL), 0);
    sample_info();   /* thread exit collected the last remote frees */
    pthread_barrier_destroy(&mt_bar);
    for (int t = 0; t < MT_THREADS; t++) munmap(mt_tab[t], MT_MAX * sizeof(slim_t));

    size_t dmax = atomic_load(&seen_draining_max), peak = atomic_load(&seen_in_use_peak),
           low = atomic_load(&seen_in_use_min_after_peak);
    size_t first = 0, all = 0;
    for (int t = 0; t < MT_THREADS; t++) {
        first += mt_first[t];
        all += atomic_load(&mt_count[t]);
    }
    print_message("%zu blocks, %zu added; SuperSlabs in use: peak %zu, low %zu; DRAINING at most %zu\n",
                  first, all - first, peak, low, dmax);
    assert_int_equal(atomic_load(&stress_errors) - errs0, 0);
    assert_true(dmax > 0 || low < peak);

    print_info("threads done:");
    size_t rss_freed = st_rss_bytes();
    int t1 = hak_trim(0);
    size_t rss_trim = st_rss_bytes();
    print_info("trimmed:");
    print_message("RSS (KiB): start %zu, all freed %zu, trimmed %zu; trim returned %d\n",
                  rss0 >> 10, rss_freed >> 10, rss_trim >> 10, t1);
    assert_int_equal(t1, 1);
    if (rss_trim > rss0 + 32 * MiB)
        fail_msg("RSS after hak_trim %zu KiB, started at %zu KiB", rss_trim >> 10, rss0 >> 10);
}

int main(void)
{
    struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tiers_single),
        cmocka_unit_test(test_tiers_threads),
    };
    return st_run_group_tests(tests, NULL, NULL);
}
