/* Unit tests: owner lookup (hak_tier_of) and foreign pointers.
 *
 * hak_tier_of(p) names the tier that allocated p and HAK_TIER_NONE for any
 * pointer hakmem did not allocate: NULL, stack, static data, string literals,
 * blocks from glibc's own allocator, memory the program mapped itself, and
 * addresses that are not mapped at all (it never reads outside hakmem's own
 * memory).  Blocks from glibc (__libc_malloc) handed to free()/realloc()/
 * malloc_usable_size() are passed on to glibc. */
#include <errno.h>
#include <sys/mman.h>
#include <unistd.h>

#define TIER_COMMON_OWN_API /* no api_t */
#include "tier_common.h"

extern void *__libc_malloc(size_t);
extern void __libc_free(void *);

#define MiB ((size_t)1024 * 1024)

#define EXPECT_NONE(ptr, what)                                                  \
    do {                                                                        \
        const void *p_ = (ptr);                                                 \
        int t_ = hak_tier_of(p_);                                               \
        if (t_ != HAK_TIER_NONE)                                                \
            fail_msg("hak_tier_of(%s = %p) = %s, expected NONE", what, p_,      \
                     tier_name(t_));                                            \
    } while (0)

static int global_int = 42;
static char global_buf[4096];
static const char global_const[] = "read-only data";

/* Sizes spanning every tier, including glibc's mmap threshold. */
static const size_t foreign_sizes[] = { 1, 16, 100, 1000, 1024, 1025, 5000, 53248,
                                        53249, 200000, 1048576, 1048577, 3 * MiB };
#define N_FOREIGN (sizeof foreign_sizes / sizeof foreign_sizes[0])

/* ------------------------------------------------------------------------ */

static void test_null_stack_static(void **state)
{
    (void)state;
    int local = 7;
    char local_buf[256];
    memset(local_buf, 0, sizeof local_buf);
    EXPECT_NONE(NULL, "NULL");
    EXPECT_NONE(&local, "stack int");
    EXPECT_NONE(local_buf + 16, "stack buffer");
    EXPECT_NONE(&global_int, "static int");
    EXPECT_NONE(global_buf, "static buffer");
    EXPECT_NONE(global_buf + 2048, "inside static buffer");
    EXPECT_NONE(global_const, "static const data");
    EXPECT_NONE("a string literal", "string literal");
    EXPECT_NONE(&errno, "errno (TLS)");
    EXPECT_NONE(stdout, "stdout FILE");
    (void)local;
}

static void test_libc_blocks_are_not_ours(void **state)
{
    (void)state;
    void *p[N_FOREIGN];
    for (size_t i = 0; i < N_FOREIGN; i++) {
        p[i] = __libc_malloc(foreign_sizes[i]);
        assert_non_null(p[i]);
        memset(p[i], 0xC3, foreign_sizes[i]);
    }
    for (size_t i = 0; i < N_FOREIGN; i++) {
        char what[64];
        snprintf(what, sizeof what, "__libc_malloc(%zu)", foreign_sizes[i]);
        EXPECT_NONE(p[i], what);
        snprintf(what, sizeof what, "last byte of __libc_malloc(%zu)", foreign_sizes[i]);
        EXPECT_NONE((char *)p[i] + foreign_sizes[i] - 1, what);
    }
    for (size_t i = 0; i < N_FOREIGN; i++)
        __libc_free(p[i]);
}

/* Memory the program maps itself, with contents that might look like an
 * allocator header, and addresses that are not mapped at all. */
