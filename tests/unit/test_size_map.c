/* Unit tests: the size-class map (hak_size_class / hak_class_size /
 * hak_class_tier / hak_class_count) and its agreement with the tier that
 * really serves malloc(n).
 *
 * Spec: Tiny <= 1024 B; L2 1025 .. 53248 B; L2.5 53249 .. 1048576 B; larger
 * requests go to the large tier (hak_size_class == -1).  Classes are numbered
 * in strictly increasing block size, every block size is a multiple of 16,
 * hak_class_size(hak_size_class(n)) >= n with bounded waste, and the map is
 * monotonic. */
#include "tier_common.h"
#include "box/size_class_box.h"

#define KiB ((size_t)1024)
#define MiB ((size_t)1024 * 1024)
#define TINY_MAX ((size_t)1024)
#define L2_MAX ((size_t)53248)
#define L25_MAX ((size_t)1048576)

/* ------------------------------------------------------------------------ */

/* Where a slab of class c starts, at the least: Tiny slabs at HAK_SS_DATA0
 * on page 0 (else a page), the others at their span's alignment. */
static size_t slab_start_align(unsigned c)
{
    return c < HAK_L2_FIRST ? (HAK_SS_DATA0 & -HAK_SS_DATA0)
                            : (size_t)hak_class_span_align(c) << HAK_PAGE_SHIFT;
}

/* hak_class_aligned_mask against its rule: class c is aligned to 2^k when
 * its block size and its slabs' first block are; and hak_aligned_class
 * picks the first such class that holds the size, or above a page the
 * twin of the power of two that holds it. */
static void test_aligned_masks(void **state)
{
    (void)state;
    for (unsigned k = 0; k < HAK_ALIGNED_MASKS; k++) {
        size_t a = (size_t)1 << k;
        for (unsigned c = 0; c < HAK_NUM_CLASSES; c++) {
            size_t bs = hak_class_block_size[c];
            bool aligned = bs % a == 0 && slab_start_align(c) % a == 0;
            if (aligned != ((hak_class_aligned_mask[k] >> c) & 1))
                fail_msg("class %u (%zu B): aligned to %zu is %d in the mask, %d by the rule", c, bs,
                         a, (int)((hak_class_aligned_mask[k] >> c) & 1), aligned);
        }
    }
    for (unsigned k = 0; (size_t)1 << k <= L25_MAX; k++) {
        size_t a = (size_t)1 << k;
        for (size_t n = 1; n <= L25_MAX; n += n < 4096 ? 1 : 251) {
            size_t need = n > a ? n : a;
            if (need > L25_MAX) break;
            unsigned c = hak_aligned_class(need, a);
            size_t bs = hak_class_block_size[c];
            if (c >= HAK_NUM_CLASSES || bs < need || bs % a != 0 || slab_start_align(c) % a != 0)
                fail_msg("hak_aligned_class(%zu, %zu) = class %u (%zu B)", need, a, c, bs);
            if (k < HAK_ALIGNED_MASKS) {
                if (c >= HAK_TWIN_FIRST)
                    fail_msg("hak_aligned_class(%zu, %zu) = twin %u: a plain class serves it", need,
                             a, c);
                for (unsigned d = (unsigned)hak_size_class(need); d < c; d++)
                    if ((hak_class_aligned_mask[k] >> d) & 1)
                        fail_msg("hak_aligned_class(%zu, %zu) = class %u, but class %u comes first",
                                 need, a, c, d);
            } else if (c < HAK_TWIN_FIRST || bs >= 2 * need) {
                fail_msg("hak_aligned_class(%zu, %zu) = class %u (%zu B): not the least twin", need,
                         a, c, bs);
            }
        }
    }
}

/* The twins are the power-of-two L2.5 classes from 128 KiB on, in that
 * order, and no request size maps to them; only they start aligned above a
 * page (a plain class's span takes any page: aligned, it waits for a run
 * that starts on a multiple of its size). */
