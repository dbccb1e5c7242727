/* Threads that exit with blocks still out.
 *
 * test_exit_blocks_freed_later
 *     6 waves (x STRESS_SCALE) of 8 threads allocate blocks over
 *     Tiny/L2/L2.5, free some and leave the rest in a table, and exit.  The
 *     next wave starts at once (and adopts the abandoned heaps) while the
 *     main thread and a long-lived freer thread check and free the previous
 *     wave's blocks: remote frees into heaps that are being adopted.  Contents must stay intact and the number
 *     of heaps must stay at one wave's worth.
 *
 * test_exit_sequential_heaps
 *     150 short threads (x STRESS_SCALE) one after the other, each leaving
 *     blocks that the main thread frees later: each adopts the heap its
 *     predecessor left, so no more than a handful of heaps ever exist.  Then
 *     12 waves (x STRESS_SCALE) of 8 concurrent threads: at most 8 more.
 *
 * test_exit_memory_swept_by_running_thread
 *     4 threads allocate 32 MiB each, hand every block to the main thread and
 *     exit; the main thread frees them all (remote frees into abandoned
 *     heaps).  No new thread starts, so nobody adopts those heaps; the main
 *     thread then just keeps allocating and freeing.  The memory of the
 *     exited threads must go back to the OS once the purge delay has passed
 *     (waited for generously: up to 3 delays + 10 s; skipped with a delay
 *     over 10 s): the resident size falls back near where it started and
 *     the SuperSlabs of the abandoned heaps are released.
 *
 * test_exit_memory_trimmed
 *     The same, but hak_trim(0) gives it back at once.
 *
 * test_exit_successor_takes_over
 *     Two threads overlap; the second allocates 512 blocks, and both exit
 *     (the first one first, so the next new thread adopts another heap than
 *     the second's).  A new thread, after one malloc, frees those 512 blocks
 *     and allocates 512 of the same size: it must get (most of) the same
 *     addresses back, because a young thread freeing into an abandoned heap
 *     takes that heap over.  Then the main thread, made old first (more than
 *     a young thread's slow paths), frees the blocks of another such heap and
 *     allocates: it keeps its own heap, so it gets none of them.
 *
 * test_exit_mixed_waves
 *     Waves of 32 threads, half of them holding one L2.5 block (a thread
 *     heap of its own for it) and half one small block (the nursery's, which
 *     the main thread frees after the wave).  A young thread's small block
 *     may come from a warm abandoned heap, never from one with no memory of
 *     its own, which would leave the next L2.5 thread without a heap to
 *     adopt: after the first wave, the number of heaps stays where it is
 *     (it grew by a few each wave, to one per thread of a wave).
 *
 * test_young_threads_own_lines
 *     Runs first, while no heap has been abandoned: 8 threads start at once
 *     and each makes its first four allocations (8 to 100 B, the nursery's:
 *     young threads share its slabs) and writes them while all are live.
 *     No cache line may hold bytes of two threads' blocks (with blocks of
 *     their size side by side, each line held those of up to four).
 *
 * Worker threads never call cmocka assertions; they count problems in
 * stress_errors (stress_common.h), which the tests check. */
#include <pthread.h>
#include <semaphore.h>
#include <sys/mman.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "hakmem.h"
#include "stress_common.h"

#define MiB ((size_t)1 << 20)

static hak_info_t info_now(void)
{
    hak_info_t in;
    hak_get_info(&in);
    return in;
}

static void print_info(const char *when)
{
    hak_info_t in = info_now();
    print_message("%-28s SuperSlabs hot %3zu draining %3zu free %zu; heaps %zu (%zu abandoned); RSS %6zu KiB\n",
                  when, in.ss_hot, in.ss_draining, in.ss_free, in.heaps, in.heaps_abandoned,
                  st_rss_bytes() >> 10);
}

/* ==== young threads' blocks ============================================= */
#define YL_THREADS 8
#define YL_BLOCKS  4
#define YL_LINE    ((uintptr_t)64)

static pthread_barrier_t yl_held;
static uintptr_t yl_addr[YL_THREADS][YL_BLOCKS];
static const size_t yl_size[YL_BLOCKS] = { 8, 24, 40, 100 };

