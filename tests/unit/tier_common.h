/* Helpers shared by the unit tests (included by tests/unit/test_*.c and
 * tests/unit/pool_tests.h; not a program of its own).
 *
 * Always available:
 *   TEST_API(fn, api)      a cmocka test named "fn/api" run with state &api
 *   HAK_STD(), SKIP_IF_HAK_ONLY(), HAK_STD_NAMES  for sanitizer builds
 *                          (-DHAK_TEST_HAK_ONLY, below)
 *   std_usable()           malloc_usable_size with the hak_usable_size type
 *   statm_bytes()          a field of /proc/self/statm in bytes (0: virtual
 *                          size, 1: resident)
 *   tier_name(), expected_tier()
 *   pat_fill(), pat_check() a position-dependent fill pattern and its check
 *   rng_next(), rng_range() xorshift64 PRNG
 *
 * Unless the test defines TIER_COMMON_OWN_API before including this file
 * (it has an api_t of its own, or none):
 *   api_t, API_STD, API_HAK the two spellings of the allocator (malloc/free/
 *                           malloc_usable_size and hak_*); every test runs
 *                           with both
 *   alloc_checked(), check_sizes(), check_lifo(), check_many(),
 *   check_cross_thread()   checks built on api_t, blk_t and xt_t
 *
 * Every function is static inline, so a test using only some of them builds
 * without unused-function warnings. */
#ifndef HAKMEM_TESTS_TIER_COMMON_H
#define HAKMEM_TESTS_TIER_COMMON_H

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

/* ---- sanitizer builds (scripts/run_sanitizers.sh) -----------------------
 * Compiled with -DHAK_TEST_HAK_ONLY, the tests are linked with hakmem built
 * as a plain library (-DHAK_NO_INTERPOSE): malloc, free & co. are then the
 * sanitizer's (or glibc's), not hakmem's, and only the hak_* names can pass.
 *   TEST_API(fn, API_STD)   reported as skipped (API_HAK variants run);
 *   HAK_STD(name)           hak_name instead of name (malloc -> hak_malloc),
 *                           where a test only needs "the allocator";
 *   SKIP_IF_HAK_ONLY()      at the top of a test about the libc names: skip it;
 *   HAK_STD_NAMES           0 (1 in the normal build), for finer choices.
 * In the normal build these change nothing. */
#ifdef HAK_TEST_HAK_ONLY
#define HAK_STD_NAMES 0
#define HAK_STD(name) hak_##name
#define SKIP_IF_HAK_ONLY() do { skip(); return; } while (0)
static inline void skip_std_variant(void **state) { (void)state; skip(); }
#define TEST_API(fn, api) TEST_API_##api(fn)
#define TEST_API_API_HAK(fn) { #fn "/API_HAK", fn, NULL, NULL, &API_HAK }
#define TEST_API_API_STD(fn) { #fn "/API_STD", skip_std_variant, NULL, NULL, &API_STD }
#else
#define HAK_STD_NAMES 1
#define HAK_STD(name) name
#define SKIP_IF_HAK_ONLY() do { } while (0)
#define TEST_API(fn, api) { #fn "/" #api, fn, NULL, NULL, &api }
#endif

static inline size_t std_usable(const void *p) { return malloc_usable_size((void *)p); }

static inline size_t statm_bytes(unsigned field)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long v[2] = { 0, 0 };
    assert_non_null(f);
    assert_int_equal(fscanf(f, "%lu %lu", &v[0], &v[1]), 2);
    fclose(f);
    return (size_t)v[field] * (size_t)sysconf(_SC_PAGESIZE);
}

static inline const char *tier_name(int t)
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

/* The tier a request of n bytes belongs to. */
static inline hak_tier_t expected_tier(size_t n)
{
    if (n <= 1024) return HAK_TIER_TINY;
    if (n <= 53248) return HAK_TIER_L2;
    if (n <= 1048576) return HAK_TIER_L25;
    return HAK_TIER_LARGE;
}

/* ---- fill pattern ------------------------------------------------------- */

/* Position-dependent pattern: a block filled with seed s only checks clean
 * against seed s, so a block overwritten by a neighbour is detected. */
static inline uint64_t pat_word(uint64_t seed, size_t i)
{
    uint64_t x = (seed + 1) * 0x9E3779B97F4A7C15ull ^ (uint64_t)i * 0xD6E8FEB86659FD93ull;
    return x ^ (x >> 29);
}

/* Byte i of the pattern, the same whether written by words or bytes. */
static inline unsigned char pat_byte(uint64_t seed, size_t i)
{
    uint64_t w = pat_word(seed, i & ~(size_t)7);
    unsigned char b[8];
    memcpy(b, &w, 8);
    return b[i & 7];
}

static inline void pat_fill(void *p, size_t n, uint64_t seed)
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
static inline size_t pat_check(const void *p, size_t n, uint64_t seed)
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

