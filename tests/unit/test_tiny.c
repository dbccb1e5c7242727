/* Unit tests: the tiny tier (requests of 1 .. 1024 bytes, a per-thread LIFO
 * cache of free blocks per class in front of the slabs).
 *
 * Every size lands in HAK_TIER_TINY, is 16-byte aligned and fully writable
 * up to its usable size; freed blocks are reused LIFO on the same thread,
 * whichever slab they belong to;
 * many live blocks never overlap and keep their contents; blocks may be freed
 * by a thread other than the one that allocated them. */
#include "tier_common.h"

#define TINY_MAX ((size_t)1024)

/* ------------------------------------------------------------------------ */

static void test_every_size(void **state)
{
    const api_t *A = *state;
    static size_t sizes[TINY_MAX];
    for (size_t i = 0; i < TINY_MAX; i++)
        sizes[i] = i + 1;
    check_sizes(A, sizes, TINY_MAX, HAK_TIER_TINY);
}

static void test_lifo_reuse(void **state)
{
    const api_t *A = *state;
    static const size_t sizes[] = { 1, 8, 15, 16, 17, 32, 48, 64, 100, 128, 129,
                                    200, 256, 384, 500, 512, 513, 768, 1000, 1023, 1024 };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        check_lifo(A, sizes[i], HAK_TIER_TINY, NULL);
    /* and once for every tiny class at its exact block size */
    for (int c = 0; c < hak_class_count(); c++)
        if (hak_class_tier(c) == HAK_TIER_TINY)
            check_lifo(A, hak_class_size(c), HAK_TIER_TINY, NULL);
}

static void test_many_blocks_mixed(void **state)
{
    check_many(*state, 4000, 1, TINY_MAX, HAK_TIER_TINY, 11);
}

static void test_many_blocks_one_class(void **state)
{
    /* enough to need several slabs of one class */
    check_many(*state, 3000, 16, 16, HAK_TIER_TINY, 12);
    check_many(*state, 600, 1024, 1024, HAK_TIER_TINY, 13);
}

static void test_free_list_across_superslabs(void **state)
{
    /* Blocks of one class from several 4 MiB SuperSlabs freed together and
     * allocated again (the thread's cache links them in one list: the
     * hardened build must accept its links across chunks). */
    const api_t *A = *state;
    enum { N = 300000 };                 /* 9.6 MB of 32-byte blocks */
    void **p = malloc(N * sizeof *p);
    assert_non_null(p);
    for (int i = 0; i < N; i++) p[i] = alloc_checked(A, 32, HAK_TIER_TINY);
    A->free_(p[0]);
    A->free_(p[N - 1]);
    A->free_(p[N / 2]);
    for (int i = 0; i < 3; i++) {
        void *q = alloc_checked(A, 32, HAK_TIER_TINY);
        memset(q, 0x5a, 32);
        p[i == 0 ? 0 : i == 1 ? N - 1 : N / 2] = q;
    }
    for (int i = 0; i < N; i++) A->free_(p[i]);
    free(p);
}

/* The block freed last comes back first, whichever slab it is in: two
 * blocks of two different slabs (64 KiB pages) of the 64-byte class, freed
 * in turn, come back in the reverse order.  (Popping a slab's own list
 * would hand out the block of the slab being carved, then a fresh one.)
 * A round that meets a block the profiler sampled is tried again. */
static void test_reuse_freed_last_across_slabs(void **state)
{
    const api_t *A = *state;
    enum { N = 3000 };                   /* 1024 blocks of 64 B per slab */
    void **p = malloc(N * sizeof *p);
    assert_non_null(p);
    for (int round = 0; round < 20; round++) {
        for (int i = 0; i < N; i++) p[i] = alloc_checked(A, 64, HAK_TIER_TINY);
        /* a, and the last block of another slab than a's (blocks freed by
         * earlier tests come back in any slab order) */
        int j = N - 1;
        while (j > 0 && ((uintptr_t)p[j] >> 16) == ((uintptr_t)p[0] >> 16)) j--;
        if (j == 0) fail_msg("3000 blocks of 64 B in one slab");
        void *a = p[0], *b = p[j];
        int sampled = hak_profile_sampled(a) || hak_profile_sampled(b);
        A->free_(b);
        A->free_(a);
        void *x = A->malloc_(64), *y = A->malloc_(64);
        sampled |= hak_profile_sampled(x) || hak_profile_sampled(y);
        if (!sampled) {
            if (x != a || y != b)
                fail_msg("freed %p then %p (other slab); malloc gave %p then %p", b, a, x, y);
        }
        p[0] = x;
        p[j] = y;
        for (int i = 0; i < N; i++) A->free_(p[i]);
        if (!sampled) break;
    }
    free(p);
}

