/* Unit tests: the large tier (requests above 1 MiB, direct mappings).
 *
 * Requests > 1 MiB have no size class (hak_size_class == -1) and land in
 * HAK_TIER_LARGE; blocks are 16-byte aligned and fully writable up to their
 * usable size; freeing then allocating the same size on the same thread gives
 * the same block back (in the hardened build only if it was small enough to
 * be cached); many live blocks never overlap and keep their
 * contents; blocks may be freed by another thread; freeing really gives the
 * address space back (allocate/free cycles do not grow the process). */
#include <unistd.h>

#include "tier_common.h"

#define MiB ((size_t)1024 * 1024)
#define LARGE_MIN (MiB + 1)

/* ------------------------------------------------------------------------ */

static const size_t large_sizes[] = {
    MiB + 1, MiB + 16, MiB + 4095, MiB + 4096, MiB + 4097, 3 * MiB / 2 + 3,
    2 * MiB - 1, 2 * MiB, 2 * MiB + 1, 4 * MiB + 7, 16 * MiB, 64 * MiB + 12345,
};
#define N_LARGE_SIZES (sizeof large_sizes / sizeof large_sizes[0])

static void test_no_size_class(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_LARGE_SIZES; i++) {
        int c = hak_size_class(large_sizes[i]);
        if (c != -1)
            fail_msg("hak_size_class(%zu) = %d, expected -1", large_sizes[i], c);
    }
}

static void test_sizes(void **state)
{
    check_sizes(*state, large_sizes, N_LARGE_SIZES, HAK_TIER_LARGE);
}

static void test_lifo_reuse(void **state)
{
    const api_t *A = *state;
    static const size_t sizes[] = { MiB + 1, 2 * MiB, 5 * MiB + 3, 32 * MiB };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t n = sizes[i];
        void *p = alloc_checked(A, n, HAK_TIER_LARGE);
        uintptr_t pa = (uintptr_t)p;
        A->free_(p);
        void *q = A->malloc_(n);
#ifdef HAK_HARDENED
        /* Given back at once (HAKMEM_PURGE_DELAY_MS=0): the default build
         * gets the range back from the kernel, the hardened one keeps it
         * reserved and dead. */
        hak_info_t in;
        hak_get_info(&in);
        if (in.purge_delay_ms == 0) {
            assert_true((uintptr_t)q != pa);
            A->free_(q);
            continue;
        }
#endif
        if ((uintptr_t)q != pa)
            fail_msg("reuse: free(%p) then malloc(%zu) returned %p", (void *)pa, n, q);
        /* the reused block is still fully usable */
        size_t u = A->usable(q);
        assert_true(u >= n);
        pat_fill(q, u, n);
        assert_int_equal(pat_check(q, u, n), u);
        A->free_(q);
    }
}

static void test_many_blocks(void **state)
{
    check_many(*state, 24, LARGE_MIN, 4 * MiB, HAK_TIER_LARGE, 31);
}

static void test_cross_thread(void **state)
{
    check_cross_thread(*state, 12, LARGE_MIN, 3 * MiB, HAK_TIER_LARGE, 32);
}

/* Virtual size of the process in bytes (first field of /proc/self/statm). */
static size_t vm_size(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long pages = 0;
    assert_non_null(f);
    assert_int_equal(fscanf(f, "%lu", &pages), 1);
    fclose(f);
    return (size_t)pages * (size_t)sysconf(_SC_PAGESIZE);
}

static void test_free_releases_address_space(void **state)
{
    const api_t *A = *state;
    size_t before = vm_size();
    /* 400 cycles over varied sizes: ~1.6 GiB allocated and freed in total. */
    for (size_t i = 0; i < 400; i++) {
        size_t n = 2 * MiB + (i % 37) * 4096 * 7 + i;
        unsigned char *p = A->malloc_(n);
        if (p == NULL)
            fail_msg("cycle %zu: malloc(%zu) returned NULL", i, n);
        p[0] = 1;
        p[n - 1] = 2;
        A->free_(p);
    }
    size_t after = vm_size();
    if (after > before + 256 * MiB)
        fail_msg("virtual size grew from %zu to %zu bytes over 400 large malloc/free cycles",
                 before, after);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_size_class),
        TEST_API(test_sizes, API_STD),
        TEST_API(test_sizes, API_HAK),
        TEST_API(test_lifo_reuse, API_STD),
        TEST_API(test_lifo_reuse, API_HAK),
        TEST_API(test_many_blocks, API_STD),
        TEST_API(test_many_blocks, API_HAK),
        TEST_API(test_cross_thread, API_STD),
        TEST_API(test_cross_thread, API_HAK),
        TEST_API(test_free_releases_address_space, API_STD),
        TEST_API(test_free_releases_address_space, API_HAK),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
