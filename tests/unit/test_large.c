/* Unit tests: the large tier (requests above 1 MiB, direct mappings).
 *
 * Requests > 1 MiB have no size class (hak_size_class == -1) and land in
 * HAK_TIER_LARGE; blocks are 16-byte aligned and fully writable up to their
 * usable size; freeing then allocating the same size on the same thread gives
 * the same block back (in the hardened build only if it was small enough to
 * be cached); many live blocks never overlap and keep their
 * contents; blocks may be freed by another thread; freeing really gives the
 * address space back (allocate/free cycles do not grow the process).
 *
 * Gathering: a block that no single cached range holds is made of several
 * (their pages moved, nothing mapped afresh while the cache has the bytes):
 * its contents are the caller's, calloc's is zero, realloc moves and grows
 * it, a fork sees it, and freeing it twice is still caught. */
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <stdbool.h>

#include "tier_common.h"

static hak_info_t info(void)
{
    hak_info_t in;
    hak_get_info(&in);
    return in;
}

/* Whether the cache holds what the tests below expect of it: not with
 * HAKMEM_PURGE_DELAY_MS=0 (a freed large block goes back at once), nor
 * with no purger thread (HAKMEM_PURGE_THREAD=0), where the cache is
 * trimmed, oldest first, to a bound as it fills (hak_purge_bound(), 16 MiB here,
 * as much as two_holes leaves cached). */
static bool at_once(const hak_info_t *in)
{
    return in->purge_delay_ms == 0 || hak_purge_bound() != 0;
}

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
        hak_info_t before;
        hak_get_info(&before);
        A->free_(p);
        void *q = A->malloc_(n);
        /* Given back at once (HAKMEM_PURGE_DELAY_MS=0): the free returned
         * the range to the OS, so nothing is cached and where the new block
         * lies is the kernel's choice in the default build; the hardened one
         * keeps the old range reserved and dead. */
        hak_info_t in;
        hak_get_info(&in);
        if (hak_purge_bound() != 0 && n <= hak_purge_bound() / 2) {
            /* no purger: kept, within the bound */
        } else if (hak_purge_bound() != 0) {
            assert_non_null(q);            /* past it: kept or given back */
            assert_true(A->usable(q) >= n);
            A->free_(q);
            continue;
        } else if (at_once(&in)) {
#ifdef HAK_HARDENED
            assert_true((uintptr_t)q != pa);
#endif
            assert_true(in.decommits > before.decommits);
            assert_true(in.released >= before.released + n);
            assert_non_null(q);
            assert_true(A->usable(q) >= n);
            A->free_(q);
            continue;
        }
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

/* Virtual size of the process in bytes. */
static size_t vm_size(void) { return statm_bytes(0); }

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

/* ---- gathering ---------------------------------------------------------- */

#define HOLE_N (5 * MiB)            /* an 8 MiB mapping */


/* Two freed 8 MiB ranges, patterned, with live blocks around them so that
 * neither is next to the other (else they would merge into one); the cache
 * emptied first, so they are all it holds.  The live blocks go to keep[]. */
static void two_holes(void *keep[3])
{
    hak_trim(0);
    keep[0] = hak_malloc(HOLE_N);
    void *a = hak_malloc(HOLE_N);
    keep[1] = hak_malloc(HOLE_N);
    void *b = hak_malloc(HOLE_N);
    keep[2] = hak_malloc(HOLE_N);
    assert_true(keep[0] && a && keep[1] && b && keep[2]);
    pat_fill(a, HOLE_N, 11);
    pat_fill(b, HOLE_N, 12);
    for (int i = 0; i < 3; i++)
        pat_fill(keep[i], HOLE_N, 20 + (uint64_t)i);
    hak_free(a);
    hak_free(b);
}

static void drop_keep(void *keep[3])
{
    for (int i = 0; i < 3; i++) {
        assert_int_equal(pat_check(keep[i], HOLE_N, 20 + (uint64_t)i), HOLE_N);
        hak_free(keep[i]);
    }
}

static void assert_zero(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != 0)
            fail_msg("byte %zu of %zu is 0x%02x, expected 0", i, n, p[i]);
}

