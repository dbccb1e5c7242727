/* Unit tests: the L2.5 pool (requests of 52 KiB + 1 = 53249 B .. 1 MiB,
 * per-thread rings).
 *
 * Every size in the tier's range lands in HAK_TIER_L25, is 16-byte aligned
 * and fully writable up to its usable size; a freed block is reused LIFO by
 * the next same-size request on the same thread (per size class, even when
 * classes are interleaved); many live blocks, more than a per-thread ring
 * holds, never overlap and keep their contents; blocks may be freed by
 * another thread.  The tests are in pool_tests.h, shared with
 * test_pool_l2.c; this file sets the tier's parameters and adds one of the
 * tier's own: its slabs are shared, so blocks a running thread freed serve
 * another thread. */
#include "hakmem.h"
#include "box/chunk_map_box.h"
#include "hakmem_pool.h"

#include <stdatomic.h>
#include <time.h>

#define TIER HAK_TIER_L25
#define SIZE_LO ((size_t)53249)
#define SIZE_HI ((size_t)1048576)
#define POOL_RING_ENV "HAKMEM_L25_RING_CAP"
#define POOL_MANY_COUNT 48
#define POOL_OVERFLOW_COUNT 40
#define POOL_OVERFLOW_MID 262144
#define POOL_XT_COUNT 32

#include "tier_common.h"

/* Threads that allocate, free and look for each other's blocks.  A batch:
 * `count` blocks of `size` bytes, allocated, written and freed by one
 * thread, which then exits (sync NULL) or says so and stays alive until
 * released.  Blocks the heap profiler sampled (HAKMEM_PROFILE) live apart
 * and are not recorded (`plain` are). */
#define BATCH_MAX 64

typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int freed, done;
} sync_t;

typedef struct {
    const api_t *api;
    size_t size;
    int count;
    void *blocks[BATCH_MAX];      /* those the profiler did not sample */
    int plain;
    sync_t *sync;
} batch_t;

static void *free_batch(void *arg)
{
    batch_t *b = arg;
    void *all[BATCH_MAX];
    for (int i = 0; i < b->count; i++) {
        all[i] = b->api->malloc_(b->size);
        if (all[i] != NULL) memset(all[i], 0x3a, b->size);
        if (all[i] != NULL && !hak_profile_sampled(all[i])) b->blocks[b->plain++] = all[i];
    }
    for (int i = 0; i < b->count; i++) b->api->free_(all[i]);
    if (b->sync == NULL) return NULL;
    pthread_mutex_lock(&b->sync->lock);
    b->sync->freed = 1;
    pthread_cond_broadcast(&b->sync->cond);
    while (!b->sync->done) pthread_cond_wait(&b->sync->cond, &b->sync->lock);
    pthread_mutex_unlock(&b->sync->lock);
    return NULL;
}

/* A new thread allocates as many blocks as batch b freed, of its size:
 * how many of them lie in memory of b's blocks. */
static void *count_reused(void *arg)
{
    batch_t *b = arg;
    void *mine[BATCH_MAX];
    long reused = 0;
    for (int i = 0; i < b->count; i++) {
        mine[i] = b->api->malloc_(b->size);
        const char *q = mine[i];
        for (int j = 0; j < b->plain && q != NULL; j++) {
            const char *o = b->blocks[j];
            if (q < o + b->size && o < q + b->size) {
                reused++;
                break;
            }
        }
    }
    for (int i = 0; i < b->count; i++) b->api->free_(mine[i]);
    return (void *)reused;
}

/* Batch b freed by a thread that stays alive, then count_reused in
 * another: how many of b's blocks it got. */
static long reused_while_running(batch_t *b)
{
    sync_t sync = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };
    pthread_t freer, reader;
    b->sync = &sync;
    assert_int_equal(pthread_create(&freer, NULL, free_batch, b), 0);
    pthread_mutex_lock(&sync.lock);
    while (!sync.freed) pthread_cond_wait(&sync.cond, &sync.lock);
    pthread_mutex_unlock(&sync.lock);
    void *reused = NULL;
    assert_int_equal(pthread_create(&reader, NULL, count_reused, b), 0);
    assert_int_equal(pthread_join(reader, &reused), 0);
    pthread_mutex_lock(&sync.lock);
    sync.done = 1;
    pthread_cond_broadcast(&sync.cond);
    pthread_mutex_unlock(&sync.lock);
    assert_int_equal(pthread_join(freer, NULL), 0);
    b->sync = NULL;
    return (long)reused;
}

