/* Unit tests: aligned allocation — posix_memalign, aligned_alloc, memalign,
 * valloc, pvalloc and their hak_* twins.
 *
 * posix_memalign: EINVAL when the alignment is not a power of two multiple of
 * sizeof(void *); ENOMEM when the request cannot be met; otherwise every
 * power-of-two alignment from 8 B to 4 MiB works for sizes in every tier, and
 * the block is aligned, owned by hakmem, writable up to its usable size and
 * freeable.  aligned_alloc rejects non-power-of-two alignments (NULL);
 * valloc and pvalloc return page-aligned blocks, pvalloc rounding the size up
 * to a whole page. */
#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

#define TIER_COMMON_OWN_API /* api_t below */
#include "tier_common.h"

#define KiB ((size_t)1024)
#define MiB ((size_t)1024 * 1024)

typedef struct {
    int (*posix_memalign_)(void **, size_t, size_t);
    void *(*aligned_alloc_)(size_t, size_t);
    void *(*memalign_)(size_t, size_t);
    void *(*valloc_)(size_t);
    void *(*pvalloc_)(size_t);
    void *(*realloc_)(void *, size_t);
    void (*free_)(void *);
    size_t (*usable)(const void *);
} api_t;

static api_t API_STD = { posix_memalign, aligned_alloc, memalign, valloc, pvalloc,
                         realloc, free, std_usable };
static api_t API_HAK = { hak_posix_memalign, hak_aligned_alloc, hak_memalign, hak_valloc,
                         hak_pvalloc, hak_realloc, hak_free, hak_usable_size };

static size_t page_size(void) { return (size_t)sysconf(_SC_PAGESIZE); }

typedef struct {
    void *p;
    size_t n, u;
} blk_t;

static int blk_cmp(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t)((const blk_t *)a)->p, y = (uintptr_t)((const blk_t *)b)->p;
    return x < y ? -1 : x > y;
}

/* Common checks for a block returned by an aligned allocator. */
static void check_block(const api_t *A, void *p, size_t align, size_t n, const char *how)
{
    if (p == NULL)
        fail_msg("%s(align %zu, size %zu) returned NULL", how, align, n);
    if ((uintptr_t)p % align != 0)
        fail_msg("%s(align %zu, size %zu) = %p is not aligned", how, align, n, p);
    if ((uintptr_t)p % 16 != 0)
        fail_msg("%s(align %zu, size %zu) = %p is not 16-byte aligned", how, align, n, p);
    int t = hak_tier_of(p);
    if (t == HAK_TIER_NONE)
        fail_msg("%s(align %zu, size %zu) = %p: hak_tier_of = NONE", how, align, n, p);
    size_t u = A->usable(p);
    if (u < n)
        fail_msg("%s(align %zu, size %zu) = %p: usable size %zu < request", how, align, n, p, u);
}

/* ------------------------------------------------------------------------ */

static void test_posix_memalign_einval(void **state)
{
    const api_t *A = *state;
    volatile size_t bad[] = { 0, 1, 2, 3, 4, 6, 12, 20, 24, 40, 48, 100, 4095, 4097,
                              3 * 4096, (size_t)1 << 20 | 8, SIZE_MAX, SIZE_MAX / 2 };
    static const size_t sizes[] = { 1, 16, 100, 5000 };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        for (size_t j = 0; j < sizeof sizes / sizeof sizes[0]; j++) {
            void *sentinel = (void *)&bad; /* any recognisable value */
            void *out = sentinel;
            int rc = A->posix_memalign_(&out, bad[i], sizes[j]);
            if (rc != EINVAL)
                fail_msg("posix_memalign(align %zu, size %zu) returned %d, expected EINVAL (%d)",
                         bad[i], sizes[j], rc, EINVAL);
            if (out != sentinel && out != NULL)
                fail_msg("posix_memalign(align %zu) failed but set *memptr to %p",
                         bad[i], out);
        }
    }
}