static void *yl_thread(void *arg)
{
    uintptr_t t = (uintptr_t)arg;
    unsigned char *p[YL_BLOCKS];
    pthread_barrier_wait(&yl_held);     /* all start young together */
    for (int k = 0; k < YL_BLOCKS; k++) {
        p[k] = malloc(yl_size[k]);
        if (p[k] == NULL) stress_fail("young thread %u: malloc(%zu) failed", (unsigned)t, yl_size[k]);
        else memset(p[k], (int)t + 1, yl_size[k]);
        yl_addr[t][k] = (uintptr_t)p[k];
    }
    pthread_barrier_wait(&yl_held);     /* all blocks live */
    pthread_barrier_wait(&yl_held);     /* main has looked */
    for (int k = 0; k < YL_BLOCKS; k++) free(p[k]);
    return NULL;
}

static void test_young_threads_own_lines(void **state)
{
    (void)state;
    long errs0 = atomic_load(&stress_errors);
    assert_int_equal(pthread_barrier_init(&yl_held, NULL, YL_THREADS + 1), 0);
    pthread_t th[YL_THREADS];
    for (uintptr_t t = 0; t < YL_THREADS; t++)
        assert_int_equal(pthread_create(&th[t], NULL, yl_thread, (void *)t), 0);
    pthread_barrier_wait(&yl_held);
    pthread_barrier_wait(&yl_held);
    unsigned shared = 0;
    for (int a = 0; a < YL_THREADS; a++)
        for (int b = a + 1; b < YL_THREADS; b++)
            for (int i = 0; i < YL_BLOCKS; i++)
                for (int j = 0; j < YL_BLOCKS; j++) {
                    uintptr_t pa = yl_addr[a][i], pb = yl_addr[b][j];
                    if (pa == 0 || pb == 0) continue;
                    uintptr_t a0 = pa / YL_LINE, a1 = (pa + yl_size[i] - 1) / YL_LINE;
                    uintptr_t b0 = pb / YL_LINE, b1 = (pb + yl_size[j] - 1) / YL_LINE;
                    if (a0 <= b1 && b0 <= a1 && shared++ < 4)
                        print_error("threads %d and %d share a cache line: %#lx (%zu B), %#lx (%zu B)\n",
                                    a, b, (unsigned long)pa, yl_size[i], (unsigned long)pb, yl_size[j]);
                }
    pthread_barrier_wait(&yl_held);
    for (int t = 0; t < YL_THREADS; t++) pthread_join(th[t], NULL);
    pthread_barrier_destroy(&yl_held);
    assert_int_equal(atomic_load(&stress_errors), errs0);
    assert_int_equal(shared, 0);
}

/* ==== waves that leave blocks behind ===================================== */
#define WAVES        ((int)st_scaled(6, 3))
#define WAVE_THREADS 8
#define WAVE_BLOCKS  400

static item_t wave_tab[2][WAVE_THREADS][WAVE_BLOCKS];

typedef struct { int wave, idx; } wave_arg;

static void *wave_thread(void *arg)
{
    wave_arg *a = arg;
    st_rng r;
    st_rng_seed(&r, stress_seed() * 1000003 + (uint64_t)a->wave * 64 + (uint64_t)a->idx);
    item_t *tab = wave_tab[a->wave & 1][a->idx];
    for (int i = 0; i < WAVE_BLOCKS; i++) {
        uint64_t tag = ((uint64_t)a->wave << 32) | ((uint64_t)a->idx << 16) | (uint64_t)i;
        item_new(&tab[i], st_mixed_size(&r), tag, "wave");
        /* Free about a third of them right away, most of them some time later. */
        if (i > 8 && st_chance(&r, 33)) item_free(&tab[st_next(&r) % (uint64_t)i], "wave-own");
    }
    return NULL;   /* leaving the rest behind */
}

static struct {
    sem_t go, done;
    int   which;      /* table to free */
    int   stop;
} freer_ctl;

