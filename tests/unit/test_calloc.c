/* Unit tests: calloc (and hak_calloc).
 *
 * calloc memory reads as zero even when the block is recycled from a freed
 * dirty block, in every tier and whichever thread freed it; nmemb * size
 * overflow and unsatisfiable requests give NULL with errno ENOMEM;
 * calloc(0, n) gives a unique, freeable, non-NULL pointer. */
#include <errno.h>

#define TIER_COMMON_OWN_API /* api_t below */
#include "tier_common.h"

#define MiB ((size_t)1024 * 1024)

typedef struct {
    void *(*malloc_)(size_t);
    void (*free_)(void *);
    void *(*calloc_)(size_t, size_t);
    size_t (*usable)(const void *);
} api_t;

static api_t API_STD = { malloc, free, calloc, std_usable };
static api_t API_HAK = { hak_malloc, hak_free, hak_calloc, hak_usable_size };

/* Offset of the first non-zero byte, or n. */
static size_t first_nonzero(const void *p, size_t n)
{
    const unsigned char *c = p;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, c + i, 8);
        if (w != 0)
            break;
    }
    for (; i < n; i++)
        if (c[i] != 0)
            return i;
    return n;
}

/* size, number of blocks to dirty and recycle */
static const struct { size_t n, count; } recycle_cases[] = {
    { 1, 64 }, { 16, 64 }, { 100, 64 }, { 1000, 64 }, { 1024, 64 },
    { 1025, 32 }, { 4096, 32 }, { 20000, 16 }, { 53248, 16 },
    { 53249, 8 }, { 300000, 6 }, { 1048576, 4 },
    { 1048577, 3 }, { 3 * MiB + 5, 3 },
};
#define N_RECYCLE (sizeof recycle_cases / sizeof recycle_cases[0])
#define MAX_COUNT 64

static void dirty_blocks(const api_t *A, void **p, size_t n, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        p[i] = A->malloc_(n);
        if (p[i] == NULL)
            fail_msg("malloc(%zu) returned NULL", n);
        memset(p[i], 0xAA, A->usable(p[i]));
    }
}

static void calloc_and_check(const api_t *A, size_t n, size_t count, int split)
{
    void *q[MAX_COUNT];
    for (size_t i = 0; i < count; i++) {
        /* vary how n is split into nmemb * size */
        size_t nmemb = 1, size = n;
        if (split && n % 4 == 0) {
            nmemb = 4;
            size = n / 4;
        } else if (split) {
            nmemb = n;
            size = 1;
        }
        q[i] = A->calloc_(nmemb, size);
        if (q[i] == NULL)
            fail_msg("calloc(%zu, %zu) returned NULL", nmemb, size);
        int t = hak_tier_of(q[i]);
        if (t != (int)expected_tier(n))
            fail_msg("hak_tier_of(calloc(%zu, %zu)) = %s, expected %s", nmemb, size,
                     tier_name(t), tier_name(expected_tier(n)));
        if ((uintptr_t)q[i] % 16 != 0)
            fail_msg("calloc(%zu, %zu) = %p not 16-byte aligned", nmemb, size, q[i]);
        size_t bad = first_nonzero(q[i], n);
        if (bad != n)
            fail_msg("calloc(%zu, %zu) = %p (block %zu of %zu): byte %zu is 0x%02x, not 0",
                     nmemb, size, q[i], i, count, bad, ((unsigned char *)q[i])[bad]);
        memset(q[i], 0xAA, n); /* dirty it for the next round */
    }
    for (size_t i = 0; i < count; i++)
        A->free_(q[i]);
}

/* ------------------------------------------------------------------------ */

static void test_calloc_recycled_is_zero(void **state)
{
    const api_t *A = *state;
    void *p[MAX_COUNT];
    for (size_t c = 0; c < N_RECYCLE; c++) {
        size_t n = recycle_cases[c].n, count = recycle_cases[c].count;
        dirty_blocks(A, p, n, count);
        for (size_t i = 0; i < count; i++)
            A->free_(p[i]);
        calloc_and_check(A, n, count, 0);
        calloc_and_check(A, n, count, 1); /* again: recycles the dirtied calloc blocks */
    }
}

/* Every size up to 160 B (calloc zeroes up to 128 B with overlapping
 * 16-byte stores): the whole request reads zero, and the dirty live blocks
 * around the recycled one keep every byte of their usable size. */
static void test_calloc_small_every_size(void **state)
{
    const api_t *A = *state;
    enum { K = 9 };
    for (size_t n = 0; n <= 160; n++) {
        unsigned char *p[K];
        for (int i = 0; i < K; i++) {
            p[i] = A->malloc_(n);
            assert_non_null(p[i]);
            memset(p[i], 0xAA, A->usable(p[i]));
        }
        A->free_(p[K / 2]);
        unsigned char *q = A->calloc_(1, n);
        assert_non_null(q);
        size_t bad = first_nonzero(q, n);
        if (bad != n)
            fail_msg("calloc(1, %zu) = %p: byte %zu is 0x%02x, not 0", n, (void *)q, bad, q[bad]);
        for (int i = 0; i < K; i++) {
            if (i == K / 2) continue;
            size_t u = A->usable(p[i]);
            for (size_t k = 0; k < u; k++)
                if (p[i][k] != 0xAA)
                    fail_msg("calloc(1, %zu) = %p changed byte %zu of the live block %p", n,
                             (void *)q, k, (void *)p[i]);
            A->free_(p[i]);
        }
        A->free_(q);
    }
}