static void test_posix_memalign_enomem(void **state)
{
    const api_t *A = *state;
    static const struct { size_t align, size; } cases[] = {
        { 8, SIZE_MAX },
        { 16, SIZE_MAX - 7 },
        { 64, SIZE_MAX },
        { 64, SIZE_MAX / 2 },
        { 64, (size_t)PTRDIFF_MAX + 1 },
        { 4096, SIZE_MAX - 4095 },
        { 4096, (size_t)PTRDIFF_MAX },
        { (size_t)1 << 20, SIZE_MAX - ((size_t)1 << 19) },
        { (size_t)4 << 20, (size_t)1 << 62 },
        { (size_t)1 << 62, 16 },
        { (size_t)1 << 63, 16 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        volatile size_t al = cases[i].align, sz = cases[i].size;
        void *sentinel = (void *)&cases, *out = sentinel;
        errno = EDOM;
        int rc = A->posix_memalign_(&out, al, sz);
        if (errno != EDOM)
            fail_msg("posix_memalign(align %zu, size %zu) changed errno to %d", (size_t)al,
                     (size_t)sz, errno);
        if (rc != ENOMEM) {
            if (rc == 0)
                A->free_(out);
            fail_msg("posix_memalign(align %zu, size %zu) returned %d, expected ENOMEM (%d)",
                     (size_t)al, (size_t)sz, rc, ENOMEM);
        }
        if (out != sentinel && out != NULL)
            fail_msg("posix_memalign(align %zu, size %zu) failed but set *memptr to %p",
                     (size_t)al, (size_t)sz, out);
    }
}

static const size_t sweep_sizes[] = { 1, 8, 16, 100, 1000, 1024, 1025, 4096, 30000,
                                      53248, 53249, 200000, 1048576, 1048577, 3 * MiB + 5 };
#define N_SWEEP (sizeof sweep_sizes / sizeof sweep_sizes[0])

/* Every power-of-two alignment 8 B .. 4 MiB x sizes in every tier; the blocks
 * of one alignment are live together and must not overlap. */
static void test_posix_memalign_sweep(void **state)
{
    const api_t *A = *state;
    blk_t b[N_SWEEP];
    for (size_t align = 8; align <= 4 * MiB; align *= 2) {
        for (size_t i = 0; i < N_SWEEP; i++) {
            void *p = NULL;
            int rc = A->posix_memalign_(&p, align, sweep_sizes[i]);
            if (rc != 0)
                fail_msg("posix_memalign(align %zu, size %zu) returned %d", align,
                         sweep_sizes[i], rc);
            check_block(A, p, align, sweep_sizes[i], "posix_memalign");
            b[i].p = p;
            b[i].n = sweep_sizes[i];
            b[i].u = A->usable(p);
            pat_fill(p, b[i].u, align * 31 + i);
        }
        for (size_t i = 0; i < N_SWEEP; i++) {
            size_t bad = pat_check(b[i].p, b[i].u, align * 31 + i);
            if (bad != b[i].u)
                fail_msg("posix_memalign(align %zu, size %zu) = %p (usable %zu): "
                         "contents damaged near byte %zu", align, b[i].n, b[i].p, b[i].u, bad);
        }
        qsort(b, N_SWEEP, sizeof b[0], blk_cmp);
        for (size_t i = 0; i + 1 < N_SWEEP; i++)
            if ((uintptr_t)b[i].p + b[i].u > (uintptr_t)b[i + 1].p)
                fail_msg("align %zu: block %p (size %zu, usable %zu) overlaps %p (size %zu)",
                         align, b[i].p, b[i].n, b[i].u, b[i + 1].p, b[i + 1].n);
        for (size_t i = 0; i < N_SWEEP; i++)
            A->free_(b[i].p);
    }
}

/* A success leaves errno alone too, whether the class's cache served it or
 * a refill did (the first blocks of a fresh class, then the cache's). */
static void test_posix_memalign_keeps_errno(void **state)
{
    const api_t *A = *state;
    enum { N = 64 };
    static const size_t aligns[] = { 8, 16, 64, 4096, 65536 };
    for (size_t a = 0; a < sizeof aligns / sizeof aligns[0]; a++) {
        void *p[N];
        for (int round = 0; round < 2; round++) {
            for (int i = 0; i < N; i++) {
                errno = EDOM;
                int rc = A->posix_memalign_(&p[i], aligns[a], 100 + 37 * (size_t)i);
                if (rc != 0 || errno != EDOM)
                    fail_msg("posix_memalign(align %zu, size %zu) = %d, errno %d (was EDOM)",
                             aligns[a], 100 + 37 * (size_t)i, rc, errno);
            }
            for (int i = 0; i < N; i++) A->free_(p[i]);
        }
    }
}

static void test_posix_memalign_size_zero(void **state)
{
    const api_t *A = *state;
    for (size_t align = 8; align <= 64 * KiB; align *= 4) {
        void *p = (void *)&align;
        int rc = A->posix_memalign_(&p, align, 0);
        if (rc != 0)
            fail_msg("posix_memalign(align %zu, size 0) returned %d", align, rc);
        if (p != NULL && (uintptr_t)p % align != 0)
            fail_msg("posix_memalign(align %zu, size 0) = %p is not aligned", align, p);
        A->free_(p);
    }
}

static void test_aligned_alloc(void **state)
{
    const api_t *A = *state;
    for (size_t align = 1; align <= 4 * MiB; align *= 2) {
        static const size_t mult[] = { 1, 2, 3, 17 };
        for (size_t k = 0; k < sizeof mult / sizeof mult[0]; k++) {
            size_t n = align * mult[k];
            if (n < 16)
                n = 16 * mult[k];
            void *p = A->aligned_alloc_(align, n);
            check_block(A, p, align, n, "aligned_alloc");
            pat_fill(p, n, n);
            assert_int_equal(pat_check(p, n, n), n);
            A->free_(p);
        }
        /* glibc also accepts sizes that are not a multiple of the alignment */
        void *p = A->aligned_alloc_(align, 100);
        check_block(A, p, align, 100, "aligned_alloc");
        memset(p, 0xA5, 100);
        A->free_(p);
    }
}

/* An aligned block takes the first class that holds it whose blocks are
 * all aligned, not the next power of two (a 64-aligned 1088 B took
 * 2048 B): usable sizes from the class table. */
static void test_aligned_takes_fitting_class(void **state)
{
    const api_t *A = *state;
    static const struct { size_t align, n, usable; } want[] = {
        { 32, 800, 896 },       { 64, 1088, 1280 },   { 64, 200, 256 },
        { 64, 100, 128 },       { 256, 1300, 1536 },  { 1024, 5000, 5120 },
        { 4096, 9000, 12288 },  { 4096, 4097, 8192 }, { 16384, 70000, 81920 },
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        void *p = A->aligned_alloc_(want[i].align, want[i].n);
        check_block(A, p, want[i].align, want[i].n, "aligned_alloc");
        memset(p, 0x3c, want[i].n);
        if (!hak_profile_sampled(p) && A->usable(p) != want[i].usable)
            fail_msg("aligned_alloc(%zu, %zu): usable size %zu, not %zu", want[i].align, want[i].n,
                     A->usable(p), want[i].usable);
        A->free_(p);
    }
}

static void test_aligned_alloc_bad_alignment(void **state)
{
    const api_t *A = *state;
    volatile size_t bad[] = { 3, 5, 6, 12, 24, 48, 100, 1000, 4097, 3 * 4096, SIZE_MAX };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        void *p = A->aligned_alloc_(bad[i], 64 * 3 * 4096);
        if (p != NULL) {
            A->free_(p);
            fail_msg("aligned_alloc(%zu, %zu) = %p, expected NULL (not a power of two)",
                     (size_t)bad[i], (size_t)64 * 3 * 4096, p);
        }
    }
}