static void *wave_freer(void *arg)
{
    (void)arg;
    for (;;) {
        sem_wait(&freer_ctl.go);
        if (freer_ctl.stop) break;
        /* Half of every thread's blocks: the odd ones. */
        for (int t = 0; t < WAVE_THREADS; t++)
            for (int i = 1; i < WAVE_BLOCKS; i += 2) item_free(&wave_tab[freer_ctl.which][t][i], "freer");
        sem_post(&freer_ctl.done);
    }
    return NULL;
}

static void test_exit_blocks_freed_later(void **state)
{
    (void)state;
    long errs0 = atomic_load(&stress_errors);
    assert_int_equal(sem_init(&freer_ctl.go, 0, 0), 0);
    assert_int_equal(sem_init(&freer_ctl.done, 0, 0), 0);
    freer_ctl.stop = 0;
    pthread_t ft;
    assert_int_equal(pthread_create(&ft, NULL, wave_freer, NULL), 0);
    void *warm = malloc(64);   /* the main thread has a heap */
    free(warm);
    size_t heaps0 = info_now().heaps, heaps_max = 0;

    wave_arg args[2][WAVE_THREADS];
    pthread_t th[WAVE_THREADS];
    for (int w = 0; w <= WAVES; w++) {
        /* Wave w starts (unless this is the last pass) ... */
        if (w < WAVES) {
            for (int i = 0; i < WAVE_THREADS; i++) {
                args[w & 1][i] = (wave_arg){ w, i };
                assert_int_equal(pthread_create(&th[i], NULL, wave_thread, &args[w & 1][i]), 0);
            }
        }
        /* ... while the blocks of wave w-1, whose threads are gone, are freed. */
        if (w > 0) {
            freer_ctl.which = (w - 1) & 1;
            sem_post(&freer_ctl.go);
            for (int t = 0; t < WAVE_THREADS; t++)
                for (int i = 0; i < WAVE_BLOCKS; i += 2) item_free(&wave_tab[(w - 1) & 1][t][i], "main");
            sem_wait(&freer_ctl.done);
        }
        if (w < WAVES)
            for (int i = 0; i < WAVE_THREADS; i++) assert_int_equal(pthread_join(th[i], NULL), 0);
        size_t h = info_now().heaps;
        if (h > heaps_max) heaps_max = h;
    }
    freer_ctl.stop = 1;
    sem_post(&freer_ctl.go);
    assert_int_equal(pthread_join(ft, NULL), 0);
    sem_destroy(&freer_ctl.go);
    sem_destroy(&freer_ctl.done);

    print_info("waves done:");
    print_message("heaps: %zu before, at most %zu during %d waves of %d threads\n", heaps0, heaps_max,
                  WAVES, WAVE_THREADS);
    assert_int_equal(atomic_load(&stress_errors) - errs0, 0);
    /* One wave of threads, the freer thread, and slack for threads of the
     * previous wave still in their exit path (pthread_join returns before
     * every exiting thread's heap is back on the list when the next wave
     * starts on another core): the waves before were all adopted, so the
     * count stays bounded however many waves run. */
    assert_true(heaps_max <= heaps0 + WAVE_THREADS + 4);
}

/* ==== thousands of threads, one after the other ========================= */
#define SEQ_THREADS   ((int)st_scaled(150, 2 * SEQ_LAG))
#define SEQ_BLOCKS    12
#define SEQ_LAG       4       /* main frees a thread's blocks 4 threads later */
#define SEQ_WAVES     ((int)st_scaled(12, 4))

static item_t seq_tab[SEQ_LAG][SEQ_BLOCKS];
static item_t seq_wave_tab[8][SEQ_BLOCKS];   /* thread n >= SEQ_THREADS: row n % 8 */

static void *seq_thread(void *arg)
{
    uint64_t n = (uint64_t)(uintptr_t)arg;
    st_rng r;
    st_rng_seed(&r, stress_seed() * 7919 + n);
    item_t *tab = n < (uint64_t)SEQ_THREADS ? seq_tab[n % SEQ_LAG] : seq_wave_tab[n % 8];
    item_t scratch[SEQ_BLOCKS];
    for (int i = 0; i < SEQ_BLOCKS; i++) {
        item_new(&scratch[i], st_mixed_size(&r), n << 8 | (uint64_t)i, "seq-own");
        item_new(&tab[i], st_mixed_size(&r), n << 8 | 0x80 | (uint64_t)i, "seq");
    }
    for (int i = 0; i < SEQ_BLOCKS; i++) item_free(&scratch[i], "seq-own");
    return NULL;
}