/* 14 MiB need a 16 MiB range: both holes, moved; nothing new mapped. */
static void test_gather(void **state)
{
    (void)state;
    void *keep[3];
    two_holes(keep);
    hak_info_t i0 = info();
    size_t n = 14 * MiB;
    unsigned char *p = hak_malloc(n);
    assert_non_null(p);
    hak_info_t i1 = info();
    if (!at_once(&i0)) {
        assert_int_equal(i0.large_cached, 16 * MiB);
        assert_int_equal(i1.large_cached, 0);
        assert_int_equal(i1.large_mapped, i0.large_mapped);
    }
    assert_true(hak_usable_size(p) >= n);
    pat_fill(p, n, 31);
    /* grown: it spans several kernel mappings now, which realloc moves too */
    unsigned char *q = hak_realloc(p, 40 * MiB);
    assert_non_null(q);
    assert_int_equal(pat_check(q, n, 31), n);
    pat_fill(q, 40 * MiB, 32);
    q = hak_realloc(q, 3 * MiB);
    assert_non_null(q);
    assert_int_equal(pat_check(q, 3 * MiB, 32), 3 * MiB);
    hak_free(q);
    drop_keep(keep);
}

/* calloc of a gathered block is zero: the moved parts held patterns. */
static void test_gather_calloc(void **state)
{
    (void)state;
    void *keep[3];
    two_holes(keep);
    size_t n = 14 * MiB + 5;
    unsigned char *p = hak_calloc(1, n);
    assert_non_null(p);
    assert_zero(p, n);
    hak_free(p);
    drop_keep(keep);
}

/* calloc of a reused range is zero however it was cleared (its whole huge
 * pages given back to the kernel, the rest by memset): blocks ending inside
 * a huge page, on a boundary, and smaller than one; the block is then
 * written whole and read back. */
static void test_calloc_reused(void **state)
{
    (void)state;
    static const size_t sizes[] = { MiB + 100, 2 * MiB - 64, 6 * MiB - 64, 9 * MiB + 123, 24 * MiB };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t n = sizes[i];
        unsigned char *p = hak_malloc(n);
        assert_non_null(p);
        pat_fill(p, n, 61);
        hak_free(p);
        hak_info_t i0 = info();
        unsigned char *c = hak_calloc(1, n);
        assert_non_null(c);
        if (!at_once(&i0))          /* made of cached memory */
            assert_int_equal(info().large_mapped, i0.large_mapped);
        assert_zero(c, n);
        pat_fill(c, n, 62);
        assert_int_equal(pat_check(c, n, 62), n);
        hak_free(c);
    }
}

/* More than the cache holds: both holes and a fresh rest, all zero for
 * calloc; the rest of the cache is used before anything is mapped. */
static void test_gather_partial(void **state)
{
    (void)state;
    void *keep[3];
    two_holes(keep);
    hak_info_t i0 = info();
    size_t n = 27 * MiB;                    /* a 28 MiB range: 16 moved, 12 fresh */
    unsigned char *p = hak_calloc(1, n);
    assert_non_null(p);
    hak_info_t i1 = info();
    if (!at_once(&i0)) {
        assert_int_equal(i1.large_cached, 0);
        assert_int_equal(i1.large_mapped, i0.large_mapped + 12 * MiB);
    }
    assert_zero(p, n);
    pat_fill(p, n, 41);
    assert_int_equal(pat_check(p, n, 41), n);
    hak_free(p);
    drop_keep(keep);
}

/* A child sees a gathered block as its parent made it, and gathers too. */
static void test_gather_fork(void **state)
{
    (void)state;
    void *keep[3];
    two_holes(keep);
    size_t n = 14 * MiB;
    unsigned char *p = hak_malloc(n);
    assert_non_null(p);
    pat_fill(p, n, 51);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int ok = pat_check(p, n, 51) == n;
        void *k2[3];
        two_holes(k2);
        unsigned char *c = hak_calloc(1, n);
        for (size_t i = 0; ok && c != NULL && i < n; i += 4096)
            ok = c[i] == 0;
        _exit(ok && c != NULL ? 0 : 1);
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    assert_int_equal(pat_check(p, n, 51), n);
    hak_free(p);
    drop_keep(keep);
}

/* A gathered block freed twice stops the process: while its range is
 * cached the cleared magic tells (the hardened build also knows a range
 * it gave back, the default build does not: HAKMEM_PURGE_DELAY_MS=0). */
static void test_gather_double_free(void **state)
{
    (void)state;
#ifndef HAK_HARDENED
    hak_info_t now = info();
    if (at_once(&now)) {
        skip();
        return;
    }
#endif
    void *keep[3];
    two_holes(keep);
    unsigned char *p = hak_malloc(14 * MiB);
    assert_non_null(p);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int fd = open("/dev/null", O_WRONLY);
        if (fd >= 0) dup2(fd, 2);
        hak_free(p);
        hak_free(p);
        _exit(0);
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT);
    hak_free(p);
    drop_keep(keep);
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
        cmocka_unit_test(test_gather),
        cmocka_unit_test(test_calloc_reused),
        cmocka_unit_test(test_gather_calloc),
        cmocka_unit_test(test_gather_partial),
        cmocka_unit_test(test_gather_fork),
        cmocka_unit_test(test_gather_double_free),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