static void test_memalign(void **state)
{
    const api_t *A = *state;
    for (size_t align = 1; align <= 4 * MiB; align *= 2) {
        for (size_t i = 0; i < N_SWEEP; i += 2) {
            size_t n = sweep_sizes[i];
            void *p = A->memalign_(align, n);
            check_block(A, p, align, n, "memalign");
            pat_fill(p, n, align + n);
            assert_int_equal(pat_check(p, n, align + n), n);
            A->free_(p);
        }
    }
}

/* memalign(0, n) is malloc(n), as glibc's: a block of n's own class, not
 * one picked by an alignment of 2^64 (the table of aligned classes has no
 * such entry). */
static void test_memalign_zero_alignment(void **state)
{
    const api_t *A = *state;
    for (size_t i = 0; i < N_SWEEP; i++) {
        size_t n = sweep_sizes[i];
        void *p = A->memalign_(0, n);
        check_block(A, p, 1, n, "memalign");
        size_t u = A->usable(p);
        if (n <= MiB && u > 2 * n + 64)
            fail_msg("memalign(0, %zu) = %p: usable size %zu, not malloc's class", n, p, u);
        pat_fill(p, n, n);
        assert_int_equal(pat_check(p, n, n), n);
        A->free_(p);
    }
}

static void test_valloc(void **state)
{
    const api_t *A = *state;
    size_t pg = page_size();
    for (size_t i = 0; i < N_SWEEP; i++) {
        size_t n = sweep_sizes[i];
        void *p = A->valloc_(n);
        check_block(A, p, pg, n, "valloc");
        size_t u = A->usable(p);
        pat_fill(p, u, n);
        assert_int_equal(pat_check(p, u, n), u);
        A->free_(p);
    }
}