static void test_exit_sequential_heaps(void **state)
{
    (void)state;
    long errs0 = atomic_load(&stress_errors);
    void *warm = malloc(64);
    free(warm);
    size_t heaps0 = info_now().heaps, heaps_max = 0;
    memset(seq_tab, 0, sizeof seq_tab);
    for (uintptr_t n = 0; n < (uintptr_t)SEQ_THREADS; n++) {
        /* The slot this thread will use holds the blocks of thread n - LAG. */
        for (int i = 0; i < SEQ_BLOCKS; i++) item_free(&seq_tab[n % SEQ_LAG][i], "seq-main");
        pthread_t t;
        assert_int_equal(pthread_create(&t, NULL, seq_thread, (void *)n), 0);
        assert_int_equal(pthread_join(t, NULL), 0);
        size_t h = info_now().heaps;
        if (h > heaps_max) heaps_max = h;
    }
    for (int s = 0; s < SEQ_LAG; s++)
        for (int i = 0; i < SEQ_BLOCKS; i++) item_free(&seq_tab[s][i], "seq-main-end");
    print_message("heaps: %zu before, at most %zu during %d sequential threads\n", heaps0, heaps_max,
                  SEQ_THREADS);
    assert_int_equal(atomic_load(&stress_errors) - errs0, 0);
    assert_true(heaps_max <= heaps0 + 2);

    /* Concurrent waves: at most one wave's worth more. */
    size_t heaps1 = info_now().heaps;
    heaps_max = 0;
    for (int w = 0; w < SEQ_WAVES; w++) {
        pthread_t t[8];
        for (uintptr_t i = 0; i < 8; i++)
            assert_int_equal(pthread_create(&t[i], NULL, seq_thread, (void *)(SEQ_THREADS + (uintptr_t)w * 8 + i)), 0);
        for (int i = 0; i < 8; i++) assert_int_equal(pthread_join(t[i], NULL), 0);
        for (int s = 0; s < 8; s++)
            for (int i = 0; i < SEQ_BLOCKS; i++) item_free(&seq_wave_tab[s][i], "seq-main-wave");
        size_t h = info_now().heaps;
        if (h > heaps_max) heaps_max = h;
    }
    print_message("heaps: %zu before, at most %zu during %d waves of 8 threads\n", heaps1, heaps_max, SEQ_WAVES);
    assert_int_equal(atomic_load(&stress_errors) - errs0, 0);
    assert_true(heaps_max <= (heaps1 > heaps0 + 8 ? heaps1 : heaps0 + 8) + 2);
}

/* ==== exited threads' memory, freed remotely, goes back to the OS ======== */
#define GB_THREADS  4
#define GB_BYTES    (32 * MiB)     /* per thread */
#define GB_MAX      40000          /* blocks per thread, at most */

static item_t *gb_tab[GB_THREADS];
static size_t gb_count[GB_THREADS];

/* Tiny and L2 mostly, some L2.5: sizes that live in SuperSlabs. */
static void *gb_thread(void *arg)
{
    size_t t = (size_t)(uintptr_t)arg;
    st_rng r;
    st_rng_seed(&r, stress_seed() * 131 + t);
    size_t bytes = 0, n = 0;
    item_t *tab = gb_tab[t];
    while (bytes < GB_BYTES && n < GB_MAX) {
        size_t sz = st_mixed_size(&r);
        if (item_new(&tab[n], sz, (uint64_t)t << 32 | n, "gb-thread")) {
            bytes += sz;
            n++;
        }
    }
    gb_count[t] = n;
    return NULL;   /* everything stays allocated: the main thread frees it */
}

/* Start the threads, let them allocate and exit, then free all their blocks
 * from the main thread.  Returns the resident size before the threads ran;
 * *full (when given) is hak_get_info once they had exited. */