/* ---- the L2.5 slabs are shared by all threads ----------------------------
 * A thread frees L2.5 blocks while it keeps running; another thread, which
 * has not used the tier yet, then allocates as many of the same size: many
 * of them must be the first thread's blocks (all but those its ring still
 * holds), not fresh memory of its own.  When the profiler samples nearly
 * all of them (a small HAKMEM_PROFILE_RATE) there is nothing to check. */
#define SHARED_SIZE  ((size_t)100000)
#define SHARED_COUNT 32

/* A purge pass that comes between the frees and the refill (once a delay;
 * with no purger thread, in whichever slow path finds it due) retires the
 * spare slabs, and the refill carves new ones from the best-fitting
 * resident run, not the same blocks (under load with HAKMEM_PURGE_THREAD=0,
 * 1 run in 10 of each test below).  Such a pass comes at most once a
 * delay: each test looks twice, and fails when both looks do. */
#define LOOKS 2

static void test_freed_blocks_serve_other_threads(void **state)
{
    for (int look = 1;; look++) {
        batch_t first = { .api = *state, .size = SHARED_SIZE, .count = SHARED_COUNT };
        long reused = reused_while_running(&first);
        print_message("%ld of %d blocks were the running thread's freed blocks (%d not sampled)\n",
                      reused, SHARED_COUNT, first.plain);
        if (first.plain < SHARED_COUNT / 2 || reused >= first.plain / 4) return;
        if (look == LOOKS)
            fail_msg("a thread got %ld of the %d blocks another running thread had freed",
                     reused, first.plain);
    }
}

/* ---- the blocks freed last serve first ------------------------------------
 * The shared slabs keep empty slabs for the next refills; those freed into
 * last must serve before those left longer (resident and warm, where the
 * purger may have given an older one's pages back).  A thread frees
 * OLDER_COUNT blocks and exits (its ring goes back to the slabs: as many
 * empty slabs as the shared heap keeps); a second frees RECENT_COUNT and
 * stays; a third then allocates RECENT_COUNT: at least half of those the
 * second freed beyond what its ring holds must come back to it, not the
 * first thread's older ones. */
#define RECENT_SIZE  ((size_t)150000)
#define OLDER_COUNT  BATCH_MAX
#define RECENT_COUNT 32

static void test_freed_last_serve_first(void **state)
{
    for (int look = 1;; look++) {
        batch_t older = { .api = *state, .size = RECENT_SIZE, .count = OLDER_COUNT };
        batch_t recent = { .api = *state, .size = RECENT_SIZE, .count = RECENT_COUNT };
        pthread_t t_older;
        assert_int_equal(pthread_create(&t_older, NULL, free_batch, &older), 0);
        assert_int_equal(pthread_join(t_older, NULL), 0);
        long reused = reused_while_running(&recent);
        /* the second thread's ring keeps some of its own: at most its byte
         * budget's worth (1 MiB, at least two blocks) */
        long ring = (long)((size_t)1 << 20) / (long)hak_class_size(hak_size_class(RECENT_SIZE));
        if (ring < 2) ring = 2;
        long flushed = recent.plain - ring;
        print_message("%ld of the running thread's %d freed blocks came back (at least %ld went "
                      "past its ring; %d not sampled)\n", reused, recent.plain, flushed, recent.plain);
        if (flushed < RECENT_COUNT / 2 || reused >= flushed / 2) return;
        if (look == LOOKS)
            fail_msg("a refill took %ld of the %ld blocks freed last: older empty slabs served "
                     "first", reused, flushed);
    }
}

/* ---- an emptied slab of one block stays for the next refill -------------
 * A 64 KiB block is a slab of its own: the refill that takes it leaves the
 * slab exhausted (parked), the ring flush that returns it empties it.  The
 * shared heap must keep such slabs as spares of their class, up to 4 MiB
 * of them (64 of 64 KiB), as it keeps a queued slab that empties:
 * retiring them made every refill search a SuperSlab for a new span
 * (2 threads replacing 64-256 KiB blocks spent a third of their
 * instructions there).  A thread allocates ONE_COUNT blocks and frees
 * them; the flushes of its ring return the oldest first, so of the first
 * ONE_KEPT it freed at least half must still be in slabs of their class
 * (not all: the ring's first flush returns first the blocks of its last
 * refill that malloc did not hand out, and they count as spares too;
 * retired at once, none stayed).  A timed purger
 * pass retires the spares (hakmem_heap.c), and one that falls between the
 * frees and the look leaves them retired: three tries.  With delay 0
 * passes come at every kick: nothing to check. */