static void test_pvalloc(void **state)
{
    const api_t *A = *state;
    size_t pg = page_size();
    const size_t sizes[] = { 1, 100, pg - 1, pg, pg + 1, 3 * pg + 5, 53248, 60000,
                             MiB - 1, MiB, MiB + 1, 3 * MiB + 5 };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t n = sizes[i], rounded = (n + pg - 1) / pg * pg;
        void *p = A->pvalloc_(n);
        check_block(A, p, pg, rounded, "pvalloc");
        pat_fill(p, rounded, n);
        assert_int_equal(pat_check(p, rounded, n), rounded);
        A->free_(p);
    }
    void *p = A->pvalloc_(0); /* glibc: a page-aligned minimum block */
    if (p != NULL) {
        if ((uintptr_t)p % pg != 0)
            fail_msg("pvalloc(0) = %p is not page aligned", p);
        A->free_(p);
    }
}

static void test_huge_requests_fail(void **state)
{
    const api_t *A = *state;
    volatile size_t huge[] = { SIZE_MAX, SIZE_MAX - 4096, SIZE_MAX / 2, (size_t)PTRDIFF_MAX + 1 };
    for (size_t i = 0; i < sizeof huge / sizeof huge[0]; i++) {
        size_t n = huge[i];
        void *p;
        errno = 0;
        p = A->memalign_(64, n);
        if (p != NULL || errno != ENOMEM)
            fail_msg("memalign(64, %zu) = %p, errno %d; expected NULL, ENOMEM", n, p, errno);
        errno = 0;
        p = A->aligned_alloc_(4096, n);
        if (p != NULL || errno != ENOMEM)
            fail_msg("aligned_alloc(4096, %zu) = %p, errno %d; expected NULL, ENOMEM", n, p, errno);
        errno = 0;
        p = A->valloc_(n);
        if (p != NULL || errno != ENOMEM)
            fail_msg("valloc(%zu) = %p, errno %d; expected NULL, ENOMEM", n, p, errno);
        errno = 0;
        p = A->pvalloc_(n);
        if (p != NULL || errno != ENOMEM)
            fail_msg("pvalloc(%zu) = %p, errno %d; expected NULL, ENOMEM", n, p, errno);
    }
}