static size_t gb_setup(size_t *rss_full, hak_info_t *full)
{
    void *warm = malloc(64);
    free(warm);
    for (int t = 0; t < GB_THREADS; t++) {
        /* The tables themselves come from mmap: not part of what we measure. */
        gb_tab[t] = mmap(NULL, GB_MAX * sizeof(item_t), PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        assert_true(gb_tab[t] != MAP_FAILED);
    }
    /* Settle what earlier tests left behind, so the baseline is stable. */
    hak_trim(0);
    size_t rss0 = st_rss_bytes();
    print_info("before:");
    pthread_t th[GB_THREADS];
    for (uintptr_t t = 0; t < GB_THREADS; t++)
        assert_int_equal(pthread_create(&th[t], NULL, gb_thread, (void *)t), 0);
    for (int t = 0; t < GB_THREADS; t++) assert_int_equal(pthread_join(th[t], NULL), 0);
    *rss_full = st_rss_bytes();
    if (full != NULL) *full = info_now();
    print_info("threads exited:");
    for (int t = 0; t < GB_THREADS; t++) {
        for (size_t i = 0; i < gb_count[t]; i++) item_free(&gb_tab[t][i], "gb-main");
        munmap(gb_tab[t], GB_MAX * sizeof(item_t));
    }
    print_info("freed remotely:");
    return rss0;
}

/* What may stay resident after the exited threads' memory went back: per
 * abandoned heap, SuperSlab headers and slabs it still keeps (with a
 * thread's dirty-page budget of up to 16 MiB in the running heap, this is
 * generous); plus noise. */
#define GB_SLACK (GB_THREADS * 8 * MiB + 4 * MiB)

/* malloc/free of varied sizes on the main thread until the resident size
 * is back under rss_goal or max_secs have passed; returns the ops done,
 * and in *rss the reading that met the goal (or the last one). */
static long gb_work(size_t rss_goal, double max_secs, size_t *rss)
{
    st_rng r;
    st_rng_seed(&r, stress_seed() + 4242);
    static void *batch[1000];
    long ops = 0;
    double t0 = st_now();
    while (st_now() - t0 < max_secs) {
        for (int i = 0; i < 1000; i++) {
            unsigned roll = (unsigned)(st_next(&r) % 100);
            size_t sz = roll < 60 ? st_range(&r, 1, 1024)
                      : roll < 95 ? st_range(&r, 1025, 16384)
                                  : st_range(&r, 16385, 200 * 1024);
            batch[i] = malloc(sz);
            if (batch[i] == NULL) stress_fail("gb_work: malloc(%zu) returned NULL", sz);
            else memset(batch[i], 0xA5, sz < 64 ? sz : 64);
        }
        for (int i = 0; i < 1000; i++) free(batch[i]);
        ops += 2000;
        if ((ops % 20000) == 0 && (*rss = st_rss_bytes()) <= rss_goal) return ops;
    }
    *rss = st_rss_bytes();
    return ops;
}

static void test_exit_memory_swept_by_running_thread(void **state)
{
    (void)state;
    long errs0 = atomic_load(&stress_errors);
    hak_info_t full;
    size_t rss_full, rss0 = gb_setup(&rss_full, &full);
    size_t rss_freed = st_rss_bytes();
    hak_info_t freed = info_now();
    assert_true(rss_full >= rss0 + GB_THREADS * GB_BYTES / 2);   /* it was really resident */
    size_t delay = freed.purge_delay_ms;
    if (delay > 10000) {
        print_message("HAKMEM_PURGE_DELAY_MS=%zu: not waiting for the memory to go back\n", delay);
        assert_int_equal(atomic_load(&stress_errors) - errs0, 0);
        hak_trim(0);
        return;
    }

    /* The reading that met the goal is the one checked: the loop stops
     * at the first, and a read after it may be a page or two above. */
    size_t rss_after = 0;
    long ops = gb_work(rss0 + GB_SLACK, 3.0 * (double)delay / 1000.0 + 10.0, &rss_after);
    hak_info_t after = info_now();
    print_info("after main thread's work:");
    print_message("RSS (KiB): start %zu, threads done %zu, freed %zu, after %ld malloc/free %zu\n",
                  rss0 >> 10, rss_full >> 10, rss_freed >> 10, ops, rss_after >> 10);
    assert_int_equal(atomic_load(&stress_errors) - errs0, 0);
    /* No thread started, so no heap was adopted (the purger may be
     * sweeping one of them just now: it is off the list meanwhile). */
    assert_true(after.heaps_abandoned + 1 >= GB_THREADS);
    if (rss_after > rss0 + GB_SLACK)
        fail_msg("exited threads' memory not given back by the running thread: RSS %zu KiB, "
                 "started at %zu KiB (allowed %zu KiB more)", rss_after >> 10, rss0 >> 10, GB_SLACK >> 10);
    /* Their SuperSlabs went back too: an abandoned heap keeps no spare. */
    size_t in_use_full = full.ss_hot + full.ss_draining;
    size_t in_use_freed = freed.ss_hot + freed.ss_draining, in_use_after = after.ss_hot + after.ss_draining;
    print_message("SuperSlabs HOT+DRAINING: %zu when the threads had exited, %zu after the remote "
                  "frees, %zu after the work\n", in_use_full, in_use_freed, in_use_after);
    assert_true(in_use_after < in_use_full);
    /* With no purger the frees' own bounded passes may already have
     * swept them (hakmem_purge.c): then the work has nothing left to do. */
    if (hak_purge_bound() == 0) assert_true(in_use_after < in_use_freed);
}

static void test_exit_memory_trimmed(void **state)
{
    (void)state;
    long errs0 = atomic_load(&stress_errors);
    hak_info_t full;
    size_t rss_full, rss0 = gb_setup(&rss_full, &full);
    size_t rss_freed = st_rss_bytes();
    hak_info_t freed = info_now();
    assert_true(rss_full >= rss0 + GB_THREADS * GB_BYTES / 2);
    assert_int_equal(hak_trim(0), 1);
    size_t rss_after = st_rss_bytes();
    hak_info_t after = info_now();
    print_info("after hak_trim(0):");
    print_message("RSS (KiB): start %zu, threads done %zu, freed %zu, trimmed %zu\n",
                  rss0 >> 10, rss_full >> 10, rss_freed >> 10, rss_after >> 10);
    assert_int_equal(atomic_load(&stress_errors) - errs0, 0);
    if (rss_after > rss0 + GB_SLACK)
        fail_msg("exited threads' memory not given back by hak_trim: RSS %zu KiB, started at %zu KiB",
                 rss_after >> 10, rss0 >> 10);
    /* Nothing allocated meanwhile: fewer SuperSlabs in use than when the
     * threads had exited, none cached.  (The purger may already have
     * collected the remote frees into an abandoned heap before hak_trim, so
     * the count right after the frees may be as low as after the trim.) */
    size_t in_use_full = full.ss_hot + full.ss_draining;
    size_t in_use_freed = freed.ss_hot + freed.ss_draining;
    size_t in_use_after = after.ss_hot + after.ss_draining;
    print_message("SuperSlabs HOT+DRAINING: %zu when the threads had exited, %zu after the remote "
                  "frees, %zu after hak_trim\n", in_use_full, in_use_freed, in_use_after);
    assert_true(in_use_after < in_use_full);
    assert_true(in_use_after <= in_use_freed);
    assert_int_equal(after.ss_free, 0);
}

/* ==== a young thread freeing an exited thread's blocks takes its heap ===== */
#define TO_BLOCKS 512
#define TO_SIZE   64

static item_t to_tab[TO_BLOCKS];
static sem_t to_allocated, to_first_gone;
static void *to_addr[TO_BLOCKS];

/* The first thread: has a heap while the second allocates, exits first. */
static void *to_first(void *arg)
{
    (void)arg;
    item_t it;
    item_new(&it, TO_SIZE, 1, "to-first");
    sem_wait(&to_allocated);
    item_free(&it, "to-first");
    return NULL;
}

static void *to_second(void *arg)
{
    (void)arg;
    for (int i = 0; i < TO_BLOCKS; i++) {
        item_new(&to_tab[i], TO_SIZE, 0x70000u + (uint64_t)i, "to-second");
        to_addr[i] = to_tab[i].p;
    }
    sem_post(&to_allocated);
    sem_wait(&to_first_gone);     /* exits after the first */
    return NULL;
}

/* Leaves TO_BLOCKS blocks in to_tab, allocated by a thread that exited
 * after another one that had a heap at the same time. */
static void to_leave_heap(void)
{
    pthread_t a, b;
    assert_int_equal(sem_init(&to_allocated, 0, 0), 0);
    assert_int_equal(sem_init(&to_first_gone, 0, 0), 0);
    assert_int_equal(pthread_create(&a, NULL, to_first, NULL), 0);
    assert_int_equal(pthread_create(&b, NULL, to_second, NULL), 0);
    assert_int_equal(pthread_join(a, NULL), 0);
    sem_post(&to_first_gone);
    assert_int_equal(pthread_join(b, NULL), 0);
}

/* Frees to_tab's blocks, allocates as many of the same size, and says how
 * many came back at an address of the freed ones. */
static int to_free_and_reuse(void)
{
    for (int i = 0; i < TO_BLOCKS; i++) item_free(&to_tab[i], "to-free");
    item_t fresh[TO_BLOCKS];
    int reused = 0;
    for (int i = 0; i < TO_BLOCKS; i++) {
        item_new(&fresh[i], TO_SIZE, 0x71000u + (uint64_t)i, "to-fresh");
        for (int j = 0; j < TO_BLOCKS; j++)
            if (fresh[i].p == to_addr[j]) {
                reused++;
                break;
            }
    }
    for (int i = 0; i < TO_BLOCKS; i++) item_free(&fresh[i], "to-fresh");
    return reused;
}

static void *to_successor(void *arg)
{
    void *own = malloc(TO_SIZE);      /* adopts a heap: not the second's */
    free(own);
    *(int *)arg = to_free_and_reuse();
    return NULL;
}

static void test_exit_successor_takes_over(void **state)
{
    (void)state;
    long errs0 = atomic_load(&stress_errors);
    to_leave_heap();
    int reused = -1;
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, to_successor, &reused), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    print_message("successor: %d of %d blocks at the freed addresses\n", reused, TO_BLOCKS);
    assert_int_equal(atomic_load(&stress_errors) - errs0, 0);
    assert_true(reused >= TO_BLOCKS / 2);

    /* An old thread keeps its heap: main, after many slow paths (a slab
     * runs dry every 64 of these 1 KiB blocks). */
    enum { OLD_BLOCKS = 64 * 100 };
    void **b = malloc(OLD_BLOCKS * sizeof *b);
    assert_non_null(b);
    for (int i = 0; i < OLD_BLOCKS; i++) b[i] = malloc(1024);
    for (int i = 0; i < OLD_BLOCKS; i++) free(b[i]);
    free(b);
    to_leave_heap();
    reused = to_free_and_reuse();
    print_message("main: %d of %d blocks at the freed addresses\n", reused, TO_BLOCKS);
    assert_int_equal(atomic_load(&stress_errors) - errs0, 0);
    assert_int_equal(reused, 0);
}