#define ONE_SIZE  ((size_t)65536)
#define ONE_COUNT BATCH_MAX
#define ONE_KEPT  16

static long one_block_slabs_kept(const api_t *api, long *plain)
{
    void *all[ONE_COUNT];
    bool sampled[ONE_COUNT];      /* the profiler's blocks live apart */
    for (int i = 0; i < ONE_COUNT; i++) {
        all[i] = api->malloc_(ONE_SIZE);
        assert_non_null(all[i]);
        memset(all[i], 0x5c, ONE_SIZE);
        sampled[i] = hak_profile_sampled(all[i]);
    }
    unsigned cls = hak_size_class(ONE_SIZE);
    assert_int_equal(hak_class_size(cls), ONE_SIZE);
    for (int i = 0; i < ONE_COUNT; i++) api->free_(all[i]);
    long kept = 0;
    *plain = 0;
    hak_l25_lock();             /* the purger's pass may retire them meanwhile */
    for (int i = 0; i < ONE_KEPT; i++) {
        if (sampled[i]) continue;
        const hak_slab_t *s = hak_slab_of(all[i]);
        ++*plain;
        kept += s->tier == HAK_TIER_L25 && s->cls == cls;
    }
    hak_l25_unlock();
    return kept;
}

static void test_emptied_one_block_slabs_kept(void **state)
{
    hak_info_t info;
    hak_get_info(&info);
    if (info.purge_delay_ms == 0) {
        skip();
        return;
    }
    long kept = 0, plain = 0;
    for (int i = 0; i < 3 && (2 * kept < plain || plain == 0); i++)
        kept = one_block_slabs_kept(*state, &plain);
    print_message("%ld of the %ld blocks freed first still in a slab of their class\n", kept, plain);
    if (2 * kept < plain)
        fail_msg("%ld of the %ld 64 KiB blocks freed first were retired with their slabs",
                 plain - kept, plain);
}

/* ---- the shared heap's lock excludes every other thread ------------------
 * Any thread takes the shared heap's lock, and the layers below take it
 * again inside (nested).  A thread that holds it nests freely; another
 * thread that reaches a layer's lock meanwhile must wait until the holder
 * lets go of its outermost one, not count itself in.  Before the holder was
 * recorded, the nesting count was shared: a second thread that found it
 * non-zero entered beside the holder and, on leaving, could let the lock go
 * under it or leave it held by no one. */
static _Atomic int lock_entered;

static void *enter_shared_heap(void *arg)
{
    (void)arg;
    hak_heap_lock(&hak_l25_heap);          /* as a layer below would */
    atomic_store(&lock_entered, 1);
    hak_heap_unlock(&hak_l25_heap);
    return NULL;
}

static void test_shared_heap_lock_excludes(void **state)
{
    (void)state;
    atomic_store(&lock_entered, 0);
    hak_l25_lock();
    hak_heap_lock(&hak_l25_heap);          /* nested, as hak_class_take's is */
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, enter_shared_heap, NULL), 0);
    struct timespec pause = { 0, 50 * 1000 * 1000 };
    nanosleep(&pause, NULL);
    hak_heap_unlock(&hak_l25_heap);        /* still held: the outer lock */
    nanosleep(&pause, NULL);
    int early = atomic_load(&lock_entered);
    hak_l25_unlock();
    assert_int_equal(pthread_join(t, NULL), 0);
    if (early) fail_msg("another thread entered the shared heap's lock while this one held it");
    assert_int_equal(atomic_load(&lock_entered), 1);
}

#define POOL_EXTRA_TESTS                                        \
    cmocka_unit_test(test_shared_heap_lock_excludes),          \
    TEST_API(test_freed_blocks_serve_other_threads, API_STD),  \
    TEST_API(test_freed_blocks_serve_other_threads, API_HAK),  \
    TEST_API(test_freed_last_serve_first, API_STD),            \
    TEST_API(test_freed_last_serve_first, API_HAK),            \
    TEST_API(test_emptied_one_block_slabs_kept, API_STD),      \
    TEST_API(test_emptied_one_block_slabs_kept, API_HAK),

#include "pool_tests.h"