/* realloc of an aligned block keeps its contents, growing and shrinking. */
static void test_realloc_aligned_block(void **state)
{
    const api_t *A = *state;
    static const size_t aligns[] = { 64, 4096, 64 * KiB, 2 * MiB };
    static const size_t sizes[] = { 100, 5000, 100000, 2 * MiB };
    for (size_t a = 0; a < sizeof aligns / sizeof aligns[0]; a++) {
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            size_t n = sizes[s];
            void *p = A->memalign_(aligns[a], n);
            check_block(A, p, aligns[a], n, "memalign");
            pat_fill(p, n, a * 10 + s);
            void *q = A->realloc_(p, n * 3);
            if (q == NULL)
                fail_msg("realloc(memalign(%zu, %zu), %zu) returned NULL", aligns[a], n, n * 3);
            if (pat_check(q, n, a * 10 + s) != n)
                fail_msg("realloc(memalign(%zu, %zu), %zu): contents lost", aligns[a], n, n * 3);
            void *r = A->realloc_(q, n / 3);
            if (r == NULL)
                fail_msg("realloc(..., %zu) returned NULL", n / 3);
            if (pat_check(r, n / 3, a * 10 + s) != n / 3)
                fail_msg("shrinking realloc of memalign(%zu, %zu) block to %zu lost contents",
                         aligns[a], n, n / 3);
            A->free_(r);
        }
    }
}

/* A thread's very first allocations are aligned requests: every slab it
 * gets is new, including the one on page 0 beside the SuperSlab header.
 * (HAK_STD: the hak_* names in sanitizer builds, tier_common.h.) */
static void *first_allocs_aligned(void *arg)
{
    (void)arg;
    size_t bad = 0;
    void *keep[400];
    size_t n = 0;
    for (size_t a = 32; a <= 65536; a <<= 1) {
        for (int i = 0; i < 100 && n < 400; i++) {
            void *p = NULL;
            if (HAK_STD(posix_memalign)(&p, a, a) != 0 || p == NULL || ((uintptr_t)p & (a - 1)) != 0) bad++;
            if (p != NULL) { memset(p, 0x5a, a); keep[n++] = p; }
        }
        while (n > 0) HAK_STD(free)(keep[--n]);
    }
    for (int i = 0; i < 100; i++) {
        void *p = HAK_STD(valloc)(100);
        if (p == NULL || ((uintptr_t)p & 4095) != 0) bad++;
        keep[n++] = p;
    }
    while (n > 0) HAK_STD(free)(keep[--n]);
    return (void *)bad;
}

/* Whether THP gives huge pages to memory nobody marked (`always`): then
 * the kernel, not hakmem, decides about a block's last, partial huge page. */
static bool thp_always(void)
{
    char buf[128] = "";
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (f != NULL) {
        if (fgets(buf, sizeof buf, f) == NULL) buf[0] = '\0';
        fclose(f);
    }
    return strstr(buf, "[always]") != NULL;
}

/* A block aligned to 2 MiB or more sits that far into its mapping, its
 * header just before it: 16 blocks of 1 MiB aligned to 2 MiB, 4 KiB of each
 * written, stay a few MiB resident (a huge page under each header, which
 * shares it with no byte of the block, made them 2 MiB each: 32 MiB).  Not
 * checked where THP is `always`: there the block's own partial huge page
 * is the kernel's choice. */
#define BIG_ALIGNED 16

/* How much the resident size grows while BIG_ALIGNED blocks of 1 MiB
 * aligned to 2 MiB are live, 4 KiB of each written. */
static size_t big_aligned_growth(const api_t *A)
{
    void *p[BIG_ALIGNED];
    size_t rss0 = statm_bytes(1);
    for (int i = 0; i < BIG_ALIGNED; i++) {
        assert_int_equal(A->posix_memalign_(&p[i], 2 * MiB, MiB), 0);
        check_block(A, p[i], 2 * MiB, MiB, "posix_memalign");
        memset(p[i], 0x5a, 4 * KiB);
    }
    size_t grew = statm_bytes(1) - rss0;
    for (int i = 0; i < BIG_ALIGNED; i++) A->free_(p[i]);
    return grew;
}

static void test_big_alignment_stays_small(void **state)
{
    const api_t *A = *state;
    if (thp_always()) {
        print_message("THP is 'always': resident size not checked\n");
        skip();
    }
    size_t grew = big_aligned_growth(A);
    if (grew > 8 * MiB)
        fail_msg("16 blocks of 1 MiB aligned to 2 MiB, 4 KiB written in each: resident size "
                 "grew by %zu KiB", grew >> 10);
}

