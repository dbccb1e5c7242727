/* Unit tests: realloc and reallocarray (and hak_realloc / hak_reallocarray).
 *
 * realloc(NULL, n) behaves as malloc(n); growing and shrinking across every
 * tier boundary keeps the contents; a request that cannot be met returns NULL
 * with errno ENOMEM and leaves the old block intact and freeable;
 * reallocarray detects multiplication overflow (NULL, ENOMEM);
 * realloc(p, 0) does not crash (glibc frees p and returns NULL; anything else
 * returned must be freeable). */
#include <errno.h>

#define TIER_COMMON_OWN_API /* api_t below */
#include "tier_common.h"

#define KiB ((size_t)1024)
#define MiB ((size_t)1024 * 1024)

typedef struct {
    void *(*malloc_)(size_t);
    void (*free_)(void *);
    void *(*realloc_)(void *, size_t);
    void *(*reallocarray_)(void *, size_t, size_t);
    size_t (*usable)(const void *);
} api_t;

static api_t API_STD = { malloc, free, realloc, reallocarray, std_usable };
static api_t API_HAK = { hak_malloc, hak_free, hak_realloc, hak_reallocarray, hak_usable_size };

static void check_new_block(const api_t *A, void *p, size_t n, const char *ctx)
{
    if (p == NULL)
        fail_msg("%s: returned NULL for %zu bytes", ctx, n);
    if ((uintptr_t)p % 16 != 0)
        fail_msg("%s: %p (size %zu) is not 16-byte aligned", ctx, p, n);
    if (hak_tier_of(p) == HAK_TIER_NONE)
        fail_msg("%s: %p (size %zu) not recognised by hak_tier_of", ctx, p, n);
    size_t u = A->usable(p);
    if (u < n)
        fail_msg("%s: %p usable size %zu < %zu", ctx, p, u, n);
}

/* Sizes on both sides of every tier boundary, plus a few in between. */
static const size_t edge_sizes[] = {
    1, 16, 17, 1000, 1024, 1025, 4096, 53247, 53248, 53249, 100000,
    1048575, 1048576, 1048577, 2 * MiB + 5, 8 * MiB,
};
#define N_EDGE (sizeof edge_sizes / sizeof edge_sizes[0])

/* ------------------------------------------------------------------------ */

static void test_realloc_null_is_malloc(void **state)
{
    const api_t *A = *state;
    for (size_t i = 0; i < N_EDGE; i++) {
        size_t n = edge_sizes[i];
        void *p = A->realloc_(NULL, n);
        check_new_block(A, p, n, "realloc(NULL, n)");
        int t = hak_tier_of(p);
        if (t != (int)expected_tier(n))
            fail_msg("hak_tier_of(realloc(NULL, %zu)) = %s, expected %s", n, tier_name(t),
                     tier_name(expected_tier(n)));
        pat_fill(p, A->usable(p), n);
        A->free_(p);
    }
    /* realloc(NULL, 0) is malloc(0): a unique, freeable pointer */
    void *a = A->realloc_(NULL, 0), *b = A->realloc_(NULL, 0);
    if (a == NULL || b == NULL || a == b)
        fail_msg("realloc(NULL, 0) twice gave %p and %p; expected two distinct non-NULL", a, b);
    A->free_(a);
    A->free_(b);
}

/* One block grown through every boundary, then shrunk back. */
static void test_grow_then_shrink_chain(void **state)
{
    const api_t *A = *state;
    size_t cur = edge_sizes[0];
    unsigned char *p = A->malloc_(cur);
    check_new_block(A, p, cur, "malloc");
    uint64_t seed = 1;
    pat_fill(p, cur, seed);
    for (int dir = 0; dir < 2; dir++) {
        for (size_t k = 0; k < N_EDGE; k++) {
            size_t n = dir == 0 ? edge_sizes[k] : edge_sizes[N_EDGE - 1 - k];
            unsigned char *q = A->realloc_(p, n);
            char ctx[80];
            snprintf(ctx, sizeof ctx, "realloc(%zu -> %zu)", cur, n);
            check_new_block(A, q, n, ctx);
            size_t keep = cur < n ? cur : n;
            size_t bad = pat_check(q, keep, seed);
            if (bad != keep)
                fail_msg("%s: byte %zu of the %zu kept bytes changed", ctx, bad, keep);
            p = q;
            cur = n;
            pat_fill(p, cur, ++seed);
        }
    }
    A->free_(p);
}

