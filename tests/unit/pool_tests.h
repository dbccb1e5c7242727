/* The body of the pool unit tests test_pool_l2.c and test_pool_l25.c (not a
 * program of its own): sizes from the class table and the tier's edges, LIFO
 * reuse, many live blocks, ring overflow and cross-thread frees.
 *
 * The including file defines, before including this one:
 *   TIER                 the tier under test (HAK_TIER_L2, HAK_TIER_L25)
 *   SIZE_LO, SIZE_HI     the tier's smallest and largest request (size_t)
 *   POOL_RING_ENV        the variable setting the per-thread ring capacity
 *   POOL_MANY_COUNT      live blocks in test_many_blocks_mixed
 *   POOL_OVERFLOW_COUNT  live blocks of one class in test_ring_overflow, run
 *                        at SIZE_LO, POOL_OVERFLOW_MID and SIZE_HI
 *   POOL_OVERFLOW_MID    the middle size class of test_ring_overflow
 *   POOL_XT_COUNT        blocks handed between threads in test_cross_thread
 * and may define POOL_EXTRA_TESTS: more entries for main's table (tests of
 * its own, defined before it includes this file). */
#ifndef HAKMEM_TESTS_POOL_TESTS_H
#define HAKMEM_TESTS_POOL_TESTS_H

#if !defined(TIER) || !defined(SIZE_LO) || !defined(SIZE_HI) || !defined(POOL_RING_ENV) || \
    !defined(POOL_MANY_COUNT) || !defined(POOL_OVERFLOW_COUNT) ||                          \
    !defined(POOL_OVERFLOW_MID) || !defined(POOL_XT_COUNT)
#error "define the tier parameters (see the top of pool_tests.h) before including it"
#endif

#include "tier_common.h"

/* Sizes derived from the class table: for each class of this tier, one byte
 * above the previous class, the middle, and the class's block size. */
static size_t class_sizes(size_t *out, size_t max)
{
    size_t k = 0;
    for (int c = 0; c < hak_class_count(); c++) {
        if (hak_class_tier(c) != TIER)
            continue;
        size_t cs = hak_class_size(c);
        size_t lo = c > 0 ? hak_class_size(c - 1) + 1 : 1;
        if (lo < SIZE_LO)
            lo = SIZE_LO;
        if (cs > SIZE_HI)
            cs = SIZE_HI;
        if (k + 3 > max)
            break;
        out[k++] = lo;
        out[k++] = lo + (cs - lo) / 2;
        out[k++] = cs;
    }
    return k;
}

static void test_class_sizes(void **state)
{
    const api_t *A = *state;
    size_t sizes[3 * 256];
    size_t k = class_sizes(sizes, sizeof sizes / sizeof sizes[0]);
    if (k == 0)
        fail_msg("no size class has tier %s", tier_name(TIER));
    check_sizes(A, sizes, k, TIER);
    const size_t edges[] = { SIZE_LO, SIZE_LO + 1, SIZE_LO + 15, SIZE_LO + 16,
                             SIZE_HI - 16, SIZE_HI - 1, SIZE_HI,
                             SIZE_LO + (SIZE_HI - SIZE_LO) / 3 };
    check_sizes(A, edges, sizeof edges / sizeof edges[0], TIER);
}

static void test_lifo_reuse(void **state)
{
    const api_t *A = *state;
    size_t sizes[3 * 256];
    size_t k = class_sizes(sizes, sizeof sizes / sizeof sizes[0]);
    for (size_t i = 0; i < k; i++)
        check_lifo(A, sizes[i], TIER, POOL_RING_ENV);
}

/* Interleaving two classes does not disturb each class's LIFO order.  (A
 * block the heap profiler sampled lives outside that order: such a round is
 * tried again, and at most 20 times, as in check_lifo.) */
static void test_lifo_interleaved_classes(void **state)
{
    const api_t *A = *state;
    const size_t n1 = SIZE_LO, n2 = SIZE_HI;
    for (int round = 0; round < 20; round++) {
        void *a = alloc_checked(A, n1, TIER);
        void *b = alloc_checked(A, n2, TIER);
        uintptr_t aa = (uintptr_t)a, ba = (uintptr_t)b;
        int sampled = hak_profile_sampled(a) || hak_profile_sampled(b);
        A->free_(a);
        A->free_(b);
        void *x = A->malloc_(n1);
        void *y = A->malloc_(n2);
        sampled |= hak_profile_sampled(x) || hak_profile_sampled(y);
        if (!sampled && ((uintptr_t)x != aa || (uintptr_t)y != ba))
            fail_msg("free(%p /* %zu B */), free(%p /* %zu B */), then malloc(%zu) = %p, "
                     "malloc(%zu) = %p; expected the same blocks back",
                     (void *)aa, n1, (void *)ba, n2, n1, x, n2, y);
        A->free_(x);
        A->free_(y);
        if (!sampled) return;
    }
}

static void test_many_blocks_mixed(void **state)
{
    check_many(*state, POOL_MANY_COUNT, SIZE_LO, SIZE_HI, TIER, 21);
}

/* More blocks of one class than a per-thread ring holds, then all freed
 * (overflowing the ring), then allocated again. */
static void test_ring_overflow(void **state)
{
    const api_t *A = *state;
    check_many(A, POOL_OVERFLOW_COUNT, SIZE_LO, SIZE_LO, TIER, 22);
    check_many(A, POOL_OVERFLOW_COUNT, POOL_OVERFLOW_MID, POOL_OVERFLOW_MID, TIER, 23);
    check_many(A, POOL_OVERFLOW_COUNT, SIZE_HI, SIZE_HI, TIER, 24);
}

/* Blocks of many classes, then of one class only: what another thread
 * freed of one class comes back to the owner as whole slab lists (a
 * ring's chain), each block handed out once. */
static void test_cross_thread(void **state)
{
    check_cross_thread(*state, POOL_XT_COUNT, SIZE_LO, SIZE_HI, TIER, 25);
    check_cross_thread(*state, POOL_XT_COUNT, SIZE_LO, SIZE_LO, TIER, 26);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        TEST_API(test_class_sizes, API_STD),
        TEST_API(test_class_sizes, API_HAK),
        TEST_API(test_lifo_reuse, API_STD),
        TEST_API(test_lifo_reuse, API_HAK),
        TEST_API(test_lifo_interleaved_classes, API_STD),
        TEST_API(test_lifo_interleaved_classes, API_HAK),
        TEST_API(test_many_blocks_mixed, API_STD),
        TEST_API(test_many_blocks_mixed, API_HAK),
        TEST_API(test_ring_overflow, API_STD),
        TEST_API(test_ring_overflow, API_HAK),
        TEST_API(test_cross_thread, API_STD),
        TEST_API(test_cross_thread, API_HAK),
#ifdef POOL_EXTRA_TESTS
        POOL_EXTRA_TESTS
#endif
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

#endif /* HAKMEM_TESTS_POOL_TESTS_H */