/* ==== the blocks a thread freed last are its successor's first =========== */
/* A thread frees 15 small blocks (they stay in its heap's Tiny cache) and
 * exits; the next thread frees the 16th (so it takes the exited thread's
 * heap over) and allocates: it gets the 16th back, then the last of the 15,
 * warm, without a refill from the slabs (with a purge delay: with none the
 * exiting heap gives its caches back at once). */
#define LC_BLOCKS 16
#define LC_SIZE   48

static void *lc_leaver(void *arg)
{
    void **b = arg;
    for (int i = 0; i < LC_BLOCKS; i++) b[i] = malloc(LC_SIZE);
    for (int i = 1; i < LC_BLOCKS; i++) free(b[i]);
    return NULL;              /* b[0] is left to the successor */
}

static void *lc_successor(void *arg)
{
    void **b = arg;
    free(b[0]);
    b[LC_BLOCKS] = malloc(LC_SIZE);
    b[LC_BLOCKS + 1] = malloc(LC_SIZE);
    return NULL;
}

static void test_exit_cache_left_to_successor(void **state)
{
    (void)state;
    for (int round = 0; round < 10; round++) {
        void *b[LC_BLOCKS + 2] = { 0 };
        pthread_t t;
        assert_int_equal(pthread_create(&t, NULL, lc_leaver, b), 0);
        assert_int_equal(pthread_join(t, NULL), 0);
        assert_int_equal(pthread_create(&t, NULL, lc_successor, b), 0);
        assert_int_equal(pthread_join(t, NULL), 0);
        int sampled = 0;
        for (int i = 0; i < LC_BLOCKS + 2; i++) sampled |= hak_profile_sampled(b[i]);
        void *first = b[LC_BLOCKS], *second = b[LC_BLOCKS + 1];
        free(first);
        free(second);
        if (sampled) continue;        /* a sampled block lives elsewhere */
        /* With no purge delay a leaving heap gives back its caches at once
         * (nothing would come back later to do it): only b[0] is warm. */
        hak_info_t in;
        hak_get_info(&in);
        int kept = in.purge_delay_ms != 0;
        if (first != b[0] || (kept && second != b[LC_BLOCKS - 1]))
            fail_msg("freed %p (last of the exited thread's) and %p (by its successor); the "
                     "successor's mallocs gave %p and %p", b[LC_BLOCKS - 1], b[0], first, second);
        return;
    }
    fail_msg("10 rounds met a sampled block");
}

