/* Unit tests: the L2 pool (requests of 1025 B .. 52 KiB = 53248 B,
 * per-thread rings).
 *
 * Every size in the tier's range lands in HAK_TIER_L2, is 16-byte aligned
 * and fully writable up to its usable size; a freed block is reused LIFO by
 * the next same-size request on the same thread (per size class, even when
 * classes are interleaved); many live blocks, more than a per-thread ring
 * holds, never overlap and keep their contents; blocks may be freed by
 * another thread. */
#include <malloc.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "hakmem.h"

#define TIER HAK_TIER_L2
#define SIZE_LO ((size_t)1025)
#define SIZE_HI ((size_t)53248)

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

/* Two blocks freed in a row both fit in the per-thread ring unless
 * HAKMEM_L2_RING_CAP makes it hold one (the test suite also runs with it at 1). */
static int ring_holds_two(void)
{
    const char *s = getenv("HAKMEM_L2_RING_CAP");
    return s == NULL || atoi(s) >= 2;
}

/* Freeing then allocating the same size on the same thread gives the same
 * block back, most recently freed first. */
static void check_lifo(const api_t *A, size_t n, hak_tier_t tier)
{
    void *p = alloc_checked(A, n, tier);
    uintptr_t pa = (uintptr_t)p;
    A->free_(p);
    void *q = A->malloc_(n);
    if ((uintptr_t)q != pa)
        fail_msg("LIFO reuse: free(%p) then malloc(%zu) returned %p", (void *)pa, n, q);

    if (!ring_holds_two()) {
        A->free_(q);
        return;
    }
    void *a = alloc_checked(A, n, tier);
    void *b = alloc_checked(A, n, tier);
    uintptr_t aa = (uintptr_t)a, ba = (uintptr_t)b;
    A->free_(a);
    A->free_(b);
    void *x = A->malloc_(n);
    void *y = A->malloc_(n);
    if ((uintptr_t)x != ba || (uintptr_t)y != aa)
        fail_msg("LIFO reuse (size %zu): free(a=%p), free(b=%p), then two mallocs returned "
                 "%p, %p; expected b then a", n, (void *)aa, (void *)ba, x, y);
    A->free_(x);
    A->free_(y);
    A->free_(q);
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
        check_lifo(A, sizes[i], TIER);
}

/* Interleaving two classes does not disturb each class's LIFO order. */
static void test_lifo_interleaved_classes(void **state)
{
    const api_t *A = *state;
    const size_t n1 = SIZE_LO, n2 = SIZE_HI;
    void *a = alloc_checked(A, n1, TIER);
    void *b = alloc_checked(A, n2, TIER);
    uintptr_t aa = (uintptr_t)a, ba = (uintptr_t)b;
    A->free_(a);
    A->free_(b);
    void *x = A->malloc_(n1);
    void *y = A->malloc_(n2);
    if ((uintptr_t)x != aa || (uintptr_t)y != ba)
        fail_msg("free(%p /* %zu B */), free(%p /* %zu B */), then malloc(%zu) = %p, "
                 "malloc(%zu) = %p; expected the same blocks back",
                 (void *)aa, n1, (void *)ba, n2, n1, x, n2, y);
    A->free_(x);
    A->free_(y);
}

static void test_many_blocks_mixed(void **state)
{
    check_many(*state, 400, SIZE_LO, SIZE_HI, TIER, 21);
}

/* More blocks of one class than a per-thread ring holds, then all freed
 * (overflowing the ring), then allocated again. */
static void test_ring_overflow(void **state)
{
    const api_t *A = *state;
    check_many(A, 150, 1025, 1025, TIER, 22);
    check_many(A, 150, 4096, 4096, TIER, 23);
    check_many(A, 150, 53248, 53248, TIER, 24);
}

static void test_cross_thread(void **state)
{
    check_cross_thread(*state, 300, SIZE_LO, SIZE_HI, TIER, 25);
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
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