/* The same in ranges bigger blocks used before: 16 blocks of 6 MiB, twice
 * (the second time in ranges reused, whose advice is then known), the
 * whole huge pages they cover marked for huge pages, written at their ends
 * only, then freed (the cache keeps their ranges).  A block taken from
 * such a range must not keep a huge page it touches without covering it:
 * kept, the aligned block's 4 KiB were written into a marked, never-touched
 * huge page, 2 MiB resident each (here 4 MiB in all, with the cache the
 * earlier tests left; alone, 32 MiB). */
static void test_big_alignment_reuse_stays_small(void **state)
{
    const api_t *A = *state;
    if (thp_always()) {
        print_message("THP is 'always': resident size not checked\n");
        skip();
    }
    void *p[BIG_ALIGNED];
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < BIG_ALIGNED; i++) {
            assert_int_equal(A->posix_memalign_(&p[i], 64, 6 * MiB), 0);
            ((char *)p[i])[0] = 1;
            ((char *)p[i])[6 * MiB - 1] = 1;
        }
        for (int i = 0; i < BIG_ALIGNED; i++) A->free_(p[i]);
    }
    size_t grew = big_aligned_growth(A);
    print_message("resident size grew by %zu KiB\n", grew >> 10);
    if (grew >= 2 * MiB)    /* one such huge page is too many */
        fail_msg("16 blocks of 1 MiB aligned to 2 MiB in ranges of freed 6 MiB blocks, 4 KiB "
                 "written in each: resident size grew by %zu KiB", grew >> 10);
}

static void test_aligned_first_in_new_thread(void **state)
{
    (void)state;
    pthread_t t;
    void *bad = NULL;
    assert_int_equal(pthread_create(&t, NULL, first_allocs_aligned, NULL), 0);
    assert_int_equal(pthread_join(t, &bad), 0);
    assert_int_equal((uintptr_t)bad, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        TEST_API(test_big_alignment_stays_small, API_STD),
        TEST_API(test_big_alignment_stays_small, API_HAK),
        TEST_API(test_big_alignment_reuse_stays_small, API_STD),
        TEST_API(test_big_alignment_reuse_stays_small, API_HAK),
        TEST_API(test_posix_memalign_einval, API_STD),
        TEST_API(test_posix_memalign_einval, API_HAK),
        TEST_API(test_posix_memalign_enomem, API_STD),
        TEST_API(test_posix_memalign_enomem, API_HAK),
        TEST_API(test_posix_memalign_sweep, API_STD),
        TEST_API(test_posix_memalign_sweep, API_HAK),
        TEST_API(test_posix_memalign_keeps_errno, API_STD),
        TEST_API(test_posix_memalign_keeps_errno, API_HAK),
        TEST_API(test_posix_memalign_size_zero, API_STD),
        TEST_API(test_posix_memalign_size_zero, API_HAK),
        TEST_API(test_aligned_alloc, API_STD),
        TEST_API(test_aligned_alloc, API_HAK),
        TEST_API(test_aligned_takes_fitting_class, API_STD),
        TEST_API(test_aligned_takes_fitting_class, API_HAK),
        TEST_API(test_aligned_alloc_bad_alignment, API_STD),
        TEST_API(test_aligned_alloc_bad_alignment, API_HAK),
        TEST_API(test_memalign, API_STD),
        TEST_API(test_memalign, API_HAK),
        TEST_API(test_memalign_zero_alignment, API_STD),
        TEST_API(test_memalign_zero_alignment, API_HAK),
        TEST_API(test_valloc, API_STD),
        TEST_API(test_valloc, API_HAK),
        TEST_API(test_pvalloc, API_STD),
        TEST_API(test_pvalloc, API_HAK),
        TEST_API(test_huge_requests_fail, API_STD),
        TEST_API(test_huge_requests_fail, API_HAK),
        TEST_API(test_realloc_aligned_block, API_STD),
        TEST_API(test_realloc_aligned_block, API_HAK),
        cmocka_unit_test(test_aligned_first_in_new_thread),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