/* Every ordered pair of edge sizes: malloc(a), realloc to b. */
static void test_realloc_every_pair(void **state)
{
    const api_t *A = *state;
    for (size_t i = 0; i < N_EDGE; i++) {
        for (size_t j = 0; j < N_EDGE; j++) {
            size_t a = edge_sizes[i], b = edge_sizes[j];
            void *p = A->malloc_(a);
            check_new_block(A, p, a, "malloc");
            pat_fill(p, a, i * 100 + j);
            void *q = A->realloc_(p, b);
            char ctx[80];
            snprintf(ctx, sizeof ctx, "realloc(malloc(%zu), %zu)", a, b);
            check_new_block(A, q, b, ctx);
            size_t keep = a < b ? a : b;
            size_t bad = pat_check(q, keep, i * 100 + j);
            if (bad != keep)
                fail_msg("%s: byte %zu of the %zu kept bytes changed", ctx, bad, keep);
            /* the whole new size is writable */
            memset(q, 0x3c, b);
            A->free_(q);
        }
    }
}

/* Small steps inside and across classes, with live neighbours around. */
static void test_small_steps_with_neighbours(void **state)
{
    const api_t *A = *state;
    enum { NB = 8 };
    void *nb[NB];
    for (size_t start = 0; start < 3; start++) {
        size_t n = start == 0 ? 8 : start == 1 ? 1000 : 50000;
        for (int i = 0; i < NB; i++) {
            nb[i] = A->malloc_(n);
            assert_non_null(nb[i]);
            pat_fill(nb[i], n, 500 + (uint64_t)i);
        }
        unsigned char *p = A->malloc_(n);
        pat_fill(p, n, 7);
        size_t cur = n;
        size_t step = n / 8 + 1;
        for (int s = 0; s < 40; s++) {
            size_t m = (s % 5 == 4) ? cur - step / 2 : cur + step;
            p = A->realloc_(p, m);
            if (p == NULL)
                fail_msg("realloc(%zu -> %zu) returned NULL", cur, m);
            size_t keep = cur < m ? cur : m;
            if (pat_check(p, keep, 7 + (uint64_t)s) != keep)
                fail_msg("realloc(%zu -> %zu) lost contents", cur, m);
            pat_fill(p, m, 8 + (uint64_t)s);
            cur = m;
        }
        for (int i = 0; i < NB; i++) {
            if (pat_check(nb[i], n, 500 + (uint64_t)i) != n)
                fail_msg("neighbour block %d (size %zu) damaged by realloc of another block",
                         i, n);
            A->free_(nb[i]);
        }
        A->free_(p);
    }
}

/* A buffer appended to in small steps from `from` to `to` bytes by 1 KiB,
 * its contents checked at every step: how many times it moved. */
static unsigned appended_moves(const api_t *A, size_t from, size_t to)
{
    uint64_t seed = 11;
    unsigned char *p = A->malloc_(from);
    assert_non_null(p);
    pat_fill(p, from, seed);
    unsigned moves = 0;
    for (size_t n = from + KiB; n <= to; n += KiB) {
        unsigned char *q = A->realloc_(p, n);
        if (q == NULL)
            fail_msg("realloc(%zu -> %zu) returned NULL", n - KiB, n);
        if (pat_check(q, n - KiB, seed) != n - KiB)
            fail_msg("realloc(%zu -> %zu) lost contents", n - KiB, n);
        moves += q != p;
        p = q;
        pat_fill(p, n, ++seed);
    }
    A->free_(p);
    return moves;
}

/* Each move makes room for a quarter more at least, and for twice as much
 * from the L2.5 pool's classes on (64 KiB): 1 KiB to 1 MiB moves 16 times
 * (12 of them below 64 KiB), not at every size class (35), and 64 KiB to
 * 1 MiB moves 4 times (9 at a quarter more). */
static void test_growth_moves_seldom(void **state)
{
    const api_t *A = *state;
    unsigned moves = appended_moves(A, KiB, MiB);
    if (moves > 17)
        fail_msg("growing 1 KiB -> 1 MiB by 1 KiB moved the block %u times (at most 17)", moves);
    moves = appended_moves(A, 64 * KiB, MiB);
    if (moves > 4)
        fail_msg("growing 64 KiB -> 1 MiB by 1 KiB moved the block %u times (at most 4)", moves);
}

