/* Unit tests: malloc(0), failure reporting through errno, free(NULL).
 *
 * malloc(0) returns a unique, freeable, non-NULL pointer; requests that
 * cannot be met (SIZE_MAX, PTRDIFF_MAX + 1, ...) return NULL with errno
 * ENOMEM, through malloc and hak_malloc alike, and leave the allocator
 * working; aligned_alloc with an alignment that is not a power of two returns
 * NULL; free(NULL) does nothing; free() does not disturb errno. */
#include <errno.h>

#define TIER_COMMON_OWN_API /* api_t below */
#include "tier_common.h"

#define MiB ((size_t)1024 * 1024)

typedef struct {
    void *(*malloc_)(size_t);
    void (*free_)(void *);
    void *(*aligned_alloc_)(size_t, size_t);
    size_t (*usable)(const void *);
} api_t;

static api_t API_STD = { malloc, free, aligned_alloc, std_usable };
static api_t API_HAK = { hak_malloc, hak_free, hak_aligned_alloc, hak_usable_size };

/* ------------------------------------------------------------------------ */

static void test_malloc_zero(void **state)
{
    const api_t *A = *state;
    enum { N = 100 };
    void *p[N];
    for (int i = 0; i < N; i++) {
        p[i] = A->malloc_(0);
        if (p[i] == NULL)
            fail_msg("malloc(0) call %d returned NULL", i);
        if (hak_tier_of(p[i]) == HAK_TIER_NONE)
            fail_msg("malloc(0) = %p not recognised by hak_tier_of", p[i]);
        for (int j = 0; j < i; j++)
            if (p[j] == p[i])
                fail_msg("malloc(0) calls %d and %d both returned live pointer %p", j, i, p[i]);
    }
    for (int i = 0; i < N; i++)
        A->free_(p[i]);
    /* and the freed zero-size blocks are reusable */
    void *a = A->malloc_(0), *b = A->malloc_(0);
    if (a == NULL || b == NULL || a == b)
        fail_msg("malloc(0) twice after frees gave %p and %p", a, b);
    A->free_(a);
    A->free_(b);
}

static void test_malloc_huge_enomem(void **state)
{
    const api_t *A = *state;
    volatile size_t huge[] = {
        SIZE_MAX, SIZE_MAX - 1, SIZE_MAX - 15, SIZE_MAX - 4095, SIZE_MAX - MiB,
        (size_t)PTRDIFF_MAX + 1, (size_t)PTRDIFF_MAX, SIZE_MAX / 2,
        (size_t)1 << 62, (size_t)1 << 56, (size_t)1 << 48,
    };
    for (size_t i = 0; i < sizeof huge / sizeof huge[0]; i++) {
        size_t n = huge[i];
        errno = 0;
        void *p = A->malloc_(n);
        if (p != NULL) {
            A->free_(p);
            fail_msg("malloc(%zu) = %p, expected NULL", n, p);
        }
        if (errno != ENOMEM)
            fail_msg("malloc(%zu) = NULL but errno %d, expected ENOMEM (%d)", n, errno, ENOMEM);
    }
    /* the allocator still works in every tier */
    static const size_t ok[] = { 1, 2000, 100000, 2 * MiB };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        void *p = A->malloc_(ok[i]);
        if (p == NULL)
            fail_msg("malloc(%zu) after failed huge requests returned NULL", ok[i]);
        memset(p, 1, ok[i]);
        A->free_(p);
    }
}

static void test_aligned_alloc_not_power_of_two(void **state)
{
    const api_t *A = *state;
    volatile size_t bad[] = { 3, 6, 24, 48, 96, 100, 1000, 4097, 12288, 3 * MiB };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        size_t al = bad[i], n = bad[i] * 4;
        void *p = A->aligned_alloc_(al, n);
        if (p != NULL) {
            A->free_(p);
            fail_msg("aligned_alloc(%zu, %zu) = %p, expected NULL", al, n, p);
        }
    }
}

static void test_free_null(void **state)
{
    const api_t *A = *state;
    for (int i = 0; i < 1000; i++)
        A->free_(NULL);
    errno = EEXIST;
    A->free_(NULL);
    if (errno != EEXIST)
        fail_msg("free(NULL) changed errno from EEXIST to %d", errno);
    void *p = A->malloc_(32);
    assert_non_null(p);
    A->free_(p);
}

/* glibc (>= 2.33) and POSIX.1-2024: free() leaves errno alone. */
static void test_free_preserves_errno(void **state)
{
    const api_t *A = *state;
    static const size_t sizes[] = { 0, 1, 1024, 1025, 53248, 53249, 1048576, 1048577,
                                    8 * MiB };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        void *p = A->malloc_(sizes[i]);
        if (p == NULL)
            fail_msg("malloc(%zu) returned NULL", sizes[i]);
        errno = EEXIST;
        A->free_(p);
        if (errno != EEXIST)
            fail_msg("free(malloc(%zu)) changed errno from EEXIST (%d) to %d", sizes[i],
                     EEXIST, errno);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        TEST_API(test_malloc_zero, API_STD),
        TEST_API(test_malloc_zero, API_HAK),
        TEST_API(test_malloc_huge_enomem, API_STD),
        TEST_API(test_malloc_huge_enomem, API_HAK),
        TEST_API(test_aligned_alloc_not_power_of_two, API_STD),
        TEST_API(test_aligned_alloc_not_power_of_two, API_HAK),
        TEST_API(test_free_null, API_STD),
        TEST_API(test_free_null, API_HAK),
        TEST_API(test_free_preserves_errno, API_STD),
        TEST_API(test_free_preserves_errno, API_HAK),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