static void test_foreign_and_unmapped_addresses(void **state)
{
    (void)state;
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    size_t len = 4 * MiB;
    unsigned char *m = mmap(NULL, len, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(m != MAP_FAILED);
    EXPECT_NONE(m, "own mmap (zero)");
    EXPECT_NONE(m + 16, "own mmap + 16 (zero)");
    memset(m, 0xFF, 2 * pg);
    EXPECT_NONE(m + 16, "own mmap + 16 (0xFF)");
    for (size_t i = 0; i < 2 * pg; i += sizeof(void *)) /* self pointers */
        memcpy(m + i, &m, sizeof m);
    EXPECT_NONE(m + 64, "own mmap + 64 (self pointers)");
    EXPECT_NONE(m + 2 * MiB, "own mmap + 2 MiB");

    /* unmapped: a region we mapped and gave back */
    assert_int_equal(munmap(m, len), 0);
    EXPECT_NONE(m, "unmapped region start");
    EXPECT_NONE(m + 16, "unmapped region + 16");
    EXPECT_NONE(m + 2 * MiB + 64, "unmapped region + 2 MiB + 64");
    EXPECT_NONE(m + len - 16, "unmapped region end - 16");
}

static void test_wild_addresses(void **state)
{
    (void)state;
    static const uintptr_t wild[] = {
        1, 8, 16, 0x1000, 0x10000, 0x123456, 0x7fff0000,
        (uintptr_t)1 << 40, ((uintptr_t)1 << 46) + 16, ((uintptr_t)1 << 47) - 16,
        (uintptr_t)1 << 47, (uintptr_t)1 << 52, (uintptr_t)1 << 63,
        UINTPTR_MAX - 4095, UINTPTR_MAX - 15, UINTPTR_MAX,
    };
    for (size_t i = 0; i < sizeof wild / sizeof wild[0]; i++) {
        char what[64];
        snprintf(what, sizeof what, "address 0x%jx", (uintmax_t)wild[i]);
        EXPECT_NONE((const void *)wild[i], what);
    }
}

static void test_free_libc_blocks(void **state)
{
    (void)state;
    for (int round = 0; round < 3; round++) {
        if (!HAK_STD_NAMES && round != 1)
            continue; /* sanitizer build: free() and realloc() are not hakmem's */
        for (size_t i = 0; i < N_FOREIGN; i++) {
            void *p = __libc_malloc(foreign_sizes[i]);
            assert_non_null(p);
            memset(p, 0x11, foreign_sizes[i]);
            if (round == 0)
                free(p);
            else if (round == 1)
                hak_free(p);
            else { /* glibc frees p and returns NULL; anything else must be freeable */
                void *r = realloc(p, 0);
                if (r != NULL)
                    free(r);
            }
        }
    }
    /* glibc's heap is still sound */
    void *q[N_FOREIGN];
    for (size_t i = 0; i < N_FOREIGN; i++) {
        q[i] = __libc_malloc(foreign_sizes[i]);
        assert_non_null(q[i]);
        memset(q[i], 0x22, foreign_sizes[i]);
    }
    for (size_t i = 0; i < N_FOREIGN; i++)
        __libc_free(q[i]);
}

static void fill_bytes(unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)(seed + i * 7 + (i >> 9));
}

static void check_bytes(const unsigned char *p, size_t n, unsigned seed, const char *ctx)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != (unsigned char)(seed + i * 7 + (i >> 9)))
            fail_msg("%s: byte %zu of %zu lost", ctx, i, n);
}

static void realloc_libc_block(void *(*re)(void *, size_t), void (*fr)(void *),
                               size_t from, const char *name)
{
    static const size_t to[] = { 8, 700, 1024, 1500, 53248, 60000, 1048576, 2 * MiB + 5 };
    for (size_t j = 0; j < sizeof to / sizeof to[0]; j++) {
        unsigned char *p = __libc_malloc(from);
        assert_non_null(p);
        fill_bytes(p, from, (unsigned)(from + j));
        unsigned char *q = re(p, to[j]);
        char ctx[96];
        snprintf(ctx, sizeof ctx, "%s(__libc_malloc(%zu), %zu)", name, from, to[j]);
        if (q == NULL)
            fail_msg("%s returned NULL", ctx);
        size_t keep = from < to[j] ? from : to[j];
        check_bytes(q, keep, (unsigned)(from + j), ctx);
        memset(q, 0x77, to[j]);
        /* grow once more through the same function, then free */
        unsigned char *r = re(q, to[j] * 2 + 100);
        if (r == NULL)
            fail_msg("%s: second realloc to %zu returned NULL", ctx, to[j] * 2 + 100);
        for (size_t i = 0; i < to[j]; i++)
            if (r[i] != 0x77)
                fail_msg("%s: second realloc lost byte %zu", ctx, i);
        fr(r);
    }
}

static void test_realloc_libc_blocks(void **state)
{
    (void)state;
    static const size_t from[] = { 1, 24, 1000, 5000, 100000, 3 * MiB };
    for (size_t i = 0; i < sizeof from / sizeof from[0]; i++) {
        if (HAK_STD_NAMES) /* sanitizer build: realloc() is not hakmem's */
            realloc_libc_block(realloc, free, from[i], "realloc");
        realloc_libc_block(hak_realloc, hak_free, from[i], "hak_realloc");
    }
}