static void test_twin_classes(void **state)
{
    (void)state;
    for (unsigned t = 0; t < HAK_TWIN_CLASSES; t++) {
        unsigned c = HAK_TWIN_FIRST + t;
        size_t bs = (size_t)128 * KiB << t;
        assert_int_equal(hak_class_block_size[c], bs);
        assert_int_equal(hak_class_span_align(c) << HAK_PAGE_SHIFT, bs);
        unsigned plain = (unsigned)hak_size_class(bs);
        assert_int_equal(hak_class_block_size[plain], bs);
        assert_int_equal(hak_class_span_pages(c), hak_class_span_pages(plain));
        assert_int_equal(hak_class_size((int)c), 0);
        assert_int_equal(hak_class_tier((int)c), HAK_TIER_NONE);
    }
    for (unsigned c = 0; c < HAK_TWIN_FIRST; c++) assert_int_equal(hak_class_span_align(c), 1);
    assert_int_equal(hak_class_count(), HAK_TWIN_FIRST);
}

static void test_class_table(void **state)
{
    (void)state;
    int count = hak_class_count();
    assert_true(count > 0);
    assert_true(count < 100000);

    size_t prev = 0;
    int prev_tier = HAK_TIER_TINY;
    for (int c = 0; c < count; c++) {
        size_t sz = hak_class_size(c);
        int t = hak_class_tier(c);
        if (sz == 0)
            fail_msg("class %d has block size 0", c);
        if (sz % 16 != 0)
            fail_msg("class %d block size %zu is not a multiple of 16", c, sz);
        if (sz <= prev)
            fail_msg("class %d block size %zu not > class %d size %zu", c, sz, c - 1, prev);
        if (t != HAK_TIER_TINY && t != HAK_TIER_L2 && t != HAK_TIER_L25)
            fail_msg("class %d (size %zu) has tier %d (%s); expected TINY, L2 or L2.5",
                     c, sz, t, tier_name(t));
        if (t < prev_tier)
            fail_msg("class %d (size %zu) tier %s comes after tier %s",
                     c, sz, tier_name(t), tier_name(prev_tier));
        prev = sz;
        prev_tier = t;
    }
    /* The largest class must be able to serve the largest pooled request. */
    size_t last = hak_class_size(count - 1);
    if (last < L25_MAX)
        fail_msg("largest class size %zu < %zu", last, L25_MAX);
}

