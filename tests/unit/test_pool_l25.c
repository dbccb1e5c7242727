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

#define TIER HAK_TIER_L25
#define SIZE_LO ((size_t)53249)
#define SIZE_HI ((size_t)1048576)
#define POOL_RING_ENV "HAKMEM_L25_RING_CAP"
#define POOL_MANY_COUNT 48
#define POOL_OVERFLOW_COUNT 40
#define POOL_OVERFLOW_MID 262144
#define POOL_XT_COUNT 32

#include "tier_common.h"

/* ---- the L2.5 slabs are shared by all threads ----------------------------
 * A thread frees L2.5 blocks while it keeps running; another thread, which
 * has not used the tier yet, then allocates as many of the same size: many
 * of them must be the first thread's blocks (all but those its ring still
 * holds), not fresh memory of its own.  Blocks the heap profiler sampled
 * (HAKMEM_PROFILE) live apart and are not counted; when it samples nearly
 * all of them (a small HAKMEM_PROFILE_RATE) there is nothing to check. */
#define SHARED_SIZE  ((size_t)100000)
#define SHARED_COUNT 32

typedef struct {
    const api_t *api;
    void *blocks[SHARED_COUNT];
    int plain;                     /* of them not sampled by the profiler */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int freed, done;
} shared_t;

static void *shared_first(void *arg)
{
    shared_t *sh = arg;
    void *kept[SHARED_COUNT];
    for (int i = 0; i < SHARED_COUNT; i++) {
        kept[i] = sh->blocks[i] = sh->api->malloc_(SHARED_SIZE);
        if (sh->blocks[i] != NULL) memset(sh->blocks[i], 0x5c, SHARED_SIZE);
        if (sh->blocks[i] != NULL && !hak_profile_sampled(sh->blocks[i])) sh->plain++;
        else sh->blocks[i] = NULL;                 /* not counted below */
    }
    for (int i = 0; i < SHARED_COUNT; i++) sh->api->free_(kept[i]);
    pthread_mutex_lock(&sh->lock);
    sh->freed = 1;
    pthread_cond_broadcast(&sh->cond);
    while (!sh->done) pthread_cond_wait(&sh->cond, &sh->lock);   /* alive meanwhile */
    pthread_mutex_unlock(&sh->lock);
    return NULL;
}

static void *shared_second(void *arg)
{
    shared_t *sh = arg;
    void *mine[SHARED_COUNT];
    long reused = 0;
    for (int i = 0; i < SHARED_COUNT; i++) {
        mine[i] = sh->api->malloc_(SHARED_SIZE);
        if (mine[i] != NULL && hak_profile_sampled(mine[i])) continue;
        for (int j = 0; j < SHARED_COUNT && mine[i] != NULL; j++)
            if (mine[i] == sh->blocks[j]) {
                reused++;
                break;
            }
    }
    for (int i = 0; i < SHARED_COUNT; i++) sh->api->free_(mine[i]);
    return (void *)reused;
}