/* ---- PRNG (xorshift64; the state must not be 0) ------------------------- */

static inline uint64_t rng_next(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

static inline size_t rng_range(uint64_t *s, size_t lo, size_t hi) /* inclusive */
{
    return lo + (size_t)(rng_next(s) % (hi - lo + 1));
}

#ifndef TIER_COMMON_OWN_API

/* The two spellings of the allocator; every test runs with both. */
typedef struct {
    void *(*malloc_)(size_t);
    void (*free_)(void *);
    size_t (*usable)(const void *);
} api_t;

/* (marked unused: a test need not run both spellings) */
__attribute__((unused)) static api_t API_STD = { malloc, free, std_usable };
__attribute__((unused)) static api_t API_HAK = { hak_malloc, hak_free, hak_usable_size };

/* malloc(n) and check: non-NULL, 16-byte aligned, owned by `tier`, usable
 * size >= n. */
static inline void *alloc_checked(const api_t *A, size_t n, hak_tier_t tier)
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
static inline void check_sizes(const api_t *A, const size_t *sizes, size_t count,
                               hak_tier_t tier)
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

/* Two blocks freed in a row both fit in the per-thread ring unless the
 * variable ring_env (e.g. "HAKMEM_L2_RING_CAP") makes it hold one (the test
 * suite also runs with it at 1).  ring_env NULL: no ring, always true. */
static inline int ring_holds_two(const char *ring_env)
{
    if (ring_env == NULL)
        return 1;
    const char *s = getenv(ring_env);
    return s == NULL || atoi(s) >= 2;
}

/* Freeing then allocating the same size on the same thread gives the same
 * block back, most recently freed first.  The two-block order is checked
 * only when ring_holds_two(ring_env).  A block the heap profiler sampled
 * (HAKMEM_PROFILE) comes from, and goes back to, one of the profiler's own
 * heaps, outside this order: a round that meets one is tried again. */
static inline int lifo_round(const api_t *A, size_t n, hak_tier_t tier, const char *ring_env)
{
    void *p = alloc_checked(A, n, tier);
    uintptr_t pa = (uintptr_t)p;
    int sampled = hak_profile_sampled(p);
    A->free_(p);
    void *q = A->malloc_(n);
    if (sampled || hak_profile_sampled(q)) {
        A->free_(q);
        return 0;
    }
    if ((uintptr_t)q != pa)
        fail_msg("LIFO reuse: free(%p) then malloc(%zu) returned %p", (void *)pa, n, q);

    if (!ring_holds_two(ring_env)) {
        A->free_(q);
        return 1;
    }
    void *a = alloc_checked(A, n, tier);
    void *b = alloc_checked(A, n, tier);
    uintptr_t aa = (uintptr_t)a, ba = (uintptr_t)b;
    sampled = hak_profile_sampled(a) || hak_profile_sampled(b);
    A->free_(a);
    A->free_(b);
    void *x = A->malloc_(n);
    void *y = A->malloc_(n);
    sampled |= hak_profile_sampled(x) || hak_profile_sampled(y);
    if (!sampled && ((uintptr_t)x != ba || (uintptr_t)y != aa))
        fail_msg("LIFO reuse (size %zu): free(a=%p), free(b=%p), then two mallocs returned "
                 "%p, %p; expected b then a", n, (void *)aa, (void *)ba, x, y);
    A->free_(x);
    A->free_(y);
    A->free_(q);
    return !sampled;
}

static inline void check_lifo(const api_t *A, size_t n, hak_tier_t tier, const char *ring_env)
{
    /* (at 1 MiB almost every block is sampled: then nothing is left to check) */
    for (int i = 0; i < 20; i++)
        if (lifo_round(A, n, tier, ring_env))
            return;
}

/* ---- many live blocks ---------------------------------------------------- */

typedef struct {
    unsigned char *p;
    size_t n, u;
    uint64_t seed;
} blk_t;

static inline int blk_cmp(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t)((const blk_t *)a)->p, y = (uintptr_t)((const blk_t *)b)->p;
    return x < y ? -1 : x > y;
}

static inline void blk_alloc(const api_t *A, blk_t *b, size_t n, hak_tier_t tier, uint64_t seed)
{
    b->p = alloc_checked(A, n, tier);
    b->n = n;
    b->u = A->usable(b->p);
    b->seed = seed;
    pat_fill(b->p, b->u, seed);
}

/* All blocks pairwise disjoint (over their usable sizes) and intact. */
static inline void blks_verify(const blk_t *b, size_t count)
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
static inline void check_many(const api_t *A, size_t count, size_t lo, size_t hi,
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

static inline void *xt_alloc(void *arg)
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

static inline void *xt_free(void *arg)
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

static inline void check_cross_thread(const api_t *A, size_t count, size_t lo, size_t hi,
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

#endif /* TIER_COMMON_OWN_API */

#endif /* HAKMEM_TESTS_TIER_COMMON_H */