static void test_usable_size_libc_blocks(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_FOREIGN; i++) {
        void *p = __libc_malloc(foreign_sizes[i]);
        assert_non_null(p);
        /* (sanitizer build: malloc_usable_size is not hakmem's) */
        size_t u2 = hak_usable_size(p), u1 = HAK_STD_NAMES ? malloc_usable_size(p) : u2;
        if (u1 < foreign_sizes[i] || u2 < foreign_sizes[i])
            fail_msg("__libc_malloc(%zu): malloc_usable_size = %zu, hak_usable_size = %zu",
                     foreign_sizes[i], u1, u2);
        memset(p, 0x33, u1 < u2 ? u1 : u2);
        __libc_free(p);
    }
    if (HAK_STD_NAMES)
        assert_int_equal(malloc_usable_size(NULL), 0);
    assert_int_equal(hak_usable_size(NULL), 0);
}

/* ---- every allocation entry point yields recognised pointers ------------ */

static const size_t tier_sizes[] = { 1, 64, 1024, 1025, 8000, 53248, 53249, 500000,
                                     1048576, 1048577, 5 * MiB };
#define N_TIER_SIZES (sizeof tier_sizes / sizeof tier_sizes[0])

static void expect_tier(void *p, size_t n, const char *how, int exact)
{
    if (p == NULL)
        fail_msg("%s(%zu) returned NULL", how, n);
    int t = hak_tier_of(p);
    if (exact && t != (int)expected_tier(n))
        fail_msg("hak_tier_of(%s(%zu)) = %s, expected %s", how, n, tier_name(t),
                 tier_name(expected_tier(n)));
    if (t == HAK_TIER_NONE)
        fail_msg("hak_tier_of(%s(%zu)) = NONE", how, n);
}

/* (HAK_STD: the hak_* names in sanitizer builds, tier_common.h) */
static void test_every_tier_recognised(void **state)
{
    (void)state;
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    for (size_t i = 0; i < N_TIER_SIZES; i++) {
        size_t n = tier_sizes[i];
        void *p;
        p = HAK_STD(malloc)(n); expect_tier(p, n, "malloc", 1);           HAK_STD(free)(p);
        p = hak_malloc(n);      expect_tier(p, n, "hak_malloc", 1);       hak_free(p);
        p = HAK_STD(calloc)(1, n); expect_tier(p, n, "calloc", 1);        HAK_STD(free)(p);
        p = hak_calloc(n, 1);   expect_tier(p, n, "hak_calloc", 1);       hak_free(p);
        p = HAK_STD(realloc)(NULL, n); expect_tier(p, n, "realloc(NULL)", 1); HAK_STD(free)(p);
        p = hak_realloc(NULL, n); expect_tier(p, n, "hak_realloc(NULL)", 1); hak_free(p);
        p = HAK_STD(memalign)(64, n); expect_tier(p, n, "memalign(64)", 0); HAK_STD(free)(p);
        p = hak_memalign(4096, n); expect_tier(p, n, "hak_memalign(4096)", 0); hak_free(p);
        p = HAK_STD(aligned_alloc)(32, (n + 31) & ~(size_t)31);
        expect_tier(p, n, "aligned_alloc(32)", 0);
        HAK_STD(free)(p);
        p = hak_aligned_alloc(256, (n + 255) & ~(size_t)255);
        expect_tier(p, n, "hak_aligned_alloc(256)", 0);
        hak_free(p);
        p = HAK_STD(valloc)(n); expect_tier(p, n, "valloc", 0);           HAK_STD(free)(p);
        p = hak_pvalloc(n);     expect_tier(p, n, "hak_pvalloc", 0);      hak_free(p);
        p = NULL;
        assert_int_equal(HAK_STD(posix_memalign)(&p, 128, n), 0);
        expect_tier(p, n, "posix_memalign(128)", 0);
        HAK_STD(free)(p);
        p = NULL;
        assert_int_equal(hak_posix_memalign(&p, pg * 2, n), 0);
        expect_tier(p, n, "hak_posix_memalign(2 pages)", 0);
        hak_free(p);
    }
}

/* Realloc moving a block between tiers: the new pointer has the right tier. */
static void test_realloc_across_tiers_recognised(void **state)
{
    (void)state;
    void *p = HAK_STD(malloc)(tier_sizes[0]);
    expect_tier(p, tier_sizes[0], "malloc", 1);
    for (size_t i = 1; i < N_TIER_SIZES; i++) {
        p = HAK_STD(realloc)(p, tier_sizes[i]);
        expect_tier(p, tier_sizes[i], "realloc (growing)", 0);
    }
    for (size_t i = N_TIER_SIZES; i-- > 0;) {
        p = hak_realloc(p, tier_sizes[i]);
        expect_tier(p, tier_sizes[i], "hak_realloc (shrinking)", 0);
    }
    HAK_STD(free)(p);
}

