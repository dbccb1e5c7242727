/* Unit tests: the large tier (requests above 1 MiB, direct mappings).
 *
 * Requests > 1 MiB have no size class (hak_size_class == -1) and land in
 * HAK_TIER_LARGE; blocks are 16-byte aligned and fully writable up to their
 * usable size; freeing then allocating the same size on the same thread gives
 * the same block back; many live blocks never overlap and keep their
 * contents; blocks may be freed by another thread; freeing really gives the
 * address space back (allocate/free cycles do not grow the process). */
#include <malloc.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "hakmem.h"

#define MiB ((size_t)1024 * 1024)
#define LARGE_MIN (MiB + 1)

/* ---- helpers shared by the per-tier tests (kept in each file so every
 *      test program stands alone) ------------------------------------------ */

/* The two spellings of the allocator; every test runs with both. */
typedef struct {
    void *(*malloc_)(size_t);
    void (*free_)(void *);
    size_t (*usable)(const void *);
} api_t;

static size_t std_usable(const void *p) { return malloc_usable_size((void *)p); }
static api_t API_STD = { malloc, free, std_usable };
static api_t API_HAK = { hak_malloc, hak_free, hak_usable_size };

static const char *tier_name(int t)
{
    switch (t) {
    case HAK_TIER_NONE: return "NONE";
    case HAK_TIER_TINY: return "TINY";
    case HAK_TIER_L2: return "L2";
    case HAK_TIER_L25: return "L2.5";
    case HAK_TIER_LARGE: return "LARGE";
    default: return "?";
    }
}

/* Position-dependent pattern: a block filled with seed s only checks clean
 * against seed s, so a block overwritten by a neighbour is detected. */
static uint64_t pat_word(uint64_t seed, size_t i)
{
    uint64_t x = (seed + 1) * 0x9E3779B97F4A7C15ull ^ (uint64_t)i * 0xD6E8FEB86659FD93ull;
    return x ^ (x >> 29);
}

/* Byte i of the pattern, the same whether written by words or bytes. */
static unsigned char pat_byte(uint64_t seed, size_t i)
{
    uint64_t w = pat_word(seed, i & ~(size_t)7);
    unsigned char b[8];
    memcpy(b, &w, 8);
    return b[i & 7];
}

static void pat_fill(void *p, size_t n, uint64_t seed)
{
    unsigned char *c = p;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w = pat_word(seed, i);
        memcpy(c + i, &w, 8);
    }
    for (; i < n; i++)
        c[i] = pat_byte(seed, i);
}

/* Returns n when intact, else the offset of the first bad byte. */
static size_t pat_check(const void *p, size_t n, uint64_t seed)
{
    const unsigned char *c = p;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w = pat_word(seed, i), v;
        memcpy(&v, c + i, 8);
        if (v != w)
            for (size_t k = 0; k < 8; k++)
                if (c[i + k] != ((const unsigned char *)&w)[k])
                    return i + k;
    }
    for (; i < n; i++)
        if (c[i] != pat_byte(seed, i))
            return i;
    return n;
}

static uint64_t rng_next(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

static size_t rng_range(uint64_t *s, size_t lo, size_t hi) /* inclusive */
{
    return lo + (size_t)(rng_next(s) % (hi - lo + 1));
}

/* malloc(n) and check: non-NULL, 16-byte aligned, owned by `tier`, usable
 * size >= n. */
static void *alloc_checked(const api_t *A, size_t n, hak_tier_t tier)
{
    void *p = A->malloc_(n);
    if (p == NULL)
        fail_msg("malloc(%zu) returned NULL", n);
    if ((uintptr_t)p % 16 != 0)
        fail_msg("malloc(%zu) = %p is not 16-byte aligned", n, p);
    int t = hak_tier_of(p);
    if (t != (int)tier)
        fail_msg("hak_tier_of(malloc(%zu) = %p) = %s, expected %s",
                 n, p, tier_name(t), tier_name(tier));
    size_t u = A->usable(p);
    if (u < n)
        fail_msg("usable size of malloc(%zu) = %p is %zu < request", n, p, u);
    return p;
}

/* Each size: allocate, write the whole usable size, read it back, free. */
static void check_sizes(const api_t *A, const size_t *sizes, size_t count, hak_tier_t tier)
{
    for (size_t i = 0; i < count; i++) {
        size_t n = sizes[i];
        void *p = alloc_checked(A, n, tier);
        size_t u = A->usable(p);
        pat_fill(p, u, n);
        size_t bad = pat_check(p, u, n);
        if (bad != u)
            fail_msg("malloc(%zu) = %p: byte %zu of usable %zu did not read back", n, p, bad, u);
        A->free_(p);
    }
}

typedef struct {
    unsigned char *p;
    size_t n, u;
    uint64_t seed;
} blk_t;

static int blk_cmp(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t)((const blk_t *)a)->p, y = (uintptr_t)((const blk_t *)b)->p;
    return x < y ? -1 : x > y;
}

static void blk_alloc(const api_t *A, blk_t *b, size_t n, hak_tier_t tier, uint64_t seed)
{
    b->p = alloc_checked(A, n, tier);
    b->n = n;
    b->u = A->usable(b->p);
    b->seed = seed;
    pat_fill(b->p, b->u, seed);
}