/* Same size, and sizes inside the same usable size: contents unchanged. */
static void test_realloc_same_size(void **state)
{
    const api_t *A = *state;
    for (size_t i = 0; i < N_EDGE; i++) {
        size_t n = edge_sizes[i];
        void *p = A->malloc_(n);
        assert_non_null(p);
        pat_fill(p, n, n);
        void *q = A->realloc_(p, n);
        check_new_block(A, q, n, "realloc(p, same size)");
        if (pat_check(q, n, n) != n)
            fail_msg("realloc(p, %zu) to the same size lost contents", n);
        size_t u = A->usable(q);
        void *r = A->realloc_(q, u);
        check_new_block(A, r, u, "realloc(p, usable size)");
        if (pat_check(r, n, n) != n)
            fail_msg("realloc(p, usable size %zu) lost contents of %zu-byte block", u, n);
        A->free_(r);
    }
}

static void test_realloc_huge_fails_keeps_block(void **state)
{
    const api_t *A = *state;
    volatile size_t huge[] = { SIZE_MAX / 2, (size_t)PTRDIFF_MAX + 1, SIZE_MAX,
                               SIZE_MAX - 4096, (size_t)1 << 62 };
    static const size_t base[] = { 10, 1024, 3000, 53248, 70000, 1048576, 3 * MiB };
    for (size_t i = 0; i < sizeof base / sizeof base[0]; i++) {
        size_t n = base[i];
        void *p = A->malloc_(n);
        check_new_block(A, p, n, "malloc");
        int tier = hak_tier_of(p);
        pat_fill(p, n, n + 3);
        for (size_t k = 0; k < sizeof huge / sizeof huge[0]; k++) {
            size_t h = huge[k];
            errno = 0;
            void *q = A->realloc_(p, h);
            if (q != NULL)
                fail_msg("realloc(malloc(%zu), %zu) = %p, expected NULL", n, h, q);
            if (errno != ENOMEM)
                fail_msg("realloc(malloc(%zu), %zu): errno %d, expected ENOMEM (%d)",
                         n, h, errno, ENOMEM);
            if (pat_check(p, n, n + 3) != n)
                fail_msg("failed realloc(malloc(%zu), %zu) damaged the old block", n, h);
            if ((int)hak_tier_of(p) != tier)
                fail_msg("failed realloc(malloc(%zu), %zu) changed the old block's tier", n, h);
        }
        /* the old block is still a normal block: it can be resized and freed */
        void *q = A->realloc_(p, n + 100);
        check_new_block(A, q, n + 100, "realloc after failed realloc");
        if (pat_check(q, n, n + 3) != n)
            fail_msg("realloc(%zu -> %zu) after a failed realloc lost contents", n, n + 100);
        A->free_(q);
    }
}

static void test_reallocarray(void **state)
{
    const api_t *A = *state;
    /* NULL + n*size is malloc */
    unsigned char *p = A->reallocarray_(NULL, 10, 100);
    check_new_block(A, p, 1000, "reallocarray(NULL, 10, 100)");
    pat_fill(p, 1000, 99);
    /* grow across tiers keeping contents */
    p = A->reallocarray_(p, 100, 1000);
    check_new_block(A, p, 100000, "reallocarray(p, 100, 1000)");
    if (pat_check(p, 1000, 99) != 1000)
        fail_msg("reallocarray(p, 100, 1000) lost contents");
    pat_fill(p, 100000, 100);

    volatile size_t ov[][2] = {
        { SIZE_MAX / 2, 3 }, { 3, SIZE_MAX / 2 }, { (size_t)1 << 32, (size_t)1 << 32 },
        { SIZE_MAX, 2 }, { SIZE_MAX, SIZE_MAX }, { (SIZE_MAX / 16) + 1, 16 },
    };
    for (size_t i = 0; i < sizeof ov / sizeof ov[0]; i++) {
        size_t a = ov[i][0], b = ov[i][1];
        errno = 0;
        void *q = A->reallocarray_(p, a, b);
        if (q != NULL || errno != ENOMEM)
            fail_msg("reallocarray(p, %zu, %zu) = %p, errno %d; expected NULL, ENOMEM",
                     a, b, q, errno);
        if (pat_check(p, 100000, 100) != 100000)
            fail_msg("failed reallocarray(p, %zu, %zu) damaged the old block", a, b);
        errno = 0;
        q = A->reallocarray_(NULL, a, b);
        if (q != NULL || errno != ENOMEM)
            fail_msg("reallocarray(NULL, %zu, %zu) = %p, errno %d; expected NULL, ENOMEM",
                     a, b, q, errno);
    }
    /* no overflow, but too big */
    volatile size_t big = SIZE_MAX / 2 + 1;
    errno = 0;
    void *q = A->reallocarray_(p, 1, big);
    if (q != NULL || errno != ENOMEM)
        fail_msg("reallocarray(p, 1, %zu) = %p, errno %d; expected NULL, ENOMEM",
                 (size_t)big, q, errno);
    /* shrink */
    p = A->reallocarray_(p, 3, 7);
    check_new_block(A, p, 21, "reallocarray(p, 3, 7)");
    if (pat_check(p, 21, 100) != 21)
        fail_msg("shrinking reallocarray(p, 3, 7) lost contents");
    A->free_(p);
}