static void test_tier_boundaries(void **state)
{
    (void)state;
    static const struct { size_t n; int tier; } cases[] = {
        { 1, HAK_TIER_TINY },
        { 16, HAK_TIER_TINY },
        { 1023, HAK_TIER_TINY },
        { 1024, HAK_TIER_TINY },
        { 1025, HAK_TIER_L2 },
        { 4096, HAK_TIER_L2 },
        { 53247, HAK_TIER_L2 },
        { 53248, HAK_TIER_L2 },
        { 53249, HAK_TIER_L25 },
        { 65536, HAK_TIER_L25 },
        { 1048575, HAK_TIER_L25 },
        { 1048576, HAK_TIER_L25 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int c = hak_size_class(cases[i].n);
        if (c < 0 || c >= hak_class_count())
            fail_msg("hak_size_class(%zu) = %d, out of range [0,%d)",
                     cases[i].n, c, hak_class_count());
        int t = hak_class_tier(c);
        if (t != cases[i].tier)
            fail_msg("hak_class_tier(hak_size_class(%zu) = %d) = %s, expected %s",
                     cases[i].n, c, tier_name(t), tier_name(cases[i].tier));
    }
    volatile size_t big[] = { L25_MAX + 1, L25_MAX + 16, 2 * MiB, 64 * MiB,
                              (size_t)1 << 40, SIZE_MAX / 2, SIZE_MAX };
    for (size_t i = 0; i < sizeof big / sizeof big[0]; i++) {
        int c = hak_size_class(big[i]);
        if (c != -1)
            fail_msg("hak_size_class(%zu) = %d, expected -1 (large tier)", big[i], c);
    }
}

/* Every n in 1..1 MiB: class in range, fits, bounded waste, right tier and
 * monotonic.  (Cheap enough to do exhaustively.) */
static void test_every_size_fits(void **state)
{
    (void)state;
    int count = hak_class_count();
    int prev_c = -1;
    for (size_t n = 1; n <= L25_MAX; n++) {
        int c = hak_size_class(n);
        if (c < 0 || c >= count)
            fail_msg("hak_size_class(%zu) = %d, out of range [0,%d)", n, c, count);
        size_t cs = hak_class_size(c);
        if (cs < n)
            fail_msg("hak_class_size(hak_size_class(%zu) = %d) = %zu < request", n, c, cs);
        if (cs > n + n / 4 + 16)
            fail_msg("waste too high: n=%zu class %d size %zu > n + n/4 + 16 = %zu",
                     n, c, cs, n + n / 4 + 16);
        if (c < prev_c)
            fail_msg("not monotonic: hak_size_class(%zu) = %d < hak_size_class(%zu) = %d",
                     n, c, n - 1, prev_c);
        int t = hak_class_tier(c);
        if (t != (int)expected_tier(n))
            fail_msg("request %zu -> class %d (size %zu) tier %s, expected %s",
                     n, c, cs, tier_name(t), tier_name(expected_tier(n)));
        prev_c = c;
    }
}

/* A class's own block size is served by that class (no class is unreachable
 * and the map is best-fit). */
static void test_class_size_maps_to_itself(void **state)
{
    (void)state;
    int count = hak_class_count();
    for (int c = 0; c < count; c++) {
        size_t cs = hak_class_size(c);
        int back = hak_size_class(cs);
        if (back != c)
            fail_msg("hak_size_class(hak_class_size(%d) = %zu) = %d, expected %d",
                     c, cs, back, c);
        if (c > 0) {
            size_t below = hak_class_size(c - 1) + 1;
            back = hak_size_class(below);
            if (back != c)
                fail_msg("hak_size_class(%zu) (one above class %d) = %d, expected %d",
                         below, c - 1, back, c);
        }
    }
}

static void check_malloc_tier(const api_t *A, size_t n)
{
    void *p = A->malloc_(n);
    if (p == NULL)
        fail_msg("malloc(%zu) returned NULL", n);
    int t = hak_tier_of(p);
    int want = expected_tier(n);
    if (t != want) {
        A->free_(p);
        fail_msg("hak_tier_of(malloc(%zu)) = %s, expected %s", n, tier_name(t), tier_name(want));
    }
    int c = hak_size_class(n);
    if (c >= 0 && (int)hak_class_tier(c) != t) {
        A->free_(p);
        fail_msg("malloc(%zu): block tier %s but hak_class_tier(%d) = %s",
                 n, tier_name(t), c, tier_name(hak_class_tier(c)));
    }
    size_t u = A->usable(p);
    if (u < n) {
        A->free_(p);
        fail_msg("usable size of malloc(%zu) = %zu < request", n, u);
    }
    memset(p, 0x5a, n);
    A->free_(p);
}

static void test_malloc_tier_matches(void **state)
{
    const api_t *A = *state;
    int count = hak_class_count();
    for (int c = 0; c < count; c++) {
        size_t cs = hak_class_size(c);
        size_t lo = c > 0 ? hak_class_size(c - 1) + 1 : 1;
        check_malloc_tier(A, lo);
        check_malloc_tier(A, lo + (cs - lo) / 2);
        check_malloc_tier(A, cs);
    }
    static const size_t extra[] = { 1, 7, 1024, 1025, 53248, 53249, 1048576, 1048577,
                                    1048576 + 4096, 3 * 1048576 + 5, 32 * 1048576 };
    for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++)
        check_malloc_tier(A, extra[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_class_table),
        cmocka_unit_test(test_aligned_masks),
        cmocka_unit_test(test_twin_classes),
        cmocka_unit_test(test_tier_boundaries),
        cmocka_unit_test(test_every_size_fits),
        cmocka_unit_test(test_class_size_maps_to_itself),
        TEST_API(test_malloc_tier_matches, API_STD),
        TEST_API(test_malloc_tier_matches, API_HAK),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