/* All blocks pairwise disjoint (over their usable sizes) and intact. */
static void blks_verify(const blk_t *b, size_t count)
{
    blk_t *s = malloc(count * sizeof *s);
    assert_non_null(s);
    memcpy(s, b, count * sizeof *s);
    qsort(s, count, sizeof *s, blk_cmp);
    for (size_t i = 0; i + 1 < count; i++)
        if ((uintptr_t)s[i].p + s[i].u > (uintptr_t)s[i + 1].p)
            fail_msg("blocks overlap: %p (size %zu, usable %zu) and %p (size %zu)",
                     (void *)s[i].p, s[i].n, s[i].u, (void *)s[i + 1].p, s[i + 1].n);
    free(s);
    for (size_t i = 0; i < count; i++) {
        size_t bad = pat_check(b[i].p, b[i].u, b[i].seed);
        if (bad != b[i].u)
            fail_msg("block %zu (%p, size %zu, usable %zu) corrupted at byte %zu",
                     i, (void *)b[i].p, b[i].n, b[i].u, bad);
    }
}

/* Many live blocks of sizes in [lo, hi]: distinct, non-overlapping, contents
 * survive; free every other one, allocate again, verify; free all in random
 * order. */
static void check_many(const api_t *A, size_t count, size_t lo, size_t hi,
                       hak_tier_t tier, uint64_t seed)
{
    blk_t *b = malloc(count * sizeof *b);
    assert_non_null(b);
    uint64_t rs = seed | 1;
    for (size_t i = 0; i < count; i++)
        blk_alloc(A, &b[i], rng_range(&rs, lo, hi), tier, seed * 1000003u + i);
    blks_verify(b, count);

    for (size_t i = 0; i < count; i += 2)
        A->free_(b[i].p);
    for (size_t i = 0; i < count; i += 2)
        blk_alloc(A, &b[i], rng_range(&rs, lo, hi), tier, seed * 7000003u + i);
    blks_verify(b, count);

    for (size_t i = count; i > 1; i--) { /* shuffle */
        size_t j = (size_t)(rng_next(&rs) % i);
        blk_t t = b[i - 1];
        b[i - 1] = b[j];
        b[j] = t;
    }
    for (size_t i = 0; i < count; i++)
        A->free_(b[i].p);
    free(b);
}

/* ---- cross-thread: blocks allocated on one thread, freed on another ---- */
typedef struct {
    const api_t *A;
    blk_t *b;
    size_t count, lo, hi;
    hak_tier_t tier;
    uint64_t seed;
    size_t bad; /* blocks found corrupted / misclassified by the thread */
} xt_t;

static void *xt_alloc(void *arg)
{
    xt_t *x = arg;
    uint64_t rs = x->seed | 1;
    for (size_t i = 0; i < x->count; i++) {
        size_t n = rng_range(&rs, x->lo, x->hi);
        x->b[i].p = x->A->malloc_(n);
        if (x->b[i].p == NULL) {
            x->bad++;
            x->count = i;
            break;
        }
        x->b[i].n = n;
        x->b[i].u = x->A->usable(x->b[i].p);
        x->b[i].seed = x->seed + i;
        pat_fill(x->b[i].p, x->b[i].u, x->b[i].seed);
    }
    return NULL;
}

static void *xt_free(void *arg)
{
    xt_t *x = arg;
    for (size_t i = 0; i < x->count; i++) {
        if (pat_check(x->b[i].p, x->b[i].u, x->b[i].seed) != x->b[i].u ||
            hak_tier_of(x->b[i].p) != x->tier)
            x->bad++;
        x->A->free_(x->b[i].p);
    }
    return NULL;
}

static void check_cross_thread(const api_t *A, size_t count, size_t lo, size_t hi,
                               hak_tier_t tier, uint64_t seed)
{
    blk_t *b = malloc(count * sizeof *b);
    assert_non_null(b);
    pthread_t th;

    /* 1: another thread allocates, this one checks and frees. */
    xt_t x = { A, b, count, lo, hi, tier, seed, 0 };
    assert_int_equal(pthread_create(&th, NULL, xt_alloc, &x), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(x.bad, 0);
    assert_int_equal(x.count, count);
    for (size_t i = 0; i < count; i++) {
        int t = hak_tier_of(b[i].p);
        if (t != (int)tier)
            fail_msg("block %p (size %zu) allocated by an exited thread: hak_tier_of = %s, "
                     "expected %s", (void *)b[i].p, b[i].n, tier_name(t), tier_name(tier));
        if ((uintptr_t)b[i].p % 16 != 0)
            fail_msg("block %p (size %zu) not 16-byte aligned", (void *)b[i].p, b[i].n);
    }
    blks_verify(b, count);
    for (size_t i = 0; i < count; i++)
        A->free_(b[i].p);

    /* 2: this thread allocates, another one checks and frees. */
    uint64_t rs = seed ^ 0x5555;
    for (size_t i = 0; i < count; i++)
        blk_alloc(A, &b[i], rng_range(&rs, lo, hi), tier, seed + 77 + i);
    xt_t y = { A, b, count, lo, hi, tier, seed, 0 };
    assert_int_equal(pthread_create(&th, NULL, xt_free, &y), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(y.bad, 0);

    /* 3: this thread goes on allocating normally. */
    for (size_t i = 0; i < count; i++)
        blk_alloc(A, &b[i], rng_range(&rs, lo, hi), tier, seed + 999 + i);
    blks_verify(b, count);
    for (size_t i = 0; i < count; i++)
        A->free_(b[i].p);
    free(b);
}

#define TEST_API(fn, api) { #fn "/" #api, fn, NULL, NULL, &api }

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