static void test_freed_blocks_serve_other_threads(void **state)
{
    shared_t sh = { .api = *state, .lock = PTHREAD_MUTEX_INITIALIZER,
                    .cond = PTHREAD_COND_INITIALIZER };
    pthread_t first, second;
    assert_int_equal(pthread_create(&first, NULL, shared_first, &sh), 0);
    pthread_mutex_lock(&sh.lock);
    while (!sh.freed) pthread_cond_wait(&sh.cond, &sh.lock);
    pthread_mutex_unlock(&sh.lock);
    void *reused = NULL;
    assert_int_equal(pthread_create(&second, NULL, shared_second, &sh), 0);
    assert_int_equal(pthread_join(second, &reused), 0);
    pthread_mutex_lock(&sh.lock);
    sh.done = 1;
    pthread_cond_broadcast(&sh.cond);
    pthread_mutex_unlock(&sh.lock);
    assert_int_equal(pthread_join(first, NULL), 0);
    print_message("%ld of %d blocks were the running thread's freed blocks (%d not sampled)\n",
                  (long)reused, SHARED_COUNT, sh.plain);
    if (sh.plain >= SHARED_COUNT / 2 && (long)reused < sh.plain / 4)
        fail_msg("a thread got %ld of the %d blocks another running thread had freed",
                 (long)reused, sh.plain);
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
#define OLDER_COUNT  64
#define RECENT_COUNT 32

typedef struct {
    const api_t *api;
    int count;
    void *blocks[OLDER_COUNT];      /* those the profiler did not sample */
    int plain;
    shared_t *sync;                 /* NULL: exit at once after the frees */
} batch_t;

static void *free_batch(void *arg)
{
    batch_t *b = arg;
    void *all[OLDER_COUNT];
    for (int i = 0; i < b->count; i++) {
        all[i] = b->api->malloc_(RECENT_SIZE);
        if (all[i] != NULL) memset(all[i], 0x3a, RECENT_SIZE);
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

static void *count_reused(void *arg)
{
    batch_t *recent = arg;
    void *mine[RECENT_COUNT];
    long reused = 0;
    for (int i = 0; i < RECENT_COUNT; i++) {
        mine[i] = recent->api->malloc_(RECENT_SIZE);
        for (int j = 0; j < recent->plain && mine[i] != NULL; j++)
            if (mine[i] == recent->blocks[j]) {
                reused++;
                break;
            }
    }
    for (int i = 0; i < RECENT_COUNT; i++) recent->api->free_(mine[i]);
    return (void *)reused;
}

static void test_freed_last_serve_first(void **state)
{
    const api_t *api = *state;
    shared_t sync = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };
    batch_t older = { .api = api, .count = OLDER_COUNT };
    batch_t recent = { .api = api, .count = RECENT_COUNT, .sync = &sync };
    pthread_t t_older, t_recent, t_reader;
    assert_int_equal(pthread_create(&t_older, NULL, free_batch, &older), 0);
    assert_int_equal(pthread_join(t_older, NULL), 0);
    assert_int_equal(pthread_create(&t_recent, NULL, free_batch, &recent), 0);
    pthread_mutex_lock(&sync.lock);
    while (!sync.freed) pthread_cond_wait(&sync.cond, &sync.lock);
    pthread_mutex_unlock(&sync.lock);
    void *reused = NULL;
    assert_int_equal(pthread_create(&t_reader, NULL, count_reused, &recent), 0);
    assert_int_equal(pthread_join(t_reader, &reused), 0);
    pthread_mutex_lock(&sync.lock);
    sync.done = 1;
    pthread_cond_broadcast(&sync.cond);
    pthread_mutex_unlock(&sync.lock);
    assert_int_equal(pthread_join(t_recent, NULL), 0);
    /* the second thread's ring keeps some of its own: at most its byte
     * budget's worth (1 MiB, at least two blocks) */
    long ring = (long)((size_t)1 << 20) / (long)hak_class_size(hak_size_class(RECENT_SIZE));
    if (ring < 2) ring = 2;
    long flushed = recent.plain - ring;
    print_message("%ld of the %ld blocks the running thread freed past its ring came back "
                  "(%d of %d not sampled)\n", (long)reused, flushed, recent.plain, RECENT_COUNT);
    if (flushed >= RECENT_COUNT / 2 && (long)reused < flushed / 2)
        fail_msg("a refill took %ld of the %ld blocks freed last: older empty slabs served first",
                 (long)reused, flushed);
}

#define POOL_EXTRA_TESTS                                        \
    TEST_API(test_freed_blocks_serve_other_threads, API_STD),  \
    TEST_API(test_freed_blocks_serve_other_threads, API_HAK),  \
    TEST_API(test_freed_last_serve_first, API_STD),            \
    TEST_API(test_freed_last_serve_first, API_HAK),

#include "pool_tests.h"