/* A freed dirty block of a bigger size in the same class. */
static void test_calloc_recycled_same_class(void **state)
{
    const api_t *A = *state;
    for (int c = 0; c < hak_class_count(); c++) {
        size_t cs = hak_class_size(c);
        size_t lo = c > 0 ? hak_class_size(c - 1) + 1 : 1;
        void *p = A->malloc_(cs);
        assert_non_null(p);
        memset(p, 0xAA, A->usable(p));
        A->free_(p);
        unsigned char *q = A->calloc_(1, lo);
        if (q == NULL)
            fail_msg("calloc(1, %zu) returned NULL", lo);
        size_t bad = first_nonzero(q, lo);
        if (bad != lo)
            fail_msg("class %d: calloc(1, %zu) after free of dirty malloc(%zu): byte %zu is "
                     "0x%02x", c, lo, cs, bad, q[bad]);
        A->free_(q);
    }
}

/* Dirty blocks freed by another thread, then calloc here. */
typedef struct {
    const api_t *A;
    void **p;
    size_t count;
} xfree_t;

static void *free_all(void *arg)
{
    xfree_t *x = arg;
    for (size_t i = 0; i < x->count; i++)
        x->A->free_(x->p[i]);
    return NULL;
}

static void *dirty_all(void *arg)
{
    xfree_t *x = arg;
    for (size_t i = 0; i < x->count; i++) {
        size_t n = (size_t)(uintptr_t)x->p[i];
        x->p[i] = x->A->malloc_(n);
        if (x->p[i] != NULL)
            memset(x->p[i], 0xAA, x->A->usable(x->p[i]));
    }
    return NULL;
}

static void test_calloc_after_cross_thread_free(void **state)
{
    const api_t *A = *state;
    void *p[MAX_COUNT];
    pthread_t th;
    for (size_t c = 0; c < N_RECYCLE; c++) {
        size_t n = recycle_cases[c].n, count = recycle_cases[c].count;

        /* dirtied here, freed there */
        dirty_blocks(A, p, n, count);
        xfree_t x = { A, p, count };
        assert_int_equal(pthread_create(&th, NULL, free_all, &x), 0);
        assert_int_equal(pthread_join(th, NULL), 0);
        calloc_and_check(A, n, count, 0);

        /* dirtied there, freed here */
        for (size_t i = 0; i < count; i++)
            p[i] = (void *)(uintptr_t)n;
        assert_int_equal(pthread_create(&th, NULL, dirty_all, &x), 0);
        assert_int_equal(pthread_join(th, NULL), 0);
        for (size_t i = 0; i < count; i++) {
            if (p[i] == NULL)
                fail_msg("malloc(%zu) in a thread returned NULL", n);
            A->free_(p[i]);
        }
        calloc_and_check(A, n, count, 1);
    }
}

static void test_calloc_overflow(void **state)
{
    const api_t *A = *state;
    volatile size_t cases[][2] = {
        { SIZE_MAX / 2, 3 }, { 3, SIZE_MAX / 2 }, { SIZE_MAX, SIZE_MAX },
        { (size_t)1 << 32, (size_t)1 << 32 }, { SIZE_MAX, 2 }, { 2, SIZE_MAX },
        { (SIZE_MAX / 1024) + 1, 1024 },
        /* no overflow, but impossible */
        { 1, SIZE_MAX }, { SIZE_MAX, 1 }, { SIZE_MAX / 2 + 1, 1 }, { 1, (size_t)PTRDIFF_MAX + 1 },
        { (size_t)1 << 31, (size_t)1 << 31 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t a = cases[i][0], b = cases[i][1];
        errno = 0;
        void *p = A->calloc_(a, b);
        if (p != NULL) {
            A->free_(p);
            fail_msg("calloc(%zu, %zu) = %p, expected NULL", a, b, p);
        }
        if (errno != ENOMEM)
            fail_msg("calloc(%zu, %zu): errno %d, expected ENOMEM (%d)", a, b, errno, ENOMEM);
    }
    /* still works afterwards */
    void *p = A->calloc_(10, 10);
    assert_non_null(p);
    assert_int_equal(first_nonzero(p, 100), 100);
    A->free_(p);
}

static void test_calloc_zero_size(void **state)
{
    const api_t *A = *state;
    static const size_t z[][2] = { { 0, 16 }, { 16, 0 }, { 0, 0 }, { 0, 1 << 20 } };
    for (size_t i = 0; i < sizeof z / sizeof z[0]; i++) {
        void *a = A->calloc_(z[i][0], z[i][1]);
        void *b = A->calloc_(z[i][0], z[i][1]);
        if (a == NULL || b == NULL)
            fail_msg("calloc(%zu, %zu) returned NULL (%p, %p)", z[i][0], z[i][1], a, b);
        if (a == b)
            fail_msg("calloc(%zu, %zu) twice returned the same live pointer %p",
                     z[i][0], z[i][1], a);
        A->free_(a);
        A->free_(b);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        TEST_API(test_calloc_recycled_is_zero, API_STD),
        TEST_API(test_calloc_recycled_is_zero, API_HAK),
        TEST_API(test_calloc_small_every_size, API_STD),
        TEST_API(test_calloc_small_every_size, API_HAK),
        TEST_API(test_calloc_recycled_same_class, API_STD),
        TEST_API(test_calloc_recycled_same_class, API_HAK),
        TEST_API(test_calloc_after_cross_thread_free, API_STD),
        TEST_API(test_calloc_after_cross_thread_free, API_HAK),
        TEST_API(test_calloc_overflow, API_STD),
        TEST_API(test_calloc_overflow, API_HAK),
        TEST_API(test_calloc_zero_size, API_STD),
        TEST_API(test_calloc_zero_size, API_HAK),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