/* ==== waves of threads that need a heap and threads that need none ====== */
#define MW_THREADS 32
#define MW_WAVES   6
#define MW_BIG     ((size_t)100000)    /* L2.5: a heap of its own */
#define MW_SMALL   ((size_t)640)       /* Tiny: the nursery while young */

static pthread_barrier_t mw_held;
static void *mw_block[MW_THREADS];

static void *mw_thread(void *arg)
{
    uintptr_t i = (uintptr_t)arg;
    size_t size = (i % 2) ? MW_SMALL : MW_BIG;
    unsigned char *p = malloc(size);
    if (p == NULL) {
        atomic_fetch_add(&stress_errors, 1);
    } else {
        memset(p, (int)i, size);
    }
    mw_block[i] = p;
    pthread_barrier_wait(&mw_held);            /* every block of the wave held */
    if (p != NULL && (p[0] != (unsigned char)i || p[size - 1] != (unsigned char)i))
        atomic_fetch_add(&stress_errors, 1);
    if (size == MW_BIG) {
        free(p);
        mw_block[i] = NULL;
    }
    return NULL;
}

static void test_exit_mixed_waves(void **state)
{
    (void)state;
    long errs0 = atomic_load(&stress_errors);
    size_t heaps[MW_WAVES];
    assert_int_equal(pthread_barrier_init(&mw_held, NULL, MW_THREADS), 0);
    for (int w = 0; w < MW_WAVES; w++) {
        pthread_t t[MW_THREADS];
        for (uintptr_t i = 0; i < MW_THREADS; i++)
            assert_int_equal(pthread_create(&t[i], NULL, mw_thread, (void *)i), 0);
        for (int i = 0; i < MW_THREADS; i++) assert_int_equal(pthread_join(t[i], NULL), 0);
        for (int i = 0; i < MW_THREADS; i++) {     /* the small blocks, after their threads */
            free(mw_block[i]);
            mw_block[i] = NULL;
        }
        heaps[w] = info_now().heaps;
    }
    pthread_barrier_destroy(&mw_held);
    print_message("heaps after each wave of %d threads: %zu %zu %zu %zu %zu %zu\n", MW_THREADS,
                  heaps[0], heaps[1], heaps[2], heaps[3], heaps[4], heaps[5]);
    assert_int_equal(atomic_load(&stress_errors) - errs0, 0);
    assert_true(heaps[MW_WAVES - 1] <= heaps[1] + 2);
}

int main(void)
{
    struct CMUnitTest tests[] = {
        cmocka_unit_test(test_young_threads_own_lines),   /* first: no heap abandoned yet */
        cmocka_unit_test(test_exit_blocks_freed_later),
        cmocka_unit_test(test_exit_sequential_heaps),
        cmocka_unit_test(test_exit_memory_swept_by_running_thread),
        cmocka_unit_test(test_exit_memory_trimmed),
        cmocka_unit_test(test_exit_successor_takes_over),
        cmocka_unit_test(test_exit_cache_left_to_successor),
        cmocka_unit_test(test_exit_mixed_waves),
    };
    return st_run_group_tests(tests, NULL, NULL);
}