static void test_realloc_zero(void **state)
{
    const api_t *A = *state;
    for (size_t i = 0; i < N_EDGE; i++) {
        void *p = A->malloc_(edge_sizes[i]);
        assert_non_null(p);
        memset(p, 0x42, edge_sizes[i]);
        void *r = A->realloc_(p, 0);
        if (r != NULL)
            A->free_(r);
    }
    /* the allocator is still fine afterwards */
    void *p = A->malloc_(100);
    check_new_block(A, p, 100, "malloc after realloc(p, 0)");
    A->free_(p);
}

/* Random walk: many live blocks, random reallocs across tiers, all blocks
 * checked at the end (catches in-place growth that tramples a neighbour). */
static void test_random_reallocs(void **state)
{
    const api_t *A = *state;
    enum { NBLK = 256, STEPS = 3000 };
    struct { unsigned char *p; size_t n; uint64_t seed; } b[NBLK];
    uint64_t rs = 0x1234567;
#define RNG() rng_next(&rs)
    for (int i = 0; i < NBLK; i++) {
        b[i].n = 1 + RNG() % 300;
        b[i].p = A->malloc_(b[i].n);
        assert_non_null(b[i].p);
        b[i].seed = (uint64_t)i;
        pat_fill(b[i].p, b[i].n, b[i].seed);
    }
    for (int s = 0; s < STEPS; s++) {
        int i = (int)(RNG() % NBLK);
        uint64_t r = RNG() % 100;
        size_t n = r < 70 ? 1 + RNG() % 1024
                 : r < 92 ? 1025 + RNG() % (53248 - 1024)
                 : r < 99 ? 53249 + RNG() % (1048576 - 53248)
                 : 1048577 + RNG() % (3 * MiB);
        unsigned char *q = A->realloc_(b[i].p, n);
        if (q == NULL)
            fail_msg("step %d: realloc(%zu -> %zu) returned NULL", s, b[i].n, n);
        size_t keep = b[i].n < n ? b[i].n : n;
        size_t bad = pat_check(q, keep, b[i].seed);
        if (bad != keep)
            fail_msg("step %d: realloc(%zu -> %zu) changed byte %zu", s, b[i].n, n, bad);
        b[i].p = q;
        b[i].n = n;
        b[i].seed = 1000 + (uint64_t)s;
        pat_fill(q, n, b[i].seed);
        if (n > 53248 && RNG() % 2) { /* do not keep too much memory around */
            q = A->realloc_(q, 64);
            assert_non_null(q);
            b[i].p = q;
            b[i].n = 64;
        }
    }
#undef RNG
    for (int i = 0; i < NBLK; i++) {
        size_t bad = pat_check(b[i].p, b[i].n, b[i].seed);
        if (bad != b[i].n)
            fail_msg("block %d (%p, %zu bytes) damaged at byte %zu", i, (void *)b[i].p,
                     b[i].n, bad);
        A->free_(b[i].p);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        TEST_API(test_realloc_null_is_malloc, API_STD),
        TEST_API(test_realloc_null_is_malloc, API_HAK),
        TEST_API(test_grow_then_shrink_chain, API_STD),
        TEST_API(test_grow_then_shrink_chain, API_HAK),
        TEST_API(test_realloc_every_pair, API_STD),
        TEST_API(test_realloc_every_pair, API_HAK),
        TEST_API(test_small_steps_with_neighbours, API_STD),
        TEST_API(test_small_steps_with_neighbours, API_HAK),
        TEST_API(test_growth_moves_seldom, API_STD),
        TEST_API(test_growth_moves_seldom, API_HAK),
        TEST_API(test_realloc_same_size, API_STD),
        TEST_API(test_realloc_same_size, API_HAK),
        TEST_API(test_realloc_huge_fails_keeps_block, API_STD),
        TEST_API(test_realloc_huge_fails_keeps_block, API_HAK),
        TEST_API(test_reallocarray, API_STD),
        TEST_API(test_reallocarray, API_HAK),
        TEST_API(test_realloc_zero, API_STD),
        TEST_API(test_realloc_zero, API_HAK),
        TEST_API(test_random_reallocs, API_STD),
        TEST_API(test_random_reallocs, API_HAK),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