static void test_alloc_free_churn(void **state)
{
    /* repeated fill-up and drain of the same class keeps working */
    const api_t *A = *state;
    enum { N = 512 };
    void *p[N];
    for (int round = 0; round < 20; round++) {
        size_t n = 1 + (size_t)round * 50;
        for (int i = 0; i < N; i++) {
            p[i] = alloc_checked(A, n, HAK_TIER_TINY);
            memset(p[i], round, n);
        }
        for (int i = 0; i < N; i++) {
            const unsigned char *c = p[i];
            if (c[0] != (unsigned char)round || c[n - 1] != (unsigned char)round)
                fail_msg("round %d block %d (%p, size %zu) corrupted", round, i, p[i], n);
        }
        for (int k = 0; k < N; k++) /* alternate freeing order */
            A->free_(p[(round & 1) ? N - 1 - k : k]);
    }
}

static void test_cross_thread(void **state)
{
    check_cross_thread(*state, 2000, 1, TINY_MAX, HAK_TIER_TINY, 14);
}

static void test_mixed_names(void **state)
{
    (void)state;
    SKIP_IF_HAK_ONLY(); /* about the libc names */
    /* hak_* and the standard names are one allocator.  A block the heap
     * profiler sampled (HAKMEM_PROFILE) comes from, and goes back to, one of
     * the profiler's own heaps, outside this order: a round that meets one
     * is tried again. */
    for (int round = 0; round < 100; round++) {
        void *p = hak_malloc(40);
        assert_non_null(p);
        assert_int_equal(hak_tier_of(p), HAK_TIER_TINY);
        uintptr_t pa = (uintptr_t)p;
        int sampled = hak_profile_sampled(p);
        free(p);
        void *q = malloc(40);
        sampled |= hak_profile_sampled(q);
        if (!sampled && (uintptr_t)q != pa)
            fail_msg("hak_malloc(40) = %p, free, malloc(40) = %p; expected the same block",
                     (void *)pa, q);
        assert_int_equal(hak_usable_size(q), malloc_usable_size(q));
        hak_free(q);
        void *r = hak_malloc(40);
        sampled |= hak_profile_sampled(r);
        if (!sampled && (uintptr_t)r != pa)
            fail_msg("malloc(40) = %p, hak_free, hak_malloc(40) = %p; expected the same block",
                     (void *)pa, r);
        free(r);
        if (!sampled) return;
    }
    fail_msg("100 rounds met a sampled block");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        TEST_API(test_every_size, API_STD),
        TEST_API(test_every_size, API_HAK),
        TEST_API(test_lifo_reuse, API_STD),
        TEST_API(test_lifo_reuse, API_HAK),
        TEST_API(test_many_blocks_mixed, API_STD),
        TEST_API(test_many_blocks_mixed, API_HAK),
        TEST_API(test_many_blocks_one_class, API_STD),
        TEST_API(test_many_blocks_one_class, API_HAK),
        TEST_API(test_free_list_across_superslabs, API_STD),
        TEST_API(test_free_list_across_superslabs, API_HAK),
        TEST_API(test_reuse_freed_last_across_slabs, API_STD),
        TEST_API(test_reuse_freed_last_across_slabs, API_HAK),
        TEST_API(test_alloc_free_churn, API_STD),
        TEST_API(test_alloc_free_churn, API_HAK),
        TEST_API(test_cross_thread, API_STD),
        TEST_API(test_cross_thread, API_HAK),
        cmocka_unit_test(test_mixed_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