/* Blocks owned by a live thread are recognised from another thread. */
typedef struct {
    pthread_barrier_t ready, done;
    void *blocks[N_TIER_SIZES];
} owner_t;

static void *owner_thread(void *arg)
{
    owner_t *o = arg;
    for (size_t i = 0; i < N_TIER_SIZES; i++)
        o->blocks[i] = HAK_STD(malloc)(tier_sizes[i]);
    pthread_barrier_wait(&o->ready);
    pthread_barrier_wait(&o->done);
    for (size_t i = 0; i < N_TIER_SIZES; i++)
        HAK_STD(free)(o->blocks[i]);
    return NULL;
}

static void test_other_thread_blocks_recognised(void **state)
{
    (void)state;
    owner_t o;
    pthread_t th;
    assert_int_equal(pthread_barrier_init(&o.ready, NULL, 2), 0);
    assert_int_equal(pthread_barrier_init(&o.done, NULL, 2), 0);
    assert_int_equal(pthread_create(&th, NULL, owner_thread, &o), 0);
    pthread_barrier_wait(&o.ready);
    int bad = -1;
    for (size_t i = 0; i < N_TIER_SIZES && bad < 0; i++)
        if (o.blocks[i] == NULL || hak_tier_of(o.blocks[i]) != expected_tier(tier_sizes[i]))
            bad = (int)i;
    pthread_barrier_wait(&o.done);
    assert_int_equal(pthread_join(th, NULL), 0);
    pthread_barrier_destroy(&o.ready);
    pthread_barrier_destroy(&o.done);
    if (bad >= 0)
        fail_msg("block of %zu B from a live other thread: hak_tier_of = %s, expected %s",
                 tier_sizes[bad], tier_name(o.blocks[bad] ? hak_tier_of(o.blocks[bad]) : 0),
                 tier_name(expected_tier(tier_sizes[bad])));
}

/* hak_* and standard names are the same allocator: blocks cross freely. */
static void test_mixed_names(void **state)
{
    (void)state;
    SKIP_IF_HAK_ONLY(); /* about the libc names */
    for (size_t i = 0; i < N_TIER_SIZES; i++) {
        size_t n = tier_sizes[i];
        void *p = hak_malloc(n);
        expect_tier(p, n, "hak_malloc", 1);
        free(p);
        p = malloc(n);
        expect_tier(p, n, "malloc", 1);
        hak_free(p);
        p = hak_calloc(1, n);
        p = realloc(p, n + 100);
        expect_tier(p, n + 100, "realloc(hak_calloc)", 0);
        p = hak_realloc(p, n / 2 + 1);
        expect_tier(p, n / 2 + 1, "hak_realloc(realloc)", 0);
        assert_int_equal(malloc_usable_size(p), hak_usable_size(p));
        free(p);
    }
}

/* A pointer inside a live block that is not its start has no usable size
 * (0), in every tier; the block itself is untouched. */
static void test_usable_size_not_block_start(void **state)
{
    (void)state;
    static const size_t sizes[] = { 48, 3000, 40000, 300000, 5000000 };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        char *p = hak_malloc(sizes[i]);
        assert_non_null(p);
        size_t u = hak_usable_size(p);
        assert_true(u >= sizes[i]);
        if (hak_usable_size(p + 16) != 0)
            fail_msg("hak_usable_size(p + 16) of a %zu-byte block: %zu", sizes[i], hak_usable_size(p + 16));
        if (HAK_STD_NAMES && malloc_usable_size(p + 16) != 0)
            fail_msg("malloc_usable_size(p + 16) of a %zu-byte block: %zu", sizes[i],
                     malloc_usable_size(p + 16));
        assert_int_equal(hak_usable_size(p), u);
        hak_free(p);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_null_stack_static),
        cmocka_unit_test(test_libc_blocks_are_not_ours),
        cmocka_unit_test(test_foreign_and_unmapped_addresses),
        cmocka_unit_test(test_wild_addresses),
        cmocka_unit_test(test_free_libc_blocks),
        cmocka_unit_test(test_realloc_libc_blocks),
        cmocka_unit_test(test_usable_size_libc_blocks),
        cmocka_unit_test(test_usable_size_not_block_start),
        cmocka_unit_test(test_every_tier_recognised),
        cmocka_unit_test(test_realloc_across_tiers_recognised),
        cmocka_unit_test(test_other_thread_blocks_recognised),
        cmocka_unit_test(test_mixed_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
